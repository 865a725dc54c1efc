"""Evaluate a search space: rules, then the cost model once over the grid, then the memory mask.

Infeasibility is data: every rejected candidate gets one reason, the first rule it breaks in
`rules.RULES` order, or `out_of_memory`. Only candidates that pass the rules are costed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields, replace

import numpy as np

from planner.costmodel.rules import RULE_CODES, RULES, violations
from planner.costmodel.training import DEFAULT_HEADROOM, TrainingArrays, TrainingEstimate, estimate, evaluate
from planner.errors import PlannerError
from planner.search.space import Filters, Problem, build_space
from planner.search.suggest import Diagnosis, Suggestion, diagnose, suggest
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import LayoutArrays
from planner.specs.model import ModelSpec

OUT_OF_MEMORY = "out_of_memory"
REASONS: tuple[str, ...] = (*RULE_CODES, OUT_OF_MEMORY)
# Candidates per evaluate() call: large enough that numpy's per-call overhead vanishes, small enough
# that the temporaries stay in the low hundreds of MB.
CHUNK = 65536


@dataclass(frozen=True)
class SearchResult:
    """A searched space: the costed candidates, which of them fit, and why the rest were rejected."""

    model: ModelSpec
    hardware: HardwareProfile
    problem: Problem
    headroom: float
    evaluated: int  # candidates in the grid
    layouts: LayoutArrays  # candidates that pass the rules (costed)
    results: TrainingArrays  # aligned with `layouts`
    fits: np.ndarray  # positions in `layouts` that fit in memory
    rejected: dict[str, int]  # reason -> count, REASONS order, non-zero only
    grid_seconds: float
    evaluate_seconds: float

    @property
    def feasible(self) -> int:
        return int(self.fits.size)

    @property
    def costed(self) -> int:
        return self.layouts.size


def first_broken_rule(broken: dict[str, np.ndarray], size: int) -> np.ndarray:
    """Per candidate, the position in RULES of the first rule it breaks, or -1 when it breaks none."""
    if not broken:
        return np.full(size, -1, dtype=np.int64)
    stacked = np.stack([np.asarray(broken[code], dtype=bool) for code in RULE_CODES])
    first = np.argmax(stacked, axis=0)
    return np.where(stacked.any(axis=0), first, -1)


def evaluate_chunked(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, *, headroom: float, chunk: int = CHUNK
) -> TrainingArrays:
    """`evaluate` over `lay` in a few large chunks, joined back into one TrainingArrays."""
    if lay.size <= chunk:
        return evaluate(model, hw, lay, headroom=headroom)
    parts = [
        evaluate(model, hw, lay.take(np.arange(start, min(start + chunk, lay.size))), headroom=headroom)
        for start in range(0, lay.size, chunk)
    ]
    joined = {}
    for f in fields(TrainingArrays):
        values = [getattr(p, f.name) for p in parts]
        joined[f.name] = np.concatenate(values) if isinstance(values[0], np.ndarray) else values[0]
    return TrainingArrays(**joined)


def check_dtype(hw: HardwareProfile, dtype: str) -> None:
    peaks = hw.accelerator.peak_flops_per_s
    if dtype not in peaks:
        raise PlannerError(f"{hw.name} has no {dtype} peak (it has {', '.join(sorted(peaks))}); choose one of those dtypes")


def _all_rejected_message(model: ModelSpec, grid: LayoutArrays, reason: np.ndarray, gpus: int) -> str:
    """The most common rule's message, with the arithmetic of one candidate that breaks it."""
    counts = np.bincount(reason, minlength=len(RULES))
    rule_pos = int(np.argmax(counts))
    example = int(np.flatnonzero(reason == rule_pos)[0])
    return f"no candidate passes the layout rules; e.g. {RULES[rule_pos].message(model, grid.to_layout(example), gpus)}"


