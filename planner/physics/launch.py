"""Host-side cost of launching a layer's kernels, and what CUDA graphs take away.

An eager training step issues every kernel from the host: Python, the framework's dispatcher and the CUDA
launch cost "between 5-20 microseconds" of CPU time per kernel (Holistic Trace Analysis,
facebookresearch/HolisticTraceAnalysis docs/source/features/cuda_kernel_launch_stats.rst). The GPU runs
ahead of the host only while the host keeps its queue full: when a layer's kernels are short (fine-grained
MoE experts, small micro-batches, fp8 quantization kernels) the host is the bottleneck, and a host sync
(Megatron-Core's dropless all-to-all dispatcher copies the tokens-per-expert counts to the host before every
expert all-to-all: megatron/core/transformer/moe/token_dispatcher.py, NVIDIA/Megatron-LM @ d98e8a64) stops
it from running ahead across layers. CUDA graphs replay the captured kernels with one launch (Megatron-Core
--cuda-graph-impl / --cuda-graph-scope; the graphed parts cost no host time).

Kernel counts per layer and micro-batch, forward (the backward issues twice as many: each GEMM's data and
weight gradients, each element-wise kernel's backward), counted from Megatron-Core with Transformer Engine:
- attention block (norm fused into the QKV GEMM, its fp8 cast, rotary, the fused attention kernel, output
  projection and its cast, the bias-dropout-add): ATTENTION_LAUNCHES; a rotary that runs unfused
  (physics.rotary) adds UNFUSED_ROTARY_FORWARD_LAUNCHES, and its own count to the backward; MLA's down/up
  projections and latent norms add MLA_EXTRA_LAUNCHES; q/k norms (Qwen3, Gemma 3: Megatron-Core's q_layernorm and k_layernorm modules,
  attention.py get_query_key_value_tensors) add QK_NORM_LAUNCHES;
- a Gated DeltaNet mixer in its place (physics.linear_attention): LINEAR_MIXER_LAUNCHES;
- dense MLP (norm + fc1 + activation + fc2, their casts, the residual add): MLP_LAUNCHES;
- MoE router: ROUTER_LAUNCHES, the count NVIDIA measured for DeepSeek-V3's unfused router (Megatron-LM
  docs/discussions/deepseek-v3-gb200-optimization, @ 1d9edcf8: "72 -> 31" kernels with router fusion);
- MoE dispatch (preprocess, permute, the two all-to-alls, unpermute, their bookkeeping): DISPATCH_LAUNCHES;
- routed experts: Transformer Engine's GroupedLinear issues one cuBLASLt GEMM per local expert for each of
  fc1 and fc2 (TE common/gemm/cublaslt_gemm.cu multi_stream_cublas_gemm, NVIDIA/TransformerEngine @ d0067d0):
  EXPERT_LAUNCHES_PER_LOCAL_EXPERT, plus the activation, and under fp8 each expert's quantization of its two
  GEMM inputs (expert_quantize_launches); shared experts as a dense MLP. Biased experts (gpt-oss)
  add fc2's bias one local expert at a time (Megatron-Core core_v0.15.0 TEGroupedMLP._apply_bias):
  EXPERT_BIAS_LAUNCHES_PER_LOCAL_EXPERT each, plus the concatenation. Transformer Engine's fused grouped MLP
  (Layout.moe_fused_mlp) runs all local experts in FUSED_MLP_LAUNCHES kernels whatever their number, bias
  and quantization included.
These are counts of a structure, not fitted.
"""

from __future__ import annotations

import numpy as np

from planner.physics.rotary import UNFUSED_ROTARY_FORWARD_LAUNCHES, unfused_rotary_backward_launches
from planner.specs.hardware import X86_HOST_SECONDS_PER_LAUNCH, HardwareProfile
from planner.specs.layout import CUDA_GRAPH_BITS, LayoutArrays
from planner.specs.model import ModelSpec


def host_launch_seconds(hw: HardwareProfile) -> float:
    """The profile's CPU time per eager op (efficiency.host_launch: the Grace systems carry their own, and
    `planner calibrate` may fit it, the host_launch factor of planner.specs.overlay), or the x86 DGX figure
    (planner.specs.hardware.X86_HOST_SECONDS_PER_LAUNCH, with its source) without one."""
    launch = hw.efficiency.host_launch
    return float(launch.seconds) if launch is not None else X86_HOST_SECONDS_PER_LAUNCH


SMALL_KERNEL_SECONDS = 1.2e-6
"""GPU time of a kernel whose work is negligible (an index computation, a tiny reduction): the launch latency
on the device, 1.1-1.3 us measured for a 1,024-element add on a current GPU (pytorch/pytorch issue #161104).
Charged to the router's and the dispatcher's bookkeeping kernels, whose bytes no other term counts."""

