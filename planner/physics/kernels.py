"""Kernel times shared by training and serving: GEMMs on the matmul efficiency curve of their dtype,
the FP8 casts around them, memory-bound traffic, and the fused attention core on its own curve.

Every function broadcasts over numpy arrays. The plateaus are the hardware profile's (its `efficiency`
block, with a note on how each was chosen); the constants here are properties of the kernels
themselves, one value for every chip, each with its source.
"""

from __future__ import annotations

import math

import numpy as np

from planner.specs.hardware import HardwareProfile
from planner.specs.layout import Fp8RecipeCode, LayoutArrays
from planner.specs.model import ModelSpec

# --- GEMMs --------------------------------------------------------------------------------------------

GEMM_FIXED_SECONDS = 7.5e-6
"""Fixed cost of one GEMM, in seconds of peak-rate work: a GEMM of x FLOP takes
(x / peak + GEMM_FIXED_SECONDS) / plateau. It stands for the launch, the prologue and the last,
partly filled wave of tiles, which no FLOP count sees. Set from the measured H100 bf16 square GEMMs
(zzc0721/torch-performance-test-data issue #79, torch 2.7: 177, 677, 789 TFLOP/s at 1,024, 2,048,
4,096 cubed, against a best-shape 794.5): solving efficiency = plateau x x / (x + peak x T0) for T0
gives 7.6 us at 1,024 cubed, 3.1 us at 2,048 and 1.5 us at 4,096 (wave quantization makes it fall with
size). 7.5 us is the 1,024-cubed value, the size of serving's prefill and decode GEMMs and of thin
training shards; serving's TensorRT-LLM cases bound it from below (at 3 or 5 us the Llama-2-70B tp 4
first token at 128 tokens comes out 25.7% fast, outside its tolerance). Held, not fitted: the published
training runs barely constrain it (benchmarks/calibrate_training.py fits moved between 0 and 30 us
with the choice of sources, at under 1% change of the objective)."""


def causal_pairs(new_tokens: np.ndarray, window: int = 0) -> np.ndarray:
    """Query-key pairs a causal prefill of `new_tokens` computes (token i sees i tokens, itself
    included; at most `window` under a sliding window): n(n+1)/2, or W(W+1)/2 + (n - W) W."""
    n = np.asarray(new_tokens, dtype=float)
    full: np.ndarray = n * (n + 1) / 2
    if not window:
        return full
    w = float(window)
    return np.asarray(np.where(n <= w, full, w * (w + 1) / 2 + (n - w) * w))


def window_work_fraction(model: ModelSpec, seq_len: np.ndarray) -> np.ndarray:
    """Share of the full causal attention work that the model's layers do, averaged over its layers:
    a sliding-window layer computes causal_pairs(s, window) of the s(s+1)/2 pairs (Mistral v0.1, Gemma 2/3,
    gpt-oss). Flash kernels with a window skip the rest (FlashAttention-2's window_size); 1 without windows.
    Under DeepSeek Sparse Attention every layer keeps each query's top-k keys: the pairs of a window of top-k
    (physics/sparse_attention.py)."""
    s = np.asarray(seq_len, dtype=float)
    if model.sparse_attention is not None:
        return np.asarray(causal_pairs(s, model.sparse_attention.topk) / causal_pairs(s))
    sliding = sliding_layer_share(model)
    if not sliding or model.sliding_window_tokens is None:
        return np.ones_like(s)
    ratio = causal_pairs(s, model.sliding_window_tokens) / causal_pairs(s)
    return np.asarray(1.0 - sliding + sliding * ratio)


def sliding_layer_share(model: ModelSpec) -> float:
    """Share of the model's layers that attend within a sliding window (0 without windows)."""
    if not model.sliding_window_layers or model.sliding_window_tokens is None:
        return 0.0
    return model.sliding_window_layers / model.num_attention_layers  # windows are on softmax-attention layers


def sliding_window_block(model: ModelSpec) -> float:
    """The causal block length at which a sliding-window layer's flash kernel runs on the attention curve: 2 W.

    The curve (attention_efficiency) is plateau x s / (s + s_half) for a causal block of s keys, whose queries
    see s/2 keys on average: its time is (s/2 + s_half/2) per query, a fixed cost of s_half/2 keys per query
    beside the keys it computes. A window of W keys has every query see W keys at the same fixed cost
    (a query tile loops over the W/tile key tiles of its band, the diagonal one masked), which is the causal
    curve at s = 2 W. Measured in the same direction, not fitted: FlashAttention-4's causal-left local kernel on
    B300 (Dao-AILab/flash-attention PR #2749, hd 256, 65,536 tokens, window 1,023: 6.34 ms forward + backward,
    about 0.30 PFLOP/s counting the window's pairs) runs at a quarter of the same family's causal kernels at
    8,192 keys (PR #2046, sm100, hd 128: 1,409 TFLOP/s forward, 1,105 backward, 1.18 PFLOP/s together); the
    head dims differ, so this bounds the direction, not the size. Infinite without a window."""
    if not sliding_layer_share(model):
        return float("inf")
    return 2.0 * float(model.sliding_window_tokens or 0)


