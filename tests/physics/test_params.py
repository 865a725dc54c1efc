"""Parameter counts and KV-cache sizes.

Expected values come from hand derivations (tiny specs, worked out in the comments) and from
publications (papers, model cards, the totals HuggingFace reports for the safetensors weights),
never from running this code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engines.hf_config import model_from_hf_config
from planner.engines.load import load_model
from planner.physics.params import count_params, kv_cache_bytes_per_token
from planner.specs.model import ModelSpec

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


def rel_err(value: int, expected: float) -> float:
    return abs(value - expected) / expected


# Tiny specs, counted by hand ------------------------------------------------------------------
def tiny_llama(**overrides) -> ModelSpec:
    fields = dict(name="tiny", num_layers=2, hidden_size=8, num_attention_heads=4, num_kv_heads=2,
                  ffn_hidden_size=16, vocab_size=10, max_seq_len=4)
    fields.update(overrides)
    return ModelSpec(**fields)


def test_tiny_gated_gqa_untied():
    # h=8, a=4 heads of d=2, 2 KV heads, ffn=16, V=10, L=2, RMSNorm, gated MLP, untied.
    # embedding     V*h                      = 10*8               =   80
    # attention     q h*a*d + k,v 2*h*kv*d + o a*d*h = 64 + 64 + 64 =  192
    # gated MLP     3*h*ffn                  = 3*8*16             =  384
    # norms         2 RMSNorm * h            = 16
    # one layer     192 + 384 + 16                                =  592; two layers = 1184
    # head          final norm h + lm_head V*h = 8 + 80           =   88
    # total         80 + 1184 + 88                                = 1352
    counts = count_params(tiny_llama())
    assert counts.embedding == 80
    assert counts.dense_layer == 592
    assert counts.head == 88
    assert counts.total == 1352
    assert counts.active == 1352


def test_tiny_qk_norm_adds_two_head_dim_vectors_per_layer():
    # Qwen3: RMSNorm(head_dim) on q and on k -> 2*d = 4 per layer, 8 for two layers: 1352 + 8.
    assert count_params(tiny_llama(qk_norm=True)).total == 1360


def test_tiny_four_norms_per_layer():
    # Gemma 2: 4 RMSNorms of h per layer instead of 2 -> +2*8 per layer, +32 for two: 1352 + 32.
    assert count_params(tiny_llama(norms_per_layer=4)).total == 1384


def test_tiny_tied_embeddings_drop_the_lm_head():
    # 1352 - V*h (80) = 1272.
    assert count_params(tiny_llama(tied_embeddings=True)).total == 1272


def test_tiny_gpt_style():
    # GPT-2/GPT-3 block: h=4, a=2, ffn=4h=16, V=6, learned positions for 3 tokens, LayerNorm,
    # biases everywhere, standard (2-matrix) MLP, tied, L=1.
    # embedding  V*h + s*h = 24 + 12                    =  36
    # attention  4*h*h = 64, + qkv bias 3h = 12, + out bias h = 4 =  80
    # MLP        2*h*ffn = 128, + biases ffn + h = 20   = 148
    # norms      2 LayerNorms * 2h                      =  16
    # layer      80 + 148 + 16 = 244  (= 12h^2 + 13h, Narayanan et al. 2021 eq. 2 per layer)
    # head       final LayerNorm 2h, no lm_head (tied)  =   8
    # total      36 + 244 + 8                           = 288
    spec = ModelSpec(name="tiny-gpt", num_layers=1, hidden_size=4, num_attention_heads=2, ffn_hidden_size=16,
                     mlp_kind="standard", vocab_size=6, tied_embeddings=True, position_embedding="learned",
                     norm_kind="layernorm", qkv_bias=True, attention_output_bias=True, mlp_bias=True, max_seq_len=3)
    counts = count_params(spec)
    assert (counts.embedding, counts.dense_layer, counts.head, counts.total) == (36, 244, 8, 288)


def test_tiny_embedding_norm_layernorm():
    # BLOOM's LayerNorm after the embedding adds 2h: GPT-style tiny 288 + 8 = 296.
    spec = ModelSpec(name="tiny-bloom", num_layers=1, hidden_size=4, num_attention_heads=2, ffn_hidden_size=16,
                     mlp_kind="standard", vocab_size=6, tied_embeddings=True, position_embedding="learned",
                     norm_kind="layernorm", qkv_bias=True, attention_output_bias=True, mlp_bias=True, max_seq_len=3,
                     embedding_norm=True)
    assert count_params(spec).total == 296


def test_tiny_moe_total_and_active():
    # h=4, 2 heads (MHA), L=3 of which 1 dense (ffn 8) and 2 MoE: 4 experts of 6, top-2,
    # 1 shared expert, router bias; V=5, untied.
    # attention   4 * h*h                               =  64
    # dense layer 64 + 3*4*8 (96) + norms 8             = 168
    # one expert  3*4*6                                 =  72
    # MoE layer   64 + router 4*4 + 4 bias (20) + (4+1)*72 (360) + 8 = 452
    # active      64 + 20 + (2+1)*72 (216) + 8          = 308
    # embedding 20, head 4 + 20 = 24
    # total       20 + 168 + 2*452 + 24                 = 1116
    # active      20 + 168 + 2*308 + 24                 =  828
    spec = ModelSpec(name="tiny-moe", num_layers=3, hidden_size=4, num_attention_heads=2, ffn_hidden_size=8,
                     vocab_size=5, max_seq_len=4,
                     moe=dict(num_experts=4, experts_per_token=2, moe_ffn_hidden_size=6, num_shared_experts=1,
                              num_dense_layers=1, router_bias=True))
    counts = count_params(spec)
    assert (counts.dense_layer, counts.moe_layer, counts.moe_layer_active) == (168, 452, 308)
    assert (counts.total, counts.active) == (1116, 828)


def test_tiny_mla():
    # h=8, 2 heads, q_lora 4, kv_lora 3, qk_nope 2, qk_rope 1, v 2; L=1, ffn 4, V=3, untied.
    # q path   h*q_lora (32) + RMSNorm q_lora (4) + q_lora*a*(nope+rope) (4*2*3=24)  = 60
    # kv path  h*(kv_lora+rope) (32) + RMSNorm kv_lora (3) + kv_lora*a*(nope+v) (24)  = 59
    # out      a*v*h = 2*2*8                                                          = 32
    # layer    151 + gated MLP 3*8*4 (96) + norms 16                                  = 263
    # total    embedding 24 + 263 + head (8 + 24)                                      = 319
    spec = ModelSpec(name="tiny-mla", num_layers=1, hidden_size=8, num_attention_heads=2, ffn_hidden_size=4,
                     vocab_size=3, max_seq_len=4,
                     mla=dict(q_lora_rank=4, kv_lora_rank=3, qk_nope_head_dim=2, qk_rope_head_dim=1, v_head_dim=2))
    assert count_params(spec).total == 319
    # The MLA cache holds the latent (3) and the shared rotary key (1): 4 elements * 2 bytes * 1 layer.
    assert kv_cache_bytes_per_token(spec, "bf16") == 8


def test_tiny_kv_cache_bytes():
    # 2 (K and V) * 2 KV heads * d 2 * 2 layers * 2 bytes (bf16) = 32; fp8 halves it.
    assert kv_cache_bytes_per_token(tiny_llama(), "bf16") == 32
    assert kv_cache_bytes_per_token(tiny_llama(), "fp8") == 16


# Published totals -------------------------------------------------------------------------------
# HF totals are those HuggingFace reports for the safetensors weights on the model page: counts of
# the real tensors, so these must match to the parameter.
EXACT_TOTALS = [
    ("llama-3.1-8b", 8_030_261_248, "HF meta-llama/Llama-3.1-8B"),
    ("llama-3.1-70b", 70_553_706_496, "HF meta-llama/Llama-3.1-70B"),
    ("llama-3.1-405b", 405_853_388_800, "HF meta-llama/Llama-3.1-405B"),
    ("mixtral-8x7b", 46_702_792_704, "HF mistralai/Mixtral-8x7B-v0.1"),
    ("gpt2-xl", 1_557_611_200, "HF openai-community/gpt2-xl"),
    ("llama-2-7b", 6_738_415_616, "HF meta-llama/Llama-2-7b-hf"),
    ("llama-2-13b", 13_015_864_320, "HF meta-llama/Llama-2-13b-hf"),
    ("llama-2-70b", 68_976_648_192, "HF meta-llama/Llama-2-70b-hf"),
    ("llama-3.2-1b", 1_235_814_400, "HF meta-llama/Llama-3.2-1B"),
    ("llama-3.2-3b", 3_212_749_824, "HF meta-llama/Llama-3.2-3B"),
    ("mistral-7b", 7_241_732_096, "HF mistralai/Mistral-7B-v0.1"),
    ("bloom-176b", 176_247_271_424, "bigscience/bloom model card"),
]

# Published as a rounded figure: (model, value, unit, where).
ROUNDED_TOTALS = [
    ("gpt3-175b", 174.6, 1e9, "Narayanan et al. 2021, arXiv:2104.04473, Table 1 (eq. 2)"),
    ("deepseek-v3", 671, 1e9, "DeepSeek-AI 2024, arXiv:2412.19437 (main model, without the MTP module)"),
    ("qwen2.5-7b", 7.61, 1e9, "Qwen/Qwen2.5-7B model card"),
    ("qwen2.5-72b", 72.7, 1e9, "Qwen/Qwen2.5-72B model card"),
    ("qwen3-0.6b", 0.6, 1e9, "Qwen/Qwen3-0.6B model card (0.44B non-embedding)"),
    ("qwen3-1.7b", 1.7, 1e9, "Qwen/Qwen3-1.7B model card (1.4B non-embedding)"),
    ("qwen3-4b", 4.0, 1e9, "Qwen/Qwen3-4B model card (3.6B non-embedding)"),
    ("qwen3-8b", 8.2, 1e9, "Qwen/Qwen3-8B model card"),
    ("qwen3-14b", 14.8, 1e9, "Qwen/Qwen3-14B model card (13.2B non-embedding)"),
    ("qwen3-32b", 32.8, 1e9, "Qwen/Qwen3-32B model card"),
    ("qwen3-30b-a3b", 30.5, 1e9, "Qwen/Qwen3-30B-A3B model card"),
    ("mixtral-8x22b", 141, 1e9, "Mistral AI, Mixtral 8x22B announcement: 141B total"),
    ("phi-4", 14.7, 1e9, "microsoft/phi-4 model card"),
    ("gpt-oss-20b", 20.91, 1e9, "OpenAI 2025, gpt-oss-120b & gpt-oss-20b model card, Table 1"),
    ("gpt-oss-120b", 116.83, 1e9, "OpenAI 2025, gpt-oss-120b & gpt-oss-20b model card, Table 1"),
    ("qwen3-235b-a22b", 235, 1e9, "Qwen/Qwen3-235B-A22B model card: 235B total"),
    ("deepseek-v2-lite", 15.7, 1e9, "DeepSeek-AI 2024, arXiv:2405.04434, App. B: 15.7B total"),
]


def agrees_with_figure(count: int, value: float, unit: float) -> bool:
    """Within one unit of the figure's last digit (publishers round or truncate: 7,615,616,512 is "7.61B")."""
    decimals = len(repr(value).split(".")[1]) if isinstance(value, float) else 0
    return abs(count / unit - value) < 10 ** -decimals


