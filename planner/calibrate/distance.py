"""How far a layout is from the runs a profile overlay was calibrated on.

Features of a layout: log2 of the model's parameter count, of the tp, pp, cp, dp and ep degrees and of
the sequence length, and the compute dtype. The distance between two layouts is the Euclidean norm of
the differences of the log2 features (one unit = a factor of two) plus KIND_DISTANCE for each of: the
dtypes differ, one shards parameters (ZeRO-3) and the other does not. A layout farther than FAR_DISTANCE from every calibration run gets a warning: the fitted
factors were identified on layouts unlike it (e.g. 4x the model, or 2x tp and 2x pp and 2x seq).
"""

from __future__ import annotations

import math
from typing import Any

from planner.physics.params import count_params
from planner.specs.layout import Layout, Zero
from planner.specs.model import ModelSpec

FAR_DISTANCE = 2.0
KIND_DISTANCE = 2.0
LOG_FEATURES = ("params", "tp", "pp", "cp", "dp", "ep", "seq_len")


def features(model: ModelSpec, layout: Layout) -> dict[str, Any]:
    return {
        "params": float(count_params(model).total), "tp": layout.tp, "pp": layout.pp, "cp": layout.cp,
        "dp": layout.dp, "ep": layout.ep, "seq_len": layout.seq_len, "dtype": layout.dtype,
        "zero3": layout.zero >= Zero.PARAMETERS,
    }


def distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    total = sum((math.log2(float(a[k])) - math.log2(float(b[k]))) ** 2 for k in LOG_FEATURES if k in a and k in b)
    for kind in ("dtype", "zero3"):
        if a.get(kind) != b.get(kind):
            total += KIND_DISTANCE**2
    return math.sqrt(total)


def nearest_distance(known: list[dict[str, Any]], here: dict[str, Any]) -> float:
    return min(distance(here, f) for f in known)


def far_warning(runs: list[dict[str, Any]], model: ModelSpec, layout: Layout) -> str | None:
    """A warning when the layout is far from every calibration run (runs: the overlay's `runs` entries)."""
    known = [r["features"] for r in runs if isinstance(r.get("features"), dict)]
    if not known:
        return None
    nearest = nearest_distance(known, features(model, layout))
    if nearest <= FAR_DISTANCE:
        return None
    return (f"this layout is {nearest:.1f} doublings from the nearest calibration run (more than {FAR_DISTANCE}): "
            "the profile's fitted factors may not carry over; compare with the run without --profile")