def peak_16bit_flops(hw: HardwareProfile) -> float:
    """Dense bf16 peak (fp16 on chips without bf16, e.g. V100)."""
    peaks = hw.accelerator.peak_flops_per_s
    return peaks.get("bf16", peaks.get("fp16", 0.0))


def compute_fraction(hw: HardwareProfile) -> float:
    """Sustained throughput of compute-bound kernels under the board's power limit, as a fraction of the chip
    at its nominal power (the profile's accelerator.power_limit; 1 without one). It scales every plateau of
    a tensor-core kernel - the GEMMs, 16-bit and fp8, and the flash-attention core - and not the memory-bound
    kernels or the links: the governor throttles the SM clock to stay under the limit, which only slows the
    kernels whose time that clock sets."""
    limit = hw.accelerator.power_limit
    return float(limit.compute_fraction) if limit is not None else 1.0


def matmul_plateau(hw: HardwareProfile) -> float:
    """Plateau fraction of the 16-bit peak that large 16-bit GEMMs reach on this system: the profile's
    efficiency.matmul.peak_fraction (measured at the chip's nominal power) x compute_fraction."""
    return float(hw.efficiency.matmul.peak_fraction) * compute_fraction(hw)


def fp8_gemm_plateau(hw: HardwareProfile) -> float:
    """Plateau fraction of the fp8 peak that large fp8 GEMMs reach (the profile's efficiency.matmul_fp8 x
    compute_fraction; nan on a chip without fp8 tensor cores, where no fp8 layout is allowed)."""
    eff = hw.efficiency.matmul_fp8
    return eff.fraction * compute_fraction(hw) if eff is not None else float("nan")


def fp4_gemm_plateau(hw: HardwareProfile) -> float:
    """Plateau fraction of the fp4 peak that large NVFP4 GEMMs reach (the profile's efficiency.matmul_fp4 x
    compute_fraction; nan where the profile measures none, where no fp4 layout is allowed)."""
    eff = hw.efficiency.matmul_fp4
    return eff.fraction * compute_fraction(hw) if eff is not None else float("nan")


def has_nvfp4_gemms(hw: HardwareProfile) -> bool:
    """The profile has an fp4 peak and measures its NVFP4 GEMMs (efficiency.matmul_fp4): NVFP4 runs on its tensor
    cores."""
    return "fp4" in hw.accelerator.peak_flops_per_s and hw.efficiency.matmul_fp4 is not None


def gemm_peak_flops(hw: HardwareProfile, lay: LayoutArrays) -> np.ndarray:
    """Peak for the layer GEMMs: fp8 where the layout trains in fp8, fp4 under NVFP4 (the attention core, the
    router and the LM head stay 16-bit), which is also the peak MFU is measured against."""
    peaks = hw.accelerator.peak_flops_per_s
    quantized = np.where(lay.fp4, peaks.get("fp4", np.nan), peaks.get("fp8", np.nan))
    return np.where(lay.fp8, quantized, peak_16bit_flops(hw))


def gemm_plateau(hw: HardwareProfile, lay: LayoutArrays) -> np.ndarray:
    """Plateau efficiency of the layer GEMMs, of their own dtype's peak (see gemm_peak_flops)."""
    return np.where(lay.fp8, np.where(lay.fp4, fp4_gemm_plateau(hw), fp8_gemm_plateau(hw)), matmul_plateau(hw))


def matmul_seconds(
    hw: HardwareProfile, flop: np.ndarray, peak: np.ndarray | float, plateau: np.ndarray | float | None = None
) -> np.ndarray:
    """One GEMM of `flop` FLOP: (flop / peak + GEMM_FIXED_SECONDS) / plateau. `plateau` defaults to the
    16-bit matmul plateau (matmul_plateau); fp8 GEMMs pass gemm_plateau's."""
    if plateau is None:
        plateau = matmul_plateau(hw)
    flop = np.asarray(flop, dtype=float)
    return np.where(flop > 0, (flop / peak + GEMM_FIXED_SECONDS) / plateau, 0.0)


