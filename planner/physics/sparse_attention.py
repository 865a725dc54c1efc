"""DeepSeek Sparse Attention (DSA): the work of its lightning indexer and of MLA over the selected keys, for
training and serving alike.

DeepSeek-V3.2-Exp report (deepseek-ai/DeepSeek-V3.2-Exp @ 3b99a535, DeepSeek_V3_2.pdf), Sec. 1: a lightning
indexer scores every preceding token s for query t, I(t, s) = sum_j w(t, j) ReLU(q(t, j) . k(s)), with H_I heads
of d_I and one key per token shared by its heads; each query then attends its top-k tokens (eq. 2), in MLA's
MQA form (the latent key shared by all query heads). The core attention drops from O(L^2) to O(L k); the indexer
stays O(L^2) with a small constant. Training (Sec. 2.1) detaches the indexer's input and trains it by a KL loss
against the main attention's head-summed probabilities over the selected keys; Megatron-Core does the same
(megatron/core/transformer/experimental_attention_variant/dsa.py @ d98e8a64: the indexer replicated on every
TP rank, its inputs all-gathered under sequence parallelism, FusedDSAIndexerLoss recomputing the index scores
in backward, the target's probabilities all-reduced over TP).

Pure functions over numpy arrays; every constant carries its source.
"""

from __future__ import annotations

import numpy as np

from planner.physics.kernels import FLASH_BACKWARD_TO_FORWARD, causal_pairs
from planner.specs.model import ModelSpec

SPARSE_MLA_FORWARD_EFFICIENCY = 0.645
"""Fraction of the dense 16-bit peak FlashMLA's sparse MLA prefill kernel reaches in its forward
(deepseek-ai/FlashMLA README @ 9241ae3e: up to 640 TFLOP/s on H800 SXM5, peak 989; up to 1,450 on B200, peak
2,250: 0.647 and 0.644), on DeepSeek-V3.2's shapes (h_q 128, d_qk 576, d_v 512, top-k 2,048)."""

DENSE_FLASH_COMBINED_TO_FORWARD = (1.0 + FLASH_BACKWARD_TO_FORWARD) / (1.0 / 648.0 + FLASH_BACKWARD_TO_FORWARD / 561.0) / 648.0
"""The rate of a flash kernel's forward + backward over its forward alone: FlashAttention-3 on H100, hd 128,
16k tokens, 648 TFLOP/s forward and 561 backward (the figures physics/kernels.py cites for
FLASH_BACKWARD_TO_FORWARD), weighted by the backward's 2.5x FLOPs: 0.90. No sparse backward rate is published;
the sparse kernels are taken to lose the same share in their backward."""

SPARSE_MLA_EFFICIENCY = SPARSE_MLA_FORWARD_EFFICIENCY * DENSE_FLASH_COMBINED_TO_FORWARD
"""Fraction of the 16-bit peak the sparse MLA kernels reach forward and backward together (0.58)."""

INDEXER_EFFICIENCY = 0.40
"""Fraction of the peak of its dtype the indexer's logit kernels reach (fp8 in serving, DeepGEMM's fp8_mqa_logits;
16-bit in training, Megatron-Core's DSA kernels having no fp8 indexer). No kernel figure is published (DeepGEMM's
README gives none; its PR #227 calls the kernel CUDA-core and register bound). Derived from DeepSeek's production
costs instead: in the report's Fig. 3 (H800) the prefill cost per million tokens grows from position 0 to 128K by
about $0.61 for V3.1 (dense MHA-form attention, 2 x 128 x (192 + 128) FLOPs per pair) and by about $0.09 for V3.2,
whose only term growing with position is the indexer (2 x 64 x 128 per pair): the indexer runs at
(16,384 / 81,920) / (0.09 / 0.61) = 1.36x the dense attention's FLOP rate, which at FlashAttention-3's forward
rate (648 TFLOP/s of H100 SXM's 989) is about 0.45 of the fp8 peak; 0.40 allows for the figure read by eye. An
open bf16 Triton indexer with top-k (PrimeIntellect-ai/prime-rl benchmarks/results/bench_fp8_indexer.md
@ 0f88ce3a, B200, H 32, D 128: 42.6-45.8 ps per causal pair from 16K to 128K tokens) reaches 0.08 of B200's 16-bit
peak: slower kernels run five times slower than this."""

