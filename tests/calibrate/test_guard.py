"""The fit's guards on tiny synthetic runs whose step time is a known linear function of one log factor, so
every value below is derived by hand: the limit of MAX_PRIOR_SDS prior sds, and the in-sample
leave-one-out shrinkage with its one-standard-error rule.

The toy model: every run takes 1 s with the shipped profile and its log step time falls one for one with
the log GEMM plateau (sensitivity -1, every other factor 0): log t = -theta, theta = log(value / 0.688).
A run measured d slower (log m = d) then has the residual -theta - d. With the noise 0.08 and the GEMM
plateau's prior sd 0.15, the fit on runs with log gaps d_1..d_n is, inside the limit,
    theta = -(sum d / 0.08^2) / (n / 0.08^2 + 1 / 0.15^2) = -156.25 sum d / (156.25 n + 44.444).
"""

from __future__ import annotations

import math

import pytest

from planner.calibrate import fit as fit_module
from planner.calibrate.fit import MAX_PRIOR_SDS, NOISE_LOG, SHRINK_GRID, fit, loo_shrinkage
from planner.calibrate.runs import Run
from planner.engines.load import load_hardware, load_model
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import Layout
from planner.specs.overlay import FACTOR_BY_NAME, read_factor

GEMM = FACTOR_BY_NAME["gemm_plateau"]
SHIPPED = 0.688  # h100-sxm's GEMM plateau (asserted below)
W_DATA = 1 / NOISE_LOG**2  # 156.25
W_PRIOR = 1 / GEMM.prior_sigma**2  # 44.444


def _theta(gaps: list[float]) -> float:
    """The unconstrained MAP log step of the toy model (module docstring)."""
    return -W_DATA * sum(gaps) / (W_DATA * len(gaps) + W_PRIOR)


@pytest.fixture
def toy(monkeypatch):
    """Runs of the toy model: `toy([d_1, ...])` gives runs measured exp(d_i) s."""
    monkeypatch.setattr(fit_module, "_CACHE", {})

    def seconds(run: Run, hw: HardwareProfile) -> float:
        value = read_factor(hw, GEMM)
        assert value is not None
        return SHIPPED / value  # 1 s at the shipped plateau; log t = -theta

    monkeypatch.setattr(fit_module, "predict_seconds", seconds)
    hw = load_hardware("h100-sxm")
    assert read_factor(hw.spec, GEMM) == pytest.approx(SHIPPED)
    model = load_model("llama-3.1-8b").spec
    layout = Layout(tp=1, dp=8, zero=1, micro_batch=1, global_batch=64, seq_len=4096)

    def make(gaps: list[float]) -> list[Run]:
        return [Run(name=f"toy{i}", model_id="llama-3.1-8b", model=model, hardware_id=hw.id, hardware=hw.spec,
                    layout=layout, measured_seconds=math.exp(d)) for i, d in enumerate(gaps)]

    return make


def test_a_factor_moves_no_further_than_three_prior_sds(toy):
    # one run twice as slow: the unconstrained fit wants theta = -156.25 x 0.693 / 200.69 = -0.540, beyond
    # 3 x 0.15 = 0.45 (the GEMM plateau's own floor, 0.20, is log(0.20 / 0.688) = -1.24 away): the limit holds it
    assert _theta([math.log(2)]) == pytest.approx(-0.5396, abs=1e-4)
    result = fit(toy([math.log(2)]))
    assert [c.name for c in result.choices] == ["gemm_plateau"]
    assert result.values["gemm_plateau"] == pytest.approx(SHIPPED * math.exp(-MAX_PRIOR_SDS * 0.15), rel=1e-6)
    assert "at the limit of 3 prior sds" in result.choices[0].why
    assert "one run: no leave-one-out check" in result.choices[0].why
    assert result.shrinkage is None


