"""YaRN's attention factor, and what a rotary embedding costs where it runs unfused.

The fused rotary (Transformer Engine's fused_apply_rotary_pos_emb, one kernel for Q and one for K) reads and
writes each query and key element once; physics.elementwise counts that pass. Megatron-Core passes YaRN's
attention (concentration) factor to apply_rotary_pos_emb as `mscale`, and Transformer Engine's fused kernel takes
angles, not scaled cos and sin: with mscale != 1 it falls back to the unfused PyTorch path
(megatron/core/models/common/embeddings/rope_utils.py apply_rotary_pos_emb, "mscale=... is not supported by TE's
fused RoPE. Using unfused implementation."; NVIDIA/Megatron-LM commit 987395813b "Fixes for gpt-oss", 2025-11-22,
in core_dev_r0.15.0 at 0d8e0714, the Megatron-LM that Megatron-Bridge v0.2.1 (25.11) pins, and in every later
release through d98e8a64). Multi-latent attention applies its rotary through its own fused MLA kernels
(multi_latent_attention.py fused_apply_mla_rope_for_q / _for_kv), so only standard attention pays.

The unfused path, _apply_rotary_pos_emb_bshd (same op sequence at 0d8e0714 and d98e8a64), on one call for Q or
for K of n 16-bit elements whose share rho is rotated (ModelSpec.rotary_fraction), counted in bytes per element,
less what the layer already charges for the fused kernel: a read and a write in the forward (4 bytes, one kernel
per call), twice that in the backward (the element-wise count's backward ratio: 8 bytes, two kernels):

    forward   t * cos (read 2, write 2), rotate_half: -x2 on half (1 + 1) and cat(-x2, x1) (2 + 2),
              * sin (2 + 2), the add (4 + 2): 20 rho; cat(t, t_pass) copies the whole head again: 4.
              Less the fused kernel's pass (4): 20 rho more.
    backward  each product's gradient (2 x (2 + 2)), the negation's (1 + 1), chunk's gradient joining the halves
              (2 + 2), the two branches' gradients added (4 + 2): 20 rho. The empty slice t[..., rot:] gives
              back a zero-filled full-size gradient (2) that autograd adds to the others (4 + 2): 8. Where
              only part of each head rotates (rho < 1), t[..., :rot] is a slice of its own too: its gradient is
              another zero fill (2) with the rotated part copied in (4 rho), and the pass-through part is copied
              into the other (4 (1 - rho)): 14 in all. (With rho = 1 PyTorch's indexing returns the tensor
              itself for the full-range slice, an alias whose gradient passes through: at::indexing::
              applySlice.) Less the 8 charged already: 20 rho more, or 20 rho + 6.

and, on each call, cos and sin of the fp32 angles scaled and cast to 16 bits, per position of the sequence over the
rotated width d_r (the angle table is [s, 1, 1, d_r], shared by the micro-batch's sequences and not split by tensor
parallelism): 2 x (cos or sin 4 + 4, the product 4 + 4, the cast 4 + 2) = 44 d_r forward, per token of a
micro-batch of b sequences 44 d_r / b; the angles take no gradient. Counted, not fitted.
"""

from __future__ import annotations

import math

import numpy as np

from planner.physics.shapes import attention_dims, kv_divisor
from planner.specs.model import ModelSpec

UNFUSED_ROTARY_FORWARD_BYTES_PER_ROTATED_ELEMENT = 20.0
UNFUSED_ROTARY_BACKWARD_BYTES_PER_ROTATED_ELEMENT = 20.0
UNFUSED_ROTARY_BACKWARD_BYTES_PER_ELEMENT = 0.0  # every channel rotated (rho = 1)
UNFUSED_PARTIAL_ROTARY_BACKWARD_BYTES_PER_ELEMENT = 6.0  # rho < 1: the rotated part's slice has a gradient too
UNFUSED_ROTARY_ANGLE_BYTES_PER_CHANNEL = 44.0
ROTARY_CALLS = 2  # one for the queries, one for the keys

UNFUSED_ROTARY_FORWARD_LAUNCHES = 22
"""Kernels the unfused rotary adds to a layer's forward over the fused one's two: per call, cos, the product and
the cast, the same for sin, then t * cos, the negation, the concatenation, * sin, the add and the last
concatenation (12), less the fused kernel (1); two calls."""

