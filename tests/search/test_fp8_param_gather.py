"""--fp8-param-gather in a search: fp8 layer weights on every candidate with a sharded optimizer, none elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

from planner.engines.load import load_hardware, load_model
from planner.errors import PlannerError
from planner.search.engine import run_search
from planner.search.space import Problem
from planner.training.estimate import estimate

H100 = load_hardware("h100-sxm").spec
LLAMA_8B = load_model("llama-3.1-8b").spec


def search(**kw):
    return run_search(LLAMA_8B, H100, Problem(gpus=16, global_batch=64, seq_len=4096, dtype="fp8", **kw))


def test_only_zero_1_and_up_hold_fp8_weights_and_they_hold_less():
    plain, fp8 = search(), search(fp8_param_gather=True)
    assert plain.layouts.size == fp8.layouts.size
    sharded = np.broadcast_to(fp8.layouts.zero >= 1, fp8.layouts.fp8_params.shape)
    assert (fp8.layouts.fp8_params == sharded).all()
    # ZeRO-0 candidates are the same layouts with the same memory; ZeRO >= 1 ones hold fewer weight bytes
    zero0 = np.flatnonzero(np.broadcast_to(fp8.layouts.zero == 0, fp8.results.weights_bytes.shape))
    rest = np.flatnonzero(np.broadcast_to(fp8.layouts.zero >= 1, fp8.results.weights_bytes.shape))
    assert np.array_equal(fp8.results.weights_bytes.ravel()[zero0], plain.results.weights_bytes.ravel()[zero0])
    assert (fp8.results.weights_bytes.ravel()[rest] < plain.results.weights_bytes.ravel()[rest]).all()


def test_a_candidate_equals_estimate_of_its_layout():
    r = search(fp8_param_gather=True)
    i = int(np.flatnonzero(np.broadcast_to(r.layouts.fp8_params, r.results.step_seconds.shape).ravel())[0])
    layout = r.layouts.to_layout(i)
    assert layout.fp8_param_gather
    one = estimate(LLAMA_8B, H100, layout)
    assert one.scalar("peak_bytes") == pytest.approx(float(r.results.peak_bytes.ravel()[i]), rel=1e-12)


@pytest.mark.parametrize("kw", [{"dtype": "bf16"}, {"engine": "fsdp"}, {"engine": "deepspeed"}])
def test_refused_where_it_cannot_run(kw):
    base = {"gpus": 8, "global_batch": 16, "seq_len": 4096, "dtype": "fp8", "fp8_param_gather": True}
    with pytest.raises(PlannerError, match="fp8"):
        Problem(**{**base, **kw})


def test_torchtitan_gathers_in_fp8_with_the_tensorwise_recipe_only():
    """Under torchtitan the flag is torchao's float8 all-gather: a candidate keeps the held weights' bytes and runs
    faster than the same layout without it; the rowwise recipe cannot run it (rule engine_fp8_gather_recipe)."""
    gather = search(fp8_param_gather=True, engine="torchtitan")
    held = np.broadcast_to(gather.layouts.fp8_params, gather.results.step_seconds.shape).ravel()
    fitting = gather.fits[held[gather.fits]]  # positions in `layouts` that fit and gather in fp8
    layout = gather.layout(int(fitting[0]))
    assert layout.fp8_param_gather and layout.zero >= 1
    with_it, without = (estimate(LLAMA_8B, H100, layout.model_copy(update={"fp8_param_gather": v})) for v in (True, False))
    assert with_it.scalar("weights_bytes") == without.scalar("weights_bytes")
    assert with_it.scalar("step_seconds") < without.scalar("step_seconds")
    rowwise = search(fp8_param_gather=True, engine="torchtitan", fp8_recipe="rowwise")
    costed = np.broadcast_to(rowwise.layouts.fp8_params, rowwise.results.step_seconds.shape)
    assert not costed.any() and rowwise.rejected.get("engine_fp8_gather_recipe", 0) > 0
