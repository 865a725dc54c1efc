"""Pipeline geometry: layers per stage, micro-batches in flight, the bubble.

All functions broadcast over numpy arrays: `stage` may be an array of stage
indices (every stage of one layout) or one index per candidate (a grid).
"""

from __future__ import annotations

import numpy as np

from planner.specs.layout import LayoutArrays


def layers_on_stage(num_layers: int, pp: np.ndarray, stage: np.ndarray) -> np.ndarray:
    """Transformer layers on pipeline stage `stage` of `pp`.

    The split need not be even. Layers are spread as evenly as possible and the
    remainder goes to the middle stages first, since the first and last stages
    also carry the embedding and the LM head (Llama 3 405B ran 126 layers on 16
    stages, one layer fewer on the first and the last: Dubey et al. 2024, Sec. 3.3.2).
    """
    pp = np.asarray(pp)
    stage = np.asarray(stage)
    base = num_layers // pp
    extra = num_layers % pp
    middle = (stage >= 1) & (stage <= pp - 2)
    last = (stage == pp - 1) & (pp > 1)
    plus_one = np.where(middle, stage <= extra, np.where(last, extra >= pp - 1, False))
    return np.where(pp == 1, num_layers, base + plus_one.astype(np.int64))


def first_layer_of_stage(num_layers: int, pp: np.ndarray, stage: np.ndarray) -> np.ndarray:
    """Index of the first layer on `stage` (layers before it), for the split of `layers_on_stage`."""
    pp = np.asarray(pp)
    stage = np.asarray(stage)
    base = num_layers // pp
    extra = num_layers % pp
    extras_before = np.clip(np.minimum(stage - 1, extra), 0, None)
    return np.asarray(stage * base + extras_before)


def stage_of_layer(num_layers: int, pp: np.ndarray, layer: int) -> np.ndarray:
    """The stage holding layer index `layer` (0-based) under the split of `layers_on_stage`.

    Stage i starts at i x base + min(i - 1, extra) for i >= 1 (base = L // p, extra = L % p): at
    i (base + 1) - 1 while the stages before it all carry an extra layer, at i x base + extra after.
    """
    pp = np.asarray(pp)
    base = num_layers // pp
    extra = num_layers % pp
    with_extras = (layer + 1) // (base + 1)
    after_extras = (layer - extra) // np.maximum(base, 1)
    stage = np.where(after_extras >= extra + 1, after_extras, with_extras)
    return np.clip(np.where(pp == 1, 0, stage), 0, pp - 1)


PIPELINE_EDGE_UNITS = 2
"""The embedding and the loss, each counted as one more unit of the pipeline split where a virtual stage must
hold at least one: Megatron-Core's --account-for-embedding-in-pipeline-split and
--account-for-loss-in-pipeline-split add one layer each to the count the pp x v virtual stages divide
(megatron/core/transformer/transformer_layer.py get_transformer_layer_offset; megatron/training/arguments.py
validate_args, NVIDIA/Megatron-LM), so a virtual stage may hold the embedding or the loss alone. Megatron-Bridge's
Llama 3.1 405B recipe on GB200 runs 126 layers on pp 16 x v 8 = 128 virtual stages this way (26.02 and 26.04.01
performance tables, docs/performance-summary-archive.md @ 067f987df0)."""


