"""The serving layout rules, written once: a boolean mask per rule for a grid, and a message with the
arithmetic for a single layout. `infer search` counts rejections by rule code; `infer estimate` and the
validation raise the first message. The training twin is planner.training.rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerError
from planner.serving.inputs import InferenceArrays
from planner.specs.model import ModelSpec
from planner.specs.serving import ServingLayout


@dataclass(frozen=True)
class Rule:
    code: str  # stable reason code, reported by `infer search`
    description: str  # what the code means, in a search's rejection table
    broken: Callable[[ModelSpec, InferenceArrays], np.ndarray]
    message: Callable[[ModelSpec, ServingLayout], str]


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _kv_ok(m: ModelSpec, tp: np.ndarray) -> np.ndarray:
    t = np.maximum(tp, 1)
    return np.asarray((m.kv_heads % t == 0) | (t % m.kv_heads == 0) | (m.mla is not None))


RULES: tuple[Rule, ...] = (
    Rule(
        "lengths", "input/output length or concurrency below 1",
        lambda m, x: (x.input_len < 1) | (x.output_len < 1) | (x.concurrency < 1) | (x.tp < 1) | (x.pp < 1),
        lambda m, lay: "input-len, output-len, concurrency, tp and pp must each be at least 1",
    ),
    Rule(
        "tp_heads", "tp does not divide the attention heads",
        lambda m, x: m.num_attention_heads % np.maximum(x.tp, 1) != 0,
        lambda m, lay: f"tp ({lay.tp}) does not divide num_attention_heads ({m.num_attention_heads}) of {m.name}; "
        f"use one of {_divisors(m.num_attention_heads)}",
    ),
    Rule(
        "tp_linear_heads", "tp does not divide the Gated DeltaNet key heads",
        lambda m, x: (m.linear_attention is not None)
        & ((m.linear_attention.num_key_heads if m.linear_attention else 1) % np.maximum(x.tp, 1) != 0),
        lambda m, lay: f"tp ({lay.tp}) does not divide the Gated DeltaNet layers' linear key heads "
        f"({m.linear_attention.num_key_heads if m.linear_attention else 0}) of {m.name}; vLLM splits them over TP",
    ),
    Rule(
        "tp_kv_heads", "tp and the KV heads do not divide one another",
        lambda m, x: ~_kv_ok(m, x.tp),
        lambda m, lay: f"tp ({lay.tp}) and num_kv_heads ({m.kv_heads}) do not divide one another; K/V heads can be "
        "split or replicated only then",
    ),
    Rule(
        "pp_layers", "more pipeline stages than layers",
        lambda m, x: x.pp > m.num_layers,
        lambda m, lay: f"pp ({lay.pp}) exceeds num_layers ({m.num_layers}); use at most {m.num_layers} stages",
    ),
    Rule(
        "context", "input + output longer than the model's max_seq_len",
        lambda m, x: x.input_len + x.output_len > m.max_seq_len,
        lambda m, lay: f"input-len ({lay.input_len}) + output-len ({lay.output_len}) = "
        f"{lay.input_len + lay.output_len} exceeds the max_seq_len ({m.max_seq_len}) of {m.name}; shorten the "
        "prompt or the output",
    ),
)
"""Structural rules: a layout breaking one is invalid for the model whatever the hardware."""

RULE_CODES: tuple[str, ...] = tuple(r.code for r in RULES)

OUTCOMES: dict[str, str] = {
    "memory": "does not fit in memory",
    "overload": "the request rate is above what a replica can serve",
    "ttft": "TTFT (at --percentile) above --ttft-max",
    "tpot": "TPOT (at --percentile) above --tpot-max",
}
"""Rejections that come from the estimate rather than from a rule."""

REASONS: dict[str, str] = {**{r.code: r.description for r in RULES}, **OUTCOMES}
"""Every rejection code a serving search reports, with what it means."""


def violations(model: ModelSpec, x: InferenceArrays) -> dict[str, np.ndarray]:
    """For each rule, a boolean array: True where the layout breaks it."""
    return {rule.code: np.asarray(rule.broken(model, x)) for rule in RULES}


def check_layout(model: ModelSpec, layout: ServingLayout) -> None:
    """Raise PlannerError with the arithmetic of the first rule `layout` breaks; also that the GPUs hold whole
    replicas."""
    x = InferenceArrays.from_layout(layout)
    broken = violations(model, x)
    for rule in RULES:
        if bool(np.ravel(broken[rule.code])[0]):
            raise PlannerError(rule.message(model, layout))
    if layout.gpus is not None and layout.gpus % (layout.tp * layout.pp):
        raise PlannerError(f"gpus ({layout.gpus}) is not a multiple of tp ({layout.tp}) x pp ({layout.pp}) = "
                           f"{layout.tp * layout.pp}; replicas must be whole")


def resolve_layout(model: ModelSpec, **fields: object) -> ServingLayout:
    """A validated ServingLayout from keyword fields (None: the default), with bad input as one PlannerError."""
    from pydantic import ValidationError

    from planner.specs.validation import describe_validation_error

    try:
        layout = ServingLayout(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as err:
        first = err.errors()[0]
        if first["type"] == "greater_than" and first["loc"]:
            name = str(first["loc"][0]).replace("_", "-")
            low = "above 0" if name == "request-rate" else "at least 1"
            raise PlannerError(f"--{name} must be {low}, got {first['input']}") from None
        raise PlannerError(describe_validation_error(err)) from None
    check_layout(model, layout)
    return layout
