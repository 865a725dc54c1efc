"""Ranking feasible layouts: objectives, deterministic ties, the Pareto front, training cost.

Every function takes arrays over candidates and returns arrays; nothing loops per candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from planner.errors import PlannerError
from planner.specs.layout import LayoutArrays
from planner.training.estimate import TrainingArrays

Objective = Literal["throughput", "memory", "cost"]
OBJECTIVES: tuple[str, ...] = ("throughput", "memory", "cost")

SECONDS_PER_HOUR = 3600.0

# Tie-breakers after the objective, most significant first: fewer GPUs in model parallelism, then
# simpler settings (expert TP as tp before parallel folding, no interleave, lower ZeRO stage, less
# recompute, no SP, larger micro-batches last). "folded" is etp != tp (see tie_keys).
TIE_FIELDS: tuple[str, ...] = (
    "tp", "pp", "cp", "ep", "folded", "interleave", "zero", "recompute", "sequence_parallel", "micro_batch",
)

RANK_RESOLUTION = 0.01
"""Step times within this share of each other are a tie at the model's resolution: its error on a source
it was not fitted on is about 5% (docs/validation.md, leave-one-source-out), so a 1% lead is no evidence
that one layout runs faster. The throughput and cost objectives sort the step time in buckets of this
width from the fastest, and inside a bucket put the layout whose copy of the model spans the fewest GPUs
first (model_copy_gpus: tp x pp x cp, or the expert group where it is wider): the smaller model-parallel
group is the one engine guides start from (TP inside the node, then PP, CP only when the sequence needs
it) and the one that leaves more data parallelism to scale with. Then the fewer virtual pipeline stages per
rank: each one more sends every micro-batch's activations and gradients across the pipeline once more
(Narayanan et al. 2021, Sec. 2.2.2: communication grows with v) and adds a step to the schedule, costs the
model counts only as far as they are exposed, so among ties the plainer schedule leads (a v of 40, one layer
per virtual stage, beating v 1 by 0.1% is no evidence). Exact step time follows inside the bucket. The
memory objective keeps exact order."""


def tie_keys(layouts: LayoutArrays) -> list[np.ndarray]:
    """The TIE_FIELDS of `layouts` as sort keys (smaller first), most significant first."""
    return [np.asarray(layouts.etp != layouts.tp) if name == "folded" else getattr(layouts, name)
            for name in TIE_FIELDS]


def model_copy_gpus(layouts: LayoutArrays) -> np.ndarray:
    """GPUs one copy of the model's weights spans: pp stages of max(tp x cp, ep x etp) ranks (a dense model's
    tp x pp x cp; a MoE model's expert group too, which shards the experts over ep x etp ranks of each stage)."""
    return np.asarray(layouts.pp * np.maximum(layouts.tp * layouts.cp, layouts.ep * layouts.etp))


