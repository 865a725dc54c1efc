"""Time of one training step: compute, exposed communication, pipeline bubble, optimizer.

Per micro-batch and pipeline stage (all arrays broadcast over candidates):
- GEMMs at peak x matmul efficiency(GEMM size) (the hardware profile's curve);
- the attention core: flash kernels at the profile's attention fraction of peak,
  skipping the masked half; without flash, batched GEMMs plus the memory-bound
  softmax/dropout traffic (what Megatron-LM 2021 ran);
- memory-bound element-wise kernels (norms, residual adds, activation functions,
  rotary, dropout) at HBM bandwidth x memory-bandwidth efficiency;
- TP collectives per layer (Megatron: 2 all-reduces forward, 2 backward, or the
  equivalent all-gather/reduce-scatter pairs with SP), CP K/V exchange hidden
  behind attention where it can be, EP all-to-all, PP point-to-point sends.
The step is (m + (p - 1)/v) times the slowest stage's micro-batch time
(Narayanan et al. 2021, Sec. 2.2), plus the data-parallel traffic the backward
pass could not hide, plus the optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planner.errors import PlannerError
from planner.physics import linear_attention, muon, sparse_attention
from planner.physics.comm import (
    all_gather_seconds,
    all_reduce_seconds,
    all_to_all_seconds,
    group_link,
    hierarchical_latency_seconds,
    p2p_seconds,
    reduce_scatter_seconds,
    ring_latency_seconds,
)
from planner.physics.elementwise import (
    activation_clamp_bytes_per_token,
    routed_activation_bytes_per_token,
    routed_elementwise_bytes_per_token,
)
from planner.physics.elementwise import elementwise_bytes_per_token as shared_elementwise_bytes_per_token
from planner.physics.kernels import (
    CAUSAL_WORK_FRACTION,
    FLASH_BACKWARD_TO_FORWARD,
    FP8_GATHERED_WEIGHT_TRANSPOSE_BYTES_PER_ELEMENT,
    FP8_ROWWISE_FORWARD_GEMM_EFFICIENCY,
    FP8_ROWWISE_FORWARD_WEIGHT_CAST_BYTES_PER_ELEMENT,
    FP8_ROWWISE_RESCALE_BYTES_PER_ELEMENT,
    FP8_ROWWISE_WEIGHT_CAST_BYTES_PER_ELEMENT,
    FP8_SHARD_AMAX_PASSES_PER_STEP,
    FP8_TORCHAO_BACKWARD_WEIGHT_CAST_BYTES_PER_ELEMENT,
    FP8_TORCHAO_MX_WEIGHT_CAST_BYTES_PER_ELEMENT,
    FP8_TORCHAO_WEIGHT_CAST_BYTES_PER_ELEMENT,
    GEMM_FIXED_SECONDS,
    NVFP4_COPY_BYTES_PER_ELEMENT,
    attention_efficiency,
    compute_fraction,
    fp8_attention_speedup,
    fp8_cast_seconds,
    gemm_peak_flops,
    gemm_plateau,
    gemm_roofline_seconds,
    grouped_matmul_seconds,
    layout_attention_plateau,
    matmul_plateau,
    matmul_seconds,
    memory_seconds,
    peak_16bit_flops,
    sliding_layer_share,
    sliding_window_block,
    window_work_fraction,
)
from planner.physics.launch import (
    BACKWARD_LAUNCH_RATIO,
    backward_launches,
    bookkeeping_seconds,
    host_launch_seconds,
    host_syncs_every_layer,
    layer_host_seconds,
    layer_launches,
)
from planner.physics.linear_attention import in_proj_width, mixer_widths
from planner.physics.lora import adapter_traffic_bytes_per_token
from planner.physics.moe import (
    capacity_factor,
    dispatch_seconds,
    expert_bias_bytes,
    regroup_bytes,
    tokens_per_local_expert,
)
from planner.physics.params import mtp_layer_is_moe
from planner.physics.rotary import rotary_runs_unfused, unfused_rotary_bytes_per_token
from planner.physics.shapes import (
    Gemm,
    attention_dims,
    expert_data_parallel,
    expert_shard_degree,
    gemm_elements_per_rank,
    gemm_kernels,
    kv_divisor,
    rank_gemms,
)
from planner.physics.stages import microbatches_in_flight
from planner.specs.engine import ContextParallelSection, EngineProfile, engine_or_default
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import (
    MUON_SCALAR_EXTRA_BYTES,
    RECOMPUTE_MODULE_BITS,
    STATE_DTYPE_BYTES,
    Fp8RecipeCode,
    LayoutArrays,
    RecomputeCode,
    Zero,
)
from planner.specs.model import ModelSpec
from planner.training.memory import (
    ACTIVATION_BYTES,
    FP8_ACTIVATION_BYTES,
    FP8_WEIGHT_BYTES,
    WEIGHT_BYTES,
    StageParams,
    held_weight_bytes,
    layer_weight_bytes,
    offloaded_activation_bytes,
    tokens_per_microbatch,
)

# Backward element-wise kernels read the saved input and the incoming gradient and write the outgoing
# gradient: about twice the forward's traffic (same counting as the forward, two reads for one).
BACKWARD_TO_FORWARD_TRAFFIC = 2.0
# Logits traffic per element over forward and backward: bf16 write (2), fp32 upcast read+write (2+4),
# softmax-cross-entropy read+write (4+4), gradient write (2) - 18 bytes, rounded to the count below.
LOGIT_TRAFFIC_BYTES = 18.0
# The share of the overlap window that hides data-parallel traffic is the engine profile's
# efficiency.dp_overlap_efficiency (planner.specs.engine; 1.0 for Megatron-LM, fitted by
# benchmarks/calibrate_training.py on the published runs).
# The fixed per-step overhead is the hardware profile's efficiency.step_overhead_seconds (specs/hardware.py).
# The row-parallel GEMMs of a layer (names as physics/shapes.py gives them): the attention output projection
# and the MLP's down projection (fc2), dense and shared experts.
ROW_PARALLEL_GEMMS = frozenset({"attn_out", "mlp_down", "shared_down"})
# The GEMMs that TP comm overlap splits into chunks (one GEMM call each): the column-parallel projections after the
# sequence-parallel all-gather (qkv_fprop, fc1_fprop; these) and the row-parallel ones before the reduce-scatter
# (proj_fprop, fc2_fprop: ROW_PARALLEL_GEMMS) of the attention, the dense MLP and the shared experts (Megatron-Core's SharedExpertMLP
# is an MLP built with the fc1/fc2 userbuffer names, moe/shared_experts.py @ d98e8a64; the routed experts run
# without userbuffers); in backward the row-parallel GEMMs' dgrad after
# its all-gather (proj_dgrad, fc2_dgrad). Transformer Engine's userbuffer names, transformer_engine/pytorch/
# module/base.py @ d0067d0 initialize_ub; torch's async TP decomposes the same matmuls (fused_all_gather_matmul,
# fused_matmul_reduce_scatter).
TP_OVERLAP_AG_GEMMS = frozenset({"qkv", "mlp_up", "shared_up"})
# What each extra step of context-parallel attention moves and launches besides its kernel (the merges of partial
# outputs, the gradient accumulators, copies) and how K/V travel is engine behaviour: the engine profile's
# context_parallel section (planner.specs.engine; Transformer Engine's P2P ring for Megatron, torch's
# all-gather context_parallel for torchtitan), each count with its source there.
# The router GEMM (shapes.py names it so) stays 16-bit under fp8 recipes.
ROUTER_GEMM = "router"
INDEXER_GEMM_PREFIX = "index_"  # physics/shapes.py: the sparse-attention indexer's projections
SHARED_EXPERT_PREFIX = "shared_"  # shapes.py's names of the shared experts' GEMMs
# While expert-parallel traffic overlaps compute its kernels hold SMs the GEMMs then lack: DeepSeek-V3 gives
# 20 of the H800's 132 SMs to dispatch and combine ("only 20 SMs are sufficient to fully utilize the
# bandwidths of IB and NVLink", DeepSeek-V3 technical report, arXiv 2412.19437, Sec. 3.2.2); the overlapped
# compute runs at 112/132 of its speed. Taken for every chip and dispatcher (NCCL's all-to-all uses a similar
# number of channels); not fitted.
EP_OVERLAP_SM_SHARE = 20.0 / 132.0


# Offload. The CPU Adam step is memory-bound on the host: per parameter it reads and writes the fp32 master,
# momentum and variance (12 + 12 bytes), reads the gradient and writes the 16-bit copy: about 28 bytes
# (kernel_figures 7.3, a roofline count). The one measured figure we have - DeepSpeedCPUAdam, 11.6B
# parameters in 8.2 s, torch.optim.Adam 56 s (microsoft/DeepSpeed PR #735, 2021, maintainer's measurement)
# - is 1.41e9 parameters/s, 39.6 GB/s at 28 bytes; taking the host as a DGX-2's (2 sockets x 6 channels
# DDR4-2666, 256 GB/s; the PR does not name it: an assumption) that is 15.5% of its memory bandwidth. Other
# hosts scale by their memory bandwidth (the CPU class's figure), torch's Adam is 56/8.2 = 6.8x slower.
CPU_ADAM_BYTES_PER_PARAM = 28.0
CPU_ADAM_MEMORY_EFFICIENCY = 0.155
TORCH_CPU_ADAM_SLOWDOWN = 56.0 / 8.2
# Pinned host <-> GPU copies reach about 80% of the PCIe link's per-direction rate (cudaMemcpy of pinned
# buffers; an assumption of the usual order, not a measured figure of these systems).
HOST_LINK_EFFICIENCY = 0.8


def host_link_bytes_per_s(hw: HardwareProfile) -> float:
    """What one GPU's host link moves per second, or a PlannerError when the profile has no host section."""
    if hw.host is None:
        raise PlannerError(
            f"hardware {hw.name} has no 'host' section (host memory, host bandwidth, GPU-host link), which offload "
            "needs; add one to the profile (see docs/hardware.md) or turn offload off"
        )
    return hw.host.link_bandwidth_bytes_per_s * HOST_LINK_EFFICIENCY


def elementwise_bytes_per_token(model: ModelSpec, lay: LayoutArrays, *, moe_layer: bool, linear: bool = False
                                ) -> np.ndarray:
    """A training layout's element-wise bytes per token of one layer: the one formula training and serving
    share (planner.physics.elementwise), with the model's dropout and the layout's sequence parallelism, less
    the routed experts' activation where the fused grouped MLP computes it in its GEMMs' epilogues
    (fused_routed_activation_bytes_per_token). The routed side runs on the copies the rank's experts receive:
    the balanced share times physics.moe.capacity_factor (padded capacity, or the busiest rank's imbalance)."""
    shared = shared_elementwise_bytes_per_token(model, lay.tp, moe_layer=moe_layer, dropout=model.dropout,
                                                sequence_parallel=lay.sequence_parallel, linear=linear)
    if not (moe_layer and model.moe is not None):
        return shared
    fused = fused_routed_activation_bytes_per_token(model, lay)
    return np.asarray(shared - fused + (capacity_factor(lay) - 1.0) * unfused_routed_bytes_per_token(model, lay))


