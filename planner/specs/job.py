"""The job file: one training run to check (`planner check JOB`), in YAML.

A job names the model, the hardware and the GPU count, and gives the layout
either directly (`parallel`, `training`) or by pointing at the engine's own
configuration (`engine`: a DeepSpeed JSON, Megatron-LM arguments, a torchtitan
TOML) plus only what that file lacks. Paths inside a job are relative to the
job file. `planner schema job` prints this schema as JSON Schema.

This module only describes the file; `planner.engines.load.load_job` reads it and
`planner.engines.common.assemble` turns it into a validated `Layout`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from planner.specs.bounds import (
    Degree,
    GlobalBatch,
    GpuCount,
    Interleave,
    Layers,
    LayersOrNone,
    MicroBatch,
    MicroBatchCount,
    NodeCount,
    NsSteps,
    SeqLen,
    Width,
    ZeroStage,
    strict_float,
)
from planner.specs.engine import AttentionKernel, EngineName
from planner.specs.layout import (
    MAX_MOE_LOAD_IMBALANCE,
    ComputeDtype,
    CudaGraphScope,
    Fp8Recipe,
    GradDtype,
    LoraTargets,
    MoeDispatcher,
    MomentsDtype,
    MuonTpMode,
    Optimizer,
    Recompute,
    RecomputeModule,
    Schedule,
    StateDtype,
)
from planner.specs.model import ModelSpec

EngineFormat = Literal["deepspeed", "megatron", "torchtitan", "hf_trainer", "accelerate", "automodel"]
ENGINE_FORMATS: tuple[str, ...] = ("deepspeed", "megatron", "torchtitan", "hf_trainer", "accelerate", "automodel")

_STRICT = ConfigDict(extra="forbid", frozen=True)


class ParallelSection(BaseModel):
    """How the model is split and micro-batched. Every field is optional: what is left out takes the
    engine file's value (when `engine` is given) or the layout default."""

    model_config = _STRICT

    tp: Degree | None = Field(default=None, description="Tensor-parallel degree (default 1).")
    pp: Degree | None = Field(default=None, description="Pipeline-parallel degree, stages (default 1).")
    cp: Degree | None = Field(default=None, description="Context-parallel degree (default 1).")
    dp: Degree | None = Field(
        default=None, description="Data-parallel degree; derived as gpus / (tp * pp * cp) when left out."
    )
    ep: Degree | None = Field(default=None, description="Expert-parallel degree, MoE models only (default 1).")
    zero: ZeroStage | None = Field(
        default=None,
        description="ZeRO stage: 0 none, 1 optimizer states, 2 + gradients, 3 + parameters (FSDP) (default 0).",
    )
    sequence_parallel: StrictBool | None = Field(
        default=None,
        description="Megatron sequence parallelism; needs tp > 1 (default: on when tp > 1, as 'planner estimate'; "
        "with an engine file, that engine's setting).",
    )
    recompute: Recompute | None = Field(
        default=None,
        description="Activation recomputation: none, selective (Megatron modules, default the attention core), full, "
        "or op (torchtitan op-level selective AC) (default none).",
    )
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        default=None,
        description="With recompute selective: Megatron-Core --recompute-modules (core_attn, mlp, moe_act, layernorm, "
        "moe, shared_experts, mla_up_proj); default core_attn.",
    )
    recompute_layers_per_stage: Layers | None = Field(
        default=None,
        description="With recompute full: layers recomputed per pipeline stage (Megatron 'block'); default all.",
    )
    micro_batch: MicroBatch | None = Field(
        default=None, description="Sequences per micro-batch per data-parallel rank (default 1)."
    )
    interleave: Interleave | None = Field(
        default=None, description="Virtual pipeline stages per rank, interleaved 1F1B (default 1 = plain)."
    )
    microbatch_group_size: MicroBatchCount | None = Field(
        default=None, description="Interleaved 1F1B: micro-batches each virtual stage runs in a row (Megatron "
        "--microbatch-group-size-per-virtual-pipeline-stage); default pp."
    )
    schedule: Schedule | None = Field(default=None, description="Pipeline schedule: 1f1b or gpipe (default 1f1b).")
    flash_attention: StrictBool | None = Field(
        default=None, description="Fused attention that stores no s x s score matrix (default true)."
    )
    attention_kernel: AttentionKernel | None = Field(
        default=None, description="The fused attention's kernel: fused (cuDNN on Hopper) or flash2 "
        "(FlashAttention-2; Megatron --attention-backend flash, NVTE_FUSED_ATTN=0) (default: the engine's)."
    )
    overlap_grad_reduce: StrictBool | None = Field(
        default=None, description="Gradient reduction overlaps the backward pass (default true)."
    )
    overlap_tp_comm: StrictBool | None = Field(
        default=None, description="Tensor-parallel collectives overlap the GEMMs (default false)."
    )
    offload_optimizer: StrictBool | None = Field(
        default=None, description="Optimizer states and their step on the CPU (ZeRO-Offload; default false)."
    )
    offload_params: StrictBool | None = Field(
        default=None, description="Parameter shards on the host (ZeRO-Infinity / FSDP CPUOffload; zero 3; default false)."
    )
    cpu_optimizer: Literal["fused", "torch"] | None = Field(
        default=None, description="CPU Adam of offloaded states: fused (DeepSpeedCPUAdam) or torch (default: the engine's)."
    )
    shard_group: Degree | None = Field(
        default=None, description="Hybrid sharding (HSDP): ZeRO shards over groups of this many dp x cp ranks."
    )
    offload_activation_layers: LayersOrNone | None = Field(
        default=None, description="Layers per stage whose activations go to the host (default 0)."
    )
    etp: Degree | None = Field(
        default=None, description="Expert tensor-parallel degree (Megatron --expert-tensor-parallel-size; default tp)."
    )
    moe_dispatcher: MoeDispatcher | None = Field(
        default=None, description="MoE token dispatcher: alltoall, allgather, deepep or hybridep (default: the engine "
        "file's, else alltoall)."
    )
    moe_ep_overlap: StrictBool | None = Field(
        default=None, description="Expert all-to-all overlapped with another micro-batch's compute (Megatron "
        "--overlap-moe-expert-parallel-comm; default false)."
    )
    moe_load_imbalance: Annotated[float, BeforeValidator(strict_float)] | None = Field(
        default=None, ge=1.0, le=MAX_MOE_LOAD_IMBALANCE, description="Dropless routing's load on the busiest expert-parallel rank over "
        "the balanced share (max / mean routed copies received); default 1, balanced."
    )
    moe_delay_wgrad: StrictBool | None = Field(
        default=None, description="The experts' weight gradients run beside the dispatch's backward all-to-all (Megatron "
        "--delay-wgrad-compute with moe_ep_overlap, --overlap-dispatch-backward-with-experts-wgrad without it; default: "
        "on with the overlap, off without)."
    )
    moe_fused_mlp: StrictBool | None = Field(
        default=None, description="Routed experts in Transformer Engine's fused grouped MLP (Megatron "
        "--use-transformer-engine-op-fuser with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1; needs dtype fp8 with fp8_recipe "
        "mxfp8 on a compute-capability-10 chip; default false)."
    )
    moe_shared_expert_overlap: StrictBool | None = Field(
        default=None, description="Shared experts computed beside the dispatch (Megatron --moe-shared-expert-overlap; "
        "default false)."
    )
    moe_capacity_factor: Annotated[float, BeforeValidator(strict_float)] | None = Field(
        default=None, gt=0, le=64, description="Token drop: each expert takes at most this times its balanced share, "
        "padded to it (default: dropless)."
    )
    cuda_graph_scope: tuple[CudaGraphScope, ...] | None = Field(
        default=None, description="Parts of each layer in CUDA graphs: full, attn, mlp, moe, moe_router, "
        "moe_preprocess (default: none)."
    )
    mtp_layers: LayersOrNone | None = Field(
        default=None, description="Multi-token-prediction layers trained (Megatron --mtp-num-layers; default: the "
        "model's)."
    )