def step_bucket(step_seconds: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Per candidate: floor(log(step / fastest) / log(1 + RANK_RESOLUTION)), the fastest among `index`."""
    step = np.asarray(step_seconds, dtype=float)
    if index.size == 0:
        return np.zeros(step.shape, dtype=np.int64)
    fastest = float(step[index].min())
    return np.asarray(np.floor(np.log(step / fastest) / np.log1p(RANK_RESOLUTION) + 1e-9), dtype=np.int64)


def objective_keys(results: TrainingArrays, objective: str, layouts: LayoutArrays | None = None,
                   index: np.ndarray | None = None) -> list[np.ndarray]:
    """The objective's sort keys, most significant first (smaller is better). With `layouts` the throughput
    and cost keys lead with the step-time bucket, the model-parallel size and the virtual stages per rank
    (RANK_RESOLUTION)."""
    if objective in ("throughput", "cost"):
        # With the GPU count fixed, dollars per token are proportional to the step time.
        exact = [results.step_seconds, results.peak_bytes]
        if layouts is None:
            return exact
        idx = np.arange(np.size(results.step_seconds)) if index is None else index
        return [step_bucket(results.step_seconds, idx), model_copy_gpus(layouts), layouts.interleave, *exact]
    if objective == "memory":
        return [results.peak_bytes, results.step_seconds]
    raise PlannerError(f"unknown objective '{objective}'; choose one of {', '.join(OBJECTIVES)}")


def rank(layouts: LayoutArrays, results: TrainingArrays, objective: str, index: np.ndarray | None = None) -> np.ndarray:
    """Indices of the candidates in `index` (default: all), best first; ties broken by TIE_FIELDS.

    np.lexsort sorts by its last key first, so the keys are passed least significant first.
    """
    idx = np.arange(layouts.size) if index is None else np.asarray(index, dtype=np.int64)
    keys = objective_keys(results, objective, layouts, idx) + tie_keys(layouts)
    shape = np.shape(results.step_seconds)
    order = np.lexsort([np.broadcast_to(np.asarray(k), shape)[idx] for k in reversed(keys)])
    return idx[order]


def pareto_front(step_seconds: np.ndarray, peak_bytes: np.ndarray) -> np.ndarray:
    """Positions of the candidates on the front of step time against peak memory (both minimised).

    A candidate is on the front when no other is at least as good in both and better in one. Sorted by
    step time (then memory), a candidate is on it exactly when its memory is below every faster one's;
    of candidates equal in both, the first in that order stands for them. Returned fastest first.
    """
    step = np.asarray(step_seconds, dtype=float)
    peak = np.asarray(peak_bytes, dtype=float)
    if step.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((peak, step))
    peak_sorted = peak[order]
    best_before = np.concatenate(([np.inf], np.minimum.accumulate(peak_sorted)[:-1]))
    return order[peak_sorted < best_before]


# Layouts with the same parallel degrees and exactly the same step time and peak memory are
# interchangeable under the model (e.g. selective recompute with flash attention, which keeps no score
# matrix to drop); only the first in ranking order is shown.
FOLD_FIELDS: tuple[str, ...] = ("tp", "pp", "cp", "dp", "etp", "ep", "interleave")


def equivalent_to_previous(layouts: LayoutArrays, results: TrainingArrays, order: np.ndarray) -> np.ndarray:
    """Per position of `order`: True when it equals the one before it in step time, peak memory and degrees.

    The ranking's leading keys are the objective's and the degrees, so equivalent layouts are adjacent.
    """
    same = np.zeros(order.size, dtype=bool)
    if order.size > 1:
        a, b = order[1:], order[:-1]
        eq = (results.step_seconds[a] == results.step_seconds[b]) & (results.peak_bytes[a] == results.peak_bytes[b])
        for name in FOLD_FIELDS:
            column = getattr(layouts, name)
            eq &= column[a] == column[b]
        same[1:] = eq
    return same


@dataclass(frozen=True)
class Selection:
    """The ranking of the feasible layouts and the part of it to show (positions in the costed arrays)."""

    order: np.ndarray  # every feasible position, best first
    ranks: np.ndarray  # per costed position: 1-based rank, equivalent layouts sharing one; 0 if infeasible
    shown: np.ndarray  # positions to show, best first

    @property
    def winner(self) -> int | None:
        return int(self.order[0]) if self.order.size else None


def select(
    layouts: LayoutArrays, results: TrainingArrays, feasible: np.ndarray, objective: str, *,
    top: int | None, pareto: bool,
) -> Selection:
    """Rank the feasible layouts and pick those to show.

    Shown: the first `top` (default 10) of the ranking with equivalent layouts folded, or with `pareto`
    the front of step time against peak memory in ranking order (all of it unless `top` is given).
    """
    order = rank(layouts, results, objective, feasible)
    same = equivalent_to_previous(layouts, results, order)
    ranks = np.zeros(layouts.size, dtype=np.int64)
    ranks[order] = np.cumsum(~same)
    if pareto:
        on_front = np.zeros(layouts.size, dtype=bool)
        on_front[feasible[pareto_front(results.step_seconds[feasible], results.peak_bytes[feasible])]] = True
        shown = order[on_front[order]]
        return Selection(order, ranks, shown if top is None else shown[:top])
    return Selection(order, ranks, order[~same][: (10 if top is None else top)])


@dataclass(frozen=True)
class TrainingCost:
    """Time and money to train `tokens` tokens, per candidate."""

    tokens: float
    price_per_gpu_hour_usd: float | None
    hours: np.ndarray
    gpu_hours: np.ndarray
    dollars: np.ndarray | None


def training_cost(
    tokens: float, tokens_per_second: np.ndarray, gpus: np.ndarray | int, price_per_gpu_hour_usd: float | None
) -> TrainingCost:
    """Wall-clock hours, GPU-hours and (with a price) dollars to process `tokens` tokens."""
    if tokens <= 0:
        raise PlannerError(f"tokens({tokens:g}) must be positive")
    if price_per_gpu_hour_usd is not None and price_per_gpu_hour_usd <= 0:
        raise PlannerError(f"price per GPU-hour({price_per_gpu_hour_usd:g}) must be positive")
    hours = tokens / np.asarray(tokens_per_second, dtype=float) / SECONDS_PER_HOUR
    gpu_hours = hours * np.asarray(gpus, dtype=float)
    dollars = None if price_per_gpu_hour_usd is None else gpu_hours * price_per_gpu_hour_usd
    return TrainingCost(
        tokens=float(tokens), price_per_gpu_hour_usd=price_per_gpu_hour_usd, hours=hours, gpu_hours=gpu_hours,
        dollars=dollars,
    )
