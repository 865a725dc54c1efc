"""`planner calibrate` for people: per-run errors before and after the fit and left out, the factors."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from planner.report.tables import human_bytes, human_seconds, render, simple_table


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"


def render_calibration(overlay: Any) -> str:
    """The overlay (planner.specs.overlay.ProfileOverlay) as tables."""
    rows = []
    for run in overlay.runs:
        measured = run.get("measured_seconds")
        rows.append([
            run["name"], f"{run['model']} x{run['gpus']}",
            "-" if measured is None else human_seconds(measured),
            "-" if measured is None else human_seconds(run["predicted_before_seconds"]),
            _pct(run.get("error_before")), _pct(run.get("error_after")), _pct(run.get("error_leave_one_out")),
            "-" if run.get("measured_peak_gib") is None else f"{run['measured_peak_gib']:.1f} GiB",
            _pct(run.get("peak_error_before")), _pct(run.get("peak_error_after")),
        ])
    head = Text(f"calibration of {overlay.hardware} ({overlay.hardware_name}) on {len(overlay.runs)} run(s)")
    runs = simple_table(
        "step time (error = predicted / measured - 1)",
        ["run", "model", "measured", "shipped", "error before", "error after", "left out", "peak", "peak before",
         "peak after"],
        rows, right=["measured", "shipped", "error before", "error after", "left out", "peak", "peak before",
                     "peak after"],
    )
    factor_rows = [[name, f.path, f"{f.shipped:.4g}", f"{f.fitted:.4g} ± {f.sigma:.2g}", f.why or ""]
                   for name, f in overlay.factors.items()]
    factors = simple_table("fitted factors", ["factor", "profile field", "shipped", "fitted", "why"], factor_rows,
                           right=["shipped", "fitted"])
    fit = overlay.fit
    lines = Text()
    if overlay.memory_reserve is not None:
        r = overlay.memory_reserve
        if r.fitted_bytes > 0:
            lines.append(f"memory reserve: {human_bytes(r.fitted_bytes)} ± {human_bytes(r.sigma_bytes)} beyond the "
                         "model's peak (applied as less usable memory)\n")
        else:
            lines.append("memory reserve: 0 (the measured peaks are at or below the model's; a reserve is never "
                         "negative)\n")
    for name, why in fit.get("not_fitted", {}).items():
        lines.append(f"not fitted: {name}: {why}\n")
    shrink = fit.get("shrinkage")
    if shrink is not None:
        lines.append(f"leave-one-out inside the runs: {shrink['factor']:g} of the fitted step kept: {shrink['why']}\n")
    summary = (f"mean |error|: {_pct(fit.get('mean_abs_error_before'))} shipped, "
               f"{_pct(fit.get('mean_abs_error_after'))} fitted, {_pct(fit.get('mean_abs_error_leave_one_out'))} "
               "left out (each run predicted from a fit on the others)")
    if not overlay.factors:
        summary += "; no factor fitted: the overlay leaves the profile as shipped"
    lines.append(summary.replace("+", ""))
    return render(head, runs, factors, lines)