def gemm_roofline_seconds(
    hw: HardwareProfile, flop: np.ndarray, nbytes: np.ndarray, peak: np.ndarray | float,
    plateau: np.ndarray | float | None = None,
) -> np.ndarray:
    """One GEMM that moves `nbytes` of HBM traffic (its two operands read once, its output written once): the
    larger of its compute time and its memory time, plus the fixed cost, i.e. max(flop / (peak x plateau),
    nbytes / streaming bandwidth) + GEMM_FIXED_SECONDS / plateau. The roofline (Williams, Waterman and Patterson
    2009, "Roofline: an insightful visual performance model", CACM 52(4), Fig. 1: attainable FLOP/s = min(peak,
    bandwidth x operational intensity)), with the bandwidth every memory-bound kernel gets here (memory_seconds).

    Where the GEMM's intensity (FLOP per byte) is above the chip's ridge this is matmul_seconds exactly: the
    plateau was measured on large GEMMs whose traffic already hides under their math. Below the ridge the floor
    binds: a thin GEMM (a TP shard of a K or V projection run as its own Linear, 128 columns at TP 8 for Llama 3)
    reads its whole input for few FLOPs. torchao prices fp8 GEMMs the same way (pytorch/ao
    torchao/testing/training/roofline_utils.py @ 36027d82, get_individual_gemm_time_sympy: the maximum of the
    compute time, the time to read both operands and write the output, and a launch floor). Serving counts the
    weights alone and a softer knee (serving.time GEMM_COMPUTE_MEMORY_OVERLAP); training GEMMs read activations
    as large as their weights, which this counts."""
    flop = np.asarray(flop, dtype=float)
    compute = matmul_seconds(hw, flop, peak, plateau)
    fixed = GEMM_FIXED_SECONDS / (matmul_plateau(hw) if plateau is None else np.asarray(plateau))
    return np.asarray(np.where(flop > 0, np.maximum(compute, memory_seconds(hw, nbytes) + fixed), 0.0))


GROUPED_GEMM_PER_GROUP_SECONDS = 0.75e-6
"""What each further expert adds to a grouped expert GEMM, in seconds of peak-rate work: a grouped GEMM of g
experts takes (sum of flop / peak + GEMM_FIXED_SECONDS + (g - 1) x this) / plateau. Transformer Engine's
GroupedLinear issues one cuBLASLt GEMM per expert over four streams, so the experts' tails overlap and the
group pays about one fixed cost: solving the H100 bf16 figures of NVIDIA/TransformerEngine PR #2045 (TE 2.7,
CUDA 12.9: 627.9 TFLOP/s for 8 experts of 4,096 x 768 x 2,048 and 553.9 for 16 of 2,048 x 768 x 2,048)
with the H100 plateau then in use, 0.67 (0.688 since the 2026-12 refit; not re-solved), gives 0.70 and 0.82 us
per further expert; 0.75 us taken. Counted, not fitted."""


def grouped_matmul_seconds(
    hw: HardwareProfile, flop_per_group: np.ndarray, groups: np.ndarray | float, peak: np.ndarray | float,
    plateau: np.ndarray | float | None = None, nbytes: np.ndarray | float = 0.0,
) -> np.ndarray:
    """`groups` GEMMs of `flop_per_group` FLOP each, issued as one grouped GEMM (the experts of a rank):
    (groups x flop / peak + GEMM_FIXED_SECONDS + (groups - 1) x GROUPED_GEMM_PER_GROUP_SECONDS) / plateau, its
    math on the roofline of the `nbytes` all the groups move (gemm_roofline_seconds: experts with few tokens each read
    their whole weights for them)."""
    if plateau is None:
        plateau = matmul_plateau(hw)
    flop = np.asarray(flop_per_group, dtype=float)
    g = np.asarray(groups, dtype=float)
    seconds = gemm_roofline_seconds(hw, g * flop, np.asarray(nbytes, dtype=float), peak, plateau) + (
        np.maximum(g - 1, 0) * GROUPED_GEMM_PER_GROUP_SECONDS / plateau)
    return np.asarray(np.where((flop > 0) & (g > 0), seconds, 0.0))


# --- FP8 casts ----------------------------------------------------------------------------------------

FP8_CAST_BYTES_PER_ELEMENT = 6.0
"""HBM bytes the per-tensor current-scaling recipe (Fp8RecipeCode.TENSORWISE: "FP8-CS" in NeMo and
Megatron-Bridge, Megatron-LM --fp8-recipe tensorwise, torchao's dynamic tensorwise float8) moves per element of
a GEMM input it quantizes (an activation in the forward, an output gradient in the backward): read the bf16
tensor once for its amax (FP8_AMAX_PASS_BYTES_PER_ELEMENT) and once to cast it (2 + 2), write the fp8 copy and
the fp8 transposed copy that the backward's other GEMM needs (1 + 1): Hopper's fp8 tensor cores take only the
TN layout, so Transformer Engine's fused cast-transpose writes both. Blackwell's (sm100) take every layout:
there Transformer Engine's per-tensor quantizers write the one copy and no transpose
(FP8_TRANSPOSE_BYTES_PER_ELEMENT, dropped where the profile's accelerator.fp8_gemm_any_layout). The other
recipes: fp8_cast_bytes_per_element. torchao's float8 README measures this overhead as memory-bound and
positive for every shape (H100: a 1,024 x 2,048 x 1,024 float8 linear runs at 0.80x of bf16, a 4,096 x 8,192 x
16,384 one at 1.39x; pytorch/ao torchao/float8/README.md, "Performance"). Counted, not fitted."""

