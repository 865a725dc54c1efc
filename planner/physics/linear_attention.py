"""Gated DeltaNet layers (Qwen3-Next, Qwen3.5): their shapes, FLOPs and memory traffic, for training and serving.

A GDN layer keeps the model's norms and feed-forward block and replaces the attention block by the mixer of
Yang, Kautz & Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with Delta Rule" (ICLR 2025, arXiv:2412.06464),
as transformers builds it (Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet):

- in_proj: h -> q, k (n_k x d_k each), v and the output gate z (n_v x d_v each), the write strength b and the decay
  input a (n_v each); column-parallel under TP (Megatron-Core splits the heads);
- a causal depthwise convolution (conv_kernel taps, no bias) over q, k and v, then SiLU;
- the gated delta rule over a d_k x d_v state per value head, S_t = a_t S_{t-1} (I - b_t k_t k_t^T) + b_t k_t v_t^T,
  o_t = S_t^T q_t, with q and k L2-normalised (Yang et al. eq. 10), run in chunks of CHUNK_TOKENS (the chunked
  "WY" form of their Sec. 3.3, flash-linear-attention's chunk_gated_delta_rule);
- a gated RMSNorm over each value head, norm(o) * silu(z), then out_proj: n_v d_v -> h, row-parallel.

Every function broadcasts over numpy arrays of the TP degree.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from planner.specs.model import LinearAttentionSpec, ModelSpec

ACTIVATION_BYTES = 2  # 16-bit activations
STATE_FP32_BYTES = 4  # the kernels keep gates, write strengths and the chunk matrices in fp32

CHUNK_TOKENS = 64
"""Tokens per chunk of the chunked gated delta rule: flash-linear-attention's chunk_gated_delta_rule (BT = 64), the
kernel transformers, Megatron-Core and vLLM call for Qwen3-Next and Qwen3.5 (transformers' torch fallback
torch_chunk_gated_delta_rule: chunk_size=64)."""


class MixerWidths(NamedTuple):
    """Elements per token, all heads, of a GDN mixer's tensors."""

    key: int  # q and k, each: n_k x d_k
    value: int  # v, z and the output, each: n_v x d_v
    conv: int  # the convolved channels, q + k + v
    heads: int  # value heads: one decay and one write strength each


def mixer_widths(la: LinearAttentionSpec) -> MixerWidths:
    key = la.num_key_heads * la.key_head_dim
    value = la.num_value_heads * la.value_head_dim
    return MixerWidths(key, value, 2 * key + value, la.num_value_heads)


def in_proj_width(la: LinearAttentionSpec) -> int:
    """Output width of the fused input projection: q, k, v, z, b, a."""
    w = mixer_widths(la)
    return w.conv + w.value + 2 * w.heads


def split_params(la: LinearAttentionSpec) -> int:
    """The mixer's small parameters split with its heads under TP: the convolution's taps, A_log and dt_bias."""
    return mixer_widths(la).conv * la.conv_kernel + 2 * la.num_value_heads


def core_flop_per_token(la: LinearAttentionSpec) -> float:
    """Forward FLOPs per token, all value heads, of the chunked gated delta rule (Yang et al. 2025 Sec. 3.3, the
    UT/WY form in chunks of C = CHUNK_TOKENS), per value head (keys shared by n_v / n_k heads are expanded to it):
    the chunk's K K^T (2 C d_k), the triangular solve of (I + A) (C^2 / 3), W = T (b K) and U = T (b V)
    (2 C d_k + 2 C d_v), U - W S (2 d_k d_v), the output's Q S (2 d_k d_v), Q K^T masked (2 C d_k) and its
    product with the new values (2 C d_v), and the state update K^T V (2 d_k d_v): 6 d_k d_v + 2 C (3 d_k + 2 d_v)
    + C^2 / 3. Counted, not measured; as for attention, the backward is twice this."""
    c, dk, dv = float(CHUNK_TOKENS), float(la.key_head_dim), float(la.value_head_dim)
    return la.num_value_heads * (6 * dk * dv + 2 * c * (3 * dk + 2 * dv) + c * c / 3)


