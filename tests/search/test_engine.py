"""The search engine: candidates are valid, reasons add up, results equal `estimate`, the search is exhaustive."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from planner.engines.load import load_hardware, load_model
from planner.errors import PlannerError
from planner.search.engine import (
    OUT_OF_MEMORY,
    SearchResult,
    closest_candidates,
    evaluate_chunked,
    fewest_gpus,
    first_broken_rule,
    longest_sequence,
    near_misses,
    run_search,
)
from planner.search.rank import rank
from planner.search.space import Filters, Problem
from planner.specs.layout import Layout
from planner.training.estimate import estimate
from planner.training.rules import RULE_CODES, violations

H100 = load_hardware("h100-sxm").spec
LLAMA_405B = load_model("llama-3.1-405b").spec
LLAMA_8B = load_model("llama-3.1-8b").spec
MIXTRAL = load_model("mixtral-8x7b").spec


@pytest.fixture(scope="module")
def llama3_8192():
    """Llama 3 405B pre-training as published: 8,192 H100s, 2,048 x 8,192-token sequences (16M tokens)."""
    return run_search(LLAMA_405B, H100, Problem(gpus=8192, global_batch=2048, seq_len=8192))


@pytest.fixture(scope="module")
def small():
    return run_search(LLAMA_8B, H100, Problem(gpus=32, global_batch=64, seq_len=4096))


def test_counts_add_up(llama3_8192, small):
    for r in (llama3_8192, small):
        assert r.evaluated == r.feasible + sum(r.rejected.values())
        assert r.rejected.get(OUT_OF_MEMORY, 0) == r.costed - r.feasible
        assert set(r.rejected) <= {*RULE_CODES, OUT_OF_MEMORY}
        assert all(n > 0 for n in r.rejected.values())


def test_every_feasible_candidate_is_valid_and_fits(llama3_8192, small):
    for r in (llama3_8192, small):
        lay = r.layouts.take(r.fits)
        g = r.problem.gpus
        assert (lay.tp * lay.pp * lay.cp * lay.dp == g).all()
        assert (r.problem.global_batch % (lay.dp * lay.micro_batch) == 0).all()
        assert (r.results.peak_bytes[r.fits] <= r.results.usable_bytes).all()
        assert not any(mask.any() for mask in violations(r.model, lay, g).values())


def test_top_candidates_match_estimate(llama3_8192, small):
    for r in (llama3_8192, small):
        for pos in rank(r.layouts, r.results, "throughput", r.fits)[:3]:
            est = estimate(r.model, r.hardware, r.layouts.to_layout(int(pos)), headroom=r.headroom)
            assert est.fits
            assert est.scalar("step_seconds") == pytest.approx(float(r.results.step_seconds[pos]), rel=1e-3)
            assert est.scalar("peak_bytes") == pytest.approx(float(r.results.peak_bytes[pos]), rel=1e-3)
            peak_stage = est.stages[est.peak_stage].total_bytes
            assert peak_stage == pytest.approx(float(r.results.peak_bytes[pos]), rel=1e-3)


def test_search_is_never_slower_than_the_published_llama3_layout(llama3_8192):
    r = llama3_8192
    best = rank(r.layouts, r.results, "throughput", r.fits)[0]
    best_step = float(r.results.step_seconds[best])
    published = []
    for zero, sp, recompute, mb in itertools.product(range(4), (False, True), ("none", "selective", "full"), (1, 2)):
        layout = Layout(tp=8, pp=16, cp=1, dp=64, zero=zero, sequence_parallel=sp, recompute=recompute,
                        micro_batch=mb, global_batch=2048, seq_len=8192)
        est = estimate(LLAMA_405B, H100, layout, headroom=r.headroom)
        if est.fits:
            published.append(est.scalar("step_seconds"))
    assert published, "the published layout fits under the model in some setting"
    assert best_step <= min(published) * (1 + 1e-9)


def test_published_layout_is_in_the_space(llama3_8192):
    lay = llama3_8192.layouts
    hit = (lay.tp == 8) & (lay.pp == 16) & (lay.cp == 1) & (lay.dp == 64) & (lay.micro_batch == 1)
    # zero x sp x recompute x interleave: v = 1, and 2, 4 and 8 on Llama 3's split of 126 layers as 128 (the
    # embedding and the loss counted as a layer each: 8 per stage); v = 8 puts one unit on each virtual stage, the
    # embedding alone on the first rank's first one (Megatron-Bridge's Llama 3.1 405B GB200 recipe, pp 16 x v 8).
    assert hit.sum() == 4 * 2 * 3 * 4
    assert set(lay.interleave[hit].tolist()) == {1, 2, 4, 8}


def test_reason_is_the_first_broken_rule():
    broken = {code: np.zeros(3, dtype=bool) for code in RULE_CODES}
    broken[RULE_CODES[3]][[0, 1]] = True
    broken[RULE_CODES[1]][1] = True
    assert first_broken_rule(broken, 3).tolist() == [3, 1, -1]


def test_rule_rejections_are_counted_by_reason():
    r = run_search(LLAMA_8B, H100, Problem(gpus=24, global_batch=48, seq_len=2048),
                   Filters(tp=(1, 3), sequence_parallel=(False, True)))
    assert r.rejected["heads_not_divisible"] > 0  # tp 3 does not divide 32 heads
    assert r.rejected["sequence_parallel_needs_tp"] > 0  # sp with tp 1
    assert (r.layouts.tp == 1).all() and not r.layouts.sequence_parallel.any()


def test_when_every_candidate_breaks_a_rule_the_error_shows_the_arithmetic():
    with pytest.raises(PlannerError, match=r"num_attention_heads\(32\) is not divisible by tp\(3\)"):
        run_search(LLAMA_8B, H100, Problem(gpus=24, global_batch=48, seq_len=2048), Filters(tp=(3,)))
    with pytest.raises(PlannerError, match="max_seq_len"):
        run_search(LLAMA_8B, H100, Problem(gpus=8, global_batch=8, seq_len=10**6))


def test_when_no_layout_divides_the_batch_the_error_names_the_nearest_batches_that_work():
    # 1,000 GPUs and a batch of 1,024: every layout breaks batch_not_divisible (dp keeps a factor of 5
    # unless pp takes 125 > 61 layers). The line counts the reasons and names the nearest batches that
    # some layout divides, instead of only the arithmetic of dp 1000.
    deepseek = load_model("deepseek-v3").spec
    with pytest.raises(PlannerError) as err:
        run_search(deepseek, H100, Problem(gpus=1000, global_batch=1024, seq_len=4096))
    message = err.value.message
    # Every layout of the space, counted by hand: (tp, pp) with tp | 128 heads, pp | 1000 up to 61 layers and
    # tp * pp | 1000; etp = tp, and 1 where tp > 1; ep | 256 experts with ep * etp | tp * dp; interleave 1
    # (61 layers is prime, 63 odd: no even virtual chunks at pp > 1) and, with pp > 1, the uneven 2, 4 and 8 that
    # leave a pipeline unit per virtual stage (v <= 63 // pp); times zero 4 x recompute 3 x micro-batch 5
    # (1, 2, 4, 8, 16) x sp (2 where tp > 1).
    rows = [(tp, pp, etp, ep) for tp in (1, 2, 4, 8, 16, 32, 64, 128) for pp in (1, 2, 4, 5, 8, 10, 20, 25, 40, 50)
            if 1000 % (tp * pp) == 0 for etp in sorted({tp, 1}) for ep in (1, 2, 4, 8, 16, 32, 64, 128, 256)
            if 1000 // pp % (ep * etp) == 0]
    virtual = {pp: 1 + (sum(v <= 63 // pp for v in (2, 4, 8)) if pp > 1 else 0) for _, pp, _, _ in rows}
    layouts = sum(4 * 3 * 5 * (2 if tp > 1 else 1) * virtual[pp] for tp, pp, _, _ in rows)
    assert f"(batch_not_divisible {layouts:,})" in message
    assert message.endswith("the nearest global batches a layout divides: 1,020, 1,025")
    for batch in (1020, 1025):
        assert run_search(deepseek, H100, Problem(gpus=1000, global_batch=batch, seq_len=4096)).costed > 0


def test_bad_headroom_and_dtype():
    with pytest.raises(PlannerError, match="headroom"):
        run_search(LLAMA_8B, H100, Problem(gpus=8, global_batch=8, seq_len=2048), headroom=1.0)
    v100 = load_hardware("v100-32gb").spec
    with pytest.raises(PlannerError, match="bf16"):
        run_search(LLAMA_8B, v100, Problem(gpus=8, global_batch=8, seq_len=2048))


def test_chunked_evaluation_equals_one_call(small):
    again = evaluate_chunked(small.model, small.hardware, small.layouts, headroom=small.headroom, chunk=1000)
    for name in ("step_seconds", "peak_bytes", "mfu", "bubble_seconds"):
        assert np.allclose(getattr(again, name), getattr(small.results, name), rtol=1e-12)
    assert np.array_equal(again.fits, small.results.fits)
    rows = run_search(small.model, small.hardware, small.problem, chunk=100)  # a few structural rows per block
    assert rows.evaluated == small.evaluated and np.array_equal(rows.fits, small.fits)
    assert np.allclose(rows.results.step_seconds, small.results.step_seconds, rtol=1e-12)


def test_grid_results_equal_a_plain_list_of_layouts(llama3_8192):
    """The broadcast grid and the same layouts as a flat list give the same numbers."""
    r = llama3_8192
    flat = evaluate_chunked(r.model, r.hardware, r.layouts, headroom=r.headroom)
    for name in ("step_seconds", "peak_bytes", "tokens_per_second", "mfu", "communication_seconds"):
        assert np.allclose(getattr(flat, name), getattr(r.results, name), rtol=1e-9)
    assert np.array_equal(flat.fits, r.results.fits)


def test_moe_search_places_experts(small):
    r = run_search(MIXTRAL, H100, Problem(gpus=32, global_batch=64, seq_len=4096))
    assert r.feasible > 0
    lay = r.layouts.take(r.fits)
    assert (lay.ep > 1).any()
    assert ((8 % lay.ep == 0) & ((lay.tp * lay.dp * lay.cp) % (lay.ep * lay.etp) == 0)).all()


@pytest.fixture(scope="module")
def too_small():
    return run_search(LLAMA_405B, H100, Problem(gpus=64, global_batch=256, seq_len=8192))


def test_nothing_fits_gives_closest_candidates_with_verified_fixes(too_small):
    r = too_small
    assert r.feasible == 0 and r.costed > 0
    picks = closest_candidates(r)
    assert 1 <= picks.size <= 3
    assert float(r.results.peak_bytes[picks[0]]) == float(r.results.peak_bytes.min())
    misses = near_misses(r)
    assert len(misses) == picks.size
    assert any(m.suggestions for m in misses)
    for miss in misses:
        assert not miss.estimate.fits and miss.diagnosis.over_bytes > 0
        for s in miss.suggestions:  # each suggestion re-estimated independently: it fits
            assert estimate(LLAMA_405B, H100, s.layout, headroom=r.headroom).fits


def test_nothing_fits_finds_the_fewest_gpus(too_small):
    more = fewest_gpus(LLAMA_405B, H100, too_small.problem, headroom=too_small.headroom)
    assert more is not None and more.feasible > 0
    assert more.problem.gpus in (128, 256, 512, 1024)
    if more.problem.gpus > 128:
        assert run_search(LLAMA_405B, H100, Problem(gpus=more.problem.gpus // 2, global_batch=256,
                                                    seq_len=8192)).feasible == 0


def test_shorter_sequence_fix():
    # Llama 3.1 8B on one GPU at 64k tokens per sequence cannot fit; a shorter sequence may
    problem = Problem(gpus=8, global_batch=8, seq_len=131072)
    r = run_search(LLAMA_8B, H100, problem, Filters(cp=(1,), recompute=("none",), tp=(1,), pp=(1,)))
    assert r.feasible == 0
    shorter = longest_sequence(LLAMA_8B, H100, problem, Filters(cp=(1,), recompute=("none",), tp=(1,), pp=(1,)))
    assert shorter is not None and shorter.feasible > 0 and shorter.problem.seq_len < 131072


def _llama3_405b_on_16384_h100() -> tuple[SearchResult, np.ndarray]:
    r = run_search(LLAMA_405B, H100, Problem(gpus=16384, global_batch=2048, seq_len=8192))
    return r, rank(r.layouts, r.results, "throughput", r.fits)[:10]


def test_llama3_405b_on_16384_h100_leads_with_a_published_style_layout():
    """Issue 10's check of the search: Llama 3.1 405B on 16,384 H100, 2,048 x 8,192 tokens. The layout ranked
    first uses cp 1 or 2 (what 8K recipes use: Dubey et al. 2024 Table 4, cp 1; the Megatron-Bridge H100
    recipe, cp 2) and tp 8 inside the node."""
    r, order = _llama3_405b_on_16384_h100()
    first = r.layouts.to_layout(int(order[0]))
    assert first.cp in (1, 2) and first.tp == 8


@pytest.mark.xfail(strict=True, reason=(
    "open (issue 10): the first ten reach 52.1-53.7% bf16 MFU (the first, tp 8 pp 16 cp 2 v 8, 53.7%; 49.9-51.1% before "
    "interleaving counted the embedding and the loss as pipeline units, which admits v 8 on pp 16, Megatron-Bridge's "
    "GB200 recipe) since the refit of 2026-12 (GEMM share 0.84 -> 0.857, streaming 0.8 -> 0.7, step overhead 0.2 -> "
    "0.15 s, the TP overlap's exposed share replaced by its last reduce-scatter chunk); the 405B runs outside the fit "
    "(Megatron-Bridge 25.09-26.04.01 on H100, B200, GB200) come out 3-17% fast, a cost the model lacks at this size; "
    "yet the 26.04.01 H100 405B FP8-CS row (827 TFLOP/s, tp 8 pp 8 cp 2 v 8) with the issue's FP8/BF16 band of "
    "1.2-1.5x implies 56-70% bf16 MFU for that layout (docs/validation.md, stop 35)"))
def test_llama3_405b_on_16384_h100_claims_no_50_percent_mfu():
    """No layout of the first ten claims 50% bf16 MFU: the best published H100 bf16 runs are at 45-49%
    (Megatron-LM README 2024 table, 49% at its best; Dubey et al. 2024, 41% at this scale)."""
    r, order = _llama3_405b_on_16384_h100()
    assert float(np.max(r.results.mfu[order])) < 0.50