class TrainingSection(BaseModel):
    """Batch, sequence and precision of the run."""

    model_config = _STRICT

    global_batch: GlobalBatch | None = Field(
        default=None, description="Sequences per optimizer step, all data-parallel replicas together."
    )
    seq_len: SeqLen | None = Field(default=None, description="Tokens per sequence.")
    dtype: ComputeDtype | None = Field(default=None, description="Compute precision: bf16, fp16, fp8 or fp4 (NVFP4) (default bf16).")
    fp8_recipe: Fp8Recipe | None = Field(
        default=None, description="With dtype fp8, how the casts are scaled: tensorwise (per-tensor current scaling, "
        "FP8-CS), delayed (amax history: Megatron-LM's --fp8-recipe default), mxfp8 (Blackwell), blockwise or "
        "rowwise (torchao's, torchtitan only) (default tensorwise).",
    )
    fp8_param_gather: StrictBool | None = Field(
        default=None, description="With dtype fp8 (fp4) and zero >= 1: the layers' weights gathered in fp8 (NVFP4): "
        "Megatron --fp8-param-gather, which also holds them in fp8; under torchtitan, torchao's float8 FSDP "
        "all-gather, tensorwise recipe only (default false)."
    )
    fp8_attention: StrictBool | None = Field(
        default=None, description="With dtype fp8: Transformer Engine's FP8 attention (Megatron "
        "--fp8-dot-product-attention; megatron and nemo engines; default false)."
    )
    grad_dtype: GradDtype | None = Field(
        default=None, description="Gradient precision: bf16, fp16 or fp32 (default bf16)."
    )
    optimizer: Optimizer | None = Field(
        default=None, description="Optimizer: adam, sgd or muon (Megatron --optimizer muon; default adam).")
    muon_ns_steps: NsSteps | None = Field(
        default=None, description="With optimizer muon: Newton-Schulz iterations per step (default 5).")
    muon_tp_mode: MuonTpMode | None = Field(
        default=None, description="With optimizer muon: duplicated, blockwise or distributed (Megatron "
        "--muon-tp-mode; default duplicated).")
    muon_split_qkv: StrictBool | None = Field(
        default=None, description="With optimizer muon: the QKV weight orthogonalised as its Q, K and V parts "
        "(default true).")
    lora_rank: Width | None = Field(
        default=None, description="LoRA fine-tuning: the rank of the adapters beside the frozen base weights "
        "(default: none, every weight trains).")
    lora_targets: LoraTargets | None = Field(
        default=None, description="With lora_rank: all_linear (every linear layer of the blocks) or attention "
        "(default all_linear).")
    engine: EngineName | None = Field(
        default=None,
        description="Training engine whose profile applies: megatron, nemo, torchtitan, fsdp or deepspeed "
        "(default: the engine file's format, else megatron; see docs/engines.md).",
    )
    compile: StrictBool | None = Field(default=None, description="torch.compile on (torch engines; default false).")
    compile_loss: StrictBool | None = Field(
        default=None, description="torch.compile on the loss (torch engines; default: as compile).")
    optimizer_state_dtype: MomentsDtype | None = Field(
        default=None, description="Adam moments' dtype: fp32, bf16 (Megatron precision-aware optimizer, DeepSpeed "
        "bf16_optimizer_states) or int8 (bitsandbytes' 8-bit optimizers; the fsdp engine) (default fp32)."
    )
    master_weights_dtype: StateDtype | None = Field(
        default=None, description="Master weights: fp32 copy, or bf16 = the 16-bit weights are the master (DeepSpeed "
        "bf16_master_weights_and_grads; default fp32)."
    )


