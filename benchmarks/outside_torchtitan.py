"""Held-out check: planner's step time and peak memory against torchtitan's 2025 benchmark runs.

Usage: python benchmarks/outside_torchtitan.py [--markdown]

Data: benchmarks/data/torchtitan_2025.yaml (20 rows from three pages, 17 on NVIDIA H100 and H200 and 3 on AMD MI300X;
their sources and commits in its header). Each
row is read as a user would check it: the TOML of the commit its authors ran, through planner's torchtitan reader with
the run's command-line overrides, on the row's GPU count and chip. None of these rows was used to choose a parameter.
Prints one line per row, then the median |error|, the signed median and the maximum of the step time (all rows and
per source), the peak-memory errors where the page gives one, and the rows called "does not fit".
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from outside_megatron_bridge import summary

from planner.engines.load import load_hardware, load_model, parse_toml
from planner.engines.torchtitan import catalog_id, import_torchtitan, model_name
from planner.training.estimate import TrainingEstimate, estimate
from planner.training.rules import resolve_layout

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "torchtitan_2025.yaml"
TOMLS = ROOT / "tests" / "fixtures" / "engines" / "upstream" / "torchtitan"


def rows() -> list[dict[str, Any]]:
    return list(yaml.safe_load(DATA.read_text(encoding="utf-8")))


def predict(row: dict[str, Any]) -> TrainingEstimate:
    """planner's estimate of a row: its TOML and overrides on its GPUs and chip, with what the row's `job` adds (a
    job file's fields beside the engine file)."""
    config = parse_toml((TOMLS / row["toml"]).read_text(encoding="utf-8"), row["toml"])
    name, flavor = model_name(config)
    model_id = catalog_id(name, flavor)
    assert model_id is not None, f"{row['id']}: no catalog model for {name} {flavor}"
    model = load_model(model_id).spec
    gpus = int(row["gpus"])
    imported = import_torchtitan(config, shlex.split(row["args"]), gpus=gpus, given=dict(row.get("job") or {}),
                                 model=model, source=row["toml"])
    layout = resolve_layout(model, gpus, **imported.fields)
    return estimate(model, load_hardware(row["hardware"]).spec, layout)


def measured_step_seconds(row: dict[str, Any], result: TrainingEstimate) -> float:
    lay = result.layout
    return float(lay.global_batch * lay.seq_len / (float(row["tokens_per_s_per_gpu"]) * lay.gpus))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print the rows as a markdown table")
    args = parser.parse_args()
    by_source: dict[str, list[float]] = {}
    memory: list[float] = []
    unfit: list[str] = []
    if args.markdown:
        print("| row | GPUs | chip | tp x fsdp | dtype | recompute | predicted (s) | measured (s) | error | "
              "memory: predicted / measured (GiB) |")
        print("|---|---:|---|---|---|---|---:|---:|---:|---|")
    for row in rows():
        result = predict(row)
        lay = result.layout
        predicted, measured = result.scalar("step_seconds"), measured_step_seconds(row, result)
        error = (predicted - measured) / measured
        vendor = "all AMD" if row["hardware"].startswith("mi") else "all NVIDIA"
        for name in ("all", vendor, row["source"]):
            by_source.setdefault(name, []).append(error)
        peak = result.scalar("peak_bytes") / 2**30
        shown = "-"
        if "peak_memory_GiB" in row:
            memory.append((peak - float(row["peak_memory_GiB"])) / float(row["peak_memory_GiB"]))
            shown = f"{peak:.1f} / {float(row['peak_memory_GiB']):.1f}"
        if not result.fits:
            unfit.append(row["id"])
        dtype = f"{lay.dtype}/{lay.fp8_recipe}" if lay.dtype == "fp8" else lay.dtype
        if args.markdown:
            print(f"| {row['id']} | {lay.gpus} | {row['hardware']} | {lay.tp} x {lay.dp} | {dtype} | {lay.recompute} | "
                  f"{predicted:.2f} | {measured:.2f} | {error * 100:+.1f}% | {shown} |")
        else:
            print(f"{row['id']:32s} tp {lay.tp} dp {lay.dp:<3d} {dtype:14s} {lay.recompute:5s} predicted "
                  f"{predicted:6.2f} s  measured {measured:6.2f} s  {error * 100:+6.1f}%  memory {shown}"
                  f"{'' if result.fits else '  does not fit'}")
    print()
    for name, errors in by_source.items():
        print(f"{name}: {summary(errors)}")
    m = np.asarray(memory)
    print(f"peak memory: {len(m)} rows, median |error| {np.median(np.abs(m)) * 100:.1f}%, max "
          f"{np.max(np.abs(m)) * 100:.1f}%")
    print(f"called 'does not fit' at the default headroom: {', '.join(unfit) or 'none'}")


if __name__ == "__main__":
    main()
