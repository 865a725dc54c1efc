"""What the three exporters share: the prediction header, and `write_export`, which `planner export` and
`planner search --export` call.

An engine fixes some settings itself (torchtitan keeps fp32 gradients and always pairs tensor with
sequence parallelism, for instance). Each exporter first maps the layout onto what its engine can run
(`engine_layout`), with a note for every change; when the mapped layout differs, the prediction in
the header is re-estimated for it, so the header always describes the file. Rendering is pure;
`write_export` is the one function here that writes a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from planner import __version__
from planner.costmodel.training import TrainingEstimate, estimate
from planner.errors import PlannerError
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec

GIB = float(1 << 30)
EXPORT_FORMATS: tuple[str, ...] = ("megatron", "deepspeed", "torchtitan")
CHECK_FLAGS: dict[str, str] = {"megatron": "--megatron-args", "deepspeed": "--deepspeed", "torchtitan": "--torchtitan"}
DEFAULT_NAMES: dict[str, str] = {
    "megatron": "megatron_args.sh",
    "deepspeed": "ds_config.json",
    "torchtitan": "torchtitan.toml",
}


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
    from planner.specs.load import load_model

    try:
        in_catalog = load_model(ctx.model_id).spec == ctx.model
    except PlannerError:
        in_catalog = False
    if in_catalog:
        return f" --model {ctx.model_id}"
    return "" if ctx.format == "megatron" else " --model <the model: a catalog id, a YAML spec or a config.json>"


Renderer = Callable[[ExportContext], str]
Mapper = Callable[[ModelSpec, Layout], tuple[Layout, tuple[str, ...]]]


def _exporter(fmt: str) -> tuple[Mapper, Renderer]:
    if fmt == "megatron":
        from planner.exporters import megatron as module
    elif fmt == "deepspeed":
        from planner.exporters import deepspeed as module  # type: ignore[no-redef]
    elif fmt == "torchtitan":
        from planner.exporters import torchtitan as module  # type: ignore[no-redef]
    else:
        raise PlannerError(f"unknown export format '{fmt}'; use one of {', '.join(EXPORT_FORMATS)}")
    return module.engine_layout, module.render


def render_export(
    fmt: str,
    model_id: str,
    model: ModelSpec,
    hw: HardwareProfile,
    layout: Layout,
    est: TrainingEstimate,
    *,
    hardware_id: str | None = None,
) -> ExportFile:
    """The launch configuration for `layout` in `fmt`, with planner's prediction in its header."""
    mapper, renderer = _exporter(fmt)
    mapped, notes = mapper(model, layout)
    if mapped != layout:
        est = estimate(model, hw, mapped, headroom=est.headroom)
    ctx = ExportContext(format=fmt, model_id=model_id, model=model, hardware_id=hardware_id or hw.name, hardware=hw,
                        layout=mapped, estimate=est, notes=notes)
    return ExportFile(format=fmt, name=DEFAULT_NAMES[fmt], text=renderer(ctx), layout=mapped, notes=notes)


def write_export(
    fmt: str,
    model_id: str,
    model: ModelSpec,
    hw: HardwareProfile,
    layout: Layout,
    est: TrainingEstimate,
    directory: Path,
    *,
    hardware_id: str | None = None,
    name: str | None = None,
) -> Path:
    """Render and write the launch configuration into `directory` (created if missing); returns its path."""
    exported = render_export(fmt, model_id, model, hw, layout, est, hardware_id=hardware_id)
    target = Path(directory) / (name or exported.name)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(exported.text, encoding="utf-8")
    except OSError as err:
        raise PlannerError(f"cannot write: {err.strerror or err}", source=str(target)) from None
    return target
