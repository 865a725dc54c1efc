"""Layout -> DeepSpeed JSON config.

JSON has no comments, so planner's prediction goes in a top-level `"_planner"` key,
which DeepSpeed's config reader never looks up (it reads the keys it knows). The same
block holds the layout fields a DeepSpeed config cannot express (sequence length,
context and sequence parallelism, interleaving, the kernels); `planner.importers.deepspeed`
uses them only where neither the config's own keys nor the job set a value, so the file
alone reads back to the same layout.
"""

from __future__ import annotations

import json
from typing import Any

from planner.exporters.common import ExportContext, prediction_lines
from planner.importers.deepspeed import PLANNER_KEY
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec


def engine_layout(model: ModelSpec, layout: Layout) -> tuple[Layout, tuple[str, ...]]:
    """Every layout field is either a DeepSpeed key or carried in the `_planner` block; without ZeRO, DeepSpeed
    picks its optimizer wrapper from the precisions (engine._do_optimizer_sanity_check): half-precision
    gradients in the model dtype, or, for bf16 with fp32 gradients or a pipeline, BF16_Optimizer, which shards
    the optimizer states as ZeRO 1."""
    if layout.zero != 0:
        return layout, ()
    half = "fp16" if layout.dtype == "fp16" else "bf16"
    if half == "bf16" and (layout.grad_dtype == "fp32" or layout.pp > 1):
        return layout.model_copy(update={"zero": 1}), (
            "zero 0 -> 1: DeepSpeed runs bf16 without ZeRO with fp32 gradients or a pipeline through its "
            "BF16_Optimizer, which shards the optimizer states over data parallelism as ZeRO 1",)
    if layout.grad_dtype != half:
        return layout.model_copy(update={"grad_dtype": half}), (
            f"grad_dtype {layout.grad_dtype} -> {half}: without ZeRO DeepSpeed accumulates {layout.dtype} gradients "
            f"in {half}",)
    return layout, ()


def config_dict(ctx: ExportContext) -> dict[str, Any]:
    lay = ctx.layout
    config: dict[str, Any] = {
        "train_batch_size": lay.global_batch,
        "train_micro_batch_size_per_gpu": lay.micro_batch,
        "gradient_accumulation_steps": lay.global_batch // (lay.micro_batch * lay.dp),
    }
    if lay.dtype == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    else:  # bf16, and the bf16 base of fp8 training (Transformer Engine casts per GEMM)
        config["bf16"] = {"enabled": True}
    config["data_types"] = {"grad_accum_dtype": lay.grad_dtype}
    config["zero_optimization"] = {"stage": lay.zero, "overlap_comm": lay.overlap_grad_reduce,
                                   "contiguous_gradients": True}
    if lay.recompute == "full":
        config["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": False,
                                              "contiguous_memory_optimization": False}
    if lay.tp > 1:
        config["tensor_parallel"] = {"autotp_size": lay.tp}
    if lay.pp > 1:
        config["pipeline"] = {"stages": lay.pp}
    config["gradient_clipping"] = 1.0
    config["steps_per_print"] = 10
    config[PLANNER_KEY] = {
        "comment": "Written by planner; DeepSpeed ignores this key. 'layout' holds what DeepSpeed keys cannot "
                   "express; planner check reads it back where the config and the job are silent.",
        "prediction": prediction_lines(ctx),
        "model": ctx.model_id,
        "hardware": ctx.hardware_id,
        "gpus": lay.gpus,
        "layout": lay.model_dump(),
    }
    return config


def render(ctx: ExportContext) -> str:
    return json.dumps(config_dict(ctx), indent=2) + "\n"
