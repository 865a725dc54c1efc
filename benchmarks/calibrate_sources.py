"""Does calibrating on 3 runs of a public source predict that source's other runs better than the shipped model?

Usage: python benchmarks/calibrate_sources.py [--subsets 20] [--markdown]

Sources: planner's validation cases (planner/validate/training_cases.yaml, by group) and the reference
YAMLs tests/fixtures/reference/published_runs_modern.yaml and published_runs_moe.yaml (copies of the
project's shared/reference files), each case turned into a run by planner.calibrate.published; a source
is one group on one hardware profile. For every source with at least 5 runs, up to --subsets sets of
3 calibration runs are drawn (all of them when there are fewer; a fixed seed), `planner calibrate`'s fit
runs on the 3, and the error on each of the source's other runs is taken with the shipped and with the
fitted profile. Printed: the mean absolute error over all those held-out predictions, before and after,
the share of draws where the held-out mean got worse, and the same errors over the held-out runs within
FAR_DISTANCE of a calibration run (those `--profile` gives no far-from-calibration warning for).
"""

from __future__ import annotations

import argparse
import itertools
import random
from pathlib import Path

from planner.calibrate.distance import FAR_DISTANCE, features, nearest_distance
from planner.calibrate.fit import fit, held_out_errors
from planner.calibrate.published import by_group, runs_from_reference, runs_from_training_cases
from planner.engines.load import read_structured
from planner.validate.training import training_cases

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "reference"
MIN_RUNS = 5
CALIBRATION_RUNS = 3


def all_runs():
    runs = runs_from_training_cases(training_cases())
    skipped = {}
    for name in ("published_runs_modern", "published_runs_moe"):
        more, left = runs_from_reference(read_structured(REFERENCE / f"{name}.yaml")["cases"], name)
        runs += more
        skipped.update(left)
    return runs, skipped


def calibration_draws(runs: int, subsets: int) -> list[tuple[int, ...]]:
    """Up to `subsets` sets of CALIBRATION_RUNS run indices out of `runs` (all of them when there are fewer;
    a fixed seed, so every script that compares draws uses the same ones)."""
    draws = list(itertools.combinations(range(runs), CALIBRATION_RUNS))
    random.Random(0).shuffle(draws)
    return draws[:subsets]


def arguments() -> argparse.Namespace:
    """--subsets (draws of 3 per source) and --markdown, the options of every script that compares draws."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--subsets", type=int, default=20)
    parser.add_argument("--markdown", action="store_true")
    return parser.parse_args()


def compare(members: list, subsets: int) -> tuple:
    """One source's draws: (draws, held-out mean |error| shipped, calibrated, share of draws worse, factors fitted
    with their counts, (near share, near shipped, near calibrated))."""
    draws = calibration_draws(len(members), subsets)
    before_sum = after_sum = near_before = near_after = 0.0
    count = worse = near = 0
    factors: dict[str, int] = {}
    for draw in draws:
        train = [members[i] for i in draw]
        test = [r for i, r in enumerate(members) if i not in draw]
        for choice in fit(train).choices:
            factors[choice.name] = factors.get(choice.name, 0) + 1
        before, after = held_out_errors(train, test)
        before_sum += sum(abs(e) for e in before)
        after_sum += sum(abs(e) for e in after)
        count += len(before)
        known = [features(r.model, r.layout) for r in train]
        for run, b, a in zip(test, before, after):
            if nearest_distance(known, features(run.model, run.layout)) <= FAR_DISTANCE:
                near += 1
                near_before += abs(b)
                near_after += abs(a)
        worse += sum(abs(e) for e in after) > sum(abs(e) for e in before) + 1e-9
    near_cols = (near / count, near_before / near if near else None, near_after / near if near else None)
    return len(draws), before_sum / count, after_sum / count, worse / len(draws), factors, near_cols


def table(groups: dict[str, list], subsets: int, markdown: bool) -> None:
    """Every source of `groups` with at least MIN_RUNS runs compared, printed one line per source."""
    rows = [(group, len(members), compare(members, subsets) if len(members) >= MIN_RUNS else None)
            for group, members in groups.items()]
    if markdown:
        print("| source | runs | draws of 3 | held-out error, shipped | held-out error, calibrated | draws worse "
              "| near share | near: shipped | near: calibrated | factors fitted (draws) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for group, n, res in rows:
            if res is None:
                print(f"| {group} | {n} | - | - | - | - | - | - | - | fewer than {MIN_RUNS} runs |")
                continue
            draws, b, a, w, f, (share, nb, na) = res
            fs = ", ".join(f"{k} ({v})" for k, v in sorted(f.items(), key=lambda kv: -kv[1])) or "none"
            nbs = "-" if nb is None else f"{nb:.1%}"
            nas = "-" if na is None else f"{na:.1%}"
            print(f"| {group} | {n} | {draws} | {b:.1%} | {a:.1%} | {w:.0%} | {share:.0%} | {nbs} | {nas} | {fs} |")
    else:
        for group, n, res in rows:
            print(group, n, res)


def main() -> None:
    args = arguments()
    runs, skipped = all_runs()
    table(by_group(runs), args.subsets, args.markdown)
    if skipped:
        print()
        print("skipped cases: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))


if __name__ == "__main__":
    main()
