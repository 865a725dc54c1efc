"""Held-out check: planner's step time against NeMo AutoModel's fine-tuning (LoRA) performance table.

Usage: python benchmarks/outside_automodel_lora.py [--markdown]

Data: benchmarks/data/automodel_lora.yaml (six rows, DGX-H100, BF16; source and commit in its header). Each row is
read as a user would check it: its own recipe (tests/fixtures/engines/upstream/automodel/) through planner's AutoModel
reader on the row's GPU count, so the `peft:` section (LoRA rank and targets), FSDP2, TP and activation
checkpointing come from the file, and the catalog model of the recipe's Hugging Face id (Llama 3.3 70B Instruct as
llama-3.1-70b, the same shapes). None of these rows was used to choose a parameter. Prints one line per row, then
the median |error|, the signed median and the maximum, and the rows called "does not fit" at the default headroom.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml
from outside_megatron_bridge import summary

from planner.engines.automodel import import_automodel
from planner.engines.load import load_hardware, load_model, parse_yaml
from planner.training.estimate import TrainingEstimate, estimate
from planner.training.rules import resolve_layout

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "automodel_lora.yaml"
RECIPES = ROOT / "tests" / "fixtures" / "engines" / "upstream" / "automodel"
HARDWARE = "h100-sxm"


def rows() -> list[dict[str, Any]]:
    return list(yaml.safe_load(DATA.read_text(encoding="utf-8")))


def predict(row: dict[str, Any]) -> TrainingEstimate:
    """planner's estimate of a row, from its recipe on its GPUs."""
    model = load_model(row["model"]).spec
    config = parse_yaml((RECIPES / row["recipe"]).read_text(encoding="utf-8"), row["recipe"])
    imported = import_automodel(config, gpus=int(row["gpus"]), given={}, model=model, source=row["recipe"])
    layout = resolve_layout(model, int(row["gpus"]), **imported.fields)
    return estimate(model, load_hardware(HARDWARE).spec, layout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print the rows as a markdown table")
    args = parser.parse_args()
    errors: list[float] = []
    unfit: list[str] = []
    if args.markdown:
        print("| row | GPUs | tp x fsdp | LoRA rank | recompute | predicted (s) | measured (s) | error |")
        print("|---|---:|---|---:|---|---:|---:|---:|")
    for row in rows():
        result = predict(row)
        lay = result.layout
        predicted, measured = result.scalar("step_seconds"), float(row["table"]["step_seconds"])
        error = (predicted - measured) / measured
        errors.append(error)
        if not result.fits:
            unfit.append(row["id"])
        if args.markdown:
            print(f"| {row['id']} | {row['gpus']} | {lay.tp} x {lay.dp} | {lay.lora_rank} | {lay.recompute} | "
                  f"{predicted:.2f} | {measured:.2f} | {error * 100:+.1f}% |")
        else:
            print(f"{row['id']:36s} tp {lay.tp} dp {lay.dp} r {lay.lora_rank} {lay.recompute:5s} predicted "
                  f"{predicted:6.2f} s  measured {measured:6.2f} s  {error * 100:+6.1f}%"
                  f"{'' if result.fits else '  does not fit'}")
    print(f"\n{summary(errors)}")
    print(f"called 'does not fit' at the default headroom: {', '.join(unfit) or 'none'}")


if __name__ == "__main__":
    main()
