"""LoRA fine-tuning: the adapters' parameters and work beside the frozen base weights.

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", arXiv:2106.09685, Sec. 4.1) freezes
a pre-trained weight W (out x in) and trains a product B A beside it, A (r x in) and B (out x r): the layer
computes W x + B (A x). What that changes for a step:

- memory: W is still held (and gathered under ZeRO-3 / FSDP), but has no gradient, no master copy and no
  optimizer state; the adapters have all three (2 r (in + out) parameters per targeted weight is Hu et al.'s
  count of the trainable parameters);
- compute: the backward of a frozen linear computes the gradient of its input only (the weight-gradient GEMM is
  skipped: autograd computes no gradient for a tensor that does not require one), so a base GEMM costs its forward
  and one backward GEMM instead of two; the adapters add x A^T and (x A^T) B^T forward and their three-fold
  backward, 2 r (in + out) FLOP per token and weight forward;
- communication: only the adapters' gradients are reduced across data-parallel ranks.

Which weights get an adapter: `all_linear`, every linear layer of the transformer block (the attention
projections, the dense MLP and the shared experts), as Hugging Face PEFT's `target_modules="all-linear"` and
NeMo AutoModel's `match_all_linear` choose them (the routed experts, held as grouped tensors, and the router stay
frozen); `attention`, the attention projections (the query and value projections of Hu et al.'s experiments,
with key and output: Megatron-Bridge's linear_qkv and linear_proj); `qkv`, the query, key and value projections
alone (Megatron-Bridge's performance recipes: target_modules ["linear_qkv"]). Under tensor parallelism each adapter is
split with its weight as Megatron-Core's ParallelLinearAdapter splits it (Megatron-Bridge peft/lora.py): for a
column-parallel weight A is replicated and B split by rows; for a row-parallel one A is split by columns and B
replicated.

Pure: shapes from physics.shapes.layer_weight_matrices; arrays over the layouts' lora_rank.
"""

from __future__ import annotations

import numpy as np

from planner.physics.shapes import WeightMatrix, layer_weight_matrices
from planner.specs.layout import LORA_TARGET_CODES, LayoutArrays
from planner.specs.model import ModelSpec

QKV_GEMMS = frozenset({"qkv", "q", "q_down", "q_up", "kv_down", "kv_up"})
"""The attention's input projections (physics.shapes names; a Gated DeltaNet mixer's take the same names)."""
ATTENTION_GEMMS = QKV_GEMMS | {"attn_out"}
"""The attention block's projections."""

FROZEN_GEMMS = frozenset({"router", "index_q", "index_k", "index_weights"})
"""Linear layers no target list adapts: the router, and DeepSeek Sparse Attention's indexer."""


def adapted_matrices(model: ModelSpec, *, moe_layer: bool, linear: bool = False) -> tuple[WeightMatrix, ...]:
    """The weights of one layer an adapter can sit beside, as the modules LoRA wraps: Hugging Face models (which
    PEFT and AutoModel adapt) hold the gated MLP's gate and up projections as two modules, so the fused up-projection
    counts as two matrices of half its rows (Megatron-Bridge's fused linear_fc1 takes one adapter, r x h fewer
    parameters); the router, the indexer and the routed experts get none."""
    out: list[WeightMatrix] = []
    for mat in layer_weight_matrices(model, moe_layer=moe_layer, linear=linear):
        if mat.routed or mat.name in FROZEN_GEMMS:
            continue
        if model.mlp_kind == "gated" and mat.name.endswith("up") and mat.name not in ATTENTION_GEMMS:
            half = WeightMatrix(mat.rows // 2, mat.cols, mat.count, split=mat.split, row_parallel=mat.row_parallel,
                                routed=False, name=mat.name)
            out += [half, half]
            continue
        out.append(mat)
    return tuple(out)


