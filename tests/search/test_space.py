"""The search space: every row is a layout of the problem, the grid equals a plain enumeration, filters restrict it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engines.load import load_model
from planner.errors import PlannerError
from planner.search.space import (
    CP_CAP,
    CP_MIN_SEQ_LEN,
    MICRO_BATCH_CAP,
    Filters,
    Problem,
    build_space,
    divisors,
)
from planner.specs.layout import RECOMPUTE_NAMES

LLAMA_1B = load_model("llama-3.2-1b").spec  # 16 layers, 32 heads
MIXTRAL = load_model("mixtral-8x7b").spec  # 32 layers, 32 heads, 8 experts

KEYS = ("tp", "pp", "cp", "dp", "etp", "ep", "zero", "sequence_parallel", "recompute", "micro_batch", "interleave")


def rows(lay) -> list[tuple]:
    return list(zip(*(getattr(lay, k).tolist() for k in KEYS)))


def brute_force(model, gpus: int, global_batch: int, seq_len: int) -> set[tuple]:
    """The default space written as nested loops straight from docs/search.md."""
    experts = model.moe.num_experts if model.moe else 1
    out = set()
    cps = [c for c in (1, 2, 4, 8, 16) if seq_len % (2 * c) == 0] if seq_len >= 8192 else []
    cps = sorted(set([1] + cps))
    for tp in range(1, min(model.num_attention_heads, gpus) + 1):
        if model.num_attention_heads % tp:
            continue
        for pp in range(1, min(model.num_layers, gpus) + 1):
            if gpus % pp:
                continue
            for cp in cps:
                if gpus % (tp * pp * cp):
                    continue
                dp = gpus // (tp * pp * cp)
                for etp, ep in itertools.product((1, tp) if model.moe else (tp,), range(1, experts + 1)):
                    if experts % ep or (tp * dp * cp) % (ep * etp):
                        continue
                    for v in range(1, model.num_layers + 3):
                        # equal chunks, or equal with the embedding and the loss counted as a layer each
                        equal = model.num_layers % (pp * v) == 0 or (pp > 2 and (model.num_layers + 2) % (pp * v) == 0)
                        # or, under the default engine (megatron names each chunk's layers), 2, 4 or 8 virtual
                        # stages that leave each one a pipeline unit (the layers, the embedding and the loss)
                        laid_out = v in (2, 4, 8) and v <= (model.num_layers + 2) // pp
                        if v > 1 and (pp == 1 or not (equal or laid_out)):
                            continue
                        for zero, sp, rc, mb in itertools.product(range(4), (False, True), range(3), range(1, 17)):
                            if (sp and tp == 1) or global_batch % mb:
                                continue
                            out.add((tp, pp, cp, dp, etp, ep, zero, sp, rc, mb, v))
    return out


@pytest.mark.parametrize(
    "model, gpus, batch, seq",
    [(LLAMA_1B, 8, 32, 4096), (LLAMA_1B, 24, 48, 8192), (MIXTRAL, 16, 64, 16384)],
)
def test_grid_equals_plain_enumeration(model, gpus, batch, seq):
    space = build_space(model, Problem(gpus=gpus, global_batch=batch, seq_len=seq))
    got = rows(space.flat())
    assert space.size == len(got)
    assert len(got) == len(set(got)), "no layout appears twice"
    assert set(got) == brute_force(model, gpus, batch, seq)


@settings(max_examples=40, deadline=None)
@given(
    gpus=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128]),
    batch=st.integers(1, 256),
    seq=st.sampled_from([512, 1000, 2048, 8192, 12288, 32768]),
)
def test_every_row_is_a_layout_of_the_problem(gpus, batch, seq):
    lay = build_space(LLAMA_1B, Problem(gpus=gpus, global_batch=batch, seq_len=seq)).flat()
    assert lay.size > 0
    assert (lay.tp * lay.pp * lay.cp * lay.dp == gpus).all()
    assert (LLAMA_1B.num_attention_heads % lay.tp == 0).all()
    assert (lay.pp <= LLAMA_1B.num_layers).all()
    assert (batch % lay.micro_batch == 0).all() and (lay.micro_batch <= MICRO_BATCH_CAP).all()
    assert (~lay.sequence_parallel | (lay.tp > 1)).all()
    v = lay.interleave
    layers = LLAMA_1B.num_layers
    equal = (layers % (lay.pp * v) == 0) | ((lay.pp > 2) & ((layers + 2) % (lay.pp * v) == 0))
    laid_out = np.isin(v, (2, 4, 8)) & (v <= (layers + 2) // lay.pp)  # the default engine names each chunk's layers
    assert ((v == 1) | ((lay.pp > 1) & (equal | laid_out))).all()
    if seq < CP_MIN_SEQ_LEN:
        assert (lay.cp == 1).all()
    assert (lay.cp <= CP_CAP).all() and ((lay.cp == 1) | (seq % (2 * lay.cp) == 0)).all()
    assert (lay.global_batch == batch).all() and (lay.seq_len == seq).all()


def test_moe_expert_parallel_divides_experts_and_its_ranks_span_the_stage():
    lay = build_space(MIXTRAL, Problem(gpus=32, global_batch=64, seq_len=4096)).flat()
    assert set(lay.ep.tolist()) == {1, 2, 4, 8}
    assert ((8 % lay.ep == 0) & ((lay.tp * lay.dp * lay.cp) % (lay.ep * lay.etp) == 0)).all()
    # etp is tp, or 1 (parallel folding) where tp > 1: both where tp > 1, one value where tp = 1
    assert ((lay.etp == lay.tp) | (lay.etp == 1)).all()
    assert {(int(t), int(e)) for t, e in zip(lay.tp, lay.etp)} == {(1, 1), (2, 2), (2, 1), (4, 4), (4, 1), (8, 8),
                                                                  (8, 1), (16, 16), (16, 1), (32, 32), (32, 1)}
    # folding lets EP span the TP ranks: tp 8 dp 4 (pp 1) takes ep 8 only with etp 1
    at = (lay.tp == 8) & (lay.dp == 4)
    assert set(lay.ep[at & (lay.etp == 1)].tolist()) == {1, 2, 4, 8}
    assert set(lay.ep[at & (lay.etp == 8)].tolist()) == {1, 2, 4}


def test_etp_filter_replaces_the_list_and_dense_models_keep_etp_tp():
    lay = build_space(MIXTRAL, Problem(gpus=32, global_batch=64, seq_len=4096), Filters(etp=(1,))).flat()
    assert set(lay.etp.tolist()) == {1} and set(lay.tp.tolist()) > {1}
    dense = build_space(LLAMA_1B, Problem(gpus=8, global_batch=8, seq_len=2048)).flat()
    assert (dense.etp == dense.tp).all()


def test_dense_model_has_no_expert_parallelism():
    assert set(build_space(LLAMA_1B, Problem(gpus=8, global_batch=8, seq_len=2048)).flat().ep.tolist()) == {1}


def test_filters_restrict_each_axis():
    f = Filters(tp=(2, 4), pp=(2,), zero=(1, 3), recompute=("full",), micro_batch=(1, 2), interleave=(1,),
                sequence_parallel=(True,))
    lay = build_space(LLAMA_1B, Problem(gpus=16, global_batch=32, seq_len=2048), f).flat()
    assert set(lay.tp.tolist()) == {2, 4} and set(lay.pp.tolist()) == {2}
    assert set(lay.zero.tolist()) == {1, 3} and set(lay.recompute.tolist()) == {2}
    assert set(lay.micro_batch.tolist()) == {1, 2} and set(lay.interleave.tolist()) == {1}
    assert lay.sequence_parallel.all()
    assert set(lay.dp.tolist()) == {4, 2}


def test_dp_filter_fixes_model_parallel_size():
    lay = build_space(LLAMA_1B, Problem(gpus=16, global_batch=32, seq_len=2048), Filters(dp=(4,))).flat()
    assert (lay.dp == 4).all() and (lay.tp * lay.pp * lay.cp == 4).all()


def test_filters_keep_values_the_defaults_prune_so_rules_can_explain_them():
    # cp 2 below CP_MIN_SEQ_LEN, tp 3 not dividing the heads, sp on with tp 1: all kept for the rules to reject
    lay = build_space(LLAMA_1B, Problem(gpus=6, global_batch=6, seq_len=2048),
                      Filters(tp=(3,), cp=(2,), sequence_parallel=(True,))).flat()
    assert set(lay.tp.tolist()) == {3} and set(lay.cp.tolist()) == {2}
    lay = build_space(LLAMA_1B, Problem(gpus=4, global_batch=8, seq_len=2048), Filters(sequence_parallel=(True,))).flat()
    assert (lay.tp == 1).any()


def test_a_muon_search_offers_zero_0_and_1_and_keeps_asked_stages_for_the_rule():
    muon = Problem(gpus=16, global_batch=32, seq_len=2048, optimizer="muon")
    assert set(build_space(LLAMA_1B, muon).flat().zero.tolist()) == {0, 1}
    assert set(build_space(LLAMA_1B, Problem(gpus=16, global_batch=32, seq_len=2048)).flat().zero.tolist()) == {
        0, 1, 2, 3}
    assert set(build_space(LLAMA_1B, muon, Filters(zero=(1, 3))).flat().zero.tolist()) == {1, 3}
    with pytest.raises(PlannerError, match="engine torchtitan cannot run optimizer muon"):
        Problem(gpus=16, global_batch=32, seq_len=2048, optimizer="muon", engine="torchtitan")
    with pytest.raises(PlannerError, match="apply only with --optimizer muon"):
        Problem(gpus=16, global_batch=32, seq_len=2048, muon_tp_mode="blockwise")


def test_no_layout_at_all_is_an_error_with_the_arithmetic():
    with pytest.raises(PlannerError, match=r"divides gpus\(16\)"):
        build_space(LLAMA_1B, Problem(gpus=16, global_batch=32, seq_len=2048), Filters(tp=(3,)))


def test_problem_rejects_nonsense():
    with pytest.raises(PlannerError, match="gpus"):
        Problem(gpus=0, global_batch=1, seq_len=1)


@pytest.mark.parametrize("n", [1, 2, 12, 97, 360, 2048, 16384])
def test_divisors(n):
    assert divisors(n).tolist() == [d for d in range(1, n + 1) if n % d == 0]


def test_recompute_codes_cover_names():
    lay = build_space(LLAMA_1B, Problem(gpus=2, global_batch=2, seq_len=1024)).flat()
    # the default engine (megatron) runs none, selective and full; torchtitan none, full and op-level selective AC
    assert {RECOMPUTE_NAMES[c] for c in lay.recompute.tolist()} == {"none", "selective", "full"}
    titan = build_space(LLAMA_1B, Problem(gpus=2, global_batch=2, seq_len=1024, engine="torchtitan")).flat()
    assert {RECOMPUTE_NAMES[c] for c in titan.recompute.tolist()} == {"none", "full", "op"}
    assert np.all(lay.flash_attention) and not lay.fp8.any()


def test_grid_is_broadcast_along_its_axes():
    space = build_space(LLAMA_1B, Problem(gpus=16, global_batch=32, seq_len=8192))
    s, z, p, r, m = space.shape
    assert (z, p, r, m) == (4, 2, 3, 5)  # micro-batches: divisors of 32 up to 16
    assert space.grid.tp.shape == (s, 1, 1, 1, 1) and space.grid.zero.shape == (1, z, 1, 1, 1)
    assert space.grid.seq_len.shape == (1, 1, 1, 1, 1)
    assert space.size == space.flat().size < space.grid.size  # sp with tp 1 is pruned
    part = space.rows(2, 5)
    assert part.shape == (3, z, p, r, m)


def test_a_search_assumes_the_engines_two_tier_dispatcher_on_moe_models():
    from planner.engines.load import load_hardware, load_model
    from planner.search.space import Problem, search_dispatcher
    from planner.specs.engine import engine_profile

    megatron = engine_profile("megatron")
    # HybridEP on NVL72 racks (72-GPU NVLink domains), DeepEP on 8-GPU nodes; torchtitan has DeepEP only
    assert search_dispatcher(megatron, load_hardware("gb200-nvl72").spec) == "hybridep"
    assert search_dispatcher(megatron, load_hardware("h100-sxm").spec) == "deepep"
    dsv3, h800 = load_model("deepseek-v3").spec, load_hardware("h800").spec
    assert Problem(gpus=64, global_batch=64, seq_len=4096).for_model(dsv3, h800).moe_dispatcher == "deepep"
    # what the user names stands; a dense model keeps Layout's default
    given = Problem(gpus=64, global_batch=64, seq_len=4096, moe_dispatcher="alltoall", moe_ep_overlap=False)
    assert given.for_model(dsv3, h800).moe_dispatcher == "alltoall"
    dense = load_model("llama-3.1-8b").spec
    assert Problem(gpus=8, global_batch=8, seq_len=4096).for_model(dense, h800).moe_dispatcher == "alltoall"


def test_with_the_overlap_asked_a_search_picks_a_dispatcher_the_engine_overlaps_with():
    from planner.engines.load import load_hardware
    from planner.search.space import search_dispatcher
    from planner.specs.engine import engine_profile

    titan = engine_profile("torchtitan")  # overlaps (DualPipeV) with alltoall or deepep, not hybridep
    gb200 = load_hardware("gb200-nvl72").spec
    assert search_dispatcher(titan, gb200) == "hybridep"
    assert search_dispatcher(titan, gb200, ep_overlap=True) in titan.moe.ep_overlap_dispatchers
