"""The training engine: what the framework that runs a layout does with it, as data.

The same layout runs at different speeds and needs different memory under Megatron-LM,
NeMo, torchtitan, PyTorch FSDP or DeepSpeed. An `EngineProfile` says how: which
element-wise kernels are fused (natively or by `torch.compile`), how ZeRO-3/FSDP is
implemented (gather granularity, prefetch depth, reshard after forward, regather for
recompute, reduce dtype, bucket sizes), which schedules and combinations the engine
can run, its optimizer semantics, and a few named efficiency factors. Every section
carries `sources`: a source and a note for each of its fields (checked: no field
without one). The cost model reads the fields, never the engine's name.

The built-in profiles are `ENGINE_PROFILES` below (Python data, so the pure core needs
no file access); docs/engines.md describes each one and how its factors were chosen.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveInt, model_validator

from planner.errors import PlannerError

# The attention core's kernel (KernelSection.attention_kernel, Layout.attention_kernel): fused = the chip's best fused
# kernel (Transformer Engine's cuDNN attention on Hopper), flash2 = FlashAttention-2 (the flash-attn package, which
# Transformer Engine runs as its FlashAttention backend, and PyTorch SDPA's flash backend).
AttentionKernel = Literal["fused", "flash2"]

_STRICT = ConfigDict(extra="forbid", frozen=True)

EngineName = Literal["megatron", "nemo", "torchtitan", "fsdp", "deepspeed", "automodel"]
RecomputeMode = Literal["none", "selective", "full", "op", "modules"]
# planner.specs.layout.MoeDispatcher (written out here: layout imports this module)
Dispatcher = Literal["alltoall", "allgather", "deepep", "hybridep"]
# Settings an engine refuses beside its expert all-to-all overlap (MoESection.ep_overlap_conflicts):
# shared_expert_overlap - Layout.moe_shared_expert_overlap; moe_graphs - a partial CUDA graph over the MLP or the MoE
# block (cuda_graph_scope mlp or moe); mtp_over_one - more than one multi-token-prediction layer; recompute - any
# activation recomputation; full_recompute - full recompute (block recompute included); moe_recompute - 'moe' among
# Megatron's recompute modules.
EpOverlapConflict = Literal["shared_expert_overlap", "moe_graphs", "mtp_over_one", "recompute", "full_recompute",
                            "moe_recompute"]


class _Sourced(BaseModel):
    """A section whose every field has an entry in `sources` ("where from - why this value")."""

    model_config = _STRICT

    sources: dict[str, str] = Field(description="Per field: its source and a note on how the value was chosen.")

    @model_validator(mode="after")
    def _every_field_sourced(self) -> _Sourced:
        missing = [name for name in type(self).model_fields if name != "sources" and not self.sources.get(name, "").strip()]
        if missing:
            raise ValueError(f"sources lacks an entry for {', '.join(missing)}; say where each value comes from")
        extra = sorted(set(self.sources) - set(type(self).model_fields))
        if extra:
            raise ValueError(f"sources names unknown fields {', '.join(extra)}")
        return self


class KernelSection(_Sourced):
    """Which kernels run fused. The element-wise model (training.time) counts the traffic of Megatron-LM's
    fused kernels (bias-GeLU, bias-dropout-add, fused norms); an engine that runs them eagerly moves more."""

    fused_elementwise: bool = Field(description="Element-wise kernels fused as Megatron-LM / Transformer Engine fuse them.")
    supports_compile: bool = Field(description="torch.compile can be turned on (`--compile`): fuses element-wise ops.")
    eager_elementwise_traffic_factor: float = Field(
        ge=1.0, description="Element-wise HBM traffic of the unfused (eager) kernels relative to the fused count."
    )
    loss_bytes_per_logit: float = Field(
        gt=0.0, description="Bytes per logit element live at the loss's peak (the last stage, start of backward)."
    )
    attention_kernel: AttentionKernel = Field(
        description="The attention core's kernel: fused = the chip's best fused kernel (Transformer Engine's cuDNN "
        "fused attention on Hopper, FlashAttention-2 on Ampere), the hardware profile's attention plateau; flash2 = "
        "FlashAttention-2, PyTorch scaled_dot_product_attention's default flash backend, at the profile's "
        "attention_flash2 plateau where the chip has a faster kernel."
    )
    cuda_graphs: bool = Field(
        description="Parts of a layer can be captured in CUDA graphs and replayed without host launches "
        "(Layout.cuda_graph_scope)."
    )
    fp8_proj_keeps_cast_input: bool = Field(
        description="Under fp8 the attention's output projection keeps its own fp8 cast of its input for the weight "
        "gradient beside the 16-bit attention output the attention kernel keeps for its backward (3 bytes per "
        "element); false: one 16-bit tensor serves both (2)."
    )
    fp8_tp_all_gather: bool = Field(
        description="Under an fp8 recipe the sequence-parallel all-gathers (the layer inputs in forward, the output "
        "gradients in backward) move fp8, 1 byte per element; the reduce-scatters stay 16-bit."
    )
    tp_overlap_with_mla: bool = Field(
        default=True, description="TP comm overlap still runs in a model with multi-latent attention (false: the "
        "engine turns it off for the whole model, and its TP collectives stay exposed)."
    )
    scaled_rotary_unfused: bool = Field(
        default=False, description="A rotary whose cos and sin carry YaRN's attention factor "
        "(ModelSpec.rotary_attention_factor != 1) falls back from the fused rotary kernel to unfused element-wise "
        "ops on standard attention (physics.rotary); false: it runs as the engine's other rotaries do."
    )
    activation_clamp_fused: bool = Field(
        default=False, description="A clamped gated activation (ModelSpec.activation_clamp, gpt-oss) clamps inside "
        "the activation kernel; false: the clamp and its concatenation are kernels of their own "
        "(physics.elementwise ACTIVATION_CLAMP_*), unless torch.compile fuses them."
    )
    fp8_attention: bool = Field(
        default=False, description="The fused attention can run on fp8 inputs (Transformer Engine's FP8 attention, "
        "Layout.fp8_attention)."
    )
    moe_fused_mlp: bool = Field(
        default=False, description="The routed experts can run as Transformer Engine's fused grouped MLP "
        "(Layout.moe_fused_mlp)."
    )
    nvfp4: bool = Field(
        default=False, description="The layers' GEMMs can train in NVFP4 (Transformer Engine's NVFP4BlockScaling "
        "recipe: Layout.dtype fp4)."
    )
    compiled_loss_bytes_per_logit: float | None = Field(
        default=None, gt=0.0, description="Bytes per logit live at the loss's peak when torch.compile compiles the loss "
        "(Layout.compile_loss); None: the engine cannot compile it (loss_bytes_per_logit either way)."
    )
    fp8_rowwise: bool = Field(
        default=False, description="Runs torchao's rowwise float8 recipe (Layout.fp8_recipe rowwise: a scale per row of "
        "each GEMM operand)."
    )
    fp8_weight_cast_cached: bool = Field(
        default=True, description="Under an fp8 recipe each weight is quantized once per optimizer step and the copy "
        "reused by every micro-batch, forward and backward (Transformer Engine's is_first_microbatch weight caching); "
        "false: every micro-batch's forward quantizes it and its backward quantizes it again along the other axis "
        "(torchao's Float8Linear; physics.kernels FP8_TORCHAO_WEIGHT_CAST_BYTES_PER_ELEMENT)."
    )
    separate_projections: bool = Field(
        default=False, description="The model code keeps the query, key and value projections, and a gated MLP's gate "
        "and up projections, as Linears of their own: each a GEMM over the same input (physics.shapes.gemm_kernels); "
        "false: fused into one GEMM each, as Megatron-Core's linear_qkv and linear_fc1."
    )


class ZeroSection(_Sourced):
    """How the engine implements ZeRO / FSDP sharding."""

    collectives_per_layer: PositiveInt = Field(
        description="Parameter all-gathers (and gradient reduce-scatters) one transformer layer issues per pass: "
        "1 for a per-block FSDP unit, more where the engine gathers per sub-module."
    )
    prefetch_units: NonNegativeInt = Field(
        description="Units gathered ahead of the one computing (0: each gather waits, nothing overlaps)."
    )
    prefetch_bucket_params: PositiveInt | None = Field(
        description="Where prefetch is a parameter budget rather than a unit count: parameters gathered ahead "
        "(a layer larger than it is only partly prefetched); null to use prefetch_units."
    )
    reshard_after_forward: bool = Field(
        description="ZeRO-3 frees gathered parameters after a unit's forward and gathers them again for backward."
    )
    regather_for_recompute: bool = Field(
        description="Full recompute gathers the parameters once more for the recomputed forward."
    )
    reduce_in_fp32: bool = Field(description="Gradients are reduced in fp32 whatever the gradient dtype.")
    grad_reduce_every_micro_batch: bool = Field(
        description="ZeRO-2 keeps only its gradient shard, so every micro-batch's backward reduce-scatters its "
        "gradients (m collectives per step); false where the engine accumulates the micro-batches in a full "
        "gradient buffer and reduces once, at the last one."
    )
    reduce_bucket_params: PositiveInt = Field(
        description="Parameters per gradient-reduction bucket under ZeRO 0-2 (one collective per bucket)."
    )
    supports_hsdp: bool = Field(description="Hybrid sharding: shard inside a group, replicate across groups.")
    collective_overhead_seconds: NonNegativeFloat = Field(
        description="Fixed host-side cost of each ZeRO-3 collective (hooks, flattening, stream sync), per collective."
    )
    unsharded_grad_bytes_per_param: NonNegativeFloat = Field(
        default=0.0, description="Bytes per parameter of a ZeRO-3 unit's unsharded gradient (in the compute dtype) "
        "that are live beside the unit's reduce-scatter buffer when the engine copies the one into the other; 0 where "
        "it reduce-scatters from the gradient itself or accumulates into the buffer the gradients are counted as."
    )
    gather_copy_bytes_per_param: NonNegativeFloat = Field(
        description="HBM bytes moved on the compute stream per gathered parameter after each ZeRO-3 all-gather "
        "(the copy of the gathered flat buffer into the parameters' own tensors), in the critical path; 0 where "
        "the engine gathers in place or the copy is not counted."
    )


class ScheduleSection(_Sourced):
    """Which parallelisms, schedules and combinations the engine runs (search and check offer only these)."""

    tensor_parallel: bool
    sequence_parallel: bool
    context_parallel: bool
    linear_attention_cp: bool = Field(
        description="Context parallelism with Gated DeltaNet layers: their heads split over the CP ranks by an "
        "all-to-all of the mixer's input and output (Layout.cp > 1 with a model's linear_attention)."
    )
    expert_parallel: bool
    pipeline: bool
    interleaved: bool = Field(description="Interleaved (virtual-stage) 1F1B.")
    microbatch_group: bool = Field(
        default=False, description="Interleaved 1F1B with a chosen number of micro-batches per virtual stage in a "
        "row (Layout.microbatch_group_size), which frees the micro-batch count from being a multiple of pp."
    )
    uneven_virtual_stages: bool = Field(
        description="Virtual stages whose layers do not split evenly (a layout naming each chunk's layers): the "
        "search then offers v = 2, 4 and 8 wherever each virtual stage gets a pipeline unit."
    )
    tp_comm_overlap: bool = Field(
        description="Tensor-parallel collectives overlapped with the GEMMs beside them (Layout.overlap_tp_comm); "
        "the search assumes it where the engine has it."
    )
    gpipe: bool
    zero_stages: tuple[int, ...] = Field(description="ZeRO stages it implements.")
    max_zero_with_pp: int = Field(ge=0, le=3, description="Highest ZeRO stage it runs together with pp > 1.")
    recompute: tuple[RecomputeMode, ...] = Field(description="Recompute modes it can run.")
    block_recompute: bool = Field(description="Recompute of only k layers per stage (Megatron 'block').")
    pipeline_grad_reduce_overlap: bool = Field(
        description="With pp > 1 the data-parallel gradient reduction (and the gather of updated weights) overlaps "
        "the last micro-batch's backward (and the next step's first forward); else it runs after the pipeline's "
        "last step, exposed."
    )
    pipeline_grad_all_reduce: bool = Field(
        description="With pp > 1, sharded optimizer states (ZeRO-1) and fp32 gradient accumulation, the gradients "
        "are all-reduced whole before each rank steps its shard (then the updated 16-bit weights are all-gathered), "
        "not reduce-scattered."
    )


class OptimizerSection(_Sourced):
    """The optimizer's implementation, as it changes memory and step time."""

    implementation: str = Field(description="The optimizer the engine runs by default.")
    fused_step: bool = Field(description="One fused multi-tensor kernel (else a loop of per-tensor kernels).")
    state_bytes_per_param: dict[str, int] = Field(
        description="Optimizer-state bytes per parameter beyond 16-bit weights and gradients, by optimizer."
    )
    step_traffic_factor: float = Field(
        ge=1.0, description="HBM traffic of the optimizer step relative to one fused pass over its states."
    )
    bf16_moments: bool = Field(description="Adam's moments can be kept in bf16 (Layout.optimizer_state_dtype bf16).")
    bf16_master_weights: bool = Field(
        description="The 16-bit weights can be the master copy, no fp32 one (Layout.master_weights_dtype bf16)."
    )
    fp8_params: bool = Field(
        description="The layers' compute weights can be all-gathered in fp8 (Layout.fp8_param_gather)."
    )
    fp8_params_held: bool = Field(
        default=True, description="Under fp8_param_gather the layers' weights are also held in fp8 between steps "
        "(Transformer Engine's fp8 parameters); false: the held weights keep their precision and only the gathered "
        "copy is fp8, cast from each rank's shard before the all-gather (torchao's float8 FSDP all-gather), which "
        "needs the per-tensor recipe."
    )
    int8_moments: bool = Field(
        default=False,
        description="Adam's moments can be kept in bitsandbytes' 8-bit blockwise form (Layout.optimizer_state_dtype "
        "int8).",
    )
    lora: bool = Field(
        default=False,
        description="It fine-tunes with LoRA adapters on frozen base weights (Layout.lora_rank).",
    )
    muon: bool = Field(
        default=False,
        description="It runs Muon (Layout.optimizer muon): the Newton-Schulz step on the hidden matrices, Adam on the "
        "rest, as Megatron-Core's emerging optimizers do (physics.muon).",
    )
    default_grad_dtype: Literal["bf16", "fp16", "fp32"] = Field(
        description="The gradient precision it keeps when the layout does not say (estimate, search, check)."
    )
    default_state_dtype: Literal["fp32", "bf16"] = Field(
        default="fp32",
        description="The master weights' and Adam moments' dtype when the layout does not say (Layout."
        "master_weights_dtype, optimizer_state_dtype): bf16 for an engine that builds the model in bf16 and steps "
        "it with a torch optimizer, whose states take the parameters' dtype.",
    )