@pytest.mark.parametrize("model_id,expected,where", EXACT_TOTALS)
def test_catalog_total_equals_published_count(model_id, expected, where):
    total = count_params(load_model(model_id).spec).total
    assert total == expected, f"{model_id}: {total:,} vs {expected:,} ({where})"


@pytest.mark.parametrize("model_id,value,unit,where", ROUNDED_TOTALS)
def test_catalog_total_rounds_to_published_figure(model_id, value, unit, where):
    total = count_params(load_model(model_id).spec).total
    assert agrees_with_figure(total, value, unit), f"{model_id}: {total:,} ({where})"


def test_required_totals_within_a_tenth_of_a_percent():
    # The brief's acceptance figures, each within 0.1%.
    for model_id, expected in [("llama-3.1-8b", 8_030_261_248), ("llama-3.1-70b", 70_553_706_496),
                               ("llama-3.1-405b", 405_853_388_800), ("mixtral-8x7b", 46_702_792_704),
                               ("gpt3-175b", 174.6e9), ("deepseek-v3", 671e9), ("gpt2-xl", 1_557_611_200)]:
        assert rel_err(count_params(load_model(model_id).spec).total, expected) < 1e-3, model_id


def test_gpt3_is_narayanan_eq2_plus_the_final_layernorm():
    # Narayanan et al. 2021 eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h))
    #                               = 12 l h^2 + 13 l h + (V + s) h.
    # It counts per-layer weights, biases (9h) and two LayerNorms (4h), the (tied) embedding and
    # the learned positions, but not the final LayerNorm (2h), which the model also allocates.
    l, h, V, s = 96, 12288, 51200, 2048
    eq2 = 12 * l * h * h + 13 * l * h + (V + s) * h
    assert eq2 == 174_615_822_336  # "174.6B" in the paper's Table 1
    assert count_params(load_model("gpt3-175b").spec).total == eq2 + 2 * h


