"""Ranking: objectives, deterministic ties, folding of equivalent layouts, the Pareto front, training cost."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engines.load import load_hardware, load_model
from planner.errors import PlannerError
from planner.search.engine import run_search
from planner.search.rank import (
    equivalent_to_previous,
    pareto_front,
    rank,
    select,
    tie_keys,
    training_cost,
)
from planner.search.space import Problem

H100 = load_hardware("h100-sxm").spec
LLAMA_8B = load_model("llama-3.1-8b").spec
KEYS = ("tp", "pp", "cp", "dp", "ep", "zero", "sequence_parallel", "recompute", "micro_batch", "interleave")


@pytest.fixture(scope="module")
def result():
    return run_search(LLAMA_8B, H100, Problem(gpus=16, global_batch=64, seq_len=8192))


def ranked_rows(r, objective: str) -> list[tuple]:
    order = rank(r.layouts, r.results, objective, r.fits)
    return [tuple(getattr(r.layouts, k)[i].item() for k in KEYS) for i in order]


def test_throughput_orders_by_step_time_at_the_model_resolution(result):
    r = result
    order = rank(r.layouts, r.results, "throughput", r.fits)
    step = r.results.step_seconds[order]
    fastest = step.min()
    # Buckets of 1% from the fastest, written out by hand: [1, 1.01), [1.01, 1.0201), ...
    bucket = np.floor(np.log(step / fastest) / np.log(1.01) + 1e-9)
    assert (np.diff(bucket) >= 0).all()
    mp = (r.layouts.pp * np.maximum(r.layouts.tp * r.layouts.cp, r.layouts.ep * r.layouts.etp))[order]
    same_bucket = np.diff(bucket) == 0
    assert (np.diff(mp)[same_bucket] >= 0).all(), "inside a bucket the smaller model-parallel group comes first"
    same_mp = same_bucket & (np.diff(mp) == 0)
    v = r.layouts.interleave[order]
    assert (np.diff(v)[same_mp] >= 0).all(), "then the fewer virtual stages per rank"
    same = same_mp & (np.diff(v) == 0)
    assert (np.diff(step)[same] >= 0).all()
    ties = same & (np.diff(step) == 0)
    assert (np.diff(r.results.peak_bytes[order])[ties] >= 0).all()
    # Whatever leads is within the resolution of the fastest, and nothing outranks a layout more than 1% faster.
    assert step[0] < fastest * 1.01
    later_fastest = np.minimum.accumulate(step[::-1])[::-1]
    assert (step <= later_fastest * 1.01 * (1 + 1e-9)).all()


def test_a_near_tie_goes_to_the_smaller_model_parallel_group():
    from types import SimpleNamespace

    from planner.specs.layout import Layout, LayoutArrays

    wide = Layout(tp=4, pp=4, cp=4, dp=1, micro_batch=1, global_batch=64, seq_len=8192)  # 64 GPUs per replica
    narrow = Layout(tp=4, pp=4, cp=1, dp=4, micro_batch=1, global_batch=64, seq_len=8192)  # 16
    lay = LayoutArrays.from_layouts([wide, narrow])
    peak = np.array([1.0, 1.0])

    def first(step_wide: float, step_narrow: float) -> int:
        res = SimpleNamespace(step_seconds=np.array([step_wide, step_narrow]), peak_bytes=peak)
        return int(rank(lay, res, "throughput")[0])  # type: ignore[arg-type]

    assert first(1.0, 1.005) == 1  # 0.5% slower: a tie at 1%, the 16-GPU replica leads
    assert first(1.0, 1.02) == 0  # 2% slower: the faster one leads
    assert first(1.005, 1.0) == 1
    res = SimpleNamespace(step_seconds=np.array([1.0, 1.005]), peak_bytes=peak)
    assert int(rank(lay, res, "memory")[0]) == 0  # the memory objective is exact: equal peaks, faster first


def test_a_near_tie_between_equal_groups_goes_to_fewer_virtual_stages():
    from types import SimpleNamespace

    from planner.specs.layout import Layout, LayoutArrays

    many = Layout(tp=4, pp=2, dp=4, interleave=8, micro_batch=1, global_batch=64, seq_len=8192)
    plain = Layout(tp=4, pp=2, dp=4, interleave=1, micro_batch=1, global_batch=64, seq_len=8192)
    lay = LayoutArrays.from_layouts([many, plain])
    peak = np.array([1.0, 1.0])

    def first(step_many: float, step_plain: float) -> int:
        res = SimpleNamespace(step_seconds=np.array([step_many, step_plain]), peak_bytes=peak)
        return int(rank(lay, res, "throughput")[0])  # type: ignore[arg-type]

    assert first(1.0, 1.004) == 1  # 0.4% slower with v 1 than with v 8: a tie, the plain schedule leads
    assert first(1.0, 1.03) == 0  # 3% slower: the interleaved one leads


def test_memory_orders_by_peak(result):
    r = result
    order = rank(r.layouts, r.results, "memory", r.fits)
    assert (np.diff(r.results.peak_bytes[order]) >= 0).all()


def test_cost_ranks_like_throughput(result):
    assert ranked_rows(result, "cost") == ranked_rows(result, "throughput")


def test_unknown_objective(result):
    with pytest.raises(PlannerError, match="objective"):
        rank(result.layouts, result.results, "fame", result.fits)


def test_ranking_does_not_depend_on_grid_order(result):
    r = result
    perm = np.random.default_rng(7).permutation(r.layouts.size)
    shuffled = r.layouts.take(perm)
    results = r.results.take(perm)
    order = rank(shuffled, results, "throughput", np.flatnonzero(results.fits))
    again = [tuple(getattr(shuffled, k)[i].item() for k in KEYS) for i in order]
    assert again == ranked_rows(r, "throughput")


def test_exact_ties_follow_the_tie_fields(result):
    r = result
    order = rank(r.layouts, r.results, "throughput", r.fits)
    step = r.results.step_seconds[order]
    bucket = np.floor(np.log(step / step.min()) / np.log(1.01) + 1e-9)
    mp = (r.layouts.pp * np.maximum(r.layouts.tp * r.layouts.cp, r.layouts.ep * r.layouts.etp))[order]
    keys = np.stack([bucket, mp.astype(float), r.layouts.interleave[order].astype(float), step,
                     r.results.peak_bytes[order]]
                    + [k[order].astype(float) for k in tie_keys(r.layouts)], axis=1)
    assert [tuple(k) for k in keys] == sorted(tuple(k) for k in keys)


def test_equivalent_layouts_are_folded_not_lost(result):
    r = result
    sel = select(r.layouts, r.results, r.fits, "throughput", top=None, pareto=False)
    same = equivalent_to_previous(r.layouts, r.results, sel.order)
    assert sel.shown.size == min(10, int((~same).sum()))
    shown_keys = {(float(r.results.step_seconds[i]), float(r.results.peak_bytes[i]), int(r.layouts.tp[i]),
                   int(r.layouts.pp[i]), int(r.layouts.cp[i])) for i in sel.shown}
    assert len(shown_keys) == sel.shown.size
    assert sel.ranks[sel.order[0]] == 1 and (np.diff(sel.ranks[sel.order]) >= 0).all()
    assert sel.winner == int(sel.order[0])


def test_pareto_selection_is_the_front(result):
    r = result
    sel = select(r.layouts, r.results, r.fits, "throughput", top=None, pareto=True)
    step, peak = r.results.step_seconds, r.results.peak_bytes
    for i in sel.shown:
        dominated = (step[r.fits] <= step[i]) & (peak[r.fits] <= peak[i]) & ((step[r.fits] < step[i]) | (peak[r.fits] < peak[i]))
        assert not dominated.any()
    assert sel.shown[0] == sel.order[0]  # the fastest layout is always on the front


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 30), st.integers(1, 30)), min_size=1, max_size=60))
def test_pareto_front_is_exactly_the_non_dominated_points(points):
    step = np.array([p[0] for p in points], dtype=float)
    peak = np.array([p[1] for p in points], dtype=float)
    front = pareto_front(step, peak)
    on = set(front.tolist())
    for i in range(len(points)):
        dominated = ((step <= step[i]) & (peak <= peak[i]) & ((step < step[i]) | (peak < peak[i]))).any()
        if i in on:
            assert not dominated
        else:  # dominated, or a duplicate of a front point
            assert dominated or any(step[j] == step[i] and peak[j] == peak[i] for j in on)
    assert len({(step[i], peak[i]) for i in front}) == front.size
    assert (np.diff(step[front]) > 0).all() and (np.diff(peak[front]) < 0).all()


def test_pareto_front_of_nothing():
    assert pareto_front(np.array([]), np.array([])).size == 0


def test_training_cost():
    cost = training_cost(3.6e12, np.array([1e6, 2e6]), 1000, 2.0)
    assert cost.hours.tolist() == pytest.approx([1000.0, 500.0])
    assert cost.gpu_hours.tolist() == pytest.approx([1e6, 5e5])
    assert cost.dollars.tolist() == pytest.approx([2e6, 1e6])
    assert training_cost(1e9, np.array([1e6]), 8, None).dollars is None
    with pytest.raises(PlannerError):
        training_cost(0, np.array([1.0]), 1, None)
