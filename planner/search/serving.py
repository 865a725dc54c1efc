"""Serving layout search: enumerate (tp, pp, replicas, dtypes, concurrency), evaluate all at once,
mask what is invalid, rank by output tokens/s per GPU, and find the latency-throughput front.

Two array passes, no per-candidate Python loop: the structural grid (tp, pp, dtypes) is evaluated
for memory first, which gives each layout's largest concurrency; then every layout is expanded to
its concurrencies (powers of two up to that maximum, and the maximum) and the same estimate
functions run once on the expanded arrays. Rejections are counted by reason code
(`planner.serving.rules.REASONS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerError
from planner.serving.estimate import InferenceEstimate, estimate_inference
from planner.serving.inputs import PREFILL_CHUNK_TOKENS, InferenceArrays, model_shapes
from planner.serving.memory import SERVING_FREE_MEMORY_FRACTION, inference_memory
from planner.serving.rules import violations
from planner.serving.time import ServingTimes
from planner.specs.hardware import HardwareProfile
from planner.specs.model import ModelSpec


@dataclass(frozen=True)
class SearchSpace:
    """What to search: the GPUs, the request shape, the dtypes and the constraints."""

    gpus: int
    input_len: int
    output_len: int
    weight_dtypes: tuple[str, ...] = ("bf16",)
    kv_dtypes: tuple[str, ...] = ("bf16",)
    batching: str = "continuous"
    cross_node_tp: bool = False
    max_pp: int | None = None
    ttft_max_seconds: float | None = None
    tpot_max_seconds: float | None = None
    headroom: float = SERVING_FREE_MEMORY_FRACTION
    per_head_decode_attention: bool = False
    request_rate: float | None = None  # requests/s over all replicas (open loop); None: closed loops
    max_batched_tokens: int = PREFILL_CHUNK_TOKENS
    percentile: int = 90  # the limits apply to this percentile of TTFT and TPOT (0: the mean)


@dataclass(frozen=True)
class InferenceSearchResult:
    """Every evaluated candidate (expanded over concurrency), which are feasible, and their ranking.

    `ranked`: indices of feasible candidates, best first (output tokens/s per GPU, then lower TPOT,
    then smaller replicas; at a request rate every layout carries the same load, so: lower end-to-end
    latency, then fewer GPUs per replica). `pareto`: indices of the feasible candidates no other one beats on both
    TPOT (lower) and output tokens/s per GPU (higher), by TPOT ascending. `rejected`: count per
    reason code; a structural layout that fits no sequence counts once under 'memory'.
    """

    space: SearchSpace
    candidates: InferenceArrays
    weight_dtype: np.ndarray
    kv_dtype: np.ndarray
    replicas: np.ndarray
    estimate: InferenceEstimate
    feasible: np.ndarray
    ranked: np.ndarray
    pareto: np.ndarray
    rejected: dict[str, int]
    layouts_considered: int

    def serving(self) -> ServingTimes:
        return self.estimate.serving(self.space.batching)


def _divisors(n: int) -> np.ndarray:
    """Positive divisors of n, ascending: pairs (d, n // d) for d up to sqrt(n), so the work grows with
    sqrt(n), not n (n is at most planner's GPU limit, planner.specs.bounds)."""
    small = np.arange(1, math.isqrt(n) + 1, dtype=np.int64)
    small = small[n % small == 0]
    return np.unique(np.concatenate([small, n // small]))


def structural_grid(model: ModelSpec, hw: HardwareProfile, space: SearchSpace) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Every (tp, pp, weight dtype, kv dtype) whose tp x pp divides the GPUs, and skipped counts."""
    skipped: dict[str, int] = {}
    tps = _divisors(space.gpus)
    if not space.cross_node_tp:
        over = tps > hw.node.gpus_per_node
        skipped["tp_cross_node"] = int(over.sum())
        tps = tps[~over]
    tp_col, pp_col = [], []
    for tp in tps:  # a handful of divisors; the grid itself is built with arrays
        pps = _divisors(space.gpus // int(tp))
        if space.max_pp is not None:
            pps = pps[pps <= space.max_pp]
        tp_col.append(np.full(pps.shape, tp))
        pp_col.append(pps)
    tp_a, pp_a = np.concatenate(tp_col), np.concatenate(pp_col)
    wd, kd = np.array(space.weight_dtypes), np.array(space.kv_dtypes)
    grid = np.meshgrid(np.arange(tp_a.size), np.arange(wd.size), np.arange(kd.size), indexing="ij")
    i, j, k = (g.ravel() for g in grid)
    return {"tp": tp_a[i], "pp": pp_a[i], "weight_dtype": wd[j], "kv_dtype": kd[k]}, skipped


def concurrency_levels(max_concurrency: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expand each layout to its concurrencies: 1, 2, 4, ... up to its maximum, plus the maximum.

    Returns (owner index, concurrency); layouts with a maximum of 0 get none.
    """
    m = np.asarray(max_concurrency, dtype=np.int64)
    # powers of two not above m: as many as m has bits (frexp's exponent, exact below 2**53)
    powers = np.where(m > 0, np.frexp(np.maximum(m, 1).astype(float))[1], 0).astype(np.int64)
    extra = (m > 0) & (np.left_shift(1, np.maximum(powers - 1, 0)) != m)  # m itself, unless a power of two
    counts = powers + extra
    owner = np.repeat(np.arange(m.size), counts)
    start = np.cumsum(counts) - counts
    pos = np.arange(owner.size) - start[owner]
    level = np.where(pos < powers[owner], np.left_shift(1, pos), m[owner])
    return owner, level.astype(np.int64)


def pareto_front(tpot_seconds: np.ndarray, tokens_per_s_per_gpu: np.ndarray) -> np.ndarray:
    """Indices on the front of low TPOT and high throughput, by TPOT ascending."""
    order = np.lexsort((-tokens_per_s_per_gpu, tpot_seconds))
    best_so_far = np.maximum.accumulate(tokens_per_s_per_gpu[order])
    previous = np.concatenate(([-np.inf], best_so_far[:-1]))
    return order[tokens_per_s_per_gpu[order] > previous]


def search_inference(model: ModelSpec, hw: HardwareProfile, space: SearchSpace) -> InferenceSearchResult:
    if space.gpus < 1:
        raise PlannerError(f"--gpus must be at least 1, got {space.gpus}")
    if space.request_rate is not None and (space.request_rate <= 0 or space.batching != "continuous"):
        raise PlannerError("--request-rate must be above 0 and needs --batching continuous (an open loop of arrivals); "
                           f"got {space.request_rate} with {space.batching} batching")
    if space.max_batched_tokens < 1:
        raise PlannerError(f"--max-batched-tokens must be at least 1, got {space.max_batched_tokens}")
    for name, value in (("input-len", space.input_len), ("output-len", space.output_len)):
        if value < 1:
            raise PlannerError(f"--{name} must be at least 1, got {value}")
    if space.input_len + space.output_len > model.max_seq_len:
        raise PlannerError(
            f"input-len ({space.input_len}) + output-len ({space.output_len}) = {space.input_len + space.output_len} "
            f"exceeds the max_seq_len ({model.max_seq_len}) of {model.name}; shorten the prompt or the output"
        )
    shapes = model_shapes(model)
    grid, rejected = structural_grid(model, hw, space)
    layouts = InferenceArrays.build(
        tp=grid["tp"], pp=grid["pp"], concurrency=1, input_len=space.input_len, output_len=space.output_len,
        weight_dtype=grid["weight_dtype"], kv_dtype=grid["kv_dtype"],
        per_head_decode_attention=space.per_head_decode_attention, max_batched_tokens=space.max_batched_tokens,
    )
    bad = np.zeros(layouts.tp.shape, dtype=bool)
    for reason, mask in violations(model, layouts).items():
        fresh = mask & ~bad
        rejected[reason] = rejected.get(reason, 0) + int(fresh.sum())
        bad |= mask
    mem = inference_memory(model, hw, layouts, headroom=space.headroom, shapes=shapes)
    max_c = np.where(bad, 0, mem.max_concurrency)
    rejected["memory"] = int(((max_c == 0) & ~bad).sum())
    if space.request_rate is None:
        owner, level = concurrency_levels(max_c)
        cand = InferenceArrays(**{**{k: v[owner] for k, v in layouts.__dict__.items()}, "concurrency": level})
    else:  # one candidate per layout: the rate sets how many requests are in flight
        owner = np.flatnonzero(max_c > 0)
        replicas = space.gpus // (layouts.tp[owner] * layouts.pp[owner])
        cand = InferenceArrays(**{**{k: v[owner] for k, v in layouts.__dict__.items()},
                                  "request_rate": space.request_rate / replicas})
    est = estimate_inference(model, hw, cand, headroom=space.headroom, shapes=shapes)
    serving = est.serving(space.batching)
    feasible: np.ndarray = np.array(serving.stable, dtype=bool)
    rejected["overload"] = int((~feasible).sum())
    rejected["memory"] += int((feasible & ~est.memory.fits).sum())
    feasible &= est.memory.fits
    for reason, limit, measured in (
        ("ttft", space.ttft_max_seconds, serving.percentile("ttft", space.percentile)),
        ("tpot", space.tpot_max_seconds, serving.percentile("tpot", space.percentile)),
    ):
        if limit is not None:
            over = feasible & (measured > limit)
            rejected[reason] = int(over.sum())
            feasible &= ~over
    idx = np.flatnonzero(feasible)
    tps_gpu = serving.output_tokens_per_second_per_gpu
    if space.request_rate is None:
        order = np.lexsort((cand.tp[idx] * cand.pp[idx], serving.tpot_seconds[idx], -tps_gpu[idx]))
    else:
        order = np.lexsort((cand.tp[idx] * cand.pp[idx], serving.e2e_seconds[idx]))
    ranked = idx[order]
    front = idx[pareto_front(serving.tpot_seconds[idx], tps_gpu[idx])] if idx.size else idx
    return InferenceSearchResult(
        space=space,
        candidates=cand,
        weight_dtype=grid["weight_dtype"][owner],
        kv_dtype=grid["kv_dtype"][owner],
        replicas=space.gpus // (cand.tp * cand.pp),
        estimate=est,
        feasible=feasible,
        ranked=ranked,
        pareto=front,
        rejected={k: v for k, v in rejected.items() if v},
        layouts_considered=int(layouts.tp.size),
    )