def test_runs_that_agree_keep_the_whole_step(toy):
    # three runs 0.3 slower each: theta = -156.25 x 0.9 / 513.19 = -0.2740. Left out, each run is predicted
    # from the other two, theta = -156.25 x 0.6 / 356.94 = -0.2626, so its error is |0.2626 lambda - 0.3|,
    # the same for the three (standard error 0): the least is at lambda 1, which is kept.
    runs = toy([0.3, 0.3, 0.3])
    shrink = loo_shrinkage(runs, runs[0].hardware, {"gemm_plateau": SHIPPED},
                           {"gemm_plateau": SHIPPED * math.exp(_theta([0.3] * 3))})
    expected = {lam: abs(-_theta([0.3, 0.3]) * lam - 0.3) for lam in SHRINK_GRID}
    assert dict(shrink.scores) == pytest.approx(expected, abs=1e-6)
    assert shrink.factor == 1.0
    result = fit(runs)
    assert result.values["gemm_plateau"] == pytest.approx(SHIPPED * math.exp(-0.27402), rel=1e-4)
    assert result.shrinkage is not None and result.shrinkage.factor == 1.0


def test_a_run_the_others_do_not_explain_holds_the_factor(toy):
    # two runs as shipped, one 0.5 slower. On all three the fit moves theta = -78.125 / 513.19 = -0.152 and
    # lowers the objective from 39.06 to 27.17 (a gain of 11.9 > 4). Left out: each as-shipped run is
    # predicted from the other with the slow run, theta = -78.125 / 356.94 = -0.2189, error 0.2189 lambda;
    # the slow run from the two others, theta = 0, error 0.5 whatever lambda. Mean (0.4378 lambda + 0.5) / 3:
    # least at lambda 0, so nothing is fitted and the reason is given.
    runs = toy([0.0, 0.0, 0.5])
    shrink = loo_shrinkage(runs, runs[0].hardware, {"gemm_plateau": SHIPPED},
                           {"gemm_plateau": SHIPPED * math.exp(_theta([0.0, 0.0, 0.5]))})
    expected = {lam: (2 * -_theta([0.0, 0.5]) * lam + 0.5) / 3 for lam in SHRINK_GRID}
    assert -_theta([0.0, 0.5]) == pytest.approx(0.2189, abs=1e-4)
    assert dict(shrink.scores) == pytest.approx(expected, abs=1e-6)
    assert shrink.factor == 0.0
    result = fit(runs)
    assert result.choices == () and result.values == {}
    assert result.fitted == result.hardware
    assert "objective -11.9 when fitted, but held" in result.skipped["gemm_plateau"]


def test_scattered_left_out_errors_take_the_smallest_step_within_one_standard_error(toy):
    # two runs 0.3 slower, one 0.9. All three: theta = -156.25 x 1.5 / 513.19 = -0.457, held at -0.45.
    # Left out: a 0.3 run from (0.3, 0.9) wants -156.25 x 1.2 / 356.94 = -0.525, held at -0.45: error
    # |0.45 lambda - 0.3|; the 0.9 run from (0.3, 0.3), theta = -0.2626: error 0.9 - 0.2626 lambda.
    # Means over lambda 0, 0.25, 0.5, 0.75, 1: 0.500, 0.403, 0.306, 0.259, 0.312. The least is at 0.75,
    # errors (0.0375, 0.0375, 0.7031): standard error sd / sqrt(3) = 0.3842 / 1.732 = 0.2218, so every
    # lambda with mean <= 0.2594 + 0.2218 = 0.481 qualifies; the smallest is 0.25 (0.403; 0 has 0.500).
    runs = toy([0.3, 0.3, 0.9])
    result = fit(runs)
    assert result.shrinkage is not None
    scores = dict(result.shrinkage.scores)
    assert [round(scores[lam], 3) for lam in SHRINK_GRID] == [0.500, 0.403, 0.306, 0.259, 0.312]
    assert result.shrinkage.factor == 0.25
    assert result.values["gemm_plateau"] == pytest.approx(SHIPPED * math.exp(0.25 * -0.45), rel=1e-6)
    assert "0.25 of its fitted log step kept" in result.choices[0].why