def run_search(
    model: ModelSpec,
    hw: HardwareProfile,
    problem: Problem,
    filters: Filters = Filters(),
    *,
    headroom: float = DEFAULT_HEADROOM,
    chunk: int = CHUNK,
) -> SearchResult:
    """Build the space, reject rule-breakers, cost the rest in one vectorised pass, mask what does not fit."""
    if not 0.0 <= headroom < 1.0:
        raise PlannerError(f"headroom({headroom}) must be in [0, 1)")
    check_dtype(hw, problem.dtype)
    start = time.perf_counter()
    grid = build_space(model, problem, filters)
    reason = first_broken_rule(violations(model, grid, problem.gpus), grid.size)
    valid = np.flatnonzero(reason < 0)
    if valid.size == 0:
        raise PlannerError(_all_rejected_message(model, grid, reason, problem.gpus))
    layouts = grid.take(valid) if valid.size < grid.size else grid
    grid_done = time.perf_counter()
    results = evaluate_chunked(model, hw, layouts, headroom=headroom, chunk=chunk)
    evaluated_at = time.perf_counter()
    fits = np.flatnonzero(results.fits)
    counts = np.bincount(reason[reason >= 0], minlength=len(RULES)).tolist() + [layouts.size - fits.size]
    rejected = {code: int(n) for code, n in zip(REASONS, counts) if n}
    return SearchResult(
        model=model,
        hardware=hw,
        problem=problem,
        headroom=headroom,
        evaluated=grid.size,
        layouts=layouts,
        results=results,
        fits=fits,
        rejected=rejected,
        grid_seconds=grid_done - start,
        evaluate_seconds=evaluated_at - grid_done,
    )


# When nothing fits ---------------------------------------------------------------------------------
# The closest candidates (lowest peak memory among those that pass the rules, one per parallel
# structure), each with the smallest verified changes from planner.search.suggest (the same logic
# `planner check` uses); and two changes to the problem, each verified by searching again: the fewest
# GPUs (x2 ... x16) and the longest sequence (/2 ... /16) at which something fits.

CLOSEST = 3
SCALE_STEPS = (2, 4, 8, 16)


@dataclass(frozen=True)
class NearMiss:
    """A candidate that passes the rules but not the memory check, and what would make it fit."""

    estimate: TrainingEstimate
    diagnosis: Diagnosis
    suggestions: tuple[Suggestion, ...]


def closest_candidates(result: SearchResult, count: int = CLOSEST) -> np.ndarray:
    """Positions in result.layouts of the lowest-memory candidates, one per (tp, pp, cp, ep, interleave)."""
    lay = result.layouts
    order = np.lexsort((result.results.step_seconds, result.results.peak_bytes))
    structure = np.stack([lay.tp, lay.pp, lay.cp, lay.ep, lay.interleave], axis=1)[order]
    _, first = np.unique(structure, axis=0, return_index=True)
    return order[np.sort(first)[:count]]


def near_misses(result: SearchResult, count: int = CLOSEST) -> list[NearMiss]:
    """The closest candidates, why each does not fit, and the smallest verified changes that make it fit."""
    misses = []
    for pos in closest_candidates(result, count):
        layout = result.layouts.to_layout(int(pos), dtype=result.problem.dtype)
        est = estimate(result.model, result.hardware, layout, headroom=result.headroom)
        misses.append(NearMiss(est, diagnose(est), tuple(suggest(result.model, result.hardware, est))))
    return misses


def relax(
    model: ModelSpec, hw: HardwareProfile, problem: Problem, filters: Filters, *, headroom: float,
    field: str, values: list[int],
) -> SearchResult | None:
    """The search with `problem.<field>` set to each of `values` in turn: the first where something fits."""
    for value in values:
        try:
            found = run_search(model, hw, replace(problem, **{field: value}), filters, headroom=headroom)
        except PlannerError:
            continue
        if found.feasible:
            return found
    return None


def fewest_gpus(
    model: ModelSpec, hw: HardwareProfile, problem: Problem, filters: Filters = Filters(), *,
    headroom: float = DEFAULT_HEADROOM,
) -> SearchResult | None:
    """The search at the smallest multiple (x2 ... x16) of the GPU count where something fits, if any.
    A --dp filter is dropped, since more GPUs mean more data-parallel ranks."""
    values = [problem.gpus * f for f in SCALE_STEPS]
    return relax(model, hw, problem, replace(filters, dp=None), headroom=headroom, field="gpus", values=values)


def longest_sequence(
    model: ModelSpec, hw: HardwareProfile, problem: Problem, filters: Filters = Filters(), *,
    headroom: float = DEFAULT_HEADROOM,
) -> SearchResult | None:
    """The search at the longest of seq_len / 2 ... / 16 where something fits, if any."""
    values = [problem.seq_len // f for f in SCALE_STEPS if problem.seq_len % f == 0]
    return relax(model, hw, problem, filters, headroom=headroom, field="seq_len", values=values)
