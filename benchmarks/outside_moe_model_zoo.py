"""Held-out check: planner's step time against the Megatron MoE Model Zoo's H100 table, each run read from the zoo's
own model file.

Usage: python benchmarks/outside_moe_model_zoo.py [--markdown] [--data FILE]

Data: benchmarks/data/megatron_moe_model_zoo.yaml (its header names the source and how each row's flags were taken).
None of these rows was used to fit or choose a parameter. Each row becomes a job as `planner check --megatron-args
FILE --engine-args "VARIABLES FLAGS"` builds it (planner's MODEL_ARGS reader, the zoo file's variables substituted),
and the cost model predicts its step, which the table prints. The summary is over every row, and again over the rows
whose flags a zoo script gives (the others' flags are read from the table's columns: `flags_from: table`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml
from outside_megatron_bridge import summary

from planner.engines.job import ResolvedJob, resolve_job
from planner.errors import PlannerError
from planner.specs.job import Job
from planner.training.estimate import estimate

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data" / "megatron_moe_model_zoo.yaml"


def resolve_row(row: dict[str, Any]) -> ResolvedJob:
    """The row's job as `planner check --megatron-args FILE --engine-args "VARIABLES FLAGS"` builds it."""
    job = Job.model_validate({"hardware": row["hardware"], "gpus": row["gpus"], "engine": {
        "format": "megatron", "path": str(ROOT / row["model_file"]), "args": f"{row['variables']} {row['flags']}"}})
    return resolve_job(job, base=ROOT, source=row["id"])


def predict(row: dict[str, Any]) -> tuple[float, str, bool]:
    """The row's predicted step seconds, its layout in short, and whether it fits."""
    resolved = resolve_row(row)
    lay = resolved.layout
    result = estimate(resolved.model, resolved.hardware, lay)
    degrees = f"{lay.tp}/{lay.pp}/{lay.interleave}/{lay.ep}" + (f" zero {lay.zero}" if lay.zero == 3 else "")
    return result.scalar("step_seconds"), degrees, bool(result.fits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print the rows as a markdown table")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    rows = yaml.safe_load(args.data.read_text())
    errors: list[float] = []
    scripted: list[float] = []
    if args.markdown:
        print("| run | tp/pp/vp/ep | dispatcher | predicted (s) | measured (s) | error | flags from |")
        print("|---|---|---|---:|---:|---:|---|")
    for row in rows:
        try:
            predicted, degrees, fits = predict(row)
        except PlannerError as err:
            print(f"{row['id']}: not read: {err.render()}")
            continue
        measured = float(row["table"]["step_seconds"])
        error = (predicted - measured) / measured
        from_table = row["flags_from"] == "table"
        mark = " (flags from the table's columns)" if from_table else ""
        if args.markdown:
            print(f"| {row['id']} | {degrees} | {row['table']['dispatcher']} | {predicted:.2f} | {measured:.1f} | "
                  f"{error * 100:+.1f}% | {row['flags_from']} |")
        else:
            print(f"{row['id']:46s} {degrees:18s} predicted {predicted:7.2f} s  measured {measured:6.1f} s  "
                  f"{error * 100:+6.1f}%{'' if fits else '  does not fit'}{mark}")
        errors.append(error)
        if not from_table:
            scripted.append(error)
    print()
    for name, values in (("all", errors), ("flags from a zoo script", scripted)):
        if values:
            print(f"{name}: {summary(values)}")


if __name__ == "__main__":
    main()
