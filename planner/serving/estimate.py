"""Inference planning: which serving layouts are valid, and the estimate of one or many of them.

The pieces live in small modules: `inference_inputs` (layouts as arrays, model shapes),
`inference_memory` (bytes per GPU, fits, max concurrency), `inference_time` (TTFT, TPOT,
throughput), `inference_search` (the grid, ranking, Pareto front). This module checks layouts
(reasons as data, one boolean mask per reason) and bundles memory and times into one result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerError
from planner.serving.inputs import InferenceArrays, ModelShapes, model_shapes
from planner.serving.memory import DEFAULT_HEADROOM, InferenceMemory, inference_memory
from planner.serving.time import InferenceTimes, ServingTimes, inference_times
from planner.specs.hardware import HardwareProfile
from planner.specs.model import ModelSpec

__all__ = [
    "BATCHING",
    "REASONS",
    "InferenceArrays",
    "InferenceEstimate",
    "check_layout",
    "estimate_inference",
    "layout_problems",
]

BATCHING: tuple[str, ...] = ("static", "continuous")

REASONS: dict[str, str] = {
    "lengths": "input/output length or concurrency below 1",
    "tp_heads": "tp does not divide the attention heads",
    "tp_kv_heads": "tp and the KV heads do not divide one another",
    "pp_layers": "more pipeline stages than layers",
    "context": "input + output longer than the model's max_seq_len",
    "memory": "does not fit in memory",
    "overload": "the request rate is above what a replica can serve",
    "ttft": "TTFT (at --percentile) above --ttft-max",
    "tpot": "TPOT (at --percentile) above --tpot-max",
}
"""Why a serving layout is rejected; `layout_problems` and the search report these codes."""


def layout_problems(model: ModelSpec, x: InferenceArrays) -> dict[str, np.ndarray]:
    """For each structural reason, a boolean array: True where the layout is invalid for it."""
    heads, kv = model.num_attention_heads, model.kv_heads
    tp = np.maximum(x.tp, 1)
    kv_ok = (kv % tp == 0) | (tp % kv == 0) | (model.mla is not None)
    return {
        "lengths": (x.input_len < 1) | (x.output_len < 1) | (x.concurrency < 1) | (x.tp < 1) | (x.pp < 1),
        "tp_heads": heads % tp != 0,
        "tp_kv_heads": ~kv_ok,
        "pp_layers": x.pp > model.num_layers,
        "context": x.input_len + x.output_len > model.max_seq_len,
    }


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def check_layout(model: ModelSpec, x: InferenceArrays, *, gpus: int | None = None) -> None:
    """Raise PlannerError for the first problem of a single layout, with the arithmetic."""
    tp, pp = int(x.tp.flat[0]), int(x.pp.flat[0])
    s, o, c = int(x.input_len.flat[0]), int(x.output_len.flat[0]), int(x.concurrency.flat[0])
    for name, value in (("input-len", s), ("output-len", o), ("concurrency", c), ("tp", tp), ("pp", pp)):
        if value < 1:
            raise PlannerError(f"--{name} must be at least 1, got {value}")
    heads, kv = model.num_attention_heads, model.kv_heads
    if heads % tp:
        raise PlannerError(
            f"tp ({tp}) does not divide num_attention_heads ({heads}) of {model.name}; use one of {_divisors(heads)}"
        )
    if model.mla is None and kv % tp and tp % kv:
        raise PlannerError(
            f"tp ({tp}) and num_kv_heads ({kv}) do not divide one another; K/V heads can be split or replicated "
            "only then"
        )
    if pp > model.num_layers:
        raise PlannerError(f"pp ({pp}) exceeds num_layers ({model.num_layers}); use at most {model.num_layers} stages")
    if s + o > model.max_seq_len:
        raise PlannerError(
            f"input-len ({s}) + output-len ({o}) = {s + o} exceeds the max_seq_len ({model.max_seq_len}) of "
            f"{model.name}; shorten the prompt or the output"
        )
    if gpus is not None:
        if gpus < 1:
            raise PlannerError(f"--gpus must be at least 1, got {gpus}")
        if gpus % (tp * pp):
            raise PlannerError(
                f"gpus ({gpus}) is not a multiple of tp ({tp}) x pp ({pp}) = {tp * pp}; replicas must be whole"
            )


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
    headroom: float = DEFAULT_HEADROOM,
    shapes: ModelShapes | None = None,
) -> InferenceEstimate:
    """Memory and times for every layout in `x` (pure; invalid layouts give meaningless numbers,
    so mask them with `layout_problems` first)."""
    s = shapes or model_shapes(model)
    times = inference_times(s, hw, x)
    # an open loop holds as many requests as arrive during one's stay (Little's law): memory is sized for them
    in_flight = times.continuous.in_flight
    held = np.where(np.isfinite(in_flight), np.ceil(np.where(np.isfinite(in_flight), in_flight, 1.0)), 1.0)
    open_loop = x.request_rate > 0
    if np.any(open_loop):
        x = x.with_concurrency(np.where(open_loop, np.maximum(held, 1.0), x.concurrency).astype(np.int64))
    return InferenceEstimate(memory=inference_memory(model, hw, x, headroom=headroom, shapes=s), times=times)
