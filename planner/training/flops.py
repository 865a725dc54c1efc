"""FLOP counts: model FLOPs (what MFU counts) and hardware FLOPs (with recompute).

Convention (Narayanan et al. 2021, eq. 3; Chowdhery et al. 2022, App. B): a
token's forward pass costs 2 FLOPs per weight it passes through, plus the
attention core, QK^T and AV, 2·s·(q width) + 2·s·(v width) per token per layer
counted WITHOUT halving for the causal mask (as those papers and Megatron-LM's
throughput counter do); backward costs twice the forward. For GPT-shaped models
this gives 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) per step (96 with full
recompute, Narayanan eq. 3), plus 6 FLOPs per token for each norm and bias
parameter, which the equation leaves out (under 0.1%).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.physics import linear_attention, sparse_attention
from planner.physics.kernels import window_work_fraction
from planner.physics.params import count_params, indexer_params
from planner.physics.shapes import attention_dims
from planner.specs.layout import LayoutArrays, RecomputeCode
from planner.specs.model import ModelSpec

BACKWARD_TO_FORWARD_FLOP = 2.0  # weight and input gradients: two GEMMs per forward GEMM


def layer_weight_flop_per_token(model: ModelSpec) -> float:
    """Forward GEMM FLOPs per token summed over all layers (active experts only), 2 per weight."""
    return 2.0 * count_params(model).layers_active  # GDN layers: their own projections


def attention_core_flop_per_token(model: ModelSpec, seq_len: np.ndarray) -> np.ndarray:
    """Forward QK^T and AV FLOPs per token, all layers, full (non-causal) s x s; sliding-window layers
    count the share of causal query-key pairs their window keeps (window_work_fraction), sparse attention the
    share of the keys each query keeps, at the MHA form's widths: the math of the attention, not the MQA form's
    3.4x wider products its kernels run (which the time counts), so that MFU does not grow with the formulation."""
    widths = attention_dims(model, absorbed=False)
    s = np.asarray(seq_len, dtype=float)
    # only the layers with softmax attention (a Gated DeltaNet layer's mixer: linear_mixer_flop_per_token)
    flop: np.ndarray = (model.num_attention_layers * 2.0 * s * (widths.query + widths.output)
                        * window_work_fraction(model, s))
    return flop


def linear_mixer_flop_per_token(model: ModelSpec) -> float:
    """Forward FLOPs per token, all Gated DeltaNet layers, of their chunked gated delta rule
    (physics.linear_attention.core_flop_per_token; the projections are weight FLOPs); 0 without them."""
    la = model.linear_attention
    return 0.0 if la is None else model.num_linear_layers * linear_attention.core_flop_per_token(la)


def indexer_flop_per_token(model: ModelSpec, seq_len: np.ndarray) -> np.ndarray:
    """Forward FLOPs per token, all layers, of DeepSeek Sparse Attention's indexer logits, counted like the
    attention core (s keys per token, not halved for the causal mask); 0 without sparse attention."""
    if model.sparse_attention is None:
        return np.zeros_like(np.asarray(seq_len, dtype=float))
    s = np.asarray(seq_len, dtype=float)
    return np.asarray(model.num_layers * s * sparse_attention.indexer_flop_per_pair(model))


def indexer_beyond_the_rule_flop_per_token(model: ModelSpec, seq_len: np.ndarray) -> np.ndarray:
    """What the indexer costs per token, all layers, beyond the rule that a backward is twice its forward (which
    step_flop applies to its logits and projections with every other term): its sparse loss's query and key
    gradients cover only each query's selected keys, its projections compute weight gradients alone (a detached
    input), and the loss's target recomputes the selected pairs' scores once (forward only: the target is
    detached). Negative where the indexer does less than the rule; 0 without sparse attention."""
    if model.sparse_attention is None:
        return np.zeros_like(np.asarray(seq_len, dtype=float))
    s = np.asarray(seq_len, dtype=float)
    share = sparse_attention.selected_share(model, s)
    logits = indexer_flop_per_token(model, s)
    projections = model.num_layers * 2.0 * indexer_params(model)
    backward = BACKWARD_TO_FORWARD_FLOP * logits * share + projections
    target = model.num_layers * s * sparse_attention.target_flop_per_pair(model, mqa_form=False) * share
    return np.asarray(backward + target - BACKWARD_TO_FORWARD_FLOP * (logits + projections))


def lm_head_flop_per_token(model: ModelSpec) -> float:
    return 2.0 * model.vocab_size * model.hidden_size


@dataclass(frozen=True)
class StepFlop:
    """FLOPs of one optimizer step, all GPUs together."""

    model_flop: np.ndarray  # forward + backward, no recompute (MFU's numerator)
    hardware_flop: np.ndarray  # plus the recomputed forward work (HFU's numerator)


def step_flop(model: ModelSpec, lay: LayoutArrays) -> StepFlop:
    tokens = lay.global_batch.astype(float) * lay.seq_len
    weights_fwd = layer_weight_flop_per_token(model)
    cores_fwd = (attention_core_flop_per_token(model, lay.seq_len) + indexer_flop_per_token(model, lay.seq_len)
                 + linear_mixer_flop_per_token(model))
    layers_fwd = weights_fwd + cores_fwd
    head_fwd = lm_head_flop_per_token(model)
    passes = 1.0 + BACKWARD_TO_FORWARD_FLOP
    # LoRA freezes the weights: their backward computes the input gradient alone, one GEMM where training them takes
    # two (physics.lora); the adapters' own FLOPs, 2 r (in + out) per targeted weight and token, are left out (under
    # 1% at the ranks LoRA runs with)
    weight_passes = np.where(lay.lora_rank > 0, 2.0, passes)
    model_flop = tokens * (passes * cores_fwd + weight_passes * (weights_fwd + head_fwd)
                           + indexer_beyond_the_rule_flop_per_token(model, lay.seq_len))
    # Recompute repeats forward work: full = every layer's forward (the fraction of layers recomputed when
    # only some are); selective = the attention core (Korthikanti et al. 2022, Sec. 5). With flash
    # attention nothing extra is recomputed by "selective": the kernel already recomputes inside its
    # backward, which the attention efficiency accounts for.
    layers_per_stage = -(-model.num_layers // lay.pp)
    fraction = np.where(lay.recompute_layers < 0, 1.0, np.minimum(lay.recompute_layers / layers_per_stage, 1.0))
    extra = np.where(
        lay.recompute == RecomputeCode.FULL,
        fraction * layers_fwd,
        np.where((lay.recompute == RecomputeCode.SELECTIVE) & ~lay.flash_attention, attention_core_flop_per_token(model, lay.seq_len), 0.0),
    )
    return StepFlop(model_flop=model_flop, hardware_flop=model_flop + tokens * extra)
