"""Tencent Hunyuan config.json import (model_type hunyuan, remote code; hunyuan_v1_moe, transformers).

Fixture: tests/fixtures/hf/hunyuan-a13b.json is Tencent-Hunyuan/Hunyuan-A13B, models/config.json at commit
2798f3c8b6a69e0ce93950b0d2417203cf950fa0, copied unchanged. The modules it builds are those of
models/modeling_hunyuan.py at the same commit (HunYuanMoEV1ForCausalLM): q/k/v/o projections without bias,
per-head q/k RMSNorms, 64 SwiGLU experts of intermediate_size, one shared MLP of intermediate_size x
num_shared_expert[0] under use_mixed_mlp_moe, a router wg (h x E, no bias), two RMSNorms per layer, a final norm and
tied embeddings. The counts below are added up by hand from those modules.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.engines.hf_config import model_from_hf_config
from planner.errors import PlannerError
from planner.physics.params import count_params

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"

H, HEADS, KV, D, F, E, TOPK, V, L = 4096, 32, 8, 128, 3072, 64, 8, 128167, 32
ATTENTION = H * HEADS * D + 2 * H * KV * D + HEADS * D * H + 2 * D  # q, k, v, o; the two head_dim q/k norms
EXPERT = 3 * H * F  # gate, up, down
LAYER = ATTENTION + E * EXPERT + EXPERT + H * E + 2 * H  # + shared MLP, router, two norms
TOTAL = L * LAYER + V * H + H  # tied embedding, final norm


def config(**changes) -> dict:
    data = json.loads((HF / "hunyuan-a13b.json").read_text())
    data.update(changes)
    return data


def refusal(data: dict) -> PlannerError:
    with pytest.raises(PlannerError) as info:
        model_from_hf_config(data, source="cfg.json")
    return info.value


def test_hunyuan_a13b_counts_80b_with_13b_active():
    spec = model_from_hf_config(config(), source="hunyuan-a13b.json")
    counts = count_params(spec)
    assert counts.total == TOTAL == 80_393_183_232  # the technical report's "80B total"
    active = L * (ATTENTION + (TOPK + 1) * EXPERT + H * E + 2 * H) + V * H + H
    assert counts.active == active  # "13B active": 12.75 B
    assert spec.moe is not None and (spec.moe.num_experts, spec.moe.experts_per_token) == (E, TOPK)
    assert (spec.moe.num_shared_experts, spec.moe.shared_expert_ffn_hidden_size) == (1, F)
    assert spec.qk_norm and spec.tied_embeddings and spec.num_kv_heads == KV and spec.head_size == D
    assert spec.dropout  # attention_dropout 0.1 in the released file


def test_hunyuan_shared_mlp_follows_use_mixed_mlp_moe_and_its_multiplier():
    without = model_from_hf_config(config(use_mixed_mlp_moe=False), source="x")
    assert count_params(without).total == TOTAL - L * EXPERT
    doubled = model_from_hf_config(config(num_shared_expert=[2] * L), source="x")
    assert doubled.moe is not None and doubled.moe.shared_expert_ffn_hidden_size == 2 * F
    assert count_params(doubled).total == TOTAL + L * EXPERT


def test_hunyuan_dense_when_one_expert():
    dense = model_from_hf_config(config(num_experts=1, use_mixed_mlp_moe=False, moe_topk=1, num_shared_expert=1),
                                 source="x")
    assert dense.moe is None
    assert count_params(dense).total == L * (ATTENTION + EXPERT + 2 * H) + V * H + H


@pytest.mark.parametrize("changes,field", [
    ({"use_cla": True}, "use_cla"),
    ({"use_mla": True}, "use_mla"),
    ({"moe_topk": [8] * 31 + [4]}, "moe_topk"),
    ({"moe_topk": [8] * 5}, "moe_topk"),
    ({"moe_intermediate_size": [1536] * L}, "moe_intermediate_size"),
    ({"attention_head_dim": 64}, "attention_head_dim"),
    ({"moe_layer_num_skipped": 2}, "moe_layer_num_skipped"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"add_classification_head": True}, "add_classification_head"),
    ({"position_embedding_xdrope": True}, "position_embedding_xdrope"),
    ({"moe_topk": 65}, "moe_topk"),
    ({"num_experts": "64"}, "num_experts"),
    ({"use_mixed_mlp_moe": True, "num_shared_expert": 0}, "num_shared_expert"),
])
def test_hunyuan_refuses_what_it_cannot_map(changes, field):
    err = refusal(config(**changes))
    assert err.field == field and err.source == "cfg.json"


def test_hunyuan_v1_moe_as_transformers_builds_it():
    """transformers' HunYuanMoEV1 (modular_hunyuan_v1_moe.py): the shared MLP and the q/k norms are always built,
    intermediate_size wide; use_mixed_mlp_moe, num_shared_expert and use_qk_norm are not read. A config of its keys
    with the A13B sizes counts as the remote-code file does."""
    data = {"model_type": "hunyuan_v1_moe", "architectures": ["HunYuanMoEV1ForCausalLM"], "vocab_size": V,
            "hidden_size": H, "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": HEADS,
            "num_key_value_heads": KV, "head_dim": D, "max_position_embeddings": 32768, "num_experts": E,
            "moe_topk": [TOPK] * L, "use_mixed_mlp_moe": False, "num_shared_expert": [3] * L, "use_qk_norm": False,
            "tie_word_embeddings": True, "attention_dropout": 0.0}
    spec = model_from_hf_config(data, source="x")
    assert count_params(spec).total == TOTAL
    assert spec.qk_norm and spec.moe is not None and spec.moe.shared_expert_ffn_hidden_size == F
