"""The fit: which factors the runs can identify, their values by least squares in log step time with
Gaussian priors at the shipped values, the memory reserve from measured peaks, and leave-one-out errors.

Parameters are theta_k = log(value_k / shipped_k). The objective is
    sum_i ((log t_i(theta) - log m_i) / NOISE_LOG)^2 + sum_k (theta_k / prior_sigma_k)^2
inside the factors' bounds (projected Gauss-Newton with a backtracking step; the step-time model has a
few kinks, where overlap starts to hide traffic, so each step is checked to lower the objective).

Which factors: the sensitivity S_ik = d log t_i / d log f_k at the shipped values (central differences).
A factor is a candidate when its RMS sensitivity over the runs is at least MIN_SENSITIVITY (a 10% change
moves the predicted steps by 1% or more); candidates are taken in order of sensitivity, each kept only
while the chosen columns, scaled to unit length, keep a smallest-to-largest singular value ratio of at
least MIN_SINGULAR_RATIO (the rank check: a factor that moves the runs as another already chosen does
is not identified by them), and never more than RUNS_PER_FACTOR runs per factor: one run fits one
factor, the most sensitive, and three runs fit at most one more.

How far: no factor moves more than MAX_PRIOR_SDS standard deviations of its prior from the shipped value
(a prior-data conflict: runs that ask for more show a mechanism the factor does not stand for, such as a
release that is twice as slow on the same layout, and following them there moves every other layout the
factor touches as far).

Whether the step carries over: leave-one-out inside the calibration runs. With the chosen factors fixed,
each run is predicted from their values fitted on the other runs, with that fitted log step scaled by
each lambda of SHRINK_GRID (0: the shipped profile, 1: the full fit); the smallest lambda whose mean
|log error| left out is within one standard error of the least (the one-standard-error rule) scales the
step of the fit on all runs: left-out errors that scatter (a run the others do not explain) keep less of
it, and a tie is no evidence for a step. lambda 0 holds every factor at its shipped value. The runs' own held-out predictions choose how much of the fit to
trust, which is the question the user asks of it (does it predict a run it was not fitted on?).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from planner.calibrate.runs import Run, predict_peak_bytes, predict_seconds
from planner.specs.hardware import HardwareProfile
from planner.specs.overlay import (
    FACTOR_BY_NAME,
    FACTORS,
    MEMORY_RESERVE_HIGH_BYTES,
    MEMORY_RESERVE_LOW_BYTES,
    MEMORY_RESERVE_PRIOR_BYTES,
    read_factor,
    with_factors,
)

# Noise of a measured log step time: the published NeMo tables move by +-6% between revisions of one
# release (published_runs_modern.yaml notes), so one standard deviation of 5%.
NOISE_LOG = 0.08
# Noise of a measured peak: allocator rounding and logging granularity, about 1 GiB.
NOISE_PEAK_BYTES = 2**30
MIN_SENSITIVITY = 0.1
MIN_SINGULAR_RATIO = 0.2
# Least drop of the objective (a chi-square) that adds a factor: 4 is a two-sigma improvement.
MIN_GAIN = 4.0
RUNS_PER_FACTOR = 2  # factors <= ceil(runs / RUNS_PER_FACTOR): 1 run -> 1, 3 runs -> 2
DIFF_STEP = 0.02  # log step of the finite differences
RANGE_STEP = 0.7  # log step of the range sensitivity (a factor of 2)
GRID_POINTS = 5  # starting values tried for a newly added factor, across its bounds
MAX_ITERATIONS = 12
# The prior is a Gaussian of log value: 3 sd holds 99.7% of it. A fit never moves a factor further (see above).
MAX_PRIOR_SDS = 3.0
# Shares of the fitted log step tried by the in-sample leave-one-out (0: shipped, 1: the full fit).
SHRINK_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Choice:
    """A factor the runs can identify, with the reason."""

    name: str
    sensitivity: float  # RMS over the runs of d log t / d log f
    why: str
    gain: float = 0.0  # drop of the objective when it was added


@dataclass(frozen=True)
class Shrinkage:
    """How much of the fitted step the runs' own leave-one-out supports."""

    factor: float  # lambda: the share of the fitted log step kept (1: all, 0: none)
    loo_shipped: float  # mean |log error| of each run predicted with the shipped profile (lambda 0)
    loo_fitted: float  # same with each run predicted from the others' fit at the chosen lambda
    scores: tuple[tuple[float, float], ...]  # (lambda, mean |log error| left out) for every lambda tried
    why: str