def adapter_widths(model: ModelSpec, lay: LayoutArrays, *, moe_layer: bool, linear: bool = False) -> np.ndarray:
    """Sum of (in + out) over one layer's adapters on one rank of its TP group: its adapter parameters per unit of
    rank."""
    total = np.zeros(np.broadcast_shapes(np.shape(lay.tp), np.shape(lay.lora_targets)))
    for mat in adapted_matrices(model, moe_layer=moe_layer, linear=linear):
        width_in, width_out = _per_rank_in_out(mat, lay.tp)
        widths = mat.count * (width_in + width_out)
        total = total + np.where(targeted(mat, lay), widths, 0.0)
    return np.asarray(total)


def targeted(mat: WeightMatrix, lay: LayoutArrays) -> np.ndarray:
    """Where the layouts' lora_targets put an adapter beside `mat` (one of adapted_matrices)."""
    codes = np.asarray(lay.lora_targets)
    return np.asarray((codes == LORA_TARGET_CODES["all_linear"])
                      | ((codes == LORA_TARGET_CODES["attention"]) & (mat.name in ATTENTION_GEMMS))
                      | ((codes == LORA_TARGET_CODES["qkv"]) & (mat.name in QKV_GEMMS)))


def adapter_params(model: ModelSpec, lay: LayoutArrays, *, moe_layer: bool, linear: bool = False) -> np.ndarray:
    """Trainable adapter parameters of one layer on one rank of its TP group: r x sum(in + out); 0 without LoRA."""
    return np.asarray(lay.lora_rank * adapter_widths(model, lay, moe_layer=moe_layer, linear=linear))


# Bytes per token and per element of an adapter's input (in) and output (out) width, forward and backward, as the
# unfused adapter moves them (Hugging Face PEFT's lora.Linear.forward: result + lora_B(lora_A(dropout(x))) *
# scaling; Megatron-Bridge's LoRALinear adds its adapter's output the same way). Counted, 16-bit activations:
# forward, A reads x (2 in) and B writes its output (2 out), the scaling reads and writes it (4 out) and the sum
# reads it and the base output and writes the result (6 out); backward, the scaling's gradient (4 out), B's input
# and weight gradients each read the output gradient (2 x 2 out), A's input gradient is written (2 in) and added to
# the base layer's (6 in), A's weight gradient reads x (2 in). The r-wide tensors between A and B are left out
# (r is 8 to 64 against thousands).
FORWARD_IN_BYTES, FORWARD_OUT_BYTES = 2, 12
BACKWARD_IN_BYTES, BACKWARD_OUT_BYTES = 10, 8


def _per_rank_in_out(mat: WeightMatrix, tp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An adapter's input and output widths on one rank of its TP group: a column-parallel weight reads the whole
    input and writes its share of the output; a row-parallel one the reverse."""
    t = np.asarray(tp, dtype=float)
    if not mat.split:
        return np.asarray(float(mat.cols) + 0 * t), np.asarray(float(mat.rows) + 0 * t)
    if mat.row_parallel:
        return np.asarray(mat.cols / t), np.asarray(float(mat.rows) + 0 * t)
    return np.asarray(float(mat.cols) + 0 * t), np.asarray(mat.rows / t)


def adapter_traffic_bytes_per_token(model: ModelSpec, lay: LayoutArrays, *, moe_layer: bool, linear: bool = False
                                    ) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) memory traffic per token of one layer's adapters on one rank (FORWARD_* and BACKWARD_*
    bytes per element of each adapter's input and output); 0 without LoRA."""
    fwd = np.zeros(np.broadcast_shapes(np.shape(lay.tp), np.shape(lay.lora_rank)))
    bwd = np.zeros_like(fwd)
    for mat in adapted_matrices(model, moe_layer=moe_layer, linear=linear):
        width_in, width_out = _per_rank_in_out(mat, lay.tp)
        on = (lay.lora_rank > 0) & targeted(mat, lay)
        fwd = fwd + np.where(on, mat.count * (FORWARD_IN_BYTES * width_in + FORWARD_OUT_BYTES * width_out), 0.0)
        bwd = bwd + np.where(on, mat.count * (BACKWARD_IN_BYTES * width_in + BACKWARD_OUT_BYTES * width_out), 0.0)
    return np.asarray(fwd), np.asarray(bwd)
