"""Element-wise (memory-bound) traffic of a transformer layer, shared by training and serving.

One function for both: training's forward pass and serving's forward passes move the same bytes per token
through the same kernels (norms, residual adds, the MLP activation, rotary, MoE dispatch). Training passes
its dropout and sequence-parallel flags; serving has neither. Activations are 16-bit.
"""

from __future__ import annotations

import numpy as np

from planner.physics.linear_attention import mixer_elementwise_bytes_per_token
from planner.physics.shapes import attention_dims, kv_divisor
from planner.specs.model import ModelSpec

ACTIVATION_BYTES = 2  # 16-bit activations (Korthikanti et al. 2022 Sec. 4.1)


def elementwise_bytes_per_token(model: ModelSpec, tp: np.ndarray, *, moe_layer: bool, dropout: bool = False,
                                sequence_parallel: np.ndarray | bool = False, linear: bool = False) -> np.ndarray:
    """Forward bytes moved per token by one layer's memory-bound kernels (fused as Megatron-LM fuses them),
    on one rank of a tensor-parallel group of `tp`.

    Norm (norms_per_layer of them): read 2h, write 2h. Residual add (bias-dropout-add): read 2h + 2h,
    write 2h (+ h mask with dropout); two per layer, or one three-way add for a parallel attention/MLP
    block. Activation: GeLU reads 2f and writes 2f; SwiGLU reads 4f and writes 2f (f split by tp).
    Rotary: reads and writes Q and K (split by tp); so do the q/k norms of a model that has them. The attention's
    output gate (Qwen3-Next) reads the output and the gate and writes the gated output. MoE layers: f is the
    top-k and shared experts' width, and dispatch and combine read and write each routed copy. The replicated
    (h-wide) terms are split by sequence parallelism. `linear`: a Gated DeltaNet layer, whose mixer's kernels
    (physics.linear_attention.mixer_elementwise_bytes_per_token) replace the rotary, q/k norms and gate.
    """
    h = model.hidden_size
    t = np.asarray(tp).astype(float)
    rep_div = np.where(sequence_parallel, t, 1.0)
    drop = 1.0 if dropout else 0.0
    # Residual adds: two bias-dropout-adds (read 2h + 2h, write 2h each); a parallel block adds attention and
    # MLP outputs to the residual in one pass (read 3 x 2h, write 2h), with a dropout mask per branch.
    residual = 8 * h + 2 * drop * h if model.parallel_attention_mlp else 2 * (6 * h + drop * h)
    replicated = model.norms_per_layer * 4 * h + residual
    # sparse attention's MQA form absorbs the queries after the rotary, which runs on MLA's own Q and K
    widths = attention_dims(model, absorbed=False)
    # One read and one write of the rank's Q and K: rotary, and the q/k norms where the model has them
    # (Qwen3, Gemma 3, OLMo 2: Megatron-Core's q_layernorm and k_layernorm, their own kernels before the rotary).
    qk_pass = 2 * ACTIVATION_BYTES * (widths.query / t + widths.key / kv_divisor(model, np.asarray(tp), absorbed=False))
    rotary = qk_pass if model.position_embedding == "rotary" else 0.0
    qk_norm = qk_pass if model.qk_norm else 0.0
    gate = 3 * ACTIVATION_BYTES * widths.output / t if model.attention_output_gate else 0.0
    mixer = rotary + qk_norm + gate
    if linear and model.linear_attention is not None:
        mixer = mixer_elementwise_bytes_per_token(model.linear_attention, t)
    if moe_layer and model.moe is not None:
        mlp = routed_elementwise_bytes_per_token(model, tp) + _activation_bytes(model, model.moe.shared_ffn_width) / t
    else:
        mlp = _activation_bytes(model, model.ffn_hidden_size) / t
    return np.asarray(replicated / rep_div + mixer + mlp)


def _activation_bytes(model: ModelSpec, width: float) -> float:
    """Bytes per token of the activation over `width` intermediate elements (SwiGLU reads 4f, writes 2f; GeLU
    reads and writes 2f), before the TP split."""
    return (6 if model.mlp_kind == "gated" else 4) * width


def routed_elementwise_bytes_per_token(model: ModelSpec, tp: np.ndarray) -> np.ndarray:
    """The routed experts' part of elementwise_bytes_per_token for a MoE layer: the activation over the top-k
    copies' width (split by tp) and the dispatch and combine permutations, which read and write each copy."""
    assert model.moe is not None
    k = model.moe.experts_per_token
    permute = 2.0 * k * 4 * model.hidden_size
    return np.asarray(routed_activation_bytes_per_token(model, tp) + permute)


def routed_activation_bytes_per_token(model: ModelSpec, tp: np.ndarray) -> np.ndarray:
    """The routed experts' activation inside routed_elementwise_bytes_per_token: over the top-k copies' width,
    split by tp (what a fused grouped MLP computes in its GEMM epilogue instead)."""
    assert model.moe is not None
    t = np.asarray(tp).astype(float)
    return np.asarray(_activation_bytes(model, model.moe.experts_per_token * model.moe.moe_ffn_hidden_size) / t)


ACTIVATION_CLAMP_FORWARD_BYTES = 8.0
ACTIVATION_CLAMP_BACKWARD_BYTES = 10.0
"""HBM bytes per element of fc1's output (the gated activation's 2f inputs) that clamping them costs where the
clamp runs as kernels of its own: Megatron-Core splits fc1's output in two, clamps each half and concatenates
them before its fused activation kernel (weighted_bias_quick_geglu_impl with clamp_value: chunk, two clamps and
torch.cat outside the jit-fused function; NVIDIA/Megatron-LM core_v0.15.0 megatron/core/fusions/fused_bias_geglu.py,
the gpt-oss path), and Hugging Face's GptOssExperts clamps gate and up eagerly. Forward: each clamp reads and writes
its half (2 + 2), the concatenation reads and writes the whole (2 + 2): 8. Backward: each clamp's gradient reads
the incoming gradient and the saved input and writes the result (2 + 2 + 2), and the split's gradient joins the two
halves into fc1's output gradient (2 + 2): 10. Counted, not fitted. torch.compile fuses the clamp into the
activation (0); serving engines' gpt-oss activation kernels clamp inside (vLLM swigluoai_and_mul), so serving
counts none."""


def activation_clamp_bytes_per_token(model: ModelSpec, tp: np.ndarray, *, moe_layer: bool
                                     ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) bytes per token of clamping one layer's gated-activation inputs
    (ModelSpec.activation_clamp), on one rank of a tensor-parallel group of `tp`; zero without a clamp. The
    width is the activation's: the dense MLP's, or a MoE layer's top-k copies and shared experts."""
    t = np.asarray(tp).astype(float)
    if model.activation_clamp is None:
        return np.zeros(np.shape(t)), np.zeros(np.shape(t))
    if moe_layer and model.moe is not None:
        width = model.moe.experts_per_token * model.moe.moe_ffn_hidden_size + model.moe.shared_ffn_width
    else:
        width = model.ffn_hidden_size
    elements = 2.0 * width / t  # gate and linear halves of fc1's output
    return (np.asarray(ACTIVATION_CLAMP_FORWARD_BYTES * elements),
            np.asarray(ACTIVATION_CLAMP_BACKWARD_BYTES * elements))

