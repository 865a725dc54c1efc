"""Does calibrating on 3 runs predict a source's other runs better, where the source was never used to fit the model?

Usage: python benchmarks/calibrate_outside.py [--subsets 20] [--markdown]

Then the same sources' bound: what one step-time scale fitted on the same draws does (benchmarks/calibrate_bias_bound.py).

benchmarks/calibrate_sources.py asks issue 15's question of the public sources, which also fitted the shipped
profile: their remaining errors are mostly run-to-run scatter that no factor carries. This script asks it of the
held-out sources, as a user whose cluster and release the shipped profile has never seen would: the Megatron-Bridge
26.x tables (benchmarks/outside_megatron_bridge.py's data; a source is one release on one system, as the public
Megatron-Bridge sources are one system) and the Megatron MoE Model Zoo's H100 runs (benchmarks/outside_moe_model_zoo.py's
data, read from the zoo's own model files) and torchtitan's 2025 runs (benchmarks/outside_torchtitan.py's data, read
from the TOML of each run's commit, a source being one benchmark page on one chip). The draws, the fit and the columns
are calibrate_sources.py's. Rows the
held-out scripts leave out of their summaries (low confidence, known regressions) are left out here too.
"""

from __future__ import annotations

from typing import Any

import yaml
from calibrate_bias_bound import bound_table
from calibrate_sources import arguments, table
from outside_megatron_bridge import DATA, MODELS, SYSTEMS, layout_fields, measured_seconds, uncertain
from outside_moe_model_zoo import DATA as ZOO_DATA
from outside_moe_model_zoo import resolve_row
from outside_torchtitan import measured_step_seconds
from outside_torchtitan import predict as predict_torchtitan
from outside_torchtitan import rows as torchtitan_rows

from planner.calibrate.runs import Run
from planner.engines.load import load_hardware, load_model
from planner.errors import PlannerError
from planner.training.rules import resolve_layout


def bridge_run(row: dict[str, Any]) -> Run | None:
    """One Megatron-Bridge 26.x row as a run (None for the rows the held-out script leaves out of its summaries)."""
    if uncertain(row):
        return None
    model = load_model(MODELS[row["model_name"]])
    hw = load_hardware(SYSTEMS[row["system"]])
    gpus, fields = layout_fields(row)
    try:
        layout = resolve_layout(model.spec, gpus, **fields)
    except PlannerError:
        return None
    return Run(name=str(row["id"]), model_id=model.id, model=model.spec, hardware_id=hw.id, hardware=hw.spec,
               layout=layout, measured_seconds=measured_seconds(row), source="Megatron-Bridge performance summary",
               group=f"Megatron-Bridge {row['release']} ({hw.id})")


def zoo_run(row: dict[str, Any]) -> Run:
    """One Megatron MoE Model Zoo row as a run, its job read from the zoo's model file as the held-out script does."""
    resolved = resolve_row(row)
    return Run(name=str(row["id"]), model_id=resolved.model_id, model=resolved.model, hardware_id=resolved.hardware_id,
               hardware=resolved.hardware, layout=resolved.layout, measured_seconds=float(row["table"]["step_seconds"]),
               source="Megatron MoE Model Zoo", group=f"Megatron MoE Model Zoo ({resolved.hardware_id})")


TORCHTITAN_SOURCES = {"async_tp": "torchtitan async TP benchmark 2025-06", "trainy": "torchtitan on Trainy H200 2025-06",
                      "torchao": "torchao float8 training benchmark 2025-03",
                      "torchao_mi300x": "torchao float8 training benchmark 2025-08"}


def torchtitan_run(row: dict[str, Any]) -> Run:
    """One torchtitan 2025 row as a run, its job read from the TOML of its commit and its command line as the held-out
    script reads it (benchmarks/outside_torchtitan.py)."""
    result = predict_torchtitan(row)
    model_id = str(result.model.name).lower().replace(" ", "-")
    source = TORCHTITAN_SOURCES[row["source"]]
    return Run(name=str(row["id"]), model_id=model_id, model=result.model, hardware_id=row["hardware"],
               hardware=result.hardware, layout=result.layout, measured_seconds=measured_step_seconds(row, result),
               source=source, group=f"{source} ({row['hardware']})")


def outside_groups() -> dict[str, list[Run]]:
    groups: dict[str, list[Run]] = {}
    bridge = [bridge_run(row) for path in DATA for row in yaml.safe_load(path.read_text())]
    zoo = [zoo_run(row) for row in yaml.safe_load(ZOO_DATA.read_text())]
    titan = [torchtitan_run(row) for row in torchtitan_rows()]
    for run in [r for r in bridge if r is not None] + zoo + titan:
        groups.setdefault(run.group, []).append(run)
    return dict(sorted(groups.items()))


def main() -> None:
    args = arguments()
    groups = outside_groups()
    table(groups, args.subsets, args.markdown)
    print()
    bound_table(groups, args.subsets, args.markdown)


if __name__ == "__main__":
    main()
