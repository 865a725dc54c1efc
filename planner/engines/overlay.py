"""The profile overlay file (`planner calibrate --out`): written here, read by planner.engines.load.load_overlay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from planner.specs.overlay import ProfileOverlay
from planner.writing import write_text

HEADER = (
    "# planner profile overlay, written by 'planner calibrate'. Use it with --profile FILE (estimate, search,\n"
    "# check, export, infer) or 'profile: FILE' in a job file. Fitted values replace the shipped ones in the\n"
    "# hardware profile named below; the runs they came from and the errors are kept for the record.\n"
)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def overlay_text(overlay: ProfileOverlay) -> str:
    body: str = yaml.safe_dump(_plain(overlay.model_dump(exclude_none=True)), sort_keys=False, width=110)
    return HEADER + body


def write_overlay(path: Path, overlay: ProfileOverlay) -> None:
    write_text(path, overlay_text(overlay))  # a regular file only, renamed into place once whole