FP8_AMAX_PASS_BYTES_PER_ELEMENT = 2.0
"""The read of the bf16 tensor that current scaling makes for its amax before it can cast (Transformer
Engine's Float8CurrentScalingQuantizer: nvte_compute_amax, then the scale, then the cast), inside
FP8_CAST_BYTES_PER_ELEMENT. Delayed scaling (Fp8RecipeCode.DELAYED, Megatron-LM's --fp8-recipe default;
Transformer Engine's DelayedScaling) casts with a scale taken from the amax history of earlier steps and records
the tensor's amax in the same kernel that casts it, so it reads the tensor once: 4 bytes on Hopper, 3 on
Blackwell."""

FP8_TRANSPOSE_BYTES_PER_ELEMENT = 1.0
"""The transposed fp8 copy's write inside FP8_CAST_BYTES_PER_ELEMENT, which chips whose fp8 GEMMs take
non-TN layouts skip: Transformer Engine (NVIDIA/TransformerEngine transformer_engine/pytorch/csrc/
quantizer.cpp, the delayed- and current-scaling quantizers: with_transpose = columnwise_usage &&
!is_non_tn_fp8_gemm_supported; transformer_engine/pytorch/utils.py is_non_tn_fp8_gemm_supported: compute
capability 10.x or >= 13.0, i.e. B200/GB200/B300/GB300, not Hopper 9.0 or Ada 8.9)."""

FP8_BLOCK_SCALED_BYTES_PER_ELEMENT = 2.0 + 1.0 + 1.0 + 2.0 / 32.0
"""The block-scaled recipes (Fp8RecipeCode.MXFP8: a power-of-two E8M0 scale byte per 32 elements, OCP MX v1.0;
Fp8RecipeCode.BLOCKWISE: an fp32 scale per 1 x 128 activation block, DeepSeek-V3 technical report Sec. 3.3.2)
quantize in one pass, the scales of each block taken inside the kernel that casts it (Transformer Engine's
MXFP8Quantizer and Float8BlockQuantizer: one kernel writes the rowwise and the columnwise copies): read the
bf16 tensor once (2), write the rowwise and the columnwise fp8 copies (1 + 1: the scales follow the blocks
along each direction, so the backward's copy is a quantization of its own on every chip, not a transpose),
and a scale of 1/32 byte per element for each (1 byte per 32 for MX, 4 bytes per 128 for 1 x 128 blocks).
The same per weight element (blockwise weights use 128 x 128 blocks, whose scales are smaller still)."""

FP8_WEIGHT_CAST_BYTES_PER_ELEMENT = 6.0
"""The same per weight element, once per step: engines cast a weight to fp8 on its first
micro-batch and reuse the copy (Transformer Engine's is_first_microbatch weight caching; torchao's
float8 all-gather casts before the gather). Amortised over the step's micro-batches. Less the
transpose's byte on chips that take every layout, and the amax pass under delayed scaling, as for the
activations."""


FP8_ROWWISE_CAST_BYTES_PER_ELEMENT = 8.0
"""HBM bytes torchao's rowwise recipe (Fp8RecipeCode.ROWWISE; torchao Float8LinearConfig.from_recipe_name("rowwise"))
moves per element of a GEMM input it quantizes (an activation, an output gradient). Its scales run along one axis,
so the backward's GEMM needs the tensor cast again along the other: one kernel reads the bf16 tensor and writes the
fp8 copy scaled per row and a transposed bf16 copy (2 + 1 + 2), a second reads that copy and writes the fp8 copy
scaled per column (2 + 1). Counted as torchao counts it for its own roofline (pytorch/ao
torchao/testing/training/roofline_utils.py @ 36027d82, get_tensor_memory_traffic_ovhd_s, rowwise, input and
grad_output: 'we can't fuse 1 and 2 because that would require loading the entire tensor to shared memory'); the
same on every chip (the second cast is a new quantization, not a transpose). Counted, not fitted."""

FP8_ROWWISE_WEIGHT_CAST_BYTES_PER_ELEMENT = 10.0
"""The same per weight element: the forward's row-scaled cast (read 2, write 1), the backward's transpose of the bf16
weight (read 2, write 2) and its column-scaled cast (read 2, write 1) (the same torchao roofline, rowwise, weight).
Amortised over the step's micro-batches as FP8_WEIGHT_CAST_BYTES_PER_ELEMENT is."""