class OffloadSection(_Sourced):
    """What the engine can move to the host, and the CPU optimizer it runs for offloaded states."""

    optimizer: bool = Field(description="Optimizer states (fp32 master, moments) and their step on the CPU.")
    params: bool = Field(description="16-bit parameter shards on the host (ZeRO-3 / FSDP only).")
    activations: bool = Field(description="Activations of some layers moved to the host during forward.")
    cpu_optimizer: Literal["fused", "torch"] = Field(
        description="The CPU Adam it runs by default: a vectorised one (DeepSpeedCPUAdam) or torch.optim's."
    )


class MoESection(_Sourced):
    """What the engine can run of a mixture-of-experts layer's communication and structure, and what it does
    when the user says nothing (the defaults a search or an importer assumes)."""

    dispatchers: tuple[Dispatcher, ...] = Field(description="Token dispatchers it implements (Layout.moe_dispatcher).")
    default_dispatcher: Dispatcher = Field(description="The dispatcher it runs when its config names none.")
    ep_overlap: bool = Field(
        description="Expert all-to-all hidden behind another micro-batch's compute (Layout.moe_ep_overlap)."
    )
    default_ep_overlap: bool = Field(description="Whether that overlap is on when its config says nothing.")
    ep_overlap_dispatchers: tuple[Dispatcher, ...] = Field(
        description="The dispatchers that overlap runs with (empty where there is no overlap)."
    )
    ep_overlap_pipeline: Literal["any", "interleaved", "required"] = Field(
        description="What the overlap needs of the pipeline: nothing, virtual stages whenever pp > 1 (interleaved), "
        "or a pipeline (required: pp > 1)."
    )
    ep_overlap_conflicts: tuple[EpOverlapConflict, ...] = Field(
        description="Settings the engine refuses beside the overlap."
    )
    shared_expert_overlap: bool = Field(
        description="Shared experts computed beside the dispatch (Layout.moe_shared_expert_overlap)."
    )
    dispatch_wgrad_overlap: bool = Field(
        description="Without the all-to-all overlap, the routed experts' weight gradients run beside the dispatch's "
        "backward all-to-all (Layout.moe_delay_wgrad without moe_ep_overlap)."
    )
    expert_tensor_parallel: Literal["any", "one_or_tp", "tp_only"] = Field(
        description="Expert tensor-parallel degrees it runs (Layout.etp): any that divides the expert width, "
        "1 or tp only, or tp only (no separate expert TP)."
    )
    capacity_factor: bool = Field(description="Token drop at a capacity factor, padded (Layout.moe_capacity_factor).")
    mtp: bool = Field(description="Multi-token-prediction layers trained with the model (Layout.mtp_layers).")


class EfficiencySection(_Sourced):
    """Named efficiency factors of this engine."""

    nccl_compute_contention: NonNegativeFloat = Field(
        description="Share by which compute slows while a collective overlaps it (NCCL kernels hold SMs and HBM)."
    )
    dp_overlap_efficiency: float = Field(
        gt=0.0, le=1.0, description="Share of the overlap window that hides data-parallel traffic."
    )
    tp_overlap_hidden_share: float = Field(
        ge=0.0, le=1.0, description="Share of the tensor-parallel traffic that Transformer Engine's userbuffer "
        "overlap hides which this engine's TP comm overlap hides (1: as TE does)."
    )
    tp_overlap_sm_share: float = Field(
        ge=0.0, lt=1.0, description="Share of the SMs the overlapped collectives take from the row-parallel forward "
        "GEMMs they run beside (training/time.py, TP overlap)."
    )
    tp_overlap_rs_splits: int | None = Field(
        default=None, ge=1, description="Chunks the overlapped reduce-scatter splits each row-parallel forward GEMM "
        "into (each chunk its own GEMM call); None: one per TP rank, as the all-gather side always does."
    )


class CpTraffic(BaseModel):
    """HBM bytes the context-parallel attention moves outside its kernels, per element of the rank's query (q)
    and K plus V (kv) tensors, forward (fwd) and backward (bwd): the merges of partial outputs, the gradient
    accumulators, the copies and casts between kernels."""

    model_config = _STRICT

    fwd_q: NonNegativeFloat
    fwd_kv: NonNegativeFloat
    bwd_q: NonNegativeFloat
    bwd_kv: NonNegativeFloat


class ContextParallelSection(_Sourced):
    """How the engine runs attention under context parallelism (the causal sequence cut into 2 cp chunks, each
    rank holding chunks i and 2 cp - 1 - i; cp - 1 unmasked steps after the local causal one)."""

    exchange: Literal["p2p_ring", "allgather"] = Field(
        description="p2p_ring: each step's K/V arrive by a point-to-point send hidden behind the step before, "
        "dK/dV travel the ring back in the backward (Megatron-Core / Transformer Engine); allgather: one "
        "all-gather of K/V per pass, hidden behind the local causal step only, and a ring shift of the dK/dV "
        "accumulators after every backward step (torch.distributed.tensor.experimental context_parallel)."
    )
    kv_at_query_width: bool = Field(
        description="K and V are expanded to the query heads (GQA repeat) before the attention call, so they are "
        "exchanged, accumulated and copied at the query width."
    )
    grad_exchange_bytes: PositiveInt = Field(description="Bytes per element of the dK/dV sent in the backward.")
    step_kernels: NonNegativeInt = Field(
        description="Kernels each extra ring step launches (attention kernel, merges, copies, exchange), forward "
        "and backward alike, each at the fixed kernel cost."
    )
    step_traffic: CpTraffic = Field(description="Bytes per element moved by each of the cp - 1 extra steps.")
    pass_traffic: CpTraffic = Field(description="Bytes per element moved once per pass when cp > 1.")


class EngineProfile(BaseModel):
    """One training engine: kernels, ZeRO implementation, what it can run, optimizer, efficiency factors."""

    model_config = _STRICT

    name: EngineName
    description: str
    kernels: KernelSection
    zero: ZeroSection
    schedules: ScheduleSection
    optimizer: OptimizerSection
    offload: OffloadSection
    moe: MoESection
    context_parallel: ContextParallelSection
    efficiency: EfficiencySection


# ---------------------------------------------------------------------------------------------------------
# Shared source strings
_MEGATRON_FUSED = (
    "NVIDIA/Megatron-LM megatron/core/fusions/ (fused_bias_gelu, fused_bias_dropout, fused_layer_norm); the "
    "element-wise traffic in training/time.py counts these fused kernels - the calibrated baseline"
)
_EAGER_FACTOR = (
    "fitted: pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (8B FSDP on 8 H100: 5,762 tok/s eager "
    "vs 6,667 with torch.compile, 1.16x; on 128 H100 5,605 vs 6,514, 1.16x; in ../shared/reference/"
    "published_runs_modern.yaml) - the factor by which eager element-wise kernels move more bytes than the fused "
    "count, chosen (grid 2.0-3.5 in steps of 0.5) so that turning compile on gives the measured gain with op-level "
    "AC: 3.0 gives 1.158x and 1.156x (2.5 gives 1.119x, 3.5 1.198x; with the 500 W power limit's compute fraction "
    "of the h100-sxm-96gb profile, which slows the GEMMs and so shrinks the element-wise share - 2.5 before it); "
    "an eager fp32 RMSNorm, residual add and SiLU-mul each read and write their tensors in several kernels"
)
_CONTENTION = (
    "kernel_figures 7.1: NVIDIA Developer Forums 'Compute-Communication Overlap Causes Severe GEMM Performance "
    "Degradation' (H100: a concurrent 24-CTA ncclAllGather takes ~24/132 = 18% of the SMs; one-wave GEMMs "
    "lose up to 1.7x); 0.18 taken for multi-wave training GEMMs (an estimate, not a fit)"
)
_FSDP_UNIT = (
    "torch.distributed.fsdp.fully_shard applied per transformer block (pytorch/torchtitan "
    "torchtitan/models/llama3/infra/parallelize.py apply_fsdp): one all-gather and one reduce-scatter per block"
)
_FSDP_PREFETCH = (
    "FSDP2 prefetches the next unit's all-gather in forward and backward (PyTorch FSDP paper, Zhao et al. 2023, "
    "Sec. 3.3 'backward/forward prefetch'; fully_shard default): 1"
)
_FSDP2_COPY_OUT = (
    "FSDP2's foreach_all_gather_copy_out (pytorch/pytorch torch/distributed/_composable/fsdp/_fsdp_collectives.py, "
    "torch 2.5-2.6): after each unit's all-gather the current (compute) stream waits for it and "
    "split_with_sizes_copy copies the gathered bf16 flat buffer into the unsharded parameters: read 2 + write 2 "
    "bytes per parameter, on the critical path. Counted, not fitted (the copy-in of the rank's shard, 1/dp of "
    "that, runs on the all-gather copy-in stream, and the reduce-scatter's _chunk_cat on the reduce-scatter "
    "stream: both beside the compute, not counted)"
)
_MEGATRON_BUCKET = (
    "NVIDIA/Megatron-LM megatron/core/distributed/distributed_data_parallel.py: bucket_size = max(40,000,000, "
    "1,000,000 x dp) parameters by default; 40M taken"
)
_ADAM = "Rajbhandari et al. 2020 (ZeRO) Sec. 3.1: K = 12 for mixed-precision Adam; SGD with momentum 8"
_NO_CONTENTION_CALIBRATED = (
    "0.0 for ZeRO 0-2 as calibrated (benchmarks/calibrate_training.py: the fitted matmul efficiencies absorb it); "
    "ZeRO-3 traffic uses the same value"
)


_MEGATRON_CUDA_GRAPHS = (
    "Megatron-Core --cuda-graph-impl local|transformer_engine with --cuda-graph-scope attn|mlp|moe|moe_router|"
    "moe_preprocess (empty = the whole layer); NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py "
    "cuda_graph_impl / cuda_graph_scope at c1e938b0 (2026-05-13)"
)
_MEGATRON_PRECISION_AWARE = (
    "Megatron-LM --use-precision-aware-optimizer with --exp-avg-dtype / --exp-avg-sq-dtype bf16 (Transformer "
    "Engine FusedAdam; megatron/core/optimizer/optimizer_config.py at c1e938b0: adam and the distributed optimizer "
    "only) - DeepSeek-V3's recipe keeps both moments in bf16"
)
_MEGATRON_MAIN_PARAMS = (
    "Megatron-LM --main-params-dtype takes fp32 or fp16 only (megatron/training/arguments.py at c1e938b0): the "
    "optimizer always keeps its own main copy of the weights"
)
_MEGATRON_DISPATCHERS = (
    "Megatron-Core --moe-token-dispatcher-type allgather|alltoall|flex, the flex dispatcher with "
    "--moe-flex-dispatcher-backend deepep|hybridep (older releases: --moe-enable-deepep); NVIDIA/Megatron-LM "
    "megatron/core/transformer/transformer_config.py at c1e938b0 (2026-05-13)"
)

_SHARDED_GRADS_REDUCE_EVERY_BACKWARD = (
    "a rank that keeps only its gradient shard cannot wait for the accumulation boundary: 'for zero stage 2 "
    "(and 3), gradient reduction is required after every backward because of gradient partitioning' "
    "(deepspeedai/DeepSpeed#2252, maintainer's answer); Megatron-Core's FSDP optim_grads and FSDP2's "
    "reshard-free mode shard the gradients the same way"
)

# torch async TP's share, solved by benchmarks/calibrate_torch_async_tp.py (see the torchtitan profile).
TORCH_ASYNC_TP_HIDDEN_SHARE = 0.36

