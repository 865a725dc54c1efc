"""Held-out check: planner's step time against Megatron-Bridge's 26.02 to 26.08 pre-training tables.

Usage: python benchmarks/outside_megatron_bridge.py [--markdown] [--data FILE ...]

Data: benchmarks/data/megatron_bridge_26.yaml (26.02 and 26.04.01), megatron_bridge_26_later.yaml (26.02.01,
26.04, 26.06, 26.06.01, 26.08) and megatron_bridge_nvfp4.yaml (the NVFP4 rows of those tables), all read unless
--data names others.

None of these rows was used to fit or choose a parameter. Each row of the data file carries the table's figures
and the recipe settings the row ran (read from Megatron-Bridge's performance scripts at the release's tag); the
row becomes a layout as the reference rows do (planner.calibrate.published.published_overrides: Megatron's fp32
main gradients unless the recipe says otherwise, fp8 parameter gathering, the fp8 recipe), with the row's
`planner_fields` on top, and the cost model predicts its step. The measured step is
global batch x sequence length / (tokens per second per GPU x GPUs). Prints one line per row, then the median
|error|, the signed median and the maximum, overall and per group (dense / MoE, per system), and the rows that
planner would call "does not fit" at the default headroom. Rows whose notes end in "Low confidence" (the table's
layout matches no recipe of its release) or "Known regression" (the table footnotes the row as a known performance
regression) are predicted and listed, and left out of the summaries.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from planner.calibrate.published import MEGATRON_BRIDGE_SOURCE, published_overrides
from planner.engines.load import load_hardware, load_model
from planner.errors import PlannerError
from planner.training.estimate import estimate
from planner.training.rules import resolve_layout

DATA = tuple(Path(__file__).resolve().parent / "data" / name
             for name in ("megatron_bridge_26.yaml", "megatron_bridge_26_later.yaml", "megatron_bridge_nvfp4.yaml",
                          "megatron_bridge_lora.yaml"))
DTYPES = {"BF16": "bf16", "NVFP4": "fp4"}  # every other precision of the tables is an fp8 recipe
LOW_CONFIDENCE = "Low confidence"  # the table's layout matches no recipe of its release
KNOWN_REGRESSION = "Known regression"  # the table's own footnote names a regression of that row
MODELS = {"LLAMA3_70B": "llama-3.1-70b", "LLAMA3.1_405B": "llama-3.1-405b", "LLAMA3_8B": "llama-3.1-8b",
          "DeepSeekV3": "deepseek-v3", "GPT OSS 120B": "gpt-oss-120b", "Qwen3_30B_a3B": "qwen3-30b-a3b",
          "Qwen3_235B_a22B": "qwen3-235b-a22b", "Kimi_K2": "kimi-k2"}
SYSTEMS = {"DGX-H100": "h100-sxm", "DGX-B200": "b200", "DGX-GB200": "gb200-nvl72", "DGX-B300": "b300",
           "DGX-GB300": "gb300-nvl72"}


def layout_fields(row: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The row's GPU count and planner layout fields: the table's degrees, then what the reference rows' reader
    adds for a Megatron-Bridge row, then the recipe settings the row ran."""
    t = row["table"]
    precision = str(row["precision"]).upper()
    fields: dict[str, Any] = {
        "tp": t["tp"], "pp": t["pp"], "cp": t["cp"], "ep": t.get("ep") or 1, "micro_batch": t["mbs"],
        "global_batch": t["gbs"], "seq_len": t["seq"], "interleave": t.get("vp") or 1,
        "dtype": DTYPES.get(precision, "fp8"), "zero": 3 if t.get("fsdp") else 1, "grad_dtype": "fp32",
    }
    fields = published_overrides(str(row["id"]), MEGATRON_BRIDGE_SOURCE, fields)  # every fp8 row names its recipe
    for key, value in (row.get("planner_fields") or {}).items():
        if key == "recompute_modules" and not value:
            continue
        fields[key] = tuple(value) if isinstance(value, list) else value
    return int(t["gpus"]), fields


