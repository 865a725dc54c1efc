"""Layout -> torchtitan TOML job config (the `--job.config_file` format of torchtitan v0.1 - v0.2).

torchtitan fixes some settings itself, so the layout is first mapped onto what it runs
(`engine_layout`): FSDP (ZeRO 3) or DDP (ZeRO 0) only, fp32 gradients, sequence parallelism
whenever tp > 1, bf16 (or fp8 through the float8 converter), Adam, flash attention, overlapped
gradient reduction. Each change is noted in the header.
"""

from __future__ import annotations

import json
from typing import Any

from planner.errors import PlannerError
from planner.exporters.common import ExportContext, prediction_lines
from planner.importers.torchtitan import flavor_for
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec


def _layers_per_stage(model: ModelSpec, lay: Layout) -> int | None:
    """pipeline_parallel_layers_per_stage giving pp x interleave virtual stages (torchtitan counts the embedding
    and the output as one layer each); None when torchtitan's default (2 stages per rank) already does."""
    if lay.interleave == 2:
        return None
    stages = lay.pp * lay.interleave
    effective = model.num_layers + 2
    per = -(-effective // stages)
    if -(-effective // per) != stages:
        raise PlannerError(f"torchtitan cannot split {model.num_layers} layers into {stages} virtual stages; "
                           "choose another interleave")
    return per


def engine_layout(model: ModelSpec, layout: Layout) -> tuple[Layout, tuple[str, ...]]:
    """The layout torchtitan would run for this one, and a note per change."""
    if layout.dtype == "fp16":
        raise PlannerError("torchtitan trains in bf16 (or fp8), not fp16; use dtype bf16")
    if layout.optimizer != "adam":
        raise PlannerError(f"torchtitan's optimizers are Adam/AdamW; '{layout.optimizer}' cannot be exported")
    changes: dict[str, Any] = {}
    notes: list[str] = []
    sharded = (layout.zero > 0 and layout.dp > 1) or layout.cp > 1  # torchtitan wraps CP in FSDP
    target = 3 if sharded else 0
    if layout.zero != target:
        changes["zero"] = target
        notes.append(f"zero {layout.zero} -> {target}: torchtitan shards with FSDP over dp x cp, or replicates "
                     "with DDP")
    if layout.grad_dtype != "fp32":
        changes["grad_dtype"] = "fp32"
        notes.append(f"grad_dtype {layout.grad_dtype} -> fp32: torchtitan reduces and keeps gradients in fp32")
    if layout.sequence_parallel != (layout.tp > 1):
        changes["sequence_parallel"] = layout.tp > 1
        notes.append("sequence_parallel follows tp: torchtitan's tensor-parallel plans shard the sequence")
    if not layout.overlap_grad_reduce:
        changes["overlap_grad_reduce"] = True
        notes.append("overlap_grad_reduce -> true: FSDP/DDP overlap the reduction with backward")
    if layout.pp == 1 and layout.schedule != "1f1b":
        changes["schedule"] = "1f1b"  # one stage: no pipeline schedule (torchtitan reads none back)
    if not layout.flash_attention:
        changes["flash_attention"] = True
        notes.append("flash_attention -> true: torchtitan uses fused SDPA/flex attention")
    rl = layout.recompute_layers_per_stage
    if rl is not None:
        per_stage = -(-model.num_layers // layout.pp)
        if per_stage % rl or per_stage // rl < 2:
            changes["recompute_layers_per_stage"] = None
            notes.append(f"recompute of {rl} layers per stage -> all layers: torchtitan checkpoints every n-th layer")
    mapped = layout.model_copy(update=changes) if changes else layout
    if mapped.interleave > 1:
        _layers_per_stage(model, mapped)
    return mapped, tuple(notes)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def tables(ctx: ExportContext) -> dict[str, dict[str, Any]]:
    lay, model = ctx.layout, ctx.model
    out: dict[str, dict[str, Any]] = {"job": {"description": f"{ctx.model_id} on {lay.gpus} GPUs (planner export)"}}
    named = flavor_for(ctx.model_id)
    out["model"] = {"name": named[0], "flavor": named[1]} if named else {}
    if lay.dtype == "fp8":
        out["model"]["converters"] = ["quantize.linear.float8"]
    training: dict[str, Any] = {"seq_len": lay.seq_len, "global_batch_size": lay.global_batch,
                                "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32"}
    training["local_batch_size"] = lay.micro_batch if lay.pp == 1 else lay.global_batch // lay.dp
    out["training"] = training
    fsdp = lay.zero == 3
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": 1 if fsdp else lay.dp,
        "data_parallel_shard_degree": lay.dp if fsdp else 1,
        "tensor_parallel_degree": lay.tp,
        "pipeline_parallel_degree": lay.pp,
        "context_parallel_degree": lay.cp,
    }
    if lay.ep > 1:
        parallelism["expert_parallel_degree"] = lay.ep
    if lay.overlap_tp_comm:
        parallelism["enable_async_tensor_parallel"] = True
    if lay.pp > 1:
        parallelism["pipeline_parallel_schedule"] = (
            "Interleaved1F1B" if lay.interleave > 1 else ("GPipe" if lay.schedule == "gpipe" else "1F1B"))
        parallelism["pipeline_parallel_microbatch_size"] = lay.micro_batch
        per = _layers_per_stage(model, lay) if lay.interleave > 1 else None
        if per is not None:
            parallelism["pipeline_parallel_layers_per_stage"] = per
    out["parallelism"] = parallelism
    ac: dict[str, Any] = {"mode": lay.recompute}
    if lay.recompute == "selective":
        ac["selective_ac_option"] = "op"
    elif lay.recompute == "full" and lay.recompute_layers_per_stage is not None:
        per_stage = -(-model.num_layers // lay.pp)
        ac = {"mode": "selective", "selective_ac_option": str(per_stage // lay.recompute_layers_per_stage)}
    out["activation_checkpoint"] = ac
    return out


def render(ctx: ExportContext) -> str:
    lines = [f"# {line}" for line in prediction_lines(ctx)]
    lines.append(f"# Run: NGPU={min(ctx.layout.gpus, ctx.hardware.node.gpus_per_node)} CONFIG_FILE=<this file> "
                 "./run_train.sh (on each node)")
    if flavor_for(ctx.model_id) is None:
        lines.append(f"# Note: torchtitan has no flavor for '{ctx.model_id}'; set [model] name and flavor, and pass "
                     f"--model {ctx.model_id} to planner check.")
    for name, table in tables(ctx).items():
        lines += ["", f"[{name}]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"
