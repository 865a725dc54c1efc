"""Serving time: forward passes, TTFT / TPOT / end-to-end latency and output throughput.

Every forward pass (a prefill chunk, a decode step, a continuous-batching iteration) is costed
by one function, `forward_pass`, from the work it carries: new tokens (GEMMs, element-wise
kernels, all-reduces), attention FLOPs and K/V bytes read, and the sampled positions (output
head). Static and continuous batching differ only in the work they put in a pass.
Formulas, sources and what is left out: docs/inference.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.physics import linear_attention, sparse_attention
from planner.physics.comm import (
    all_gather_seconds,
    all_reduce_seconds,
    group_link,
    p2p_seconds,
)
from planner.physics.kernels import (
    GEMM_FIXED_SECONDS,
    attention_plateau,
    causal_pairs,
    compute_fraction,
    fp4_gemm_plateau,
    fp8_gemm_plateau,
    has_nvfp4_gemms,
    matmul_plateau,
    peak_16bit_flops,
)
from planner.physics.shapes import LayerShape, gemm_elements_per_rank
from planner.physics.stages import max_layers_per_stage
from planner.serving.continuous import SteadyState, steady_state
from planner.serving.inputs import (
    ACTIVATION_BYTES_PER_ELEMENT,
    EMBEDDING_BYTES_PER_ELEMENT,
    LOGIT_BYTES_PER_ELEMENT,
    InferenceArrays,
    ModelShapes,
    quantized_bytes_per_element,
)
from planner.specs.hardware import HardwareProfile

# --- Inference-specific efficiency parameters (how each was chosen: docs/inference.md) ---------

# The four values below are fitted together by benchmarks/calibrate_serving.py (mean squared log error over
# the 47 public serving rows of planner/validate/inference_cases.yaml; method and leave-one-source-out
# errors in docs/inference.md). Rerun it after changing any formula here: it exits 1 when these differ.

LAYER_OVERHEAD_SECONDS = 40e-6
"""Fixed cost per transformer layer per forward pass of the kernels the roofline terms do not
charge: launch gaps and tails of the ~8-10 non-GEMM kernels of a layer (norms, rotary, attention
setup, activation, residual adds) at a few microseconds each. The GEMMs' own fixed cost is the
shared GEMM_FIXED_SECONDS over the plateau, once per GEMM. Fitted (grid 0-100 us)."""

PASS_OVERHEAD_SECONDS = 0.0
"""Fixed cost per forward pass of one pipeline stage beyond its layers: sampling, host-side
scheduling and the synchronization that ends a step. Fitted (grid 0-2 ms): the rows leave nothing
to it once the layers' fixed costs and FIRST_TOKEN_OVERHEAD_SECONDS are charged."""

FIRST_TOKEN_OVERHEAD_SECONDS = 1.75e-3
"""Host-side latency of a request before its first token that no forward pass carries: request setup,
copying the prompt in, the first sampling and its return. Added to TTFT (not to engine time). Fitted
(grid 0-5 ms), by the batch-1 first-token latencies of the 0.5 and 0.9.0 tables."""

PER_HEAD_KV_L2_HIT_FRACTION = 0.45
"""When the decode-attention kernel streams K/V once per query head (TensorRT-LLM <= 0.6 masked
MHA, before its XQA kernel), this fraction of the repeated reads of a GQA group hits L2; the rest
comes from HBM again: traffic = 1 + (group - 1) x (1 - hit) times the cache. Fitted (grid 0-0.9)
on the GQA rows of the 0.6.1 tables; Llama-2-70B (group 8) then reads K/V 4.9 times."""

GEMM_COMPUTE_MEMORY_OVERLAP = 0.77
"""How much of the smaller of a GEMM's compute time and weight-streaming time is hidden under the
larger: time = max(c, m) + (1 - overlap) x min(c, m); 1 is the ideal roofline (time = max), 0 adds
them. Chosen from kernel measurements, not from the serving rows: vLLM PR #19566 (vllm-project/vllm,
"[Perf] Further tunings for SM100 FP8 CUTLASS kernel", table for N = K = 4096 bf16 torch GEMMs on B200)
measures 561 / 893 / 1,336 / 1,363 TFLOP/s at M = 128 / 256 / 512 / 1024 tokens. Taking m as the
memory-bound time measured at M = 16-64 (7.4 us: the 33.5 MB of weights) and c as the FLOPs at the
M = 2048 plateau (1,444 TFLOP/s), the overlap that fits those four times best (least squares on log
time) is 0.77; 0.25 (the previous, fitted value) misses them by 23% rms, 0.77 by 6%.
`benchmarks/calibrate_serving.py` recomputes it from the table; tests/serving/test_kernel_overlap.py
checks it."""