def uncertain(row: dict[str, Any]) -> bool:
    """A row left out of the summaries: low confidence, or a regression the table footnotes."""
    notes = str(row.get("notes", ""))
    return LOW_CONFIDENCE in notes or KNOWN_REGRESSION in notes


def measured_seconds(row: dict[str, Any]) -> float:
    t = row["table"]
    return float(t["gbs"] * t["seq"] / (t["tokens_per_s_per_gpu"] * t["gpus"]))


def summary(errors: list[float]) -> str:
    e = np.asarray(errors)
    return (f"{len(e)} rows: median |error| {np.median(np.abs(e)) * 100:.1f}%, signed median "
            f"{np.median(e) * 100:+.1f}%, max |error| {np.max(np.abs(e)) * 100:.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print the rows as a markdown table")
    parser.add_argument("--data", type=Path, nargs="+", default=list(DATA))
    args = parser.parse_args()
    rows = [row for path in args.data for row in yaml.safe_load(path.read_text())]
    groups: dict[str, list[float]] = {}
    unfit: list[str] = []
    low: list[str] = []
    if args.markdown:
        print("| release | system | model | precision | gpus | tp/pp/cp/vp/ep | predicted (s) | measured (s) | error |")
        print("|---|---|---|---|---:|---|---:|---:|---:|")
    for row in rows:
        model = load_model(MODELS[row["model_name"]]).spec
        hw = load_hardware(SYSTEMS[row["system"]]).spec
        gpus, fields = layout_fields(row)
        try:
            layout = resolve_layout(model, gpus, **fields)
        except PlannerError as err:
            print(f"{row['id']}: not a layout: {err.message}")
            continue
        result = estimate(model, hw, layout)
        predicted, measured = result.scalar("step_seconds"), measured_seconds(row)
        error = (predicted - measured) / measured
        notes = str(row.get("notes", ""))
        left_out = uncertain(row)
        t = row["table"]
        degrees = f"{t['tp']}/{t['pp']}/{t['cp']}/{t.get('vp') or 1}/{t.get('ep') or 1}"
        mark = " (low confidence)" if LOW_CONFIDENCE in notes else " (known regression)" if left_out else ""
        if args.markdown:
            print(f"| {row['release']} | {row['system']} | {row['model_name']} | {row['precision']} | {gpus} | "
                  f"{degrees} | {predicted:.2f} | {measured:.2f} | {error * 100:+.1f}%{mark} |")
        else:
            print(f"{row['id']:40s} {degrees:14s} predicted {predicted:8.2f} s  measured {measured:8.2f} s  "
                  f"{error * 100:+6.1f}%{'' if result.fits else '  does not fit'}{mark}")
        if left_out:
            low.append(f"{row['id']} ({error * 100:+.1f}%)")
            continue
        kind = "MoE" if model.moe is not None else "dense"
        for name in ("all", kind, f"{kind}, {row['system']}", f"release {row['release']}",
                     f"precision {row['precision']}", f"model {row['model_name']}"):
            groups.setdefault(name, []).append(error)
        if not result.fits:
            unfit.append(f"{row['id']} (peak {result.scalar('peak_bytes') / 2**30:.1f} GiB)")
    order = sorted(groups, key=lambda n: (n != "all", not n.startswith("dense") and not n.startswith("MoE"), n))
    print()
    if args.markdown:
        print("| group | rows | median \\|error\\| | signed median | max \\|error\\| |")
        print("|---|---:|---:|---:|---:|")
        for name in order:
            e = np.asarray(groups[name])
            print(f"| {name} | {len(e)} | {np.median(np.abs(e)) * 100:.1f}% | {np.median(e) * 100:+.1f}% | "
                  f"{np.max(np.abs(e)) * 100:.1f}% |")
        print()
    else:
        for name in order:
            print(f"{name}: {summary(groups[name])}")
    print(f"left out of the summaries (low confidence: the table's layout matches no recipe; or a regression the table "
          f"footnotes): {', '.join(low) or 'none'}")
    print(f"called 'does not fit' at the default headroom: {', '.join(unfit) if unfit else 'none'}")


if __name__ == "__main__":
    main()
