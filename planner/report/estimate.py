"""Rendering of one training estimate: memory per stage as bars against capacity, time breakdown."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text

from planner.report.tables import (
    human_bytes,
    human_count,
    human_seconds,
    memory_bar,
    percent,
    render,
    simple_table,
)
from planner.training.estimate import MFU_PLAUSIBILITY_MARGIN, TrainingEstimate

MEMORY_PARTS = (
    ("weights", "weights_bytes"),
    ("gradients", "gradients_bytes"),
    ("optimizer", "optimizer_bytes"),
    ("activations", "activations_bytes"),
    ("other", "other_bytes"),
)


def _layout_line(est: TrainingEstimate) -> str:
    lay = est.layout
    parts = [f"tp {lay.tp}", f"pp {lay.pp}", f"cp {lay.cp}", f"dp {lay.dp}"]
    if lay.ep > 1:
        parts.append(f"ep {lay.ep}")
    parts += [f"zero {lay.zero}", f"sp {'on' if lay.sequence_parallel else 'off'}", f"recompute {lay.recompute}",
              f"micro-batch {lay.micro_batch}", f"global batch {lay.global_batch}", f"seq {lay.seq_len}"]
    if lay.interleave > 1:
        parts.append(f"interleave {lay.interleave}")
        if lay.microbatch_group_size is not None:
            parts.append(f"micro-batch groups of {lay.microbatch_group_size}")
    parts.append(f"fp8 ({lay.fp8_recipe})" if lay.dtype == "fp8" else lay.dtype)
    if lay.fp8_param_gather:
        parts.append(f"{lay.dtype} param gather")
    if lay.fp8_attention:
        parts.append("fp8 attention")
    return ", ".join(parts + _moe_parts(est))


def _moe_parts(est: TrainingEstimate) -> list[str]:
    """The MoE settings of a MoE model (expert TP, dispatcher, overlaps, token drop), and the CUDA graphs, optimizer,
    optimizer-state precisions and MTP layers where they differ from the defaults."""
    lay, parts = est.layout, []
    if est.model.moe is not None:
        parts += [f"etp {lay.expert_tp}", f"dispatcher {lay.moe_dispatcher}",
                  f"ep-overlap {'on' if lay.moe_ep_overlap else 'off'}"]
        if lay.resolved_moe_delay_wgrad:
            parts.append("delayed expert wgrad")
        if lay.moe_shared_expert_overlap:
            parts.append("shared-expert overlap")
        if lay.moe_fused_mlp:
            parts.append("fused grouped MLP")
        parts.append("dropless" if lay.moe_capacity_factor is None else f"capacity {lay.moe_capacity_factor:g}")
        if lay.moe_load_imbalance != 1.0:
            parts.append(f"load imbalance {lay.moe_load_imbalance:g}")
    if lay.cuda_graph_scope:
        parts.append(f"cuda graphs {'+'.join(lay.cuda_graph_scope)}")
    if lay.optimizer == "muon":
        split = "" if lay.muon_split_qkv else ", qkv whole"
        parts.append(f"muon ({lay.muon_ns_steps} Newton-Schulz steps, tp {lay.muon_tp_mode}{split})")
    elif lay.optimizer != "adam":
        parts.append(lay.optimizer)
    if lay.optimizer_state_dtype != "fp32" or lay.master_weights_dtype != "fp32":
        parts.append(f"moments {lay.optimizer_state_dtype}, master {lay.master_weights_dtype}")
    if lay.lora_rank is not None:
        where = "attention" if lay.lora_targets == "attention" else "all linear layers"
        parts.append(f"LoRA rank {lay.lora_rank} on {where} (base weights frozen)")
    mtp = est.model.mtp_layers if lay.mtp_layers is None else lay.mtp_layers
    if mtp:
        parts.append(f"mtp {mtp}")
    return parts


def _stages_table(est: TrainingEstimate) -> RenderableType:
    distinct = {tuple(round(getattr(s, key)) for _, key in MEMORY_PARTS) for s in est.stages}
    shown = est.stages if len(distinct) > 1 else est.stages[:1]
    headers = ["stage", "layers", *(name for name, _ in MEMORY_PARTS), "total vs capacity"]
    rows = []
    for stage in shown:
        label = str(stage.stage) if len(shown) > 1 else ("all" if est.layout.pp > 1 else "0")
        if stage.stage == est.peak_stage and len(shown) > 1:
            label += " *"
        rows.append([
            label,
            str(stage.layers),
            *(human_bytes(getattr(stage, key)) for _, key in MEMORY_PARTS),
            memory_bar(stage.total_bytes, est.capacity_bytes, est.usable_bytes, width=20),
        ])
    caption = "* the most loaded stage decides whether the layout fits" if len(shown) > 1 else None
    return simple_table("Memory per GPU", headers, rows, right=headers[1:-1], caption=caption)


def _time_table(est: TrainingEstimate) -> RenderableType:
    step = est.scalar("step_seconds")
    parts = [
        ("compute (incl. recompute)", est.scalar("compute_seconds")),
        ("  of which recompute", est.scalar("recompute_seconds")),
        ("tensor-parallel comm (exposed)", est.scalar("tp_comm_seconds")),
        ("context-parallel comm (exposed)", est.scalar("cp_comm_seconds")),
        ("expert-parallel all-to-all", est.scalar("ep_comm_seconds")),
        ("pipeline point-to-point", est.scalar("pp_comm_seconds")),
        ("data-parallel / ZeRO comm (exposed)", est.scalar("dp_comm_seconds")),
        ("host copies, offload (exposed)", est.scalar("offload_seconds") - est.scalar("cpu_optimizer_seconds")),
        ("waiting for host kernel launches", est.scalar("host_seconds")),
        ("pipeline bubble", est.scalar("bubble_seconds")),
        ("optimizer + fixed step overhead", est.scalar("optimizer_seconds")),
        ("  of which CPU optimizer (offload)", est.scalar("cpu_optimizer_seconds")),
    ]
    rows = [[name, human_seconds(value), percent(value / step)] for name, value in parts if value > 0 or name.startswith("compute")]
    rows.append(["step", human_seconds(step), "100.0%"])
    return simple_table("Time per step", ["part", "seconds", "share"], rows, right=["seconds", "share"])


def render_estimate(est: TrainingEstimate, model_id: str, hardware_id: str) -> str:
    verdict = Text("fits", style="bold green") if est.fits else Text("does not fit", style="bold red")
    peak = est.stages[est.peak_stage]
    head = Text(f"{model_id} on {est.layout.gpus} x {hardware_id}: {_layout_line(est)}\n")
    head.append("verdict: ")
    head.append(verdict)
    head.append(
        f" (peak {human_bytes(peak.total_bytes)} on stage {est.peak_stage}, usable {human_bytes(est.usable_bytes)} of "
        f"{human_bytes(est.capacity_bytes)} with {percent(est.headroom)} headroom)"
    )
    s = est.scalar
    if s("host_bytes") > 0:
        capacity = est.result.host_capacity_bytes
        head.append(
            f"\nhost memory (offload): {human_bytes(s('host_bytes'))} per node"
            + (f" of {human_bytes(capacity)}" if capacity != float("inf") else "")
            + f"; CPU optimizer step {human_seconds(s('cpu_optimizer_seconds'))}, engine {est.layout.engine}"
        )
    throughput = Text(
        f"throughput: {human_count(s('tokens_per_second'))} tokens/s, {s('model_tflops_per_gpu'):.0f} model TFLOP/s per GPU "
        f"(MFU {percent(s('mfu'))}), {s('hardware_tflops_per_gpu'):.0f} hardware TFLOP/s (HFU {percent(s('hfu'))})"
    )
    if bool(est.result.implausible_mfu[0]):
        throughput.append(
            f"\nimplausible: MFU {percent(s('mfu'))} is more than {percent(MFU_PLAUSIBILITY_MARGIN)} above the best "
            f"published {percent(s('best_published_mfu'))} for this chip and dtype; the estimate is probably missing a cost",
            style="bold yellow",
        )
    return render(head, _stages_table(est), _time_table(est), throughput)
