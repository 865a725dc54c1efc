"""What a single step-time scale fitted on 3 runs of a public source can do for its other runs.

Usage: python benchmarks/calibrate_bias_bound.py [--subsets 20] [--markdown]

The same sources, runs and draws of 3 calibration runs as benchmarks/calibrate_sources.py. For each draw,
the shipped model's log step errors of the 3 runs, e_i = log(predicted / measured), give a scale: their mean
(every predicted step of the source divided by exp(mean)) or half of it (a shrunk scale). The held-out runs'
mean |error| with that scale, against the shipped model's, bounds what any calibration that moves all of a
source's runs alike (one factor that every step depends on the same way) can do there: where the source's
errors differ from run to run more than they share a sign, no such scale helps on average, and only a fit
of the mechanism that differs (a factor some runs depend on and others not) can. It needs no fit, so it
runs in about a second.
"""

from __future__ import annotations

import math

import numpy as np
from calibrate_sources import MIN_RUNS, all_runs, arguments, calibration_draws

from planner.calibrate.published import by_group
from planner.calibrate.runs import predict_seconds

SHARES = (1.0, 0.5)  # shares of the 3 runs' mean log error taken as the scale


def bound_table(groups: dict[str, list], subsets: int, markdown: bool) -> None:
    """The scales' held-out errors for every source of `groups` with at least MIN_RUNS runs, one line each."""
    if markdown:
        print("| source | runs | mean log error | sd | held-out error, shipped | "
              + " | ".join(f"scale x{share:g}: error, draws worse" for share in SHARES) + " |")
        print("|---|---:|---:|---:|---:|" + "---:|" * len(SHARES))
    for group, members in groups.items():
        if len(members) < MIN_RUNS:
            continue
        errors = np.array([math.log(predict_seconds(r, r.hardware) / r.measured_seconds) for r in members])  # type: ignore[operator]
        shipped_sum = 0.0
        count = 0
        scaled = {share: [0.0, 0] for share in SHARES}  # share -> [sum of |error|, draws worse]
        draws = calibration_draws(len(members), subsets)
        for draw in draws:
            held = np.array([e for i, e in enumerate(errors) if i not in draw])
            shift = float(errors[list(draw)].mean())
            before = float(np.abs(np.expm1(held)).sum())
            shipped_sum += before
            count += len(held)
            for share in SHARES:
                after = float(np.abs(np.expm1(held - share * shift)).sum())
                scaled[share][0] += after
                scaled[share][1] += after > before + 1e-12
        cells = [f"{scaled[s][0] / count:.1%}, {scaled[s][1] / len(draws):.0%}" for s in SHARES]
        if markdown:
            print(f"| {group} | {len(members)} | {errors.mean():+.3f} | {errors.std():.3f} | {shipped_sum / count:.1%} | "
                  + " | ".join(cells) + " |")
        else:
            print(group, len(members), f"{errors.mean():+.3f}", f"{errors.std():.3f}", f"{shipped_sum / count:.1%}", cells)


def main() -> None:
    args = arguments()
    runs, _ = all_runs()
    bound_table(by_group(runs), args.subsets, args.markdown)


if __name__ == "__main__":
    main()
