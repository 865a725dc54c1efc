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
for K of n 16-bit elements whose share rho is rotated (ModelSpec.rotary_fraction), counted in bytes per element:

    forward   t * cos (read 2, write 2), rotate_half: -x2 on half (1 + 1) and cat(-x2, x1) (2 + 2),
              * sin (2 + 2), the add (4 + 2): 20 rho; cat(t, t_pass) copies the whole head again: 4.
              Less the fused kernel's pass (4): 20 rho more.
    backward  each product's gradient (2 x (2 + 2)), the negation's (1 + 1), chunk's gradient joining the halves
              (2 + 2), the two branches' gradients added (4 + 2): 20 rho; the two slices t[..., :rot] and
              t[..., rot:] each give back a zero-filled full-size gradient (2 + 2) with its part copied in
              (4 rho and 4 (1 - rho)), and autograd adds the two (4 + 2): 14. Less the fused kernel's
              backward pass (4): 20 rho + 10 more.

and, on each call, cos and sin of the fp32 angles scaled and cast to 16 bits, per token over the rotated width
d_r (not split by tensor parallelism: every rank holds the whole angle table): 2 x (cos or sin 4 + 4, the
product 4 + 4, the cast 4 + 2) = 44 d_r forward; the angles take no gradient. Counted, not fitted.
"""

from __future__ import annotations

import math

import numpy as np

from planner.physics.shapes import attention_dims, kv_divisor
from planner.specs.model import ModelSpec

UNFUSED_ROTARY_FORWARD_BYTES_PER_ROTATED_ELEMENT = 20.0
UNFUSED_ROTARY_BACKWARD_BYTES_PER_ROTATED_ELEMENT = 20.0
UNFUSED_ROTARY_BACKWARD_BYTES_PER_ELEMENT = 10.0
UNFUSED_ROTARY_ANGLE_BYTES_PER_CHANNEL = 44.0
ROTARY_CALLS = 2  # one for the queries, one for the keys

UNFUSED_ROTARY_FORWARD_LAUNCHES = 22
"""Kernels the unfused rotary adds to a layer's forward over the fused one's two: per call, cos, the product and
the cast, the same for sin, then t * cos, the negation, the concatenation, * sin, the add and the last
concatenation (12), less the fused kernel (1); two calls."""

UNFUSED_ROTARY_BACKWARD_LAUNCHES = 16
"""Kernels it adds to the backward over the fused one's two: per call the two products' gradients, the
negation's, chunk's gradient, the branches' add, the two slices' zero fills, the copy into the rotated slice and
autograd's add of the slices' gradients (9), less the fused kernel's (1); two calls."""


def yarn_attention_factor(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention factor for a context scale `scale` (Peng et al. 2023, YaRN, Sec. 3.4:
    sqrt(1/t) = 0.1 ln(s) + 1), with DeepSeek's multiplier `mscale` on the logarithm; 1 where the context is not
    stretched (scale <= 1). Megatron-Core and transformers take the factor as this at mscale over this at
    mscale_all_dim."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rotary_runs_unfused(model: ModelSpec, scaled_rotary_unfused: bool, *, linear: bool = False) -> bool:
    """Whether the layer's rotary falls back to the unfused path: a scaled rotary (attention factor != 1) on
    standard attention under an engine that cannot fuse it (EngineKernels.scaled_rotary_unfused). A Gated
    DeltaNet layer (`linear`) has no rotary."""
    return bool(scaled_rotary_unfused and model.position_embedding == "rotary" and model.mla is None
                and model.rotary_attention_factor != 1.0 and not linear)


def unfused_rotary_bytes_per_token(model: ModelSpec, tp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) HBM bytes per token that the unfused rotary moves beyond the fused kernel's pass, one
    layer on one rank of a tensor-parallel group of `tp` (the module docstring's counts)."""
    widths = attention_dims(model, absorbed=False)
    t = np.asarray(tp).astype(float)
    elements = widths.query / t + widths.key / kv_divisor(model, np.asarray(tp), absorbed=False)  # Q and K on the rank
    rho = model.rotary_fraction
    rotated_channels = rho * model.head_size
    angles = ROTARY_CALLS * UNFUSED_ROTARY_ANGLE_BYTES_PER_CHANNEL * rotated_channels
    forward = UNFUSED_ROTARY_FORWARD_BYTES_PER_ROTATED_ELEMENT * rho * elements + angles
    backward = (UNFUSED_ROTARY_BACKWARD_BYTES_PER_ROTATED_ELEMENT * rho
                + UNFUSED_ROTARY_BACKWARD_BYTES_PER_ELEMENT) * elements
    return np.asarray(forward), np.asarray(backward)