FP8_ROWWISE_FORWARD_GEMM_EFFICIENCY = 0.95
"""Speed of PyTorch's rowwise-scaled fp8 GEMM (torch._scaled_mm with a scale per row: a CUTLASS kernel of PyTorch's
own, with fast accumulation, which torchao's rowwise recipe runs in the forward) relative to the cuBLAS per-tensor
GEMM at the same shape on H100: 'most shapes are within 90-100% of tensor-wise efficiency, but there's a long tail
going down to 50%' (pytorch/pytorch issue #147971, after the tile heuristics of PR #134781); FBGEMM's copy of the
kernel measured 0.91-1.00 of cuBLAS on four Llama shapes (pytorch/FBGEMM PR #2764). 0.95, the middle of the first
range; not fitted. The backward's two GEMMs accumulate in full precision, where the rowwise kernel is slower
still, so torchao runs them as cuBLAS per-tensor GEMMs with unit scales and multiplies the output by the two
operands' scales afterwards (pytorch/ao torchao/float8/float8_ops.py addmm_float8_unwrapped @ 6243040: 'we'd rather
use the tensorwise cuBLAS-based kernel and do the scaling manually afterwards'): those run at the per-tensor speed,
and the scaling pass is FP8_ROWWISE_RESCALE_BYTES_PER_ELEMENT of traffic per output element."""

FP8_ROWWISE_RESCALE_BYTES_PER_ELEMENT = 4.0
"""Traffic of that scaling pass per element of a backward GEMM's 16-bit output: read it, write it scaled (2 + 2)."""

FP8_TORCHAO_WEIGHT_CAST_BYTES_PER_ELEMENT = 8.0
"""HBM bytes per weight element, per micro-batch, of the weight quantization of an engine that does not cache it
across micro-batches (EngineProfile kernels.fp8_weight_cast_cached false: torchao's Float8Linear) under the
per-tensor recipe: the amax pass (read 2), the forward's cast (read 2, write 1) and the backward's own cast along the
other axis (read 2, write 1), as torchao counts it for its roofline (pytorch/ao torchao/testing/training/
roofline_utils.py @ 36027d82, get_tensor_memory_traffic_ovhd_s, tensorwise, weight). Its rowwise recipe moves
FP8_ROWWISE_WEIGHT_CAST_BYTES_PER_ELEMENT per micro-batch on the same terms. Counted, not fitted."""

FP8_TORCHAO_BACKWARD_WEIGHT_CAST_BYTES_PER_ELEMENT = 3.0
"""The backward's share of FP8_TORCHAO_WEIGHT_CAST_BYTES_PER_ELEMENT: its own cast (read 2, write 1); the amax pass and
the forward's cast (5) run in the forward, and again in a recomputed forward."""

FP8_ROWWISE_FORWARD_WEIGHT_CAST_BYTES_PER_ELEMENT = 3.0
"""The forward's share of FP8_ROWWISE_WEIGHT_CAST_BYTES_PER_ELEMENT: the row-scaled cast (read 2, write 1); the
transpose and the column-scaled cast (7) run in the backward."""

FP8_TORCHAO_MX_WEIGHT_CAST_BYTES_PER_ELEMENT = 6.0
"""torchao's MX recipes (Fp8RecipeCode.MXFP8 under torchtitan's MX converter) per weight element and micro-batch: a
cast along each axis, each reading the bf16 weight and writing its fp8 copy (2 + 1, the scale byte per 32 elements not
counted), one in the forward and one in the backward, as torchao's roofline counts it ("we can't profitably fuse kernel
1 and kernel 2", roofline_utils.py @ 36027d82, mxfp8_cublas)."""

FP8_GATHERED_WEIGHT_TRANSPOSE_BYTES_PER_ELEMENT = 2.0
"""Under torchao's float8 FSDP all-gather (EngineProfile optimizer.fp8_params_held false) the gathered weight arrives
in fp8, laid out row-major; the backward's input-gradient GEMM needs it column-major, so torch._scaled_mm's wrapper
copies it transposed (float8_ops.py @ 36027d82, float8_mm: b_data.t().contiguous().t() when row-major): read 1,
write 1 per element, per micro-batch. The forward takes the transposed view as it is."""

FP8_SHARD_AMAX_PASSES_PER_STEP = 1.0
"""torchao's precompute_float8_dynamic_scale_for_fsdp: one torch._foreach_norm(inf) over every rank's weight shards
after the optimizer step and one all-reduce of the stacked amaxes (torchao/float8/fsdp_utils.py @ 36027d82): one read
of the shards per step. Each all-gather then casts the rank's shard with that scale (fsdp_pre_all_gather: read the
shard, write 1 byte per element)."""