SERVING_MEMORY_BANDWIDTH_FRACTION = 0.85
"""Share of datasheet HBM bandwidth that serving's long streams (weights in decode GEMMs, the KV cache
in decode attention, activations) reach. Not training's fitted element-wise value (0.8 in the
profiles): STREAM-like kernels on H200 reach 4.00-4.15 TB/s of 4.8 (copy/mul/add/triad, 83-86%;
Azure/AI-benchmarking-guide Azure_Results/ND_H200_v5_results.md, commit 7f20e5fa), and decode
attention with paged KV 50-85% of peak once a step reads more than ~100 MB (FlashInfer, Ye et al.
MLSys 2025: 70-83%; FlashAttention-3 paged decode at 2-4k context: 54-55%, Dao-AILab/flash-attention
issue #1572). 0.85 is the STREAM figure; the fixed costs of small kernels are charged separately
(GEMM_FIXED_SECONDS, LAYER_OVERHEAD_SECONDS)."""

KV_PAGE_TOKENS = 16
"""Tokens per KV-cache page (vLLM's default block_size 16; TensorRT-LLM's paged KV cache uses
tokens_per_block). Decode attention reads whole pages: half a page of padding per sequence on
average."""

@dataclass(frozen=True)
class Rates:
    """Achievable rates of one GPU for each candidate (arrays)."""

    gemm_flop_per_s: np.ndarray
    gemm_peak_flop_per_s: np.ndarray
    gemm_overhead_flop: float  # GEMM_FIXED_SECONDS of 16-bit peak work, in FLOP
    head_flop_per_s: float  # output head: 16-bit compute
    attention_flop_per_s: float
    attention_peak_flop_per_s: float
    memory_bytes_per_s: float
    memory_peak_bytes_per_s: float
    indexer_flop_per_s: float = 0.0  # DeepSeek Sparse Attention's indexer logits (fp8 where the chip has it)
    sparse_attention_flop_per_s: float = 0.0  # its sparse MLA prefill kernel (FlashMLA's)


def rates(hw: HardwareProfile, x: InferenceArrays) -> Rates:
    """GEMMs at the matmul plateau of the compute dtype's peak (fp8 weights: fp8 tensor cores at the
    profile's fp8 plateau, efficiency.matmul_fp8, where the chip has them; NVFP4 weights: fp4 tensor cores at
    efficiency.matmul_fp4 where the chip has them (Blackwell), else weight-only like int4 (vLLM's FP4 Marlin
    kernel: 'for GPUs that lack FP4 hardware support', marlin_utils_fp4.py @ 00d52e93); int8/int4 weight-only:
    16-bit compute). Each GEMM's fixed cost is physics.kernels.GEMM_FIXED_SECONDS of 16-bit peak work."""
    eff = hw.efficiency
    p16 = peak_16bit_flops(hw)
    peaks = hw.accelerator.peak_flops_per_s
    has_fp8 = "fp8" in peaks and eff.matmul_fp8 is not None
    fp8 = x.fp8_compute & has_fp8
    fp4 = x.fp4_weights & has_nvfp4_gemms(hw)
    peak = np.where(fp4, float(peaks.get("fp4", p16)), np.where(fp8, float(peaks.get("fp8", p16)), p16))
    fraction = np.where(fp4, fp4_gemm_plateau(hw), np.where(fp8, fp8_gemm_plateau(hw), matmul_plateau(hw)))
    bw = hw.accelerator.memory_bandwidth_bytes_per_s
    return Rates(
        gemm_flop_per_s=peak * fraction,
        gemm_peak_flop_per_s=peak,
        gemm_overhead_flop=p16 * GEMM_FIXED_SECONDS,
        head_flop_per_s=p16 * matmul_plateau(hw),
        attention_flop_per_s=p16 * attention_plateau(hw),
        attention_peak_flop_per_s=p16,
        memory_bytes_per_s=bw * SERVING_MEMORY_BANDWIDTH_FRACTION,
        memory_peak_bytes_per_s=bw,
        # the indexer's logits run in fp8 in serving (DeepSeek-V3.2-Exp's fp8_index, DeepGEMM's fp8_mqa_logits)
        indexer_flop_per_s=float(peaks.get("fp8", p16)) * sparse_attention.INDEXER_EFFICIENCY * compute_fraction(hw),
        sparse_attention_flop_per_s=p16 * sparse_attention.SPARSE_MLA_FORWARD_EFFICIENCY * compute_fraction(hw),
    )


