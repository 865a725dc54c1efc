"""Qwen3.5 and Qwen3-Next config.json import: Gated DeltaNet layers between every fourth (gated) attention layer.

Fixtures: tests/fixtures/hf/qwen3.5-{27b,35b-a3b,122b-a10b,397b-a17b}.json are Qwen/Qwen3.5-*'s config.json as copied
in ai-dynamo/aiconfigurator, aic-core/src/aiconfigurator_core/model_configs/Qwen--Qwen3.5-{27B,35B-A3B,122B-A10B,
397B-A17B}_config.json at commit 095f58a51c4ca8e61b66ec108d86f223f8d559ce (multimodal wrappers, model_type qwen3_5 /
qwen3_5_moe, around qwen3_5_text / qwen3_5_moe_text). The modules counted below are transformers' Qwen3_5
(modeling_qwen3_5.py, modeling_qwen3_5_moe.py): the GDN mixer in_proj_qkv (h -> 2 n_k d_k + n_v d_v), in_proj_z
(h -> n_v d_v), in_proj_b and in_proj_a (h -> n_v), conv1d (2 n_k d_k + n_v d_v channels x 4 taps, no bias),
dt_bias and A_log (n_v), the gated RMSNorm (d_v), out_proj (n_v d_v -> h); the gated attention's q_proj (h -> 2 a d),
k_proj and v_proj (h -> kv d), o_proj, q/k norms (d each); two RMSNorms per layer; the MoE's router (h x E), experts
(3 h f), shared expert (3 h f_s) and its gate (h). The language model only (the vision tower is not modelled).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.engines.hf_config import model_from_hf_config
from planner.errors import PlannerError
from planner.physics.params import count_params, kv_cache_bytes_per_token, linear_state_bytes_per_sequence

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


def config(name: str, **text_changes) -> dict:
    data = json.loads((HF / name).read_text())
    data["text_config"].update(text_changes)
    return data


def imported(name: str, **text_changes):
    return model_from_hf_config(config(name, **text_changes), source=name)


def refusal(data: dict) -> PlannerError:
    with pytest.raises(PlannerError) as info:
        model_from_hf_config(data, source="cfg.json")
    return info.value


def by_hand(t: dict) -> tuple[int, int]:
    """(total, active) parameters of a Qwen3.5 text config, added up from the modules in the module docstring."""
    h, layers, interval = t["hidden_size"], t["num_hidden_layers"], t["full_attention_interval"]
    a, kv, d = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    nk, nv, dk, dv = (t["linear_num_key_heads"], t["linear_num_value_heads"], t["linear_key_head_dim"],
                      t["linear_value_head_dim"])
    key, value = nk * dk, nv * dv
    gdn = h * (2 * key + value) + h * value + 2 * h * nv + (2 * key + value) * 4 + 2 * nv + dv + value * h
    attention = h * 2 * a * d + 2 * h * kv * d + a * d * h + 2 * d
    if "num_experts" in t:
        e, k, f, fs = t["num_experts"], t["num_experts_per_tok"], t["moe_intermediate_size"], t[
            "shared_expert_intermediate_size"]
        ffn, ffn_active = h * e + e * 3 * h * f + 3 * h * fs + h, h * e + k * 3 * h * f + 3 * h * fs + h
    else:
        ffn = ffn_active = 3 * h * t["intermediate_size"]
    full = layers // interval
    mixers = full * attention + (layers - full) * gdn
    ends = t["vocab_size"] * h * 2 + h  # untied embedding and output head, the final norm
    norms = layers * 2 * h
    return mixers + norms + layers * ffn + ends, mixers + norms + layers * ffn_active + ends


@pytest.mark.parametrize("name,billions,active_billions", [
    ("qwen3.5-27b.json", 27, 27), ("qwen3.5-35b-a3b.json", 35, 3), ("qwen3.5-122b-a10b.json", 122, 10),
    ("qwen3.5-397b-a17b.json", 397, 17),
])
def test_qwen3_5_counts_add_up_from_the_modules_and_match_the_names(name, billions, active_billions):
    text = json.loads((HF / name).read_text())["text_config"]
    counts = count_params(imported(name))
    assert (counts.total, counts.active) == by_hand(text)
    # the names round the language model's counts (the vision tower adds under 1 B)
    assert abs(counts.total / 1e9 - billions) < 1.0 and abs(counts.active / 1e9 - active_billions) < 0.6


def test_qwen3_5_layers_states_and_caches():
    spec = imported("qwen3.5-27b.json")
    la = spec.linear_attention
    assert la is not None and (la.num_key_heads, la.num_value_heads, la.key_head_dim, la.value_head_dim) == (16, 48, 128, 128)
    assert (spec.num_linear_layers, spec.num_attention_layers, la.full_attention_interval) == (48, 16, 4)
    assert spec.attention_output_gate and spec.qk_norm and spec.rotary_fraction == 0.25 and spec.mtp_layers == 1
    # 16 attention layers cache K and V: 2 x 4 heads x 256 x 2 bytes each per token
    assert kv_cache_bytes_per_token(spec) == 16 * 2 * 4 * 256 * 2
    # 48 GDN layers keep a 48 x 128 x 128 state and the convolution's last 3 inputs of 10,240 channels, fp32
    assert la.state_bytes_per_element == 4
    assert linear_state_bytes_per_sequence(spec) == 48 * (48 * 128 * 128 + 3 * (2 * 16 * 128 + 48 * 128)) * 4
    moe = imported("qwen3.5-35b-a3b.json")
    assert moe.moe is not None and moe.moe.shared_expert_gate and moe.moe.shared_expert_ffn_hidden_size == 512


@pytest.mark.parametrize("changes,field", [
    ({"layer_types": ["full_attention"] * 64}, "layer_types"),
    ({"layer_types": ["linear_attention"] * 63 + ["mamba"]}, "layer_types"),
    ({"layer_types": ["linear_attention"] * 10}, "layer_types"),
    ({"full_attention_interval": 3}, "layer_types"),
    ({"linear_num_value_heads": 40}, "linear_num_value_heads"),
    ({"mamba_ssm_dtype": "float8"}, "mamba_ssm_dtype"),
    ({"mtp_use_dedicated_embeddings": True}, "mtp_use_dedicated_embeddings"),
    ({"mlp_only_layers": [0]}, "mlp_only_layers"),
    ({"linear_key_head_dim": None}, "linear_key_head_dim"),
])
def test_qwen3_5_refuses_what_it_cannot_place(changes, field):
    err = refusal(config("qwen3.5-27b.json", **changes))
    assert err.field == "text_config." + field


def test_state_dtype_and_interval_one():
    bf16 = imported("qwen3.5-27b.json", mamba_ssm_dtype="bfloat16")
    assert bf16.linear_attention is not None and bf16.linear_attention.state_bytes_per_element == 2
    every_layer = imported("qwen3.5-27b.json", full_attention_interval=1, layer_types=None)
    assert every_layer.linear_attention is None and every_layer.num_attention_layers == 64


def test_qwen3_next_keys():
    """Qwen3-Next's text keys at the top level (transformers Qwen3NextConfig): the rotary share at the top, the output
    gate always built, bf16 states by default (vLLM's mamba cache dtype "auto"); sizes of the 35B-A3B text model."""
    text = config("qwen3.5-35b-a3b.json")["text_config"]
    data = {k: v for k, v in text.items() if k not in ("rope_parameters", "attn_output_gate", "mamba_ssm_dtype",
                                                       "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings")}
    data.update(model_type="qwen3_next", partial_rotary_factor=0.25, rope_theta=10000000, intermediate_size=5120)
    spec = model_from_hf_config(data, source="qwen3-next.json")
    twin = imported("qwen3.5-35b-a3b.json", mtp_num_hidden_layers=0)
    assert count_params(spec).total == count_params(twin).total
    assert spec.linear_attention is not None and spec.linear_attention.state_bytes_per_element == 2
    assert spec.attention_output_gate and spec.rotary_fraction == 0.25 and spec.ffn_hidden_size == 5120


@pytest.mark.parametrize("catalog_id,name", [
    ("qwen3.5-27b", "qwen3.5-27b.json"), ("qwen3.5-35b-a3b", "qwen3.5-35b-a3b.json"),
    ("qwen3.5-122b-a10b", "qwen3.5-122b-a10b.json"), ("qwen3.5-397b-a17b", "qwen3.5-397b-a17b.json"),
    ("hunyuan-a13b", "hunyuan-a13b.json"),
])
def test_the_catalog_holds_what_the_reader_reads(catalog_id, name):
    from planner.engines.load import load_model

    data = json.loads((HF / name).read_text())
    read = model_from_hf_config(data, source=name).model_dump(exclude={"name", "source"})
    assert load_model(catalog_id).spec.model_dump(exclude={"name", "source"}) == read
