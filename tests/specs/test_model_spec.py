"""ModelSpec schema rules, and the built-in model catalog."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from planner.engines.load import load_model, model_catalog
from planner.errors import PlannerError
from planner.specs.model import ModelSpec

MINIMAL = dict(name="m", num_layers=2, hidden_size=8, num_attention_heads=2, ffn_hidden_size=16,
               vocab_size=10, max_seq_len=4)

REQUIRED_IDS = [
    "gpt3-175b", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
    "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b", "qwen2.5-72b", "deepseek-v3", "bloom-176b",
    "gpt2-xl", "gpt-neox-20b", "llama-3.2-1b", "llama-3.2-3b", "qwen3-8b", "gemma-2-9b", "gemma-2-27b", "qwen2.5-32b",
]


def spec(**changes) -> ModelSpec:
    return ModelSpec(**{**MINIMAL, **changes})


def problem(**changes) -> str:
    with pytest.raises(ValidationError) as info:
        spec(**changes)
    return str(info.value)


# Schema rules ---------------------------------------------------------------------------------
def test_minimal_spec_defaults():
    m = spec()
    assert m.kv_heads == 2 and m.head_size == 4 and m.mlp_kind == "gated" and m.norm_kind == "rmsnorm"
    assert m.moe is None and m.num_dense_layers == 2 and m.num_moe_layers == 0


def test_unknown_key_is_refused():
    assert "extra" in problem(bogus=1).lower()


def test_missing_required_field():
    fields = dict(MINIMAL)
    del fields["vocab_size"]
    with pytest.raises(ValidationError, match="vocab_size"):
        ModelSpec(**fields)


@pytest.mark.parametrize("field", ["num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
                                   "vocab_size", "max_seq_len", "num_kv_heads", "head_dim"])
def test_sizes_must_be_positive(field):
    assert "greater than 0" in problem(**{field: 0})


def test_wrong_type():
    assert "integer" in problem(num_layers="two")


def test_heads_divisible_by_kv_heads():
    assert "not divisible by num_kv_heads" in problem(num_attention_heads=4, num_kv_heads=3)


def test_hidden_divisible_by_heads_unless_head_dim_given():
    assert "give head_dim" in problem(hidden_size=10, num_attention_heads=4)
    assert spec(hidden_size=10, num_attention_heads=4, head_dim=3).head_size == 3


def test_enumerations():
    assert "mlp_kind" in problem(mlp_kind="swiglu")
    assert "position_embedding" in problem(position_embedding="sinusoidal")
    assert "norm_kind" in problem(norm_kind="batchnorm")


def test_moe_top_k_within_experts():
    assert "exceeds num_experts" in problem(moe=dict(num_experts=2, experts_per_token=3, moe_ffn_hidden_size=4))


def test_moe_dense_layers_within_layers():
    assert "num_dense_layers" in problem(moe=dict(num_experts=2, experts_per_token=1, moe_ffn_hidden_size=4,
                                                  num_dense_layers=3))


def test_moe_counts_layers():
    m = spec(moe=dict(num_experts=2, experts_per_token=1, moe_ffn_hidden_size=4, num_dense_layers=1))
    assert (m.num_dense_layers, m.num_moe_layers) == (1, 1)


def test_moe_and_mla_are_strict_too():
    assert "extra" in problem(moe=dict(num_experts=2, experts_per_token=1, moe_ffn_hidden_size=4, k=1)).lower()
    assert "extra" in problem(mla=dict(kv_lora_rank=2, qk_nope_head_dim=2, qk_rope_head_dim=1, v_head_dim=2,
                                       rank=3)).lower()


def test_sliding_window_layers_within_layers_and_need_a_window():
    assert "exceeds num_layers" in problem(sliding_window_tokens=4, sliding_window_layers=3)
    assert "sliding_window_tokens is not" in problem(sliding_window_layers=1)


def test_every_field_has_a_description():
    from planner.specs.model import MLASpec, MoESpec

    for cls in (ModelSpec, MoESpec, MLASpec):
        for name, info in cls.model_fields.items():
            assert info.description, f"{cls.__name__}.{name}"


# Catalog --------------------------------------------------------------------------------------
CATALOG = model_catalog()


def test_catalog_has_the_required_models():
    ids = {entry.id for entry in CATALOG}
    missing = [i for i in REQUIRED_IDS if i not in ids]
    assert not missing


@pytest.mark.parametrize("entry", CATALOG, ids=lambda e: e.id)
def test_catalog_entry_has_a_source_and_a_name(entry):
    assert entry.spec.source and entry.spec.name


def test_aliases_are_unique_and_do_not_shadow_ids():
    ids = {entry.id.lower() for entry in CATALOG}
    seen: set[str] = set()
    for entry in CATALOG:
        for alias in entry.aliases:
            assert alias.lower() not in ids, alias
            assert alias.lower() not in seen, alias
            seen.add(alias.lower())


def test_alias_and_case_insensitive_lookup():
    assert load_model("Mixtral").id == "mixtral-8x7b"
    assert load_model("LLAMA-3.1-70B").id == "llama-3.1-70b"


def test_unknown_id_suggests_the_closest():
    with pytest.raises(PlannerError, match="did you mean .*llama-3.1-70b"):
        load_model("llama-3.1-70")


def test_catalog_files_use_only_spec_fields_plus_aliases():
    from pathlib import Path

    allowed = set(ModelSpec.model_fields) | {"aliases"}
    for path in (Path(__file__).resolve().parents[2] / "model_specs").iterdir():
        if path.name.endswith(".yaml"):
            data = yaml.safe_load(path.read_text())
            assert set(data) <= allowed, path.name


def test_gpt3_shape_as_published():
    # Brown et al. 2020 Table 2.1 and Narayanan et al. 2021: 96 layers, 12288 wide, 96 heads,
    # FFN 4h, 2048 learned positions, GeLU MLP, biases, LayerNorm, tied, vocab padded to 51,200.
    m = load_model("gpt3-175b").spec
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.ffn_hidden_size) == (96, 12288, 96, 4 * 12288)
    assert (m.vocab_size, m.max_seq_len, m.position_embedding) == (51200, 2048, "learned")
    assert m.mlp_kind == "standard" and m.norm_kind == "layernorm" and m.tied_embeddings
    assert m.qkv_bias and m.attention_output_bias and m.mlp_bias


def test_yaml_spec_file_loads_without_aliases(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**MINIMAL, "aliases": ["x"]}))
    loaded = load_model(str(path))
    assert loaded.id == "mine" and loaded.spec.num_layers == 2