# --- Work of a pass --------------------------------------------------------------------------


@dataclass(frozen=True)
class Work:
    """What one forward pass of one micro-batch carries, for the whole replica's layers.

    tokens: new tokens (rows of every GEMM). sampled: positions whose logits are computed.
    prefill_seqs / prefill_len: sequences prefilled in this pass and their prompt length.
    decode_seqs / decode_context: sequences decoding one token, and the tokens each attends to.
    """

    tokens: np.ndarray
    sampled: np.ndarray
    prefill_seqs: np.ndarray
    prefill_len: np.ndarray
    decode_seqs: np.ndarray
    decode_context: np.ndarray

    def scaled(self, share: np.ndarray) -> Work:
        """This work split into micro-batches carrying `share` of it."""
        return Work(
            tokens=self.tokens * share,
            sampled=self.sampled * share,
            prefill_seqs=self.prefill_seqs * share,
            prefill_len=self.prefill_len,
            decode_seqs=self.decode_seqs * share,
            decode_context=self.decode_context,
        )


@dataclass(frozen=True)
class PassTime:
    """One forward pass of a micro-batch, per GPU of a TP group, every term named (seconds).

    The *_seconds terms cover all layers of the replica as if on one stage; `stage_seconds` is the
    most loaded pipeline stage's share (ceil(L/pp)/L of the layers, the output head, the pass
    overhead and one p2p send), `traversal_seconds` the time from first to last stage.
    flop and bytes_read are per GPU for all layers (the physical bounds use them).
    """

    gemm_seconds: np.ndarray
    attention_seconds: np.ndarray
    elementwise_seconds: np.ndarray
    layer_overhead_seconds: np.ndarray
    tp_comm_seconds: np.ndarray
    head_seconds: np.ndarray
    pass_overhead_seconds: np.ndarray
    pp_comm_seconds: np.ndarray
    stage_seconds: np.ndarray
    traversal_seconds: np.ndarray
    gemm_flop: np.ndarray
    attention_flop: np.ndarray
    weight_bytes_read: np.ndarray
    kv_bytes_read: np.ndarray


def _roofline(compute_seconds: np.ndarray, memory_seconds: np.ndarray) -> np.ndarray:
    """A kernel's time from its compute and memory times (see GEMM_COMPUTE_MEMORY_OVERLAP)."""
    hidden = np.minimum(compute_seconds, memory_seconds) * (1.0 - GEMM_COMPUTE_MEMORY_OVERLAP)
    return np.asarray(np.maximum(compute_seconds, memory_seconds) + hidden)


