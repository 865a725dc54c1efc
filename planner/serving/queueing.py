"""Waiting for admission: the queueing formulas the continuously batched engine model uses.

Pure numpy, no serving shapes: the engine model (planner.serving.continuous) supplies the rates and
service times. Sources:

- Pollaczek-Khinchine mean wait of an M/G/1 queue, W = lambda E[D^2] / (2 (1 - rho)); for a deterministic
  service D (M/D/1) that is rho D / (2 (1 - rho)) (Kleinrock, Queueing Systems Vol. 1, 1975, Sec. 5.6).
- The wait's distribution: with probability 1 - rho an arrival finds the server idle and waits nothing
  (PASTA); otherwise the wait is taken as exponential with the conditional mean W / rho. This is exact for
  M/M/1 (Kleinrock Sec. 3.2, P(W > t) = rho exp(-mu (1 - rho) t)) and Kingman's heavy-traffic
  approximation for M/G/1 (Kingman 1961, "The single server queue in heavy traffic"); for a deterministic
  service at light load it overstates the tail somewhat (a conservative p99).
- Arrivals land uniformly inside the engine iteration that is running (it cannot admit them before the
  iteration ends): a residual wait uniform on [0, T].
"""

from __future__ import annotations

import numpy as np

# Halvings of the bracket: it starts up to ~1e3 s wide when the load is light (the queue part's scale is
# mean / rho) while the residual part's density can be 1e4 per second; 2**-60 of the bracket keeps the CDF at
# the quantile within 1e-9 of q.
BISECTION_STEPS = 60
"""Halvings of the search interval for a quantile (2^-40 of the bracket)."""


def md1_mean_wait_seconds(rho: np.ndarray, service_seconds: np.ndarray) -> np.ndarray:
    """Mean wait in queue of an M/D/1 queue (Pollaczek-Khinchine); inf at or above saturation."""
    rho = np.asarray(rho, dtype=float)
    ok = rho < 1
    safe = np.where(ok, rho, 0.0)
    return np.where(ok, safe * service_seconds / (2 * (1 - safe)), np.inf)


def wait_cdf(t: np.ndarray, residual_seconds: np.ndarray, busy: np.ndarray, rho: np.ndarray,
             mean_wait_seconds: np.ndarray) -> np.ndarray:
    """P(residual + queue wait <= t).

    residual: uniform on [0, residual_seconds] with probability `busy` (an iteration is running), else 0.
    queue wait: 0 with probability 1 - rho, else exponential with mean mean_wait / rho. Independent.
    For U ~ U(0, T) and E ~ Exp(a): P(U + E <= t) = (min(t, T) - (exp(-a (t - min(t, T))) - exp(-a t)) / a) / T.
    """
    t = np.asarray(t, dtype=float)
    big_t = np.maximum(np.asarray(residual_seconds, dtype=float), 1e-300)
    rho = np.clip(np.asarray(rho, dtype=float), 0.0, 1.0)
    cond_mean = np.where(rho > 0, mean_wait_seconds / np.maximum(rho, 1e-300), 0.0)
    a = 1.0 / np.maximum(cond_mean, 1e-300)
    u = np.minimum(t / big_t, 1.0)  # P(U <= t)
    m = np.minimum(t, big_t)
    u_plus_e = (m - (np.exp(-a * (t - m)) - np.exp(-a * t)) / a) / big_t
    e_only = 1.0 - np.exp(-a * t)
    with_residual = (1 - rho) * u + rho * np.where(cond_mean > 0, u_plus_e, u)
    without = (1 - rho) + rho * np.where(cond_mean > 0, e_only, 1.0)
    return np.asarray(busy * with_residual + (1 - busy) * without)


def wait_quantile(q: float, residual_seconds: np.ndarray, busy: np.ndarray, rho: np.ndarray,
                  mean_wait_seconds: np.ndarray) -> np.ndarray:
    """The q-quantile of residual + queue wait (see `wait_cdf`), by bisection on arrays; inf when rho >= 1."""
    residual = np.asarray(residual_seconds, dtype=float)
    rho = np.asarray(rho, dtype=float)
    stable = rho < 1
    mean = np.where(stable, mean_wait_seconds, 0.0)
    cond = np.where(rho > 0, mean / np.maximum(rho, 1e-300), 0.0)
    lo = np.zeros(np.broadcast_shapes(residual.shape, rho.shape, np.shape(busy), mean.shape))
    hi = residual + cond * (np.log(1.0 / (1.0 - q)) + 1.0) + 1e-12  # beyond the q-quantile of either part
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        below = wait_cdf(mid, residual, busy, np.where(stable, rho, 0.0), mean) < q
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return np.where(stable, hi, np.inf)