UNFUSED_ROTARY_BACKWARD_LAUNCHES = 10
"""Kernels it adds to the backward: per call the two products' gradients, the negation's, chunk's gradient, the
branches' add, the empty slice's zero fill and autograd's add of its gradient (7), less the two the backward
already counts for the fused kernel (physics.launch.BACKWARD_LAUNCH_RATIO); two calls."""
UNFUSED_PARTIAL_ROTARY_BACKWARD_LAUNCHES = 16
"""The same where only part of each head rotates: the rotated slice's zero fill and copy and the pass-through
slice's copy as well (10 per call, less 2; two calls)."""


def yarn_attention_factor(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention factor for a context scale `scale` (Peng et al. 2023, YaRN, Sec. 3.4:
    sqrt(1/t) = 0.1 ln(s) + 1), with DeepSeek's multiplier `mscale` on the logarithm; 1 where the context is not
    stretched (scale <= 1). Megatron-Core and transformers take the factor as this at mscale over this at
    mscale_all_dim."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_concentration_factor(scale: float, mscale: float | None = None, mscale_all_dim: float | None = None
                              ) -> float:
    """The factor Megatron-Core multiplies the rotary's cos and sin by (yarn_rotary_pos_embedding.
    _yarn_get_concentration_factor @ d98e8a64): the attention factor at `mscale` over the one at `mscale_all_dim`
    where both are given (DeepSeek's pair: 1 when they agree), else 0.1 ln(scale) + 1."""
    if mscale is None or mscale_all_dim is None:
        return yarn_attention_factor(scale)
    return yarn_attention_factor(scale, mscale) / yarn_attention_factor(scale, mscale_all_dim)


def rotary_runs_unfused(model: ModelSpec, scaled_rotary_unfused: bool, *, linear: bool = False) -> bool:
    """Whether the layer's rotary falls back to the unfused path: a scaled rotary (attention factor != 1) on
    standard attention under an engine that cannot fuse it (EngineKernels.scaled_rotary_unfused). A Gated
    DeltaNet layer (`linear`) has no rotary."""
    return bool(scaled_rotary_unfused and model.position_embedding == "rotary" and model.mla is None
                and model.rotary_attention_factor != 1.0 and not linear)


def unfused_rotary_bytes_per_token(model: ModelSpec, tp: np.ndarray, micro_batch: np.ndarray | int = 1
                                   ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) HBM bytes per token that the unfused rotary moves beyond what the layer charges for the
    fused kernel, one layer on one rank of a tensor-parallel group of `tp`, `micro_batch` sequences sharing the
    angle table (the module docstring's counts)."""
    widths = attention_dims(model, absorbed=False)
    t = np.asarray(tp).astype(float)
    elements = widths.query / t + widths.key / kv_divisor(model, np.asarray(tp), absorbed=False)  # Q and K on the rank
    rho = model.rotary_fraction
    rotated_channels = rho * model.head_size
    angles = ROTARY_CALLS * UNFUSED_ROTARY_ANGLE_BYTES_PER_CHANNEL * rotated_channels / np.asarray(micro_batch, float)
    forward = UNFUSED_ROTARY_FORWARD_BYTES_PER_ROTATED_ELEMENT * rho * elements + angles
    whole = (UNFUSED_ROTARY_BACKWARD_BYTES_PER_ELEMENT if rho == 1.0
             else UNFUSED_PARTIAL_ROTARY_BACKWARD_BYTES_PER_ELEMENT)
    backward = (UNFUSED_ROTARY_BACKWARD_BYTES_PER_ROTATED_ELEMENT * rho + whole) * elements
    return np.asarray(forward), np.asarray(backward)


def unfused_rotary_backward_launches(model: ModelSpec) -> int:
    """Backward kernels an unfused rotary adds beyond the fused one's (the module's counts)."""
    return (UNFUSED_ROTARY_BACKWARD_LAUNCHES if model.rotary_fraction == 1.0
            else UNFUSED_PARTIAL_ROTARY_BACKWARD_LAUNCHES)