_MEGATRON = EngineProfile(
    name="megatron",
    description="Megatron-LM / Megatron-Core: fused kernels, distributed optimizer, (interleaved) 1F1B, TP/SP/CP/EP; "
    "the calibrated default (planner's behaviour before engines were inputs).",
    kernels=KernelSection(
        fused_elementwise=True, supports_compile=False, eager_elementwise_traffic_factor=1.0, loss_bytes_per_logit=6.0,
        attention_kernel="fused", cuda_graphs=True, fp8_proj_keeps_cast_input=False, fp8_tp_all_gather=False,
        tp_overlap_with_mla=False, fp8_attention=True, moe_fused_mlp=True, nvfp4=True, scaled_rotary_unfused=True,
        sources={
            "compiled_loss_bytes_per_logit": "Megatron-LM has no torch.compile switch; its loss is the fused "
            "vocab-parallel cross-entropy of loss_bytes_per_logit",
            "fp8_rowwise": "Transformer Engine's recipes scale per tensor, per 32 elements or per 1 x 128 block "
            "(DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling, Float8BlockScaling); no per-row recipe",
            "fp8_weight_cast_cached": "Transformer Engine's modules quantize a weight on the step's first micro-batch "
            "and reuse the fp8 copy (is_first_microbatch; Megatron-Core passes it from the schedules: "
            "megatron/core/extensions/transformer_engine.py @ d98e8a64)",
            "separate_projections": "Megatron-Core builds the query, key and value projections as one linear_qkv and a "
            "gated MLP's gate and up projections as one linear_fc1 (megatron/core/transformer/attention.py "
            "SelfAttention, megatron/core/transformer/mlp.py MLP @ d98e8a64)",
            "scaled_rotary_unfused": "Megatron-Core apply_rotary_pos_emb (megatron/core/models/common/embeddings/"
            "rope_utils.py @ d98e8a64) takes the unfused path when mscale != 1 ('not supported by TE's fused RoPE'), "
            "and Attention passes YaRN's concentration factor as mscale; since commit 987395813b (2025-11-22, "
            "cherry-picked to core_dev_r0.15.0 at 0d8e0714, the Megatron-LM of Megatron-Bridge v0.2.1). MLA's "
            "rotary has fused kernels of its own (physics.rotary)",
            "nvfp4": "Megatron-LM --fp4-format e2m1 --fp4-recipe nvfp4 (megatron/core/transformer/transformer_config.py "
            "@ d98e8a64: Transformer Engine's NVFP4BlockScaling recipe through fp8_autocast, megatron/core/fp4_utils.py; "
            "Megatron-Bridge mixed_precision bf16_with_nvfp4_mixed)",
            "moe_fused_mlp": "Megatron-Core's TEGroupedMLP builds the experts from Transformer Engine ops under "
            "--use-transformer-engine-op-fuser (megatron/core/transformer/moe/experts.py @ d98e8a64), and Transformer "
            "Engine's fuser replaces GroupedLinear + gated activation + GroupedLinear by its CuTe DSL grouped MLP when "
            "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 under an MXFP8 recipe (transformer_engine/pytorch/ops/fused/"
            "grouped_mlp.py @ d0067d0); Megatron-Bridge's 26.06+ MoE recipes set both (cutedsl_fused_grouped_mlp)",
            "fp8_attention": "Megatron-LM --fp8-dot-product-attention (Megatron-Bridge mixed_precision."
            "fp8_dot_product_attention) sets the fp8 recipe's fp8_dpa, and Transformer Engine's DotProductAttention "
            "then runs FusedAttnFunc on quantized Q, K, V (NVIDIA/TransformerEngine transformer_engine/pytorch/"
            "attention/dot_product_attention/backends.py @ d0067d0)",
            "tp_overlap_with_mla": "Megatron-Core megatron/core/extensions/transformer_engine.py @ d98e8a64 (TELinear): "
            "a TE linear whose userbuffer name is not qkv, proj, fc1 or fc2 sets config.tp_comm_overlap = False "
            "('Disabling TP communication overlap for this layer'); MLA's q_down_proj, kv_down_proj, q_up_proj and "
            "kv_up_proj (multi_latent_attention.py) are such layers, and the TransformerConfig they change is the "
            "one every layer shares (only the first layer's output projection on each pipeline rank, built before "
            "them, keeps its overlap: one GEMM of the stage, not counted)",
            "fp8_tp_all_gather": "counted in 16-bit (Transformer Engine's fp8 gathers under sequence parallelism are "
            "not examined here; the TP terms were calibrated this way)",
            "cuda_graphs": _MEGATRON_CUDA_GRAPHS,
            "fp8_proj_keeps_cast_input": "Megatron-Core megatron/core/transformer/attention.py @ d98e8a64 (since "
            "781e765, 2025-08): with an fp8 recipe other than delayed and Transformer Engine >= 2.6 the attention "
            "sets linear_proj to save its original input, as 'the output of the fused core_attn is saved by itself, "
            "and linear_proj also saves the quantized tensor of this output'; one bf16 copy. (The delayed recipe "
            "keeps both: training/memory.py counts the cast copy for every layout whose fp8_recipe is delayed.)",
            "attention_kernel": "Megatron-Core's TEDotProductAttention: Transformer Engine picks cuDNN fused attention "
            "on Hopper (NVIDIA/TransformerEngine docs, attention backend selection)",
            "loss_bytes_per_logit": "training/memory.py LOSS_PEAK_BYTES_PER_LOGIT: at the loss's backward the fp32 "
            "softmax kept for it (4, Korthikanti et al. 2022 Sec. 4.3's 4sbv/t) and the bf16 logit gradient written "
            "from it (2); Megatron-Core's vocab-parallel cross entropy works in place: 6",
            "fused_elementwise": _MEGATRON_FUSED,
            "supports_compile": "Megatron-LM has no torch.compile switch for the model (fusions are hand-written)",
            "eager_elementwise_traffic_factor": "unused when fused_elementwise is true; 1.0",
            "activation_clamp_fused": "Megatron-Core's weighted_bias_quick_geglu_impl (the gpt-oss experts' "
            "activation) clamps outside its jit-fused function: chunk, two clamps and torch.cat (NVIDIA/Megatron-LM "
            "core_v0.15.0 megatron/core/fusions/fused_bias_geglu.py)",
        },
    ),
    zero=ZeroSection(
        collectives_per_layer=1, prefetch_units=1, prefetch_bucket_params=None, reshard_after_forward=True,
        regather_for_recompute=False, reduce_in_fp32=False, grad_reduce_every_micro_batch=True,
        reduce_bucket_params=40_000_000, supports_hsdp=True, collective_overhead_seconds=0.0,
        gather_copy_bytes_per_param=0.0,
        sources={
            "unsharded_grad_bytes_per_param": "Megatron-Core's FSDP and distributed optimizer accumulate the "
            "gradients into their contiguous grad buffer and reduce-scatter from it (counted as the gradients)",
            "gather_copy_bytes_per_param": "not counted for Megatron-Core's custom FSDP (its gather path is not "
            "examined here): 0",
            "collectives_per_layer": "Megatron-Core custom FSDP (--use-custom-fsdp, data_parallel_sharding_strategy "
            "optim_grads_params) shards per transformer layer: megatron/core/distributed/custom_fsdp/",
            "prefetch_units": "Megatron-Core custom FSDP prefetches the next layer's parameters: 1",
            "prefetch_bucket_params": "prefetch counted in units: null",
            "reshard_after_forward": "optim_grads_params frees the gathered parameters after forward (ZeRO-3 semantics)",
            "regather_for_recompute": "recompute runs inside the layer's backward, after its gather: no extra gather",
            "reduce_in_fp32": "the gradient dtype of the layout decides (--grad-reduce-in-bf16 / fp32 main grads)",
            "grad_reduce_every_micro_batch": _SHARDED_GRADS_REDUCE_EVERY_BACKWARD,
            "reduce_bucket_params": _MEGATRON_BUCKET,
            "supports_hsdp": "Megatron-Core --num-distributed-optimizer-instances (partial sharding) / custom FSDP HSDP",
            "collective_overhead_seconds": "no host-side overhead beyond NCCL's own latency assumed (calibrated default)",
        },
    ),
    schedules=ScheduleSection(
        tensor_parallel=True, sequence_parallel=True, context_parallel=True, linear_attention_cp=True,
        expert_parallel=True, pipeline=True,
        interleaved=True, tp_comm_overlap=True, gpipe=True, zero_stages=(0, 1, 2, 3), max_zero_with_pp=3,
        recompute=("none", "selective", "full", "modules"), block_recompute=True, uneven_virtual_stages=True,
        pipeline_grad_reduce_overlap=True, pipeline_grad_all_reduce=False, microbatch_group=True,
        sources={
            "microbatch_group": "--microbatch-group-size-per-virtual-pipeline-stage (Megatron-Core since 2024-11, "
            "ADLR/megatron-lm!2117 'tunable schedule with overlapping'; schedules.py "
            "forward_backward_pipelining_with_interleaving @ d98e8a64); Megatron-Bridge's GLM-5 GB200 recipe sets 6",
            "tp_comm_overlap": "--tp-comm-overlap: Transformer Engine userbuffers split the SP all-gathers and "
            "reduce-scatters into chunks run beside the GEMMs (Megatron-Core model_parallel_config.py "
            "tp_comm_overlap; needs --sequence-parallel); the NeMo and Megatron-Bridge recipes of large dense models "
            "turn it on",
            "tensor_parallel": "Shoeybi et al. 2019; --tensor-model-parallel-size",
            "sequence_parallel": "Korthikanti et al. 2022; --sequence-parallel",
            "context_parallel": "Megatron-Core --context-parallel-size",
            "linear_attention_cp": "NVIDIA/Megatron-LM 20ba03fe ('Gated delta net context parallel (CP)', #2642, "
            "2026-04): GatedDeltaNet all-to-alls its in_proj output from sequence to head sharding over the CP group "
            "and its gated norm's output back before out_proj (megatron/core/ssm/gated_delta_net/common.py "
            "a2a_cp_to_hp, a2a_hp_to_cp @ d98e8a64)",
            "expert_parallel": "Megatron-Core --expert-model-parallel-size",
            "pipeline": "Narayanan et al. 2021; --pipeline-model-parallel-size",
            "interleaved": "Narayanan et al. 2021 Sec. 2.2.2; --num-layers-per-virtual-pipeline-stage",
            "uneven_virtual_stages": "--pipeline-model-parallel-layout names each virtual stage's layers "
            "(megatron/training/arguments.py @ d98e8a64 takes the virtual pipeline size from its stage count); "
            "Megatron-Bridge's DeepSeek-V3 recipes run its 61 layers at pp 4 x vp 4, pp 2 x vp 8 and pp 8 x vp 2 "
            "(benchmarks/data/megatron_bridge_26.yaml)",
            "gpipe": "kept as before (planner's default space never proposes gpipe; a layout may name it)",
            "zero_stages": "distributed optimizer (ZeRO-1), custom FSDP optim_grads (2) and optim_grads_params (3)",
            "max_zero_with_pp": "as before engines were inputs: every stage accepted with pp > 1",
            "recompute": "--recompute-granularity selective|full, --recompute-modules (Megatron-Core)",
            "block_recompute": "--recompute-method block --recompute-num-layers k",
            "pipeline_grad_reduce_overlap": "--overlap-grad-reduce: Megatron-Core's DDP buckets reduce as the last "
            "micro-batch's backward fills them, with pp > 1 too (finalize_model_grads waits for them)",
            "pipeline_grad_all_reduce": "the distributed optimizer reduce-scatters into each rank's shard "
            "(megatron/core/distributed/param_and_grad_buffer.py), with pp > 1 as without",
        },
    ),
    optimizer=OptimizerSection(
        implementation="Megatron distributed optimizer (fp32 main params, Adam states sharded over DP)",
        fused_step=True, state_bytes_per_param={"adam": 12, "sgd": 8}, step_traffic_factor=1.0,
        bf16_moments=True, bf16_master_weights=False, fp8_params=True, default_grad_dtype="fp32", muon=True, lora=True,
        sources={
            "lora": "Megatron-Bridge's PEFT (src/megatron/bridge/peft/lora.py: LoRA on linear_qkv, linear_proj, linear_fc1, "
            "linear_fc2, the base weights frozen) on Megatron-Core; Megatron-LM's own pretrain_gpt.py has none",
            "int8_moments": "Megatron's precision-aware optimizer (Transformer Engine's FusedAdam) keeps the moments "
            "in fp32, fp16, bf16 or fp8 (megatron/training/arguments.py @ d98e8a64, --exp-avg-dtype), not in "
            "bitsandbytes' 8-bit form",
            "muon": "Megatron-LM --optimizer muon (megatron/core/optimizer/emerging_optimizers.py @ d98e8a64: "
            "TensorParallelMuon on NVIDIA-NeMo/Emerging-Optimizers, non-matrix and embedding parameters on Adam; "
            "with --use-distributed-optimizer the LayerWiseDistributedOptimizer of layer_wise_optimizer.py), as the "
            "Megatron-Bridge Kimi-K2 recipe runs it (optimizer 'dist_muon')",
            "default_state_dtype": "fp32: the engines' mixed-precision optimizers keep an fp32 master copy and fp32 "
            "moments unless told otherwise (Megatron's distributed optimizer, FSDP2 over fp32 parameters, DeepSpeed's "
            "ZeRO optimizers)",
            "default_grad_dtype": "Megatron-LM megatron/training/arguments.py: 'bfloat16 requires gradient "
            "accumulation and all-reduce to be done in fp32' - --bf16 turns on accumulate_allreduce_grads_in_fp32 "
            "(fp32 main grads) unless --grad-reduce-in-bf16 is given; NeMo's Megatron recipes keep fp32 main grads",
            "bf16_moments": _MEGATRON_PRECISION_AWARE,
            "bf16_master_weights": _MEGATRON_MAIN_PARAMS,
            "fp8_params": "Megatron-LM --fp8-param-gather (megatron/training/arguments.py: Transformer Engine fp8 "
            "compute parameters, with the distributed optimizer or FSDP)",
            "fp8_params_held": "--fp8-param-gather keeps the compute parameters themselves as Transformer Engine fp8 "
            "tensors (fp8_model_init), the fp32 main parameters in the optimizer",
            "implementation": "megatron/core/optimizer/distrib_optimizer.py",
            "fused_step": "Apex / Transformer Engine FusedAdam multi-tensor apply",
            "state_bytes_per_param": _ADAM,
            "step_traffic_factor": "one fused pass over the states (the calibrated optimizer model): 1.0",
        },
    ),
    offload=OffloadSection(
        optimizer=True, params=False, activations=True, cpu_optimizer="torch",
        sources={
            "optimizer": "Megatron-Core --optimizer-cpu-offload (megatron/core/optimizer/cpu_offloading/, "
            "HybridDeviceOptimizer)",
            "params": "Megatron-Core keeps parameters on the GPU",
            "activations": "Megatron-Core --cpu-offloading-num-layers (Transformer Engine CPU offload)",
            "cpu_optimizer": "HybridDeviceOptimizer steps torch.optim AdamW on the CPU part",
        },
    ),
    moe=MoESection(
        dispatchers=("alltoall", "allgather", "deepep", "hybridep"), default_dispatcher="allgather",
        ep_overlap=True, default_ep_overlap=False, ep_overlap_dispatchers=("alltoall", "deepep", "hybridep"),
        ep_overlap_pipeline="interleaved",
        ep_overlap_conflicts=("shared_expert_overlap", "moe_graphs", "mtp_over_one", "full_recompute", "moe_recompute"),
        shared_expert_overlap=True, dispatch_wgrad_overlap=True, expert_tensor_parallel="any", capacity_factor=True,
        mtp=True,
        sources={
            "dispatch_wgrad_overlap": "Megatron-Core --overlap-dispatch-backward-with-experts-wgrad "
            "(model_parallel_config.py overlap_dispatch_backward_with_experts_wgrad, d98e8a64; Megatron-LM PR #3795): "
            "moe_layer.py _RegisterDelayedWgradForExperts runs the TE grouped GEMMs' weight gradients on a side stream "
            "once their data gradients are done, beside the dispatch's backward all-to-all; transformer_config.py "
            "asserts it off with overlap_moe_expert_parallel_comm, where --delay-wgrad-compute does the same inside "
            "the 1F1B pair",
            "ep_overlap_pipeline": "Megatron-Core transformer_config.py (d98e8a64) asserts that the EP A2A overlap "
            "with pipeline_model_parallel_size > 1 has virtual_pipeline_model_parallel_size set, and "
            "megatron/training/arguments.py turns a virtual pipeline size of 1 into None",
            "ep_overlap_conflicts": "Megatron-Core transformer_config.py (d98e8a64) asserts against each beside "
            "overlap_moe_expert_parallel_comm: shared-expert overlap, more than one MTP layer, a transformer_engine "
            "CUDA graph over moe or mlp, full recompute (and a recompute method or layer count), moe among the "
            "recompute modules; the recompute path of the dev branch (PR #5841, #6311), which docs/cost-model.md "
            "12.8 costs, is not on main",
            "ep_overlap_dispatchers": "transformer_config.py (c1e938b0) asserts 'overlap_moe_expert_parallel_comm is "
            "supported with alltoall/flex token dispatcher'",
            "dispatchers": _MEGATRON_DISPATCHERS,
            "default_dispatcher": "NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py (c1e938b0, "
            "2026-05-13): moe_token_dispatcher_type = \"allgather\", which --moe-token-dispatcher-type takes as its "
            "default (megatron/training/arguments.py builds the flag from TransformerConfig); recipes set their own "
            "(the Megatron-Bridge rows of published_runs_moe.yaml run alltoall or flex/DeepEP)",
            "ep_overlap": "Megatron-Core --overlap-moe-expert-parallel-comm (model_parallel_config.py "
            "overlap_moe_expert_parallel_comm, c1e938b0): 1F1B batch-level overlap of one micro-batch's dispatch/"
            "combine with another's compute; needs ep > 1, the alltoall or flex dispatcher, no full recompute, and "
            "virtual pipeline stages when pp > 1 (transformer_config.py __post_init__)",
            "default_ep_overlap": "overlap_moe_expert_parallel_comm = False (model_parallel_config.py, c1e938b0)",
            "shared_expert_overlap": "Megatron-Core --moe-shared-expert-overlap (transformer_config.py, c1e938b0): "
            "alltoall or flex dispatcher only",
            "expert_tensor_parallel": "Megatron-Core --expert-tensor-parallel-size (model_parallel_config.py "
            "expert_tensor_parallel_size, null = tp; MoE parallel folding, Liu et al. 2025 arXiv:2504.14960)",
            "capacity_factor": "Megatron-Core --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity "
            "(transformer_config.py, c1e938b0); not with the flex dispatcher's DeepEP backend",
            "mtp": "Megatron-Core --mtp-num-layers (transformer_config.py mtp_num_layers, c1e938b0)",
        },
    ),
    context_parallel=ContextParallelSection(
        exchange="p2p_ring", kv_at_query_width=False, grad_exchange_bytes=2, step_kernels=4,
        step_traffic=CpTraffic(fwd_q=10.0, fwd_kv=0.0, bwd_q=10.0, bwd_kv=10.0),
        pass_traffic=CpTraffic(fwd_q=0.0, fwd_kv=0.0, bwd_q=0.0, bwd_kv=0.0),
        sources={
            "exchange": "Megatron-Core --cp-comm-type p2p (the default): Transformer Engine's AttnFuncWithCPAndKVP2P "
            "(NVIDIA/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/"
            "context_parallel.py) sends each step's K/V to the next rank while the step computes",
            "kv_at_query_width": "Transformer Engine's fused attention takes GQA K/V at their own head count",
            "grad_exchange_bytes": "the backward passes K/V again plus dK/dV, twice the forward's bytes at 16 bits: "
            "planner's ring model before engines had a CP section (kept; not re-examined)",
            "step_kernels": "per extra step the attention kernel, the two merges of the partial result "
            "(flash_attn_fwd_softmax_lse_correction and flash_attn_fwd_out_correction in the forward; the dQ and "
            "dK/dV accumulations in the backward) and the exchange (flash_attn_p2p_communicate), context_parallel.py: "
            "4. Counted, not fitted",
            "step_traffic": "forward: read the step's bf16 partial output (2), read and write the fp32 running output "
            "(4 + 4), rescaled by the log-sum-exps: 10 per query element; backward: the same for the dQ and the "
            "dK, dV accumulators, which AttnFuncWithCPAndKVP2P keeps in fp32: 10 per query and per K/V element. "
            "Counted, not fitted",
            "pass_traffic": "the fused correction kernels work in place on the accumulators: nothing once per pass",
        },
    ),
    efficiency=EfficiencySection(
        nccl_compute_contention=0.0, dp_overlap_efficiency=1.0, tp_overlap_hidden_share=1.0,
        tp_overlap_sm_share=16.0 / 132.0, tp_overlap_rs_splits=4,
        sources={
            "tp_overlap_rs_splits": "Transformer Engine's default userbuffer methods (transformer_engine/pytorch/"
            "module/base.py @ d0067d0, initialize_ub): proj_fprop and fc2_fprop 'pipeline' with num_splits 4; "
            "qkv_fprop, fc1_fprop, proj_dgrad and fc2_dgrad 'ring_exchange' with num_splits = tp",
            "nccl_compute_contention": _NO_CONTENTION_CALIBRATED,
            "dp_overlap_efficiency": "benchmarks/calibrate_training.py on the published runs (grid 0.5-1.0): 1.0",
            "tp_overlap_hidden_share": "Transformer Engine userbuffers are the reference the overlap model "
            "describes (training/time.py layer_time: all but the last chunk of each forward reduce-scatter hidden): "
            "1.0",
            "tp_overlap_sm_share": "the pipelined reduce-scatter after proj_fprop and fc2_fprop takes 16 SMs with "
            "set_sm_margin in TE's default userbuffer config (transformer_engine/pytorch/module/base.py @ d0067d0, "
            "initialize_ub) and 8-24 in the Megatron-Bridge tuned configs (src/megatron/bridge/training/"
            "comm_overlap.py): 16 of the H100's 132",
        },
    ),
)