def test_deepseek_v3_activated_parameters():
    # DeepSeek-V3's README_WEIGHTS: main model 671B total, 36.6B activated "including 0.9B for the
    # output head", i.e. without the input embedding (a lookup, no compute). The paper rounds to 37B.
    counts = count_params(load_model("deepseek-v3").spec)
    activated = counts.active - counts.embedding
    assert rel_err(activated, 36.6e9) < 1e-3
    assert round(activated / 1e9) == 37
    assert round(counts.head / 1e9, 1) == 0.9  # the output head


def test_mixtral_active_parameters():
    # Jiang et al. 2024: "each token has access to 47B parameters, but only uses 13B active parameters";
    # Mistral AI's Mixtral 8x22B announcement: 39B active of 141B.
    counts = count_params(load_model("mixtral-8x7b").spec)
    assert (round(counts.total / 1e9), round(counts.active / 1e9)) == (47, 13)
    assert round(count_params(load_model("mixtral-8x22b").spec).active / 1e9) == 39


def test_qwen3_moe_non_embedding():
    # Qwen/Qwen3-30B-A3B model card: 29.9B non-embedding (input table and the untied head of
    # 151,936 x 2048 each excluded).
    counts = count_params(load_model("qwen3-30b-a3b").spec)
    assert round((counts.total - 2 * 151936 * 2048) / 1e9, 1) == 29.9


