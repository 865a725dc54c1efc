"""FLOPs per step: model FLOPs (Narayanan et al. 2021, eq. 3) and hardware FLOPs with recompute.

Expected values are worked out by hand in the comments. Convention (flops.py): 2 FLOPs per weight per
token forward, backward twice the forward, the attention core QK^T and AV counted over the full s x s
(no halving for the causal mask), the LM head 2Vh, no FLOPs for the embedding lookup.
"""

from __future__ import annotations

import pytest

from planner.engines.load import load_model
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.training.flops import step_flop


def gpt(**overrides) -> ModelSpec:
    # GPT shape without biases, RMSNorm: L = 2, h = 64, a = 4, f = 4h = 256, V = 100.
    fields = dict(name="tiny GPT", num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256,
                  mlp_kind="standard", vocab_size=100, max_seq_len=256, norm_kind="rmsnorm")
    fields.update(overrides)
    return ModelSpec(**fields)


def flop(model: ModelSpec, **fields) -> tuple[float, float]:
    fields.setdefault("global_batch", 8)
    fields.setdefault("seq_len", 32)
    result = step_flop(model, Layout(**fields).to_arrays())
    return float(result.model_flop[0]), float(result.hardware_flop[0])


# Tiny GPT, B = 8 sequences of s = 32 tokens: 256 tokens per step. Per token, forward + backward (x 3):
#   layer weights   3 x 2 x L x 12h^2 = 72 L h^2 = 72 x 2 x 4,096 = 589,824
#   attention core  3 x L x 2s (h + h) = 12 L s h = 12 x 2 x 32 x 64 =  49,152
#   LM head         3 x 2Vh            = 6 V h    = 6 x 100 x 64    =  38,400
#   RMSNorm weights 3 x 2 x L x 2h     = 12 L h   = 12 x 2 x 64     =   1,536   (not in eq. 3)
# Narayanan eq. 3, 72 B s L h^2 (1 + s/6h + V/(12 L h)), is the first three: 677,376 per token.
EQ3_PER_TOKEN = 589_824 + 49_152 + 38_400
NORMS_PER_TOKEN = 1_536
TOKENS = 8 * 32


def test_model_flop_is_narayanan_eq3_plus_the_norm_weights():
    model_flop, hardware_flop = flop(gpt())
    assert model_flop == (EQ3_PER_TOKEN + NORMS_PER_TOKEN) * TOKENS  # 173,801,472
    assert hardware_flop == model_flop
    assert model_flop == pytest.approx(EQ3_PER_TOKEN * TOKENS, rel=0.003)  # eq. 3 leaves out the 0.23% of norms


def test_full_recompute_is_narayanan_eq3_with_96():
    # Full recompute repeats each layer's forward (not the LM head): + 24 L h^2 + 4 L s h (+ 4 L h of norms)
    # per token, giving eq. 3's 96 B s L h^2 (1 + s/6h + V/(16 L h)):
    #   96 L h^2 = 786,432;  16 L s h = 65,536;  6 V h = 38,400;  norms 16 L h = 2,048  ->  892,416 per token.
    model_flop, hardware_flop = flop(gpt(), recompute="full")
    assert model_flop == (EQ3_PER_TOKEN + NORMS_PER_TOKEN) * TOKENS
    assert hardware_flop == (786_432 + 65_536 + 38_400 + 2_048) * TOKENS  # 228,458,496


def test_selective_recompute_repeats_the_attention_core_without_flash():
    # Selective, unfused attention: + the core's forward, 2 L s (h + h) = 4 L s h = 16,384 per token.
    # With flash attention the kernel recomputes inside its own backward: nothing extra is counted.
    model_flop, hardware_flop = flop(gpt(), recompute="selective", flash_attention=False)
    assert hardware_flop == model_flop + 16_384 * TOKENS
    model_flop, hardware_flop = flop(gpt(), recompute="selective", flash_attention=True)
    assert hardware_flop == model_flop


def test_block_recompute_repeats_a_share_of_the_layers():
    # pp = 2, 1 layer per stage, recompute 1 layer per stage: every layer is recomputed (fraction 1).
    # pp = 1, 2 layers per stage, 1 recomputed: half the layers' forward, (24 L h^2 + 4 L s h + 4 L h)/2 =
    # (196,608 + 16,384 + 512)/2 = 106,752 per token.
    model_flop, hardware_flop = flop(gpt(), recompute="full", recompute_layers_per_stage=1)
    assert hardware_flop == model_flop + 106_752 * TOKENS


def test_flops_do_not_depend_on_the_split():
    # The same work, however it is divided: tp 2, pp 2, dp 2 give the step's FLOPs unchanged.
    assert flop(gpt(), tp=2, pp=2, dp=2) == flop(gpt())


def test_gated_gqa_counts_its_own_matrices():
    # Gated MLP 3hf = 49,152 and GQA (2 KV heads of 16: K, V 2 x 64 x 32 = 4,096) per layer:
    # weights per layer 4,096 (q) + 4,096 (k, v) + 4,096 (o) + 49,152 + 128 (norms) = 61,568.
    # Per token: 6 x L x 61,568 = 738,816; core 12 L s h = 49,152 (Q and V widths are a x d = h);
    # head 38,400 -> 826,368 per token.
    model_flop, _ = flop(gpt(mlp_kind="gated", num_kv_heads=2))
    assert model_flop == 826_368 * TOKENS


def test_gpt3_175b_step_matches_eq3():
    # GPT-3 175B, B = 1536, s = 2048 (Narayanan et al. 2021 Sec. 5.1): eq. 3 with L 96, h 12288, V 51200:
    # 72 B s L h^2 = 72 x 1536 x 2048 x 96 x 12288^2 = 3.2831e18; (1 + s/6h + V/12Lh) = 1 + 0.027778 + 0.003617
    # = 1.031395 -> 3.3862e18 per step. The catalog model has biases and LayerNorms (about 0.01% more weights).
    model_flop, hardware_flop = flop(load_model("gpt3-175b").spec, global_batch=1536, seq_len=2048)
    expected = 72 * 1536 * 2048 * 96 * 12288**2 * (1 + 2048 / (6 * 12288) + 51200 / (12 * 96 * 12288))
    assert model_flop == pytest.approx(expected, rel=1e-3)
    assert model_flop == pytest.approx(3.3862e18, rel=1e-3)


def test_sliding_window_layers_count_the_pairs_their_window_keeps():
    # gpt() with a window on half the layers: those layers keep causal_pairs(s, w) / causal_pairs(s) of the
    # attention core. s = 256, w = 64: (64*65/2 + 192*64) / (256*257/2) = 14,368 / 32,896.
    from planner.training.flops import attention_core_flop_per_token

    model = gpt()
    windowed = gpt(sliding_window_tokens=64, sliding_window_layers=model.num_layers // 2)
    share = 0.5 + 0.5 * 14_368 / 32_896
    full = float(attention_core_flop_per_token(model, 256))
    assert float(attention_core_flop_per_token(windowed, 256)) == pytest.approx(share * full, rel=1e-12)
    # a window as long as the sequence changes nothing
    same = gpt(sliding_window_tokens=256, sliding_window_layers=model.num_layers)
    assert float(attention_core_flop_per_token(same, 256)) == full