NVFP4_BLOCK_ELEMENTS = 16
"""Elements per NVFP4 scale: Transformer Engine's NVFP4BlockScaling (transformer_engine/common/recipe/__init__.py
@ d0067d0); NVFP4 checkpoints alike (vLLM's FP4 kernels take group size 16,
vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py @ 00d52e93)."""

NVFP4_COPY_BYTES_PER_ELEMENT = 0.5 + 1.0 / NVFP4_BLOCK_ELEMENTS
"""One NVFP4 copy of a tensor: a 4-bit E2M1 value per element and an E4M3 scale byte per NVFP4_BLOCK_ELEMENTS (the
fp32 scale per tensor is negligible). What a GEMM input kept for the backward, an NVFP4 training weight and an NVFP4
serving weight take per element."""

NVFP4_WEIGHT_CAST_BYTES_PER_ELEMENT = 2.0 + 2.0 + 2.0 * NVFP4_COPY_BYTES_PER_ELEMENT
"""NVFP4 quantization of a weight, once per step (as FP8_WEIGHT_CAST_BYTES_PER_ELEMENT): Transformer Engine's
weight quantizer takes the tensor's amax (nvte_compute_amax: read the bf16 weight, 2), then casts it with 2D 16 x 16
block scales (nvte_quantize_v2: read it again, 2) into the rowwise copy and the columnwise one (2 x
NVFP4_COPY_BYTES_PER_ELEMENT: the fp4 GEMMs take only the TN layout, so the backward's copy is stored transposed).
No Hadamard transform and no stochastic rounding on weights (the recipe's defaults). Counted: 5.125."""

NVFP4_CAST_BYTES_PER_ELEMENT = 6.25
"""HBM-equivalent bytes of NVFP4 quantization per GEMM-input element (an activation in the forward, an output
gradient in the backward), measured. Transformer Engine (@ d0067d0, quantize_impl) runs a pass for the amax of the
tensor and of its 16-point random-Hadamard transform (nvte_hadamard_transform_amax, read 2), then one fused kernel
that writes the rowwise copy and the Hadamard-transformed columnwise copy for the weight-gradient GEMM
(nvte_quantize_with_hadamard_transform, read 2, write 2 x NVFP4_COPY_BYTES_PER_ELEMENT), with stochastic rounding on
gradients, and a pass that swizzles the scales for the GEMM: about 5.4 bytes counted. Transformer Engine's GEMM
profiling tutorial (docs/examples/gemm_profiling/gemm_profiling.rst @ d0067d0; B300, hidden 4,096, FFN 16,384, 15,872
tokens, the 12 GEMMs of a layer) measures the quantization as the autocast time less the pre-quantized time: NVFP4
6.453 - 3.764 = 2.689 ms per layer. Its GEMMs quantize 2.48e9 elements (each GEMM both operands: 4.55e8 inputs and
2.01e8 weight elements per pass, 5.85e8 output-gradient elements in dgrad and wgrad), which at this model's streaming
rate (70% of 8 TB/s, EfficiencySpec.memory_bandwidth) is 6.1 bytes each; the weights' 5.125 counted above leave 6.25
for the activations and gradients: the transform's and the rounding's arithmetic beyond the bytes counted. The same
subtraction on that table gives MXFP8 1.823 ms = 4.1 bytes (FP8_BLOCK_SCALED_BYTES_PER_ELEMENT counts 4.06) and FP8
current scaling 2.335 ms = 5.3 (counted 5.0 on Blackwell): the method reproduces the recipes counted byte by byte."""


def fp8_cast_bytes_per_element(
    hw: HardwareProfile, recipe: np.ndarray | int = Fp8RecipeCode.TENSORWISE, *, weight: bool = False
) -> np.ndarray:
    """HBM bytes per quantized GEMM-input element under each candidate's fp8 recipe (Fp8RecipeCode):
    per-tensor recipes FP8_CAST_BYTES_PER_ELEMENT (or the weights' FP8_WEIGHT_CAST_BYTES_PER_ELEMENT), less the
    transposed copy where the chip's fp8 GEMMs take every layout and less the amax pass under delayed scaling;
    the block-scaled recipes FP8_BLOCK_SCALED_BYTES_PER_ELEMENT on every chip; torchao's rowwise
    FP8_ROWWISE_CAST_BYTES_PER_ELEMENT (FP8_ROWWISE_WEIGHT_CAST_BYTES_PER_ELEMENT for weights); NVFP4 (dtype fp4)
    NVFP4_CAST_BYTES_PER_ELEMENT, or NVFP4_WEIGHT_CAST_BYTES_PER_ELEMENT for weights."""
    code = np.asarray(recipe)
    full = FP8_WEIGHT_CAST_BYTES_PER_ELEMENT if weight else FP8_CAST_BYTES_PER_ELEMENT
    transpose = FP8_TRANSPOSE_BYTES_PER_ELEMENT if hw.accelerator.fp8_gemm_any_layout else 0.0
    per_tensor = full - transpose - np.where(code == Fp8RecipeCode.DELAYED, FP8_AMAX_PASS_BYTES_PER_ELEMENT, 0.0)
    block = (code == Fp8RecipeCode.MXFP8) | (code == Fp8RecipeCode.BLOCKWISE)
    nvfp4 = NVFP4_WEIGHT_CAST_BYTES_PER_ELEMENT if weight else NVFP4_CAST_BYTES_PER_ELEMENT
    rowwise = FP8_ROWWISE_WEIGHT_CAST_BYTES_PER_ELEMENT if weight else FP8_ROWWISE_CAST_BYTES_PER_ELEMENT
    return np.asarray(np.where(code == Fp8RecipeCode.NVFP4, nvfp4, np.where(
        code == Fp8RecipeCode.ROWWISE, rowwise, np.where(block, FP8_BLOCK_SCALED_BYTES_PER_ELEMENT, per_tensor))))