BACKWARD_LAUNCH_RATIO = 2.0
ATTENTION_LAUNCHES = 12
MLA_EXTRA_LAUNCHES = 8
QK_NORM_LAUNCHES = 2  # the query norm and the key norm, one kernel each
MLP_LAUNCHES = 8
LINEAR_MIXER_LAUNCHES = 19
"""A Gated DeltaNet mixer's forward kernels: the input projection (the norm fused) and its cast, the causal
convolution with its SiLU, the decay (softplus, exp, product) and the write strength's sigmoid, the q and k L2
norms, flash-linear-attention's six chunk kernels (chunk_local_cumsum, chunk_scaled_dot_kkt, solve_tril,
recompute_w_u, chunk_gated_delta_rule_fwd_h, chunk_fwd_o: fla/ops/gated_delta_rule/chunk.py @ bc3b101d), the gated
norm, the output projection and its cast, the bias-dropout-add."""
ROUTER_LAUNCHES = 72
DISPATCH_LAUNCHES = 24
PREPROCESS_LAUNCHES = 8  # of DISPATCH_LAUNCHES: the token-count preprocessing CUDA graphs can capture
EXPERT_LAUNCHES_PER_LOCAL_EXPERT = 2
EXPERT_QUANTIZE_LAUNCHES_PER_LOCAL_EXPERT = 2  # fc1's and fc2's input, one kernel each per expert, under fp8
EXPERT_BIAS_LAUNCHES_PER_LOCAL_EXPERT = 2  # b x p and the add (TEGroupedMLP._apply_bias), forward
FUSED_MLP_LAUNCHES = 3
"""Forward kernels of Transformer Engine's fused grouped MLP for all local experts: one grouped MXFP8 quantization of
fc1's input (tex.group_quantize), fc1's grouped GEMM with the activation, routing weight and fc2-input quantization
in its epilogue, and fc2's grouped GEMM with its bias (transformer_engine/pytorch/ops/fused/grouped_mlp.py
fuser_forward @ d0067d0; the weights' scale swizzles run on a step's first micro-batch only)."""


def _graphed(lay: LayoutArrays, scope: str) -> np.ndarray:
    return np.asarray((lay.cuda_graphs & (CUDA_GRAPH_BITS[scope] | CUDA_GRAPH_BITS["full"])) != 0)


def unfused_rotary_launches(model: ModelSpec, lay: LayoutArrays, unfused_rotary: bool
                            ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) kernels the host issues for an unfused rotary beyond the fused one's (physics.rotary),
    one layer and micro-batch; none where it runs fused or CUDA graphs capture the attention."""
    eager = np.where(_graphed(lay, "attn") | (not unfused_rotary), 0.0, 1.0)
    return (np.asarray(eager * UNFUSED_ROTARY_FORWARD_LAUNCHES),
            np.asarray(eager * unfused_rotary_backward_launches(model)))


def backward_launches(model: ModelSpec, lay: LayoutArrays, before: np.ndarray, after: np.ndarray, *,
                      unfused_rotary: bool) -> np.ndarray:
    """Kernels of one layer's backward for one micro-batch, from layer_launches' forward counts: BACKWARD_LAUNCH_RATIO
    per forward kernel, except an unfused rotary's, whose backward has a count of its own."""
    rotary_fwd, rotary_bwd = unfused_rotary_launches(model, lay, unfused_rotary)
    return np.asarray(BACKWARD_LAUNCH_RATIO * (before + after - rotary_fwd) + rotary_bwd)