def test_gpt_oss_20b_active_parameters():
    # OpenAI's gpt-oss model card, Table 1: 3.61B active for gpt-oss-20b, counting the unembedding but not
    # the input embedding (a lookup).
    counts = count_params(load_model("gpt-oss-20b").spec)
    assert agrees_with_figure(counts.active - counts.embedding, 3.61, 1e9)


def test_deepseek_v2_lite_activated_parameters():
    # DeepSeek-V2 paper (arXiv:2405.04434), App. B: 2.4B activated (without the input embedding, as for V3).
    counts = count_params(load_model("deepseek-v2-lite").spec)
    assert agrees_with_figure(counts.active - counts.embedding, 2.4, 1e9)


def test_gemma3_27b_non_embedding_matches_report():
    # Gemma Team 2025 (arXiv:2503.19786), Table 1: 25,600M non-embedding parameters for the 27B language model.
    counts = count_params(load_model("gemma-3-27b").spec)
    assert round((counts.total - counts.embedding) / 1e6) == 25_600


@pytest.mark.parametrize("model_id,non_embedding", [
    ("gemma-2-2b", 2_024_517_888),
    ("gemma-2-9b", 8_324_201_984),
    ("gemma-2-27b", 26_047_480_320),
])
def test_gemma2_non_embedding_matches_paper(model_id, non_embedding):
    # Gemma Team 2024 (arXiv:2408.00118) Table 2 lists non-embedding parameters to the unit
    # (its embedding column uses a 256,128-row table; HF ships 256,000 rows, so only this column is exact).
    counts = count_params(load_model(model_id).spec)
    assert counts.total - counts.embedding == non_embedding