def fp8_cast_seconds(
    hw: HardwareProfile, elements: np.ndarray, recipe: np.ndarray | int = Fp8RecipeCode.TENSORWISE, *,
    weight: bool = False,
) -> np.ndarray:
    """Memory-bound FP8 quantization of `elements` GEMM-input (or weight) elements (fp8_cast_bytes_per_element)."""
    return memory_seconds(hw, np.asarray(elements, dtype=float) * fp8_cast_bytes_per_element(hw, recipe, weight=weight))


def memory_seconds(hw: HardwareProfile, nbytes: np.ndarray) -> np.ndarray:
    bandwidth = hw.accelerator.memory_bandwidth_bytes_per_s * hw.efficiency.memory_bandwidth.fraction
    return np.asarray(nbytes, dtype=float) / bandwidth


# --- Fused (flash) attention ----------------------------------------------------------------------------

# Flash attention with a causal mask skips the blocks above the diagonal: about half the s x s work
# (Dao 2023, FlashAttention-2, Sec. 3.1.1, "causal masking ... skip ... about 2x speedup").
CAUSAL_WORK_FRACTION = 0.5
# FlashAttention-2's backward runs 5 matmuls against the forward's 2 (it recomputes S and P): 2.5x, the
# FLOP convention of the FlashAttention benchmarks (Dao-AILab/flash-attention benchmarks/
# benchmark_flash_attention.py: bwd = 2.5 x fwd FLOP). The curve below is for forward + backward
# together, so the backward's lower rate (FA3 bwd 561 vs fwd 648 TFLOP/s, hd128 16k) is in it.
FLASH_BACKWARD_TO_FORWARD = 2.5

ATTENTION_HALF_SATURATION_TOKENS_CAUSAL = 550.0
"""Key length (tokens per sequence block) at which a causal flash-attention kernel reaches half its
plateau: efficiency = plateau x s / (s + s_half). Short blocks run slower because each query tile
loops over fewer key tiles (prologue and epilogue dominate) and, causally, the diagonal tiles that
are computed in full but half masked are a larger share. Fitted by hand to the published kernel
benchmarks, which all fall on this one shape (batch x seq = 16k, 2,048 hidden): FlashAttention-2
fwd+bwd hd128 causal on A100, 99 TFLOP/s at 512 to 189 at 16k (Dao 2023, Fig. 4), s_half 495;
the same on H100, 163 to 328 (Dao-AILab/flash-attention assets/flash2_h100_fwd_bwd_benchmark.png),
552; FlashAttention-3 fwd hd128 causal on H100, 292 to 616 (Shah et al. 2024, Fig. 5), 608. A profile whose
kernel saturates differently gives its own (efficiency.attention.half_saturation_tokens_causal: Blackwell's cuDNN
needs about 2,200 keys, see hardware_profiles/b200.yaml)."""

ATTENTION_HALF_SATURATION_TOKENS_NONCAUSAL = 200.0
"""The same for a kernel without a mask (the off-diagonal blocks of ring attention): FA2 fwd+bwd hd128
on A100 151 -> 203 (s_half 184), on H100 248 -> 338 (194); FA3 fwd hd128 on H100 467 -> 648 (207)."""

ATTENTION_HEAD_DIM_HALF_SATURATION = 32.0
"""Head dimension at which the kernel would reach half its hd128 rate, up to head dim 128:
factor(d) = [min(d,128) / (min(d,128) + 32)] / [128 / 160]. hd64 then runs at 0.83x of hd128; the
benchmarks give 0.90x (FA2 fwd+bwd causal 16k, A100: 171/189) and 0.77x (FA3 fwd causal 16k, H100:
473/616). Beyond 128 the fwd kernels gain a little (FA3 hd256 causal 642 vs 616) and the bwd loses
(shared memory); held at 1."""