INDEXER_BACKWARD_TO_FORWARD = 3.0
"""The indexer's backward per pair it covers, over its forward's: the scores recomputed (Megatron-Core
FusedDSAIndexerLoss keeps q, k and the weights and recomputes, never materialising the scores), then the
gradients of the queries and of the keys, each a product of the same size. Under the sparse indexer loss of
DSA's main training stage (report Sec. 2.1; Megatron's --dsa-indexer-use-sparse-loss, which Megatron-Bridge's
GLM-5 bridge sets) it covers only each query's selected keys (Megatron-Core's fused indexer backward loops over
the top-k blocks alone: ops/tilelang_indexer_bwd.py)."""

TARGET_BYTES = 4
"""Bytes per selected (query, key) pair of the indexer loss's target: the head-summed attention probabilities in
fp32, all-reduced over the TP group (Megatron-Core dsa.py @ d98e8a64)."""

def selected_pairs(model: ModelSpec, new_tokens: np.ndarray) -> np.ndarray:
    """(query, key) pairs the sparse attention computes for a causal sequence of `new_tokens`: each query attends
    min(position, top-k) keys, the count of a window of top-k (causal_pairs)."""
    assert model.sparse_attention is not None
    return causal_pairs(new_tokens, model.sparse_attention.topk)


def selected_share(model: ModelSpec, seq_len: np.ndarray) -> np.ndarray:
    """Share of the causal pairs the sparse attention keeps: 1 up to top-k tokens, about k / (s / 2) beyond."""
    s = np.asarray(seq_len, dtype=float)
    return np.asarray(selected_pairs(model, s) / causal_pairs(s))


def indexer_flop_per_pair(model: ModelSpec) -> float:
    """Forward FLOPs of the indexer's logits for one (query, key) pair: a d_I dot product per head (the ReLU and
    the weighted sum over heads are element-wise)."""
    assert model.sparse_attention is not None
    return 2.0 * model.sparse_attention.index_heads * model.sparse_attention.index_head_dim


def target_flop_per_pair(model: ModelSpec, *, mqa_form: bool = True) -> float:
    """Forward FLOPs of the loss target's attention scores for one selected pair, all heads: the query-key
    products again, which the fused loss recomputes from the query and key it keeps; in the MQA form the kernels
    run (kv_lora + rope wide), or in the MHA form's widths (qk_nope + rope) that model FLOPs count the math in."""
    assert model.mla is not None
    m = model.mla
    width = m.kv_lora_rank + m.qk_rope_head_dim if mqa_form else m.qk_nope_head_dim + m.qk_rope_head_dim
    return 2.0 * model.num_attention_heads * width


def training_core_seconds(
    model: ModelSpec, *, tokens: np.ndarray, seq_len: np.ndarray, tp: np.ndarray, peak16: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of one layer's sparse attention for `tokens` tokens (sequences of `seq_len`)
    on one rank of a TP group, `peak16` the chip's sustained 16-bit peak (its power limit applied): the sparse
    MLA kernel over the selected pairs of the rank's heads, the indexer's logits over every causal pair
    (replicated: each TP rank scores the whole sequence) with its sparse loss's backward over the selected pairs,
    and the loss target's scores over the selected pairs (forward only; the target is detached)."""
    assert model.sparse_attention is not None and model.mla is not None
    s = np.asarray(seq_len, dtype=float)
    t = np.asarray(tp, dtype=float)
    sequences = np.asarray(tokens, dtype=float) / s
    selected = sequences * selected_pairs(model, s)
    every = sequences * causal_pairs(s)
    latent = model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
    core_flop = selected * 2.0 * model.num_attention_heads * (latent + model.mla.kv_lora_rank) / t
    core = core_flop / (peak16 * SPARSE_MLA_EFFICIENCY)
    per_indexer_pair = indexer_flop_per_pair(model) / (peak16 * INDEXER_EFFICIENCY)
    target = selected * target_flop_per_pair(model) / t / (peak16 * SPARSE_MLA_EFFICIENCY)
    forward = core + every * per_indexer_pair + target
    backward = FLASH_BACKWARD_TO_FORWARD * core + INDEXER_BACKWARD_TO_FORWARD * selected * per_indexer_pair
    return np.asarray(forward), np.asarray(backward)


def target_bytes(model: ModelSpec, *, tokens: np.ndarray, seq_len: np.ndarray) -> np.ndarray:
    """Bytes of the indexer loss's target that the TP group all-reduces for one layer: an fp32 probability per
    selected pair."""
    s = np.asarray(seq_len, dtype=float)
    return np.asarray(np.asarray(tokens, dtype=float) / s * selected_pairs(model, s) * TARGET_BYTES)
