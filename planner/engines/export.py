"""What the three exporters share: the prediction header, and `write_export`, which `planner export` and
`planner search --export` call.

An engine fixes some settings itself (torchtitan keeps fp32 gradients and always pairs tensor with
sequence parallelism, for instance). Each exporter first maps the layout onto what its engine can run
(`engine_layout`), with a note for every change; when the mapped layout differs, the prediction in
the header is re-estimated for it, so the header always describes the file. Rendering is pure;
`write_export` is the one function here that writes a file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from planner.engines import (
    automodel,
    deepspeed,
    hf_trainer,
    megatron,
    megatron_bridge,
    torchtitan,
    torchtitan_registry,
)
from planner.engines.common import ExportContext, ExportFile
from planner.errors import PlannerError
from planner.specs.engine import engine_profile
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.training.estimate import TrainingEstimate, estimate
from planner.training.rules import check_layout
from planner.writing import write_text

EXPORT_FORMATS: tuple[str, ...] = ("megatron", "megatron_bridge", "deepspeed", "torchtitan", "torchtitan_registry", "hf_trainer",
                                   "automodel")
DEFAULT_NAMES: dict[str, str] = {
    "megatron": "megatron_args.sh",
    "megatron_bridge": "megatron_bridge_override.yaml",
    "deepspeed": "ds_config.json",
    "torchtitan": "torchtitan.toml",
    "torchtitan_registry": "torchtitan_config_registry.py",
    "hf_trainer": "train_hf.sh",
    "automodel": "automodel_recipe.yaml",
}


Renderer = Callable[[ExportContext], str]
Mapper = Callable[[ModelSpec, Layout], tuple[Layout, tuple[str, ...]]]


def exporter(fmt: str) -> tuple[Mapper, Renderer]:
    modules = {"megatron": megatron, "megatron_bridge": megatron_bridge, "deepspeed": deepspeed, "torchtitan": torchtitan,
               "torchtitan_registry": torchtitan_registry, "hf_trainer": hf_trainer, "automodel": automodel}
    if fmt not in modules:
        raise PlannerError(f"unknown export format '{fmt}'; use one of {', '.join(EXPORT_FORMATS)}")
    return modules[fmt].engine_layout, modules[fmt].render


def engine_of_format(fmt: str, engine: str) -> str:
    """The engine that runs a file of format `fmt`: the format's own, except that Megatron arguments keep a
    NeMo layout NeMo's (NeMo runs Megatron-Core), and a Hugging Face Trainer command runs PyTorch FSDP/DDP
    (the fsdp profile), or DeepSpeed when the layout is DeepSpeed's."""
    if fmt == "hf_trainer":
        return "deepspeed" if engine == "deepspeed" else "fsdp"
    if fmt == "torchtitan_registry":  # torchtitan main's Python configs: torchtitan runs them
        return "torchtitan"
    if fmt == "megatron_bridge":  # Megatron-Bridge runs Megatron-Core, as NeMo does
        return engine if engine == "nemo" else "megatron"
    return engine if (fmt, engine) == ("megatron", "nemo") else fmt


# Formats whose files can name the fused attention's kernel (Megatron-LM --attention-backend flash | fused; an
# AutoModel recipe's model.backend.attn).
# torchtitan's TOML, DeepSpeed's JSON and the Trainer's arguments have no such setting: their engines' own
# kernel runs (PyTorch SDPA's flash backend, or what the model code picks).
ATTENTION_KERNEL_FORMATS = frozenset({"megatron", "megatron_bridge", "automodel"})  # AutoModel: model.backend.attn te | sdpa


# Formats whose files planner writes LoRA into (an AutoModel recipe's or a Megatron-Bridge override's `peft:` section).
LORA_FORMATS = frozenset({"automodel", "megatron_bridge"})


def _attention_kernel_as_run(fmt: str, layout: Layout, notes: tuple[str, ...]) -> tuple[Layout, tuple[str, ...]]:
    """The layout's attention_kernel as the file runs it: kept where the format can write it; elsewhere the
    engine's own kernel (null), with a note when that is not the kernel the layout asked for."""
    if fmt in ATTENTION_KERNEL_FORMATS or layout.attention_kernel is None:
        return layout, notes
    runs = engine_profile(layout.engine).kernels.attention_kernel
    if layout.attention_kernel != runs:
        notes = (*notes, f"attention_kernel {layout.attention_kernel} -> {runs}: {fmt}'s configuration has no "
                 f"attention-backend setting; {layout.engine} runs {runs}")
    return layout.model_copy(update={"attention_kernel": None}), notes


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
    mapper, renderer = exporter(fmt)
    mapped, notes = mapper(model, layout)
    runs = engine_of_format(fmt, mapped.engine)
    if mapped.engine != runs:  # the file is run by its format's engine (Megatron arguments also by NeMo)
        notes = (*notes, f"engine {mapped.engine} -> {runs}: the file is run by {runs}, whose profile the "
                 "prediction uses")
        mapped = mapped.model_copy(update={"engine": runs})
    mapped, notes = _attention_kernel_as_run(fmt, mapped, notes)
    if mapped.moe_load_imbalance != 1.0 and model.moe is not None:  # the data's, not the engine's: kept for the header
        notes = (*notes, f"moe_load_imbalance {mapped.moe_load_imbalance:g} is the routing's, not a setting of {fmt}'s "
                 "configuration: not written; the prediction assumes it")
    if mapped.lora_rank is not None and fmt not in LORA_FORMATS:
        raise PlannerError(f"lora_rank({mapped.lora_rank}): {fmt}'s configuration has no LoRA setting planner writes; "
                           f"export for {' or '.join(sorted(LORA_FORMATS))}, or drop lora_rank")
    check_layout(model, mapped, mapped.gpus)  # a setting the engine cannot run: a PlannerError naming it
    if mapped != layout:
        est = estimate(model, hw, mapped, headroom=est.headroom)
    ctx = ExportContext(format=fmt, model_id=model_id, model=model, hardware_id=hardware_id or hw.name, hardware=hw,
                        layout=mapped, estimate=est, notes=notes)
    return ExportFile(format=fmt, name=DEFAULT_NAMES[fmt], text=renderer(ctx), layout=mapped, notes=notes)


def write_export(exported: ExportFile, target: Path) -> Path:
    """Write a rendered launch configuration to `target` (its folder created if missing): a regular file, renamed
    into place once whole (planner.writing); returns `target`."""
    write_text(target, exported.text, make_parents=True)
    return target