# The same figures from real HuggingFace config.json files ---------------------------------------
HF_EXACT = [
    ("llama-3.1-8b.json", 8_030_261_248),
    ("llama-3.1-70b-instruct.json", 70_553_706_496),
    ("llama-3.2-3b.json", 3_212_749_824),
    ("mixtral-8x7b-v0.1.json", 46_702_792_704),
    ("mistral-7b-v0.1.json", 7_241_732_096),
    ("gpt2-xl.json", 1_557_611_200),
    ("pythia-6.9b-deduped.json", 6_857_302_016),  # Biderman et al. 2023 (Pythia), Table 1
]
HF_ROUNDED = [
    ("deepseek-v3.json", 671, 1e9),
    ("qwen2.5-7b.json", 7.61, 1e9),
    ("qwen3-8b.json", 8.2, 1e9),
    ("qwen3-30b-a3b.json", 30.5, 1e9),
    ("gemma-2-9b.json", 9.24, 1e9),  # 8,324,201,984 non-embedding (paper) + 256,000 x 3584
    ("phi-4.json", 14.7, 1e9),
    ("mistral-7b-instruct-v0.3.json", 7.25, 1e9),  # mistralai/Mistral-7B-Instruct-v0.3: 7.25B
    ("gpt-oss-20b.json", 20.91, 1e9),  # OpenAI gpt-oss model card, Table 1
]


@pytest.mark.parametrize("fixture,expected", HF_EXACT)
def test_hf_fixture_total_equals_published_count(fixture, expected):
    assert count_params(load_model(str(HF / fixture)).spec).total == expected


@pytest.mark.parametrize("fixture,value,unit", HF_ROUNDED)
def test_hf_fixture_total_rounds_to_published_figure(fixture, value, unit):
    total = count_params(load_model(str(HF / fixture)).spec).total
    assert agrees_with_figure(total, value, unit), f"{fixture}: {total:,}"


def test_hf_deepseek_v3_within_a_tenth_of_a_percent():
    counts = count_params(load_model(str(HF / "deepseek-v3.json")).spec)
    assert rel_err(counts.total, 671e9) < 1e-3
    assert rel_err(counts.active - counts.embedding, 36.6e9) < 1e-3


# KV cache ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("model_id,bytes_per_token", [
    # 2 (K,V) * layers * kv_heads * head_dim * 2 bytes
    ("llama-3.1-8b", 2 * 32 * 8 * 128 * 2),        # 131,072
    ("llama-3.1-70b", 2 * 80 * 8 * 128 * 2),       # 327,680
    ("llama-2-7b", 2 * 32 * 32 * 128 * 2),         # 524,288 (MHA)
    ("gemma-2-9b", 2 * 42 * 8 * 256 * 2),          # head_dim 256 != 3584 / 16
    # DeepSeek-V2 Sec. 2.1.3: (d_c + d_h^R) * l elements = (512 + 64) * 61 * 2 bytes
    ("deepseek-v3", (512 + 64) * 61 * 2),          # 70,272
])
def test_kv_cache_bytes_per_token(model_id, bytes_per_token):
    assert kv_cache_bytes_per_token(load_model(model_id).spec, "bf16") == bytes_per_token


# Terms added for more model families, counted by hand on tiny_llama (h=8, a=4, d=2, kv=2, ffn=16, V=10, L=2)
def test_per_head_qk_norm_weights_and_attention_sinks():
    base = count_params(tiny_llama()).total
    # shared q/k norms: 2 d = 4 per layer; per-head weights: (a + kv) d = (4 + 2) * 2 = 12 per layer
    assert count_params(tiny_llama(qk_norm=True)).total == base + 2 * 4
    assert count_params(tiny_llama(qk_norm=True, qk_norm_shape="all_heads")).total == base + 2 * 12
    # sinks: one logit per query head, a = 4 per layer
    assert count_params(tiny_llama(attention_sinks=True)).total == base + 2 * 4


def test_output_bias_bias_free_layernorm_and_parallel_block():
    base = count_params(tiny_llama()).total
    assert count_params(tiny_llama(lm_head_bias=True)).total == base + 10  # V
    # LayerNorm without bias has RMSNorm's h weights; with bias 2h: 2 norms x 2 layers + final = 5 norms of h=8
    assert count_params(tiny_llama(norm_kind="layernorm_no_bias")).total == base
    assert count_params(tiny_llama(norm_kind="layernorm")).total == base + 5 * 8
    # the parallel block and partial rotary add no weights
    assert count_params(tiny_llama(parallel_attention_mlp=True, rotary_fraction=0.25)).total == base


