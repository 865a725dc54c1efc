"""A training layout's memory, time and throughput: `evaluate` on a grid, `estimate` for one layout.

`evaluate` looks at the stages that can be the heaviest: the first (most
micro-batches in flight, the embedding), the second (the first of the middle
stages, which get the remainder layers and hold the most in-flight micro-batches
among them) and the last (the LM head and the logits). Memory in flight and
layer counts only fall from stage 1 to stage p - 2, so the maximum over these
three is the maximum over all stages. When dense layers lead MoE ones, the stage
holding the first MoE layer and the next one join (see physics.stages.candidate_stages).
`estimate` also reports every stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from planner.errors import PlannerError
from planner.physics.kernels import fp8_attention_available, gemm_peak_flops, has_nvfp4_gemms
from planner.physics.linear_attention import mixer_period
from planner.physics.stages import candidate_stages, dualpipe_candidate_stages, layers_on_stage
from planner.specs.engine import EngineProfile, engine_or_default, engine_profile
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import OPTIMIZER_CODES, Layout, LayoutArrays
from planner.specs.model import ModelSpec
from planner.training.flops import step_flop
from planner.training.memory import (
    StageMemory,
    StageParams,
    loss_bytes_per_logit,
    model_state_bytes,
    reserve_bytes,
    shared_embedding_params,
    stage_activation_parts,
    stage_memory,
    stage_params,
)
from planner.training.rules import check_layout, violations
from planner.training.time import (
    StageTime,
    data_parallel_seconds,
    muon_optimizer_seconds,
    offload_step_seconds,
    optimizer_seconds,
    stage_time,
)

# Default share of device memory kept free on top of the explicit reserve (CUDA context, NCCL,
# fragmentation in memory.py): a margin for what no estimate sees (framework workspaces, memory
# spikes in the loss, uneven MoE routing). 5% of 80 GB is 4 GB.
DEFAULT_HEADROOM = 0.05
# The plausibility guard flags an estimate whose MFU exceeds the best published MFU for the chip and
# dtype (the profile's efficiency.best_published_mfu) by more than this share of it: 10%, about the
# model's in-sample error on the published sources (docs/validation.md) and the spread between
# revisions of the same published table (NeMo 24.07: 1,533 / 1,549 / 1,524 tokens/s). Above that the
# estimate is more likely missing a cost than beating every published run.
MFU_PLAUSIBILITY_MARGIN = 0.10


@dataclass(frozen=True)
class TrainingArrays:
    """Everything `evaluate` computes, one entry per candidate; every term named, SI units."""

    weights_bytes: np.ndarray
    gradients_bytes: np.ndarray
    optimizer_bytes: np.ndarray
    activations_bytes: np.ndarray
    other_bytes: np.ndarray
    peak_bytes: np.ndarray
    peak_stage: np.ndarray
    host_bytes: np.ndarray  # offloaded states and activations in host memory, per node
    host_capacity_bytes: float  # the node's host memory (inf when the profile does not say)
    offload_seconds: np.ndarray  # exposed GPU <-> host copies + the CPU optimizer step
    cpu_optimizer_seconds: np.ndarray  # the CPU optimizer step of offloaded states (inside optimizer_seconds)
    capacity_bytes: float
    usable_bytes: float
    fits: np.ndarray
    step_seconds: np.ndarray
    compute_seconds: np.ndarray
    recompute_seconds: np.ndarray
    communication_seconds: np.ndarray  # exposed, all kinds
    tp_comm_seconds: np.ndarray
    cp_comm_seconds: np.ndarray
    ep_comm_seconds: np.ndarray
    pp_comm_seconds: np.ndarray
    dp_comm_seconds: np.ndarray  # gradient sync after the last micro-batch + ZeRO-3 per-micro-batch traffic
    bubble_seconds: np.ndarray
    host_seconds: np.ndarray  # the GPU waiting for the host to issue kernels (physics.launch)
    optimizer_seconds: np.ndarray
    model_flop: np.ndarray
    hardware_flop: np.ndarray
    tokens_per_second: np.ndarray
    model_tflops_per_gpu: np.ndarray
    hardware_tflops_per_gpu: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    best_published_mfu: np.ndarray  # for the chip and dtype; nan where none is published
    implausible_mfu: np.ndarray  # mfu > best_published_mfu x (1 + MFU_PLAUSIBILITY_MARGIN)

    def take(self, index: np.ndarray) -> TrainingArrays:
        values = {
            f.name: (getattr(self, f.name)[index] if isinstance(getattr(self, f.name), np.ndarray) else getattr(self, f.name))
            for f in fields(self)
        }
        return TrainingArrays(**values)


# The weight-gradient share of a backward chunk, for DualPipe's bubble: DeepSeek-V3's measured chunk times on
# 2,048 H800, 1B 1.99 s and 1W 0.48 s (Insights into DeepSeek-V3, ISCA 2025, arXiv:2505.09343, Table 4).
WGRAD_SHARE_OF_BACKWARD = 0.48 / 1.99


def _dualpipe_memory(
    model: ModelSpec, lay: LayoutArrays, stages: np.ndarray, params: StageParams, mem: StageMemory,
    engine: EngineProfile,
) -> StageMemory:
    """Memory per rank under DualPipe (where lay.dualpipe): rank r holds stages r and p - 1 - r
    (deepseek-ai/DualPipe), so both stages' model states, and p + 1 chunk-micro-batches of activations in flight
    (DeepSeek-V3 technical report, Table 2), each the mean of its two stages' per micro-batch. The ranks holding
    the first and the last stage keep one embedding: the MTP modules' is the main model's (shared_embedding_params)."""
    mirror = lay.pp - 1 - stages
    mirror_params = stage_params(model, lay, mirror)
    mem_m = stage_memory(model, lay, mirror, mirror_params, engine)
    on = lay.dualpipe
    shared = np.where(on, shared_embedding_params(model, lay, stages, mirror), 0.0)
    shared_w, shared_g, shared_o = model_state_bytes(lay, StageParams(
        dense=shared, expert=np.zeros_like(shared), largest_layer_dense=np.zeros_like(shared),
        largest_layer_expert=np.zeros_like(shared), num_layers=np.zeros_like(shared), num_moe_layers=np.zeros_like(shared),
        ends=shared, lora=lay.lora_rank > 0), fp8_params_held=engine.optimizer.fp8_params_held)

    def both(a: np.ndarray, b: np.ndarray, less: np.ndarray | float = 0.0) -> np.ndarray:
        return np.asarray(np.where(on, a + b - less, a))

    # p + 1 chunk-micro-batches, each the mean of the two stages' per micro-batch, plus what each stage holds
    # once (the loss's logits, the MTP inputs); activation offload is not combined with DualPipe here.
    loss_bytes = loss_bytes_per_logit(engine, lay)
    copy = engine.kernels.fp8_proj_keeps_cast_input
    per_mb, once, working = stage_activation_parts(model, lay, stages, params, loss_bytes, copy)
    per_mb_m, once_m, working_m = stage_activation_parts(model, lay, mirror, mirror_params, loss_bytes, copy)
    activations = np.where(on, (lay.pp + 1) * (per_mb + per_mb_m) / 2 + once + once_m, mem.activations_bytes)
    reserve = np.where(on, reserve_bytes(lay, activations + np.maximum(working, working_m)), mem.reserve_bytes)
    return StageMemory(
        weights_bytes=both(mem.weights_bytes, mem_m.weights_bytes, shared_w),
        gradients_bytes=both(mem.gradients_bytes, mem_m.gradients_bytes, shared_g),
        optimizer_bytes=both(mem.optimizer_bytes, mem_m.optimizer_bytes, shared_o),
        activations_bytes=np.asarray(activations),
        buffers_bytes=np.asarray(np.maximum(mem.buffers_bytes, np.where(on, mem_m.buffers_bytes, 0.0))),
        reserve_bytes=np.asarray(reserve),
        params=both(mem.params, mem_m.params, shared),
        host_bytes=both(mem.host_bytes, mem_m.host_bytes),
    )


def _dualpipe_times(
    model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, stages: np.ndarray, times: StageTime,
    engine: EngineProfile,
) -> StageTime:
    """Time per rank under DualPipe: half the micro-batches run through each of the rank's two stages, so its
    micro-batch time is the mean of theirs."""
    mirror = lay.pp - 1 - stages
    times_m = stage_time(model, hw, lay, mirror, stage_params(model, lay, mirror), engine)

    def mean(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(np.where(lay.dualpipe, (a + b) / 2, a))

    return StageTime(**{f.name: mean(getattr(times, f.name), getattr(times_m, f.name)) for f in fields(times)})


class _StagePicker:
    """Takes, from a (k, ...) per-stage array, the entry at each candidate's chosen stage `index`.

    The k - 1 comparisons with `index` are made once and reused for every term picked. A term that does
    not depend on the stage may arrive without the stage axis (fewer dimensions than `index` has plus
    one) or with a stage axis of length 1; it is the same for every stage then.
    """

    def __init__(self, index: np.ndarray, stages: int) -> None:
        self.index = index
        self.masks = [index == k for k in range(stages - 1)]

    def __call__(self, per_stage: np.ndarray) -> np.ndarray:
        per_stage = np.asarray(per_stage)
        if per_stage.ndim <= self.index.ndim:
            return np.broadcast_to(per_stage, np.broadcast_shapes(per_stage.shape, self.index.shape))
        if per_stage.shape[0] == 1:
            return np.broadcast_to(per_stage[0], np.broadcast_shapes(per_stage.shape[1:], self.index.shape))
        picked: np.ndarray = per_stage[-1]
        for k in range(len(self.masks) - 1, -1, -1):
            picked = np.where(self.masks[k], per_stage[k], picked)
        return picked


def evaluate(
    model: ModelSpec,
    hw: HardwareProfile,
    lay: LayoutArrays,
    *,
    headroom: float = DEFAULT_HEADROOM,
    engine: EngineProfile | None = None,
) -> TrainingArrays:
    """Memory and time of every candidate in `lay` under `engine` (default: the default engine's profile;
    no rule checks: see rules.violations)."""
    engine = engine_or_default(engine)
    stages = candidate_stages(model.num_layers, model.num_dense_layers, lay.pp, mixer_period(model))
    if np.any(lay.dualpipe):  # the pair with the most layers can be the heaviest rank
        extra = dualpipe_candidate_stages(model.num_layers, lay.pp)
        shape = np.broadcast_shapes(stages.shape[1:], extra.shape[1:])
        stages = np.concatenate([np.broadcast_to(stages, (stages.shape[0], *shape)),
                                 np.broadcast_to(extra, (extra.shape[0], *shape))])
    params = stage_params(model, lay, stages)
    mem: StageMemory = stage_memory(model, lay, stages, params, engine)
    times: StageTime = stage_time(model, hw, lay, stages, params, engine)
    if np.any(lay.dualpipe):
        mem = _dualpipe_memory(model, lay, stages, params, mem, engine)
        times = _dualpipe_times(model, hw, lay, stages, times, engine)

    heaviest = _StagePicker(np.argmax(mem.total_bytes, axis=0), stages.shape[0])
    pick_mem = {
        name: heaviest(getattr(mem, name))
        for name in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "other_bytes", "total_bytes")
    }
    capacity = float(hw.accelerator.memory_bytes)
    usable = capacity * (1.0 - headroom)

    stage_total = times.total
    slowest = _StagePicker(np.argmax(stage_total, axis=0), stages.shape[0])
    t_stage = slowest(stage_total)
    m = lay.num_micro_batches.astype(float)
    v = lay.interleave.astype(float)
    bubble = (lay.pp - 1) / v * t_stage  # Narayanan et al. 2021, eq. (1)/(2): (p - 1)/v micro-batch slots idle
    # DualPipe: (p/2 - 1)(F&B + B - 3W) (DeepSeek-V3 technical report, Table 2), F&B = F + B of a chunk pair
    # run overlapped (t_stage), B the backward, W its weight-gradient part.
    backward = slowest(times.backward + times.recompute)
    dual_bubble = np.maximum(lay.pp / 2 - 1, 0) * (t_stage + backward - 3 * WGRAD_SHARE_OF_BACKWARD * backward)
    bubble = np.where(lay.dualpipe, dual_bubble, bubble)
    dp_exposed = np.max(data_parallel_seconds(hw, lay, params, times.backward, times.forward, engine), axis=0)
    step_seconds = optimizer_seconds(hw, lay, params)
    is_muon = lay.optimizer == OPTIMIZER_CODES["muon"]
    if np.any(is_muon):
        step_seconds = np.where(is_muon, muon_optimizer_seconds(model, hw, lay, params), step_seconds)
    gpu_optimizer = np.where(lay.offload_optimizer, 0.0, step_seconds)
    optimizer = np.max(gpu_optimizer, axis=0) * engine.optimizer.step_traffic_factor
    cpu_step, host_copies = offload_step_seconds(hw, lay, params, times.backward, engine)
    cpu_step, host_copies = np.max(cpu_step, axis=0), np.max(host_copies, axis=0)
    host_bytes = heaviest(mem.host_bytes) * np.minimum(hw.node.gpus_per_node, lay.gpus)
    host_capacity = float(hw.host.memory_bytes) if hw.host is not None else np.inf

    def slowest_part(name: str) -> np.ndarray:
        seconds: np.ndarray = m * slowest(getattr(times, name))
        return seconds

    compute = slowest_part("compute")
    comm_parts = {
        name: slowest_part(name) for name in ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "zero3_comm", "offload_comm")
    }
    dp_comm = comm_parts.pop("zero3_comm") + dp_exposed
    offload = comm_parts.pop("offload_comm") + host_copies + cpu_step
    # the copies count as communication; the CPU step is in the optimizer's time
    communication = sum(comm_parts.values()) + dp_comm + (offload - cpu_step)
    optimizer = optimizer + cpu_step + hw.efficiency.step_overhead_seconds
    host = slowest_part("host")
    step = compute + communication + host + bubble + optimizer

    flop = step_flop(model, lay)
    gpus = lay.gpus.astype(float)
    tokens = lay.global_batch * lay.seq_len
    peak = gemm_peak_flops(hw, lay)
    model_tflops = flop.model_flop / step / gpus / 1e12
    hardware_tflops = flop.hardware_flop / step / gpus / 1e12
    mfu = model_tflops * 1e12 / peak
    best = best_published_mfu(hw, lay)
    return TrainingArrays(
        weights_bytes=pick_mem["weights_bytes"],
        gradients_bytes=pick_mem["gradients_bytes"],
        optimizer_bytes=pick_mem["optimizer_bytes"],
        activations_bytes=pick_mem["activations_bytes"],
        other_bytes=pick_mem["other_bytes"],
        peak_bytes=pick_mem["total_bytes"],
        peak_stage=heaviest(stages),
        capacity_bytes=capacity,
        usable_bytes=usable,
        fits=(pick_mem["total_bytes"] <= usable) & (host_bytes <= host_capacity * (1.0 - headroom)),
        host_bytes=host_bytes,
        host_capacity_bytes=host_capacity,
        offload_seconds=offload,
        cpu_optimizer_seconds=cpu_step,
        step_seconds=step,
        compute_seconds=compute,
        recompute_seconds=slowest_part("recompute"),
        communication_seconds=communication,
        tp_comm_seconds=comm_parts["tp_comm"],
        cp_comm_seconds=comm_parts["cp_comm"],
        ep_comm_seconds=comm_parts["ep_comm"],
        pp_comm_seconds=comm_parts["pp_comm"],
        dp_comm_seconds=dp_comm,
        bubble_seconds=bubble,
        host_seconds=host,
        optimizer_seconds=optimizer,
        model_flop=flop.model_flop,
        hardware_flop=flop.hardware_flop,
        tokens_per_second=tokens / step,
        model_tflops_per_gpu=model_tflops,
        hardware_tflops_per_gpu=hardware_tflops,
        mfu=mfu,
        hfu=hardware_tflops * 1e12 / peak,
        best_published_mfu=best,
        implausible_mfu=np.nan_to_num(mfu - best * (1 + MFU_PLAUSIBILITY_MARGIN), nan=-1.0) > 0,
    )


def best_published_mfu(hw: HardwareProfile, lay: LayoutArrays) -> np.ndarray:
    """The profile's best published MFU for each candidate's GEMM dtype (nan where none is recorded)."""
    pub = hw.efficiency.best_published_mfu
    bf16 = pub.bf16 if pub is not None and pub.bf16 is not None else np.nan
    fp8 = pub.fp8 if pub is not None and pub.fp8 is not None else np.nan
    fp4 = pub.fp4 if pub is not None and pub.fp4 is not None else np.nan
    return np.where(lay.fp8, np.where(lay.fp4, fp4, fp8), bf16) * np.ones(np.shape(lay.fp8))


MEMORY_KEYS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "other_bytes", "total_bytes")


@dataclass(frozen=True)
class StageBreakdown:
    """Memory of one pipeline stage (bytes per GPU)."""

    stage: int
    layers: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    other_bytes: float
    total_bytes: float

    def to_json(self) -> dict[str, Any]:
        return {name: (getattr(self, name)) for name in ("stage", "layers", *MEMORY_KEYS)}


@dataclass(frozen=True)
class TrainingEstimate:
    """One layout's estimate: the grid result for it plus every stage's memory."""

    model: ModelSpec
    hardware: HardwareProfile
    layout: Layout
    headroom: float
    result: TrainingArrays  # length-1 arrays
    stages: tuple[StageBreakdown, ...]

    def scalar(self, name: str) -> float:
        value = getattr(self.result, name)
        return float(value[0]) if isinstance(value, np.ndarray) else float(value)

    @property
    def fits(self) -> bool:
        return bool(self.result.fits[0])

    @property
    def peak_stage(self) -> int:
        return int(self.result.peak_stage[0])

    @property
    def capacity_bytes(self) -> float:
        return self.result.capacity_bytes

    @property
    def usable_bytes(self) -> float:
        return self.result.usable_bytes

    def to_json(self) -> dict[str, Any]:
        peak = self.stages[self.peak_stage]
        config = self.layout.model_dump()
        config["gpus"] = self.layout.gpus
        config["num_micro_batches"] = self.layout.global_batch // (self.layout.dp * self.layout.micro_batch)
        memory = {name: getattr(peak, name) for name in MEMORY_KEYS}
        memory.update(capacity_bytes=self.capacity_bytes, usable_bytes=self.usable_bytes, peak_stage=self.peak_stage)
        host_capacity = self.result.host_capacity_bytes
        memory.update(host_bytes_per_node=self.scalar("host_bytes"),
                      host_capacity_bytes=None if not np.isfinite(host_capacity) else host_capacity)
        s = self.scalar
        return {
            "config": config,
            "memory": memory,
            "stages": [stage.to_json() for stage in self.stages],
            "fits": self.fits,
            "time": {
                "step_seconds": s("step_seconds"),
                "compute_seconds": s("compute_seconds"),
                "communication_seconds": s("communication_seconds"),
                "bubble_seconds": s("bubble_seconds"),
                "optimizer_seconds": s("optimizer_seconds"),
                "recompute_seconds": s("recompute_seconds"),
                "offload_seconds": s("offload_seconds"),
                "cpu_optimizer_seconds": s("cpu_optimizer_seconds"),
                "communication": {
                    "tensor_parallel_seconds": s("tp_comm_seconds"),
                    "context_parallel_seconds": s("cp_comm_seconds"),
                    "expert_parallel_seconds": s("ep_comm_seconds"),
                    "pipeline_p2p_seconds": s("pp_comm_seconds"),
                    "data_parallel_seconds": s("dp_comm_seconds"),
                },
            },
            "throughput": {
                "tokens_per_second": s("tokens_per_second"),
                "model_tflops_per_gpu": s("model_tflops_per_gpu"),
                "hardware_tflops_per_gpu": s("hardware_tflops_per_gpu"),
                "mfu": s("mfu"),
                "hfu": s("hfu"),
            },
            "plausibility": {
                "best_published_mfu": None if np.isnan(s("best_published_mfu")) else s("best_published_mfu"),
                "margin": MFU_PLAUSIBILITY_MARGIN,
                "implausible_mfu": bool(self.result.implausible_mfu[0]),
            },
            "flop": {"model_flop_per_step": s("model_flop"), "hardware_flop_per_step": s("hardware_flop")},
        }


def check_dtype(hw: HardwareProfile, dtype: str, fp8_recipe: str = "tensorwise", fp8_attention: bool = False,
                moe_fused_mlp: bool = False) -> None:
    """A compute dtype the chip has a peak for, else a PlannerError listing those it has; under fp4 a profile that
    measures the chip's NVFP4 GEMMs (efficiency.matmul_fp4); under fp8, an fp8
    recipe its tensor cores run (mxfp8 needs block-scaled fp8 MMA: accelerator.fp8_block_scaling), with FP8
    attention a profile that measures its speed for that scaling (efficiency.attention_fp8), and with the fused
    grouped MLP a chip its kernels are built for (accelerator.fused_grouped_mlp)."""
    peaks = hw.accelerator.peak_flops_per_s
    if dtype not in peaks:
        have = ", ".join(sorted(peaks))
        raise PlannerError(f"{hw.name} has no {dtype} peak (it has {have}); choose one of those dtypes")
    if dtype == "fp4" and not has_nvfp4_gemms(hw):
        raise PlannerError(f"{hw.name}'s profile measures no NVFP4 GEMM (efficiency.matmul_fp4): dtype fp4 needs the "
                           "plateau its fp4 GEMMs reach; choose fp8 or bf16, or add the measured fraction to a profile "
                           "of your own (docs/hardware.md)")
    if dtype == "fp8" and fp8_recipe == "mxfp8" and not hw.accelerator.fp8_block_scaling:
        raise PlannerError(f"{hw.name}'s fp8 tensor cores take no MX block scales: fp8_recipe mxfp8 needs a chip "
                           "with block-scaled fp8 (Blackwell); choose tensorwise, delayed or blockwise")
    if fp8_attention and not fp8_attention_available(hw, mxfp8=fp8_recipe == "mxfp8"):
        scaling = "MXFP8" if fp8_recipe == "mxfp8" else "per-tensor"
        raise PlannerError(f"{hw.name}'s profile measures no FP8 attention with {scaling} scales "
                           "(efficiency.attention_fp8); set fp8_attention false, or add the measured speed-up to a "
                           "profile of your own (docs/hardware.md)")
    if moe_fused_mlp and not hw.accelerator.fused_grouped_mlp:
        raise PlannerError(f"{hw.name} cannot run moe_fused_mlp: Transformer Engine's fused grouped MLP is built for "
                           "compute capability 10 only (B200, GB200, B300, GB300; accelerator.fused_grouped_mlp); set "
                           "moe_fused_mlp false")


def estimate(
    model: ModelSpec, hw: HardwareProfile, layout: Layout, *, headroom: float = DEFAULT_HEADROOM
) -> TrainingEstimate:
    """Validate `layout` and estimate it, reporting every pipeline stage."""
    return estimate_many(model, hw, [layout], headroom=headroom)[0]


def estimate_many(
    model: ModelSpec, hw: HardwareProfile, layouts: Sequence[Layout], *, headroom: float = DEFAULT_HEADROOM
) -> list[TrainingEstimate]:
    """`estimate` of each layout, in order, costed together as one grid (one `evaluate` and one `stage_memory`
    over every layout's stages) where they share an engine; the numbers are the same as one at a time."""
    if not 0.0 <= headroom < 1.0:
        raise PlannerError(f"headroom({headroom}) must be in [0, 1)")
    broken = _broken_layouts(model, layouts)
    for layout, bad in zip(layouts, broken, strict=True):  # each layout's checks in turn: the first bad one's error
        if bad:
            check_layout(model, layout, layout.gpus)
        check_dtype(hw, layout.dtype, layout.fp8_recipe, layout.fp8_attention, layout.moe_fused_mlp)
    by_engine: dict[str, list[int]] = {}
    for i, layout in enumerate(layouts):
        by_engine.setdefault(layout.engine, []).append(i)
    out: list[TrainingEstimate | None] = [None] * len(layouts)
    for name, members in by_engine.items():
        group = [layouts[i] for i in members]
        for i, est in zip(members, _estimate_group(model, hw, group, headroom, engine_profile(name)), strict=True):
            out[i] = est
    return [est for est in out if est is not None]


def _broken_layouts(model: ModelSpec, layouts: Sequence[Layout]) -> np.ndarray:
    """Which layouts break a rule: the rules over one grid per (engine, gpus), the same masks `check_layout` reads
    (`to_arrays` is `from_layouts`), whose one-layout check then runs only where a rule is broken, for its message.
    One check per layout cost a search's `--format json --top 30000` twenty seconds."""
    groups: dict[tuple[str, int], list[int]] = {}
    for i, layout in enumerate(layouts):
        groups.setdefault((layout.engine, layout.gpus), []).append(i)
    broken = np.zeros(len(layouts), dtype=bool)
    for (name, gpus), members in groups.items():
        masks = violations(model, LayoutArrays.from_layouts([layouts[i] for i in members]), gpus, engine_profile(name))
        broken[members] = np.logical_or.reduce(list(masks.values()))
    return broken


def _estimate_group(
    model: ModelSpec, hw: HardwareProfile, layouts: list[Layout], headroom: float, engine: EngineProfile
) -> list[TrainingEstimate]:
    """Layouts of one engine, checked already: one grid, then each layout's result and stage rows taken out."""
    lay = LayoutArrays.from_layouts(layouts)
    result = evaluate(model, hw, lay, headroom=headroom, engine=engine)
    # (deepest pp, n): stage i of each layout, clipped to its last stage (rows past it repeat it, unread)
    all_stages = np.minimum(np.arange(max(layout.pp for layout in layouts))[:, None], lay.pp - 1)
    mem = stage_memory(model, lay, all_stages, engine=engine)
    layers = layers_on_stage(model.num_layers, lay.pp, all_stages)
    if np.any(lay.dualpipe):  # one row per rank: its stages r and p - 1 - r together
        mem = _dualpipe_memory(model, lay, all_stages, stage_params(model, lay, all_stages), mem, engine)
        layers = layers + np.where(lay.dualpipe, layers_on_stage(model.num_layers, lay.pp, lay.pp - 1 - all_stages), 0)
    columns = {name: np.broadcast_to(getattr(mem, name), all_stages.shape) for name in MEMORY_KEYS}
    estimates = []
    for n, layout in enumerate(layouts):
        stages = tuple(
            StageBreakdown(stage=i, layers=int(layers[i, n]), **{name: float(columns[name][i, n]) for name in MEMORY_KEYS})
            for i in range(layout.pp)
        )
        estimates.append(TrainingEstimate(model=model, hardware=hw, layout=layout, headroom=headroom,
                                          result=result.take(np.array([n])), stages=stages))
    return estimates
