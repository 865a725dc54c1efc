"""What the three engine importers share: the result type, merging the file's settings with the job's,
and the batch-size rules (train_batch = micro_batch x grad_accum x dp, as DeepSpeed, Megatron-LM and
torchtitan all derive it).

Pure: importers get parsed data (a dict, a list of flags) and return values; only
`planner.specs.load` reads files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from planner.errors import PlannerError
from planner.specs.job import field_path
from planner.specs.model import ModelSpec


@dataclass(frozen=True)
class EngineImport:
    """An engine config read into our terms.

    `fields` are Layout keyword arguments (dp included); `model` is set when the file defines the
    architecture (Megatron-LM arguments); `warnings` are settings read approximately or left out,
    one line each, for the CLI to print on stderr; `origins` name the setting each field written in the
    file came from, for messages.
    """

    format: str
    source: str
    fields: dict[str, Any]
    model: ModelSpec | None = None
    warnings: tuple[str, ...] = ()
    origins: Mapping[str, str] = field(default_factory=dict)  # field -> the setting in the file it came from


@dataclass
class Collected:
    """Layout fields found in an engine file, each with the setting it came from (for messages).

    `values` are written in the file; `defaults` are the engine's defaults for settings the file does not
    write: the job may set those ("what the file lacks"), but not contradict `values`.
    """

    source: str
    values: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def set(self, name: str, value: Any, origin: str, *, explicit: bool = True) -> None:
        if explicit:
            self.values[name] = value
            self.origin[name] = origin
            self.defaults.pop(name, None)
        elif name not in self.values:
            self.defaults[name] = value

    def warn(self, message: str) -> None:
        self.warnings.append(f"{self.source}: {message}")

    def merge(self, given: Mapping[str, Any], fallback: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The file's fields, plus the job's where the file is silent; a job field that contradicts the
        file is an error (the job gives only what the file lacks). The engine's defaults, then `fallback`,
        fill what neither sets."""
        out = dict(fallback or {})
        out.update(self.defaults)
        for name, value in given.items():
            if name in self.values and self.values[name] != value:
                raise PlannerError(
                    f"{field_path(name)} = {_show(value)} contradicts {self.origin[name]} = "
                    f"{_show(self.values[name])} in the engine file; remove it from the job or change the file",
                    source=self.source,
                )
            out[name] = value
        out.update(self.values)
        return out


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def data_parallel_degree(gpus: int, fields: Mapping[str, Any], source: str) -> int:
    """dp = gpus / (tp * pp * cp), with the arithmetic when it does not divide (or dp as given)."""
    tp, pp, cp = (int(fields.get(k) or 1) for k in ("tp", "pp", "cp"))
    if fields.get("dp"):
        return int(fields["dp"])
    if gpus % (tp * pp * cp) != 0:
        raise PlannerError(
            f"gpus({gpus}) is not divisible by tp({tp}) * pp({pp}) * cp({cp}) = {tp * pp * cp}; "
            "change a degree or the GPU count",
            source=source,
        )
    return gpus // (tp * pp * cp)


def resolve_batch(
    *,
    global_batch: int | None,
    micro_batch: int | None,
    grad_accum: int | None,
    dp: int,
    source: str,
    names: tuple[str, str, str] = ("global_batch", "micro_batch", "grad_accum"),
) -> tuple[int, int]:
    """(global_batch, micro_batch) from any two of the three, as DeepSpeed's `_set_batch_related_parameters`
    does: train = micro x accum x dp; a lone train batch means accum 1, a lone micro batch means accum 1.
    `names` are the engine's spellings, for messages."""
    g_name, m_name, a_name = names
    if global_batch is not None and micro_batch is not None:
        if grad_accum is not None and global_batch != micro_batch * grad_accum * dp:
            raise PlannerError(
                f"{g_name}({global_batch}) != {m_name}({micro_batch}) * {a_name}({grad_accum}) * dp({dp}) = "
                f"{micro_batch * grad_accum * dp}; make them agree",
                source=source,
            )
    elif global_batch is not None and grad_accum is not None:
        micro_batch = global_batch // dp // grad_accum
    elif micro_batch is not None:
        global_batch = micro_batch * (grad_accum or 1) * dp
    elif global_batch is not None:
        micro_batch = global_batch // dp
    else:
        raise PlannerError(f"give {g_name} or {m_name} (neither is set)", source=source)
    if micro_batch < 1 or global_batch % (micro_batch * dp) != 0:
        raise PlannerError(
            f"{g_name}({global_batch}) is not divisible by {m_name}({micro_batch}) * dp({dp}) = {micro_batch * dp}; "
            "change the batch sizes or the parallel degrees",
            source=source,
        )
    return global_batch, micro_batch


def require(fields: Mapping[str, Any], name: str, source: str, hint: str) -> None:
    """A field neither the engine file nor the job sets, that has no default."""
    if fields.get(name) is None:
        raise PlannerError(f"{field_path(name)} is required: {hint}", source=source)
