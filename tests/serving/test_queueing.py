"""Queueing formulas against their closed forms (Kleinrock, Queueing Systems Vol. 1)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.serving.queueing import md1_mean_wait_seconds, wait_cdf, wait_quantile


def test_md1_mean_wait_by_hand() -> None:
    # Pollaczek-Khinchine with a deterministic service D: rho D / (2 (1 - rho)); rho 0.5, D 2 s -> 1 s
    assert float(md1_mean_wait_seconds(np.array(0.5), np.array(2.0))) == pytest.approx(1.0)
    assert float(md1_mean_wait_seconds(np.array(0.0), np.array(2.0))) == 0.0
    assert np.isinf(md1_mean_wait_seconds(np.array(1.0), np.array(2.0)))


def test_quantile_of_the_exponential_tail_alone() -> None:
    # no running iteration: P(W > t) = rho exp(-t rho / W), so t_q = (W / rho) ln(rho / (1 - q)) above the atom
    rho, mean = 0.8, 0.4
    got = float(wait_quantile(0.99, np.array(0.0), np.array(0.0), np.array(rho), np.array(mean)))
    assert got == pytest.approx(mean / rho * np.log(rho / 0.01), rel=1e-9)
    # below the atom at zero (1 - rho of arrivals do not wait) the quantile is 0
    assert float(wait_quantile(0.1, np.array(0.0), np.array(0.0), np.array(rho), np.array(mean))) == pytest.approx(
        0.0, abs=1e-12)


def test_quantile_of_the_residual_alone() -> None:
    # nothing queued: an arrival waits U(0, T) for the running iteration
    t = float(wait_quantile(0.9, np.array(0.02), np.array(1.0), np.array(0.0), np.array(0.0)))
    assert t == pytest.approx(0.018, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(T=st.floats(1e-4, 1.0), rho=st.floats(0.01, 0.95), mean=st.floats(1e-4, 1.0), busy=st.sampled_from([0.0, 1.0]))
def test_cdf_against_monte_carlo(T: float, rho: float, mean: float, busy: float) -> None:
    rng = np.random.default_rng(0)
    n = 40_000
    residual = rng.uniform(0, T, n) * (rng.uniform(size=n) < busy)
    queued = rng.uniform(size=n) < rho
    wait = residual + np.where(queued, rng.exponential(mean / rho, n), 0.0)
    for q in (0.5, 0.9, 0.99):
        t = float(wait_quantile(q, np.array(T), np.array(busy), np.array(rho), np.array(mean)))
        cdf = float(wait_cdf(np.array(t), np.array(T), np.array(busy), np.array(rho), np.array(mean)))
        if t > 1e-9:  # off the atom at zero the quantile solves F(t) = q
            assert cdf == pytest.approx(q, abs=1e-6)
            assert np.mean(wait <= t) == pytest.approx(q, abs=0.01)
        else:  # at the atom: at least q of arrivals do not wait
            assert cdf >= q and np.mean(wait <= 1e-9) >= q - 0.01