class EngineSection(BaseModel):
    """The engine's own configuration, read as that engine reads it."""

    model_config = _STRICT

    format: EngineFormat = Field(
        description="deepspeed (JSON config), megatron (arguments), torchtitan (TOML), hf_trainer (a Hugging Face "
        "Trainer launch: torchrun / accelerate launch ... train.py TrainingArguments) or accelerate (an accelerate "
        "config YAML, with the Trainer command line as 'args').")
    path: str | None = Field(
        default=None,
        description="The engine file, relative to the job file: a DeepSpeed JSON, a file of Megatron-LM arguments "
        "or a launch script (or a MODEL_ARGS YAML, or a Megatron-Bridge run_config.yaml or override), a torchtitan "
        "TOML job config, a Hugging Face Trainer launch script, an accelerate config YAML.",
    )
    args: str | None = Field(
        default=None,
        description="Command-line flags as one string: Megatron-LM arguments (instead of, or after, `path`; with "
        "a MODEL_ARGS YAML, NAME=value words are the variables its harness substitutes), "
        "torchtitan `--section.option value` overrides applied on top of the TOML, or the Hugging Face Trainer "
        "command line (hf_trainer, accelerate).",
    )

    @model_validator(mode="after")
    def _needs_source(self) -> EngineSection:
        if self.path is None and self.args is None:
            raise ValueError("give the engine file as 'path' (or Megatron/torchtitan flags as 'args')")
        if self.format == "deepspeed" and self.path is None:
            raise ValueError("a deepspeed engine needs 'path' (the DeepSpeed JSON); 'args' is for megatron/torchtitan")
        if self.format == "deepspeed" and self.args is not None:
            raise ValueError("'args' does not apply to deepspeed; put the settings in the JSON or in 'parallel'")
        if self.format == "accelerate" and self.path is None:
            raise ValueError("an accelerate engine needs 'path' (the accelerate config YAML); 'args' is the Trainer "
                             "command line")
        return self