def _derive(base: EngineProfile, name: str, description: str, **sections: dict[str, object]) -> EngineProfile:
    """`base` with some fields of some sections replaced; each replaced field brings its own source."""
    data = base.model_dump()
    data["name"] = name
    data["description"] = description
    for section, changes in sections.items():
        sources = dict(changes.pop("sources", {}))  # type: ignore[call-overload]
        data[section].update(changes)
        data[section]["sources"].update(sources)
    return EngineProfile.model_validate(data)


_NEMO = _derive(
    _MEGATRON, "nemo",
    "NeMo (Megatron-Core underneath, Transformer Engine kernels) with Apex DistributedFusedAdam, which shards "
    "optimizer states and gradients (ZeRO-2) - the NeMo 24.07 recipes.",
    optimizer={
        "implementation": "Apex DistributedFusedAdam (optimizer states and gradients sharded over DP)",
        "bf16_master_weights": True, "muon": False, "lora": True,
        "sources": {"muon": "NeMo 24.07's Megatron-Core predates Megatron's emerging optimizers (Muon); newer NeMo "
                    "runs Megatron-Bridge: engine megatron",
                    "lora": "NeMo 2's PEFT (nemo/collections/llm/peft/lora.py: LoRA adapters on Megatron-Core's linear "
                    "layers, the base model frozen)",
                    "int8_moments": "Apex DistributedFusedAdam keeps its state in optim.dtype (fp32, fp16 or bf16), not "
                    "in bitsandbytes' 8-bit form",
                    "implementation": "NeMo 24.07 recipes, optim.name distributed_fused_adam (published_runs_modern.yaml notes)",
                    "bf16_master_weights": "Apex DistributedFusedAdam keeps its state in optim.dtype; NeMo sets "
                    "store_params False (no master copy) when that dtype is the model's (NVIDIA/NeMo "
                    "nemo/collections/nlp/models/language_modeling/megatron_base_model.py @ 4c73f77670, "
                    "setup_optimization), as the Nemotron-4 340B recipe's optim.dtype bf16 does",
                    "bf16_moments": "Apex DistributedFusedAdam optim.dtype bf16 (NVIDIA/apex "
                    "apex/contrib/optimizers/distributed_fused_adam.py @ f9f19d5: 'dtype: datatype for optimizer state')"},
    },
    kernels={
        "fp8_proj_keeps_cast_input": True, "nvfp4": False, "scaled_rotary_unfused": False,
        "sources": {"scaled_rotary_unfused": "NeMo 24.07's Megatron-Core predates the mscale fallback to the unfused "
                    "rotary (NVIDIA/Megatron-LM 987395813b, 2025-11-22); newer NeMo runs Megatron-Bridge: engine "
                    "megatron",
                    "nvfp4": "NeMo 24.07's Transformer Engine (1.x) predates the NVFP4 recipe (Transformer Engine "
                    ">= 2.7, megatron/core/transformer/transformer_config.py @ d98e8a64); newer NeMo runs "
                    "Megatron-Bridge: engine megatron",
                    "fp8_proj_keeps_cast_input": "NeMo 24.07 runs Transformer Engine's delayed scaling (fp8_hybrid, "
                    "amax history 1024: NeMo-Framework-Launcher conf/training/* @ 24.07) on a Megatron-Core from before "
                    "linear_proj saved its original input (781e765, 2025-08): TE's Linear keeps its fp8 input and "
                    "FusedAttnFunc its bf16 output (NVIDIA/TransformerEngine transformer_engine/pytorch/attention/"
                    "dot_product_attention/backends.py @ d0067d0: f16_tensors = (q, k, v, out_f16))"},
    },
    zero={
        "grad_reduce_every_micro_batch": False,
        "sources": {"grad_reduce_every_micro_batch": "NeMo's fwd_bwd_step hands the pipeline schedule "
                    "no_sync_func = partial(self._optimizer.no_sync, ...) with distributed Adam (NVIDIA/NeMo "
                    "nemo/collections/nlp/models/language_modeling/megatron_gpt_model.py): the micro-batches before "
                    "the last accumulate locally and the gradients are reduce-scattered once per step"},
    },
    schedules={
        "linear_attention_cp": False, "uneven_virtual_stages": False, "microbatch_group": False,
        "zero_stages": (0, 1, 2, 3),
        "sources": {"linear_attention_cp": "NeMo 24.07's Megatron-Core predates Gated DeltaNet and its context "
                    "parallelism (NVIDIA/Megatron-LM 20ba03fe, 2026-04)",
                    "microbatch_group": "NeMo 24.07's Megatron-Core (r0.8) predates the micro-batch group size per "
                    "virtual stage (ADLR/megatron-lm!2117, 2024-11): groups of pp",
                    "uneven_virtual_stages": "NeMo 24.07's launcher sets the virtual pipeline size, which Megatron-Core "
                    "splits evenly (megatron/training/arguments.py asserts the stage's layers divide by the virtual "
                    "stage's); its configs name no per-chunk layout",
                    "zero_stages": "Megatron-Core distributed optimizer (1), Apex DistributedFusedAdam (2), "
                    "NeMo 2 FSDP strategy (3)"},
    },
)