@dataclass(frozen=True)
class FitResult:
    hardware: HardwareProfile  # the shipped profile
    fitted: HardwareProfile  # the profile with the fitted values (and reserve)
    choices: tuple[Choice, ...]
    shipped: dict[str, float]
    values: dict[str, float]
    sigmas: dict[str, float]
    skipped: dict[str, str]  # factor -> why it was not fitted
    before: tuple[float, ...]  # relative error of each timed run, shipped profile
    after: tuple[float, ...]  # same, fitted
    reserve_bytes: float = 0.0
    reserve_sigma_bytes: float = 0.0
    peak_before: tuple[float | None, ...] = field(default_factory=tuple)
    peak_after: tuple[float | None, ...] = field(default_factory=tuple)
    shrinkage: Shrinkage | None = None  # None: nothing was fitted before the leave-one-out, or one run only


def _timed(runs: list[Run]) -> list[Run]:
    return [r for r in runs if r.measured_seconds is not None]


# (id(run), id(profile), factor values) -> (run, profile, log time): holding run and profile keeps their ids unique
_CACHE: dict[tuple[int, int, tuple[tuple[str, float], ...]], tuple[Run, HardwareProfile, float]] = {}
_CACHE_LIMIT = 200_000


def _log_predictions(runs: list[Run], hw: HardwareProfile, names: list[str], theta: np.ndarray,
                     shipped: dict[str, float]) -> np.ndarray:
    """log predicted time of each run with the named factors at shipped x exp(theta) (memoised: the fit
    asks for the same points again across candidates and draws; Runs and profiles are frozen)."""
    values = {n: shipped[n] * math.exp(t) for n, t in zip(names, theta)}
    key_values = tuple(sorted((n, round(v, 12)) for n, v in values.items()))
    out = []
    profile = None
    for r in runs:
        key = (id(r), id(hw), key_values)
        if key not in _CACHE:
            if profile is None:
                profile = with_factors(hw, values)
            if len(_CACHE) > _CACHE_LIMIT:
                _CACHE.clear()
            _CACHE[key] = (r, hw, math.log(predict_seconds(r, profile)))
        out.append(_CACHE[key][2])
    return np.array(out)