class Job(BaseModel):
    """One training run to check: model, hardware, GPU count, and the layout or the engine file that holds it."""

    model_config = _STRICT

    description: str | None = Field(default=None, description="Free text shown nowhere; for the reader of the file.")
    model: str | ModelSpec | None = Field(
        default=None,
        description="Catalog id or alias ('planner models'), a path to our YAML spec or a HuggingFace config.json "
        "(relative to the job file), or the spec itself as a mapping. May be left out when the engine file "
        "defines the model (Megatron-LM arguments, torchtitan model name and flavor).",
    )
    hardware: str = Field(
        description="Hardware catalog id or alias ('planner hardware'), or a path to a YAML profile."
    )
    gpus: GpuCount | None = Field(default=None, description="Total GPUs of the run. Give this or 'nodes'.")
    nodes: NodeCount | None = Field(
        default=None, description="Nodes of the run; gpus = nodes x the hardware's gpus_per_node. Give this or 'gpus'."
    )
    parallel: ParallelSection = Field(default_factory=ParallelSection, description="Parallel degrees and memory strategies.")
    training: TrainingSection = Field(default_factory=TrainingSection, description="Batch, sequence length, precision.")
    engine: EngineSection | None = Field(
        default=None,
        description="An engine config that holds the layout; `parallel` and `training` then give only what it lacks.",
    )
    profile: str | None = Field(
        default=None,
        description="A profile overlay written by 'planner calibrate' (path relative to the job file), applied "
        "to the hardware profile.",
    )
    headroom: Annotated[float, BeforeValidator(strict_float)] | None = Field(
        default=None, ge=0.0, lt=1.0,
        description="Share of device memory kept free; the job fits when peak <= capacity x (1 - headroom). "
        "Default: the cost model's DEFAULT_HEADROOM.",
    )

    @field_validator("model", mode="before")
    @classmethod
    def _inline_model(cls, value: Any) -> Any:
        """An inline spec is validated as a ModelSpec alone, so that its error names the spec's own field
        (not the union's 'model.str' branch)."""
        if isinstance(value, dict):
            try:
                return ModelSpec.model_validate(value)
            except ValidationError as err:
                from planner.specs.validation import describe_validation_error

                raise ValueError(f"inline model spec: {describe_validation_error(err)}") from None
        return value

    @model_validator(mode="after")
    def _gpus_or_nodes(self) -> Job:
        if (self.gpus is None) == (self.nodes is None):
            raise ValueError("give exactly one of 'gpus' or 'nodes'")
        return self

    def given_fields(self) -> dict[str, Any]:
        """The layout fields this job sets itself (parallel and training), without the unset ones."""
        out = self.parallel.model_dump(exclude_none=True)
        out.update(self.training.model_dump(exclude_none=True))
        return out


LAYOUT_FIELD_SECTIONS: dict[str, str] = {
    **{name: "parallel" for name in ParallelSection.model_fields},
    **{name: "training" for name in TrainingSection.model_fields},
}


def field_path(name: str) -> str:
    """Where a layout field lives in a job file, e.g. 'parallel.tp' or 'training.seq_len'."""
    section = LAYOUT_FIELD_SECTIONS.get(name)
    return f"{section}.{name}" if section else name


def job_json_schema() -> dict[str, Any]:
    """The job file's JSON Schema (for editors: yaml-language-server, VS Code)."""
    schema = Job.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "planner job"
    return schema