_TORCH_LOSS = (
    "pytorch/torchtitan train.py at 9dec370: loss_fn = cross_entropy(pred.flatten(0, 1).float(), labels), eager also "
    "under --training.compile ('compiling loss function causes CUDA errors, turning off for now'), and `del pred` "
    "before backward. The forward holds the bf16 logits (2), their fp32 copy (4) and log_softmax's fp32 output (4), "
    "10; at log_softmax's backward the saved fp32 output (4), nll_loss's fp32 gradient of it (4, a new [N, V] "
    "tensor) and the new fp32 gradient of the logits (4) are live at once: 12 bytes per logit, the peak "
    "(benchmarks/torch_loss_peak.py tracks every storage through forward and backward: torch 2.13 CPU, 10.06 "
    "forward, 12.06 backward at aten._log_softmax_backward_data). Not counted: the bf16 logits' freed block (2 "
    "more), which PyTorch's caching allocator keeps reserved while the device has room (it cannot serve the fp32 "
    "request) and releases when an allocation would fail, so it shows in torchtitan's reserved peak of the 8K rows "
    "but is not needed to fit (docs/engines.md)"
)
_TORCH_COMPILED_LOSS = (
    "torch.compile of the same cross_entropy(pred.float(), labels) (torchtitan components/loss.py @ 820504e: "
    "build_cross_entropy_loss compiles it under training.compile; [compile] components 'loss' in v0.2 and main): "
    "AOTAutograd with Inductor's decompositions and min-cut partitioner saves for the backward the bf16 logits and "
    "two fp32 values per row (the max and the log-sum-exp) and recomputes the softmax there, writing the bf16 "
    "gradient of the logits in the same fused kernels (benchmarks/torch_compiled_loss_saved.py, torch 2.13 CPU: the "
    "forward graph's saved outputs). Peak: the bf16 logits and their bf16 gradient, 2 + 2 = 4 bytes per logit. "
    "Hugging Face models compute the same loss inside their compiled forward"
)
_SDPA_FLASH2 = (
    "torch.nn.functional.scaled_dot_product_attention dispatches its FlashAttention-2 backend on H100: cuDNN "
    "attention was made opt-in, lowest precedence (pytorch/pytorch#138522, Oct 2024, torch 2.5); torchtitan on H100 "
    "dispatches SDPBackend.FLASH_ATTENTION and gains ~10% end to end by forcing cuDNN (pytorch/torchtitan#1042, "
    "Llama 3 8B, seq 8192)"
)
_TORCHAO_FP8_INPUT = (
    "torchao Float8Linear, tensorwise scaling (torchao/float8/float8_linear.py @ 4f8021f, 2024-12: "
    "manual_float8_matmul_with_args_in_float8 saves input_fp8), while scaled_dot_product_attention's flash backward "
    "keeps its bf16 output: wo's input is held twice"
)
_TORCH_EAGER_SOURCES: dict[str, str] = {
    "scaled_rotary_unfused": "torch models apply the rotary as element-wise ops of their own (eager, counted by "
    "eager_elementwise_traffic_factor; fused under torch.compile), YaRN's factor folded into the cos and sin tables "
    "(transformers' rotary embeddings multiply them by attention_scaling once): nothing more",
    "fp8_proj_keeps_cast_input": _TORCHAO_FP8_INPUT,
    "tp_overlap_with_mla": "torch's async TP (torch._inductor micro_pipeline_tp_pass) fuses every all-gather -> "
    "matmul and matmul -> reduce-scatter pattern of the compiled graph, whatever the projection",
    "cuda_graphs": "torchtitan's TOML job config (v0.1 - v0.2.x, last at 238fa995) has no CUDA-graph setting",
    "attention_kernel": _SDPA_FLASH2,
    "loss_bytes_per_logit": _TORCH_LOSS,
    "fused_elementwise": "PyTorch eager modules: RMSNorm, residual add, SiLU x up each a separate kernel",
    "supports_compile": "torchtitan [compile] enable / torch.compile per block (`--compile` here)",
    "eager_elementwise_traffic_factor": _EAGER_FACTOR,
    "fp8_attention": "torchao's float8 training converts nn.Linear modules only; scaled_dot_product_attention "
    "stays 16-bit (torchao/float8/float8_linear_utils.py convert_to_float8_training)",
    "moe_fused_mlp": "torch engines run the experts as torch grouped matmuls (torch._grouped_mm) with the activation "
    "a kernel of its own; Transformer Engine's op fuser is not in their model code",
    "nvfp4": "NVFP4 training is not read for torch engines (torchtitan's NVFP4 converters are refused by its reader); "
    "Transformer Engine's NVFP4 recipe is Megatron's",
    "compiled_loss_bytes_per_logit": _TORCH_COMPILED_LOSS,
    "separate_projections": "torchtitan's Llama and Qwen attention hold wq, wk, wv and the feed-forward w1, w3 as "
    "nn.Linear modules of their own (pytorch/torchtitan torchtitan/models/llama3/model/model.py @ 820504e, Attention "
    "and FeedForward), as Hugging Face's models hold q_proj, k_proj, v_proj, gate_proj and up_proj (transformers "
    "models/llama/modeling_llama.py; NVIDIA-NeMo/Automodel nemo_automodel/components/models/llama/model.py @ 36044ad3: "
    "'separate q_proj/k_proj/v_proj and gate_proj/up_proj (HF-style)'); torch.compile does not merge matmuls",
}
_TORCH_EAGER = {
    "fused_elementwise": False, "supports_compile": True, "eager_elementwise_traffic_factor": 3.0,
    "loss_bytes_per_logit": 12.0, "attention_kernel": "flash2", "cuda_graphs": False,
    "fp8_proj_keeps_cast_input": True, "tp_overlap_with_mla": True, "fp8_attention": False, "moe_fused_mlp": False,
    "nvfp4": False, "scaled_rotary_unfused": False, "separate_projections": True, "compiled_loss_bytes_per_logit": 4.0,
    "sources": _TORCH_EAGER_SOURCES,
}

_TORCH_CP = (
    "torch.distributed.tensor.experimental._attention (torch 2.6.0, git 2236df1, the release nearest the benchmark's "
    "torch 1963fc8 of 2024-12-23): _templated_ring_attention / _templated_ring_attention_backward, round-robin load "
    "balancing, SDPA flash or efficient kernels per step"
)

_TORCH_PP_FSDP = (
    "torch pipelining with FSDP2 runs as ZeRO-1: every backward but a step's last sets set_reshard_after_backward("
    "False) and set_requires_gradient_sync(False) on the stage's FSDP module, so its parameters stay gathered and "
    "its gradients accumulate unsharded across the micro-batches, with one all-gather and one reduce-scatter per "
    "step (pytorch/pytorch torch/distributed/pipelining/stage.py, backward_maybe_with_nosync); the sharded "
    "optimizer states are ZeRO-1's. A pp > 1 layout says zero 1 (the readers map FSDP under PP to it)"
)

_TORCHAO_FP8_ALL_GATHER = (
    "torchtitan's float8 converter with enable_fsdp_float8_all_gather ([float8] in 2025 TOMLs, [training] in 2024, "
    "[quantize.linear.float8] in v0.2; torchtitan/components/quantization/float8.py before 6348d93d1): torchao's "
    "Float8LinearConfig(enable_fsdp_float8_all_gather) where FSDP shards (dp_shard > 1), the per-tensor recipe only "
    "(torchao/float8/config.py asserts it; torchtitan refuses it beside a recipe_name); removed from torchtitan main "
    "with the tensorwise recipe (6348d93d1, 2026-04)"
)

_TORCHTITAN_BF16 = (
    "torchtitan [training] dtype = \"bfloat16\": 'all parameters, gradients, and optimizer states in bfloat16, "
    "without an extra copy of fp32 weights' (torchtitan/config/job_config.py, 238fa995): bf16 moments and bf16 "
    "master weights together"
)

