"""Inference planning: the estimate of one or many serving layouts.

The pieces live in small modules: `inputs` (layouts as arrays, model shapes), `memory` (bytes per
GPU, fits, max concurrency), `time` (forward passes; static batching), `continuous` and `queueing`
(the continuously batched engine's steady state), `rules` (which layouts are valid, as data).
This module bundles memory and times into one result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerError
from planner.serving.inputs import InferenceArrays, ModelShapes, model_shapes
from planner.serving.memory import SERVING_FREE_MEMORY_FRACTION, InferenceMemory, inference_memory
from planner.serving.time import InferenceTimes, ServingTimes, inference_times
from planner.specs.hardware import HardwareProfile
from planner.specs.model import ModelSpec

__all__ = [
    "BATCHING",
    "InferenceArrays",
    "InferenceEstimate",
    "estimate_inference",
]

BATCHING: tuple[str, ...] = ("static", "continuous")


@dataclass(frozen=True)
class InferenceEstimate:
    """Memory and times of each serving layout (arrays shaped like the inputs)."""

    memory: InferenceMemory
    times: InferenceTimes

    def serving(self, batching: str) -> ServingTimes:
        """The latency/throughput figures of one batching discipline ('static' or 'continuous')."""
        if batching not in BATCHING:
            raise PlannerError(f"unknown batching '{batching}'; use one of {', '.join(BATCHING)}")
        return self.times.static if batching == "static" else self.times.continuous


def estimate_inference(
    model: ModelSpec,
    hw: HardwareProfile,
    x: InferenceArrays,
    *,
    headroom: float = SERVING_FREE_MEMORY_FRACTION,
    shapes: ModelShapes | None = None,
) -> InferenceEstimate:
    """Memory and times for every layout in `x` (pure; invalid layouts give meaningless numbers,
    so mask them with `planner.serving.rules.violations` first)."""
    s = shapes or model_shapes(model)
    times = inference_times(s, hw, x)
    # an open loop holds as many requests as arrive during one's stay (Little's law): memory is sized for them
    in_flight = times.continuous.in_flight
    held = np.where(np.isfinite(in_flight), np.ceil(np.where(np.isfinite(in_flight), in_flight, 1.0)), 1.0)
    open_loop = x.request_rate > 0
    if np.any(open_loop):
        x = x.with_concurrency(np.where(open_loop, np.maximum(held, 1.0), x.concurrency).astype(np.int64))
    return InferenceEstimate(memory=inference_memory(model, hw, x, headroom=headroom, shapes=s), times=times)