def mixer_elementwise_bytes_per_token(la: LinearAttentionSpec, tp: np.ndarray) -> np.ndarray:
    """Forward bytes per token of the mixer's memory-bound kernels on one rank of a TP group: the causal
    convolution with its SiLU (reads and writes q, k, v: 2 x 2 x conv), the L2 norm of q and k and their repeat to
    the value heads (reads 2 x 2 n_k d_k, writes 2 x 2 n_v d_k: Megatron-Core's gated_delta_net common.py
    _prepare_input_for_gated_delta_rule), the gates (reads b and a, writes the fp32 decay and write strength:
    2 x 2 + 2 x 4 per value head) and the gated RMSNorm (reads the output and z, writes its result: 3 x 2 x value);
    all split over TP with the heads. The chunked kernel's own traffic is core_bytes_per_token."""
    w = mixer_widths(la)
    t = np.asarray(tp).astype(float)
    expand = ACTIVATION_BYTES * 2 * (w.key + w.heads * la.key_head_dim)
    per_token = (2 * ACTIVATION_BYTES * w.conv + expand + (2 * ACTIVATION_BYTES + 2 * STATE_FP32_BYTES) * w.heads
                 + 3 * ACTIVATION_BYTES * w.value)
    return np.asarray(per_token / t)


def recurrent_flop_per_token(la: LinearAttentionSpec) -> float:
    """FLOPs of one decoded token's recurrent step, all value heads: the decayed state's rank-one update,
    S (I - b k k^T) + b k v^T (4 d_k d_v), and the output S^T q (2 d_k d_v)."""
    return float(la.num_value_heads * 6 * la.key_head_dim * la.value_head_dim)


def core_bytes_per_token(la: LinearAttentionSpec, tp: np.ndarray, *, expanded_qk: bool = True) -> np.ndarray:
    """Forward HBM bytes per token of flash-linear-attention's chunked kernels (fla/ops/gated_delta_rule/chunk.py @
    bc3b101d: the decay's chunk-local cumsum, K K^T, the triangular solve, W and U, the chunk states h, the output),
    on one rank; per value head unless said:
    - q, k, v (16-bit), the fp32 decay and 16-bit write strength, each read by two kernels; q and k per value head
      where the caller expands them (`expanded_qk`: Megatron-Core's gated_delta_net common.py and transformers'
      Qwen3.5/Qwen3-Next repeat them to the value heads before the kernel), per key head where the kernel groups
      them itself (fla >= 0.5's grouped value attention, as the H200 measurement below ran);
    - the chunk matrix A: written fp32 by K K^T, read by the solve, written back inverted in 16 bits, read by W, U
      (12 C bytes);
    - W and U (d_k and d_v, 16-bit), the states h (d_k d_v 16-bit per chunk of C tokens) and the new values v'
      (d_v, 16-bit): each written once and read once;
    - the output (d_v, 16-bit), written.
    Counted from the kernels' inputs and outputs, not measured; the kernels' speed on these bytes is
    CORE_HBM_SHARE."""
    w = mixer_widths(la)
    t = np.asarray(tp).astype(float)
    c, dk, dv = float(CHUNK_TOKENS), float(la.key_head_dim), float(la.value_head_dim)
    heads = float(w.heads)
    qk = 2 * (w.heads if expanded_qk else la.num_key_heads) * la.key_head_dim
    inputs = 2 * (ACTIVATION_BYTES * (qk + w.value) + (STATE_FP32_BYTES + ACTIVATION_BYTES) * heads)
    chunk_matrix = heads * (2 * STATE_FP32_BYTES + 2 * ACTIVATION_BYTES) * c
    written_and_read = 2 * ACTIVATION_BYTES * heads * (dk + dv + dk * dv / c + dv)
    output = ACTIVATION_BYTES * w.value
    return np.asarray((inputs + chunk_matrix + written_and_read + output) / t)


CORE_HBM_SHARE = 0.53
"""Share of the HBM bandwidth at which flash-linear-attention's chunked gated-delta-rule forward moves the bytes
core_bytes_per_token counts. QwenLM/FlashQLA benchmark/benchmark_results_H200.txt @ 6e5d2ea1 (fla 0.5.1 timed under
CUDA graphs on H200): 16 key and 32 value heads of 128, one 32,768-token sequence, forward 1.890 ms; the counted
147,840 bytes per token (q and k read per key head, as that call passes them) make 4.84 GB, 1.01 ms at the H200's
4.8 TB/s: 0.53. The README benchmark of
fla-org/flash-linear-attention @ bc3b101d on GB200 (eager timing) is 20-25% slower than this share predicts at
64-96 heads (1.581 ms at 4 x 4,096 tokens, 64 heads; 1.265 ms at 8,192 tokens, 96 heads), the launch overhead of
its ten kernels included; FlashQLA's kernels (0.877 ms on the same H200 shape), which newer fla dispatches to on
Hopper and Blackwell, are not assumed."""