_TORCHTITAN = _derive(
    _MEGATRON, "torchtitan",
    "torchtitan: FSDP2 per transformer block, TP/SP (DTensor), CP, PP schedules including interleaved 1F1B, "
    "selective op-level or full AC, optional torch.compile.",
    offload={
        "optimizer": True, "params": True, "activations": False, "cpu_optimizer": "torch",
        "sources": {
            "optimizer": "torchtitan [training] enable_cpu_offload: FSDP2 OffloadPolicy (parameters, gradients and "
            "the optimizer step on the CPU)",
            "params": "FSDP2 CPUOffloadPolicy",
            "activations": "no activation offload in torchtitan's config",
            "cpu_optimizer": "torch.optim AdamW steps the CPU parameters",
        },
    },
    kernels=dict(_TORCH_EAGER, fp8_tp_all_gather=True, fp8_rowwise=True, fp8_weight_cast_cached=False, sources={
        **_TORCH_EAGER_SOURCES, "fp8_weight_cast_cached": (
            "torchao's Float8Linear casts the weight in every forward and casts it again in the backward "
            "(matmul_with_hp_or_float8_args, pytorch/ao torchao/float8/float8_linear.py @ 36027d82): no cache across "
            "micro-batches; under the float8 all-gather the gathered weight arrives in fp8"), "fp8_rowwise": (
        "torchtitan [float8] recipe_name 'rowwise' (torchtitan/config_manager.py @ 820504e; [quantize.linear.float8] "
        "in v0.2): torchao's Float8LinearConfig.from_recipe_name, axiswise scales for the input, the weight and the "
        "output gradient"), "fp8_tp_all_gather": (
        "torchtitan apply_tp with Float8 on (torchtitan/parallelisms/parallelize_llama.py at 9dec370) uses torchao's "
        "Float8ColwiseParallel, Float8RowwiseParallel and PrepareFloat8ModuleInput (torchao/float8/"
        "float8_tensor_parallel.py at eab345c): the attention and feed-forward inputs are cast to float8 before the "
        "Shard(1) -> Replicate all-gather, and the row-wise outputs' gradients are cast to float8 (NoopFwToFloat8Bw"
        "Dynamic) before the backward's all-gather; the forward reduce-scatters and the backward reduce-scatters of "
        "the input gradients stay bf16")}),
    zero={
        "collectives_per_layer": 1, "prefetch_units": 1, "reshard_after_forward": True,
        "regather_for_recompute": False, "reduce_in_fp32": True, "collective_overhead_seconds": 0.0,
        "gather_copy_bytes_per_param": 4.0, "unsharded_grad_bytes_per_param": 2.0,
        "sources": {
            "collectives_per_layer": _FSDP_UNIT,
            "prefetch_units": _FSDP_PREFETCH,
            "reshard_after_forward": "torchtitan fsdp_reshard_after_forward 'default': True without PP (with PP the "
            "reference data models it as zero 1)",
            "regather_for_recompute": "AC wraps the block inside its FSDP unit: the backward gather serves the "
            "recomputed forward",
            "reduce_in_fp32": "torchtitan [training] mixed_precision_reduce = 'float32' (MixedPrecisionPolicy)",
            "collective_overhead_seconds": "FSDP2 issues one flat all-gather per unit; no overhead beyond NCCL's assumed",
            "gather_copy_bytes_per_param": _FSDP2_COPY_OUT,
            "unsharded_grad_bytes_per_param": "FSDP2's foreach_reduce allocates the unit's reduce-scatter input in "
            "the reduce dtype and copies the unsharded gradients (the parameters' compute dtype, bf16: 2 bytes) into "
            "it before it clears them (pytorch/pytorch torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, "
            "torch 2.13: reduce_scatter_comm.allocate, foreach_reduce_scatter_copy_in, unsharded_grads.clear()), "
            "the previous unit's input reclaimed first (reduce_scatter_max_input_buffers 1, _fsdp_param_group.py): "
            "both live at the copy",
        },
    },
    schedules={
        "linear_attention_cp": False, "uneven_virtual_stages": False, "microbatch_group": False,
        "gpipe": True, "zero_stages": (0, 1, 2, 3), "max_zero_with_pp": 1, "block_recompute": True,
        "recompute": ("none", "op", "full"), "tp_comm_overlap": True,
        "sources": {
            "microbatch_group": "torch.distributed.pipelining's interleaved schedules take no group size (they run the "
            "micro-batches in rounds of pp); torchtitan's [parallelism] names none",
            "uneven_virtual_stages": "not offered: planner reads torchtitan's split from its degrees only (9dec370's "
            "pipeline_parallel_split_points name no per-chunk layout the importer maps)",
            "linear_attention_cp": "torchtitan has no Gated DeltaNet model (torchtitan/models @ 9dec370)",
            "tp_comm_overlap": "torchtitan [parallelism] enable_async_tensor_parallel: torch's async TP "
            "(torch._inductor micro-pipeline TP) overlaps the SP collectives with the matmuls; needs torch.compile "
            "(the reference row tt24_t4_70b_2d_asynctp runs it)",
            "gpipe": "torch.distributed.pipelining ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B",
            "zero_stages": "FSDP2 (3); DDP (0); with PP FSDP does not reshard (1-like)",
            "max_zero_with_pp": _TORCH_PP_FSDP,
            "recompute": "torchtitan [activation_checkpoint] mode none|selective|full; selective_ac_option 'op' is "
            "op-level AC (planner's 'op'), an integer k checkpoints every k-th layer (planner's full with k layers); "
            "it has no attention-core-only mode",
            "block_recompute": "selective_ac_option = k checkpoints every k-th block: layers/k per stage (the "
            "importer's mapping)",
            "pipeline_grad_reduce_overlap": "FSDP2's post-backward hooks reduce-scatter each unit during the last "
            "micro-batch's backward, with PP as without",
            "pipeline_grad_all_reduce": "FSDP2 reduce-scatters into shards",
        },
    },
    optimizer={
        "implementation": "torch.optim.AdamW (foreach) on FSDP2 fp32 sharded parameters",
        "fused_step": False, "step_traffic_factor": 1.0, "default_grad_dtype": "fp32", "muon": False, "lora": False,
        "sources": {
            "lora": "torchtitan trains every parameter: no adapter wrapping among its components (torchtitan/components "
            "@ b5bcd76c)",
            "int8_moments": "torchtitan's optimizers keep torch.optim's moments in the parameters' dtype; no "
            "bitsandbytes optimizer among them (torchtitan/components/optimizer/optimizer.py @ b5bcd76c)",
            "muon": "torchtitan's optimizers are Adam and AdamW; its DistMuon (torchtitan/distributed/flex_shard/"
            "dist_muon.py @ b5bcd76c) runs under the experimental FlexShard, which redistributes DTensor shards to "
            "owners, not on the FSDP2 path planner models",
            "default_grad_dtype": "FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): the sharded "
            "parameters stay fp32 and their gradients are reduce-scattered into fp32 shards (torchtitan "
            "[training] mixed_precision_param / mixed_precision_reduce)",
            "implementation": "torchtitan [optimizer] name AdamW, implementation 'foreach'",
            "fused_step": "foreach: horizontally fused per tensor group, not one kernel",
            "step_traffic_factor": "foreach kernels stream the states once: 1.0 (an assumption)",
            "bf16_moments": _TORCHTITAN_BF16,
            "bf16_master_weights": _TORCHTITAN_BF16,
            "fp8_params": _TORCHAO_FP8_ALL_GATHER,
            "fp8_params_held": "torchao's float8 all-gather casts each rank's shard to fp8 before the gather "
            "(WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather, pytorch/ao torchao/float8/fsdp_utils.py @ "
            "36027d82): the sharded parameters keep their dtype, only the gathered copy is fp8",
        },
        "bf16_moments": True, "bf16_master_weights": True, "fp8_params": True, "fp8_params_held": False,
    },
    moe={
        "dispatchers": ("alltoall", "deepep", "hybridep"), "default_dispatcher": "alltoall", "ep_overlap": True,
        "default_ep_overlap": False, "shared_expert_overlap": False, "expert_tensor_parallel": "one_or_tp",
        "capacity_factor": False, "mtp": False, "ep_overlap_dispatchers": ("alltoall", "deepep"),
        "ep_overlap_pipeline": "required", "ep_overlap_conflicts": ("recompute",), "dispatch_wgrad_overlap": False,
        "sources": {
            "dispatch_wgrad_overlap": "no setting that moves the experts' weight gradients off the backward's stream "
            "outside DualPipeV (job_config.py, 238fa995): autograd runs them in order",
            "ep_overlap_pipeline": "the overlap is DualPipeV's: [parallelism] pipeline_parallel_expert_parallel_overlap "
            "with pipeline_parallel_schedule DualPipeV, pp > 1 (job_config.py, 238fa995)",
            "ep_overlap_conflicts": "DualPipeV's expert-parallel overlap runs without activation checkpointing "
            "(job_config.py, 238fa995)",
            "ep_overlap_dispatchers": "DualPipeV's overlap runs with the configured all-to-all backend (standard or "
            "deepep, job_config.py 238fa995)",
            "dispatchers": "pytorch/torchtitan torchtitan/config/job_config.py (238fa995, 2026-02-23) "
            "[parallelism] expert_parallel_comm_backend standard (all-to-all) | deepep; HybridEP since the Python "
            "configs (torchtitan/models/common/config_utils.py comm_backend hybridep, b5bcd76c, 2026-08-21)",
            "default_dispatcher": "expert_parallel_comm_backend = \"standard\": PyTorch all-to-all (job_config.py, "
            "238fa995)",
            "ep_overlap": "[parallelism] pipeline_parallel_expert_parallel_overlap with the DualPipeV schedule, "
            "pp > 1 and ep > 1, no activation checkpointing (job_config.py, 238fa995)",
            "default_ep_overlap": "the default schedule is 1F1B, where the overlap has no effect",
            "shared_expert_overlap": "no shared-expert overlap setting in job_config.py (238fa995)",
            "expert_tensor_parallel": "[parallelism] expert_tensor_parallel_degree: 'we only support either etp = "
            "tp or etp = 1' (job_config.py, 238fa995; default 1)",
            "capacity_factor": "no token-drop setting in the TOML job config (238fa995): experts run dropless",
            "mtp": "torchtitan's deepseek_v3 model (238fa995) builds no multi-token-prediction module",
        },
    },
    context_parallel={
        "exchange": "allgather", "kv_at_query_width": True, "grad_exchange_bytes": 4, "step_kernels": 11,
        "step_traffic": {"fwd_q": 38.0, "fwd_kv": 4.0, "bwd_q": 10.0, "bwd_kv": 25.0},
        "pass_traffic": {"fwd_q": 6.0, "fwd_kv": 4.0, "bwd_q": 20.0, "bwd_kv": 36.0},
        "sources": {
            "exchange": _TORCH_CP + ": torchtitan [experimental] context_parallel_rotate_method defaults to "
            "'allgather' (torchtitan/config_manager.py at 9dec370); _AllGatherRotater issues one all-gather of the "
            "concatenated K/V at the first step and waits for it at the second, in forward and again in backward; "
            "the dK/dV rotater is always _AllToAllRotater (a ring shift by permute_tensor after every backward step, "
            "waited after the next step's kernel, the last one after the loop)",
            "kv_at_query_width": "torchtitan/models/llama/model.py at 9dec370, Attention.forward: keys = "
            "repeat_kv(xk, n_rep), values = repeat_kv(xv, n_rep) before scaled_dot_product_attention",
            "grad_exchange_bytes": _TORCH_CP + ": convert_to_f32 = True; the dK/dV accumulators are fp32 "
            "(accum_dtype) and are concatenated and sent as such",
            "step_kernels": _TORCH_CP + ": per extra forward step the flash kernel, the cast of its output to fp32, "
            "the out and log-sum-exp merges (sub, sigmoid, mul, sub; sub, logsigmoid, sub) and the cat of K/V for "
            "the rotater: 11 eager kernels (the backward's accumulations, cats and shift about as many). Counted",
            "step_traffic": _TORCH_CP + ", counted on the slowest rank (cp - 1, whose extra steps all take the "
            "whole local query: no partial merge) as eager kernels, each reading its inputs and writing its output: "
            "forward, per query element the step output's cast to fp32 (2 + 4) and _SDPAMerger's out - sigmoid(lse "
            "diff) x (out - block_out) in three fp32 kernels (12 + 8 + 12): 38; per K/V element the torch.cat of "
            "K and V each step (2 + 2): 4. Backward, per query element grad_query += the step's bf16 dQ (4 + 2 + 4): "
            "10; per K/V element the half-chunk accumulation of _partial_update (10 / 2) and its torch.cat (4 + 4), "
            "the cat of the fp32 dK/dV for the shift (4 + 4) and the bf16 K/V cat (2 + 2): 25. torch.compile's "
            "effect on these handler ops is not known here: counted eager",
            "pass_traffic": _TORCH_CP + ", once per pass when cp > 1: forward, key/value .contiguous() of the "
            "transposed, repeated K/V (2 + 2 per K/V element) and the merged output's cast back to bf16 (4 + 2 per "
            "query element); backward, the fp32 zeros of dQ, dK, dV (4), the first step's accumulations (10) and "
            "cats (fp32 4 + 4, bf16 2 + 2), the final casts to bf16 (4 + 2) and the .contiguous() copies (2 + 2): "
            "20 per query element, 36 per K/V element",
        },
    },
    efficiency={
        "nccl_compute_contention": 0.18, "tp_overlap_hidden_share": TORCH_ASYNC_TP_HIDDEN_SHARE,
        "tp_overlap_sm_share": 0.0, "tp_overlap_rs_splits": None,
        "sources": {
            "tp_overlap_rs_splits": "torch's fused_matmul_reduce_scatter (torch/distributed/_symmetric_memory) "
            "decomposes the matmul per rank, as fused_all_gather_matmul does: tp chunks on both sides",
            "nccl_compute_contention": _CONTENTION,
            "tp_overlap_hidden_share": "solved from torchtitan's own pair of runs, Llama 3 70B on 256 H100, "
            "FSDP 32 x TP 8, 2D 829 and with AsyncTP 876 tokens/s/GPU (pytorch/torchtitan benchmarks/"
            "llama3_h100_202412_torchtitan.md, Table 4; benchmarks/calibrate_torch_async_tp.py): the share of "
            "TE's hidden traffic torch's micro-pipeline TP hides in the model that reproduces the 1.057x",
            "tp_overlap_sm_share": "torch's async TP moves the chunks over symmetric memory with copy engines "
            "(no SM margin on the matmuls)",
        },
    },
)

_FSDP = _derive(
    _TORCHTITAN, "fsdp",
    "Plain PyTorch FSDP (Hugging Face Trainer / accelerate style): per-block units, no TP/CP/PP, eager kernels.",
    zero={
        "unsharded_grad_bytes_per_param": 0.0,
        "sources": {"unsharded_grad_bytes_per_param": "FSDP1's _reduce_grad reduce-scatters from the unsharded flat "
                    "gradient itself (torch/distributed/fsdp/_runtime_utils.py, torch 2.13: "
                    "_get_reduce_scatter_tensors pads it in place, or copies it only to pad): no second buffer"},
    },
    offload={
        "optimizer": True, "params": True, "activations": False, "cpu_optimizer": "torch",
        "sources": {
            "optimizer": "FSDP CPUOffload(offload_params=True) keeps the sharded parameters, gradients and optimizer "
            "step on the CPU (torch.distributed.fsdp.CPUOffload; accelerate fsdp_offload_params)",
            "params": "CPUOffload(offload_params=True)",
            "activations": "no activation offload switch in the Trainer FSDP path (torch's offload hooks aside)",
            "cpu_optimizer": "the optimizer the user built (torch.optim AdamW) steps on the CPU parameters",
        },
    },
    schedules={
        "linear_attention_cp": False,
        "tensor_parallel": False, "sequence_parallel": False, "context_parallel": False, "expert_parallel": False,
        "pipeline": False, "interleaved": False, "uneven_virtual_stages": False, "gpipe": False, "max_zero_with_pp": 0,
        "recompute": ("none", "full"), "tp_comm_overlap": False,
        "sources": {
            "uneven_virtual_stages": "no pipeline",
            "linear_attention_cp": "no context parallelism (schedules.context_parallel)",
            "tp_comm_overlap": "no tensor parallelism in the Trainer FSDP path",
            "tensor_parallel": "accelerate FSDP plugin shards only (no DTensor TP in the Trainer path)",
            "sequence_parallel": "not available without TP",
            "context_parallel": "not available in the Trainer FSDP path",
            "expert_parallel": "not available in the Trainer FSDP path",
            "pipeline": "FSDP alone has no pipeline schedule",
            "interleaved": "no pipeline",
            "gpipe": "no pipeline",
            "max_zero_with_pp": "no pipeline",
            "recompute": "gradient_checkpointing (per block) or none",
            "pipeline_grad_reduce_overlap": "no pipeline",
            "pipeline_grad_all_reduce": "no pipeline",
        },
    },
    kernels={
        "fp8_rowwise": False,
        "sources": {"cuda_graphs": "the Trainer's FSDP path runs eager PyTorch modules; no CUDA-graph capture",
                    "fp8_weight_cast_cached": "accelerate's fp8 quantizes the weights in every micro-batch: its AO "
                    "backend is torchao's Float8Linear, and its TE backend calls Transformer Engine's modules without "
                    "is_first_microbatch (accelerate/utils/transformer_engine.py convert_model), which then casts on "
                    "each call; counted at torchao's bytes",
                    "fp8_rowwise": "accelerate's fp8 settings (fp8_config backend TE, MSAMP or AO) name no torchao recipe; "
                    "its AO backend builds torchao's default (tensorwise) Float8LinearConfig"},
    },
    optimizer={
        "bf16_moments": False, "bf16_master_weights": False, "fp8_params": False, "fp8_params_held": True,
        "default_grad_dtype": "fp32", "muon": False, "lora": True, "int8_moments": True,
        "sources": {
            "lora": "Hugging Face PEFT's LoraModel wrapped around the model the Trainer trains (peft/tuners/lora: the base "
            "weights requires_grad False, A and B trainable)",
            "int8_moments": "the Trainer's --optim adamw_bnb_8bit, adamw_8bit and paged_adamw_8bit run bitsandbytes' "
            "AdamW8bit / PagedAdamW8bit (transformers TrainingArguments OptimizerNames; Trainer.get_optimizer_cls_and_"
            "kwargs): uint8 moments with an fp32 absmax per 2,048 elements",
            "muon": "the Hugging Face Trainer's --optim choices (transformers TrainingArguments OptimizerNames) have "
            "no Muon",
            "default_grad_dtype": "the Trainer's mixed precision keeps fp32 parameters (FSDP's flat parameters "
            "with MixedPrecision param_dtype bf16 only for compute), so the sharded gradients are fp32",
            "bf16_moments": "the Trainer's mixed precision (--bf16) keeps fp32 weights and optimizer states; pure bf16 "
            "comes from loading the model in bf16 (torch_dtype), which the Trainer command planner reads does not say",
            "bf16_master_weights": "as bf16_moments: fp32 master weights under the Trainer's mixed precision",
            "fp8_params": "the Trainer keeps 16-bit weights",
            "fp8_params_held": "no fp8 parameter gather (fp8_params false); the field is not used",
        },
    },
    moe={
        "dispatchers": ("alltoall",), "default_dispatcher": "alltoall", "ep_overlap": False,
        "default_ep_overlap": False, "shared_expert_overlap": False, "expert_tensor_parallel": "tp_only",
        "capacity_factor": False, "mtp": False, "ep_overlap_dispatchers": (), "dispatch_wgrad_overlap": False,
        "ep_overlap_pipeline": "any", "ep_overlap_conflicts": (),
        "sources": {
            "ep_overlap_pipeline": "no expert all-to-all overlap", "ep_overlap_conflicts": "no expert all-to-all overlap",
            "ep_overlap_dispatchers": "no overlap", "dispatch_wgrad_overlap": "no expert parallelism",
            "dispatchers": "no expert parallelism in the Trainer FSDP path: experts compute locally (alltoall is "
            "planner's name for the only, unused, choice)",
            "default_dispatcher": "as dispatchers",
            "ep_overlap": "no expert parallelism",
            "default_ep_overlap": "no expert parallelism",
            "shared_expert_overlap": "Hugging Face modeling code runs the shared experts after the routed ones",
            "expert_tensor_parallel": "no tensor parallelism in the Trainer FSDP path",
            "capacity_factor": "Hugging Face MoE modeling code (Mixtral, Qwen-MoE, DeepSeek) routes dropless",
            "mtp": "Hugging Face DeepSeek-V3 modeling code does not build the MTP module",
        },
    },
)