def test_shared_expert_of_its_own_width_with_a_gate():
    moe = dict(num_experts=4, experts_per_token=2, moe_ffn_hidden_size=4, num_shared_experts=1)
    plain = count_params(tiny_llama(moe=moe))
    wide = count_params(tiny_llama(moe={**moe, "shared_expert_ffn_hidden_size": 6, "shared_expert_gate": True}))
    # per MoE layer: the shared expert grows from 3*8*4 = 96 to 3*8*6 = 144, and the gate adds h = 8
    assert wide.moe_layer - plain.moe_layer == (144 - 96) + 8
    assert wide.moe_layer_active - plain.moe_layer_active == (144 - 96) + 8


# Three code paths over the same shapes: params.py, the per-rank training shapes and the serving shapes ------
def _hf_specs() -> list[tuple[str, ModelSpec]]:
    import json

    from planner.engines.hf_config import model_from_hf_config

    specs = []
    for path in sorted(HF.glob("*.json")):
        data = json.loads(path.read_text())
        if path.stem == "deepseek-v2-lite":
            data["q_lora_rank"] = None  # see tests/engines/test_hf_config.py
        specs.append((path.stem, model_from_hf_config(data, path.name)))
    return specs


@pytest.mark.parametrize("name,model", _hf_specs(), ids=lambda v: v if isinstance(v, str) else "")
def test_per_rank_and_serving_shapes_add_up_to_the_count(name, model):
    _assert_three_paths_agree(model)


@settings(max_examples=60, deadline=None)
@given(qk=st.sampled_from([None, "head_dim", "all_heads"]), sinks=st.booleans(), lm_bias=st.booleans(),
       norm=st.sampled_from(["rmsnorm", "layernorm", "layernorm_no_bias"]), parallel=st.booleans(),
       biases=st.booleans(), tied=st.booleans(), moe=st.booleans(), shared=st.integers(0, 2),
       shared_width=st.sampled_from([None, 6]), gate=st.booleans(), mla=st.booleans(),
       linear=st.sampled_from([0, 2, 3]), output_gate=st.booleans())
def test_new_fields_add_up_the_same_on_every_path(qk, sinks, lm_bias, norm, parallel, biases, tied, moe, shared,
                                                    shared_width, gate, mla, linear, output_gate):
    fields: dict = dict(attention_sinks=sinks, lm_head_bias=lm_bias, norm_kind=norm, parallel_attention_mlp=parallel,
                        qkv_bias=biases, attention_output_bias=biases, mlp_bias=biases, tied_embeddings=tied,
                        num_layers=5)
    if linear and not mla:  # Gated DeltaNet layers, attention on every `linear`-th layer
        fields.update(linear_attention=dict(num_key_heads=2, num_value_heads=4, key_head_dim=2, value_head_dim=3,
                                            conv_kernel=4, full_attention_interval=linear),
                      attention_output_gate=output_gate)
    if qk is not None and not mla:
        fields.update(qk_norm=True, qk_norm_shape=qk)
    if mla:
        fields.update(qkv_bias=False, mla=dict(q_lora_rank=None, kv_lora_rank=4, qk_nope_head_dim=2,
                                               qk_rope_head_dim=2, v_head_dim=2))
    if moe:
        fields["moe"] = dict(num_experts=4, experts_per_token=2, moe_ffn_hidden_size=4, num_shared_experts=shared,
                             shared_expert_ffn_hidden_size=shared_width, shared_expert_gate=gate and shared > 0,
                             num_dense_layers=1)
    _assert_three_paths_agree(tiny_llama(**fields))