def _jacobian(runs: list[Run], hw: HardwareProfile, names: list[str], theta: np.ndarray, shipped: dict[str, float],
              lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    cols = []
    for k in range(len(names)):
        up, down = theta.copy(), theta.copy()
        up[k] = min(theta[k] + DIFF_STEP, hi[k])
        down[k] = max(theta[k] - DIFF_STEP, lo[k])
        if up[k] - theta[k] < theta[k] - down[k]:
            up, down = theta, down  # at the upper bound: a backward difference
        else:
            down = theta
        span = up[k] - down[k]
        if span <= 0:
            cols.append(np.zeros(len(runs)))
            continue
        cols.append((_log_predictions(runs, hw, names, up, shipped) - _log_predictions(runs, hw, names, down, shipped)) / span)
    return np.column_stack(cols) if cols else np.zeros((len(runs), 0))


def available_factors(hw: HardwareProfile) -> dict[str, float]:
    """Shipped values of the table's factors that this profile has."""
    out = {}
    for factor in FACTORS:
        value = read_factor(hw, factor)
        if value is not None:
            out[factor.name] = value
    return out


def sensitivities(runs: list[Run], hw: HardwareProfile) -> tuple[list[str], np.ndarray]:
    """d log t_i / d log f_k at the shipped values, for every factor the profile has."""
    shipped = available_factors(hw)
    names = list(shipped)
    lo, hi = _bounds(names, shipped)
    theta = np.zeros(len(names))
    return names, _jacobian(runs, hw, names, theta, shipped, lo, hi)


def _bounds(names: list[str], shipped: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of theta: the factor's own bounds, and no further than MAX_PRIOR_SDS prior sds from shipped."""
    lo = np.array([math.log(FACTOR_BY_NAME[n].low / shipped[n]) for n in names])
    hi = np.array([math.log(FACTOR_BY_NAME[n].high / shipped[n]) for n in names])
    sd = np.array([FACTOR_BY_NAME[n].prior_sigma for n in names])
    lo, hi = np.maximum(lo, -MAX_PRIOR_SDS * sd), np.minimum(hi, MAX_PRIOR_SDS * sd)
    return np.minimum(lo, 0.0), np.maximum(hi, 0.0)


def at_prior_limit(name: str, value: float, shipped: float) -> bool:
    """Whether a fitted value sits at MAX_PRIOR_SDS prior sds from shipped (and not at the factor's own bound)."""
    factor = FACTOR_BY_NAME[name]
    limit = MAX_PRIOR_SDS * factor.prior_sigma
    step = math.log(value / shipped)
    own = math.log((factor.low if step < 0 else factor.high) / shipped)
    return abs(step) >= limit - 1e-6 and abs(own) > limit


def range_sensitivity(runs: list[Run], hw: HardwareProfile, names: list[str], shipped: dict[str, float]
                      ) -> np.ndarray:
    """d log t / d log f as a secant from the shipped value to RANGE_STEP (in log) towards each bound, the
    steeper side per run: a local derivative misses traffic that overlap hides at the shipped value but
    not at a lower link efficiency (the step-time model has kinks there)."""
    lo, hi = _bounds(names, shipped)
    base = _log_predictions(runs, hw, [], np.zeros(0), shipped)
    cols = []
    for k, name in enumerate(names):
        best = np.zeros(len(runs))
        for edge in (max(lo[k], -RANGE_STEP), min(hi[k], RANGE_STEP)):
            if abs(edge) < 1e-9:
                continue
            slope = (_log_predictions(runs, hw, [name], np.array([edge]), shipped) - base) / edge
            best = np.where(np.abs(slope) > np.abs(best), slope, best)
        cols.append(best)
    return np.column_stack(cols) if cols else np.zeros((len(runs), 0))


def screen_factors(names: list[str], jac: np.ndarray) -> tuple[list[int], dict[str, str], np.ndarray]:
    """Candidates: factors the runs depend on (RMS sensitivity >= MIN_SENSITIVITY), most sensitive first."""
    rms = np.sqrt(np.mean(jac**2, axis=0)) if jac.size else np.zeros(len(names))
    order = sorted(range(len(names)), key=lambda k: -rms[k])
    skipped = {names[k]: f"sensitivity {rms[k]:.3f} < {MIN_SENSITIVITY}: the runs barely depend on it"
               for k in order if rms[k] < MIN_SENSITIVITY}
    return [k for k in order if rms[k] >= MIN_SENSITIVITY], skipped, rms


def _independent(jac: np.ndarray, columns: list[int]) -> float:
    """Smallest-to-largest singular value ratio of the unit-scaled columns (1: orthogonal, 0: collinear)."""
    if len(columns) > jac.shape[0]:
        return 0.0
    cols = jac[:, columns] / np.linalg.norm(jac[:, columns], axis=0)
    sv = np.linalg.svd(cols, compute_uv=False)
    return float(sv[-1] / sv[0])


def _solve(runs: list[Run], hw: HardwareProfile, names: list[str], shipped: dict[str, float],
           start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """Bounded MAP estimate of theta, its posterior covariance, and the objective there. The last factor's
    start is the best of GRID_POINTS values across its bounds (the others start at `start`)."""
    log_m = np.array([math.log(r.measured_seconds) for r in runs])  # type: ignore[arg-type]
    prior = np.array([1.0 / FACTOR_BY_NAME[n].prior_sigma ** 2 for n in names])
    lo, hi = _bounds(names, shipped)

    def cost(t: np.ndarray) -> tuple[float, np.ndarray]:
        pred = _log_predictions(runs, hw, names, t, shipped)
        r = (pred - log_m) / NOISE_LOG
        return float(r @ r + (t * t) @ prior), pred

    theta = np.zeros(len(names)) if start is None else np.clip(start, lo, hi)
    current, pred = cost(theta)
    if names:
        for value in np.linspace(lo[-1], hi[-1], GRID_POINTS):
            trial = theta.copy()
            trial[-1] = value
            c, p = cost(trial)
            if c < current:
                theta, current, pred = trial, c, p
    jac = np.zeros((len(runs), len(names)))
    for _ in range(MAX_ITERATIONS):
        jac = _jacobian(runs, hw, names, theta, shipped, lo, hi)
        h = jac.T @ jac / NOISE_LOG**2 + np.diag(prior)
        g = jac.T @ (pred - log_m) / NOISE_LOG**2 + prior * theta
        step = -np.linalg.solve(h, g)
        scale, improved, moved = 1.0, False, 0.0
        while scale > 1e-2:
            trial = np.clip(theta + scale * step, lo, hi)
            value, trial_pred = cost(trial)
            if value < current - 1e-9:
                moved = float(np.max(np.abs(trial - theta)))
                theta, current, pred, improved = trial, value, trial_pred, True
                break
            scale /= 2
        if not improved or moved < 1e-3:
            break
    h = jac.T @ jac / NOISE_LOG**2 + np.diag(prior)
    return theta, np.linalg.inv(h), current


STEP_OVERHEAD_FACTOR = "step_overhead"
# A fixed per-step cost and a per-token inefficiency move one run's step alike; only runs of different step
# lengths separate them (the fixed cost is a larger share of the short step). 1.5x: the shortest and longest
# step of the runs must differ at least that much before the per-step factor is a candidate.
STEP_LENGTH_RATIO = 1.5


def _step_lengths_differ(runs: list[Run]) -> bool:
    steps = [r.measured_seconds for r in runs if r.measured_seconds]
    return len(steps) >= 2 and max(steps) >= STEP_LENGTH_RATIO * min(steps)


def select_and_solve(runs: list[Run], hw: HardwareProfile, shipped: dict[str, float]
                     ) -> tuple[list[Choice], dict[str, str], dict[str, float], dict[str, float]]:
    """Forward selection: add, one at a time, the candidate that lowers the objective most, while it lowers it
    by at least MIN_GAIN, passes the rank check, and the runs allow another factor."""
    names = list(shipped)
    jac = range_sensitivity(runs, hw, names, shipped)
    candidates, skipped, rms = screen_factors(names, jac)
    limit = max(1, math.ceil(len(runs) / RUNS_PER_FACTOR))
    log_m = np.array([math.log(r.measured_seconds) for r in runs])  # type: ignore[arg-type]
    base = _log_predictions(runs, hw, [], np.zeros(0), shipped) - log_m
    current = float(base @ base) / NOISE_LOG**2
    chosen: list[int] = []
    choices: list[Choice] = []
    values: dict[str, float] = {}
    sigmas: dict[str, float] = {}
    while True:
        best = None
        for k in candidates:
            if k in chosen:
                continue
            if names[k] == STEP_OVERHEAD_FACTOR and not _step_lengths_differ(runs):
                skipped[names[k]] = (f"sensitivity {rms[k]:.2f}, but a per-step cost is told apart from the per-token "
                                     f"ones only by runs whose steps differ by {STEP_LENGTH_RATIO}x or more")
                continue
            if len(chosen) >= limit:
                skipped[names[k]] = (f"sensitivity {rms[k]:.2f}, but {len(runs)} run(s) fit at most {limit} "
                                     f"factor(s) ({RUNS_PER_FACTOR} runs per factor)")
                continue
            if chosen and _independent(jac, chosen + [k]) < MIN_SINGULAR_RATIO:
                skipped[names[k]] = (f"sensitivity {rms[k]:.2f}, but it moves the runs as the factors already "
                                     f"chosen do (rank check: singular value ratio < {MIN_SINGULAR_RATIO})")
                continue
            trial = [names[i] for i in chosen + [k]]
            start = np.array([math.log(values[n] / shipped[n]) for n in trial[:-1]] + [0.0])
            theta, cov, value = _solve(runs, hw, trial, shipped, start=start)
            skipped[names[k]] = (f"sensitivity {rms[k]:.2f}, but fitting it lowers the objective by only "
                                 f"{current - value:.1f} < {MIN_GAIN} (the runs agree with the shipped value within "
                                 "noise)")
            if best is None or value < best[1]:
                best = (k, value, theta, cov)
        if best is None:
            break
        k, value, theta, cov = best
        gain = current - value
        if gain < MIN_GAIN:
            break
        chosen.append(k)
        skipped.pop(names[k], None)
        lead = "the largest gain" if not choices else "the largest further gain"
        choices.append(Choice(names[k], float(rms[k]), f"RMS sensitivity of log step time {rms[k]:.2f}; "
                              f"objective -{gain:.1f} ({lead})", gain=float(gain)))
        current = value
        trial_names = [names[i] for i in chosen]
        values = {n: shipped[n] * math.exp(theta[i]) for i, n in enumerate(trial_names)}
        sigmas = {n: values[n] * math.sqrt(max(cov[i, i], 0.0)) for i, n in enumerate(trial_names)}
    return choices, skipped, values, sigmas


def _reserve(runs: list[Run], hw: HardwareProfile) -> tuple[float, float, list[float | None]]:
    """Bytes the measured peaks hold beyond the predicted ones: Gaussian posterior mean with a prior at 0."""
    gaps: list[float | None] = []
    for r in runs:
        gaps.append(None if r.measured_peak_bytes is None else r.measured_peak_bytes - predict_peak_bytes(r, hw))
    present = [g for g in gaps if g is not None]
    if not present:
        return 0.0, 0.0, gaps
    precision = len(present) / NOISE_PEAK_BYTES**2 + 1 / MEMORY_RESERVE_PRIOR_BYTES**2
    mean = sum(present) / NOISE_PEAK_BYTES**2 / precision
    mean = min(max(mean, MEMORY_RESERVE_LOW_BYTES), MEMORY_RESERVE_HIGH_BYTES)
    return float(mean), float(precision**-0.5), gaps


def relative_errors(runs: list[Run], hw: HardwareProfile) -> tuple[float, ...]:
    return tuple(predict_seconds(r, hw) / r.measured_seconds - 1 for r in _timed(runs))  # type: ignore[operator]


def loo_shrinkage(runs: list[Run], hw: HardwareProfile, shipped: dict[str, float], values: dict[str, float]
                  ) -> Shrinkage:
    """The share of the fitted log step (the factors of `values`, fixed) that the runs' own leave-one-out
    supports: each run predicted from those factors fitted on the other runs, their log step scaled by each
    lambda of SHRINK_GRID. The smallest lambda whose mean |log error| left out is within one standard error
    of the least (the one-standard-error rule of Breiman et al. 1984 and Hastie, Tibshirani & Friedman,
    The Elements of Statistical Learning, 2nd ed., section 7.10): runs whose left-out errors scatter widely
    (one run the others do not explain) support a smaller step; a tie is no evidence for a step."""
    names = list(values)
    start = np.array([math.log(values[n] / shipped[n]) for n in names])
    log_m = np.array([math.log(r.measured_seconds) for r in runs])  # type: ignore[arg-type]
    left_out = []
    for i in range(len(runs)):
        theta, _, _ = _solve(runs[:i] + runs[i + 1:], hw, names, shipped, start=start)
        left_out.append(theta)
    per_lambda = []
    for lam in SHRINK_GRID:
        errors = [abs(float(_log_predictions([runs[i]], hw, names, lam * theta, shipped)[0] - log_m[i]))
                  for i, theta in enumerate(left_out)]
        per_lambda.append(np.array(errors))
    means = [float(e.mean()) for e in per_lambda]
    k_best = int(np.argmin(means))
    # the one-standard-error rule: the smallest step whose left-out error is within one standard error of the least
    se = float(np.std(per_lambda[k_best], ddof=1) / math.sqrt(len(runs)))
    k = next(k for k, m in enumerate(means) if m <= means[k_best] + se + 1e-12)
    scores = [(lam, m) for lam, m in zip(SHRINK_GRID, means)]
    best = scores[k]
    shipped_score = scores[0][1]
    if best[0] == 0:
        why = (f"each run predicted from a fit on the others is not better by more than one standard error than with "
               f"the shipped profile (mean |log error| left out {shipped_score:.3f} shipped, {means[k_best]:.3f} at "
               f"best, standard error {se:.3f}): the fit does not carry from run to run, so every factor stays as "
               "shipped")
    else:
        why = (f"each run predicted from a fit on the others: mean |log error| {shipped_score:.3f} shipped, "
               f"{best[1]:.3f} with {best[0]:g} of the fitted log step (the least step within one standard error, "
               f"{se:.3f}, of the best, {means[k_best]:.3f})")
    return Shrinkage(factor=best[0], loo_shipped=shipped_score, loo_fitted=best[1], scores=tuple(scores), why=why)


def _guard(runs: list[Run], hw: HardwareProfile, shipped: dict[str, float], choices: list[Choice],
           skipped: dict[str, str], values: dict[str, float], sigmas: dict[str, float]
           ) -> tuple[list[Choice], dict[str, str], dict[str, float], dict[str, float], Shrinkage | None]:
    """Limit notes, and the in-sample leave-one-out shrinkage of the fitted step (two runs or more)."""
    notes = {n: f"; at the limit of {MAX_PRIOR_SDS:g} prior sds from shipped (the runs ask for more: a mechanism "
                "this factor may not stand for)" for n, v in values.items() if at_prior_limit(n, v, shipped[n])}
    if not choices or len(runs) < 2:
        choices = [Choice(c.name, c.sensitivity, c.why + notes.get(c.name, "")
                          + ("; one run: no leave-one-out check" if len(runs) < 2 else ""), c.gain) for c in choices]
        return choices, skipped, values, sigmas, None
    shrink = loo_shrinkage(runs, hw, shipped, values)
    if shrink.factor == 0:
        for c in choices:
            skipped[c.name] = (f"sensitivity {c.sensitivity:.2f}, objective -{c.gain:.1f} when fitted, but held at the "
                               "shipped value by the leave-one-out inside the runs (its line says why)")
        return [], skipped, {}, {}, shrink
    lam = shrink.factor
    values = {n: shipped[n] * (v / shipped[n]) ** lam for n, v in values.items()}
    sigmas = {n: sigmas[n] * lam for n in sigmas}  # a linear map of the fitted log step
    kept = "" if lam == 1 else f"; {lam:g} of its fitted log step kept by the leave-one-out"
    choices = [Choice(c.name, c.sensitivity, c.why + notes.get(c.name, "") + kept, c.gain) for c in choices]
    return choices, skipped, values, sigmas, shrink


def fit(runs: list[Run]) -> FitResult:
    """Fit the identifiable factors (and the memory reserve) to runs on one hardware profile."""
    hw = runs[0].hardware
    timed = _timed(runs)
    shipped = available_factors(hw)
    shrink = None
    if timed:
        choices, skipped, values, sigmas = select_and_solve(timed, hw, shipped)
        choices, skipped, values, sigmas, shrink = _guard(timed, hw, shipped, choices, skipped, values, sigmas)
    else:
        choices, skipped, values, sigmas = [], {n: "no run has a measured time" for n in shipped}, {}, {}
    reserve, reserve_sigma, gaps = _reserve(runs, hw)
    fitted = with_factors(hw, values, reserve)
    before = relative_errors(runs, hw)
    after = relative_errors(runs, fitted)
    peak_before = tuple(None if g is None or r.measured_peak_bytes is None else -g / r.measured_peak_bytes
                        for g, r in zip(gaps, runs))
    peak_after = tuple(None if g is None or r.measured_peak_bytes is None else (reserve - g) / r.measured_peak_bytes
                       for g, r in zip(gaps, runs))
    return FitResult(hardware=hw, fitted=fitted, choices=tuple(choices), shipped={n: shipped[n] for n in shipped},
                     values=values, sigmas=sigmas, skipped=skipped, before=before, after=after,
                     reserve_bytes=reserve, reserve_sigma_bytes=reserve_sigma, peak_before=peak_before,
                     peak_after=peak_after, shrinkage=shrink)


def leave_one_out(runs: list[Run]) -> tuple[float | None, ...]:
    """Each timed run's error when the fit (factor choice included) uses only the other runs."""
    timed = _timed(runs)
    if len(timed) < 2:
        return tuple(None for _ in timed)
    out: list[float | None] = []
    for i, run in enumerate(timed):
        rest = timed[:i] + timed[i + 1:]
        result = fit(rest)
        out.append(predict_seconds(run, result.fitted) / run.measured_seconds - 1)  # type: ignore[operator]
    return tuple(out)


def held_out_errors(train: list[Run], test: list[Run]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Errors on `test` before and after a fit on `train` (the benchmark's held-out comparison)."""
    result = fit(train)
    before = tuple(predict_seconds(r, result.hardware) / r.measured_seconds - 1 for r in test)  # type: ignore[operator]
    after = tuple(predict_seconds(r, result.fitted) / r.measured_seconds - 1 for r in test)  # type: ignore[operator]
    return before, after