CORE_BACKWARD_TO_FORWARD = 3.0
"""The chunked kernels' backward over their forward: 5.697 / 1.890 ms in the same H200 measurement (the backward
recomputes W, U and the chunk states before its own passes); 2.5-2.8 in fla's GB200 README rows."""


def core_seconds(la: LinearAttentionSpec, hbm_bytes_per_s: float, tokens: np.ndarray, tp: np.ndarray, *,
                 expanded_qk: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of the chunked gated delta rule over `tokens` tokens on one rank
    (`expanded_qk` as core_bytes_per_token)."""
    forward = (np.asarray(tokens) * core_bytes_per_token(la, tp, expanded_qk=expanded_qk)
               / (hbm_bytes_per_s * CORE_HBM_SHARE))
    return np.asarray(forward), np.asarray(CORE_BACKWARD_TO_FORWARD * forward)


def mixer_period(model: ModelSpec) -> int:
    """Layers after which the mix of mixers repeats (full_attention_interval: a GDN hybrid keeps attention on every
    k-th layer); 0 for a model of one mixer. physics.stages.candidate_stages takes it."""
    return model.linear_attention.full_attention_interval if model.linear_attention is not None else 0


def layer_linear_counts(model: ModelSpec, first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """GDN layers among `count` consecutive layers from index `first`: all but the layers k-1, 2k-1, ...
    (k = full_attention_interval) that keep attention. 0 without linear attention."""
    la = model.linear_attention
    first, count = np.asarray(first), np.asarray(count)
    if la is None:
        return np.zeros(np.broadcast(first, count).shape, dtype=np.int64)
    k = la.full_attention_interval
    full = (first + count) // k - first // k
    return np.asarray(count - full)


def saved_bytes_per_token(la: LinearAttentionSpec, tp: np.ndarray, gemm_input_bytes: np.ndarray | float
                          ) -> np.ndarray:
    """Bytes per token one rank keeps from a GDN mixer's forward for its backward (the attention block's
    counterpart in an attention layer's activations; the layer's norms and feed-forward are the same):

    - the convolution's input, q, k and v before it (16-bit; the causal convolution's backward reads it);
    - the L2 norm's input, q and k after the convolution (16-bit), and its fp32 reciprocals (one per key head each):
      Megatron-Core normalises q and k and repeats them to the value heads before the kernel (gated_delta_net
      common.py _prepare_input_for_gated_delta_rule, use_qk_l2norm_in_kernel False);
    - what flash-linear-attention's ChunkGatedDeltaRuleFunction saves (fla/ops/gated_delta_rule/chunk.py @ bc3b101d):
      the repeated q and k (n_v d_k each) and v (16-bit), the decay's fp32 chunk-local cumulative sum, the write
      strength before and after its sigmoid and the decay's input (16-bit, one per value head each), and the
      inverted chunk matrix A ([T, n_v, 64] in the inputs' dtype); the chunk states and W, U are recomputed in the
      backward, not kept;
    - the gated norm's two inputs, the kernel's output and z (16-bit), and its output, kept as the output
      projection's GEMM input (`gemm_input_bytes`: 16-bit, or its fp8 copy under fp8)."""
    w = mixer_widths(la)
    t = np.asarray(tp).astype(float)
    conv_input = ACTIVATION_BYTES * w.conv
    l2norm = ACTIVATION_BYTES * 2 * w.key + 2 * STATE_FP32_BYTES * la.num_key_heads
    kernel = (ACTIVATION_BYTES * (2 * w.heads * la.key_head_dim + w.value)
              + (STATE_FP32_BYTES + 3 * ACTIVATION_BYTES) * w.heads + ACTIVATION_BYTES * CHUNK_TOKENS * w.heads)
    gated_norm = 2 * ACTIVATION_BYTES * w.value
    return np.asarray((conv_input + l2norm + kernel + gated_norm) / t + np.asarray(gemm_input_bytes) * w.value / t)