def _assert_three_paths_agree(model: ModelSpec) -> None:
    """params.py's total equals the per-rank training shapes at tp 1 and the serving shapes, summed."""
    import numpy as np

    from planner.physics.linear_attention import layer_linear_counts
    from planner.physics.shapes import embedding_params_per_rank, head_params_per_rank, layer_params_per_rank
    from planner.serving.inputs import model_shapes
    from tests.round_specs import lay

    counts = count_params(model)
    one = lay(tp=1)
    per_rank = embedding_params_per_rank(model, one) + head_params_per_rank(model, one)
    # Gated DeltaNet layers (Qwen3.5) among the dense layers, which come first, and among the MoE layers
    lin_dense = int(layer_linear_counts(model, np.int64(0), np.int64(counts.num_dense_layers)))
    lin_moe = int(layer_linear_counts(model, np.int64(counts.num_dense_layers), np.int64(counts.num_moe_layers)))
    for moe_layer, n, lin in ((False, counts.num_dense_layers, lin_dense), (True, counts.num_moe_layers, lin_moe)):
        if n:
            p = layer_params_per_rank(model, one, moe_layer=moe_layer)
            q = layer_params_per_rank(model, one, moe_layer=moe_layer, linear=True) if lin else p
            per_rank = per_rank + (n - lin) * (p.dense + p.expert) + lin * (q.dense + q.expert)
    assert float(np.asarray(per_rank).reshape(-1)[0]) == counts.total
    shapes = model_shapes(model)
    total = shapes.embedding_params + shapes.head_params
    for layer, n in ((shapes.dense, shapes.num_dense_layers - shapes.num_linear_dense_layers),
                     (shapes.moe, shapes.num_moe_layers - shapes.num_linear_moe_layers),
                     (shapes.dense_linear, shapes.num_linear_dense_layers),
                     (shapes.moe_linear, shapes.num_linear_moe_layers)):
        if layer is not None and n:
            weights = sum(g.tp_elements + g.replicated_elements + g.kv_elements_per_head * shapes.kv_heads
                          for g in layer.gemms)
            total += n * (weights + layer.small_params)
    assert total == counts.total


# Multi-token prediction -------------------------------------------------------------------------------
def test_deepseek_v3_mtp_module_by_hand_from_its_config():
    # DeepSeek-V3 config (h 7168, 128 heads, q_lora 1536, kv_lora 512, nope 128, rope 64, v 128; 256 experts of
    # 2048, 1 shared, router bias; num_nextn_predict_layers 1). One MTP module = one MoE layer + eh_proj + 3 norms:
    #   q path   7168*1536 + 1536 + 1536*128*192          =    48,760,320
    #   kv path  7168*576 + 512 + 512*128*256             =    20,906,496
    #   out      128*128*7168                             =   117,440,512   attention 187,107,328
    #   router   7168*256 + 256                           =     1,835,264
    #   experts  256 * 3*7168*2048 (44,040,192)           = 11,274,289,152
    #   shared   44,040,192; layer norms 2*7168 = 14,336
    #   layer    187,107,328 + 1,835,264 + 11,274,289,152 + 44,040,192 + 14,336 = 11,507,286,272
    #   eh_proj  2*7168*7168 = 102,760,448; enorm, hnorm, final norm 3*7168 = 21,504
    #   module   11,507,286,272 + 102,760,448 + 21,504   = 11,610,068,224
    counts = count_params(load_model(str(HF / "deepseek-v3.json")).spec)
    assert counts.num_mtp_layers == 1
    assert counts.mtp_module == 11_610_068_224
    assert counts.mtp == 11_610_068_224
    assert counts.total_with_mtp == counts.total + 11_610_068_224
    # The main-model total stays the report's 671B (MTP excluded; see test_hf_deepseek_v3_within_a_tenth...).
    assert rel_err(counts.total, 671e9) < 1e-3


def test_deepseek_v3_checkpoint_with_mtp_is_the_685b_of_the_model_card():
    # HF's checkpoint stores the MTP module with its own copies of the embedding and the output head
    # (2 x 129,280 x 7,168 = 1,853,358,080): 11,610,068,224 + 1,853,358,080 = 13,463,426,304 (the report's
    # "14B of MTP module weights", Sec. 2.2 / model card), and 671B + that is the card's 685B.
    counts = count_params(load_model(str(HF / "deepseek-v3.json")).spec)
    checkpoint_mtp = counts.mtp + 2 * 129_280 * 7_168
    assert checkpoint_mtp == 13_463_426_304
    assert rel_err(counts.total + checkpoint_mtp, 685e9) < 1e-3


