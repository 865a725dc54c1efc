"""Options shared by several commands, and small helpers for thin commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

FORMAT_TABLE_JSON = click.Choice(["table", "json"])


def format_option(choices: tuple[str, ...] = ("table", "json"), default: str = "table") -> Callable[..., Any]:
    return click.option(
        "--format", "fmt", type=click.Choice(list(choices)), default=default, show_default=True,
        help="Output format.",
    )


def model_option(required: bool = True) -> Callable[..., Any]:
    return click.option(
        "--model", "-m", "model_ref", required=required, metavar="MODEL",
        help="Catalog id (see 'planner models'), our YAML spec, or a HuggingFace config.json.",
    )


def hardware_option(required: bool = True) -> Callable[..., Any]:
    return click.option(
        "--hardware", "-w", "hardware_ref", required=required, metavar="HW",
        help="Catalog id (see 'planner hardware') or a YAML hardware profile.",
    )


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


POSITIVE = click.IntRange(min=1)
ENGINES = ("megatron", "nemo", "torchtitan", "fsdp", "deepspeed")  # planner.specs.engine.ENGINE_NAMES


def engine_option(default: str | None = "megatron") -> Callable[..., Any]:
    return click.option(
        "--engine", type=click.Choice(list(ENGINES)), default=default, show_default=default is not None,
        help="Training engine whose profile (kernels, ZeRO implementation, what it can run) applies; "
        "see docs/engines.md.",
    )


def training_precision_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Layout-independent training options shared by estimate and search (precision, kernels, overlap)."""
    options = [
        click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8"]), default="bf16", show_default=True,
                     help="Compute precision of the matrix multiplies."),
        click.option("--grad-dtype", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True,
                     help="Gradient precision (fp32 = Megatron's main grads)."),
        click.option("--optimizer", type=click.Choice(["adam", "sgd"]), default="adam", show_default=True,
                     help="Optimizer (sets the optimizer-state bytes per parameter)."),
        click.option("--flash-attention/--no-flash-attention", default=True, show_default=True,
                     help="Fused attention (no s x s score matrix stored)."),
        click.option("--overlap-grad-reduce/--no-overlap-grad-reduce", default=True, show_default=True,
                     help="Data-parallel gradient reduction overlaps the backward pass."),
        click.option("--tp-comm-overlap/--no-tp-comm-overlap", default=False, show_default=True,
                     help="Tensor-parallel collectives overlap the GEMMs (Megatron --tp-comm-overlap)."),
        engine_option(),
        click.option("--compile/--no-compile", "compile_", default=False, show_default=True,
                     help="torch.compile on (torch engines: torchtitan, fsdp, deepspeed): element-wise kernels fused."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def profile_option() -> Callable[..., Any]:
    return click.option(
        "--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE",
        help="A profile overlay from 'planner calibrate', applied to the hardware profile.",
    )


def with_profile(hardware: Any, profile_path: Path | None) -> tuple[Any, Any]:
    """The loaded hardware entry with the overlay at `profile_path` applied (and the overlay, or None)."""
    if profile_path is None:
        return hardware, None
    from dataclasses import replace

    from planner.engines.job import overlaid

    spec, overlay = overlaid(hardware.spec, profile_path)
    return replace(hardware, spec=spec), overlay


def warn_if_far(overlay: Any, model: Any, layout: Any) -> None:
    """A warning on stderr when the layout is far from every run the overlay was calibrated on."""
    if overlay is None:
        return
    from planner.calibrate.distance import far_warning

    message = far_warning(overlay.runs, model, layout)
    if message:
        click.echo(f"warning: {message}", err=True)
