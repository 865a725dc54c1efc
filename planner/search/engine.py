"""Evaluate a search space: rules, then the cost model once over the grid, then the memory mask.

Infeasibility is data: every rejected candidate gets one reason, the first rule it breaks in
`rules.RULES` order, or `out_of_memory`. The cost model runs over the whole broadcast grid (cheaper
than gathering the valid points first); only the points that pass the rules are kept, as flat arrays.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from planner.errors import PlannerError
from planner.search.space import Filters, Points, Problem, Space, build_space, flatten
from planner.search.suggest import Diagnosis, Suggestion, diagnose, suggest
from planner.specs.engine import EngineProfile, engine_profile
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import Layout, LayoutArrays
from planner.specs.model import ModelSpec
from planner.training.estimate import (
    DEFAULT_HEADROOM,
    TrainingArrays,
    TrainingEstimate,
    check_dtype,
    estimate,
    evaluate,
)
from planner.training.rules import RULE_CODES, RULES, violations

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
    evaluated: int  # layouts in the space (grid points the defaults do not prune)
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

    def layout(self, pos: int) -> Layout:
        """The candidate at `pos` in `layouts` as a `Layout`, with the problem's precisions (the grid holds
        bytes, which do not tell fp16 gradients from bf16 ones)."""
        layout = self.layouts.to_layout(int(pos), dtype=self.problem.dtype, engine=self.problem.engine)
        if layout.grad_dtype != self.problem.grad_dtype:
            layout = layout.model_copy(update={"grad_dtype": self.problem.grad_dtype})
        return layout


def first_broken_rule(broken: dict[str, np.ndarray], shape: int | tuple[int, ...]) -> np.ndarray:
    """Per candidate, the position in RULES of the first rule it breaks, or -1 when it breaks none."""
    if not broken:
        return np.full(shape, -1, dtype=np.int64)
    stacked = np.stack([np.broadcast_to(np.asarray(broken[code], dtype=bool), shape) for code in RULE_CODES])
    first = np.argmax(stacked, axis=0)
    return np.where(stacked.any(axis=0), first, -1)


def _flatten_results(res: TrainingArrays, shape: tuple[int, ...], flat_index: np.ndarray) -> TrainingArrays:
    points = Points.of(shape, flat_index)
    values: dict[str, Any] = {}  # arrays and the scalar fields, as TrainingArrays declares them
    for f in fields(TrainingArrays):
        v = getattr(res, f.name)
        values[f.name] = points.gather(v) if isinstance(v, np.ndarray) else v
    return TrainingArrays(**values)


def _concat_results(parts: list[TrainingArrays]) -> TrainingArrays:
    if len(parts) == 1:
        return parts[0]
    joined: dict[str, Any] = {}
    for f in fields(TrainingArrays):
        values = [getattr(p, f.name) for p in parts]
        joined[f.name] = np.concatenate(values) if isinstance(values[0], np.ndarray) else values[0]
    return TrainingArrays(**joined)


def evaluate_space(
    model: ModelSpec, hw: HardwareProfile, space: Space, flat_index: np.ndarray, *, headroom: float,
    chunk: int = CHUNK, engine: EngineProfile | None = None,
) -> TrainingArrays:
    """`evaluate` over the broadcast grid, a block of structural rows at a time (about `chunk` points
    each), keeping the points at `flat_index` (C order over space.shape, ascending) as 1-d arrays."""
    shape = space.shape
    per_row = int(np.prod(shape[1:]))
    rows_per_chunk = max(1, chunk // max(per_row, 1))
    parts = []
    for start in range(0, shape[0], rows_per_chunk):
        stop = min(start + rows_per_chunk, shape[0])
        lo, hi = np.searchsorted(flat_index, [start * per_row, stop * per_row])
        if lo == hi:
            continue
        block = space.rows(start, stop)
        res = evaluate(model, hw, block.grid, headroom=headroom, engine=engine)
        parts.append(_flatten_results(res, block.shape, flat_index[lo:hi] - start * per_row))
    return _concat_results(parts)


def evaluate_chunked(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, *, headroom: float, chunk: int = CHUNK,
    engine: EngineProfile | None = None,
) -> TrainingArrays:
    """`evaluate` over a plain list of layouts in chunks of `chunk`, joined back into one TrainingArrays."""
    if lay.size <= chunk:
        return evaluate(model, hw, lay, headroom=headroom, engine=engine)
    return _concat_results([
        evaluate(model, hw, lay.take(np.arange(start, min(start + chunk, lay.size))), headroom=headroom,
                 engine=engine)
        for start in range(0, lay.size, chunk)
    ])


def _all_rejected_message(model: ModelSpec, space: Space, broken: dict[str, np.ndarray], reason: np.ndarray,
                          gpus: int, engine: str = "megatron") -> str:
    """A rule every candidate breaks (a problem-level mistake such as seq_len > max_seq_len), else the
    most common first-broken rule, with the arithmetic of one candidate that breaks it."""
    in_space = np.broadcast_to(space.in_space, space.shape)
    always = [pos for pos, rule in enumerate(RULES) if bool(np.all(broken[rule.code][in_space]))]
    counts = np.bincount(reason[reason >= 0], minlength=len(RULES))
    rule_pos = always[0] if always else int(np.argmax(counts))
    breaks = in_space & np.broadcast_to(broken[RULES[rule_pos].code], space.shape)
    # The example: a candidate that breaks this rule alone where there is one (it shows the rule is what
    # stands in the way), else the first that breaks it.
    n_broken = sum(np.broadcast_to(np.asarray(b, dtype=bool), space.shape).astype(np.int64) for b in broken.values())
    only = np.flatnonzero(breaks & (n_broken == 1))
    example = flatten(space.grid, only[:1] if only.size else np.flatnonzero(breaks)[:1]).to_layout(0, engine=engine)
    tally = ", ".join(f"{RULES[pos].code} {n:,}" for pos, n in sorted(enumerate(counts.tolist()), key=lambda p: -p[1])
                      if n)
    label = f"tp {example.tp} pp {example.pp} cp {example.cp} dp {example.dp} mb {example.micro_batch}"
    message = (f"no candidate passes the layout rules ({tally}); e.g. {label}: "
               f"{RULES[rule_pos].message(model, example, gpus)}")
    if RULES[rule_pos].code == "batch_not_divisible" and only.size:
        message += _nearest_batches(space, only)
    return message


def _nearest_batches(space: Space, only_batch: np.ndarray) -> str:
    """The global batches nearest the problem's (one below, one above) that some candidate breaking only
    the batch rule would divide, as a hint: '; the nearest global batches a layout divides: 1020, 1025'."""
    lay = flatten(space.grid, only_batch)
    batch = int(lay.global_batch[0])
    step = np.unique(lay.dp * lay.micro_batch)
    below = (batch // step) * step
    above = below + step
    near = sorted({int(below[below > 0].max())} if (below > 0).any() else set()) + [int(above.min())]
    return "; the nearest global batches a layout divides: " + ", ".join(f"{b:,}" for b in near)


def run_search(
    model: ModelSpec,
    hw: HardwareProfile,
    problem: Problem,
    filters: Filters = Filters(),
    *,
    headroom: float = DEFAULT_HEADROOM,
    chunk: int = CHUNK,
) -> SearchResult:
    """Build the space, reject rule-breakers, cost the grid in one vectorised pass, mask what does not fit."""
    if not 0.0 <= headroom < 1.0:
        raise PlannerError(f"headroom({headroom}) must be in [0, 1)")
    check_dtype(hw, problem.dtype, problem.fp8_recipe, problem.fp8_attention, problem.moe_fused_mlp)
    if problem.moe_fused_mlp and (model.moe is None or model.mlp_kind != "gated"):
        raise PlannerError(f"moe_fused_mlp runs a MoE model's routed experts with a gated activation; {model.name} has "
                           f"{'no experts' if model.moe is None else 'a ' + model.mlp_kind + ' MLP'}: drop --moe-fused-mlp")
    problem = problem.for_model(model, hw)  # the MoE settings decided, as the result reports them
    start = time.perf_counter()
    space = build_space(model, problem, filters)
    engine = engine_profile(problem.engine)
    broken = violations(model, space.grid, problem.gpus, engine)
    # reason: -2 outside the space, -1 valid, else the position in RULES of the first rule broken
    reason = np.where(np.broadcast_to(space.in_space, space.shape), first_broken_rule(broken, space.shape), -2)
    valid = np.flatnonzero(reason == -1)
    if valid.size == 0:
        raise PlannerError(_all_rejected_message(model, space, broken, reason, problem.gpus, problem.engine))
    layouts = flatten(space.grid, valid)
    grid_done = time.perf_counter()
    with np.errstate(divide="ignore", invalid="ignore"):  # points that break a rule are costed too, then dropped
        results = evaluate_space(model, hw, space, valid, headroom=headroom, chunk=chunk, engine=engine)
    evaluated_at = time.perf_counter()
    fits = np.flatnonzero(results.fits)
    counts = np.bincount(reason[reason >= 0], minlength=len(RULES)).tolist() + [layouts.size - fits.size]
    rejected = {code: int(n) for code, n in zip(REASONS, counts) if n}
    return SearchResult(
        model=model,
        hardware=hw,
        problem=problem,
        headroom=headroom,
        evaluated=space.size,
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
    """Positions in result.layouts of the lowest-memory candidates, one per (tp, pp, cp, etp, ep, interleave)."""
    lay = result.layouts
    order = np.lexsort((result.results.step_seconds, result.results.peak_bytes))
    structure = np.stack([lay.tp, lay.pp, lay.cp, lay.etp, lay.ep, lay.interleave], axis=1)[order]
    _, first = np.unique(structure, axis=0, return_index=True)
    return order[np.sort(first)[:count]]


def near_misses(result: SearchResult, count: int = CLOSEST) -> list[NearMiss]:
    """The closest candidates, why each does not fit, and the smallest verified changes that make it fit."""
    misses = []
    for pos in closest_candidates(result, count):
        layout = result.layout(int(pos))
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
            changed: dict[str, Any] = {field: value}  # a field name known only at run time
            found = run_search(model, hw, replace(problem, **changed), filters, headroom=headroom)
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


# the fewest GPUs ----------------------------------------------------------------------------------------
MAX_GPU_FACTOR = 16  # look up to 16x the job's GPU count
TRIES_PER_COUNT = 20  # fitting layouts tried per GPU count when the engine cannot run the fastest ones


def fewest_gpus_fix(
    model: ModelSpec,
    hw: HardwareProfile,
    est: TrainingEstimate,
    *,
    engine: Any = None,
) -> Suggestion | None:
    """The fewest GPUs of the job's kind on which some layout fits, and the fastest such layout, re-estimated.

    GPU counts are whole nodes once the job spans a node (else single GPUs). The count is doubled until
    something fits (up to 16x the job's), then the counts between the last miss and that hit are tried in
    order, at most MAX_PROBES of them (evenly spaced when there are more), so the answer is the fewest to
    within that spacing. At each count the whole layout space is searched with the job's batch, sequence,
    precisions and optimizer. With `engine` (an engine writer's `engine_layout`) the layout is the one that
    engine runs, or the next fastest."""
    base = est.layout
    node = hw.node.gpus_per_node
    step = node if base.gpus >= node else 1
    miss, hit = base.gpus, None
    count = base.gpus
    while count < base.gpus * MAX_GPU_FACTOR:
        count = min(count * 2, base.gpus * MAX_GPU_FACTOR)
        count = -(-count // step) * step
        found = _fit_at(model, hw, est, count, engine)
        if found is not None:
            hit = (count, found)
            break
        miss = count
    if hit is None:
        return None
    between = list(range((miss // step + 1) * step, hit[0], step))
    if len(between) > MAX_PROBES:
        stride = -(-len(between) // MAX_PROBES)
        between = between[::stride]
    for count in between:
        found = _fit_at(model, hw, est, count, engine)
        if found is not None:
            return found
    return hit[1]


MAX_PROBES = 32


def _fit_at(model: ModelSpec, hw: HardwareProfile, est: TrainingEstimate, gpus: int, engine: Any
            ) -> Suggestion | None:
    """The fastest layout on `gpus` GPUs that fits (as `engine` runs it), as a Suggestion; None if none does."""
    base = est.layout
    problem = Problem(gpus=gpus, global_batch=base.global_batch, seq_len=base.seq_len, dtype=base.dtype,
                      grad_dtype=base.grad_dtype, flash_attention=base.flash_attention, optimizer=base.optimizer,
                      muon_ns_steps=base.muon_ns_steps, muon_tp_mode=base.muon_tp_mode,
                      muon_split_qkv=base.muon_split_qkv, lora_rank=base.lora_rank, lora_targets=base.lora_targets,
                      overlap_grad_reduce=base.overlap_grad_reduce, overlap_tp_comm=base.overlap_tp_comm,
                      optimizer_state_dtype=base.optimizer_state_dtype,
                      master_weights_dtype=base.master_weights_dtype, moe_dispatcher=base.moe_dispatcher,
                      moe_ep_overlap=base.moe_ep_overlap, schedule=base.schedule,
                      moe_delay_wgrad=base.moe_delay_wgrad, moe_load_imbalance=base.moe_load_imbalance,
                      engine=base.engine,
                      compile=base.compile, fp8_param_gather=base.fp8_param_gather,
                      attention_kernel=base.attention_kernel, fp8_recipe=base.fp8_recipe,
                      fp8_attention=base.fp8_attention, moe_fused_mlp=base.moe_fused_mlp)
    try:
        result = run_search(model, hw, problem, headroom=est.headroom)
    except PlannerError:
        return None
    if result.feasible == 0:
        return None
    order = result.fits[np.argsort(result.results.step_seconds[result.fits], kind="stable")]
    for pos in order[:TRIES_PER_COUNT]:
        layout = result.layout(int(pos))
        if engine is not None:
            try:
                layout, _ = engine(model, layout)
            except PlannerError:
                continue
        again = estimate(model, hw, layout, headroom=est.headroom)
        if not again.fits:
            continue
        description, diff = _describe_move(base, layout)
        peak = float(again.stages[again.peak_stage].total_bytes)
        base_peak = float(est.stages[est.peak_stage].total_bytes)
        step_seconds = again.scalar("step_seconds")
        return Suggestion(description=description, changes=diff, layout=layout, gpus=layout.gpus,
                          peak_bytes=peak, saves_bytes=base_peak - peak, step_seconds=step_seconds,
                          step_change=step_seconds / est.scalar("step_seconds") - 1.0)
    return None


def _describe_move(base: Layout, layout: Layout) -> tuple[str, dict[str, tuple[Any, Any]]]:
    diff: dict[str, tuple[Any, Any]] = {"gpus": (base.gpus, layout.gpus)}
    diff.update({name: (getattr(base, name), getattr(layout, name)) for name in Layout.model_fields
                 if getattr(base, name) != getattr(layout, name)})
    shown = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in diff.items() if k != "gpus")
    return f"gpus {base.gpus} -> {layout.gpus} ({shown})", diff