def pipeline_units_per_rank(num_layers: int, pp: np.ndarray | int) -> np.ndarray:
    """Pipeline units per rank, the embedding and the loss counted (PIPELINE_EDGE_UNITS): how many virtual stages
    a rank's share can fill with at least one unit each."""
    return np.asarray((num_layers + PIPELINE_EDGE_UNITS) // np.asarray(pp))


def max_layers_per_stage(num_layers: int, pp: np.ndarray | int) -> np.ndarray:
    """The most layers any stage holds under the split of `layers_on_stage`: ceil(L / p) (the middle stages
    take the remainder first, and there are at least as many of them as remainder layers less one)."""
    return -(-num_layers // np.asarray(pp))


def stage_layer_split(num_layers: int, num_dense_layers: int, pp: np.ndarray, stage: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(layers, MoE layers) on `stage`: the split of `layers_on_stage`, dense layers first (DeepSeek-V3's
    leading dense layers sit on the first stages, as Megatron-Core and vLLM place them)."""
    n = layers_on_stage(num_layers, pp, stage)
    start = first_layer_of_stage(num_layers, pp, stage)
    n_dense = np.clip(np.minimum(start + n, num_dense_layers) - start, 0, n)
    return n, n - n_dense


def mtp_layers_on_stage(model_mtp_layers: int, lay: LayoutArrays, stage: np.ndarray) -> np.ndarray:
    """Multi-token-prediction modules on `stage`: the layout's count (-1: the model's `model_mtp_layers`), all
    on the last stage. Megatron-Core without a custom pipeline layout builds every MTP layer on the last
    pipeline stage (megatron/core/transformer/multi_token_prediction.py @ d98e8a64, get_mtp_num_layers_to_build:
    mtp_num_layers if is_pipeline_last_stage else 0); with virtual stages, in the last model chunk."""
    count = np.where(lay.mtp_layers < 0, model_mtp_layers, lay.mtp_layers)
    return np.asarray(np.where(np.asarray(stage) == lay.pp - 1, count, 0))


def candidate_stages(num_layers: int, num_dense_layers: int, pp: np.ndarray, mixer_period: int = 0) -> np.ndarray:
    """The stages that can be the heaviest, stacked on a new leading axis: every formula broadcasts over
    it and over the layouts' own axes.

    Stages 0, 1 and p - 1 for a model whose layers are alike: from stage 1 to p - 2 the micro-batches in
    flight fall and the layer count never rises. With leading dense layers before MoE ones (DeepSeek-V3),
    a stage past the boundary holds more expert parameters, so the stage holding the first MoE layer and
    the one after it join: on either side of them the same monotonicity holds.

    With two kinds of mixer repeating every `mixer_period` layers (Gated DeltaNet layers and every k-th attention
    layer), stages of the same layer count differ in their mix, and the mix of consecutive stages repeats within
    k stages (their first layers step by the stage's count modulo k). Of the stages with one mix the first holds
    the most micro-batches, so the first k stages of each run of equal layer counts join: from stage 1 (those
    with the remainder's extra layer), from the first stage without it, and from the stage after the MoE boundary.
    """
    last = np.asarray(pp) - 1
    stages = [np.zeros_like(last), np.minimum(1, last), last]
    boundary = stage_of_layer(num_layers, pp, num_dense_layers) if 0 < num_dense_layers < num_layers else None
    if boundary is not None:
        stages += [boundary, np.minimum(boundary + 1, last)]
    if mixer_period > 1:
        without_extra = np.asarray(num_layers % np.asarray(pp)) + 1  # layers_on_stage: stages 1 .. L % p carry one more
        # the run of all-MoE stages starts after the boundary stage, which holds both kinds
        starts = [np.minimum(1, last), np.minimum(without_extra, last)] + (
            [np.minimum(boundary + 1, last)] if boundary is not None else [])
        stages += [np.minimum(start + i, last) for start in starts for i in range(mixer_period)]
    return np.stack(np.broadcast_arrays(*stages))


def dualpipe_candidate_stages(num_layers: int, pp: np.ndarray) -> np.ndarray:
    """Under DualPipe rank r holds stages r and p - 1 - r, and the heaviest rank is the pair with the most
    layers, not one at the ends: the first r whose mirror still gets a remainder layer (stages 1 .. L % p
    carry one more, layers_on_stage), and the middle pair p/2 - 1. Stacked on a new leading axis."""
    pp = np.asarray(pp)
    middle = np.maximum(pp // 2 - 1, 0)
    both_long = np.clip(pp - 1 - num_layers % pp, 1, None)
    return np.stack(np.broadcast_arrays(np.minimum(both_long, middle), middle))


def microbatches_in_flight(lay: LayoutArrays, stage: np.ndarray) -> np.ndarray:
    """Micro-batches whose activations stage `stage` holds at its peak (in units of the stage's layers).

    1F1B (PipeDream-Flush; Narayanan et al. 2021, Sec. 2.2.1): stage i of p holds min(p - i, m).
    Interleaved 1F1B with v chunks per rank, each virtual stage running n micro-batches in a row (n = p unless
    --microbatch-group-size-per-virtual-pipeline-stage says otherwise): Megatron-Core's schedule warms up
    2(p - i - 1) + (v - 1)n chunk-micro-batches before its first backward (schedules.py
    get_pp_rank_microbatches @ d98e8a64), so at the peak it holds that plus one, each chunk being 1/v of the
    stage's layers: (2(p - i - 1) + (v - 1)n + 1) / v; with n = p this is p + (p - 1 - 2i) / v, at i = 0
    p (1 + (p - 1)/(p v)), Korthikanti et al. 2022 Sec. 4.2.3. GPipe holds all m.
    With pp = 1 gradient accumulation runs one micro-batch at a time.
    """
    p = lay.pp.astype(float)
    v = lay.interleave.astype(float)
    m = lay.num_micro_batches.astype(float)
    n = lay.microbatch_group_size.astype(float)
    stage = np.asarray(stage, dtype=float)
    plain = p - stage
    interleaved = (2 * (p - stage - 1) + (v - 1) * n + 1) / v
    held = np.where(lay.interleave > 1, interleaved, plain)
    held = np.where(lay.gpipe, m, np.minimum(held, m))
    return np.where(lay.pp == 1, 1.0, held)


def bubble_fraction(lay: LayoutArrays) -> np.ndarray:
    """Idle fraction relative to the ideal time: (p - 1) / (v m) (Narayanan et al. 2021, Sec. 2.2). A group of n >= p
    micro-batches per virtual stage (the rule's bound) lengthens the warm-up but not the idle time: each virtual
    stage's first micro-batch returns to rank 0 after p chunk steps, no later than its n-th is issued, so the
    steady state never waits and only the p - 1 chunk steps at each end stay idle."""
    p = lay.pp.astype(float)
    return np.asarray((p - 1) / (lay.interleave * lay.num_micro_batches))