ATTENTION_CURVE_REFERENCE_TOKENS = 16384.0
"""The sequence length at which the profiles' attention plateau notes quote the benchmarks (16k)."""


def attention_half_saturation_tokens(hw: HardwareProfile) -> tuple[float, float]:
    """(causal, full-mask) key lengths at which the chip's fused kernel reaches half its plateau: the profile's
    own (efficiency.attention, measured on that chip's kernel) or the Hopper/Ampere constants above."""
    eff = hw.efficiency.attention
    causal = eff.half_saturation_tokens_causal
    full = eff.half_saturation_tokens_noncausal
    return (
        float(causal) if causal is not None else ATTENTION_HALF_SATURATION_TOKENS_CAUSAL,
        float(full) if full is not None else ATTENTION_HALF_SATURATION_TOKENS_NONCAUSAL,
    )


def attention_plateau(hw: HardwareProfile, kernel: str = "fused") -> float:
    """The attention curve's plateau for the engine's attention kernel (planner.specs.engine KernelSection):
    `fused` the chip's best fused kernel, `flash2` FlashAttention-2 where the profile gives it a plateau of its
    own (Hopper: PyTorch SDPA's flash backend against Transformer Engine's cuDNN attention); x compute_fraction
    under a power limit."""
    fa2 = hw.efficiency.attention_flash2
    if kernel == "flash2" and fa2 is not None:
        return float(fa2.fraction) * compute_fraction(hw)
    return float(hw.efficiency.attention.fraction) * compute_fraction(hw)


def fp8_attention_speedup(hw: HardwareProfile, block_tokens: np.ndarray | float, head_dim: float,
                          mxfp8: np.ndarray | bool) -> np.ndarray:
    """How many times faster the fused attention (forward + backward) runs on fp8 inputs than on 16-bit ones, on
    blocks of `block_tokens` keys, from the profile's measured table (efficiency.attention_fp8): the row of the
    nearest measured head dimension (in ratio), linear in log2 of the length between the measured ones and held at
    the first and last beyond them; the MXFP8 row where `mxfp8`, the per-tensor one elsewhere. 1 where the profile
    has no table or no row for that scaling (rules refuse such a layout; see fp8_attention_available)."""
    table = hw.efficiency.attention_fp8
    s = np.maximum(np.asarray(block_tokens, dtype=float), 1.0)
    if table is None:
        return np.ones(np.shape(s))
    row = int(np.argmin([abs(math.log(d / max(head_dim, 1.0))) for d in table.head_dims]))
    x = np.log2(np.asarray(table.block_tokens, dtype=float))

    def pick(rows: list[list[float]] | None) -> np.ndarray:
        if rows is None:
            return np.ones(np.shape(s))
        return np.asarray(np.interp(np.log2(s), x, np.asarray(rows[row], dtype=float)))

    return np.asarray(np.where(mxfp8, pick(table.mxfp8), pick(table.per_tensor)))


def fp8_attention_available(hw: HardwareProfile, mxfp8: bool) -> bool:
    """Whether the profile measures FP8 attention for the scaling (per-tensor, or MXFP8)."""
    table = hw.efficiency.attention_fp8
    return table is not None and (table.mxfp8 if mxfp8 else table.per_tensor) is not None


def layout_attention_plateau(hw: HardwareProfile, lay: LayoutArrays) -> np.ndarray:
    """Each candidate's attention plateau: FlashAttention-2's where its attention kernel is flash2 (the layout's
    attention_kernel, else its engine's), the chip's fused kernel's elsewhere."""
    return np.asarray(np.where(lay.attention_flash2, attention_plateau(hw, "flash2"), attention_plateau(hw, "fused")))


def attention_efficiency(
    hw: HardwareProfile, block_tokens: np.ndarray, head_dim: float, causal: bool | np.ndarray,
    plateau: np.ndarray | float | None = None,
) -> np.ndarray:
    """Fraction of the dense 16-bit peak a fused attention kernel (forward + backward) reaches on
    blocks of `block_tokens` keys per sequence, for `head_dim` and a causal or full mask; `plateau` is the
    kernel's (attention_plateau), the profile's fused plateau by default."""
    s = np.maximum(np.asarray(block_tokens, dtype=float), 1.0)
    half_causal, half_full = attention_half_saturation_tokens(hw)
    half = np.where(causal, half_causal, half_full)
    d = min(float(head_dim), 128.0)
    k = ATTENTION_HEAD_DIM_HALF_SATURATION
    head = (d / (d + k)) / (128.0 / (128.0 + k))
    top = attention_plateau(hw) if plateau is None else plateau
    return np.asarray(top * head * s / (s + half))
