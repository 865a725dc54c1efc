"""The search space: every candidate layout of a problem as one broadcast-shaped `LayoutArrays`.

The grid has five axes (AXES): the structural rows (tp, pp, cp, dp, etp, ep, interleave; only the
combinations that make a layout), then zero, sequence parallelism, recompute and micro-batch. Each field
carries only its own axis (tp has shape (S, 1, 1, 1, 1), zero (1, Z, 1, 1, 1), the batch and precisions
(1, 1, 1, 1, 1)), so the cost model computes a term once per distinct value of the fields it reads, and
the grid is built with numpy alone (meshgrid, repeat, boolean masks), with no loop per candidate.

The space is a product of per-axis value lists, pruned only where a combination
cannot be a layout at all or where a default prunes it (documented in docs/search.md):

- tp: divisors of the attention-head count, at most `gpus` (cross-node TP is kept;
  the communication model prices it);
- pp: divisors of `gpus` up to min(num_layers, gpus); uneven layer splits are fine;
- cp: 1 and powers of two up to CP_CAP with seq_len % (2 cp) == 0, and cp > 1 only
  when seq_len >= CP_MIN_SEQ_LEN;
- dp = gpus / (tp * pp * cp); combinations where tp * pp * cp does not divide gpus
  are not layouts and are left out;
- etp (MoE only; expert tensor parallelism): tp, and 1 where tp > 1 (MoE parallel folding: the expert
  layers run without TP and their EP group spans the tp x dp ranks, as Megatron's recipes for
  DeepSeek-V3 and Qwen3-235B-A22B do) where the engine runs an expert TP apart from tp; dense models: tp;
- ep (MoE only): divisors of num_experts with ep * etp dividing tp * dp * cp (with etp = tp: ep divides
  dp * cp);
- interleave: 1, and v > 1 where pp > 1 and the layers split into equal virtual chunks: num_layers % (pp * v)
  == 0, or (num_layers + 2) % (pp * v) == 0 with the embedding and the loss counted as a layer each; for an
  engine that names each chunk's layers (Megatron's --pipeline-model-parallel-layout), also v in
  UNEVEN_VIRTUAL_STAGES wherever each virtual stage gets a pipeline unit;
- zero 0-3, recompute none/selective/full, sequence parallel on/off (on only with tp > 1);
- micro_batch: divisors of global_batch up to MICRO_BATCH_CAP; those that do not divide
  global_batch / dp stay in the grid and are rejected as `batch_not_divisible`.

The defaults offer only what the problem's engine can run (its profile's `schedules`: no tp,
pp, cp, ep, interleaving, sequence parallelism, ZeRO stage or recompute mode it lacks);
combinations across axes it cannot run (DeepSpeed's pipeline with ZeRO-2/3) are rejected by
the engine rules (training.rules.ENGINE_RULES) with their own reason codes.

A filter replaces an axis's default list by the values given; values the defaults would
have pruned are then kept, so the rules can say why they fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import get_args

import numpy as np

from planner.errors import PlannerError
from planner.physics.stages import pipeline_units_per_rank
from planner.specs.engine import (
    DEFAULT_ENGINE,
    ENGINE_PROFILES,
    AttentionKernel,
    EngineProfile,
    attention_kernel_run,
    clamp_fused,
    engine_profile,
)
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import (
    DISPATCHER_CODES,
    FP8_RECIPE_CODES,
    LORA_TARGET_CODES,
    LORA_TARGETS,
    MAX_MOE_LOAD_IMBALANCE,
    MUON_NS_STEPS_DEFAULT,
    MUON_TP_MODE_CODES,
    OPTIMIZER_CODES,
    OPTIMIZER_STATE_BYTES_PER_PARAM,
    QUANTIZED_DTYPES,
    RECOMPUTE_CODES,
    Fp8RecipeCode,
    Layout,
    LayoutArrays,
    MomentsDtype,
    StateDtype,
    Zero,
    delay_wgrad_default,
    optimizer_state_bytes,
    recompute_module_mask,
)
from planner.specs.model import ModelSpec

MICRO_BATCH_CAP = 16  # larger micro-batches rarely help and multiply the space; pass --micro-batch to go higher
CP_CAP = 16  # context parallelism beyond 16 ranks is for sequences far longer than training recipes use
CP_MIN_SEQ_LEN = 8192  # below this, context parallelism only adds traffic; pass --cp to try it anyway

GRAD_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}
SCHEDULES: tuple[str, ...] = ("1f1b", "gpipe", "dualpipe")  # planner.specs.layout.Schedule


def engine_moe_defaults(profile: EngineProfile) -> tuple[str, bool]:
    """The token dispatcher and expert all-to-all overlap an engine runs when its config names none (its
    profile's moe.default_dispatcher and moe.default_ep_overlap, with their sources there)."""
    return profile.moe.default_dispatcher, profile.moe.default_ep_overlap


def search_dispatcher(profile: EngineProfile, hw: HardwareProfile, ep_overlap: bool = False) -> str:
    """The token dispatcher a search assumes where the user names none: the engine's two-tier dispatcher -
    HybridEP on NVLink domains larger than an 8-GPU node (NVL72), DeepEP otherwise - where it has one,
    since a search ranks layouts whose EP groups cross NVLink domains, and there NCCL's all-to-all or an
    all-gather is the dispatcher the engines' own guides advise against (Megatron-Core MoE README @ d98e8a64:
    flex with DeepEP for cross-node EP, HybridEP for GB200 NVL72; the DeepSeek-V3 report Sec. 3.2.2). Else the
    engine's default. With the expert all-to-all overlap asked for, only the dispatchers the engine overlaps
    with (moe.ep_overlap_dispatchers) are chosen from."""
    can = profile.moe.dispatchers
    if ep_overlap:
        can = tuple(d for d in can if d in profile.moe.ep_overlap_dispatchers)
    if "hybridep" in can and hw.node.gpus_per_node > 8:
        return "hybridep"
    for name in ("deepep", "hybridep"):
        if name in can:
            return name
    default = profile.moe.default_dispatcher
    return default if default in can or not can else can[0]


@dataclass(frozen=True)
class Problem:
    """What is fixed in a search: the cluster size, the batch, and the layout-independent training options
    (precisions, optimizer, attention kernel, communication overlap), with `Layout`'s defaults."""

    gpus: int
    global_batch: int
    seq_len: int
    dtype: str = "bf16"
    grad_dtype: str | None = None  # None: the engine's (EngineProfile.optimizer.default_grad_dtype)
    flash_attention: bool = True
    optimizer: str = "adam"
    overlap_grad_reduce: bool = True
    overlap_tp_comm: bool | None = None  # None: the engine's overlap where it has one (schedules.tp_comm_overlap)
    engine: str = DEFAULT_ENGINE
    compile: bool = False
    optimizer_state_dtype: str | None = None  # Adam's moments (Layout.optimizer_state_dtype); None: the engine's
    master_weights_dtype: str | None = None  # Layout.master_weights_dtype; None: the engine's
    schedule: str = "1f1b"  # Layout.schedule: 1f1b, gpipe or dualpipe, for every candidate
    moe_dispatcher: str | None = None  # None: the engine's on a MoE model, Layout's on a dense one (for_model)
    moe_ep_overlap: bool | None = None  # likewise
    # Layout.moe_delay_wgrad for every candidate: None = with the overlap (or DualPipe) only; True without the overlap
    # is Megatron-Core's overlap_dispatch_backward_with_experts_wgrad (engines whose moe.dispatch_wgrad_overlap is true)
    moe_delay_wgrad: bool | None = None
    moe_load_imbalance: float = 1.0  # Layout.moe_load_imbalance of every candidate (dropless routing's busiest rank)
    fp8_param_gather: bool = False  # Layout.fp8_param_gather on every candidate with ZeRO >= 1 (Megatron engines)
    attention_kernel: AttentionKernel | None = None  # Layout.attention_kernel for every candidate; None: the engine's
    fp8_recipe: str = "tensorwise"  # Layout.fp8_recipe for every candidate (with dtype fp8)
    fp8_attention: bool = False  # Layout.fp8_attention for every candidate (with dtype fp8, engines that run it)
    moe_fused_mlp: bool = False  # Layout.moe_fused_mlp for every candidate (MXFP8 MoE, engines that run it)
    muon_ns_steps: int = MUON_NS_STEPS_DEFAULT  # Layout.muon_ns_steps (optimizer muon)
    muon_tp_mode: str = "duplicated"  # Layout.muon_tp_mode (optimizer muon)
    muon_split_qkv: bool = True  # Layout.muon_split_qkv (optimizer muon)
    lora_rank: int | None = None  # Layout.lora_rank of every candidate (LoRA fine-tuning)
    lora_targets: str = "all_linear"  # Layout.lora_targets (with lora_rank)

    def __post_init__(self) -> None:
        profile = engine_profile(self.engine)  # a PlannerError naming the engines there are
        if self.grad_dtype is None:
            object.__setattr__(self, "grad_dtype", profile.optimizer.default_grad_dtype)
        for name in ("optimizer_state_dtype", "master_weights_dtype"):  # Adam's; SGD keeps fp32 (no moments)
            if getattr(self, name) is None:
                default = profile.optimizer.default_state_dtype if self.optimizer == "adam" else "fp32"
                object.__setattr__(self, name, default)
        if self.overlap_tp_comm is None:
            object.__setattr__(self, "overlap_tp_comm", profile.schedules.tp_comm_overlap)
        for name in ("gpus", "global_batch", "seq_len"):
            if getattr(self, name) < 1:
                raise PlannerError(f"{name}({getattr(self, name)}) must be positive")
        if self.grad_dtype not in GRAD_BYTES:
            raise PlannerError(f"grad_dtype({self.grad_dtype}) must be one of {', '.join(GRAD_BYTES)}")
        if self.schedule not in SCHEDULES:
            raise PlannerError(f"schedule({self.schedule}) must be one of {', '.join(SCHEDULES)}")
        if self.moe_dispatcher is not None and self.moe_dispatcher not in DISPATCHER_CODES:
            raise PlannerError(f"moe_dispatcher({self.moe_dispatcher}) must be one of {', '.join(DISPATCHER_CODES)}")
        if self.optimizer not in OPTIMIZER_STATE_BYTES_PER_PARAM:
            choices = ", ".join(OPTIMIZER_STATE_BYTES_PER_PARAM)
            raise PlannerError(f"optimizer({self.optimizer}) must be one of {choices}")
        for name, dtypes in (("optimizer_state_dtype", get_args(MomentsDtype)), ("master_weights_dtype",
                                                                                get_args(StateDtype))):
            if getattr(self, name) not in dtypes:
                raise PlannerError(f"{name}({getattr(self, name)}) must be one of {', '.join(dtypes)}")
        if self.fp8_param_gather and self.dtype not in QUANTIZED_DTYPES:
            raise PlannerError("fp8_param_gather keeps the layers' weights in fp8 (NVFP4 under fp4): it needs --dtype "
                               "fp8 or fp4")
        if self.dtype == "fp4" and not profile.kernels.nvfp4:
            raise PlannerError(f"engine {self.engine} cannot train in fp4 ({profile.kernels.sources['nvfp4']}); "
                               "choose --dtype fp8 or bf16, or an engine whose kernels.nvfp4 is true (megatron)")
        if self.fp8_param_gather and not profile.optimizer.fp8_params:
            raise PlannerError(f"engine {self.engine} cannot run fp8_param_gather ({profile.optimizer.sources['fp8_params']}); "
                               "drop it or choose an engine whose optimizer.fp8_params is true (megatron, nemo)")
        if self.optimizer_state_dtype != "fp32" and self.optimizer != "adam":
            raise PlannerError(f"optimizer_state_dtype {self.optimizer_state_dtype} applies to adam's moments only; use "
                               "--optimizer adam")
        if self.muon_tp_mode not in MUON_TP_MODE_CODES:
            raise PlannerError(f"muon_tp_mode({self.muon_tp_mode}) must be one of {', '.join(MUON_TP_MODE_CODES)}")
        if self.optimizer != "muon" and (self.muon_ns_steps != MUON_NS_STEPS_DEFAULT
                                         or self.muon_tp_mode != "duplicated" or not self.muon_split_qkv):
            raise PlannerError("--muon-ns-steps, --muon-tp-mode and --no-muon-split-qkv apply only with --optimizer muon")
        if self.lora_targets not in LORA_TARGETS:
            raise PlannerError(f"lora_targets({self.lora_targets}) must be one of {', '.join(LORA_TARGETS)}")
        if self.lora_rank is None and self.lora_targets != "all_linear":
            raise PlannerError("--lora-targets applies only with --lora-rank")
        if self.lora_rank is not None and self.optimizer == "muon":
            raise PlannerError("--lora-rank with --optimizer muon: no engine planner reads runs Muon on LoRA's "
                               "adapters; use --optimizer adam")
        if self.lora_rank is not None and not profile.optimizer.lora:
            able = ", ".join(name for name, p in ENGINE_PROFILES.items() if p.optimizer.lora)
            raise PlannerError(f"engine {self.engine} has no LoRA ({profile.optimizer.sources['lora']}); choose an "
                               f"engine whose optimizer.lora is true ({able})")
        if self.optimizer == "muon" and not profile.optimizer.muon:
            raise PlannerError(f"engine {self.engine} cannot run optimizer muon ({profile.optimizer.sources['muon']}); "
                               "choose --optimizer adam or an engine whose optimizer.muon is true (megatron)")
        if self.optimizer == "muon" and self.dtype == "fp16":
            raise PlannerError("optimizer muon with dtype fp16: Megatron-Core's emerging optimizers refuse fp16; use "
                               "--dtype bf16")
        if self.fp8_recipe not in FP8_RECIPE_CODES:
            raise PlannerError(f"fp8_recipe({self.fp8_recipe}) must be one of {', '.join(FP8_RECIPE_CODES)}")
        if self.fp8_recipe != "tensorwise" and self.dtype != "fp8":
            raise PlannerError(f"fp8_recipe {self.fp8_recipe} applies only with --dtype fp8")
        if self.fp8_attention and (self.dtype != "fp8" or self.fp8_recipe == "blockwise" or not self.flash_attention):
            raise PlannerError("fp8_attention runs Transformer Engine's fused attention on fp8 inputs: it needs --dtype "
                               "fp8 with per-tensor or MX scales (not blockwise) and flash attention")
        if self.fp8_attention and not profile.kernels.fp8_attention:
            raise PlannerError(f"engine {self.engine} cannot run fp8_attention ({profile.kernels.sources['fp8_attention']}); "
                               "drop it or choose an engine whose kernels.fp8_attention is true (megatron, nemo)")
        if self.moe_fused_mlp and (self.dtype != "fp8" or self.fp8_recipe != "mxfp8"):
            raise PlannerError("moe_fused_mlp is Transformer Engine's fused grouped MLP, which runs only under MXFP8: it "
                               "needs --dtype fp8 --fp8-recipe mxfp8")
        if self.moe_fused_mlp and not profile.kernels.moe_fused_mlp:
            raise PlannerError(f"engine {self.engine} cannot run moe_fused_mlp ({profile.kernels.sources['moe_fused_mlp']}); "
                               "drop it or choose an engine whose kernels.moe_fused_mlp is true (megatron, nemo)")
        if not 1.0 <= self.moe_load_imbalance <= MAX_MOE_LOAD_IMBALANCE:
            raise PlannerError(f"moe_load_imbalance({self.moe_load_imbalance:g}) must be in [1, {MAX_MOE_LOAD_IMBALANCE:g}]: the busiest "
                               "expert-parallel rank's routed load over the balanced share (1 = balanced)")
        if self.moe_delay_wgrad and not self.paired_overlap and not profile.moe.dispatch_wgrad_overlap:
            raise PlannerError(f"engine {self.engine} cannot run the experts' weight gradients beside the dispatch's "
                               f"backward without the all-to-all overlap ({profile.moe.sources['dispatch_wgrad_overlap']}); "
                               "drop --moe-delay-wgrad, add --moe-ep-overlap, or choose an engine whose "
                               "moe.dispatch_wgrad_overlap is true (megatron, nemo)")
        if self.attention_kernel not in (None, "fused", "flash2"):
            raise PlannerError(f"attention_kernel({self.attention_kernel}) must be fused or flash2")
        if self.attention_kernel is not None and not self.flash_attention:
            raise PlannerError("attention_kernel applies only with flash attention (the unfused path has no kernel "
                               "choice); drop --attention-kernel or --no-flash-attention")


    @property
    def paired_overlap(self) -> bool:
        """Whether every candidate pairs one micro-batch's forward with another's backward: the 1F1B all-to-all
        overlap or the DualPipe schedule."""
        return bool(self.moe_ep_overlap) or self.schedule == "dualpipe"

    @property
    def resolved_moe_delay_wgrad(self) -> bool:
        """Layout.moe_delay_wgrad of every candidate: the problem's, else planner.specs.layout.delay_wgrad_default."""
        if self.moe_delay_wgrad is not None:
            return self.moe_delay_wgrad
        return bool(delay_wgrad_default(bool(self.moe_ep_overlap), self.schedule == "dualpipe"))

    def for_model(self, model: ModelSpec, hw: HardwareProfile | None = None) -> Problem:
        """The problem with its MoE settings decided: those given, else on a MoE model the engine's defaults
        (engine_moe_defaults) with the dispatcher a search assumes (search_dispatcher), on a dense model
        Layout's (the settings do not change its cost, and so its candidates equal `planner estimate`'s layouts
        field for field)."""
        if self.moe_dispatcher is not None and self.moe_ep_overlap is not None:
            return self
        if model.moe is not None:
            profile = engine_profile(self.engine)
            dispatcher, overlap = engine_moe_defaults(profile)
            if hw is not None:
                asked = overlap if self.moe_ep_overlap is None else self.moe_ep_overlap
                dispatcher = search_dispatcher(profile, hw, asked)
        else:
            dispatcher = Layout.model_fields["moe_dispatcher"].default
            overlap = Layout.model_fields["moe_ep_overlap"].default
        return replace(self, moe_dispatcher=dispatcher if self.moe_dispatcher is None else self.moe_dispatcher,
                       moe_ep_overlap=overlap if self.moe_ep_overlap is None else self.moe_ep_overlap)


@dataclass(frozen=True)
class Filters:
    """Values an axis is restricted to; None keeps the axis's default list."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    dp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    etp: tuple[int, ...] | None = None
    zero: tuple[int, ...] | None = None
    recompute: tuple[str, ...] | None = None
    micro_batch: tuple[int, ...] | None = None
    interleave: tuple[int, ...] | None = None
    sequence_parallel: tuple[bool, ...] | None = None

    def given(self) -> dict[str, tuple[object, ...]]:
        """The filters that were set, by axis name."""
        return {name: value for name, value in self.__dict__.items() if value is not None}


def divisors(n: int) -> np.ndarray:
    """Positive divisors of n, ascending."""
    small = np.arange(1, math.isqrt(n) + 1, dtype=np.int64)
    small = small[n % small == 0]
    return np.unique(np.concatenate([small, n // small]))


def _values(given: tuple[int, ...] | None, default: np.ndarray) -> np.ndarray:
    return np.unique(np.asarray(given, dtype=np.int64)) if given is not None else default.astype(np.int64)


def default_cp(seq_len: int) -> np.ndarray:
    if seq_len < CP_MIN_SEQ_LEN:
        return np.array([1], dtype=np.int64)
    powers = 2 ** np.arange(int(np.log2(CP_CAP)) + 1)
    return powers[seq_len % (2 * powers) == 0] if seq_len % 2 == 0 else np.array([1])


def _product(*columns: np.ndarray) -> list[np.ndarray]:
    """Cartesian product of 1-d arrays, as flat columns (first axis slowest)."""
    grids = np.meshgrid(*columns, indexing="ij")
    return [g.ravel() for g in grids]


def _cross(outer: dict[str, np.ndarray], inner: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every outer row with every inner row (outer slowest)."""
    n_out = next(iter(outer.values())).shape[0]
    n_in = next(iter(inner.values())).shape[0]
    cols = {k: np.repeat(v, n_in) for k, v in outer.items()}
    cols.update({k: np.tile(v, n_out) for k, v in inner.items()})
    return cols


def _keep(cols: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[mask] for k, v in cols.items()}


def _structural(model: ModelSpec, problem: Problem, filters: Filters) -> dict[str, np.ndarray]:
    """(tp, pp, cp, dp) with tp * pp * cp * dp = gpus, then etp, ep and interleave."""
    g = problem.gpus
    can = engine_profile(problem.engine).schedules
    one = np.array([1], dtype=np.int64)
    heads = divisors(model.num_attention_heads)
    tp_v = _values(filters.tp, heads[heads <= g] if can.tensor_parallel else one)
    stages = divisors(g)
    pp_v = _values(filters.pp, stages[stages <= min(model.num_layers, g)] if can.pipeline else one)
    cp_v = _values(filters.cp, default_cp(problem.seq_len) if can.context_parallel else one)
    tp, pp, cp = _product(tp_v, pp_v, cp_v)
    model_parallel = tp * pp * cp
    divides = g % model_parallel == 0
    dp = np.where(divides, g // np.maximum(model_parallel, 1), 0)
    keep = divides.copy()
    if filters.dp is not None:
        keep &= np.isin(dp, np.asarray(filters.dp))
    if not keep.any():
        raise PlannerError(_no_structure_message(g, tp_v, pp_v, cp_v, filters))
    cols = _keep({"tp": tp, "pp": pp, "cp": cp, "dp": dp}, keep)

    cols = _expert_axes(model, cols, filters, expert_parallel=can.expert_parallel,
                        expert_tp=engine_profile(problem.engine).moe.expert_tensor_parallel)

    uneven = np.asarray(UNEVEN_VIRTUAL_STAGES if can.interleaved and can.uneven_virtual_stages else (), dtype=np.int64)
    v_v = _values(filters.interleave, np.union1d(np.union1d(divisors(model.num_layers), divisors(model.num_layers + 2)),
                                                 uneven) if can.interleaved else one)
    cols = _cross(cols, {"interleave": v_v})
    if filters.interleave is None:
        v, p = cols["interleave"], cols["pp"]
        # an uneven split needs a pipeline unit per virtual stage (physics.stages.pipeline_units_per_rank)
        laid_out = np.isin(v, uneven) & (v <= pipeline_units_per_rank(model.num_layers, p))
        cols = _keep(cols, (v == 1) | ((p > 1) & (even_virtual_chunks(model.num_layers, p, v) | laid_out)))
    return cols


UNEVEN_VIRTUAL_STAGES: tuple[int, ...] = (2, 4, 8)
"""Virtual stages per rank the search offers where the layers do not split evenly, for an engine that names each
chunk's layers (schedules.uneven_virtual_stages): the values of Megatron-Bridge's DeepSeek-V3 recipes (61 layers at
pp 4 x vp 4, pp 2 x vp 8, pp 8 x vp 2; benchmarks/data/megatron_bridge_26.yaml). A layout may name any other."""


def even_virtual_chunks(num_layers: int, pp: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Whether `v` virtual stages per rank split the layers into equal chunks: L % (p v) == 0, or the split
    that counts the embedding and the loss as a layer each (Megatron-LM --account-for-embedding-in-pipeline-split
    and --account-for-loss-in-pipeline-split; Llama 3 405B's 126 layers on 16 stages, one fewer on the first and
    the last, Dubey et al. 2024 Sec. 3.3.2), (L + 2) % (p v) == 0, which physics.stages.layers_on_stage produces
    when L % p == p - 2: every chunk but the first and the last then holds (L + 2) / (p v) layers."""
    return np.asarray((num_layers % (pp * v) == 0) | ((pp > 2) & ((num_layers + 2) % (pp * v) == 0)))


def _expert_axes(model: ModelSpec, cols: dict[str, np.ndarray], filters: Filters, *, expert_parallel: bool,
                 expert_tp: str) -> dict[str, np.ndarray]:
    """Each (tp, pp, cp, dp) row crossed with its expert-TP and expert-parallel degrees.

    etp: tp, and 1 where tp > 1, on MoE models whose engine runs EP and an expert TP apart from tp (its
    profile's moe.expert_tensor_parallel is not tp_only; a --etp filter replaces the list; a dense model keeps
    etp = tp); ep: divisors of num_experts with ep * etp dividing tp * dp * cp (the expert
    layers' etp x ep ranks span a stage's tp x cp x dp ranks; a --ep filter keeps every value given)."""
    one = np.array([1], dtype=np.int64)
    moe = model.moe is not None
    if filters.etp is not None:
        etp_v = np.unique(np.asarray(filters.etp, dtype=np.int64))
        cols = _cross(cols, {"etp": etp_v})
    elif moe and expert_parallel and expert_tp != "tp_only":
        # Two candidates per row: etp = tp, and etp = 1 where tp > 1 (the same value, once, where tp = 1).
        cols = _cross(cols, {"folded": np.array([False, True])})
        cols = _keep(cols, ~cols["folded"] | (cols["tp"] > 1))
        folded = cols.pop("folded")
        cols["etp"] = np.where(folded, 1, cols["tp"])
    else:
        cols = dict(cols, etp=cols["tp"].copy())
    experts = model.moe.num_experts if moe and model.moe is not None else 1
    ep_v = _values(filters.ep, divisors(experts) if expert_parallel else one)
    cols = _cross(cols, {"ep": ep_v})
    if filters.ep is None:
        spans = (cols["tp"] * cols["dp"] * cols["cp"]) % (cols["ep"] * cols["etp"]) == 0
        # A --etp that no row's tp x dp x cp takes (etp 3 on 8 GPUs) would leave no candidate at all; keep the
        # rows then, so the layout rules reject them and say which degree to change.
        if spans.any():
            cols = _keep(cols, spans)
    return cols


def _no_structure_message(
    gpus: int, tp_v: np.ndarray, pp_v: np.ndarray, cp_v: np.ndarray, filters: Filters
) -> str:
    def show(values: np.ndarray) -> str:
        return ",".join(str(int(x)) for x in values)

    dp = f" with dp in {show(np.asarray(filters.dp))}" if filters.dp is not None else ""
    return (
        f"no layout: no tp in {show(tp_v)} times pp in {show(pp_v)} times cp in {show(cp_v)} divides "
        f"gpus({gpus}){dp}; choose degrees whose product divides the GPU count"
    )


def _inner_axes(problem: Problem, filters: Filters) -> dict[str, np.ndarray]:
    """The axes crossed with every structural row: zero, sequence_parallel, recompute, micro_batch."""
    can = engine_profile(problem.engine).schedules
    runs = tuple(name for name in RECOMPUTE_CODES if name in can.recompute)
    names = filters.recompute if filters.recompute is not None else runs
    mb_default = divisors(problem.global_batch)
    default_sp = (False, True) if can.sequence_parallel else (False,)
    sp = filters.sequence_parallel if filters.sequence_parallel is not None else default_sp
    # Muon shards only as Megatron-Core's layer-wise distributed optimizer (zero 1): the default axis stops there, and
    # a --zero 2 or 3 asked for is rejected by the rule that says so (muon_zero)
    stages = [z for z in can.zero_stages if problem.optimizer != "muon" or z <= Zero.OPTIMIZER]
    return {
        "zero": _values(filters.zero, np.asarray(stages)),
        "sequence_parallel": np.unique(np.asarray(sp, dtype=bool)),
        "recompute": np.array(sorted({RECOMPUTE_CODES[n] for n in names}), dtype=np.int64),
        "micro_batch": _values(filters.micro_batch, mb_default[mb_default <= MICRO_BATCH_CAP]),
    }


AXES: tuple[str, ...] = ("structure", "zero", "sequence_parallel", "recompute", "micro_batch")


@dataclass(frozen=True)
class Space:
    """The candidates as a broadcast grid: `grid` fields have shape (S, 1, 1, 1, 1) for the structural
    fields (tp, pp, cp, dp, etp, ep, interleave; one row each), (1, Z, 1, 1, 1) for zero, and so on along AXES,
    so the cost model computes a term once per distinct value of the fields it depends on.
    `in_space` (broadcastable to grid.shape) is False where the default space prunes a point
    (sequence parallelism with tp = 1)."""

    grid: LayoutArrays
    in_space: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return self.grid.shape

    @property
    def size(self) -> int:
        """Layouts in the space (points of the grid that the defaults do not prune)."""
        return int(np.broadcast_to(self.in_space, self.shape).sum())

    def flat(self, mask: np.ndarray | None = None) -> LayoutArrays:
        """The layouts where `mask` (default: in_space) is True, as 1-d arrays in grid order."""
        return flatten(self.grid, np.flatnonzero(np.broadcast_to(self.in_space if mask is None else mask, self.shape)))

    def rows(self, start: int, stop: int) -> Space:
        """Structural rows start:stop of the grid (for evaluating a large grid in chunks)."""
        cut = {f.name: _cut(getattr(self.grid, f.name), start, stop) for f in fields(self.grid)}
        return Space(LayoutArrays(**cut), _cut(self.in_space, start, stop))


def _cut(array: np.ndarray, start: int, stop: int) -> np.ndarray:
    return array if array.shape[0] == 1 else array[start:stop]


@dataclass(frozen=True)
class Points:
    """Grid points given by flat indices (C order over `shape`), with their coordinates along each axis."""

    shape: tuple[int, ...]
    flat_index: np.ndarray

    @classmethod
    def of(cls, shape: tuple[int, ...], flat_index: np.ndarray) -> Points:
        return cls(tuple(shape), np.asarray(flat_index, dtype=np.int64))

    @cached_property
    def coords(self) -> tuple[np.ndarray, ...]:
        return np.unravel_index(self.flat_index, self.shape)

    def gather(self, array: np.ndarray) -> np.ndarray:
        """`array` (broadcastable to `shape`) at these points, as a 1-d array. A full-grid array is read
        through its flat view; an array that varies along one axis only is indexed along that axis."""
        array = np.asarray(array)
        padded = array.reshape((1,) * (len(self.shape) - array.ndim) + array.shape)
        varying = [axis for axis in range(padded.ndim) if padded.shape[axis] > 1]
        if padded.shape == self.shape:
            return np.asarray(padded.reshape(-1)[self.flat_index])
        if not varying:
            return np.full(self.flat_index.shape[0], padded.reshape(()), dtype=array.dtype)
        if len(varying) == 1:
            return np.asarray(padded.reshape(-1)[self.coords[varying[0]]])
        return np.asarray(np.broadcast_to(padded, self.shape).reshape(-1)[self.flat_index])


def flatten(grid: LayoutArrays, flat_index: np.ndarray) -> LayoutArrays:
    """The grid points at `flat_index` (C order over grid.shape) as a plain list of layouts."""
    points = Points.of(grid.shape, flat_index)
    return LayoutArrays(**{f.name: points.gather(getattr(grid, f.name)) for f in fields(grid)})


def build_space(model: ModelSpec, problem: Problem, filters: Filters = Filters()) -> Space:
    """Every candidate layout for `problem` under `filters` (see the module notes), as a broadcast grid."""
    problem = problem.for_model(model)
    rows = _structural(model, problem, filters)
    inner = _inner_axes(problem, filters)
    ndim = len(AXES)

    def on_axis(values: np.ndarray, axis: int) -> np.ndarray:
        shape = [1] * ndim
        shape[axis] = values.shape[0]
        return values.reshape(shape)

    def const(value: float, dtype: type) -> np.ndarray:
        return np.full((1,) * ndim, value, dtype=dtype)

    cols = {name: on_axis(values, 0) for name, values in rows.items()}
    for axis, name in enumerate(AXES[1:], start=1):
        cols[name] = on_axis(inner[name], axis)
    grid = LayoutArrays(
        **cols,
        recompute_layers=const(-1, np.int64),
        recompute_modules=const(recompute_module_mask(None), np.int64),
        global_batch=const(problem.global_batch, np.int64),
        seq_len=const(problem.seq_len, np.int64),
        microbatch_group=const(0, np.int64),  # Megatron-Core's default group of pp micro-batches
        gpipe=const(problem.schedule == "gpipe", bool),
        dualpipe=const(problem.schedule == "dualpipe", bool),
        flash_attention=const(problem.flash_attention, bool),
        attention_flash2=const(attention_kernel_run(problem.engine, problem.attention_kernel) == "flash2", bool),
        grad_bytes=const(GRAD_BYTES[str(problem.grad_dtype)], np.int64),
        optimizer_bytes=const(optimizer_state_bytes(problem.optimizer, str(problem.optimizer_state_dtype),
                                                         str(problem.master_weights_dtype)), np.int64),
        optimizer=const(OPTIMIZER_CODES[problem.optimizer], np.int64),
        muon_ns_steps=const(problem.muon_ns_steps, np.int64),
        muon_tp_mode=const(MUON_TP_MODE_CODES[problem.muon_tp_mode], np.int64),
        muon_split_qkv=const(problem.muon_split_qkv, bool),
        lora_rank=const(problem.lora_rank or 0, np.int64),
        lora_targets=const(LORA_TARGET_CODES[problem.lora_targets], np.int64),
        fp8=const(problem.dtype in QUANTIZED_DTYPES, bool),
        overlap_grad_reduce=const(problem.overlap_grad_reduce, bool),
        # the TP overlap where it runs: with sequence parallelism (which the default space offers with tp > 1 only)
        overlap_tp_comm=np.asarray(cols["sequence_parallel"] & bool(problem.overlap_tp_comm)),
        # Megatron allows fp8 parameters only with the distributed optimizer or FSDP (Layout's rule): ZeRO >= 1
        fp8_params=np.asarray((cols["zero"] >= 1) & problem.fp8_param_gather),
        fp8_recipe=const(Fp8RecipeCode.NVFP4 if problem.dtype == "fp4" else FP8_RECIPE_CODES[problem.fp8_recipe],
                         np.int64),
        compile=const(problem.compile, bool),
        compile_loss=const(problem.compile, bool),  # torch.compile takes the loss with the model (torchtitan, HF)
        clamp_fused=const(clamp_fused(problem.engine, problem.compile), bool),
        offload_optimizer=const(False, bool),
        offload_params=const(False, bool),
        torch_cpu_adam=const(False, bool),
        offload_activation_layers=const(0, np.int64),
        shard_group=const(0, np.int64),
        # without expert parallelism no token leaves the rank: Layout's default dispatcher, as engines read it back
        moe_dispatcher=np.where(cols["ep"] > 1, DISPATCHER_CODES[str(problem.moe_dispatcher)],
                                DISPATCHER_CODES[Layout.model_fields["moe_dispatcher"].default]).astype(np.int64),
        moe_ep_overlap=const(bool(problem.moe_ep_overlap), bool),
        moe_delay_wgrad=const(problem.resolved_moe_delay_wgrad, bool),
        moe_shared_expert_overlap=const(False, bool),
        moe_capacity_factor=const(0.0, float),
        moe_load_imbalance=const(problem.moe_load_imbalance, float),
        cuda_graphs=const(0, np.int64),
        moments_bf16=const(problem.optimizer_state_dtype == "bf16", bool),
        moments_int8=const(problem.optimizer_state_dtype == "int8", bool),
        master_bf16=const(problem.master_weights_dtype == "bf16", bool),
        # the model's MTP layers (-1), or none where the engine builds no MTP module (torchtitan, fsdp, automodel,
        # deepspeed: the readers read their files so)
        mtp_layers=const(0 if model.mtp_layers and not engine_profile(problem.engine).moe.mtp else -1, np.int64),
        activation_input_fp8=const(False, bool),
        fp8_attention=const(problem.fp8_attention, bool),
        moe_fused_mlp=const(problem.moe_fused_mlp, bool),
    )
    if filters.sequence_parallel is None:
        in_space = ~cols["sequence_parallel"] | (cols["tp"] > 1)
    else:
        in_space = np.ones((1,) * ndim, dtype=bool)
    return Space(grid, in_space)