def unfused_routed_bytes_per_token(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """The routed side's element-wise bytes per token that run as kernels of their own, at the balanced share:
    physics.elementwise's routed count less what the fused grouped MLP moves in its GEMMs' epilogues."""
    return np.asarray(routed_elementwise_bytes_per_token(model, lay.tp) - fused_routed_activation_bytes_per_token(model, lay))


def fused_routed_activation_bytes_per_token(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """Forward bytes per token of the routed experts' gated activation that Transformer Engine's fused grouped MLP
    (Layout.moe_fused_mlp) does not move: fc1's grouped GEMM applies the activation and the routing weight to its
    accumulator and writes fc2's quantized input (the 'grouped GEMM + GLU' kernel), and in the backward fc2's
    data-gradient GEMM applies the activation's gradient in its epilogue ('grouped GEMM + dGLU'), so neither pass
    reads or writes the activation's input and output as kernels of their own (NVIDIA/TransformerEngine @ d0067d0
    transformer_engine/pytorch/ops/fused/grouped_mlp.py; the kernels are cuDNN frontend's CuTe DSL
    grouped_gemm_glu / grouped_gemm_dglu for sm100). 0 where the experts run unfused. The backward's share follows
    (BACKWARD_TO_FORWARD_TRAFFIC times the forward count, as for every element-wise term)."""
    assert model.moe is not None
    return np.asarray(np.where(lay.moe_fused_mlp, routed_activation_bytes_per_token(model, lay.tp), 0.0))


def softmax_bytes_per_token(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """Unfused attention (no flash): scale-mask-softmax reads and writes the scores (2 + 2 bytes), dropout
    reads and writes them and writes a 1-byte mask (5 bytes), per score element: a/t x s per token."""
    dropout = 1.0 if model.dropout else 0.0
    return np.asarray(model.num_attention_heads / lay.tp * lay.seq_len * (4.0 + 5.0 * dropout))


def qkv_elements_per_token(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """Q, K and V elements per token on one rank: the query width over TP, the K/V width over kv_divisor."""
    widths = attention_dims(model)
    return np.asarray(widths.query / lay.tp.astype(float) + (widths.key + widths.value) / kv_divisor(model, lay.tp))


def fp8_cast_elements_per_token(model: ModelSpec, lay: LayoutArrays, *, moe_layer: bool, linear: bool = False
                                ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) GEMM-input elements per token one rank quantizes to fp8 in one layer: the input
    of every fp8 GEMM in the forward (QKV and fc1 read the full hidden state, gathered under SP; the output
    projection and fc2 their TP shard) and the output gradient entering each in the backward. The router
    stays 16-bit. MoE: each routed copy of a token is an input of its expert's GEMMs, as many copies as the rank's
    experts receive (the balanced share times physics.moe.capacity_factor)."""
    h = model.hidden_size
    t = lay.tp.astype(float)
    widths = attention_dims(model)
    qkv_out = qkv_elements_per_token(model, lay)
    out_in = widths.output / t
    if model.attention_output_gate:  # the query projection's output gradient holds the gate's too
        qkv_out = np.asarray(qkv_out + widths.output / t)
    if linear and model.linear_attention is not None:  # the GDN mixer's projections in place of QKV and the output's
        qkv_out = np.asarray(in_proj_width(model.linear_attention) / t)
        out_in = np.asarray(mixer_widths(model.linear_attention).value / t)
    up = 2.0 if model.mlp_kind == "gated" else 1.0
    if moe_layer and model.moe is not None:
        routed = model.moe.experts_per_token * capacity_factor(lay)
        copies, width = np.asarray(routed + model.moe.num_shared_experts), model.moe.moe_ffn_hidden_size
        # the fused grouped MLP quantizes fc2's input and fc1's output gradient in its GEMMs' epilogues
        # (fused_routed_activation_bytes_per_token): the routed copies' casts of those two are not kernels
        fused = np.where(lay.moe_fused_mlp, routed * width / t, 0.0)
    else:
        copies, width, fused = np.ones(()), model.ffn_hidden_size, np.zeros(np.shape(t))
    per_copy = width / t
    forward = h + out_in + _mlp_cast_elements(copies, h, per_copy) - fused
    backward = qkv_out + h + up * copies * per_copy + copies * h - up * fused
    return forward, backward


def _mlp_cast_elements(copies: np.ndarray | float, h: int, f_per_copy: np.ndarray) -> np.ndarray:
    """Forward fp8 cast elements per token of `copies` MLPs: each copy's fc1 input (h) and fc2 input (its width
    over TP, `f_per_copy`)."""
    return np.asarray(copies * (h + f_per_copy))


def cp_kv_elements(model: ModelSpec, lay: LayoutArrays, cp: ContextParallelSection) -> np.ndarray:
    """K plus V elements of one rank's micro-batch as the context-parallel attention handles them: at the KV
    heads' width (split over TP by kv_divisor), or at the query width where the engine expands them first."""
    widths = attention_dims(model)
    tokens = tokens_per_microbatch(lay)
    if cp.kv_at_query_width:
        return np.asarray(tokens * 2 * widths.query / lay.tp.astype(float))
    return np.asarray(tokens * (widths.key + widths.value) / kv_divisor(model, lay.tp))


def cp_attention_kernels(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, plateau: np.ndarray | float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(local causal step, one extra step): forward seconds of the flash kernels of one layer, one micro-batch,
    one rank under load-balanced context parallelism (the whole core without it: the first, with no steps), at
    `plateau` (the candidates' own kernels' when None: kernels.layout_attention_plateau).

    Without context parallelism: one causal kernel over sequences of s keys, at the attention curve's
    efficiency for s (physics/kernels.py attention_efficiency). Load-balanced context parallelism (Megatron-Core /
    Transformer Engine and torch's context_parallel alike: the sequence cut into 2 cp chunks, rank i holding
    chunks i and 2 cp - 1 - i, so every rank has the same causal work): of a rank's work, 1/cp is the causal
    diagonal block of s/cp keys, the rest cp - 1 unmasked steps, half of them over s/(2 cp) keys (all local
    queries against the sending rank's early chunk) and half over s/cp (the late local chunk against both).

    Sliding-window layers (averaged over the model's layers with the full ones): the kernel skips the key tiles
    outside the window (window_work_fraction counts the pairs it keeps), and each query tile then loops over
    about W keys instead of s/2: the attention curve at a causal block of 2 W (sliding_window_block). Their keys
    are local (W within the rank's chunks), so their whole work is in the local step."""
    if plateau is None:
        plateau = layout_attention_plateau(hw, lay)
    widths = attention_dims(model)
    tokens = tokens_per_microbatch(lay)
    t = lay.tp.astype(float)
    cp = lay.cp.astype(float)
    # Flash kernels skip the blocks above the diagonal and, on sliding-window layers, those outside the window;
    # the unfused path computes and masks the full s x s scores.
    causal_work = CAUSAL_WORK_FRACTION * 2 * tokens * lay.seq_len * (widths.query + widths.output) / t
    window_share = window_work_fraction(model, lay.seq_len)
    full_share = 1.0 - sliding_layer_share(model)
    full_work = causal_work * full_share
    window_work = causal_work * (window_share - full_share)  # the sliding layers' kept pairs
    peak16 = peak_16bit_flops(hw)
    head_dim = widths.query / model.num_attention_heads
    block = lay.seq_len / cp
    # Transformer Engine's FP8 attention: each kernel at the profile's measured fp8 / 16-bit speed for its block
    # (physics/kernels.py fp8_attention_speedup; the causal measurement stands for the unmasked steps too).
    fp8 = lay.fp8 & lay.fp8_attention
    mx = lay.fp8_recipe == Fp8RecipeCode.MXFP8
    any_fp8 = bool(np.any(fp8))  # a grid without FP8 attention skips the table look-ups

    def speedup(block_tokens: np.ndarray) -> np.ndarray:  # 16-bit time over this kernel's time
        if not any_fp8:
            return np.ones(())
        return np.asarray(np.where(fp8, fp8_attention_speedup(hw, block_tokens, head_dim, mx), 1.0))

    diagonal = 1.0 / attention_efficiency(hw, block, head_dim, causal=True, plateau=plateau) / speedup(block)
    window_block = np.minimum(block, sliding_window_block(model))
    windowed = 1.0 / attention_efficiency(hw, window_block, head_dim, causal=True, plateau=plateau) / speedup(window_block)
    off_diagonal = 0.5 / attention_efficiency(hw, block / 2, head_dim, causal=False, plateau=plateau) / speedup(
        block / 2) + 0.5 / attention_efficiency(hw, block, head_dim, causal=False, plateau=plateau) / speedup(block)
    local = full_work / peak16 * diagonal / cp + window_work / peak16 * windowed
    return np.asarray(local), np.asarray(full_work / peak16 * off_diagonal / cp)


def attention_core_seconds(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, plateau: np.ndarray | float | None = None,
    cp: ContextParallelSection | None = None, kernels: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of the fused attention core of one layer, one micro-batch, one rank: the
    flash kernels (cp_attention_kernels: the local causal step and cp - 1 extra steps) and, with context
    parallelism, what the engine's CP attention (`cp`, the default engine's when None) does around them: each
    extra step launches cp.step_kernels kernels at the fixed cost of a kernel and moves cp.step_traffic bytes
    per query and K/V element (merging partial outputs, accumulating dQ, dK, dV), each pass cp.pass_traffic
    once. `kernels`: cp_attention_kernels' result where the caller has it already."""
    if model.sparse_attention is not None:  # DeepSeek Sparse Attention: its own kernels (CP: cp_comm_seconds)
        return sparse_attention_seconds(model, hw, lay)
    if cp is None:
        cp = engine_or_default(None).context_parallel
    widths = attention_dims(model)
    tokens = tokens_per_microbatch(lay)
    diagonal_fwd, step_fwd = cp_attention_kernels(model, hw, lay, plateau) if kernels is None else kernels
    steps = lay.cp - 1.0
    kernel_fwd = diagonal_fwd + steps * step_fwd
    q = tokens * widths.query / lay.tp.astype(float)
    kv = cp_kv_elements(model, lay, cp)
    launches = cp.step_kernels * GEMM_FIXED_SECONDS
    split = lay.cp > 1

    def merges(step_q: float, step_kv: float, once_q: float, once_kv: float) -> np.ndarray:
        # the extra steps' launches and traffic, and the pass's own traffic once, of one direction
        return np.asarray(steps * (launches + memory_seconds(hw, q * step_q + kv * step_kv))
                          + np.where(split, memory_seconds(hw, q * once_q + kv * once_kv), 0.0))

    step, once = cp.step_traffic, cp.pass_traffic
    merge_fwd = merges(step.fwd_q, step.fwd_kv, once.fwd_q, once.fwd_kv)
    merge_bwd = merges(step.bwd_q, step.bwd_kv, once.bwd_q, once.bwd_kv)
    return kernel_fwd + merge_fwd, FLASH_BACKWARD_TO_FORWARD * kernel_fwd + merge_bwd


def sparse_attention_seconds(model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of one DeepSeek Sparse Attention layer, one micro-batch, one rank: the sparse
    MLA kernel, the indexer and the loss target (physics/sparse_attention.py), and the TP all-reduce of the
    target's probabilities, which the loss waits for."""
    tokens = tokens_per_microbatch(lay)
    forward, backward = sparse_attention.training_core_seconds(
        model, tokens=tokens, seq_len=lay.seq_len, tp=lay.tp, peak16=peak_16bit_flops(hw) * compute_fraction(hw))
    target = sparse_attention.target_bytes(model, tokens=tokens, seq_len=lay.seq_len)
    reduce = np.where(lay.tp > 1, all_reduce_seconds(target, lay.tp, group_link(hw, lay.tp, 1)), 0.0)
    return np.asarray(forward + reduce), backward


def sparse_cp_comm_seconds(model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays) -> np.ndarray:
    """Context parallelism under DeepSeek Sparse Attention, one layer, one micro-batch, one rank: Megatron-Core runs
    it with all-gather CP only (transformer_config.py and dsa.py @ d98e8a64 assert cp_comm_type allgather), every
    rank gathering the whole sequence's latent keys and indexer keys before its queries pick their top-k among
    them, and reduce-scattering their gradients in the backward. Counted exposed: the gather must finish before
    the indexer scores and the selection reaches anywhere in the sequence (the forward's runs again under full
    recompute); the gathered keys are kept for the backward (training/memory.py sparse_attention_bytes_per_token),
    which only reduce-scatters."""
    assert model.sparse_attention is not None and model.mla is not None
    per_token = (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim + model.sparse_attention.index_head_dim
                 ) * ACTIVATION_BYTES
    chunk = tokens_per_microbatch(lay) * per_token  # this rank's share of the keys
    link = group_link(hw, lay.cp, lay.tp)
    split = lay.cp > 1
    gather = np.where(split, all_gather_seconds(chunk * lay.cp, lay.cp, link), 0.0)
    scatter = np.where(split, reduce_scatter_seconds(chunk * lay.cp, lay.cp, link), 0.0)
    forward_passes = 1.0 + (lay.recompute == RecomputeCode.FULL)
    return np.asarray(forward_passes * gather + scatter)  # the gathered keys are kept for the backward (memory)


def cp_comm_seconds(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, engine: EngineProfile, *, core_fwd: np.ndarray,
    core_bwd: np.ndarray, plateau: np.ndarray | float | None = None, kernels: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Exposed context-parallel K/V traffic of one layer, one micro-batch, one rank, by the engine's exchange.

    p2p_ring (ring attention, Liu et al. 2023; Megatron-LM's default point-to-point ring): the forward passes each
    rank's K/V chunk around the ring in cp - 1 sequential steps, every step as slow as its slowest hop (a node
    boundary once the ring leaves the node); each transfer hides behind the attention of one ring step, not
    behind the whole core, so short blocks leave it exposed step by step. The backward passes K/V again plus
    dK/dV. allgather (torch's context_parallel): one all-gather of the whole K/V per pass, hidden behind the local
    causal step only; in the backward another all-gather, and after every step a ring shift of the dK/dV
    accumulators, each waited for after the next step's kernel (the last after the loop); overlapped transfers
    slow the kernels by the engine's NCCL contention. Under full recompute the forward's exchange runs again.
    `kernels`: cp_attention_kernels' result where the caller has it already."""
    if model.sparse_attention is not None:
        return sparse_cp_comm_seconds(model, hw, lay)
    cp = engine.context_parallel
    kv = cp_kv_elements(model, lay, cp)
    kv_bytes = kv * ACTIVATION_BYTES  # this rank's K/V chunk, 16-bit
    grad_bytes = kv * cp.grad_exchange_bytes
    cp_link = group_link(hw, lay.cp, lay.tp)
    steps = lay.cp - 1
    split = lay.cp > 1
    forward_passes = 1.0 + (lay.recompute == RecomputeCode.FULL)
    diagonal_fwd, step_fwd = cp_attention_kernels(model, hw, lay, plateau) if kernels is None else kernels
    if cp.exchange == "allgather":
        contention = engine.efficiency.nccl_compute_contention
        gather = np.where(split, all_gather_seconds(kv_bytes * lay.cp, lay.cp, cp_link), 0.0)
        shift = np.where(split, p2p_seconds(grad_bytes, cp_link), 0.0)
        fwd = _overlapped(gather, diagonal_fwd, contention)
        bwd = _overlapped(gather, FLASH_BACKWARD_TO_FORWARD * diagonal_fwd, contention) + steps * _overlapped(
            shift, FLASH_BACKWARD_TO_FORWARD * step_fwd, contention) + shift
        return np.asarray(forward_passes * fwd + bwd)
    # One ring step's share of the attention core (`core_fwd`, `core_bwd`: attention_core_seconds, merges included).
    per_step = np.where(split, p2p_seconds(kv_bytes, cp_link), 0.0)
    per_step_bwd = per_step + np.where(split, p2p_seconds(grad_bytes, cp_link), 0.0)
    cp_fwd = steps * np.maximum(per_step - core_fwd / lay.cp, 0.0)
    return np.asarray(forward_passes * cp_fwd + steps * np.maximum(per_step_bwd - core_bwd / lay.cp, 0.0))


def linear_cp_comm_seconds(model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays) -> np.ndarray:
    """Context-parallel traffic of one Gated DeltaNet layer, one micro-batch, one rank. Megatron-Core
    (NVIDIA/Megatron-LM 20ba03fe; megatron/core/ssm/gated_delta_net/gdn.py and common.py @ d98e8a64) all-to-alls the
    in_proj output (q, k, v, z, b, a) over the CP group from sequence to head sharding, runs the convolution and
    the chunked rule on the whole sequence for its heads / cp, and all-to-alls the gated norm's output back to
    sequence sharding before out_proj; the backward moves the two gradients the same way, and a fully recomputed
    forward its two again. The mixer waits for each (nothing runs beside them). The kernels' work per rank is
    unchanged (the whole sequence for 1/cp of the heads: physics.linear_attention.core_seconds is linear in both)."""
    la = model.linear_attention
    assert la is not None
    tokens = tokens_per_microbatch(lay)
    t = lay.tp.astype(float)
    into_heads = tokens * in_proj_width(la) / t * ACTIVATION_BYTES
    back = tokens * mixer_widths(la).value / t * ACTIVATION_BYTES
    link = group_link(hw, lay.cp, lay.tp)
    one_pass = all_to_all_seconds(into_heads, lay.cp, link) + all_to_all_seconds(back, lay.cp, link)
    passes = 2.0 + (lay.recompute == RecomputeCode.FULL)  # forward, backward, and a recomputed forward
    return np.asarray(np.where(lay.cp > 1, passes * one_pass, 0.0))


@dataclass(frozen=True)
class LayerTime:
    """Seconds per micro-batch of one layer on one rank, by part."""

    forward: np.ndarray  # GEMMs + attention core + element-wise (+ fp8 casts), forward
    backward: np.ndarray
    recompute: np.ndarray  # extra forward work under recompute
    tp_comm: np.ndarray  # exposed TP traffic, forward + backward + recomputed forward
    cp_comm: np.ndarray  # exposed context-parallel K/V traffic
    ep_comm: np.ndarray  # expert-parallel all-to-all
    # The part of `forward` and of `ep_comm` that a MoE layer runs after its dispatcher's host sync (the
    # dispatch all-to-all through the combine: routed experts' GEMMs, activation, casts, regrouping, and the
    # forward all-to-alls); zero for dense layers. physics.launch.layer_launches splits the host side alike.
    after_sync_forward: np.ndarray
    after_sync_comm: np.ndarray


def tp_overlap_runs(hw: HardwareProfile, lay: LayoutArrays) -> np.ndarray:
    """Where --tp-comm-overlap takes effect (Transformer Engine userbuffers; torch async TP): with sequence
    parallelism (Megatron-Core asserts it), tp > 1, and a TP group inside one NVLink domain (userbuffers map
    the peers' memory over NVLink)."""
    return np.asarray(lay.overlap_tp_comm & lay.sequence_parallel & (lay.tp > 1) & (lay.tp <= hw.node.gpus_per_node))


def engine_overlaps_tp(model: ModelSpec, engine: EngineProfile) -> bool:
    """Whether the engine runs TP comm overlap for this model at all: Megatron-Core turns it off for a whole model
    with multi-latent attention (the engine profile's kernels.tp_overlap_with_mla)."""
    return bool(engine.kernels.tp_overlap_with_mla or model.mla is None)


def layer_time(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, *, moe_layer: bool,
    attention_plateau: np.ndarray | float | None = None, engine: EngineProfile | None = None, linear: bool = False,
) -> LayerTime:
    """One layer's time; `attention_plateau` overrides the candidates' own attention kernels' plateaus
    (kernels.layout_attention_plateau: the layout's attention_kernel, else its engine's), `engine` (the default
    engine's profile when None) gives the context-parallel attention's behaviour. `linear`: the layer's mixer is
    Gated DeltaNet (physics.linear_attention): its projections, kernels and element-wise traffic in place of the
    attention's; the feed-forward block and the TP collectives are the same."""
    linear = linear and model.linear_attention is not None
    engine = engine_or_default(engine)
    if attention_plateau is None:
        attention_plateau = layout_attention_plateau(hw, lay)
    tokens = tokens_per_microbatch(lay)
    peak_gemm = gemm_peak_flops(hw, lay)
    plateau_gemm = gemm_plateau(hw, lay)
    peak16 = peak_16bit_flops(hw)
    gemm = np.zeros(np.broadcast_shapes(np.shape(tokens), np.shape(peak_gemm)))
    fp8_weights = np.zeros_like(gemm)  # the rank's dense layer weights its fp8 GEMMs quantize
    routed_weights = np.zeros_like(gemm)  # and its routed experts' weights
    shared_gemm = np.zeros_like(gemm)  # the shared experts' forward GEMMs (shared-expert overlap hides behind them)
    row_gemm = np.zeros_like(gemm)  # forward seconds of the row-parallel GEMMs (the TP overlap's SM margin)
    routed_gemm = np.zeros_like(gemm)  # the routed experts' forward GEMMs (after the dispatcher's host sync)
    ag_split = np.zeros_like(gemm)  # GEMMs the TP overlap splits beside its all-gather / its reduce-scatter
    rs_split = np.zeros_like(gemm)
    index_gemm = np.zeros_like(gemm)  # the sparse-attention indexer's projections (weight gradients only)
    dgrad = np.zeros_like(gemm)  # the backward's input-gradient GEMMs
    wgrad = np.zeros_like(gemm)  # and its weight-gradient GEMMs
    index_dgrad = np.zeros_like(gemm)  # the indexer's input-gradient GEMMs, which do not run (its input is detached)
    separate = engine.kernels.separate_projections
    for g, elements in rank_gemms(model, lay.tp, moe_layer=moe_layer, linear=linear):
        if g.name == ROUTER_GEMM:  # the router stays 16-bit under fp8 recipes (Megatron-Core, torchao)
            seconds, g_dgrad, g_wgrad = dense_gemm_seconds(model, hw, lay, g, elements, tokens, peak16, None,
                                                           separate=separate, linear=linear, sixteen_bit=True)
            gemm, dgrad, wgrad = gemm + seconds, dgrad + g_dgrad, wgrad + g_wgrad
        elif g.routed:  # one grouped GEMM per pass; its input and weight gradients each take the forward's time
            seconds = routed_gemm_seconds(model, hw, lay, g, peak_gemm, plateau_gemm)
            gemm, dgrad, wgrad = gemm + seconds, dgrad + seconds, wgrad + seconds
            routed_gemm = routed_gemm + seconds
            routed_weights = routed_weights + gemm_elements_per_rank(g, model.kv_heads, lay.etp) / lay.ep
        else:
            seconds, g_dgrad, g_wgrad = dense_gemm_seconds(model, hw, lay, g, elements, tokens, peak_gemm, plateau_gemm,
                                                           separate=separate, linear=linear)
            gemm, dgrad, wgrad = gemm + seconds, dgrad + g_dgrad, wgrad + g_wgrad
            if g.name.startswith(INDEXER_GEMM_PREFIX):
                index_gemm = index_gemm + seconds
                index_dgrad = index_dgrad + g_dgrad
            if g.name.startswith(SHARED_EXPERT_PREFIX):
                shared_gemm = shared_gemm + seconds
            # Megatron-Core's SharedExpertMLP turns its fc1/fc2 userbuffer overlap off under
            # --moe-shared-expert-overlap (its TP communication moves to the dispatcher): neither the SM margin
            # nor the split into chunks there (moe/shared_experts.py @ d98e8a64).
            on_ub = ~lay.moe_shared_expert_overlap if g.name.startswith(SHARED_EXPERT_PREFIX) else np.True_
            if g.name in ROW_PARALLEL_GEMMS:
                row_gemm = row_gemm + np.where(on_ub, seconds, 0.0)
                rs_split = rs_split + on_ub
            if g.name in TP_OVERLAP_AG_GEMMS:
                ag_split = ag_split + on_ub
            fp8_weights = fp8_weights + elements
    cast_fwd_elements, cast_bwd_elements = fp8_cast_elements_per_token(model, lay, moe_layer=moe_layer, linear=linear)
    weight_fwd, weight_bwd = fp8_weight_quantize_seconds(hw, lay, engine, fp8_weights, routed_weights)
    cast_fwd = np.where(lay.fp8, fp8_cast_seconds(hw, tokens * cast_fwd_elements, lay.fp8_recipe) + weight_fwd, 0.0)
    cast_bwd = np.where(lay.fp8, fp8_cast_seconds(hw, tokens * cast_bwd_elements, lay.fp8_recipe) + weight_bwd, 0.0)

    widths = attention_dims(model)
    # Transformer Engine's FP8 attention quantizes Q, K and V before its kernel (and O under delayed scaling, whose
    # backward reads O in fp8; the other recipes keep O 16-bit) and dO before the backward kernel
    # (transformer_engine/pytorch/attention/dot_product_attention/backends.py FusedAttnFunc @ d0067d0): casts as a
    # GEMM input's, per element of the rank's Q, K, V and O.
    attention_fp8 = lay.fp8 & lay.fp8_attention & (not linear)
    qkv = qkv_elements_per_token(model, lay)
    o = widths.output / lay.tp.astype(float)
    delayed = lay.fp8_recipe == Fp8RecipeCode.DELAYED
    cast_fwd = cast_fwd + np.where(
        attention_fp8, fp8_cast_seconds(hw, tokens * (qkv + np.where(delayed, o, 0.0)), lay.fp8_recipe), 0.0)
    cast_bwd = cast_bwd + np.where(attention_fp8, fp8_cast_seconds(hw, tokens * o, lay.fp8_recipe), 0.0)
    kernels = cp_attention_kernels(model, hw, lay, attention_plateau)  # shared by the core and the CP exchange
    flash_fwd, flash_bwd = attention_core_seconds(model, hw, lay, attention_plateau, engine.context_parallel, kernels)
    # Unfused: batched GEMMs per head (size 2 s^2 d) at the matmul curve, plus the softmax traffic.
    core_width = widths.query + widths.output
    per_head_flop = 2.0 * lay.micro_batch * lay.seq_len * lay.seq_len / lay.cp * core_width / model.num_attention_heads
    heads = model.num_attention_heads / lay.tp
    unfused_gemm = heads * matmul_seconds(hw, per_head_flop, peak16)
    unfused_fwd = unfused_gemm + memory_seconds(hw, tokens * softmax_bytes_per_token(model, lay))
    core_fwd = np.where(lay.flash_attention, flash_fwd, unfused_fwd)
    core_bwd = np.where(
        lay.flash_attention, flash_bwd, 2 * unfused_gemm + BACKWARD_TO_FORWARD_TRAFFIC * (unfused_fwd - unfused_gemm)
    )
    if linear:  # the chunked gated delta rule in place of the attention core, whatever the attention kernel
        assert model.linear_attention is not None
        core_fwd, core_bwd = linear_attention.core_seconds(
            model.linear_attention, hw.accelerator.memory_bandwidth_bytes_per_s, tokens, lay.tp)
    elementwise = memory_seconds(hw, tokens * elementwise_bytes_per_token(model, lay, moe_layer=moe_layer, linear=linear))
    clamp_fwd, clamp_bwd = clamp_seconds(model, hw, lay, moe_layer=moe_layer)
    # A YaRN-scaled rotary the engine cannot fuse runs as element-wise ops of its own (physics.rotary).
    rotary_fwd = rotary_bwd = np.zeros(())
    if rotary_runs_unfused(model, engine.kernels.scaled_rotary_unfused, linear=linear):
        rotary_fwd_bytes, rotary_bwd_bytes = unfused_rotary_bytes_per_token(model, lay.tp, lay.micro_batch)
        rotary_fwd, rotary_bwd = memory_seconds(hw, tokens * rotary_fwd_bytes), memory_seconds(hw, tokens * rotary_bwd_bytes)
    # The router's and dispatcher's small kernels (physics.launch): their launch latency on the GPU.
    bookkeeping = bookkeeping_seconds(model, lay, moe_layer=moe_layer)
    # The dispatcher's regrouping by local expert and the routed experts' second bias (physics.moe): memory
    # traffic of the expert side that the fused element-wise count does not hold.
    if moe_layer and model.moe is not None:
        regroup = memory_seconds(hw, regroup_bytes(model, lay))
        bias_fwd, bias_bwd = (memory_seconds(hw, b) for b in expert_bias_bytes(model, lay))
        expert_fwd, expert_bwd = regroup + bias_fwd, regroup + bias_bwd
    else:
        expert_fwd = expert_bwd = np.zeros_like(elementwise)
    # LoRA (physics.lora): the adapters' memory-bound kernels beside each targeted GEMM, and no weight-gradient GEMM
    # for a frozen weight, so a base GEMM's backward is its input gradient alone
    lora = lay.lora_rank > 0
    if np.any(lora):
        lora_fwd_bytes, lora_bwd_bytes = adapter_traffic_bytes_per_token(model, lay, moe_layer=moe_layer, linear=linear)
        lora_fwd, lora_bwd = memory_seconds(hw, tokens * lora_fwd_bytes), memory_seconds(hw, tokens * lora_bwd_bytes)
    else:
        lora_fwd = lora_bwd = np.zeros_like(gemm)
    forward = (gemm + core_fwd + elementwise + clamp_fwd + rotary_fwd + cast_fwd + expert_fwd + lora_fwd
               + bookkeeping / (1 + BACKWARD_LAUNCH_RATIO))
    # the indexer's input is detached (DeepSeek-V3.2-Exp report Sec. 2.1; Megatron-Core dsa.py): its projections
    # compute weight gradients only, one GEMM each in the backward instead of two (none when LoRA freezes them)
    backward_gemm = np.where(lora, dgrad - index_dgrad, dgrad + wgrad - index_dgrad)
    backward = (backward_gemm + core_bwd + BACKWARD_TO_FORWARD_TRAFFIC * elementwise + clamp_bwd + rotary_bwd
                + cast_bwd + expert_bwd + lora_bwd) + (
        bookkeeping * BACKWARD_LAUNCH_RATIO / (1 + BACKWARD_LAUNCH_RATIO)
    )
    # Under --tp-comm-overlap the row-parallel forward GEMMs (attention output, fc2) run beside their pipelined
    # reduce-scatter, launched with an SM margin the communication kernels take: on 1 - tp_overlap_sm_share of
    # the chip (Transformer Engine's 'pipeline' overlap; the engine profile's efficiency section says how much).
    overlapped = tp_overlap_runs(hw, lay) & engine_overlaps_tp(model, engine)
    margin = np.where(overlapped, 1.0 / (1.0 - engine.efficiency.tp_overlap_sm_share) - 1.0, 0.0)
    forward = forward + margin * row_gemm
    # Each chunk of a split GEMM is its own GEMM call and pays the fixed cost (launch, prologue, the last partial
    # wave) again: tp chunks on the all-gather side (ring exchange), the engine's splits on the reduce-scatter side
    # (ag_split, rs_split: counted in the loop above).
    splits = engine.efficiency.tp_overlap_rs_splits
    rs_chunks = lay.tp if splits is None else splits
    chunk_fixed = np.where(overlapped, GEMM_FIXED_SECONDS / plateau_gemm, 0.0)
    forward = forward + chunk_fixed * (ag_split * (lay.tp - 1) + rs_split * (rs_chunks - 1))
    backward = backward + chunk_fixed * rs_split * (lay.tp - 1)
    recompute = np.where(
        lay.recompute == RecomputeCode.FULL, forward,
        np.where((lay.recompute == RecomputeCode.SELECTIVE) & ~lay.flash_attention & (not linear), unfused_fwd, 0.0)
    )

    h = model.hidden_size
    act_bytes = tokens * h * ACTIVATION_BYTES
    tp_link = group_link(hw, lay.tp, 1)
    # Two collectives per layer each way (Shoeybi et al. 2019, Fig. 4; with SP an all-gather and a
    # reduce-scatter replace each all-reduce at the same total volume: Korthikanti et al. 2022, Sec. 4.2.2).
    one_pass = 2 * all_reduce_seconds(act_bytes, lay.tp, tp_link)
    # An engine whose SP all-gathers move fp8 under an fp8 recipe (torchao's float8 TP) halves their bytes; the
    # reduce-scatters stay 16-bit. Each pass has two all-gathers (forward: the inputs; backward: the gradients).
    # torchtitan casts for TP only under its tensorwise recipe (enable_float8_tensorwise_tp, parallelize_llama.py @
    # 820504e): rowwise layouts gather 16-bit
    fp8_gather = (lay.fp8 & lay.sequence_parallel & engine.kernels.fp8_tp_all_gather
                  & (lay.fp8_recipe != Fp8RecipeCode.ROWWISE))
    saved = 2 * (all_gather_seconds(act_bytes, lay.tp, tp_link)
                 - all_gather_seconds(act_bytes * FP8_ACTIVATION_BYTES / ACTIVATION_BYTES, lay.tp, tp_link))
    one_pass = one_pass - np.where(fp8_gather, saved, 0.0)
    passes = 2.0 + (lay.recompute == RecomputeCode.FULL)
    traffic = passes * one_pass
    # torchtitan's op-level AC saves the reduce-scatters' outputs but not the all-gathers' (its _save_list,
    # parallelize_llama.py @ 820504e), so the backward replays the forward's two all-gathers to recompute the weight
    # gradients' inputs (benchmarks/torch_sac_collectives.py: the compiled backward graph holds the forward's
    # all-gather again)
    gathered = act_bytes * np.where(fp8_gather, FP8_ACTIVATION_BYTES / ACTIVATION_BYTES, 1.0)
    replayed = (lay.recompute == RecomputeCode.OP) & lay.sequence_parallel & (lay.tp > 1)
    traffic = traffic + np.where(replayed, 2 * all_gather_seconds(gathered, lay.tp, tp_link), 0.0)
    # --tp-comm-overlap splits each collective into chunks that run beside the GEMM next to it (where it runs:
    # tp_overlap_runs) and cannot hide more than the GEMMs it runs beside take (the layer's forward GEMMs, twice
    # that in backward, again under full recompute). What no GEMM chunk covers stays exposed: the last chunk of
    # each forward reduce-scatter (proj_fprop, fc2_fprop), whose GEMM chunks run first and hand each finished
    # chunk's reduce-scatter to the next chunk's GEMM (Transformer Engine's 'pipeline' userbuffers method,
    # tp_overlap_rs_splits chunks; torch's fused matmul-reduce-scatter, tp chunks): a reduce-scatter of one
    # chunk's bytes, latency included. The ring exchanges of the all-gather side send chunk i + 1 beside chunk
    # i's GEMM and start on the local chunk: nothing left over.
    window = gemm * (3.0 + (lay.recompute == RecomputeCode.FULL))
    last_rs_chunk = (1.0 + (lay.recompute == RecomputeCode.FULL)) * 2 * reduce_scatter_seconds(
        act_bytes / rs_chunks, lay.tp, tp_link)
    te_exposed = np.maximum(np.minimum(last_rs_chunk, traffic), traffic - window)
    # an engine whose overlap hides less than TE's hides that share of what TE hides
    hidden = engine.efficiency.tp_overlap_hidden_share * (traffic - te_exposed)
    tp_comm = np.where(overlapped, traffic - hidden, traffic)
    if model.sparse_attention is not None and model.mla is not None:
        # the indexer scores the whole sequence on every TP rank: under sequence parallelism its inputs, the hidden
        # state and the query latent, are all-gathered over the TP group first (Megatron-Core dsa.py @ d98e8a64,
        # forward_before_topk), in the forward and again under full recompute; no GEMM chunk hides it
        index_inputs = tokens * (h + (model.mla.q_lora_rank or 0)) * ACTIVATION_BYTES
        forward_passes = 1.0 + (lay.recompute == RecomputeCode.FULL)
        tp_comm = tp_comm + np.where(lay.sequence_parallel & (lay.tp > 1),
                                     forward_passes * all_gather_seconds(index_inputs, lay.tp, tp_link), 0.0)

    if linear:  # a Gated DeltaNet layer exchanges its mixer's input and output, not K/V
        cp_comm = linear_cp_comm_seconds(model, hw, lay)
    else:
        cp_comm = cp_comm_seconds(model, hw, lay, engine, core_fwd=flash_fwd, core_bwd=flash_bwd, kernels=kernels)

    if moe_layer and model.moe is not None:
        routed_side = routed_side_forward_seconds(model, hw, lay, tokens)
        after_sync_forward = routed_gemm + expert_fwd + routed_side
        # the routed experts' backward: the data gradients with the kernels' backward, then the weight gradients
        expert_dgrad = routed_gemm + expert_bwd + BACKWARD_TO_FORWARD_TRAFFIC * routed_side
        ep_comm, after_sync_comm = expert_comm_seconds(
            model, hw, lay, forward=forward, backward=backward, shared_forward=shared_gemm,
            expert_forward=after_sync_forward, expert_dgrad=expert_dgrad, expert_wgrad=routed_gemm)
    else:
        ep_comm = after_sync_comm = after_sync_forward = np.zeros_like(tp_comm)
    return LayerTime(forward, backward, recompute, tp_comm, cp_comm, ep_comm, np.asarray(after_sync_forward),
                     np.asarray(after_sync_comm))


def routed_side_forward_seconds(model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, tokens: np.ndarray
                                ) -> np.ndarray:
    """The memory-bound forward kernels of a MoE layer's routed side, one micro-batch: the routed copies'
    share of elementwise_bytes_per_token (the experts' activation and the dispatch/combine permutations) and,
    under fp8, of fp8_cast_elements_per_token (each routed copy's fc1 and fc2 inputs)."""
    assert model.moe is not None
    per_copy = np.where(lay.moe_fused_mlp, 0.0, model.moe.moe_ffn_hidden_size / lay.tp.astype(float))
    load = capacity_factor(lay)  # the copies the rank's experts receive, over the balanced share
    casts = np.where(lay.fp8, fp8_cast_seconds(hw, tokens * _mlp_cast_elements(
        model.moe.experts_per_token * load, model.hidden_size, per_copy), lay.fp8_recipe), 0.0)
    return np.asarray(memory_seconds(hw, tokens * unfused_routed_bytes_per_token(model, lay) * load) + casts)


def expert_comm_seconds(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, *, forward: np.ndarray, backward: np.ndarray,
    shared_forward: np.ndarray, expert_forward: np.ndarray, expert_dgrad: np.ndarray, expert_wgrad: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Exposed expert-parallel traffic of one MoE layer, one micro-batch, and the part of it one forward pass
    holds: dispatch and combine in the forward,
    their gradients in the backward (physics.moe.dispatch_seconds each), again in a fully recomputed forward.

    Shared-expert overlap (--moe-shared-expert-overlap) runs the shared experts' GEMMs beside each dispatch and
    combine: it hides up to the shared experts' time of that pass. The 1F1B all-to-all overlap
    (--overlap-moe-expert-parallel-comm) runs one micro-batch's forward of a layer beside another's backward of
    it, each transfer beside the compute the schedule puts next to it (one_f_one_b_pair_seconds): what a
    transfer's partner does not cover stays, and the compute runs slower by EP_OVERLAP_SM_SHARE while the
    communication kernels hold SMs. `expert_forward` is the layer's forward from the dispatch to the combine (the
    routed experts' GEMMs and kernels), `expert_dgrad` and `expert_wgrad` their backward; the rest of `forward`
    and `backward` is the part before the dispatch (attention, norms, router, shared experts). The warm-up
    forwards and cool-down backwards of the pipeline have no partner (the unpaired share: the first stage's
    warm-up, interleaved chunks counted as Megatron-Core's schedule runs them). A fully recomputed
    forward has no partner either: Megatron-Core replays it alone before the stage's backward, its all-to-alls
    "exposed (not overlapped) by design" (megatron/core/models/common/model_chunk_schedule_plan.py,
    recompute_model_chunk_schedule_plan, NVIDIA/Megatron-LM @ 01cf4fb5 of PR #5841; the dev branch's PR #6311
    measures on 64 H100 a 7.8% gain from the overlap with full recompute, against 22% lost to the recompute), so
    only the first forward's and the backward's traffic is paired."""
    one_way = dispatch_seconds(model, hw, lay)
    full = (lay.recompute == RecomputeCode.FULL).astype(float)
    fwd = 2 * one_way  # dispatch + combine
    bwd = 2 * one_way  # their gradients
    shared_on = lay.moe_shared_expert_overlap
    fwd_exposed = fwd - np.where(shared_on, np.minimum(fwd, shared_forward), 0.0)
    bwd_exposed = bwd - np.where(shared_on, np.minimum(bwd, 2 * shared_forward), 0.0)
    # A backward without a partner: the combine's gradient, then the experts' data gradients, then the dispatch's
    # gradient, which under moe_delay_wgrad runs beside the experts' weight gradients (Megatron-Core's side stream,
    # moe_layer.py _RegisterDelayedWgradForExperts @ d98e8a64; the same order inside the overlap's unpaired chunks)
    # at the SM share its kernels hold, and in series after them otherwise.
    dispatch_grad = bwd_exposed / 2
    beside_wgrad = np.where(lay.moe_delay_wgrad, np.minimum(dispatch_grad, expert_wgrad), 0.0)
    bwd_alone = bwd_exposed - (1.0 - EP_OVERLAP_SM_SHARE) * beside_wgrad
    serial = (1 + full) * fwd_exposed + bwd_alone
    paired = fwd_exposed + bwd_exposed  # what the overlap can put beside the other micro-batch's compute
    pre_forward = np.maximum(forward - expert_forward, 0.0)
    pre_backward = np.maximum(backward - expert_dgrad - expert_wgrad, 0.0)
    compute = pre_forward + expert_forward + expert_dgrad + expert_wgrad + pre_backward
    # the pair's time on its two streams, less its compute: the traffic no partner covered
    pair = one_f_one_b_pair_seconds(
        pre_forward=pre_forward, expert_forward=expert_forward, expert_dgrad=expert_dgrad, expert_wgrad=expert_wgrad,
        pre_backward=pre_backward, dispatch_forward=fwd_exposed / 2, combine_forward=fwd_exposed / 2,
        dispatch_backward=dispatch_grad, combine_backward=bwd_exposed / 2, delay_wgrad=lay.moe_delay_wgrad)
    uncovered = np.clip(pair - compute, 0.0, paired)
    overlapped = uncovered + EP_OVERLAP_SM_SHARE * (paired - uncovered)
    m = lay.num_micro_batches.astype(float)
    v = lay.interleave.astype(float)
    # the first stage's warm-up forwards (and as many cool-down backwards) have no partner: p - 1 micro-batches
    # under 1F1B, 2(p - 1) + (v - 1)n chunk-micro-batches of the m v under the interleaved schedule in groups of n
    # micro-batches (Megatron-Core schedules.py get_pp_rank_microbatches @ d98e8a64), v x its peak in flight less
    # the one running; with pp 1 the first forward and the last backward; under GPipe every forward runs before any
    # backward
    warmup = v * microbatches_in_flight(lay, np.zeros(())) - 1.0
    unpaired = np.where(lay.gpipe, 1.0, np.minimum(1.0, np.maximum(warmup, 1.0) / (m * v)))
    # DualPipe runs every forward chunk beside a backward chunk: the same overlap, whatever the flag says.
    overlap_on = lay.moe_ep_overlap | lay.dualpipe
    alone = fwd_exposed + bwd_alone
    exposed = np.where(overlap_on, full * fwd_exposed + unpaired * alone + (1 - unpaired) * overlapped, serial)
    # the forward pass's share (the part after the dispatcher's host sync): without the overlap its transfers
    # whole; with it, their share of all the transfers
    transfers = np.where(overlap_on, (1 + full) * fwd_exposed + bwd_exposed, serial)
    forward_share = np.where(transfers > 0, fwd_exposed / np.maximum(transfers, 1e-30), 0.0)
    return np.asarray(exposed), np.asarray(exposed * forward_share)


def one_f_one_b_pair_seconds(
    *, pre_forward: np.ndarray, expert_forward: np.ndarray, expert_dgrad: np.ndarray, expert_wgrad: np.ndarray,
    pre_backward: np.ndarray, dispatch_forward: np.ndarray, combine_forward: np.ndarray,
    dispatch_backward: np.ndarray, combine_backward: np.ndarray, delay_wgrad: np.ndarray | bool = True,
) -> np.ndarray:
    """Seconds of one MoE layer's forward of one micro-batch run beside its backward of another, on a compute
    stream and a communication stream in the order Megatron-Core's fine-grained 1F1B issues them
    (megatron/core/models/common/model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run @ d98e8a64; the
    pairing of DeepSeek-V3's DualPipe, arXiv 2412.19437 Fig. 4):

        communication: combine bwd      | dispatch fwd -> dispatch bwd            | combine fwd
        compute:       pre-dispatch fwd | experts dgrad -> experts wgrad -> experts fwd | pre-dispatch bwd

    with each step's inputs: the experts' backward needs the combine's gradient, the dispatch needs the
    pre-dispatch forward, the experts' forward its dispatched tokens, the dispatch's gradient the experts' data
    gradients (`delay_wgrad`, Megatron's --delay-wgrad-compute: mlp.backward computes the data gradients alone and
    backward_dw the weight gradients after the dispatch's gradient is issued), or without it the data and weight
    gradients both (mlp.backward runs them together), and the last pair the experts' forward and the dispatch's
    gradient. Each transfer hides only behind the compute beside it: a combine gradient longer than the attention
    forward waits whatever the experts' GEMMs could have covered."""
    start = np.maximum(pre_forward, combine_backward)
    experts_done = np.maximum(expert_dgrad + expert_wgrad, dispatch_forward) + expert_forward
    waits_for = expert_dgrad + np.where(delay_wgrad, 0.0, expert_wgrad)
    dispatch_grad_done = np.maximum(waits_for, dispatch_forward) + dispatch_backward
    return np.asarray(start + np.maximum(experts_done, dispatch_grad_done) + np.maximum(combine_forward, pre_backward))


def routed_gemm_seconds(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, g: Gemm, peak: np.ndarray | float,
    plateau: np.ndarray | float | None = None,
) -> np.ndarray:
    """Forward seconds of a routed-expert GEMM on one rank: its g.copies / ep local experts as one grouped GEMM,
    each over the tokens routed to it (physics.moe.tokens_per_local_expert), its weights split over etp, on the
    roofline of what they move: each expert reads its M x k tokens and its k x n weight and writes M x n (inputs
    at gemm_operand_bytes, outputs 16-bit), k the hidden size for fc1 and its TP shard for fc2."""
    assert model.moe is not None
    expert_elements = gemm_elements_per_rank(g, model.kv_heads, lay.etp) / g.copies
    rows = tokens_per_local_expert(model, lay)
    flop_per_expert = 2 * rows * expert_elements
    (_, k, n), = gemm_kernels(model, g, expert_elements, lay.etp, separate=False)
    experts = g.copies / lay.ep
    moved = experts * (gemm_operand_bytes(lay) * (rows * k + k * n) + ACTIVATION_BYTES * rows * n)
    return grouped_matmul_seconds(hw, flop_per_expert, experts, peak, plateau, moved)


def gemm_operand_bytes(lay: LayoutArrays) -> np.ndarray:
    """Bytes per element of a layer GEMM's inputs as its kernel reads them: the fp8 copy under an fp8 recipe,
    NVFP4's packed values and scales under fp4 (the casts that write them are fp8_cast_seconds'), else 16-bit."""
    return np.asarray(np.where(lay.fp4, NVFP4_COPY_BYTES_PER_ELEMENT,
                               np.where(lay.fp8, FP8_ACTIVATION_BYTES, ACTIVATION_BYTES)))


def dense_gemm_seconds(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, g: Gemm, elements: np.ndarray, tokens: np.ndarray,
    peak: np.ndarray | float, plateau: np.ndarray | float | None, *, separate: bool, linear: bool = False,
    sixteen_bit: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(forward, input gradient, weight gradient) seconds of a layer weight's GEMMs on one rank, one micro-batch
    of `tokens` (M): each kernel the engine runs for it (physics.shapes.gemm_kernels: k inputs, n outputs; `separate`
    as EngineProfile.kernels.separate_projections) on the roofline of its FLOPs (2 M k n in every pass) and its
    traffic (physics.kernels.gemm_roofline_seconds). The forward reads the M x k input and the k x n weight and
    writes the M x n output; the input gradient reads the M x n output gradient and the weight and writes M x k; the
    weight gradient reads the input and the output gradient and writes the k x n gradient. Inputs at
    gemm_operand_bytes (16-bit where `sixteen_bit`: the router), outputs 16-bit. Where the engine runs a weight as
    several kernels over one input, the backward sums their input gradients (PyTorch autograd accumulates the
    gradients of a tensor used more than once; one fused pass under torch.compile: read each part, write the sum)."""
    a = np.asarray(ACTIVATION_BYTES if sixteen_bit else gemm_operand_bytes(lay), dtype=float)
    out = float(ACTIVATION_BYTES)
    # torchao's rowwise recipe: the forward on PyTorch's rowwise-scaled kernel, the backward's GEMMs per-tensor with
    # a scaling pass over their outputs (physics.kernels FP8_ROWWISE_*)
    rowwise = lay.fp8 & (lay.fp8_recipe == Fp8RecipeCode.ROWWISE) & (not sixteen_bit)
    base = matmul_plateau(hw) if plateau is None else plateau
    forward_plateau = np.where(rowwise, FP8_ROWWISE_FORWARD_GEMM_EFFICIENCY, 1.0) * base
    rescale = np.where(rowwise, FP8_ROWWISE_RESCALE_BYTES_PER_ELEMENT, 0.0)
    fwd = dgrad = wgrad = np.zeros(())
    kernels = gemm_kernels(model, g, elements, lay.tp, separate=separate, linear=linear)
    if len(kernels) > 1:  # autograd sums the parts' gradients of their shared input: read each, write the sum
        dgrad = dgrad + memory_seconds(hw, (len(kernels) + 1) * out * tokens * kernels[0].k)
    for kernel in kernels:
        k, n = kernel.k, kernel.n
        flop = 2 * tokens * k * n
        fwd = fwd + gemm_roofline_seconds(hw, flop, a * (tokens * k + k * n) + out * tokens * n, peak, forward_plateau)
        dgrad = dgrad + gemm_roofline_seconds(hw, flop, a * (tokens * n + k * n) + out * tokens * k, peak, base) + (
            memory_seconds(hw, rescale * tokens * k))
        wgrad = wgrad + gemm_roofline_seconds(hw, flop, a * tokens * (k + n) + out * k * n, peak, base) + (
            memory_seconds(hw, rescale * k * n))
    return np.asarray(fwd), np.asarray(dgrad), np.asarray(wgrad)


def _gemm_forward_seconds(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, moe_layer: bool, share: dict[str, float],
    engine: EngineProfile | None = None,
) -> np.ndarray:
    """Forward seconds of the layer's GEMMs named in `share`, each counted with its share (the matmul model
    of layer_time, applied to a subset). The key 'qkv:k' stands for the K projection inside the fused QKV."""
    tokens = tokens_per_microbatch(lay)
    peak = gemm_peak_flops(hw, lay)
    total = np.zeros(np.broadcast_shapes(np.shape(tokens), np.shape(peak)))
    separate = engine_or_default(engine).kernels.separate_projections
    for g, elements in rank_gemms(model, lay.tp, moe_layer=moe_layer):
        if g.name == "qkv" and "qkv:k" in share:  # the key projection alone, as the kernel of its own it is there
            k_part = Gemm("k", kv_elements_per_head=g.kv_elements_per_head // 2)
            forward, _, _ = dense_gemm_seconds(model, hw, lay, k_part, gemm_elements_per_rank(
                k_part, model.kv_heads, lay.tp), tokens, peak, None, separate=False)
            total = total + share["qkv:k"] * forward
        weight = share.get(g.name, 0.0)
        if weight == 0.0:
            continue
        if g.routed:
            total = total + weight * routed_gemm_seconds(model, hw, lay, g, peak)
        else:
            forward, _, _ = dense_gemm_seconds(model, hw, lay, g, elements, tokens, peak, None, separate=separate)
            total = total + weight * forward
    return total


def clamp_seconds(model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, *, moe_layer: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of a clamped gated activation's clamp and concatenation, one layer and micro-batch:
    kernels of their own (physics.elementwise ACTIVATION_CLAMP_*) unless a fused kernel clamps (lay.clamp_fused)."""
    tokens = tokens_per_microbatch(lay)
    fwd, bwd = activation_clamp_bytes_per_token(model, lay.tp, moe_layer=moe_layer)
    # the routed share runs on the copies the rank's experts receive (physics.moe.capacity_factor); the fused grouped
    # MLP clamps the routed experts' inputs in its epilogue (TE's ScaledClampedQGeGLU fused op): only the shared
    # experts' share stays a kernel of its own
    share = _routed_activation_share(model)
    kept = (np.where(lay.moe_fused_mlp, 0.0, share * capacity_factor(lay)) + 1.0 - share) if moe_layer else 1.0
    return (np.asarray(np.where(lay.clamp_fused, 0.0, kept * memory_seconds(hw, tokens * fwd))),
            np.asarray(np.where(lay.clamp_fused, 0.0, kept * memory_seconds(hw, tokens * bwd))))


def _routed_activation_share(model: ModelSpec) -> float:
    """The routed experts' share of a MoE layer's activation width (top-k copies against the shared experts); 0
    for a dense model."""
    if model.moe is None:
        return 0.0
    routed = model.moe.experts_per_token * model.moe.moe_ffn_hidden_size
    return routed / (routed + model.moe.shared_ffn_width)


def recompute_extra_seconds(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, layer: LayerTime, *, moe_layer: bool,
    eager_factor: np.ndarray, engine: EngineProfile | None = None,
) -> np.ndarray:
    """Recompute time of op-level selective AC and of Megatron's recompute modules beyond the attention core
    (layer_time charges full recompute and the unfused attention core), per micro-batch of one layer.

    op (torchtitan): the forward of every second matmul (wk, wo, w3; standard MLP: fc2) and every
    element-wise op. Modules: layernorm - the norms; mlp - the dense MLP's GEMMs and activation; moe_act -
    the experts' activation; shared_experts - the shared experts' GEMMs; moe - the whole MoE block (router,
    experts, shared experts, activation, permutation and its all-to-all again). Element-wise traffic is the
    fused count times the engine's eager factor where it runs unfused.
    """
    tokens = tokens_per_microbatch(lay)
    h = model.hidden_size
    t = lay.tp.astype(float)
    rep_div = np.where(lay.sequence_parallel, t, 1.0)
    gated = model.mlp_kind == "gated"
    moe = model.moe if moe_layer else None
    f = (moe.experts_per_token + moe.num_shared_experts) * moe.moe_ffn_hidden_size if moe is not None else model.ffn_hidden_size
    activation_bytes = (6 if gated else 4) * f / t
    if moe is not None:  # the fused grouped MLP's activation is inside its GEMMs: nothing of its own to rerun
        activation_bytes = activation_bytes - fused_routed_activation_bytes_per_token(model, lay)

    def traffic(bytes_per_token: np.ndarray | float) -> np.ndarray:
        return np.asarray(eager_factor * memory_seconds(hw, tokens * bytes_per_token))

    # the activation's clamp runs again with it (its forward; already unfused, so no eager factor)
    clamp, _ = clamp_seconds(model, hw, lay, moe_layer=moe_layer)

    selective = lay.recompute == RecomputeCode.SELECTIVE

    def has(module: str) -> np.ndarray:
        return np.asarray(selective & ((lay.recompute_modules & RECOMPUTE_MODULE_BITS[module]) != 0))

    mlp_names = ("mlp_up", "mlp_down")
    expert_names = ("router", "expert_up", "expert_down", "shared_up", "shared_down")
    op_share = {"qkv:k": 1.0, "attn_out": 1.0}
    if gated:
        op_share.update({"mlp_up": 0.5, "expert_up": 0.5, "shared_up": 0.5})
    else:
        op_share.update({"mlp_down": 1.0, "expert_down": 1.0, "shared_down": 1.0})
    op = _gemm_forward_seconds(model, hw, lay, moe_layer, op_share, engine) + traffic(
        elementwise_bytes_per_token(model, lay, moe_layer=moe_layer)
    ) + clamp
    modules = np.where(has("layernorm"), traffic(model.norms_per_layer * 4 * h / rep_div), 0.0)
    if model.mla is not None:  # mla_up_proj: the query and key/value up-projections from the latents, again
        modules = modules + np.where(
            has("mla_up_proj"), _gemm_forward_seconds(model, hw, lay, moe_layer, {"q_up": 1.0, "kv_up": 1.0}, engine), 0.0
        )
    if moe is not None:
        whole = (
            _gemm_forward_seconds(model, hw, lay, moe_layer, dict.fromkeys(expert_names, 1.0), engine)
            + traffic(activation_bytes + 2 * moe.experts_per_token * 4 * h) + clamp
            + layer.ep_comm / 2.0
        )
        routed_share = _routed_activation_share(model)
        routed_act = np.where(lay.moe_fused_mlp, 0.0,
                              traffic(routed_activation_bytes_per_token(model, lay.tp)) + routed_share * clamp)
        shared = _gemm_forward_seconds(model, hw, lay, moe_layer, {"shared_up": 1.0, "shared_down": 1.0}, engine)
        modules = modules + np.where(
            has("moe"), whole, np.where(has("moe_act"), routed_act, 0.0) + np.where(has("shared_experts"), shared, 0.0)
        )
    else:
        mlp = (_gemm_forward_seconds(model, hw, lay, moe_layer, dict.fromkeys(mlp_names, 1.0), engine) + traffic(activation_bytes)
               + clamp)
        modules = modules + np.where(has("mlp"), mlp, 0.0)
    return np.where(lay.recompute == RecomputeCode.OP, op, modules)


def mtp_seconds(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, sp: StageParams, dense: LayerTime, moe: LayerTime,
    head: np.ndarray, eager_factor: np.ndarray, engine: EngineProfile | None = None,
) -> np.ndarray:
    """Compute seconds per micro-batch of the stage's multi-token-prediction modules (DeepSeek-V3 report,
    Sec. 2.2; Megatron-Core runs them on the last stage): each is one more layer of the model's last kind -
    forward, backward and what the layout recomputes, by layer_time and recompute_extra_seconds - plus its
    2h -> h projection eh_proj (forward and two backward GEMMs) and one more LM head and loss (`head`, the
    stage's head term). The layer's TP/EP communication is not charged here."""
    n = np.asarray(sp.num_mtp_layers)
    if not np.any(n > 0):
        return np.zeros(np.shape(head))
    is_moe = mtp_layer_is_moe(model)
    layer = moe if is_moe else dense
    extra = recompute_extra_seconds(model, hw, lay, layer, moe_layer=is_moe, eager_factor=eager_factor, engine=engine)
    proj_flop = 2 * tokens_per_microbatch(lay) * 2 * model.hidden_size * model.hidden_size / lay.tp
    proj = matmul_seconds(hw, proj_flop, gemm_peak_flops(hw, lay), gemm_plateau(hw, lay))
    return np.asarray(n * (layer.forward + layer.backward + layer.recompute + extra + 3 * proj + head))


@dataclass(frozen=True)
class StageTime:
    """Seconds for one micro-batch (forward + backward) on one stage, by part."""

    compute: np.ndarray  # forward + backward + recompute (+ LM head on the last stage)
    recompute: np.ndarray
    backward: np.ndarray
    forward: np.ndarray
    tp_comm: np.ndarray  # exposed TP collectives
    cp_comm: np.ndarray  # exposed context-parallel K/V exchange
    ep_comm: np.ndarray  # expert-parallel all-to-all
    pp_comm: np.ndarray  # pipeline point-to-point sends
    zero3_comm: np.ndarray  # ZeRO-3 parameter gathers and gradient reduce-scatters not hidden
    offload_comm: np.ndarray  # activation offload transfers not hidden behind the stage's compute
    host: np.ndarray  # the GPU waiting for the host to issue kernels (physics.launch)

    @cached_property
    def communication(self) -> np.ndarray:
        return np.asarray(self.tp_comm + self.cp_comm + self.ep_comm + self.pp_comm + self.zero3_comm + self.offload_comm)

    @cached_property
    def total(self) -> np.ndarray:
        return np.asarray(self.compute + self.communication + self.host)


def stage_time(
    model: ModelSpec,
    hw: HardwareProfile,
    lay: LayoutArrays,
    stage: np.ndarray,
    sp: StageParams,
    engine: EngineProfile | None = None,
) -> StageTime:
    engine = engine_or_default(engine)
    plateau = layout_attention_plateau(hw, lay)
    dense = layer_time(model, hw, lay, moe_layer=False, attention_plateau=plateau, engine=engine)
    moe = layer_time(model, hw, lay, moe_layer=True, attention_plateau=plateau, engine=engine) if model.moe is not None else dense
    n_moe = sp.num_moe_layers
    n_dense = sp.num_layers - n_moe
    # The stage's layers by kind: (time, count, MoE, Gated DeltaNet mixer). Without linear attention, dense and MoE.
    lin_dense, lin_moe = np.asarray(sp.num_linear_dense), np.asarray(sp.num_linear_moe)
    kinds: list[tuple[LayerTime, np.ndarray, bool, bool]] = [
        (dense, np.asarray(n_dense - lin_dense), False, False), (moe, np.asarray(n_moe - lin_moe), True, False)]
    if model.linear_attention is not None:
        dense_lin = layer_time(model, hw, lay, moe_layer=False, attention_plateau=plateau, engine=engine, linear=True)
        moe_lin = (layer_time(model, hw, lay, moe_layer=True, attention_plateau=plateau, engine=engine, linear=True)
                   if model.moe is not None else dense_lin)
        kinds += [(dense_lin, lin_dense, False, True), (moe_lin, lin_moe, True, True)]

    def total(field: str) -> np.ndarray:
        return np.asarray(sum((n * getattr(kind, field) for kind, n, _, _ in kinds), np.zeros(())))

    # Block recompute recomputes only k layers of the stage.
    k = np.where(lay.recompute_layers < 0, sp.num_layers, np.minimum(lay.recompute_layers, sp.num_layers))
    recompute_share = np.where(sp.num_layers > 0, k / np.maximum(sp.num_layers, 1), 0.0)
    recompute = total("recompute") * recompute_share
    forward, backward = total("forward"), total("backward")

    tokens = tokens_per_microbatch(lay)
    # Engines that run the element-wise kernels eagerly (no fusion, no torch.compile) move more bytes
    # than the fused count layer_time uses: the profile's traffic factor, forward, backward and recompute.
    eager = (not engine.kernels.fused_elementwise) & ~(lay.compile & engine.kernels.supports_compile)
    extra_traffic = np.where(eager, engine.kernels.eager_elementwise_traffic_factor - 1.0, 0.0)
    if np.any(extra_traffic > 0):
        def elementwise(moe_layer: bool, linear: bool) -> np.ndarray:
            return memory_seconds(hw, tokens * elementwise_bytes_per_token(
                model, lay, moe_layer=moe_layer and model.moe is not None, linear=linear))

        ew_fwd = extra_traffic * sum((n * elementwise(is_moe, is_linear) for _, n, is_moe, is_linear in kinds),
                                     np.zeros(()))
        forward = forward + ew_fwd
        backward = backward + BACKWARD_TO_FORWARD_TRAFFIC * ew_fwd
        recompute = recompute + np.where(lay.recompute == RecomputeCode.FULL, ew_fwd * recompute_share, 0.0)

    # op-level AC and Megatron recompute modules (beyond the attention core that layer_time charges).
    eager_factor = 1.0 + extra_traffic
    if np.any((lay.recompute == RecomputeCode.SELECTIVE) | (lay.recompute == RecomputeCode.OP)):
        extra_dense = recompute_extra_seconds(model, hw, lay, dense, moe_layer=False, eager_factor=eager_factor,
                                              engine=engine)
        extra_moe = (
            recompute_extra_seconds(model, hw, lay, moe, moe_layer=True, eager_factor=eager_factor, engine=engine)
            if model.moe is not None
            else extra_dense
        )
        recompute = recompute + n_dense * extra_dense + n_moe * extra_moe

    is_last = np.asarray(stage) == lay.pp - 1
    logits = tokens * model.vocab_size / lay.tp
    # The LM head stays 16-bit under fp8 recipes (Transformer Engine / torchao convert the layers' Linears only).
    head_gemm = matmul_seconds(hw, 2 * logits * model.hidden_size, peak_16bit_flops(hw))
    head = np.where(is_last, 3 * head_gemm + memory_seconds(hw, logits * LOGIT_TRAFFIC_BYTES), 0.0)
    head = head + mtp_seconds(model, hw, lay, sp, dense, moe, head, eager_factor, engine)
    compute = forward + backward + recompute + head

    # Pipeline sends: forward activations and backward gradients at each boundary the stage owns, v times
    # per micro-batch with interleaving; Megatron splits them over TP ranks (scatter/gather optimisation), and so
    # does DeepSpeed's pipeline engine (pipeline.pipe_partitioned / grad_partitioned, on by default: its
    # PartitionedTensor over the model-parallel group, deepspeed/runtime/pipe/engine.py @ edaa722).
    pp_link = group_link(hw, 2, lay.tp * lay.cp * lay.dp)
    p2p_bytes = tokens * model.hidden_size * ACTIVATION_BYTES / lay.tp
    p2p = np.where(lay.pp > 1, 2 * lay.interleave * p2p_seconds(p2p_bytes, pp_link), 0.0)
    # With virtual stages Megatron-Core posts each send and receive asynchronously and runs the next chunk
    # meanwhile (overlap_p2p_comm, on by default for interleaved schedules in Megatron-Core and NeMo): each
    # of the 2 v transfers hides behind one chunk's forward or backward (1/v of the stage's work); plain
    # 1F1B waits for its sends (send_forward_recv_backward blocks in the steady state).
    per_transfer = p2p / np.maximum(2 * lay.interleave, 1)
    chunk = compute / np.maximum(2 * lay.interleave, 1)
    hidden_p2p = 2 * lay.interleave * np.maximum(per_transfer - chunk, 0.0)
    p2p = np.where(lay.interleave > 1, hidden_p2p, p2p)

    zero3_exposed = np.where(
        lay.zero >= Zero.PARAMETERS,
        zero3_seconds(hw, lay, sp, engine, forward=forward, backward=backward + recompute),
        0.0,
    )
    # Activation offload: the offloaded layers' activations go down during forward and back up during
    # backward, each beside the stage's compute of that pass (copy engines run apart from the SMs).
    if np.any(lay.offload_activation_layers > 0):
        moved = offloaded_activation_bytes(model, lay, stage, sp, engine.kernels.fp8_proj_keeps_cast_input
                                           ) / microbatches_in_flight(lay, stage)
        copy = moved / host_link_bytes_per_s(hw)
        offload = np.maximum(copy - forward, 0.0) + np.maximum(copy - backward, 0.0)
    else:
        offload = np.zeros_like(p2p)
    # The host issues the stage's kernels; where it is slower than the GPU, the GPU waits (physics.launch).
    # Without a host sync the host runs ahead across the whole stage: one wait, for the stage. A MoE
    # dispatcher that syncs (host_syncs_every_layer) drains the GPU's queue in every MoE layer's forward, so
    # each forward splits into two segments the host cannot run ahead across: up to the sync (attention,
    # shared experts, router, preprocessing) and after it (all-to-alls, routed experts, combine). Each
    # segment waits on its own: max(h_a - d_a, 0) + max(h_b - d_b, 0) per forward (and again for the
    # recomputed forward under full recompute). The backward needs no sync (the splits are already on the
    # host), so it waits once, for the stage.
    full = lay.recompute == RecomputeCode.FULL
    passes = 1.0 + full

    def device(layer: LayerTime) -> np.ndarray:
        return np.asarray(layer.forward + layer.backward + layer.recompute + layer.tp_comm + layer.cp_comm + layer.ep_comm)

    def forward_device(layer: LayerTime) -> np.ndarray:
        # one forward pass: its compute, and its share of the TP and CP exchanges (one of 2 + full passes)
        return np.asarray(layer.forward + (layer.tp_comm + layer.cp_comm) / (2.0 + full))

    def unfused(is_linear: bool) -> bool:
        return rotary_runs_unfused(model, engine.kernels.scaled_rotary_unfused, linear=is_linear)

    whole_stage_wait = np.maximum(sum((n * (layer_host_seconds(model, hw, lay, moe_layer=is_moe, passes=passes,
                                                                  linear=is_linear, unfused_rotary=unfused(is_linear))
                                            - device(kind))
                                       for kind, n, is_moe, is_linear in kinds), np.zeros(())), 0.0)
    if model.moe is None:  # no dispatcher, no sync: the stage waits once
        host = whole_stage_wait
    else:
        launch = host_launch_seconds(hw)
        forward_wait = backward_wait = np.zeros(())
        for kind, n, is_moe, is_linear in kinds:
            before, after = layer_launches(model, lay, moe_layer=is_moe, linear=is_linear,
                                           unfused_rotary=unfused(is_linear))
            if is_moe:
                fwd_a = forward_device(kind) - kind.after_sync_forward
                fwd_b = kind.after_sync_forward + kind.after_sync_comm
                wait = np.maximum(before * launch - fwd_a, 0.0) + np.maximum(after * launch - fwd_b, 0.0)
                backward_work = device(kind) - passes * (forward_device(kind) + kind.after_sync_comm)
            else:
                wait = np.maximum(before * launch - forward_device(kind), 0.0)
                backward_work = device(kind) - passes * forward_device(kind)
            forward_wait = forward_wait + n * wait
            backward_wait = backward_wait + n * (
                backward_launches(model, lay, before, after, unfused_rotary=unfused(is_linear)) * launch - backward_work)
        synced_wait = passes * forward_wait + np.maximum(backward_wait, 0.0)
        host = np.where(host_syncs_every_layer(lay) & (n_moe > 0), synced_wait, whole_stage_wait)
    return StageTime(
        host=host,
        compute=compute,
        recompute=recompute,
        backward=backward,
        forward=forward,
        tp_comm=total("tp_comm"),
        cp_comm=total("cp_comm"),
        ep_comm=total("ep_comm"),
        pp_comm=p2p,
        zero3_comm=zero3_exposed,
        offload_comm=offload,
    )


def zero3_backward_gathers(engine: EngineProfile, lay: LayoutArrays) -> np.ndarray:
    """ZeRO-3 all-gathers of a unit per micro-batch after the forward's: again for the backward where the engine
    reshards after the forward, and once more for a fully recomputed forward where it gathers for that too."""
    z = engine.zero
    return np.asarray(float(z.reshard_after_forward)
                      + np.where((lay.recompute == RecomputeCode.FULL) & z.regather_for_recompute, 1.0, 0.0))


def fp8_weight_quantize_seconds(hw: HardwareProfile, lay: LayoutArrays, engine: EngineProfile, weights: np.ndarray,
                                routed: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds per micro-batch of quantizing one layer's fp8 weights on a rank (`weights`
    elements of its dense GEMMs, `routed` of its routed experts). An engine that caches the cast
    (kernels.fp8_weight_cast_cached: Transformer Engine) casts once per step, amortised over the step's micro-batches
    (physics.kernels fp8_cast_bytes_per_element). One that does not
    (torchao) casts in every forward and again along the other axis in every backward
    (FP8_TORCHAO_WEIGHT_CAST_BYTES_PER_ELEMENT; its rowwise recipe FP8_ROWWISE_WEIGHT_CAST_BYTES_PER_ELEMENT, whose
    forward is one row-scaled cast; its MX recipes FP8_TORCHAO_MX_WEIGHT_CAST_BYTES_PER_ELEMENT, a cast each way).
    Under its float8 all-gather (fp8_param_gather where optimizer.fp8_params_held is false) the cast of the dense
    weights moves to the rank's shard before each gather, with one amax pass over the shards per step
    (FP8_SHARD_AMAX_PASSES_PER_STEP), and the backward copies the gathered fp8 weight transposed
    (FP8_GATHERED_WEIGHT_TRANSPOSE_BYTES_PER_ELEMENT); the routed experts, which that all-gather does not convert
    (memory.held_weight_bytes), keep their per-micro-batch casts."""
    m = lay.num_micro_batches.astype(float)
    if engine.kernels.fp8_weight_cast_cached:
        cached = fp8_cast_seconds(hw, weights + routed, lay.fp8_recipe, weight=True) / m
        return np.asarray(cached), np.zeros_like(cached)
    rowwise = lay.fp8_recipe == Fp8RecipeCode.ROWWISE
    mx = lay.fp8_recipe == Fp8RecipeCode.MXFP8
    total = np.where(rowwise, FP8_ROWWISE_WEIGHT_CAST_BYTES_PER_ELEMENT, np.where(
        mx, FP8_TORCHAO_MX_WEIGHT_CAST_BYTES_PER_ELEMENT, FP8_TORCHAO_WEIGHT_CAST_BYTES_PER_ELEMENT))
    forward_bytes = np.where(rowwise, FP8_ROWWISE_FORWARD_WEIGHT_CAST_BYTES_PER_ELEMENT, np.where(
        mx, FP8_TORCHAO_MX_WEIGHT_CAST_BYTES_PER_ELEMENT / 2,
        FP8_TORCHAO_WEIGHT_CAST_BYTES_PER_ELEMENT - FP8_TORCHAO_BACKWARD_WEIGHT_CAST_BYTES_PER_ELEMENT))

    def eager(elements: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:  # cast in every forward and backward
        return memory_seconds(hw, elements * forward_bytes), memory_seconds(hw, elements * (total - forward_bytes))

    dense_fwd, dense_bwd = eager(weights)
    routed_fwd, routed_bwd = eager(routed)
    gathered = lay.fp8_params & (not engine.optimizer.fp8_params_held)
    if not np.any(gathered):
        return np.asarray(dense_fwd + routed_fwd), np.asarray(dense_bwd + routed_bwd)
    shard_bytes = np.where(lay.master_bf16, WEIGHT_BYTES, STATE_DTYPE_BYTES["fp32"])  # the sharded parameters' own dtype
    gathers_per_step = np.where(lay.zero >= Zero.PARAMETERS, m * (1.0 + zero3_backward_gathers(engine, lay)), 1.0)
    shard_traffic = (weights / lay.shard_degree) * (gathers_per_step * (shard_bytes + FP8_WEIGHT_BYTES)
                                                    + FP8_SHARD_AMAX_PASSES_PER_STEP * shard_bytes)
    gather_fwd = memory_seconds(hw, shard_traffic / m) + routed_fwd
    gather_bwd = memory_seconds(hw, weights * FP8_GATHERED_WEIGHT_TRANSPOSE_BYTES_PER_ELEMENT) + routed_bwd
    return (np.asarray(np.where(gathered, gather_fwd, dense_fwd + routed_fwd)),
            np.asarray(np.where(gathered, gather_bwd, dense_bwd + routed_bwd)))


def _overlapped(comm: np.ndarray, compute: np.ndarray, contention: float) -> np.ndarray:
    """What a collective running beside `compute` adds to it: the part longer than the compute, plus the
    compute's slowdown while they share the GPU (`contention` x the overlapped time)."""
    return np.asarray(np.maximum(comm - compute, 0.0) + contention * np.minimum(comm, compute))


def zero3_seconds(
    hw: HardwareProfile,
    lay: LayoutArrays,
    sp: StageParams,
    engine: EngineProfile,
    *,
    forward: np.ndarray,
    backward: np.ndarray,
) -> np.ndarray:
    """Exposed ZeRO-3 / FSDP time of one micro-batch on one stage (Rajbhandari et al. 2020, Sec. 7.2.2;
    Zhao et al. 2023, PyTorch FSDP, Sec. 3).

    The stage's parameters are gathered a unit (one transformer layer) at a time: in forward, again in
    backward when the engine reshards after forward, once more for the recomputed forward when the engine
    gathers for it; each unit's gradients are reduce-scattered in backward. Every unit issues the
    engine's `collectives_per_layer` collectives, each paying the ring latency over the whole shard group
    (NCCL rings: it grows with the group size) and the engine's host-side overhead. With prefetch of one
    unit ahead a unit's traffic runs beside the previous unit's compute: only the first gather of each
    pass and the last reduce-scatter are exposed when compute is the longer, the comm-bound excess
    otherwise, plus the compute's slowdown while NCCL kernels share the GPU (the engine's contention
    factor). Without prefetch every collective waits.
    """
    z = engine.zero
    shard = lay.shard_degree  # HSDP: gathers and reduce-scatters inside the shard group
    link = group_link(hw, shard, lay.tp)
    # The routed experts' shard group: the expert-data-parallel ranks (inside the HSDP group), etp x ep apart.
    expert_group = np.rint(expert_shard_degree(lay)).astype(np.int64)
    expert_link = group_link(hw, expert_group, lay.etp * lay.ep)
    units = np.maximum(sp.num_layers, 1).astype(float)
    per_collective = z.collectives_per_layer * (ring_latency_seconds(link) + z.collective_overhead_seconds)

    def bandwidth(seconds_fn, params: np.ndarray, nbytes: np.ndarray, lk, size) -> np.ndarray:  # type: ignore[no-untyped-def]
        moved = seconds_fn(params * nbytes, size, lk)
        return np.where(params > 0, moved - hierarchical_latency_seconds(lk), 0.0)

    unit_dense, unit_expert = sp.dense / units, sp.expert / units
    expert_bytes = held_weight_bytes(lay, engine.optimizer.fp8_params_held)
    reduce_bytes = np.where(z.reduce_in_fp32, 4, lay.grad_bytes)
    gather = (
        bandwidth(all_gather_seconds, unit_dense, layer_weight_bytes(lay), link, shard)
        + bandwidth(all_gather_seconds, unit_expert, expert_bytes, expert_link, expert_group)
        + np.where(shard > 1, per_collective, 0.0)
    )
    # the gradients reduce-scattered: every parameter's, or (LoRA) the adapters' alone (frozen weights have none)
    scatter = (
        bandwidth(reduce_scatter_seconds, sp.trainable_dense / units, reduce_bytes, link, shard)
        + bandwidth(reduce_scatter_seconds, sp.trainable_expert / units, reduce_bytes, expert_link, expert_group)
        + np.where(shard > 1, per_collective, 0.0)
    )
    # Parameters offloaded to the host (ZeRO-Infinity, FSDP CPUOffload): each gather first copies the rank's
    # shard of the unit to the GPU over its host link.
    if np.any(lay.offload_params):
        shard_copy = (unit_dense / shard + unit_expert / expert_group) * WEIGHT_BYTES / host_link_bytes_per_s(hw)
        gather = gather + np.where(lay.offload_params, shard_copy, 0.0)
    backward_gathers = zero3_backward_gathers(engine, lay)
    forward_comm = gather
    backward_comm = backward_gathers * gather + scatter
    # Share of a unit's traffic that is in flight ahead of its use: the prefetch depth in units (or the
    # prefetch budget over the unit's parameters), at most 1 (deeper prefetch hides no more per unit).
    unit_params = unit_dense + unit_expert
    depth = (
        float(z.prefetch_units)
        if z.prefetch_bucket_params is None
        else z.prefetch_bucket_params / np.maximum(unit_params, 1.0)
    )
    ahead = np.minimum(depth, 1.0)
    kappa = engine.efficiency.nccl_compute_contention
    overlapped = units * (
        _overlapped(forward_comm, forward / units, kappa) + _overlapped(backward_comm, backward / units, kappa)
    ) + gather + np.where(backward_gathers > 0, gather, 0.0) + scatter  # the first gather of each pass, last scatter
    serial = units * (forward_comm + backward_comm)
    exposed = ahead * np.minimum(overlapped, serial) + (1.0 - ahead) * serial
    # The engine's copy of each gathered unit into its parameters' tensors, on the compute stream (FSDP2's
    # copy-out): every gather of the pass, of the whole stage's parameters, at the gathered width (fp8 under a float8
    # all-gather: FSDP2 copies the gathered bytes).
    gathered_bytes = sp.dense * layer_weight_bytes(lay) + sp.expert * expert_bytes
    copy_out = memory_seconds(hw, (1.0 + backward_gathers) * gathered_bytes * z.gather_copy_bytes_per_param / WEIGHT_BYTES)
    return np.where(shard > 1, exposed + copy_out, 0.0)


def data_parallel_seconds(
    hw: HardwareProfile,
    lay: LayoutArrays,
    sp: StageParams,
    backward: np.ndarray,
    forward: np.ndarray,
    engine: EngineProfile | None = None,
) -> np.ndarray:
    """Exposed gradient synchronisation and weight gathering per step (ZeRO 0-2; ZeRO-3 pays per micro-batch).

    ZeRO-0: all-reduce of the gradients. ZeRO-1/2: reduce-scatter of the gradients and all-gather of the
    updated 16-bit weights (Rajbhandari et al. 2020, Sec. 7.2.1: the same volume as an all-reduce). ZeRO-2
    reduce-scatters after every micro-batch's backward unless the engine accumulates in a full buffer
    (engine zero.grad_reduce_every_micro_batch).
    With overlap on, gradient reduction hides behind a share of the last micro-batch's `backward`
    (buckets reduce as they fill: PyTorch DDP, Megatron --overlap-grad-reduce) and the weight all-gather
    behind a share of the next step's first `forward` (Megatron --overlap-param-gather, FSDP prefetch).
    """
    shard = lay.dp * lay.cp
    dp_link = group_link(hw, shard, lay.tp)
    # The routed experts synchronise over the expert-data-parallel group, etp x ep ranks apart.
    expert_group = np.rint(expert_data_parallel(lay)).astype(np.int64)
    expert_link = group_link(hw, expert_group, lay.etp * lay.ep)
    grad_bytes = lay.grad_bytes
    # what trains: every parameter, or (LoRA) the adapters alone, whose gradients are reduced and whose updated
    # shards are gathered; frozen weights move in neither
    dense, expert = sp.trainable_dense, sp.trainable_expert
    reduce = np.where(
        lay.zero == Zero.NONE,
        all_reduce_seconds(dense * grad_bytes, shard, dp_link)
        + all_reduce_seconds(expert * grad_bytes, expert_group, expert_link),
        reduce_scatter_seconds(dense * grad_bytes, shard, dp_link)
        + reduce_scatter_seconds(expert * grad_bytes, expert_group, expert_link),
    )
    gather = np.where(
        lay.zero == Zero.NONE,
        0.0,
        all_gather_seconds(dense * layer_weight_bytes(lay), shard, dp_link)
        + all_gather_seconds(expert * held_weight_bytes(lay, engine_or_default(engine).optimizer.fp8_params_held),
                             expert_group, expert_link),
    )
    # Hybrid sharding (shard_group): the reduce-scatter and all-gather run inside the shard group, and each
    # shard's gradients are all-reduced across the replicas once per step (PyTorch HSDP; ZeRO++ hpZ).
    hybrid = lay.shard_group > 0
    group = lay.shard_degree
    group_link_ = group_link(hw, group, lay.tp)
    replica_link = group_link(hw, lay.replicas, lay.tp * group)
    reduce_bytes = np.where(lay.zero >= Zero.PARAMETERS, np.where(engine_reduce_fp32(engine), 4, grad_bytes), grad_bytes)
    hybrid_reduce = reduce_scatter_seconds(dense * grad_bytes, group, group_link_) + all_reduce_seconds(
        (dense + expert) / group * reduce_bytes, lay.replicas, replica_link
    )
    hybrid_gather = all_gather_seconds(dense * layer_weight_bytes(lay), group, group_link_)
    reduce = np.where(hybrid & (lay.zero >= Zero.OPTIMIZER), np.where(lay.zero >= Zero.PARAMETERS, 0.0, hybrid_reduce), reduce)
    gather = np.where(hybrid & (lay.zero >= Zero.OPTIMIZER), np.where(lay.zero >= Zero.PARAMETERS, 0.0, hybrid_gather), gather)
    replica_only = all_reduce_seconds((dense + expert) / group * reduce_bytes, lay.replicas, replica_link)
    profile = engine_or_default(engine)
    # An engine whose pipeline schedule reduces the gradients only after its last step (DeepSpeed's
    # TrainSchedule: ReduceGrads, then OptimizerStep) hides none of it, and one that all-reduces the whole
    # gradients there under ZeRO-1 (DeepSpeed's BF16_Optimizer) moves twice a reduce-scatter's bytes.
    pipelined = lay.pp > 1
    on = lay.overlap_grad_reduce & ~(pipelined & (not profile.schedules.pipeline_grad_reduce_overlap))
    # (DeepSpeed picks its BF16_Optimizer for ZeRO-1 with fp32 gradient accumulation and no CPU offload:
    # engine.py _do_optimizer_sanity_check; with 16-bit gradients or offload its ZeRO optimizer reduces into
    # partitions. A 16-bit model is taken as bf16: the layout does not tell fp16 apart here. Hybrid sharding
    # keeps its own reduction.)
    whole = (pipelined & profile.schedules.pipeline_grad_all_reduce & (lay.zero == Zero.OPTIMIZER) & (grad_bytes == 4)
             & ~lay.offload_optimizer & ~hybrid)
    reduce = np.where(
        whole,
        all_reduce_seconds(dense * grad_bytes, shard, dp_link)
        + all_reduce_seconds(expert * grad_bytes, expert_group, expert_link),
        reduce,
    )
    eff = profile.efficiency.dp_overlap_efficiency
    # ZeRO-2 holds only its gradient shard, so (where the engine does not accumulate in a full buffer) every
    # micro-batch reduce-scatters its own gradients behind its own backward: m times per step.
    every_micro_batch = (lay.zero == Zero.GRADIENTS) & profile.zero.grad_reduce_every_micro_batch
    reductions = np.where(every_micro_batch, lay.num_micro_batches, 1)
    exposed = reductions * np.maximum(reduce - np.where(on, eff * backward, 0.0), 0.0) + np.maximum(
        gather - np.where(on, eff * forward, 0.0), 0.0
    )
    # ZeRO-3 pays its gathers and reduce-scatters per micro-batch (zero3_seconds); with HSDP the replicas'
    # all-reduce of the reduced shards remains, once per step behind the last backward.
    zero3_replica = np.where(hybrid, np.maximum(replica_only - np.where(on, eff * backward, 0.0), 0.0), 0.0)
    return np.where(lay.zero >= Zero.PARAMETERS, zero3_replica, exposed)


def engine_reduce_fp32(engine: EngineProfile | None) -> bool:
    return engine_or_default(engine).zero.reduce_in_fp32


def optimizer_seconds(hw: HardwareProfile, lay: LayoutArrays, sp: StageParams) -> np.ndarray:
    """The optimizer step streams its states once: Adam reads master weights, momentum, variance and the
    gradient and writes all but the gradient plus the 16-bit weights (memory-bound, fused multi-tensor)."""
    shard = np.where(lay.zero >= Zero.OPTIMIZER, lay.shard_degree, 1)
    params = sp.trainable_dense / shard + sp.trainable_expert / np.where(lay.zero >= Zero.OPTIMIZER,
                                                                          expert_shard_degree(lay), 1.0)
    bytes_per_param = 2 * lay.optimizer_bytes + lay.grad_bytes + WEIGHT_BYTES
    return memory_seconds(hw, params * bytes_per_param)


def muon_optimizer_seconds(model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, sp: StageParams) -> np.ndarray:
    """Muon's step on one rank of a stage (physics.muon): the orthogonalisation and step of the matrices it owns,
    and Adam's fused step over the embedding and output layer, which Megatron-Core leaves to Adam (their shard under
    the distributed optimizer). Norms and biases, also Adam's and under 0.1% of a model, ride with the matrices'."""
    shard = np.where(lay.zero >= Zero.OPTIMIZER, lay.shard_degree, 1)
    adam_bytes = 2 * (lay.optimizer_bytes + MUON_SCALAR_EXTRA_BYTES) + lay.grad_bytes + WEIGHT_BYTES
    scalar = memory_seconds(hw, sp.ends / shard * adam_bytes)
    matrices = muon.stage_seconds(model, hw, lay, num_dense=sp.num_layers - sp.num_moe_layers, num_moe=sp.num_moe_layers,
                                  num_linear_dense=sp.num_linear_dense, num_linear_moe=sp.num_linear_moe,
                                  num_mtp=sp.num_mtp_layers)
    return np.asarray(scalar + matrices)


def offload_step_seconds(
    hw: HardwareProfile, lay: LayoutArrays, sp: StageParams, backward: np.ndarray, engine: EngineProfile | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(CPU optimizer step, exposed GPU <-> host copies) per step with offloaded optimizer states.

    The node's ranks step their shards on the shared host (CPU Adam at the host's memory bandwidth, see
    CPU_ADAM_*); the gradients go down during the last micro-batch's backward (DeepSpeed overlap_comm) and
    what does not fit behind it is exposed; the updated 16-bit parameters come back up after the step unless
    they live on the host (offload_params), where the next gathers fetch them.
    """
    if not np.any(lay.offload_optimizer):
        zero = np.zeros(np.shape(sp.dense))
        return zero, zero
    link = host_link_bytes_per_s(hw)
    assert hw.host is not None
    shard = np.where(lay.zero >= Zero.OPTIMIZER, lay.shard_degree, 1).astype(float)
    expert_shard = np.where(lay.zero >= Zero.OPTIMIZER, expert_shard_degree(lay), 1.0)
    params = sp.trainable_dense / shard + sp.trainable_expert / expert_shard
    ranks_per_node = np.minimum(hw.node.gpus_per_node, lay.gpus)
    fused_rate = hw.host.memory_bandwidth_bytes_per_s * CPU_ADAM_MEMORY_EFFICIENCY / CPU_ADAM_BYTES_PER_PARAM
    rate = np.where(lay.torch_cpu_adam, fused_rate / TORCH_CPU_ADAM_SLOWDOWN, fused_rate)
    cpu_step = ranks_per_node * params / rate
    eff = engine_or_default(engine).efficiency.dp_overlap_efficiency
    down = np.maximum(params * lay.grad_bytes / link - eff * backward, 0.0)
    up = np.where(lay.offload_params, 0.0, params * WEIGHT_BYTES / link)
    on = lay.offload_optimizer
    return np.where(on, cpu_step, 0.0), np.where(on, down + up, 0.0)