def test_mtp_of_a_dense_model_is_a_dense_layer_and_zero_mtp_adds_nothing():
    # tiny llama (h 8, 4 heads, 2 KV heads of 2, ffn 16, gated, RMSNorm): dense layer = q 64 + kv 2*8*4 (64)
    # + o 64 + MLP 3*8*16 (384) + norms 16 = 592; MTP module = 592 + eh_proj 2*8*8 (128) + 3 norms 24 = 744.
    assert count_params(tiny_llama()).mtp == 0
    counts = count_params(tiny_llama(mtp_layers=2))
    assert counts.dense_layer == 592
    assert (counts.mtp_module, counts.mtp) == (744, 1488)
    assert counts.total == count_params(tiny_llama()).total


def test_kimi_k2_is_deepseek_v3_with_its_table_2_changes():
    """Kimi Team 2025 (arXiv:2507.20534) Table 2 sets Kimi K2 against DeepSeek-V3: 384 experts (256), 64 heads
    (128), 1 dense layer (3), the rest equal. By hand from DeepSeek-V3's layer (671.0e9 in all, checked above):
    halving the heads takes 64 x (1536 x 192 + 512 x 256 + 128 x 7168) = 85,983,232 from every layer's MLA
    (q_b, kv_b and o projections), and each of the 128 more experts adds 3 x 7168 x 2048 weights, a router row of
    7168 and a router bias. The report's '1.04T' is 1.3% above the total and does not say what it includes (one
    multi-token-prediction layer would add about 17e9)."""
    v3, k2 = count_params(load_model("deepseek-v3").spec), count_params(load_model("kimi-k2").spec)
    attention = 64 * (1536 * 192 + 512 * 256 + 128 * 7168)
    assert v3.dense_layer - k2.dense_layer == attention == 85_983_232
    assert k2.moe_layer - v3.moe_layer == 128 * (3 * 7168 * 2048 + 7168 + 1) - attention
    assert (k2.num_dense_layers, k2.num_moe_layers) == (1, 60)
    assert abs(k2.total / 1.04e12 - 1) < 0.015


def test_kimi_k2_hf_config_reads_as_deepseek_v3():
    """model_type kimi_k2 (Moonshot's DeepseekV3ForCausalLM code) takes the DeepSeek-V3 reader: DeepSeek-V3's hub
    config with Table 2's changes (and the vocabulary of 163,840) gives the catalog's Kimi K2."""
    raw = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "deepseek-v3.json").read_text())
    raw.update(model_type="kimi_k2", n_routed_experts=384, num_attention_heads=64, num_key_value_heads=64,
               first_k_dense_replace=1, n_group=1, topk_group=1, vocab_size=163840, num_nextn_predict_layers=0)
    spec = model_from_hf_config(raw, source="kimi.json")
    assert count_params(spec).total == count_params(load_model("kimi-k2").spec).total


@pytest.mark.parametrize(("model_id", "published", "with_mtp"), [
    ("glm-4.5", 355e9, True),  # Megatron-Bridge docs/models/glm/glm45.md: 355B total
    ("glm-4.5-air", 106e9, False),  # 106B total
])
def test_glm45_totals_against_the_published_figures(model_id, published, with_mtp):
    """The GLM-4.5 pages give rounded totals and do not say whether the MTP layer is in them: GLM-4.5 comes to
    352.8e9 without it and 356.8e9 with it (355B between), Air to 106.9e9 without (109.2e9 with). Each is
    checked within 1% of the figure in the reading it agrees with."""
    counts = count_params(load_model(model_id).spec)
    total = counts.total + (counts.mtp_module * counts.num_mtp_layers if with_mtp else 0)
    assert abs(total / published - 1) < 0.01


def test_minimax_m2_totals_against_the_published_figures():
    """MiniMax-M2 is published as '230 billion total parameters with 10 billion active parameters' (transformers
    docs/source/en/model_doc/minimax_m2.md, from MiniMax's release). The main model comes to 228.7e9 (MTP modules
    apart, as DeepSeek-V3's 671B is counted); a token passes 9.8e9 outside the embedding and the output layer
    (11.0e9 with them): the rounded 10B is the one without."""
    counts = count_params(load_model("minimax-m2").spec)
    assert abs(counts.total / 230e9 - 1) < 0.01
    assert abs((counts.active - counts.embedding - counts.head) / 10e9 - 1) < 0.03
