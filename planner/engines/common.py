"""What the engine readers and writers share.

Readers: the result type, merging the file's settings with the job's, and the batch-size rules
(train_batch = micro_batch x grad_accum x dp, as DeepSpeed, Megatron-LM and torchtitan all derive it).
Writers: the export context and planner's prediction header.

Pure: readers get parsed data (a dict, a list of flags) and return values, writers return text; only
`planner.engines.load` reads files and only `planner.writing` writes them (`planner.engines.export.write_export`,
the calibration overlay).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner import __version__
from planner.errors import PlannerError
from planner.specs.hardware import HardwareProfile
from planner.specs.job import field_path
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec

if TYPE_CHECKING:
    from planner.training.estimate import TrainingEstimate


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


# Module names of the attention projections in the Hugging Face models PEFT, TRL and AutoModel wrap (and Megatron's
# names): a LoRA target list naming only these adapts the attention alone (Layout.lora_targets attention).
QKV_MODULE_NAMES = frozenset({"q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "linear_qkv", "q_a_proj",
                              "q_b_proj", "kv_a_proj", "kv_a_proj_with_mqa", "kv_b_proj", "wq", "wk", "wv", "query",
                              "key", "value", "c_attn"})
ATTENTION_MODULE_NAMES = QKV_MODULE_NAMES | {"o_proj", "self_attn", "attn", "linear_proj", "wo", "dense"}


def lora_targets_of(patterns: list[str]) -> str:
    """Layout.lora_targets of a LoRA target-module list, by each pattern's last name (wildcards dropped): qkv where
    every one is a query, key or value projection, attention where every one is an attention projection, else
    all_linear (`*_proj`, `all-linear`, `*`, any MLP name)."""
    names = [p.rsplit(".", 1)[-1].strip("*") for p in patterns]
    if names and all(name in QKV_MODULE_NAMES for name in names):
        return "qkv"
    return "attention" if names and all(name in ATTENTION_MODULE_NAMES for name in names) else "all_linear"


def require(fields: Mapping[str, Any], name: str, source: str, hint: str) -> None:
    """A field neither the engine file nor the job sets, that has no default."""
    if fields.get(name) is None:
        raise PlannerError(f"{field_path(name)} is required: {hint}", source=source)


# --- what the writers share --------------------------------------------------------------------------
GIB = float(1 << 30)
CHECK_FLAGS: dict[str, str] = {"megatron": "--megatron-args", "megatron_bridge": "--megatron-args", "deepspeed": "--deepspeed", "torchtitan": "--torchtitan",
                               "torchtitan_registry": "--torchtitan", "hf_trainer": "--hf-trainer",
                               "automodel": "--automodel"}


@dataclass(frozen=True)
class ExportContext:
    """Everything an exporter needs: the job and planner's estimate of the (engine-mapped) layout."""

    format: str
    model_id: str
    model: ModelSpec
    hardware_id: str
    hardware: HardwareProfile
    layout: Layout
    estimate: TrainingEstimate
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExportFile:
    """A rendered launch configuration."""

    format: str
    name: str
    text: str
    layout: Layout
    notes: tuple[str, ...]


def prediction_lines(ctx: ExportContext) -> list[str]:
    """What planner predicted, one fact per line (no comment markers)."""
    est, lay = ctx.estimate, ctx.layout
    peak = est.stages[est.peak_stage]
    s = est.scalar
    lines = [
        f"Written by planner {__version__} for {ctx.model_id} on {lay.gpus} x {ctx.hardware_id} ({ctx.hardware.name}).",
        f"Layout: tp {lay.tp}, pp {lay.pp}, cp {lay.cp}, dp {lay.dp}, ep {lay.ep}, zero {lay.zero}, "
        f"sequence_parallel {str(lay.sequence_parallel).lower()}, recompute {lay.recompute}, micro_batch "
        f"{lay.micro_batch}, global_batch {lay.global_batch}, seq_len {lay.seq_len}, interleave {lay.interleave}, "
        f"dtype {lay.dtype}.",
        f"Predicted peak memory: {peak.total_bytes / GIB:.1f} GiB per GPU on pipeline stage {est.peak_stage} "
        f"(usable {est.usable_bytes / GIB:.1f} of {est.capacity_bytes / GIB:.1f} GiB, headroom {est.headroom:.0%}): "
        f"{'fits' if est.fits else 'DOES NOT FIT'}.",
        f"Predicted step time: {s('step_seconds'):.3f} s; {s('tokens_per_second'):,.0f} tokens/s; "
        f"{s('model_tflops_per_gpu'):.0f} model TFLOP/s per GPU; MFU {s('mfu'):.1%}.",
        f"Check it in CI: planner check {CHECK_FLAGS[ctx.format]} <this file> --hardware {ctx.hardware_id} "
        f"--gpus {lay.gpus}{_model_flag(ctx)}",
    ]
    lines += [f"Note: {note}" for note in ctx.notes]
    return lines


def _model_flag(ctx: ExportContext) -> str:
    """`--model ID` for a catalog model; a model that came from elsewhere (Megatron-LM arguments, a spec file)
    has no id 'planner check' could look up: Megatron-LM arguments describe it themselves, the other formats
    need the user's spec."""
    from planner.engines.load import load_model

    try:
        in_catalog = load_model(ctx.model_id).spec == ctx.model
    except PlannerError:
        in_catalog = False
    if in_catalog:
        return f" --model {ctx.model_id}"
    if ctx.format in ("megatron", "hf_trainer"):  # the arguments describe or name the model themselves
        return ""
    return " --model <the model: a catalog id, a YAML spec or a config.json>"
