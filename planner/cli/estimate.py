"""`planner estimate`: one training layout's memory per stage, time breakdown and throughput."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from planner.cli import cli
from planner.cli.options import (
    HEADROOM,
    Count,
    count,
    echo_json,
    format_option,
    fp8_attention_option,
    fp8_param_gather_option,
    hardware_option,
    model_option,
    moe_layout_options,
    profile_option,
    training_precision_options,
    warn_if_far,
    with_profile,
)
from planner.engines.load import load_hardware, load_model
from planner.training.estimate import DEFAULT_HEADROOM, estimate
from planner.training.rules import resolve_layout


@cli.command("estimate")
@model_option()
@hardware_option()
@profile_option()
@click.option("--gpus", type=count("gpus"), required=True, help="GPUs in the job (= dp x tp x pp x cp).")
@click.option("--tp", type=count("tp"), default=1, show_default=True, help="Tensor-parallel degree.")
@click.option("--pp", type=count("pp"), default=1, show_default=True, help="Pipeline-parallel degree.")
@click.option("--cp", type=count("cp"), default=1, show_default=True, help="Context-parallel degree.")
@click.option("--dp", type=count("dp"), default=None, help="Data-parallel degree  [default: gpus / (tp pp cp)]")
@click.option("--ep", type=count("ep"), default=1, show_default=True, help="Expert-parallel degree (MoE).")
@click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True,
              help="ZeRO stage: 1 optimizer, 2 +gradients, 3 +parameters (FSDP).")
@click.option("--sequence-parallel/--no-sequence-parallel", default=None,
              help="Megatron sequence parallelism  [default: on when tp > 1]")
@click.option("--recompute", type=click.Choice(["none", "selective", "full", "op"]), default="none",
              show_default=True, help="Activation recomputation (op: torchtitan op-level selective AC).")
@click.option("--recompute-layers", type=count("recompute_layers"), default=None,
              help="With --recompute full: layers per stage recomputed (Megatron 'block').")
@click.option("--micro-batch", type=count("micro_batch"), default=1, show_default=True, help="Sequences per micro-batch.")
@click.option("--global-batch", type=count("global_batch"), required=True, help="Sequences per optimizer step.")
@click.option("--seq-len", type=count("seq_len"), required=True, help="Tokens per sequence.")
@click.option("--interleave", type=count("interleave"), default=1, show_default=True,
              help="Virtual pipeline stages per rank (interleaved 1F1B).")
@click.option("--microbatch-group-size", type=count("microbatch_group_size"), default=None,
              help="With --interleave: micro-batches each virtual stage runs in a row (Megatron "
              "--microbatch-group-size-per-virtual-pipeline-stage)  [default: pp]")
@click.option("--schedule", type=click.Choice(["1f1b", "gpipe"]), default="1f1b", show_default=True,
              help="Pipeline schedule.")
@training_precision_options
@fp8_param_gather_option()
@fp8_attention_option()
@click.option("--activation-input-fp8/--no-activation-input-fp8", default=False, show_default=True,
              help="Keep the SwiGLU's input (fc1's output) for the backward in fp8 (Megatron "
              "--activation-func-fp8-input-store; DeepSeek-V3's framework also under moe_act recompute).")
@click.option("--offload-optimizer/--no-offload-optimizer", default=False, show_default=True,
              help="Optimizer states and their step on the CPU (ZeRO-Offload, FSDP CPUOffload).")
@click.option("--offload-params/--no-offload-params", default=False, show_default=True,
              help="Parameter shards on the host (ZeRO-Infinity, FSDP CPUOffload; needs --zero 3).")
@click.option("--cpu-optimizer", type=click.Choice(["fused", "torch"]), default=None,
              help="CPU Adam of offloaded states: fused (DeepSpeedCPUAdam) or torch  [default: the engine's]")
@click.option("--offload-activation-layers", type=Count("layers", minimum=0), default=0, show_default=True,
              help="Layers per stage whose activations go to the host (Megatron-Core --cpu-offloading-num-layers).")
@click.option("--shard-group", type=count("shard_group"), default=None,
              help="Hybrid sharding (HSDP): ZeRO shards over groups of this many dp x cp ranks, replicas across.")
@click.option("--recompute-modules", default=None, metavar="LIST",
              help="With --recompute selective: Megatron --recompute-modules, comma list (core_attn, mlp, moe_act, "
              "layernorm, moe, shared_experts, mla_up_proj).")
@moe_layout_options
@click.option("--headroom", type=HEADROOM, default=DEFAULT_HEADROOM, show_default=True,
              help="Share of device memory kept free (fits = peak <= capacity x (1 - headroom)).")
@format_option()
def estimate_command(model_ref: str, hardware_ref: str, profile_path: Path | None, gpus: int, headroom: float, fmt: str,
                     sequence_parallel: bool | None, recompute_layers: int | None, **fields: Any) -> None:
    """Estimate one training layout: memory per GPU for every pipeline stage, step time, MFU.

    Exit code 0 whether or not it fits (use 'planner check' to gate CI); 2 on bad input.

    \b
    Example:
      planner estimate --model llama-3.1-70b --hardware h100-sxm --gpus 64 \\
          --tp 8 --pp 4 --zero 1 --micro-batch 1 --global-batch 256 --seq-len 8192
    """
    model = load_model(model_ref)
    hardware, overlay = with_profile(load_hardware(hardware_ref), profile_path)
    fields["flash_attention"] = fields.pop("flash_attention")
    fields["overlap_tp_comm"] = bool(fields.pop("tp_comm_overlap"))  # off unless asked, as Megatron-LM's default
    fields["compile"] = fields.pop("compile_")
    modules = fields.pop("recompute_modules")
    if modules is not None:
        fields["recompute_modules"] = tuple(m.strip() for m in modules.split(",") if m.strip())
    if sequence_parallel is None:
        sequence_parallel = fields["tp"] > 1
    layout = resolve_layout(model.spec, gpus, sequence_parallel=sequence_parallel,
                            recompute_layers_per_stage=recompute_layers, **fields)
    result = estimate(model.spec, hardware.spec, layout, headroom=headroom)
    warn_if_far(overlay, model.spec, layout)
    if fmt == "json":
        data = result.to_json()
        echo_json({"model": model.id, "hardware": hardware.id, **data})
        return
    from planner.report.estimate import render_estimate

    click.echo(render_estimate(result, model.id, hardware.id), nl=False)
