"""A calibration as a profile overlay: the fitted factors with their uncertainty and shipped values, the
runs they came from (with their layout features, for the distance warning) and the errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.calibrate.distance import features
from planner.calibrate.fit import (
    MAX_PRIOR_SDS,
    MIN_GAIN,
    NOISE_LOG,
    RUNS_PER_FACTOR,
    SHRINK_GRID,
    FitResult,
    fit,
    leave_one_out,
)
from planner.calibrate.runs import GIB, Run, check_one_system, predict_seconds
from planner.specs.overlay import FACTOR_BY_NAME, FittedFactor, MemoryReserve, ProfileOverlay


@dataclass(frozen=True)
class Calibration:
    runs: tuple[Run, ...]
    result: FitResult
    loo: tuple[float | None, ...]  # per timed run
    overlay: ProfileOverlay


def _mean_abs(values: list[float]) -> float | None:
    return sum(abs(v) for v in values) / len(values) if values else None


def calibrate(runs: list[Run]) -> Calibration:
    """Fit the runs (all on one hardware profile) and describe the fit as an overlay."""
    check_one_system(runs)
    result = fit(runs)
    loo = leave_one_out(runs)
    timed = [r for r in runs if r.measured_seconds is not None]
    loo_by_name = {r.name: e for r, e in zip(timed, loo)}
    entries: list[dict[str, Any]] = []
    for i, run in enumerate(runs):
        entry: dict[str, Any] = {
            "name": run.name, "source": run.source, "model": run.model_id, "gpus": run.layout.gpus,
            "layout": {k: v for k, v in run.layout.model_dump().items()
                       if k in ("tp", "pp", "cp", "dp", "ep", "zero", "micro_batch", "global_batch", "seq_len",
                                "dtype", "recompute", "interleave")},
            "features": features(run.model, run.layout),
        }
        if run.measured_seconds is not None:
            before = predict_seconds(run, result.hardware)
            after = predict_seconds(run, result.fitted)
            entry.update(measured_seconds=run.measured_seconds, quantity=run.quantity, predicted_before_seconds=before,
                         predicted_after_seconds=after, error_before=before / run.measured_seconds - 1,
                         error_after=after / run.measured_seconds - 1, error_leave_one_out=loo_by_name.get(run.name))
        if run.measured_peak_bytes is not None:
            entry.update(measured_peak_gib=run.measured_peak_bytes / GIB, peak_error_before=result.peak_before[i],
                         peak_error_after=result.peak_after[i])
        entries.append(entry)
    loo_values = [e for e in loo if e is not None]
    summary: dict[str, Any] = {
        "noise_log_step_time": NOISE_LOG, "min_gain": MIN_GAIN, "runs_per_factor": RUNS_PER_FACTOR,
        "timed_runs": len(timed),
        "mean_abs_error_before": _mean_abs(list(result.before)), "mean_abs_error_after": _mean_abs(list(result.after)),
        "mean_abs_error_leave_one_out": _mean_abs(loo_values),
        "not_fitted": dict(result.skipped),
        "max_prior_sds": MAX_PRIOR_SDS, "shrink_grid": list(SHRINK_GRID),
    }
    if result.shrinkage is not None:
        s = result.shrinkage
        summary["shrinkage"] = {"factor": s.factor, "loo_mean_abs_log_error_shipped": s.loo_shipped,
                                "loo_mean_abs_log_error_fitted": s.loo_fitted,
                                "scores": [[lam, score] for lam, score in s.scores], "why": s.why}
    factors = {
        c.name: FittedFactor(path=FACTOR_BY_NAME[c.name].path, shipped=result.shipped[c.name],
                             fitted=result.values[c.name], sigma=result.sigmas[c.name], why=c.why)
        for c in result.choices
    }
    reserve = None
    if any(r.measured_peak_bytes is not None for r in runs):
        reserve = MemoryReserve(shipped_bytes=0.0, fitted_bytes=result.reserve_bytes,
                                sigma_bytes=result.reserve_sigma_bytes)
    overlay = ProfileOverlay(hardware=runs[0].hardware_id, hardware_name=runs[0].hardware.name, factors=factors,
                             memory_reserve=reserve, runs=entries, fit=summary)
    return Calibration(runs=tuple(runs), result=result, loo=loo, overlay=overlay)
