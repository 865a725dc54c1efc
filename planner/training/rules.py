"""The layout rules, written once: a boolean mask per rule for a grid, and a message with the arithmetic
for a single layout. `search` counts rejections by rule code; `estimate` raises the first message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.errors import PlannerError
from planner.physics.stages import PIPELINE_EDGE_UNITS, max_layers_per_stage, pipeline_units_per_rank
from planner.specs.engine import EngineProfile, engine_or_default, engine_profile
from planner.specs.layout import (
    CUDA_GRAPH_BITS,
    DISPATCHER_CODES,
    OPTIMIZER_CODES,
    RECOMPUTE_CODES,
    RECOMPUTE_MODULE_BITS,
    Fp8RecipeCode,
    Layout,
    LayoutArrays,
)
from planner.specs.model import ModelSpec

# Engines that run DeepSeek Sparse Attention's fused kernels: Megatron-Core (experimental_attention_variant 'dsa',
# megatron/core/transformer/experimental_attention_variant/dsa.py @ d98e8a64) and NeMo's Megatron-Bridge on it
# (its GLM-5 bridge and recipes, src/megatron/bridge/models/glm_moe_dsa/). torchtitan has no DSA model; the
# Hugging Face path (transformers' DeepseekV32) masks a full score matrix instead.
SPARSE_ATTENTION_ENGINES = ("megatron", "nemo")


@dataclass(frozen=True)
class Rule:
    code: str  # stable reason code, e.g. "heads_not_divisible"
    broken: Callable[[ModelSpec, LayoutArrays, int], np.ndarray] | None
    message: Callable[[ModelSpec, Layout, int], str]
    # Rules of what the engine can run read its profile instead of the GPU count.
    engine_broken: Callable[[LayoutArrays, EngineProfile], np.ndarray] | None = None
    # Rules of what the engine can run of the model read both.
    model_engine_broken: Callable[[ModelSpec, LayoutArrays, EngineProfile], np.ndarray] | None = None

    def mask(self, model: ModelSpec, lay: LayoutArrays, gpus: int, engine: EngineProfile) -> np.ndarray:
        if self.model_engine_broken is not None:
            return np.asarray(self.model_engine_broken(model, lay, engine))
        if self.engine_broken is not None:
            return np.asarray(self.engine_broken(lay, engine))
        assert self.broken is not None
        return np.asarray(self.broken(model, lay, gpus))


def _bad_microbatch_groups(a: LayoutArrays) -> np.ndarray:
    """Megatron-Core's interleaved schedule runs the m micro-batches in groups of n per virtual stage and refuses
    n outside [pp, m] and a last group of fewer than pp (schedules.py forward_backward_pipelining_with_interleaving
    @ d98e8a64: 'should range in [PP, M]', 'The remainder of M ... should be 0, or larger than or equal to the
    pipeline-parallel size'); n defaults to pp, which makes m a multiple of pp."""
    m, n = a.num_micro_batches, a.microbatch_group_size
    rest = m % np.maximum(n, 1)
    return np.asarray((n < a.pp) | (n > m) | ((rest > 0) & (rest < a.pp)))


def _microbatch_group_terms(lay: Layout) -> str:
    m = lay.global_batch // max(lay.dp * lay.micro_batch, 1)
    if lay.microbatch_group_size is None:
        return f"the micro-batch count ({m}) divisible by pp"
    return (f"microbatch_group_size({lay.microbatch_group_size}) between pp({lay.pp}) and the micro-batch count ({m}), "
            "dividing it or leaving a last group of at least pp")


def _engine_rule(code: str, broken: Callable[[LayoutArrays, EngineProfile], np.ndarray] | None,
                 setting: Callable[[Layout], str], field: str, *,
                 model_broken: Callable[[ModelSpec, LayoutArrays, EngineProfile], np.ndarray] | None = None) -> Rule:
    """A capability of the engine: the message names the setting, the engine and the profile's source. A rule that
    reads the model too gives `model_broken` instead of `broken`."""

    def message(m: ModelSpec, lay: Layout, g: int) -> str:
        profile = engine_profile(lay.engine)
        section, name = field.split(".")
        source = getattr(profile, section).sources[name]
        return (f"engine {lay.engine} cannot run {setting(lay)} ({source}); change it or choose another --engine")

    return Rule(code, None, message, broken, model_broken)


def _recompute_unsupported(lay: LayoutArrays, e: EngineProfile) -> np.ndarray:
    codes = [RECOMPUTE_CODES[mode] for mode in e.schedules.recompute if mode in RECOMPUTE_CODES]
    return ~np.isin(lay.recompute, np.asarray(codes, dtype=np.int64))


def _dispatcher_unsupported(lay: LayoutArrays, e: EngineProfile) -> np.ndarray:
    """A dispatcher the engine lacks, where one runs: without expert parallelism no token leaves the rank (the
    layout's default dispatcher names nothing the engine must have)."""
    codes = [DISPATCHER_CODES[name] for name in e.moe.dispatchers]
    default = DISPATCHER_CODES[str(Layout.model_fields["moe_dispatcher"].default)]
    unused = (lay.ep == 1) & (lay.moe_dispatcher == default)
    return np.asarray(~np.isin(lay.moe_dispatcher, np.asarray(codes, dtype=np.int64)) & ~unused)


def _expert_tp_unsupported(lay: LayoutArrays, e: EngineProfile) -> np.ndarray:
    kind = e.moe.expert_tensor_parallel
    if kind == "any":
        return np.zeros(lay.etp.shape, dtype=bool)
    if kind == "one_or_tp":
        return np.asarray((lay.etp != lay.tp) & (lay.etp != 1))
    return np.asarray(lay.etp != lay.tp)


def _ep_overlap_pipeline_broken(lay: LayoutArrays, e: EngineProfile) -> np.ndarray:
    """The overlap without the pipeline the engine needs for it (MoESection.ep_overlap_pipeline); a DualPipe schedule
    brings its own pairing of forward and backward chunks."""
    need = e.moe.ep_overlap_pipeline
    if need == "interleaved":
        wrong = (lay.pp > 1) & (lay.interleave == 1)
    elif need == "required":
        wrong = lay.pp == 1
    else:
        wrong = np.zeros(lay.pp.shape, dtype=bool)
    return np.asarray(lay.moe_ep_overlap & e.moe.ep_overlap & wrong & ~lay.dualpipe)


def _ep_overlap_conflicts(model: ModelSpec, lay: LayoutArrays, e: EngineProfile) -> dict[str, np.ndarray]:
    """Per setting the engine refuses beside its overlap (MoESection.ep_overlap_conflicts): where it is on."""
    present: dict[str, Callable[[], np.ndarray]] = {  # each computed only for an engine that refuses it
        "shared_expert_overlap": lambda: lay.moe_shared_expert_overlap,
        "moe_graphs": lambda: ((lay.cuda_graphs & (CUDA_GRAPH_BITS["mlp"] | CUDA_GRAPH_BITS["moe"])) != 0)
        & ((lay.cuda_graphs & CUDA_GRAPH_BITS["full"]) == 0),
        "mtp_over_one": lambda: np.where(lay.mtp_layers < 0, model.mtp_layers or 0, lay.mtp_layers) > 1,
        "recompute": lambda: lay.recompute != RECOMPUTE_CODES["none"],
        "full_recompute": lambda: lay.recompute == RECOMPUTE_CODES["full"],
        "moe_recompute": lambda: (lay.recompute == RECOMPUTE_CODES["selective"])
        & ((lay.recompute_modules & RECOMPUTE_MODULE_BITS["moe"]) != 0),
    }
    moe = model.moe is not None  # a dense model's MoE settings change nothing
    return {name: np.asarray(present[name]() & lay.moe_ep_overlap & e.moe.ep_overlap & moe)
            for name in e.moe.ep_overlap_conflicts}


def _any_of(masks: Iterable[np.ndarray]) -> np.ndarray:
    """True where any of the (broadcastable) masks is."""
    out = np.zeros((), dtype=bool)
    for mask in masks:
        out = out | mask
    return np.asarray(out)


def _ep_overlap_conflict_message(m: ModelSpec, lay: Layout, g: int) -> str:
    profile = engine_profile(lay.engine)
    on = [name for name, mask in _ep_overlap_conflicts(m, lay.to_arrays(), profile).items() if np.any(mask)]
    return (f"engine {lay.engine} cannot run moe_ep_overlap with {', '.join(on)} "
            f"({profile.moe.sources['ep_overlap_conflicts']}); turn one of them off or choose another --engine")


ENGINE_RULES: tuple[Rule, ...] = (
    _engine_rule("engine_no_tp", lambda a, e: (a.tp > 1) & (not e.schedules.tensor_parallel),
                 lambda l: f"tp({l.tp})", "schedules.tensor_parallel"),
    _engine_rule("engine_no_sp", lambda a, e: a.sequence_parallel & (not e.schedules.sequence_parallel),
                 lambda l: "sequence_parallel", "schedules.sequence_parallel"),
    _engine_rule("engine_no_cp", lambda a, e: (a.cp > 1) & (not e.schedules.context_parallel),
                 lambda l: f"cp({l.cp})", "schedules.context_parallel"),
    _engine_rule("engine_no_ep", lambda a, e: (a.ep > 1) & (not e.schedules.expert_parallel),
                 lambda l: f"ep({l.ep})", "schedules.expert_parallel"),
    _engine_rule("engine_no_pp", lambda a, e: (a.pp > 1) & (not e.schedules.pipeline),
                 lambda l: f"pp({l.pp})", "schedules.pipeline"),
    _engine_rule("engine_no_interleave", lambda a, e: (a.interleave > 1) & (not e.schedules.interleaved),
                 lambda l: f"interleave({l.interleave})", "schedules.interleaved"),
    _engine_rule("engine_no_microbatch_group",
                 lambda a, e: (a.interleave > 1) & (a.microbatch_group > 0) & (a.microbatch_group != a.pp)
                 & (not e.schedules.microbatch_group),
                 lambda l: f"microbatch_group_size({l.microbatch_group_size})", "schedules.microbatch_group"),
    _engine_rule("engine_no_gpipe", lambda a, e: a.gpipe & (a.pp > 1) & (not e.schedules.gpipe),
                 lambda l: "schedule gpipe", "schedules.gpipe"),
    _engine_rule("engine_zero_stage", lambda a, e: ~np.isin(a.zero, np.asarray(e.schedules.zero_stages)),
                 lambda l: f"zero({l.zero})", "schedules.zero_stages"),
    _engine_rule("engine_pp_with_zero", lambda a, e: (a.pp > 1) & (a.zero > e.schedules.max_zero_with_pp),
                 lambda l: f"pp({l.pp}) with zero({l.zero})", "schedules.max_zero_with_pp"),
    _engine_rule("engine_recompute", _recompute_unsupported, lambda l: f"recompute {l.recompute}", "schedules.recompute"),
    _engine_rule("engine_block_recompute", lambda a, e: (a.recompute_layers > 0) & (not e.schedules.block_recompute),
                 lambda l: f"recompute_layers_per_stage({l.recompute_layers_per_stage})", "schedules.block_recompute"),
    _engine_rule("engine_no_optimizer_offload", lambda a, e: a.offload_optimizer & (not e.offload.optimizer),
                 lambda l: "offload_optimizer", "offload.optimizer"),
    _engine_rule("engine_no_param_offload", lambda a, e: a.offload_params & (not e.offload.params),
                 lambda l: "offload_params", "offload.params"),
    _engine_rule("engine_no_activation_offload",
                 lambda a, e: (a.offload_activation_layers > 0) & (not e.offload.activations),
                 lambda l: f"offload_activation_layers({l.offload_activation_layers})", "offload.activations"),
    _engine_rule("engine_no_hsdp", lambda a, e: (a.shard_group > 0) & (not e.zero.supports_hsdp),
                 lambda l: f"shard_group({l.shard_group})", "zero.supports_hsdp"),
    _engine_rule("engine_no_compile", lambda a, e: (a.compile | a.compile_loss) & (not e.kernels.supports_compile),
                 lambda l: "compile" if l.compile else "compile_loss", "kernels.supports_compile"),
    _engine_rule("engine_dispatcher", _dispatcher_unsupported, lambda l: f"moe_dispatcher {l.moe_dispatcher}",
                 "moe.dispatchers"),
    _engine_rule("engine_no_ep_overlap", lambda a, e: a.moe_ep_overlap & (not e.moe.ep_overlap),
                 lambda l: "moe_ep_overlap", "moe.ep_overlap"),
    _engine_rule("engine_ep_overlap_dispatcher",
                 lambda a, e: a.moe_ep_overlap & e.moe.ep_overlap & ~np.isin(
                     a.moe_dispatcher, np.asarray([DISPATCHER_CODES[n] for n in e.moe.ep_overlap_dispatchers],
                                                  dtype=np.int64)),
                 lambda l: f"moe_ep_overlap with moe_dispatcher {l.moe_dispatcher}", "moe.ep_overlap_dispatchers"),
    _engine_rule("engine_ep_overlap_pipeline", None,
                 lambda l: f"moe_ep_overlap with pp({l.pp}) and interleave({l.interleave})", "moe.ep_overlap_pipeline",
                 model_broken=lambda m, a, e: (m.moe is not None) & _ep_overlap_pipeline_broken(a, e)),
    Rule("engine_ep_overlap_conflict", None, _ep_overlap_conflict_message,
         model_engine_broken=lambda m, a, e: _any_of(_ep_overlap_conflicts(m, a, e).values())),
    # the experts' weight gradients beside the dispatch's backward outside the 1F1B overlap or DualPipe (with them
    # moe_delay_wgrad reorders the pair, which every engine with the overlap runs)
    _engine_rule("engine_no_dispatch_wgrad_overlap", None, lambda l: "moe_delay_wgrad without moe_ep_overlap",
                 "moe.dispatch_wgrad_overlap",
                 model_broken=lambda m, a, e: (m.moe is not None) & a.moe_delay_wgrad & ~a.moe_ep_overlap
                 & ~a.dualpipe & (not e.moe.dispatch_wgrad_overlap)),
    _engine_rule("engine_no_shared_expert_overlap",
                 lambda a, e: a.moe_shared_expert_overlap & (not e.moe.shared_expert_overlap),
                 lambda l: "moe_shared_expert_overlap", "moe.shared_expert_overlap"),
    _engine_rule("engine_expert_tp", _expert_tp_unsupported, lambda l: f"etp({l.expert_tp}) with tp({l.tp})",
                 "moe.expert_tensor_parallel"),
    _engine_rule("engine_no_capacity_factor", lambda a, e: (a.moe_capacity_factor > 0) & (not e.moe.capacity_factor),
                 lambda l: f"moe_capacity_factor({l.moe_capacity_factor})", "moe.capacity_factor"),
    _engine_rule("engine_no_mtp", lambda a, e: (a.mtp_layers > 0) & (not e.moe.mtp),
                 lambda l: f"mtp_layers({l.mtp_layers})", "moe.mtp"),
    _engine_rule("engine_no_cuda_graphs", lambda a, e: (a.cuda_graphs != 0) & (not e.kernels.cuda_graphs),
                 lambda l: f"cuda_graph_scope {','.join(l.cuda_graph_scope)}", "kernels.cuda_graphs"),
    _engine_rule("engine_no_bf16_moments", lambda a, e: a.moments_bf16 & (not e.optimizer.bf16_moments),
                 lambda l: "optimizer_state_dtype bf16", "optimizer.bf16_moments"),
    _engine_rule("engine_no_int8_moments", lambda a, e: a.moments_int8 & (not e.optimizer.int8_moments),
                 lambda l: "optimizer_state_dtype int8", "optimizer.int8_moments"),
    _engine_rule("engine_no_lora", lambda a, e: (a.lora_rank > 0) & (not e.optimizer.lora),
                 lambda l: f"lora_rank({l.lora_rank})", "optimizer.lora"),
    _engine_rule("engine_no_bf16_master", lambda a, e: a.master_bf16 & (not e.optimizer.bf16_master_weights),
                 lambda l: "master_weights_dtype bf16", "optimizer.bf16_master_weights"),
    _engine_rule("engine_no_muon", lambda a, e: (a.optimizer == OPTIMIZER_CODES["muon"]) & (not e.optimizer.muon),
                 lambda l: "optimizer muon", "optimizer.muon"),
    # Muon orthogonalises whole matrices: Megatron-Core shards it only as its layer-wise distributed optimizer (zero 1)
    Rule("muon_zero", lambda m, a, g: (a.optimizer == OPTIMIZER_CODES["muon"]) & (a.zero >= 2),
         lambda m, l, g: f"optimizer muon with zero {l.zero}: Megatron-Core shards Muon only as its layer-wise "
         "distributed optimizer (zero 1: whole matrices owned by data-parallel ranks); use zero 0 or 1"),
    _engine_rule("engine_no_fp8_params", lambda a, e: a.fp8_params & (not e.optimizer.fp8_params),
                 lambda l: "fp8_param_gather", "optimizer.fp8_params"),
    # torchao's float8 all-gather casts the shard with one scale per tensor: no other recipe (torchao config.py)
    _engine_rule("engine_fp8_gather_recipe", lambda a, e: a.fp8_params & (not e.optimizer.fp8_params_held)
                 & (a.fp8_recipe != Fp8RecipeCode.TENSORWISE),
                 lambda l: f"fp8_param_gather with fp8_recipe {l.fp8_recipe}", "optimizer.fp8_params"),
    _engine_rule("engine_no_fp8_attention", lambda a, e: a.fp8_attention & (not e.kernels.fp8_attention),
                 lambda l: "fp8_attention", "kernels.fp8_attention"),
    _engine_rule("engine_no_nvfp4", lambda a, e: a.fp4 & (not e.kernels.nvfp4), lambda l: "dtype fp4",
                 "kernels.nvfp4"),
    _engine_rule("engine_no_fp8_rowwise", lambda a, e: a.fp8 & (a.fp8_recipe == Fp8RecipeCode.ROWWISE)
                 & (not e.kernels.fp8_rowwise), lambda l: "fp8_recipe rowwise", "kernels.fp8_rowwise"),
    _engine_rule("engine_no_moe_fused_mlp", lambda a, e: a.moe_fused_mlp & (not e.kernels.moe_fused_mlp),
                 lambda l: "moe_fused_mlp", "kernels.moe_fused_mlp"),
    # an engine that runs FP8 attention, told to run FlashAttention-2 instead (Layout.attention_kernel)
    Rule("fp8_attention_flash2", None,
         lambda m, l, g: "fp8_attention is Transformer Engine's fused fp8 kernel, and attention_kernel flash2 runs "
         "FlashAttention-2 in 16 bits; use the fused kernel or set fp8_attention false",
         lambda a, e: a.fp8_attention & a.attention_flash2 & e.kernels.fp8_attention),
)


def _fused_mlp_shapes_ok(model: ModelSpec, etp: np.ndarray) -> np.ndarray:
    """Whether Transformer Engine's fused grouped MLP takes the model's experts at expert TP `etp`: a gated
    activation (fc1 twice fc2's input), and fc1's and fc2's input and output widths multiples of 64
    (transformer_engine/pytorch/ops/fused/grouped_mlp.py validate_grouped_mlp_dims @ d0067d0)."""
    if model.moe is None or model.mlp_kind != "gated" or model.hidden_size % 64:
        return np.zeros(np.shape(etp), dtype=bool)
    width = model.moe.moe_ffn_hidden_size
    e = np.asarray(etp)
    return np.asarray((width % e == 0) & ((width // e) % 64 == 0))


def _moe_experts(model: ModelSpec) -> int:
    return model.moe.num_experts if model.moe else 1


RULES: tuple[Rule, ...] = (
    Rule(
        "ep_overlap_needs_ep",
        lambda m, a, g: (m.moe is not None) & a.moe_ep_overlap & (a.ep == 1),
        lambda m, l, g: "moe_ep_overlap needs expert parallelism: with ep 1 every token's experts are on its own rank "
        "and no all-to-all runs to overlap (Megatron-Core asserts expert_model_parallel_size > 1 for "
        "overlap_moe_expert_parallel_comm, transformer_config.py @ d98e8a64; torchtitan's DualPipeV overlap needs "
        "ep > 1); set ep > 1 or turn the overlap off",
    ),
    Rule(
        "gpus_mismatch",
        lambda m, a, g: a.gpus != g,
        lambda m, l, g: f"tp({l.tp}) * pp({l.pp}) * cp({l.cp}) * dp({l.dp}) = {l.gpus} != gpus({g}); "
        "change a degree or the GPU count",
    ),
    Rule(
        "heads_not_divisible",
        lambda m, a, g: m.num_attention_heads % a.tp != 0,
        lambda m, l, g: f"num_attention_heads({m.num_attention_heads}) is not divisible by tp({l.tp}); "
        "use a tp that divides the head count",
    ),
    Rule(
        "too_many_stages",
        lambda m, a, g: a.pp > m.num_layers,
        lambda m, l, g: f"pp({l.pp}) exceeds num_layers({m.num_layers}); use at most one stage per layer",
    ),
    Rule(
        "batch_not_divisible",
        lambda m, a, g: a.global_batch % (a.dp * a.micro_batch) != 0,
        lambda m, l, g: f"global_batch({l.global_batch}) is not divisible by dp({l.dp}) * micro_batch({l.micro_batch}) "
        f"= {l.dp * l.micro_batch}; change the batch, dp or micro_batch",
    ),
    Rule(
        "sequence_parallel_needs_tp",
        lambda m, a, g: a.sequence_parallel & (a.tp == 1),
        lambda m, l, g: "sequence_parallel needs tp > 1; turn it off or raise tp",
    ),
    Rule(
        "seq_not_divisible_by_cp",
        lambda m, a, g: (a.cp > 1) & (a.seq_len % (2 * a.cp) != 0),
        lambda m, l, g: f"seq_len({l.seq_len}) is not divisible by 2 * cp({l.cp}) = {2 * l.cp} (causal context "
        "parallelism splits the sequence into 2 * cp load-balanced chunks); change seq_len or cp",
    ),
    Rule(
        "seq_too_long",
        lambda m, a, g: a.seq_len > m.max_seq_len,
        lambda m, l, g: f"seq_len({l.seq_len}) exceeds the model's max_seq_len({m.max_seq_len}); shorten it or "
        "raise max_seq_len in the model spec",
    ),
    Rule(
        "interleave_invalid",
        lambda m, a, g: (a.interleave > 1)
        & ((a.pp == 1) | (pipeline_units_per_rank(m.num_layers, a.pp) < a.interleave) | _bad_microbatch_groups(a)
           | a.gpipe),
        lambda m, l, g: f"interleave({l.interleave}) needs pp > 1, at least one layer, the embedding or the loss per "
        f"virtual stage ((num_layers({m.num_layers}) + {PIPELINE_EDGE_UNITS}) // pp({l.pp}) = {pipeline_units_per_rank(m.num_layers, l.pp)} "
        f">= interleave), {_microbatch_group_terms(l)}, and the 1f1b schedule",
    ),
    Rule(
        "dualpipe_invalid",
        lambda m, a, g: a.dualpipe & ((a.pp < 2) | (a.pp % 2 != 0) | (a.interleave > 1)
                                      | (a.num_micro_batches < 2 * a.pp) | (a.num_micro_batches % 2 != 0)),
        lambda m, l, g: f"schedule dualpipe needs an even pp >= 2 (pp = {l.pp}), interleave 1, and an even micro-batch "
        f"count of at least 2 x pp ({l.global_batch // max(l.dp * l.micro_batch, 1)} micro-batches): deepseek-ai/DualPipe "
        "feeds half the micro-batches from each end (dualpipe.py step() asserts num_chunks >= 2 x num_ranks)",
    ),
    Rule(
        "activation_fp8_not_gated",
        lambda m, a, g: a.activation_input_fp8 & (m.mlp_kind != "gated"),
        lambda m, l, g: "activation_input_fp8 keeps a SwiGLU's input in fp8, and this model's MLP is not gated "
        "(Megatron-Core transformer_config.py: 'supported only for SwiGLU'); set it false",
    ),
    Rule(
        "ep_invalid",
        lambda m, a, g: ((a.ep > 1) & ((_moe_experts(m) % a.ep != 0) | (m.moe is None)))
        | (((a.ep > 1) | ((a.etp != a.tp) & (m.moe is not None))) & ((a.tp * a.dp * a.cp) % (a.ep * a.etp) != 0)),
        lambda m, l, g: f"ep({l.ep}) needs a MoE model whose num_experts({_moe_experts(m)}) it divides, with ep * etp "
        f"({l.ep} * {l.expert_tp}) dividing tp({l.tp}) * dp({l.dp}) * cp({l.cp}) (the expert layers' ranks span a "
        "stage's tp x dp x cp ranks)",
    ),
    Rule(
        "moe_tp_needs_sp",
        lambda m, a, g: (m.moe is not None) & (a.ep > 1) & (a.tp > 1) & ~a.sequence_parallel,
        lambda m, l, g: f"ep({l.ep}) with tp({l.tp}) needs sequence_parallel (planner models the token dispatcher on "
        "each TP rank's sequence shard; Megatron-Core warns that training with EP and TP must use sequence parallelism, "
        "ModelParallelConfig @ d98e8a64); turn sequence parallelism on",
    ),
    Rule(
        "etp_invalid",
        lambda m, a, g: (a.etp != a.tp) & ((m.moe is None) | ((m.moe.moe_ffn_hidden_size if m.moe else 1) % a.etp != 0)),
        lambda m, l, g: f"etp({l.expert_tp}) needs a MoE model whose moe_ffn_hidden_size "
        f"({m.moe.moe_ffn_hidden_size if m.moe else 'none'}) it divides",
    ),
    Rule(
        "moe_fused_mlp_shapes",
        lambda m, a, g: a.moe_fused_mlp & ~_fused_mlp_shapes_ok(m, a.etp),
        lambda m, l, g: "moe_fused_mlp (Transformer Engine's fused grouped MLP) needs a MoE model with a gated MLP "
        "whose hidden size and per-rank expert width are multiples of 64 (grouped_mlp.py validate_grouped_mlp_dims): "
        f"hidden_size {m.hidden_size}, moe_ffn_hidden_size {m.moe.moe_ffn_hidden_size if m.moe else 'none'} / "
        f"etp({l.expert_tp}), mlp {m.mlp_kind}; set moe_fused_mlp false",
    ),
    Rule(
        "engine_no_sparse_attention", None,
        lambda m, l, g: f"engine {l.engine} has no DeepSeek Sparse Attention (Megatron-Core's "
        "--experimental-attention-variant dsa runs it: engines megatron and nemo); choose one of those engines",
        model_engine_broken=lambda m, a, e: np.broadcast_to(
            np.bool_(m.sparse_attention is not None and e.name not in SPARSE_ATTENTION_ENGINES), a.shape),
    ),
    Rule(
        "sparse_attention_layout",
        lambda m, a, g: (m.sparse_attention is not None) & (~a.flash_attention | a.fp8_attention),
        lambda m, l, g: "DeepSeek Sparse Attention runs its own fused kernels (FlashMLA's sparse MLA, the indexer's "
        f"logits) in 16 bits: flash_attention {l.flash_attention}, fp8_attention {l.fp8_attention}; use flash "
        "attention and fp8_attention false",
    ),
    Rule(
        "linear_attention_heads",
        lambda m, a, g: (m.linear_attention is not None) & ((m.linear_attention.num_key_heads
                                                               if m.linear_attention else 1) % a.tp != 0),
        lambda m, l, g: f"tp({l.tp}) does not divide the Gated DeltaNet layers' linear key heads "
        f"({m.linear_attention.num_key_heads if m.linear_attention else 0}; Megatron-Core splits them, and the value "
        "heads, over TP: megatron/core/ssm/gated_delta_net/gdn.py); use a tp that divides them",
    ),
    Rule(
        "linear_attention_cp_heads",
        lambda m, a, g: (m.linear_attention is not None) & (a.cp > 1) & (
            ((m.linear_attention.num_key_heads if m.linear_attention else 1) % (a.tp * a.cp) != 0)
            | ((m.linear_attention.num_value_heads if m.linear_attention else 1) % (a.tp * a.cp) != 0)),
        lambda m, l, g: f"tp({l.tp}) x cp({l.cp}) does not divide the Gated DeltaNet layers' key heads "
        f"({m.linear_attention.num_key_heads if m.linear_attention else 0}) and value heads "
        f"({m.linear_attention.num_value_heads if m.linear_attention else 0}): under context parallelism "
        "Megatron-Core splits each TP rank's heads over the CP ranks (megatron/core/ssm/gated_delta_net/common.py, "
        "'split_sections ... must be divisible by cp_size'); use a tp x cp that divides both",
    ),
    Rule(
        "engine_no_linear_attention_cp",
        None,
        lambda m, l, g: f"engine {l.engine} cannot run cp({l.cp}) with Gated DeltaNet layers "
        f"({engine_profile(l.engine).schedules.sources['linear_attention_cp']}); use cp 1 or --engine megatron",
        model_engine_broken=lambda m, a, e: (m.linear_attention is not None) & (a.cp > 1)
        & (not e.schedules.linear_attention_cp),
    ),
    Rule(
        "recompute_layers_too_many",
        lambda m, a, g: (a.recompute_layers > 0) & (a.recompute_layers > max_layers_per_stage(m.num_layers, a.pp)),
        lambda m, l, g: f"recompute_layers_per_stage({l.recompute_layers_per_stage}) exceeds the layers per stage "
        f"({max_layers_per_stage(m.num_layers, l.pp)})",
    ),
    Rule(
        "offload_layers_too_many",
        lambda m, a, g: a.offload_activation_layers > max_layers_per_stage(m.num_layers, a.pp),
        lambda m, l, g: f"offload_activation_layers({l.offload_activation_layers}) exceeds the layers per stage "
        f"({max_layers_per_stage(m.num_layers, l.pp)})",
    ),
)

RULES = RULES + ENGINE_RULES
RULE_CODES: tuple[str, ...] = tuple(rule.code for rule in RULES)


def violations(
    model: ModelSpec, lay: LayoutArrays, gpus: int, engine: EngineProfile | None = None
) -> dict[str, np.ndarray]:
    """One boolean array per rule code: True where the candidate breaks the rule (the engine's capability
    rules with `engine`'s profile, the default engine's when none is given)."""
    profile = engine_or_default(engine)
    return {rule.code: np.broadcast_to(rule.mask(model, lay, gpus, profile), lay.shape) for rule in RULES}


def check_layout(model: ModelSpec, layout: Layout, gpus: int) -> None:
    """Raise a PlannerError with the arithmetic of the first rule `layout` breaks (its engine's rules included)."""
    broken = violations(model, layout.to_arrays(), gpus, engine_profile(layout.engine))
    for rule in RULES:
        if bool(broken[rule.code][0]):
            raise PlannerError(rule.message(model, layout, gpus))


def _engine(engine: object) -> EngineProfile:
    """The profile of a layout's engine field (the default engine's when unset)."""
    return engine_profile(str(engine)) if engine is not None else engine_or_default(None)


def resolve_layout(model: ModelSpec, gpus: int, **fields: Any) -> Layout:
    """A validated Layout; dp is derived as gpus / (tp * pp * cp) when not given.

    `fields` are raw values as a reader or the CLI gathered them; Layout validates them. A gradient dtype
    not given is the engine's (EngineProfile.optimizer.default_grad_dtype), and so are Adam's master-weight and
    moment dtypes (default_state_dtype).
    """
    if gpus < 1:
        raise PlannerError(f"gpus({gpus}) must be positive")
    given = {k: v for k, v in fields.items() if v is not None}
    profile = _engine(given.get("engine"))
    if "grad_dtype" not in given:  # the engine's own (Megatron-LM: fp32 main grads under --bf16)
        given["grad_dtype"] = profile.optimizer.default_grad_dtype
    for name in ("optimizer_state_dtype", "master_weights_dtype"):  # the engine's (AutoModel: bf16 states)
        if name not in given and given.get("optimizer", "adam") == "adam":
            given[name] = profile.optimizer.default_state_dtype
    if "moe_dispatcher" not in given:  # an engine without Layout's default dispatcher runs its own (AutoModel: DeepEP)
        moe = profile.moe
        if (Layout.model_fields["moe_dispatcher"].default not in moe.dispatchers and model.moe is not None
                and int(given.get("ep", 1)) > 1):
            given["moe_dispatcher"] = moe.default_dispatcher
    if "dp" not in given:
        model_parallel = int(given.get("tp", 1)) * int(given.get("pp", 1)) * int(given.get("cp", 1))
        if gpus % model_parallel != 0:
            raise PlannerError(
                f"gpus({gpus}) is not divisible by tp({given.get('tp', 1)}) * pp({given.get('pp', 1)}) * "
                f"cp({given.get('cp', 1)}) = {model_parallel}; change a degree or the GPU count"
            )
        given["dp"] = gpus // model_parallel
    try:
        layout = Layout(**given)
    except Exception as err:  # pydantic ValidationError -> one line naming the field
        from pydantic import ValidationError

        from planner.specs.validation import describe_validation_error

        if isinstance(err, ValidationError):
            raise PlannerError(describe_validation_error(err)) from None
        raise
    check_layout(model, layout, gpus)
    return layout