_AUTOMODEL_SRC = "NVIDIA-NeMo/Automodel @ 36044ad3 (2026-08-22)"

_AUTOMODEL = _derive(
    _TORCHTITAN, "automodel",
    "NeMo AutoModel: Hugging Face models on PyTorch FSDP2 with Transformer Engine linear, RMSNorm and attention, "
    "DeepEP / HybridEP expert parallelism, torch pipelining (interleaved 1F1B) and per-block activation "
    "checkpointing; the model built in bf16 and stepped by torch.optim.Adam, whose states stay bf16.",
    kernels={
        "fused_elementwise": True, "supports_compile": False, "attention_kernel": "fused", "cuda_graphs": False,
        "fp8_proj_keeps_cast_input": False, "fp8_tp_all_gather": False, "loss_bytes_per_logit": 4.0,
        "eager_elementwise_traffic_factor": 1.0, "activation_clamp_fused": True, "moe_fused_mlp": False,
        "fp8_rowwise": False, "fp8_weight_cast_cached": True,
        "sources": {
            "fp8_rowwise": "AutoModel's fp8 is Transformer Engine's (TEFp8Config recipes current and block scaling)",
            "fp8_weight_cast_cached": "AutoModel patches Transformer Engine's Linear.forward to pass its "
            "IS_FIRST_MICROBATCH flag (nemo_automodel/components/models/common/utils.py @ 36044ad3, "
            "set_is_first_microbatch): the weight is quantized on the step's first micro-batch and reused",
            "scaled_rotary_unfused": "counted fused: whether AutoModel's Transformer Engine rotary (rope_fusion true) takes a "
            "YaRN-scaled model on its fused path is not examined here",
            "fused_elementwise": _AUTOMODEL_SRC + " examples/llm_benchmark/*/*_te_deepep.yaml backend: linear te, "
            "rms_norm te, rope_fusion true (Transformer Engine's fused norm and rotary kernels), counted as the "
            "fused element-wise traffic; its residual adds and expert activations run as torch ops (not separated)",
            "supports_compile": "the TE-backend recipes run without torch.compile; counted fused already",
            "attention_kernel": "backend attn te: Transformer Engine's DotProductAttention, cuDNN fused attention on "
            "Hopper (as Megatron-Core's)",
            "cuda_graphs": "no CUDA-graph capture in the AutoModel training recipes",
            "activation_clamp_fused": "the DeepEP experts' quick_geglu_deepep clamps, activates and weights by the "
            "routing probability in one torch.compile'd function (NVIDIA-NeMo/Automodel "
            "nemo_automodel/components/moe/layers.py @ 01883b41)",
            "fp8_proj_keeps_cast_input": "counted as Megatron-Core's Transformer Engine path (one 16-bit copy)",
            "fp8_tp_all_gather": "the TP all-gathers counted in 16 bits (no fp8 gather in the DTensor TP plans)",
            "loss_bytes_per_logit": _AUTOMODEL_SRC + " recipes: loss_fn MaskedCrossEntropy(fp32_upcast: false) "
            "(nemo_automodel/components/loss/masked_ce.py): cross entropy on the bf16 logits, whose log-softmax "
            "keeps its bf16 output (2) and whose backward writes the bf16 logit gradient (2): 4",
            "eager_elementwise_traffic_factor": "unused when fused_elementwise is true; 1.0",
            "fp8_attention": "AutoModel's fp8 config converts Linear modules with torchao; Transformer Engine's "
            "attention runs 16-bit (no fp8_dot_product_attention setting in its recipes)",
            "moe_fused_mlp": "AutoModel's experts are its own GroupedExperts modules (torch grouped GEMMs or "
            "Transformer Engine GroupedLinear), not Transformer Engine's op fuser: unfused",
            "nvfp4": "AutoModel's low-precision config is torchao float8 (no NVFP4 recipe in its training configs)",
        },
    },
    schedules={
        "linear_attention_cp": False, "uneven_virtual_stages": False,
        "recompute": ("none", "full"), "tp_comm_overlap": False,
        "sources": {
            "uneven_virtual_stages": "not offered: planner reads AutoModel's pipeline from its degrees only",
            "linear_attention_cp": "NVIDIA-NeMo/Automodel nemo_automodel/components/models/qwen3_5_moe/"
            "cp_linear_attn.py @ 36044ad3 all-gathers the whole sequence and runs the Gated DeltaNet on every CP "
            "rank, another mechanism than Megatron-Core's head split; not modelled",
            "recompute": _AUTOMODEL_SRC + " distributed.activation_checkpointing: true wraps every transformer "
            "block in torch's checkpoint_wrapper (nemo_automodel/components/distributed/parallelizer.py, "
            "components/moe/parallelizer.py): full recompute per block, or none",
            "tp_comm_overlap": "DTensor tensor parallelism without an async-TP switch in the recipes",
            "max_zero_with_pp": _TORCH_PP_FSDP + " (AutoModel's DeepSeek-V3 and Kimi K2 benchmark recipes: pp_size 4 "
            "and 8 with strategy fsdp2)",
        },
    },
    efficiency={
        "sources": {
            "tp_overlap_hidden_share": "unused: no TP overlap (schedules.tp_comm_overlap)",
            "tp_overlap_sm_share": "unused: no TP overlap",
            "tp_overlap_rs_splits": "unused: no TP overlap",
        },
    },
    optimizer={
        "implementation": "torch.optim.Adam on FSDP2-sharded bf16 parameters",
        "default_grad_dtype": "bf16", "default_state_dtype": "bf16", "bf16_moments": True,
        "bf16_master_weights": True, "fp8_params": False, "fp8_params_held": True, "muon": False, "lora": True,
        "sources": {
            "fp8_params_held": "no fp8 parameter gather modelled (fp8_params false); the field is not used",
            "muon": "its Muon recipe (examples/llm_finetune/qwen/qwen2_5_7b_squad_muon.yaml @ 36044ad3) steps "
            "Microsoft's dion.Muon on FSDP2's sharded parameters, which distributes the Newton-Schulz work its own way; "
            "planner's Muon terms are Megatron-Core's layer-wise distributed optimizer's",
            "lora": "its `peft:` section (nemo_automodel/components/_peft/lora.py @ 36044ad3: PeftConfig dim, "
            "target_modules or match_all_linear; the base weights frozen)",
            "int8_moments": "its recipes step torch.optim.Adam or Transformer Engine's FusedAdam, not bitsandbytes",
            "implementation": _AUTOMODEL_SRC + " examples/llm_benchmark/*.yaml optimizer: torch.optim.Adam",
            "default_grad_dtype": "nemo_automodel/components/moe/parallelizer.py MixedPrecisionPolicy(param_dtype="
            "bf16, reduce_dtype=fp32): the reduce-scatter runs in fp32 (zero.reduce_in_fp32) into the bf16 "
            "parameters' gradient shards",
            "default_state_dtype": "NeMoAutoModelForCausalLM.from_config: torch_dtype 'auto' selects torch.bfloat16 "
            "(nemo_automodel/_transformers/auto_model.py); torch.optim.Adam creates exp_avg and exp_avg_sq with "
            "zeros_like(param) (torch/optim/adam.py), so no fp32 master and bf16 moments: 8 bytes per parameter "
            "with the bf16 weights and gradients",
            "bf16_moments": "as default_state_dtype",
            "bf16_master_weights": "as default_state_dtype",
            "fp8_params": "FSDP2 gathers the bf16 parameters",
        },
    },
    zero={
        "sources": {
            "collectives_per_layer": "FSDP2 fully_shard per transformer block (nemo_automodel/components/moe/"
            "parallelizer.py, components/distributed/parallelizer.py): one all-gather and one reduce-scatter per block",
            "reshard_after_forward": "nemo_automodel/components/distributed/config.py: dense layers reshard after "
            "forward without PP; MoEParallelizerConfig.reshard_after_forward = False (and PP layers) keep the "
            "gathered parameters to the backward: counted as resharding (the backward gather is charged, the "
            "resident unsharded block is not)",
            "reduce_in_fp32": "MixedPrecisionPolicy(reduce_dtype=torch.float32) (components/moe/parallelizer.py)",
        },
    },
    offload={
        "sources": {
            "optimizer": "FSDP2 CPUOffloadPolicy (nemo_automodel/components/distributed/config.py offload_policy)",
            "params": "FSDP2 CPUOffloadPolicy",
            "activations": "no activation offload switch in the recipes",
            "cpu_optimizer": "torch.optim steps the offloaded parameters",
        },
    },
    moe={
        "dispatchers": ("allgather", "deepep", "hybridep"), "default_dispatcher": "deepep", "ep_overlap": False,
        "default_ep_overlap": False, "capacity_factor": False, "mtp": False, "ep_overlap_dispatchers": (),
        "ep_overlap_pipeline": "any", "ep_overlap_conflicts": (), "dispatch_wgrad_overlap": False,
        "sources": {
            "ep_overlap_pipeline": "no expert all-to-all overlap", "ep_overlap_conflicts": "no expert all-to-all overlap",
            "dispatch_wgrad_overlap": "its GroupedExperts backward runs in autograd's order on one stream "
            "(nemo_automodel/components/moe/layers.py @ 01883b41)",
            "dispatchers": _AUTOMODEL_SRC + " model.backend.dispatcher (nemo_automodel/components/models/common/"
            "utils.py BackendConfig): deepep, hybridep, or torch, 'DTensor all-gather/reduce-scatter' (planner's "
            "allgather)",
            "default_dispatcher": "the MoE benchmark recipes of the AutoModel performance summary run DeepEP "
            "(docs/performance-summary.mdx: 'TE + DeepEP')",
            "ep_overlap": "no all-to-all overlap schedule in the recipes",
            "default_ep_overlap": "no overlap",
            "capacity_factor": "dropless (fake_balanced_gate in the benchmarks: balanced routing)",
            "mtp": "the Hugging Face DeepSeek-V3 modeling code AutoModel trains builds no MTP module",
            "ep_overlap_dispatchers": "no overlap",
        },
    },
    context_parallel={**_MEGATRON.context_parallel.model_dump(), "sources": {
        **_MEGATRON.context_parallel.sources,
        "exchange": "nemo_automodel/components/distributed/parallelizer.py sets Transformer Engine attention's "
        "context-parallel group with cp_comm_type 'p2p' (all_gather for sliding-window layers): TE's ring, as "
        "Megatron-Core runs it",
    }},
)

_DS_BF16 = (
    "DeepSpeed bf16.bf16_master_weights_and_grads / bf16.bf16_optimizer_states (deepspeed/runtime/precision_config.py, "
    "deepspeed/runtime/config.py: ZeRO stage 1-3 only; deepspeedai/DeepSpeed#7700, 39a682d7, 2025-12-04)"
)