def layer_launches(model: ModelSpec, lay: LayoutArrays, *, moe_layer: bool, linear: bool = False,
                   unfused_rotary: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Kernels the host issues for one layer's forward, one micro-batch, less what CUDA graphs capture, as
    (before, after) the MoE dispatcher's host sync. Megatron-Core's MoE layer runs the shared experts, the
    router and the dispatch preprocessing first, then waits on the host for the tokens-per-expert counts
    ("before_ep_alltoall", token_dispatcher.py @ d98e8a64) and only then issues the all-to-alls, the experts
    and the combine (MoELayer.forward: shared_experts_compute, route, preprocess | dispatch,
    routed_experts_compute, combine, postprocess; moe_layer.py @ d98e8a64). A dense layer is all 'before'.
    `unfused_rotary`: the attention's rotary runs unfused (physics.rotary.rotary_runs_unfused)."""
    attention = (ATTENTION_LAUNCHES + (MLA_EXTRA_LAUNCHES if model.mla is not None else 0)
                 + (QK_NORM_LAUNCHES if model.qk_norm else 0))
    if linear and model.linear_attention is not None:  # (`linear`: the Gated DeltaNet mixer's, in its place)
        attention = LINEAR_MIXER_LAUNCHES
    attn = np.where(_graphed(lay, "attn"), 0.0, float(attention)) + unfused_rotary_launches(model, lay, unfused_rotary)[0]
    if not (moe_layer and model.moe is not None):
        return np.asarray(attn + np.where(_graphed(lay, "mlp"), 0.0, float(MLP_LAUNCHES))), np.zeros(np.shape(attn))
    moe = model.moe
    local = moe.num_experts / lay.ep
    experts = EXPERT_LAUNCHES_PER_LOCAL_EXPERT * local + 1.0 + expert_quantize_launches(model, lay)
    if model.mlp_bias:  # fc2's bias, one local expert at a time, then the concatenation (physics.moe)
        experts = experts + EXPERT_BIAS_LAUNCHES_PER_LOCAL_EXPERT * local + 1.0
    experts = np.where(lay.moe_fused_mlp, float(FUSED_MLP_LAUNCHES), experts)
    shared = MLP_LAUNCHES if moe.num_shared_experts else 0
    router = np.where(_graphed(lay, "moe_router"), 0.0, ROUTER_LAUNCHES + shared)
    preprocess = np.where(_graphed(lay, "moe_preprocess"), 0.0, float(PREPROCESS_LAUNCHES))
    eager = np.where(_graphed(lay, "moe"), 0.0, 1.0)
    before = attn + eager * (router + preprocess)
    after = eager * ((DISPATCH_LAUNCHES - PREPROCESS_LAUNCHES) + experts)
    return np.asarray(before), np.asarray(after)


def layer_host_seconds(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, *, moe_layer: bool, passes: np.ndarray,
    linear: bool = False, unfused_rotary: bool = False,
) -> np.ndarray:
    """Host time to issue one layer's kernels for one micro-batch (forward, backward, and the forward again for
    each extra pass in `passes` - 1 with full recompute), less what CUDA graphs capture."""
    before, after = layer_launches(model, lay, moe_layer=moe_layer, linear=linear, unfused_rotary=unfused_rotary)
    backward = backward_launches(model, lay, before, after, unfused_rotary=unfused_rotary)
    return np.asarray((passes * (before + after) + backward) * host_launch_seconds(hw))


def expert_quantize_launches(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """Forward quantization kernels of the routed experts under fp8: one per local expert for each of the two
    grouped GEMMs' inputs (Transformer Engine's GroupedLinear splits its input by expert and quantizes the
    pieces one kernel each: transformer_engine/pytorch/csrc/extensions/cast.cpp multi_tensor_quantize_impl,
    'Quantize kernels individually', fused only for delayed scaling; NVIDIA/TransformerEngine v2.9, the
    release Megatron-Bridge v0.2 pins). Counted as one kernel per piece (MXFP8's; current scaling adds an amax
    kernel and a scale update to each). None under the fused grouped MLP, whose grouped quantization is one of
    FUSED_MLP_LAUNCHES."""
    assert model.moe is not None
    local = model.moe.num_experts / lay.ep
    return np.asarray(np.where(lay.fp8 & ~lay.moe_fused_mlp, EXPERT_QUANTIZE_LAUNCHES_PER_LOCAL_EXPERT * local, 0.0))


def bookkeeping_seconds(model: ModelSpec, lay: LayoutArrays, *, moe_layer: bool) -> np.ndarray:
    """GPU time of the router's, the dispatcher's and the experts' per-expert quantization small kernels for one
    micro-batch, forward and backward (their bytes are counted elsewhere; this is each kernel's launch latency)."""
    if not (moe_layer and model.moe is not None):
        return np.zeros(np.shape(lay.ep))
    kernels = ROUTER_LAUNCHES + DISPATCH_LAUNCHES + expert_quantize_launches(model, lay)
    return np.asarray((1 + BACKWARD_LAUNCH_RATIO) * kernels * SMALL_KERNEL_SECONDS)


def host_syncs_every_layer(lay: LayoutArrays) -> np.ndarray:
    """True where a MoE layer's dispatcher waits for the GPU on the host: every dispatcher without static
    shapes (token drop padded to capacity gives them; DeepEP's normal kernels and HybridEP without a rank
    capacity wait for the received count too: DeepEP docs/legacy.md, Megatron token_dispatcher.py)."""
    return np.asarray((lay.ep > 1) & (lay.moe_capacity_factor <= 0))