def _gemm_seconds(
    shapes: ModelShapes, layer: LayerShape, x: InferenceArrays, r: Rates, tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One layer's GEMMs: each the roofline of its compute (flop / plateau rate) and reading its weights
    once, plus its fixed cost. Routed experts: top-k of E per token
    for FLOPs; the experts any of the `tokens` picks, 1 - (1 - k/E)^tokens of them, for bytes."""
    wbytes = quantized_bytes_per_element(x)
    k_over_e = shapes.experts_per_token / shapes.experts
    touched = 1.0 - (1.0 - k_over_e) ** tokens
    seconds = flop = nbytes = np.zeros(np.shape(tokens))
    for g in layer.gemms:
        elements = gemm_elements_per_rank(g, shapes.kv_heads, x.tp)
        f = 2.0 * tokens * elements * (k_over_e if g.routed else 1.0)
        b = elements * wbytes * (touched if g.routed else 1.0)
        # the GEMM's fixed cost, (x / peak + GEMM_FIXED_SECONDS) / plateau as physics.kernels.matmul_seconds
        # charges it, is paid once per kernel outside the roofline: it hides under neither FLOPs nor weights
        fixed = GEMM_FIXED_SECONDS * r.gemm_peak_flop_per_s / r.gemm_flop_per_s
        t = _roofline(f / r.gemm_flop_per_s, b / r.memory_bytes_per_s) + fixed
        seconds, flop, nbytes = seconds + t, flop + f, nbytes + b
    return seconds, flop, nbytes


def _layer_counts(shapes: ModelShapes) -> list[tuple[LayerShape, int, bool]]:
    """The replica's layers by kind: (shape, count, Gated DeltaNet mixer)."""
    out = [(shapes.dense, shapes.num_dense_layers - shapes.num_linear_dense_layers, False)]
    if shapes.moe is not None:
        out.append((shapes.moe, shapes.num_moe_layers - shapes.num_linear_moe_layers, False))
    if shapes.dense_linear is not None and shapes.num_linear_dense_layers:
        out.append((shapes.dense_linear, shapes.num_linear_dense_layers, True))
    if shapes.moe_linear is not None and shapes.num_linear_moe_layers:
        out.append((shapes.moe_linear, shapes.num_linear_moe_layers, True))
    return out


def _attention(shapes: ModelShapes, x: InferenceArrays, r: Rates, w: Work) -> tuple[np.ndarray, ...]:
    """Attention of all layers: prefill (compute-bound flash attention over causal pairs) and decode
    (reads each sequence's cached K/V; per-head kernels re-read it for every query head of a group)."""
    heads_gpu = shapes.heads / x.tp
    window = shapes.sliding_window_tokens or shapes.sparse_topk  # sparse attention: each query's top-k keys
    g_layers, s_layers = shapes.global_layers(), shapes.sliding_window_layers
    if shapes.sparse_topk:  # every layer attends the top-k keys the indexer picks (a window's pair count)
        g_layers, s_layers = 0, shapes.num_layers
    pairs = g_layers * causal_pairs(w.prefill_len) + s_layers * causal_pairs(w.prefill_len, window)
    prefill_flop = w.prefill_seqs * pairs * 2 * heads_gpu * (shapes.attn_qk_dim + shapes.attn_v_dim)
    ctx = np.asarray(w.decode_context, dtype=float)
    seen = g_layers * ctx + s_layers * (np.minimum(ctx, window) if window else ctx)
    decode_flop = w.decode_seqs * seen * 2 * heads_gpu * (shapes.decode_qk_dim + shapes.decode_v_dim)
    kv_per_token_layer = shapes.kv_elements_per_token_per_layer_per_gpu(x.tp) * x.kv_bytes
    group = heads_gpu / shapes.kv_heads_per_gpu(x.tp)
    reread = 1 + (group - 1) * (1 - PER_HEAD_KV_L2_HIT_FRACTION)
    amplification = np.where(x.per_head_decode_attention & (not shapes.mla), reread, 1.0)
    padded = seen + shapes.num_attention_layers * KV_PAGE_TOKENS / 2  # half a page per sequence and layer
    kv_read = w.decode_seqs * padded * kv_per_token_layer
    # DeepSeek Sparse Attention's indexer scores every cached token with all its heads, on every GPU of the TP
    # group (its weights are replicated), reading the whole indexer key cache (physics/sparse_attention.py)
    indexer_flop = shapes.num_layers * shapes.indexer_flop_per_pair * (
        w.prefill_seqs * causal_pairs(w.prefill_len) + w.decode_seqs * ctx)
    index_read = w.decode_seqs * shapes.num_layers * (ctx + KV_PAGE_TOKENS / 2) * shapes.indexer_cache_bytes_per_token_per_layer
    # sparse attention's prefill runs FlashMLA's sparse kernel at its measured forward rate
    prefill_rate = r.sparse_attention_flop_per_s if shapes.sparse_topk else r.attention_flop_per_s
    seconds = prefill_flop / prefill_rate + indexer_flop / max(r.indexer_flop_per_s, 1.0) + np.maximum(
        decode_flop / r.attention_flop_per_s, (kv_read * amplification + index_read) / r.memory_bytes_per_s
    )
    la = shapes.spec.linear_attention
    if la is not None and shapes.num_linear_layers:
        # GDN layers: the prompt through the chunked kernel (physics.linear_attention, as training's forward),
        # and each decoded token's recurrent step, which reads and writes the sequence's state (memory-bound:
        # vLLM's fused_recurrent_gated_delta_rule)
        n_lin = shapes.num_linear_layers
        prefill_tokens = w.prefill_seqs * w.prefill_len
        chunked, _ = linear_attention.core_seconds(la, r.memory_peak_bytes_per_s, prefill_tokens, x.tp)
        state = 2 * w.decode_seqs * n_lin * shapes.linear_state_bytes_per_layer / x.tp
        seconds = seconds + n_lin * chunked + state / r.memory_bytes_per_s
        gdn_flop = n_lin * (prefill_tokens * linear_attention.core_flop_per_token(la)
                            + w.decode_seqs * linear_attention.recurrent_flop_per_token(la)) / x.tp
        return seconds, prefill_flop + decode_flop + indexer_flop + gdn_flop, kv_read + index_read + state / 2
    return seconds, prefill_flop + decode_flop + indexer_flop, kv_read + index_read


def forward_pass(shapes: ModelShapes, hw: HardwareProfile, x: InferenceArrays, r: Rates, w: Work) -> PassTime:
    """Cost of one forward pass of a micro-batch (see `Work`); nothing overlaps with anything else,
    as in engines that run TP all-reduces and kernels back to back on one stream."""
    tokens = np.asarray(w.tokens, dtype=float)
    gemm = flop = wbytes = np.zeros(np.broadcast_shapes(tokens.shape, x.tp.shape))
    elementwise_bytes = np.zeros_like(gemm)
    for layer, count, linear in _layer_counts(shapes):
        t, f, b = _gemm_seconds(shapes, layer, x, r, tokens)
        gemm, flop, wbytes = gemm + count * t, flop + count * f, wbytes + count * b
        if linear:
            per_gpu = shapes.elementwise_bytes_per_token_linear(x.tp, moe_layer=layer is shapes.moe_linear)
        elif layer is shapes.moe:
            per_gpu = shapes.elementwise_bytes_per_token_moe(x.tp)
        else:
            per_gpu = shapes.elementwise_bytes_per_token(x.tp)
        elementwise_bytes = elementwise_bytes + count * tokens * per_gpu
    kv_write = tokens * shapes.kv_bytes_per_token_per_layer_per_gpu(x.tp, x.kv_bytes) * shapes.num_attention_layers
    elementwise = (elementwise_bytes + kv_write) / r.memory_bytes_per_s
    attention, attention_flop, kv_read = _attention(shapes, x, r, w)
    layers = shapes.num_layers
    tp_link = group_link(hw, x.tp, 1)
    act_bytes = tokens * shapes.hidden * ACTIVATION_BYTES_PER_ELEMENT
    tp_comm = 2 * layers * all_reduce_seconds(act_bytes, x.tp, tp_link)
    # output head, split over TP by vocabulary, then the logits gathered on every TP rank
    head_flop = 2.0 * w.sampled * shapes.vocab * shapes.hidden / x.tp
    head_bytes = shapes.head_matrix_params() * EMBEDDING_BYTES_PER_ELEMENT / x.tp  # tied or not, V x h read
    head = _roofline(head_flop / r.head_flop_per_s, head_bytes / r.memory_bytes_per_s) + (
        GEMM_FIXED_SECONDS * r.attention_peak_flop_per_s / r.head_flop_per_s)
    head = head + all_gather_seconds(w.sampled * shapes.vocab * LOGIT_BYTES_PER_ELEMENT, x.tp, tp_link)
    overhead = layers * LAYER_OVERHEAD_SECONDS + np.zeros_like(gemm)
    pp_link = group_link(hw, x.pp, x.tp)
    pp_comm = np.where(x.pp > 1, p2p_seconds(act_bytes, pp_link), 0.0)
    layer_part = gemm + attention + elementwise + overhead + tp_comm
    share = max_layers_per_stage(shapes.num_layers, x.pp) / layers
    stage = share * layer_part + head + PASS_OVERHEAD_SECONDS + pp_comm
    traversal = layer_part + head + x.pp * PASS_OVERHEAD_SECONDS + (x.pp - 1) * pp_comm
    return PassTime(
        gemm_seconds=gemm,
        attention_seconds=attention,
        elementwise_seconds=elementwise,
        layer_overhead_seconds=overhead,
        tp_comm_seconds=tp_comm,
        head_seconds=head,
        pass_overhead_seconds=x.pp * PASS_OVERHEAD_SECONDS + np.zeros_like(gemm),
        pp_comm_seconds=(x.pp - 1) * pp_comm,
        stage_seconds=stage,
        traversal_seconds=traversal,
        gemm_flop=flop + head_flop,
        attention_flop=attention_flop,
        weight_bytes_read=wbytes + head_bytes,
        kv_bytes_read=kv_read,
    )


# --- Serving figures ------------------------------------------------------------------------


@dataclass(frozen=True)
class ServingTimes:
    """Latency and throughput of one batching discipline (per replica unless said per GPU).

    ttft_seconds / tpot_seconds are means; the *_p50/_p90/_p99 fields their percentiles over requests
    (static batching: every request of the batch alike). in_flight: requests in the system per replica;
    request_rate: requests/s per replica; stable: the engine keeps up with the load (else inf latencies).
    """

    ttft_seconds: np.ndarray
    tpot_seconds: np.ndarray
    e2e_seconds: np.ndarray
    output_tokens_per_second: np.ndarray
    output_tokens_per_second_per_gpu: np.ndarray
    ttft_p50_seconds: np.ndarray
    ttft_p90_seconds: np.ndarray
    ttft_p99_seconds: np.ndarray
    tpot_p50_seconds: np.ndarray
    tpot_p90_seconds: np.ndarray
    tpot_p99_seconds: np.ndarray
    in_flight: np.ndarray
    request_rate: np.ndarray
    stable: np.ndarray

    def percentile(self, name: str, q: int) -> np.ndarray:
        """`ttft` or `tpot` at percentile 50, 90 or 99; 0 means the mean."""
        return getattr(self, f"{name}_seconds" if q == 0 else f"{name}_p{q}_seconds")  # type: ignore[no-any-return]


@dataclass(frozen=True)
class InferenceTimes:
    """Times of each serving layout.

    static: the whole batch (= concurrency) prefilled in passes of at most max_batched_tokens,
    then decoded together; TPOT at the mean context over the decode, S + O/2.
    continuous: steady state of a continuously batched engine (planner.serving.continuous) with
    `concurrency` clients in a closed loop, or requests arriving at `request_rate`.
    prefill / decode: one static prefill pass and one static decode micro-batch, term by term;
    iteration: the mean continuous-batching iteration, term by term; steady: the steady state.
    """

    prefill: PassTime
    decode: PassTime
    iteration: PassTime
    prefill_passes: np.ndarray
    decode_micro_batches: np.ndarray
    prefill_seconds: np.ndarray
    static: ServingTimes
    continuous: ServingTimes
    steady: SteadyState


def _pipelined(p: PassTime, rounds: np.ndarray) -> np.ndarray:
    """`rounds` micro-batches through the stages, one after another: the first crosses every stage
    (the traversal), each later one leaves the most loaded stage one stage slot after the one before."""
    return np.asarray(p.traversal_seconds + (rounds - 1) * p.stage_seconds)


def _round(p: PassTime, micro_batches: np.ndarray) -> np.ndarray:
    """One token for each of `micro_batches` (at most pp) micro-batches: the most loaded stage runs them
    all (micro_batches stage slots), and none can start its next token before its last crossed every
    stage (the traversal). With as many micro-batches as stages that is pp stage slots; with fewer (one
    sequence on pp stages) the traversal: a single micro-batch cannot keep the pipeline busy, but it
    does not wait on stages it is not in either. This is the pipeline bubble of decoding: the stages
    idle for (pp - micro_batches) stage slots per round."""
    return np.asarray(np.maximum(micro_batches * p.stage_seconds, p.traversal_seconds))


def _static(ttft: np.ndarray, tpot: np.ndarray, x: InferenceArrays, c: np.ndarray) -> ServingTimes:
    e2e = ttft + (x.output_len - 1) * tpot
    tokens_per_s = c * x.output_len / e2e
    return ServingTimes(
        ttft_seconds=ttft, tpot_seconds=tpot, e2e_seconds=e2e, output_tokens_per_second=tokens_per_s,
        output_tokens_per_second_per_gpu=tokens_per_s / x.gpus_per_replica,
        ttft_p50_seconds=ttft, ttft_p90_seconds=ttft, ttft_p99_seconds=ttft,
        tpot_p50_seconds=tpot, tpot_p90_seconds=tpot, tpot_p99_seconds=tpot,
        in_flight=c + 0.0 * ttft, request_rate=c / e2e, stable=np.ones(np.shape(e2e), dtype=bool),
    )


def inference_times(shapes: ModelShapes, hw: HardwareProfile, x: InferenceArrays) -> InferenceTimes:
    r = rates(hw, x)
    c = x.concurrency.astype(float)
    s = x.input_len.astype(float)
    o = x.output_len.astype(float)
    budget = x.max_batched_tokens.astype(float)
    zeros = np.zeros(np.broadcast_shapes(c.shape, x.tp.shape))
    mean_context = s + o / 2
    # static prefill: packed prompts in chunks; enough micro-batches to fill the pipeline
    passes = np.maximum(np.ceil(c * s / budget), np.minimum(c, x.pp))
    prefill = forward_pass(shapes, hw, x, r, Work(c * s / passes, c / passes, c / passes, s, zeros, zeros))
    prefill_seconds = _pipelined(prefill, passes)
    # static decode: the batch split into min(c, pp) micro-batches, one token each per round
    micro = np.minimum(c, x.pp)
    decode = forward_pass(shapes, hw, x, r, Work(c / micro, c / micro, zeros, s, c / micro, mean_context))
    tpot = _round(decode, micro)
    static = _static(prefill_seconds + FIRST_TOKEN_OVERHEAD_SECONDS, tpot, x, c)

    def work(decoding: np.ndarray, prefill_tokens: np.ndarray) -> Work:
        prompts = prefill_tokens / s
        return Work(decoding + prefill_tokens, decoding + prompts, prompts, s, decoding, mean_context)

    def iteration_seconds(decoding: np.ndarray, prefill_tokens: np.ndarray) -> np.ndarray:
        """The running batch in as many micro-batches as the pipeline has stages (fewer when it holds fewer).
        Decodes split evenly; a prompt's chunk is not split, so one micro-batch carries up to a prompt more
        prefill than the mean. With pp > 1 that heavy micro-batch sets the cycle: it must cross every stage
        before its next iteration (the traversal), while the others wait behind it at each stage - the
        pipeline bubble of non-uniform micro-batches (Sarathi-Serve, Agrawal et al. OSDI 2024, Sec. 3.3)."""
        m = np.clip(decoding + prefill_tokens / s, 1.0, x.pp)
        heavy_p = np.minimum(prefill_tokens, prefill_tokens / m + np.minimum(prefill_tokens, s) * (1 - 1 / m))
        light_p = (prefill_tokens - heavy_p) / np.maximum(m - 1, 1e-9)
        heavy = forward_pass(shapes, hw, x, r, work(decoding / m, heavy_p))
        if np.all(x.pp == 1):
            return heavy.traversal_seconds
        light = forward_pass(shapes, hw, x, r, work(decoding / m, light_p))
        busy = (m - 1) * light.stage_seconds + heavy.stage_seconds  # the most loaded stage runs every micro-batch
        return np.asarray(np.maximum(busy, heavy.traversal_seconds))

    steady = steady_state(iteration_seconds, concurrency=c, request_rate=x.request_rate, input_len=s,
                          output_len=o, max_batched_tokens=budget, first_token_seconds=FIRST_TOKEN_OVERHEAD_SECONDS)
    tokens = np.where(steady.stable, steady.decoding, 0.0)
    prefill_tokens = np.where(steady.stable, steady.prefill_tokens_per_iteration, 0.0)
    m_iter = np.clip(tokens + prefill_tokens / s, 1.0, x.pp)
    iteration = forward_pass(shapes, hw, x, r, work(tokens, prefill_tokens).scaled(1 / m_iter))
    with np.errstate(invalid="ignore"):  # one output token: no inter-token time, even when it is unbounded (inf)
        e2e = steady.ttft_seconds + np.where(o > 1, (o - 1) * steady.tpot_seconds, 0.0)
    tokens_per_s = np.where(steady.stable, steady.request_rate * o, 0.0)
    q = steady.ttft_percentile_seconds
    qt = steady.tpot_percentile_seconds
    continuous = ServingTimes(
        ttft_seconds=steady.ttft_seconds, tpot_seconds=steady.tpot_seconds, e2e_seconds=e2e,
        output_tokens_per_second=tokens_per_s, output_tokens_per_second_per_gpu=tokens_per_s / x.gpus_per_replica,
        ttft_p50_seconds=q[50], ttft_p90_seconds=q[90], ttft_p99_seconds=q[99],
        tpot_p50_seconds=qt[50], tpot_p90_seconds=qt[90], tpot_p99_seconds=qt[99],
        in_flight=steady.in_flight, request_rate=steady.request_rate, stable=steady.stable,
    )
    return InferenceTimes(
        prefill=prefill,
        decode=decode,
        iteration=iteration,
        prefill_passes=passes,
        decode_micro_batches=micro,
        prefill_seconds=prefill_seconds,
        static=static,
        continuous=continuous,
        steady=steady,
    )