_DEEPSPEED = _derive(
    _MEGATRON, "deepspeed",
    "DeepSpeed: ZeRO 1-3 with per-sub-module parameter gathers, pipeline engine (plain 1F1B, ZeRO 0-1 only), "
    "eager PyTorch kernels unless the model brings fused ones, BF16_Optimizer.",
    offload={
        "optimizer": True, "params": True, "activations": True, "cpu_optimizer": "fused",
        "sources": {
            "optimizer": "ZeRO-Offload: zero_optimization.offload_optimizer.device cpu (Ren et al. 2021)",
            "params": "ZeRO-Infinity: zero_optimization.offload_param.device cpu (stage 3 only)",
            "activations": "activation_checkpointing.cpu_checkpointing (checkpoints moved to the host)",
            "cpu_optimizer": "DeepSpeedCPUAdam (deepspeed/ops/adam/cpu_adam.py); optimizer.params.torch_adam true "
            "selects torch.optim instead",
        },
    },
    kernels=dict(_TORCH_EAGER, fp8_weight_cast_cached=False, sources={
        "fp8_proj_keeps_cast_input": "fp8 through Transformer Engine modules or torchao in the user's model: "
        "either keeps the projection's fp8 input beside the attention's 16-bit output (" + _TORCHAO_FP8_INPUT + ")",
        "cuda_graphs": "DeepSpeed's CUDA graphs (enable_cuda_graph) are for inference; training runs eager",
        "attention_kernel": "Hugging Face models' default attn_implementation 'sdpa': " + _SDPA_FLASH2,
        "fused_elementwise": "DeepSpeed runs the user's PyTorch modules (eager kernels)",
        "supports_compile": "DeepSpeed config 'compile' / engine.compile()",
        "eager_elementwise_traffic_factor": _EAGER_FACTOR,
        "loss_bytes_per_logit": "Hugging Face causal-LM loss: logits.float() then cross_entropy, as torchtitan: " + _TORCH_LOSS,
        "fp8_attention": "the user's model runs its attention in 16 bits (DeepSpeed has no fp8 attention setting)",
        "moe_fused_mlp": "DeepSpeed-MoE runs the user's expert modules (no Transformer Engine op fuser)",
        "nvfp4": "DeepSpeed's config has no fp4 training setting",
        "fp8_rowwise": "DeepSpeed's config has no fp8 recipe setting; rowwise float8 is read for torchtitan",
        "fp8_weight_cast_cached": "DeepSpeed's engine calls the model's Transformer Engine layers without "
        "is_first_microbatch (DeepSpeed has no fp8 setting of its own), and Transformer Engine then quantizes the weight "
        "on every call; counted at torchao's per-micro-batch bytes",
        "separate_projections": "DeepSpeed trains the user's modules, most often Hugging Face models with q_proj, "
        "k_proj, v_proj and gate_proj, up_proj as Linears of their own (transformers models/llama/modeling_llama.py); "
        "Megatron-DeepSpeed's GPT fuses its query-key-value projection, which this profile does not separate",
    }),
    zero={
        "collectives_per_layer": 20, "prefetch_units": 1, "prefetch_bucket_params": 50_000_000,
        "reshard_after_forward": True,
        "regather_for_recompute": True, "reduce_in_fp32": False, "reduce_bucket_params": 500_000_000,
        "supports_hsdp": True, "collective_overhead_seconds": 0.0, "gather_copy_bytes_per_param": 0.0,
        "sources": {
            "gather_copy_bytes_per_param": "not counted for DeepSpeed's stage-3 gathers (their copies are not "
            "examined here; the fitted collectives_per_layer was chosen without it): 0",
            "unsharded_grad_bytes_per_param": "not counted for DeepSpeed's stage-3 reduction (its gradients pass "
            "through the reduce bucket, whose copies are not examined here): 0",
            "collectives_per_layer": "fitted: Narayanan et al. 2021 Table 2 ZeRO-3 rows (175B on 384-1536 and 530B on "
            "640-2240 A100; published_runs_modern.yaml), grid 4-24 x overhead 0-3 ms: 20 ring-latency-bound "
            "collectives per layer and pass, overhead 0 (max |error| 14.5%). DeepSpeed gathers per sub-module "
            "and parameter (deepspeed/runtime/zero/partitioned_param_coordinator.py); a GPT layer has 12 "
            "parameter tensors, so 20 also absorbs per-collective costs the model has no other term for",
            "prefetch_units": "unused: DeepSpeed's prefetch is a parameter budget (prefetch_bucket_params)",
            "prefetch_bucket_params": "stage3_prefetch_bucket_size default 5e7 parameters (deepspeed/runtime/zero/config.py, "
            "DeepSpeed config docs); a GPT-3 175B layer (1.8e9 parameters) is 3% prefetched",
            "reshard_after_forward": "stage3_max_reuse_distance / release after forward: parameters freed, regathered "
            "in backward",
            "regather_for_recompute": "deepspeed activation checkpointing re-runs the forward hooks: another gather",
            "reduce_in_fp32": "communication_data_type defaults to the model dtype (fp16/bf16)",
            "reduce_bucket_params": "DeepSpeed ZeRO config reduce_bucket_size default 5e8 (deepspeed/runtime/zero/config.py)",
            "supports_hsdp": "ZeRO++ hpZ (zero_hpz_partition_size) / MiCS (mics_shard_size)",
            "collective_overhead_seconds": "fitted with collectives_per_layer (above): 0 - the NCCL ring latency over "
            "the whole group explains the growth with GPU count",
        },
    },
    schedules={
        "linear_attention_cp": False, "microbatch_group": False,
        "tensor_parallel": True, "sequence_parallel": True, "context_parallel": True, "expert_parallel": True,
        "pipeline": True, "interleaved": False, "uneven_virtual_stages": False, "gpipe": False,
        "zero_stages": (0, 1, 2, 3), "max_zero_with_pp": 1,
        "recompute": ("none", "selective", "full"), "block_recompute": False, "tp_comm_overlap": False,
        "sources": {
            "uneven_virtual_stages": "no virtual stages (schedules.interleaved)",
            "microbatch_group": "no virtual stages (schedules.interleaved)",
            "linear_attention_cp": "DeepSpeed's sequence parallelism (Ulysses) is written for attention; planner has "
            "no Gated DeltaNet path of it",
            "tp_comm_overlap": "Megatron-DeepSpeed's tensor parallelism predates Transformer Engine's userbuffers; "
            "DeepSpeed AutoTP issues plain all-reduces",
            "tensor_parallel": "Megatron-DeepSpeed mpu / AutoTP (the DeepSpeed JSON carries no TP; the launcher does)",
            "sequence_parallel": "Megatron-DeepSpeed --sequence-parallel (Megatron-style SP comes with its model code)",
            "context_parallel": "DeepSpeed-Ulysses (sequence_parallel_size), read as context parallelism: the same "
            "sequence split, priced as planner's ring CP (an approximation: Ulysses exchanges heads by all-to-all)",
            "expert_parallel": "deepspeed.moe (ep_size)",
            "pipeline": "deepspeed/runtime/pipe/engine.py PipelineEngine",
            "interleaved": "deepspeed/runtime/pipe/schedule.py TrainSchedule is plain 1F1B: no virtual stages",
            "gpipe": "the pipeline engine runs TrainSchedule (1F1B) only",
            "zero_stages": "ZeRO stages 0-3 (deepspeed/runtime/zero/)",
            "max_zero_with_pp": "deepspeed/runtime/pipe/engine.py asserts zero stage < 2 with pipeline parallelism",
            "recompute": "deepspeed.checkpointing.checkpoint per layer (full); selective through Megatron-DeepSpeed's "
            "--recompute-granularity selective (the model code's)",
            "block_recompute": "checkpointing is per wrapped layer, every layer",
            "pipeline_grad_reduce_overlap": "deepspeed/runtime/pipe/schedule.py TrainSchedule appends ReduceTiedGrads, "
            "ReduceGrads and OptimizerStep to the last step of the schedule, after the last BackwardPass (@ edaa722): "
            "nothing to overlap them with",
            "pipeline_grad_all_reduce": "deepspeed/runtime/pipe/engine.py _exec_reduce_grads: with the BF16_Optimizer "
            "(bf16 with ZeRO-1 and grad_accum_dtype fp32: engine.py _do_optimizer_sanity_check) "
            "buffered_allreduce_fallback all-reduces the whole gradients; the optimizer then all-gathers the updated "
            "bf16 shards (deepspeed/runtime/bf16_optimizer.py, @ edaa722)",
        },
        "pipeline_grad_reduce_overlap": False, "pipeline_grad_all_reduce": True,
    },
    optimizer={
        "implementation": "DeepSpeed FusedAdam under ZeRO (fp32 master + Adam states), BF16_Optimizer with bf16",
        "fused_step": True, "step_traffic_factor": 1.0, "default_grad_dtype": "bf16", "muon": False, "lora": True,
        "sources": {
            "muon": "DeepSpeed's ZeRO optimizers partition flattened parameters across ranks, which Newton-Schulz on "
            "whole matrices does not fit; planner models its Adam and SGD",
            "lora": "DeepSpeed trains what requires grad: a model with frozen base weights and LoRA adapters (DeepSpeed-"
            "Chat's --lora_dim with --only_optimize_lora, Hugging Face PEFT models) partitions and steps the adapters only",
            "int8_moments": "DeepSpeed's ZeRO optimizers keep fp32 or bf16 states (bf16_optimizer_states); a client "
            "bitsandbytes optimizer is not among the configurations planner reads",
            "default_grad_dtype": "gradients in the model's 16-bit dtype unless the JSON's data_types."
            "grad_accum_dtype says fp32 (the DeepSpeed reader sets it from the file); planner's default before "
            "engines had one",
            "implementation": "deepspeed/runtime/zero/stage_1_and_2.py, stage3.py, deepspeed/runtime/bf16_optimizer.py",
            "fused_step": "deepspeed/ops/adam/fused_adam.py multi-tensor apply",
            "step_traffic_factor": "one fused pass: 1.0",
            "bf16_moments": _DS_BF16 + "; bf16_optimizer_states needs bf16_master_weights_and_grads",
            "bf16_master_weights": _DS_BF16 + "; without bf16_optimizer_states only with ZeRO-Offload "
            "(DeepSpeedCPUAdam)",
            "fp8_params": "DeepSpeed keeps 16-bit weights (its fp8 comes from Transformer Engine layers in the model)",
            "fp8_params_held": "no fp8 parameter gather (fp8_params false); the field is not used",
        },
        "bf16_moments": True, "bf16_master_weights": True, "fp8_params": False, "fp8_params_held": True,
    },
    moe={
        "dispatchers": ("alltoall",), "default_dispatcher": "alltoall", "ep_overlap": False,
        "default_ep_overlap": False, "shared_expert_overlap": False, "expert_tensor_parallel": "tp_only",
        "capacity_factor": True, "mtp": False, "ep_overlap_dispatchers": (), "dispatch_wgrad_overlap": False,
        "ep_overlap_pipeline": "any", "ep_overlap_conflicts": (),
        "sources": {
            "ep_overlap_pipeline": "no expert all-to-all overlap", "ep_overlap_conflicts": "no expert all-to-all overlap",
            "ep_overlap_dispatchers": "no overlap",
            "dispatch_wgrad_overlap": "deepspeed/moe/sharded_moe.py MOELayer: the experts' backward and the "
            "all-to-all's run in autograd's order",
            "dispatchers": "deepspeed/moe/sharded_moe.py _AllToAll: one NCCL all-to-all per dispatch and combine",
            "default_dispatcher": "as dispatchers",
            "ep_overlap": "deepspeed/moe/sharded_moe.py MOELayer runs dispatch, experts and combine in sequence",
            "default_ep_overlap": "no overlap",
            "shared_expert_overlap": "DeepSpeed-MoE's residual MoE (use_residual) runs its dense MLP in sequence",
            "expert_tensor_parallel": "experts are split with the model's tensor parallelism (enable_expert_tensor_"
            "parallelism), no separate degree",
            "capacity_factor": "deepspeed.moe.layer.MoE capacity_factor with drop_tokens (the model code's)",
            "mtp": "no multi-token-prediction support in DeepSpeed",
        },
    },
    efficiency={
        "nccl_compute_contention": 0.18,
        "sources": {"nccl_compute_contention": _CONTENTION},
    },
)

ENGINE_PROFILES: dict[str, EngineProfile] = {p.name: p for p in (_MEGATRON, _NEMO, _TORCHTITAN, _FSDP, _DEEPSPEED,
                                                                     _AUTOMODEL)}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINE_PROFILES)
DEFAULT_ENGINE = "megatron"


def engine_profile(name: str) -> EngineProfile:
    """The built-in profile `name`, or a PlannerError listing the engines there are."""
    try:
        return ENGINE_PROFILES[name]
    except KeyError:
        raise PlannerError(f"engine({name}) is not known; choose one of {', '.join(ENGINE_NAMES)}") from None


def attention_kernel_run(engine: str, chosen: AttentionKernel | None) -> AttentionKernel:
    """The attention kernel that runs: the one chosen (Layout.attention_kernel, the search's Problem), else the
    engine's."""
    return chosen or engine_profile(engine).kernels.attention_kernel


def clamp_fused(engine: str, compile_on: bool) -> bool:
    """Whether a clamped gated activation's clamp runs inside a fused kernel: under torch.compile, or where the
    engine's own activation kernel clamps (kernels.activation_clamp_fused)."""
    return bool(compile_on or engine_profile(engine).kernels.activation_clamp_fused)


def engine_or_default(engine: EngineProfile | None) -> EngineProfile:
    """`engine`, or the default engine's profile where none is given."""
    return engine if engine is not None else engine_profile(DEFAULT_ENGINE)
