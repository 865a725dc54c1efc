"""The layout rules, written once: a boolean mask per rule for a grid, and a message with the arithmetic
for a single layout. `search` counts rejections by rule code; `estimate` raises the first message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.errors import PlannerError
from planner.specs.layout import Layout, LayoutArrays
from planner.specs.model import ModelSpec


@dataclass(frozen=True)
class Rule:
    code: str  # stable reason code, e.g. "heads_not_divisible"
    broken: Callable[[ModelSpec, LayoutArrays, int], np.ndarray]
    message: Callable[[ModelSpec, Layout, int], str]


def _moe_experts(model: ModelSpec) -> int:
    return model.moe.num_experts if model.moe else 1


RULES: tuple[Rule, ...] = (
    Rule(
        "gpus_mismatch",
        lambda m, a, g: a.gpus != g,
        lambda m, l, g: f"tp({l.tp}) * pp({l.pp}) * cp({l.cp}) * dp({l.dp}) = {l.gpus} != gpus({g}); "
        "change a degree or the GPU count",
    ),
    Rule(
        "heads_not_divisible",
        lambda m, a, g: m.num_attention_heads % a.tp != 0,
        lambda m, l, g: f"num_attention_heads({m.num_attention_heads}) is not divisible by tp({l.tp}); "
        "use a tp that divides the head count",
    ),
    Rule(
        "too_many_stages",
        lambda m, a, g: a.pp > m.num_layers,
        lambda m, l, g: f"pp({l.pp}) exceeds num_layers({m.num_layers}); use at most one stage per layer",
    ),
    Rule(
        "batch_not_divisible",
        lambda m, a, g: a.global_batch % (a.dp * a.micro_batch) != 0,
        lambda m, l, g: f"global_batch({l.global_batch}) is not divisible by dp({l.dp}) * micro_batch({l.micro_batch}) "
        f"= {l.dp * l.micro_batch}; change the batch, dp or micro_batch",
    ),
    Rule(
        "sequence_parallel_needs_tp",
        lambda m, a, g: a.sequence_parallel & (a.tp == 1),
        lambda m, l, g: "sequence_parallel needs tp > 1; turn it off or raise tp",
    ),
    Rule(
        "seq_not_divisible_by_cp",
        lambda m, a, g: (a.cp > 1) & (a.seq_len % (2 * a.cp) != 0),
        lambda m, l, g: f"seq_len({l.seq_len}) is not divisible by 2 * cp({l.cp}) = {2 * l.cp} (causal context "
        "parallelism splits the sequence into 2 * cp load-balanced chunks); change seq_len or cp",
    ),
    Rule(
        "seq_too_long",
        lambda m, a, g: a.seq_len > m.max_seq_len,
        lambda m, l, g: f"seq_len({l.seq_len}) exceeds the model's max_seq_len({m.max_seq_len}); shorten it or "
        "raise max_seq_len in the model spec",
    ),
    Rule(
        "interleave_invalid",
        lambda m, a, g: (a.interleave > 1)
        & ((a.pp == 1) | (m.num_layers // a.pp < a.interleave) | (a.num_micro_batches % a.pp != 0) | a.gpipe),
        lambda m, l, g: f"interleave({l.interleave}) needs pp > 1, at least one layer per virtual stage "
        f"(num_layers({m.num_layers}) // pp({l.pp}) = {m.num_layers // l.pp} >= interleave), the micro-batch count "
        f"({l.global_batch // max(l.dp * l.micro_batch, 1)}) divisible by pp, and the 1f1b schedule",
    ),
    Rule(
        "ep_invalid",
        lambda m, a, g: (a.ep > 1) & ((_moe_experts(m) % a.ep != 0) | ((a.dp * a.cp) % a.ep != 0) | (m.moe is None)),
        lambda m, l, g: f"ep({l.ep}) needs a MoE model whose num_experts({_moe_experts(m)}) and dp({l.dp}) * cp({l.cp}) "
        "it divides",
    ),
    Rule(
        "recompute_layers_too_many",
        lambda m, a, g: (a.recompute_layers > 0) & (a.recompute_layers > -(-m.num_layers // a.pp)),
        lambda m, l, g: f"recompute_layers_per_stage({l.recompute_layers_per_stage}) exceeds the layers per stage "
        f"({-(-m.num_layers // l.pp)})",
    ),
)

RULE_CODES: tuple[str, ...] = tuple(rule.code for rule in RULES)


def violations(model: ModelSpec, lay: LayoutArrays, gpus: int) -> dict[str, np.ndarray]:
    """One boolean array per rule code: True where the candidate breaks the rule."""
    return {rule.code: np.broadcast_to(np.asarray(rule.broken(model, lay, gpus)), lay.shape) for rule in RULES}


def check_layout(model: ModelSpec, layout: Layout, gpus: int) -> None:
    """Raise a PlannerError with the arithmetic of the first rule `layout` breaks."""
    broken = violations(model, layout.to_arrays(), gpus)
    for rule in RULES:
        if bool(broken[rule.code][0]):
            raise PlannerError(rule.message(model, layout, gpus))


def resolve_layout(model: ModelSpec, gpus: int, **fields: Any) -> Layout:
    """A validated Layout; dp is derived as gpus / (tp * pp * cp) when not given.

    `fields` are raw values as a reader or the CLI gathered them; Layout validates them.
    """
    if gpus < 1:
        raise PlannerError(f"gpus({gpus}) must be positive")
    given = {k: v for k, v in fields.items() if v is not None}
    if "dp" not in given:
        model_parallel = int(given.get("tp", 1)) * int(given.get("pp", 1)) * int(given.get("cp", 1))
        if gpus % model_parallel != 0:
            raise PlannerError(
                f"gpus({gpus}) is not divisible by tp({given.get('tp', 1)}) * pp({given.get('pp', 1)}) * "
                f"cp({given.get('cp', 1)}) = {model_parallel}; change a degree or the GPU count"
            )
        given["dp"] = gpus // model_parallel
    try:
        layout = Layout(**given)
    except Exception as err:  # pydantic ValidationError -> one line naming the field
        from pydantic import ValidationError

        from planner.specs.validation import describe_validation_error

        if isinstance(err, ValidationError):
            raise PlannerError(describe_validation_error(err)) from None
        raise
    check_layout(model, layout, gpus)
    return layout
