"""For a layout that does not fit: why (stage, bytes over, dominant term) and the smallest changes that fit.

Every candidate change is a whole Layout; all of them go through the cost model in one
vectorised `evaluate` call, so each suggestion is verified by re-estimating, not guessed
from a rule of thumb. Candidates that break a layout rule are dropped (rules.violations).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.errors import PlannerError
from planner.specs.engine import engine_profile
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import Layout, LayoutArrays, Zero
from planner.specs.model import ModelSpec
from planner.training.estimate import MEMORY_KEYS, TrainingEstimate, evaluate
from planner.training.rules import violations

GIB = float(1 << 30)
COMPONENTS = tuple(k for k in MEMORY_KEYS if k != "total_bytes")
# Stronger recompute for each setting: Megatron's selective and torchtitan's op-level AC both keep less than none
# and more than full, so from either the next step is full (the engine's rules drop what it cannot run).
STRONGER_RECOMPUTE = {"none": ("selective", "op", "full"), "selective": ("full",), "op": ("full",), "full": ()}
MORE_GPUS_FACTORS = (2, 4)
MAX_STEPS_PER_KNOB = 3


@dataclass(frozen=True)
class Diagnosis:
    """Where a layout runs out of memory."""

    stage: int
    peak_bytes: float
    usable_bytes: float
    over_bytes: float
    dominant: str  # e.g. "activations"
    dominant_bytes: float

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "peak_bytes": self.peak_bytes, "usable_bytes": self.usable_bytes,
                "over_bytes": self.over_bytes, "dominant": self.dominant, "dominant_bytes": self.dominant_bytes}


@dataclass(frozen=True)
class Suggestion:
    """A change to the layout (one knob, or two), verified to fit by re-estimating it."""

    description: str  # e.g. "recompute selective -> full"
    changes: dict[str, tuple[Any, Any]]  # field -> (from, to); 'gpus' when the GPU count changes
    layout: Layout
    gpus: int
    peak_bytes: float
    saves_bytes: float
    step_seconds: float
    step_change: float  # relative change of the step time (+0.18 = 18% slower)

    def to_json(self) -> dict[str, Any]:
        return {
            "change": self.description,
            "changes": {k: {"from": a, "to": b} for k, (a, b) in self.changes.items()},
            "gpus": self.gpus,
            "peak_bytes": self.peak_bytes,
            "saves_bytes": self.saves_bytes,
            "step_seconds": self.step_seconds,
            "step_change": self.step_change,
            "verified": True,
        }

    def summary(self) -> str:
        return (f"{self.description} saves {self.saves_bytes / GIB:.1f} GiB (peak {self.peak_bytes / GIB:.1f} GiB); "
                f"step {self.step_seconds:.3g} s ({self.step_change:+.0%})")


def diagnose(est: TrainingEstimate) -> Diagnosis:
    """The most loaded stage, how far over the usable memory it is, and its largest term."""
    stage = est.stages[est.peak_stage]
    parts = {name: float(getattr(stage, name)) for name in COMPONENTS}
    dominant = max(parts, key=lambda k: parts[k])
    return Diagnosis(stage=stage.stage, peak_bytes=float(stage.total_bytes), usable_bytes=est.usable_bytes,
                     over_bytes=float(stage.total_bytes) - est.usable_bytes,
                     dominant=dominant.removesuffix("_bytes"), dominant_bytes=parts[dominant])


# candidate moves ----------------------------------------------------------------------------------
Move = tuple[str, dict[str, Any]]  # (knob family, changed fields)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "all"
    return str(value)


def _with_dp(base: Layout, gpus: int, **changes: Any) -> dict[str, Any] | None:
    """Changes plus the dp that keeps tp * pp * cp * dp = gpus, or None when it does not divide."""
    tp, pp, cp = (changes.get(k, getattr(base, k)) for k in ("tp", "pp", "cp"))
    if gpus % (tp * pp * cp):
        return None
    dp = gpus // (tp * pp * cp)
    out = dict(changes)
    if dp != base.dp:
        out["dp"] = dp
    return out


def _moves(model: ModelSpec, hw: HardwareProfile, base: Layout, gpus: int) -> Iterator[Move]:
    """Single-knob changes in order of size, a few steps per knob."""
    for target in STRONGER_RECOMPUTE[base.recompute]:
        yield "recompute", {"recompute": target, "recompute_layers_per_stage": None}
    if base.recompute == "full" and base.recompute_layers_per_stage is not None:
        yield "recompute", {"recompute_layers_per_stage": None}
    if base.dp * base.cp > 1:
        for z in range(base.zero + 1, 4):
            yield "zero", {"zero": z}
    if base.tp > 1 and not base.sequence_parallel:
        yield "sequence_parallel", {"sequence_parallel": True}
    for m in sorted((d for d in range(1, base.micro_batch) if base.micro_batch % d == 0), reverse=True):
        yield "micro_batch", {"micro_batch": m}
    if base.interleave > 1:
        yield "interleave", {"interleave": 1}
    if not base.flash_attention:
        yield "flash_attention", {"flash_attention": True}
    for knob, limit in (("pp", model.num_layers), ("tp", hw.node.gpus_per_node), ("cp", gpus)):
        current = getattr(base, knob)
        found = 0
        for value in range(current + 1, limit + 1):
            changes = _with_dp(base, gpus, **{knob: value})
            if changes is None:
                continue
            if knob == "pp" and base.interleave > 1 and model.num_layers % (value * base.interleave):
                changes["interleave"] = 1
            yield knob, changes
            found += 1
            if found == MAX_STEPS_PER_KNOB:
                break
    # precision: offered only when no layout change on the job's GPUs fits (they change the numerics)
    if base.grad_dtype == "fp32":
        yield "grad_dtype", {"grad_dtype": "fp16" if base.dtype == "fp16" else "bf16"}
    if base.dtype == "bf16" and "fp8" in hw.accelerator.peak_flops_per_s:
        yield "dtype", {"dtype": "fp8"}
        if base.zero >= Zero.OPTIMIZER:
            yield "dtype", {"dtype": "fp8", "fp8_param_gather": True}
    for factor in MORE_GPUS_FACTORS:
        yield "gpus", {"dp": base.dp * factor}


def _candidate(base: Layout, changes: dict[str, Any]) -> Layout | None:
    fields = base.model_dump()
    fields.update(changes)
    if fields["recompute"] != "full":
        fields["recompute_layers_per_stage"] = None
    if fields["tp"] == 1:
        fields["sequence_parallel"] = False
    try:
        return Layout(**fields)
    except ValueError:
        return None


def _describe(base: Layout, gpus: int, changes: dict[str, Any], new_gpus: int) -> tuple[str, dict[str, tuple[Any, Any]]]:
    diff = {k: (getattr(base, k), v) for k, v in changes.items() if getattr(base, k) != v}
    parts: list[str] = []
    if new_gpus != gpus:
        diff["gpus"] = (gpus, new_gpus)
        parts.append(f"gpus {gpus} -> {new_gpus}")
    derived = {"dp"} if any(k in diff for k in ("tp", "pp", "cp", "gpus")) else set()
    for key, (old, new) in diff.items():
        if key in ("gpus",) or key in derived or (key == "recompute_layers_per_stage" and "recompute" in diff):
            continue
        parts.append(f"{key} {_show(old)} -> {_show(new)}")
    if "dp" in diff and derived:
        at = next((i for i, p in enumerate(parts) if p.split(" ")[0] in ("gpus", "tp", "pp", "cp")), 0)
        parts[at] += f" (dp {diff['dp'][0]} -> {diff['dp'][1]})"
    return " + ".join(parts), diff


EngineMapper = Callable[[ModelSpec, Layout], tuple[Layout, tuple[str, ...]]]
"""What an engine would run for a layout, with a note per change; raises PlannerError when it cannot run it
(an engine writer's `engine_layout`, passed in by the caller so that search stays below the engines)."""


def _runnable(model: ModelSpec, base: Layout, changes: dict[str, Any], layout: Layout,
              mapper: EngineMapper | None
              ) -> tuple[dict[str, Any], Layout] | None:
    """The candidate as the job's engine would run it (torchtitan has only ZeRO 0 or 3 and pairs tensor with
    sequence parallelism, Megatron-LM has no GPipe, ...), with the changes it really makes; None when the
    engine cannot run it."""
    if mapper is None:
        return changes, layout
    try:
        mapped, _ = mapper(model, layout)
    except PlannerError:
        return None
    if mapped == layout:
        return changes, layout
    fields = mapped.model_dump()
    return {k: v for k, v in fields.items() if getattr(base, k) != v or k in changes}, mapped


def suggest(
    model: ModelSpec,
    hw: HardwareProfile,
    est: TrainingEstimate,
    *,
    limit: int = 5,
    engine: EngineMapper | None = None,
) -> list[Suggestion]:
    """The smallest changes that make `est.layout` fit, each verified by re-estimating it.

    One suggestion per knob (the first step of it that fits), singles before pairs, cheaper step time first;
    more GPUs last. Pairs combine the largest step of two knobs and are tried only when no single change fits.
    With `engine` (an engine writer's `engine_layout`) each candidate is first mapped onto what that engine runs,
    and dropped when it cannot run it, so that every suggestion can be written back into the engine's file.
    """
    base, gpus = est.layout, est.layout.gpus
    moves = list(_moves(model, hw, base, gpus))
    singles = [(family, changes) for family, changes in moves]
    strongest: dict[str, dict[str, Any]] = {}
    for family, changes in moves:
        strongest[family] = changes  # the last (largest) step of each knob
    families = list(strongest)
    pairs: list[Move] = []
    for i, a in enumerate(families):
        for b in families[i + 1:]:
            if set(strongest[a]) & set(strongest[b]) - {"dp", "interleave"}:
                continue
            changes = {**strongest[a], **strongest[b]}
            if "gpus" in (a, b):
                if {a, b} & {"tp", "pp", "cp"}:
                    continue  # more GPUs with the same model-parallel degrees only
            elif "dp" in changes:  # two degree changes: dp again from the GPU count
                fixed = _with_dp(base, gpus, **{k: v for k, v in changes.items() if k != "dp"})
                if fixed is None:
                    continue
                changes = fixed
            pairs.append((f"{a}+{b}", changes))
    mapper = engine
    tried = [(family, *runnable) for family, changes in singles + pairs
             if (layout := _candidate(base, changes)) is not None
             and (runnable := _runnable(model, base, changes, layout, mapper)) is not None]
    if not tried:
        return []
    arrays = LayoutArrays.from_layouts([layout for _, _, layout in tried])
    broken = np.zeros(arrays.size, dtype=bool)
    profile = engine_profile(base.engine)
    for mask in violations(model, arrays, arrays.gpus, profile).values():  # type: ignore[arg-type]
        broken |= mask
    result = evaluate(model, hw, arrays, headroom=est.headroom, engine=profile)
    base_step = est.scalar("step_seconds")
    base_peak = float(est.stages[est.peak_stage].total_bytes)

    chosen: dict[str, Suggestion] = {}
    for i, (family, changes, layout) in enumerate(tried):
        if broken[i] or not bool(result.fits[i]) or family in chosen:
            continue
        if "+" in family and any(part in chosen for part in family.split("+")):
            continue  # a single change of one of its knobs already fits
        description, diff = _describe(base, gpus, changes, layout.gpus)
        if not diff:
            continue
        step = float(result.step_seconds[i])
        chosen[family] = Suggestion(
            description=description, changes=diff, layout=layout, gpus=layout.gpus,
            peak_bytes=float(result.peak_bytes[i]), saves_bytes=base_peak - float(result.peak_bytes[i]),
            step_seconds=step, step_change=step / base_step - 1.0,
        )
    # a single knob's change may carry what the engine pairs with it (tp -> sequence parallelism on torchtitan),
    # so singles and pairs are told apart by the knobs tried, not by the description
    ranked = sorted(chosen.items(), key=lambda kv: ("+" in kv[0], "gpus" in kv[1].changes, kv[1].step_seconds))
    # layout changes on the job's GPUs first; a precision change or more GPUs only when none of those fits
    same_gpus = [(f, s) for f, s in ranked if "gpus" not in s.changes and not PRECISION & set(f.split("+"))]
    if same_gpus:
        ranked = same_gpus
    singles_fit = [s for family, s in ranked if "+" not in family]
    return (singles_fit or [s for _, s in ranked])[:limit]


PRECISION = frozenset({"dtype", "grad_dtype"})


def keeps_gpus(fix: Suggestion) -> bool:
    """A change of the layout on the job's own GPUs (not of their number)."""
    return "gpus" not in fix.changes


def is_precision_change(fix: Suggestion) -> bool:
    return bool({"dtype", "grad_dtype", "fp8_param_gather"} & set(fix.changes))
