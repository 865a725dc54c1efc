"""The parallel layout: how a training job is split across GPUs and batched.

`Layout` is one layout (pydantic, strict). `LayoutArrays` is the same fields as
numpy arrays, one entry per candidate; the cost model only ever sees
`LayoutArrays`, so `estimate` (0-d arrays) and `search` (a grid) share every
formula.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum
from functools import cached_property
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from planner.specs.bounds import (
    Degree,
    GlobalBatch,
    Interleave,
    Layers,
    LayersOrNone,
    MicroBatch,
    MicroBatchCount,
    NsSteps,
    SeqLen,
    Width,
    ZeroStage,
)
from planner.specs.engine import (
    DEFAULT_ENGINE,
    AttentionKernel,
    EngineName,
    attention_kernel_run,
    clamp_fused,
    engine_profile,
)

# none; selective (Megatron --recompute-granularity selective: the modules in `recompute_modules`, by
# default the attention core); full (every layer, or k per stage); op (torchtitan's op-level selective
# activation checkpointing: every second matmul output and every non-matmul op recomputed).
Recompute = Literal["none", "selective", "full", "op"]


class RecomputeCode(IntEnum):
    """How `LayoutArrays.recompute` holds a Layout's `recompute`."""

    NONE = 0
    SELECTIVE = 1  # Megatron's modules (recompute_modules; the attention core by default)
    FULL = 2  # every layer (or recompute_layers of them)
    OP = 3  # torchtitan's op-level selective AC


class Zero(IntEnum):
    """ZeRO stages (Rajbhandari et al. 2020): what is sharded over the data-parallel group, cumulatively."""

    NONE = 0
    OPTIMIZER = 1  # optimizer states
    GRADIENTS = 2  # + gradients
    PARAMETERS = 3  # + parameters (FSDP full sharding)


RECOMPUTE_CODES: dict[str, int] = {code.name.lower(): code for code in RecomputeCode}
RECOMPUTE_NAMES: dict[int, str] = {code: name for name, code in RECOMPUTE_CODES.items()}

# Megatron-Core --recompute-modules (megatron/core/transformer/transformer_config.py recompute_modules):
# which parts of a layer selective recompute drops and recomputes. Stored as a bit mask per candidate.
RecomputeModule = Literal["core_attn", "mlp", "moe_act", "layernorm", "moe", "shared_experts", "mla_up_proj"]
RECOMPUTE_MODULE_BITS: dict[str, int] = {
    name: 1 << i
    for i, name in enumerate(("core_attn", "mlp", "moe_act", "layernorm", "moe", "shared_experts", "mla_up_proj"))
}
DEFAULT_RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn",)  # Megatron-Core's default list


def recompute_module_mask(modules: tuple[str, ...] | None) -> int:
    return sum(RECOMPUTE_MODULE_BITS[name] for name in set(modules or DEFAULT_RECOMPUTE_MODULES))


def recompute_module_names(mask: int) -> tuple[str, ...]:
    return tuple(name for name, bit in RECOMPUTE_MODULE_BITS.items() if mask & bit)

# Megatron-Core's MoE token dispatchers (--moe-token-dispatcher-type alltoall | allgather | flex, the flex
# dispatcher with --moe-flex-dispatcher-backend deepep | hybridep): how routed tokens reach their experts.
MoeDispatcher = Literal["alltoall", "allgather", "deepep", "hybridep"]


class DispatcherCode(IntEnum):
    """How `LayoutArrays.moe_dispatcher` holds a Layout's `moe_dispatcher`."""

    ALLTOALL = 0  # NCCL all-to-all: every routed copy of a token goes to its expert's rank
    ALLGATHER = 1  # every rank gathers the EP group's tokens and keeps those of its experts
    DEEPEP = 2  # DeepEP: one copy per remote node over RDMA, forwarded inside the node over NVLink
    HYBRIDEP = 3  # NVIDIA HybridEP: the same two-tier dispatch, for NVLink domains larger than a node (NVL72)


DISPATCHER_CODES: dict[str, int] = {code.name.lower(): code for code in DispatcherCode}
DISPATCHER_NAMES: dict[int, str] = {code: name for name, code in DISPATCHER_CODES.items()}

# Megatron-Core --cuda-graph-scope: the parts of a layer captured in CUDA graphs (replayed without host launches).
CudaGraphScope = Literal["full", "attn", "mlp", "moe", "moe_router", "moe_preprocess"]
CUDA_GRAPH_BITS: dict[str, int] = {
    name: 1 << i for i, name in enumerate(("full", "attn", "mlp", "moe", "moe_router", "moe_preprocess"))
}


def cuda_graph_mask(scope: tuple[str, ...]) -> int:
    return sum(CUDA_GRAPH_BITS[name] for name in set(scope))


def cuda_graph_names(mask: int) -> tuple[str, ...]:
    return tuple(name for name, bit in CUDA_GRAPH_BITS.items() if mask & bit)


# Precision of optimizer states: Adam's moments (Megatron --exp-avg-dtype / --exp-avg-sq-dtype with
# --use-precision-aware-optimizer, DeepSpeed bf16_optimizer_states) and the master weights (Megatron
# --main-params-dtype, DeepSpeed bf16_master_weights_and_grads).
StateDtype = Literal["fp32", "bf16"]
# The moments' dtype may also be int8: bitsandbytes' 8-bit optimizers (the Hugging Face Trainer's --optim
# adamw_bnb_8bit, adamw_8bit, paged_adamw_8bit), which keep each moment as uint8 with an fp32 absmax per block of 2,048
# elements (bitsandbytes/optim/optimizer.py @ 06029dd6, Optimizer2State.init_state; block_wise by default) and tensors
# under 4,096 elements in fp32. The absmax adds 4 / 2,048 = 0.2% to a moment, and the small tensors (norms, biases)
# are under 0.1% of a model: both left out of the 1 byte counted.
MomentsDtype = Literal["fp32", "bf16", "int8"]

# fp4 is NVFP4 training (Transformer Engine's NVFP4BlockScaling recipe; Megatron-LM --fp4-format e2m1
# --fp4-recipe nvfp4): the layers' GEMMs run on fp4 (E2M1) tensor cores with an E4M3 scale per 16 elements and an
# fp32 scale per tensor. Its quantization is physics.kernels.fp4_cast_bytes_per_element's.
ComputeDtype = Literal["bf16", "fp16", "fp8", "fp4"]


class Fp8RecipeCode(IntEnum):
    """How fp8 training scales what it casts (Megatron-LM --fp8-recipe; Transformer Engine's recipes): what
    `LayoutArrays.fp8_recipe` holds. The bytes each moves are physics.kernels.fp8_cast_bytes_per_element's."""

    TENSORWISE = 0  # per-tensor current scaling: an amax pass over the tensor, then the cast (FP8-CS)
    DELAYED = 1  # per-tensor scale from an amax history; the cast records the tensor's amax as it goes
    MXFP8 = 2  # a power-of-two scale per 32 elements, along rows and along columns (Blackwell's MX formats)
    BLOCKWISE = 3  # an fp32 scale per 1 x 128 activation block and 128 x 128 weight block (DeepSeek-V3)
    NVFP4 = 4  # dtype fp4: not an fp8 recipe a layout names; LayoutArrays marks NVFP4 layouts with it
    # torchao's axiswise recipe (Float8LinearConfig.from_recipe_name("rowwise")): a scale per row of each GEMM operand,
    # so every tensor is cast once along each axis, and the forward GEMM is PyTorch's rowwise-scaled kernel
    ROWWISE = 5


Fp8Recipe = Literal["tensorwise", "delayed", "mxfp8", "blockwise", "rowwise"]
FP8_RECIPE_CODES: dict[str, int] = {code.name.lower(): code for code in Fp8RecipeCode if code != Fp8RecipeCode.NVFP4}
FP8_RECIPE_NAMES: dict[int, str] = {code: name for name, code in FP8_RECIPE_CODES.items()}
QUANTIZED_DTYPES = ("fp8", "fp4")  # GEMMs on quantized inputs (LayoutArrays.fp8)
GradDtype = Literal["bf16", "fp16", "fp32"]
# muon: Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks"; Liu et al. 2025,
# "Muon is Scalable for LLM Training", arXiv:2502.16982) as Megatron-Core runs it (--optimizer muon, through
# NVIDIA-NeMo/Emerging-Optimizers): momentum SGD whose update of every 2-D hidden weight is orthogonalised by
# Newton-Schulz iterations (physics.muon); the embedding, the output layer and the 1-D parameters stay on Adam.
Optimizer = Literal["adam", "sgd", "muon"]
OPTIMIZER_CODES: dict[str, int] = {"adam": 0, "sgd": 1, "muon": 2}
OPTIMIZER_NAMES: dict[int, str] = {code: name for name, code in OPTIMIZER_CODES.items()}
# How Muon orthogonalises a TP-split weight (Megatron --muon-tp-mode; physics.muon.matrix_cost): duplicated
# gathers the whole matrix on every TP rank, blockwise orthogonalises each shard alone, distributed all-reduces the
# Gram matrix of the shards.
MuonTpMode = Literal["duplicated", "blockwise", "distributed"]
LoraTargets = Literal["all_linear", "attention", "qkv"]
LORA_TARGETS: tuple[str, ...] = ("all_linear", "attention", "qkv")
LORA_TARGET_CODES: dict[str, int] = {name: code for code, name in enumerate(LORA_TARGETS)}
"""How `LayoutArrays.lora_targets` holds a Layout's `lora_targets`."""
MUON_TP_MODE_CODES: dict[str, int] = {"duplicated": 0, "blockwise": 1, "distributed": 2}
MUON_TP_MODE_NAMES: dict[int, str] = {code: name for name, code in MUON_TP_MODE_CODES.items()}
MUON_NS_STEPS_DEFAULT = 5  # Megatron-LM --muon-num-ns-steps (megatron/training/arguments.py @ d98e8a64)
# dualpipe: DeepSeek-V3's bidirectional pipeline (arXiv:2412.19437 Sec. 3.2.1; deepseek-ai/DualPipe): each of the
# pp ranks holds stages r and pp - 1 - r, micro-batches enter from both ends, a forward and a backward chunk
# run overlapped.
Schedule = Literal["1f1b", "gpipe", "dualpipe"]

# Bytes of optimizer state per parameter, beyond the 16-bit weights and gradients.
# Mixed-precision Adam: fp32 master weights + momentum + variance = 4 + 4 + 4 = 12
# (Rajbhandari et al. 2020, ZeRO, Sec. 3.1, "K = 12"). SGD with momentum: master + momentum = 8.
# Muon keeps one momentum buffer per matrix (Emerging-Optimizers OrthogonalizedOptimizer: state
# "momentum_buffer"); the parameters it leaves to Adam are counted with Adam's (training.memory).
MOMENTS_PER_PARAM: dict[str, int] = {"adam": 2, "sgd": 1, "muon": 1}  # exp_avg and exp_avg_sq; the momentum
STATE_DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "int8": 1}


def optimizer_state_bytes(optimizer: str, moments_dtype: str = "fp32", master_dtype: str = "fp32") -> int:
    """Optimizer-state bytes per parameter: the master copy (none when the 16-bit weights are the master)
    plus the moments in their dtype. Adam fp32/fp32: 4 + 2 x 4 = 12; bf16 moments (Megatron's
    precision-aware optimizer as DeepSeek-V3's recipe runs it): 4 + 2 x 2 = 8."""
    master = 0 if master_dtype == "bf16" else STATE_DTYPE_BYTES["fp32"]
    return master + MOMENTS_PER_PARAM[optimizer] * STATE_DTYPE_BYTES[moments_dtype]


OPTIMIZER_STATE_BYTES_PER_PARAM: dict[str, int] = {name: optimizer_state_bytes(name) for name in MOMENTS_PER_PARAM}
MUON_SCALAR_EXTRA_BYTES = optimizer_state_bytes("adam") - optimizer_state_bytes("muon")
"""What Adam keeps per parameter beyond Muon's state, for the parameters Muon leaves to it (its second fp32 moment)."""


MAX_MOE_LOAD_IMBALANCE = 64.0
"""The largest moe_load_imbalance accepted: a routing that sends every copy to one rank of an EP group of 64 (the
cost model caps the factor at ep anyway, physics.moe.capacity_factor)."""


class Layout(BaseModel):
    """One training layout: parallel degrees, memory strategies, batch and precision."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: Degree = Field(default=1, description="Tensor-parallel degree (Megatron intra-layer split).")
    pp: Degree = Field(default=1, description="Pipeline-parallel degree (stages).")
    cp: Degree = Field(default=1, description="Context-parallel degree (sequence split across GPUs, ring attention).")
    dp: Degree = Field(default=1, description="Data-parallel degree (replicas, or shards under ZeRO/FSDP).")
    ep: Degree = Field(default=1, description="Expert-parallel degree (MoE only); experts split across DP ranks.")
    zero: ZeroStage = Field(default=0, description="ZeRO stage: 0 none, 1 optimizer, 2 +gradients, 3 +parameters (FSDP).")
    sequence_parallel: StrictBool = Field(default=False, description="Megatron sequence parallelism (needs tp > 1).")
    recompute: Recompute = Field(
        default="none",
        description="Activation recomputation: none; selective (Megatron: the modules of recompute_modules, by default "
        "the attention core); full (every layer, or recompute_layers_per_stage of them); op (torchtitan op-level "
        "selective AC: every second matmul output and all non-matmul ops recomputed).",
    )
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        default=None,
        description="With recompute selective: Megatron-Core --recompute-modules (core_attn, mlp, moe_act, layernorm, "
        "moe, shared_experts, mla_up_proj); null = core_attn (Megatron's default).",
    )
    recompute_layers_per_stage: Layers | None = Field(
        default=None,
        description="With full recompute: how many layers per stage are recomputed (Megatron 'block'); null = all.",
    )
    micro_batch: MicroBatch = Field(default=1, description="Sequences per micro-batch per data-parallel rank.")
    global_batch: GlobalBatch = Field(description="Sequences per optimizer step, all replicas together.")
    seq_len: SeqLen = Field(description="Tokens per sequence.")
    interleave: Interleave = Field(default=1, description="Virtual pipeline stages per rank (interleaved 1F1B); 1 = plain.")
    microbatch_group_size: MicroBatchCount | None = Field(
        default=None,
        description="Interleaved 1F1B: micro-batches each virtual stage runs in a row before the next (Megatron "
        "--microbatch-group-size-per-virtual-pipeline-stage); between pp and the micro-batch count, which it divides "
        "or leaves a last group of at least pp. null = pp, Megatron-Core's default (the micro-batch count must then be "
        "a multiple of pp). No effect without interleaving.",
    )
    schedule: Schedule = Field(default="1f1b", description="Pipeline schedule: 1f1b (PipeDream-Flush), gpipe, or dualpipe (DeepSeek-V3's bidirectional "
                          "schedule: two stages per rank, expert all-to-all overlapped).")
    dtype: ComputeDtype = Field(default="bf16", description="Compute precision of the matrix multiplies.")
    grad_dtype: GradDtype = Field(default="bf16", description="Gradient precision (fp32 = Megatron's main grads).")
    optimizer: Optimizer = Field(
        default="adam",
        description="Optimizer: adam, sgd (with momentum) or muon (Megatron --optimizer muon: one momentum buffer per "
        "hidden matrix and a Newton-Schulz orthogonalisation of its update each step; the embedding and output layer "
        "on Adam). Sets the optimizer-state bytes per parameter and, for muon, the orthogonalisation's time.",
    )
    muon_ns_steps: NsSteps = Field(
        default=MUON_NS_STEPS_DEFAULT,
        description="With optimizer muon: Newton-Schulz iterations per step (Megatron --muon-num-ns-steps).",
    )
    muon_tp_mode: MuonTpMode = Field(
        default="duplicated",
        description="With optimizer muon: how a TP-split matrix is orthogonalised (Megatron --muon-tp-mode): "
        "duplicated (every TP rank gathers the whole matrix and orthogonalises it), blockwise (each shard on its own), "
        "distributed (the shards' Gram matrix all-reduced each iteration).",
    )
    muon_split_qkv: StrictBool = Field(
        default=True,
        description="With optimizer muon: the fused QKV weight is orthogonalised as its Q, K and V parts (Megatron's "
        "default; --muon-no-split-qkv orthogonalises it whole).",
    )
    lora_rank: Width | None = Field(
        default=None,
        description="LoRA fine-tuning (Hu et al. 2021, arXiv:2106.09685): the base weights frozen and a trainable "
        "rank-r adapter (B A, r x in and out x r) beside each targeted linear layer; null: every weight trains.",
    )
    lora_targets: LoraTargets = Field(
        default="all_linear",
        description="With lora_rank: the linear layers that get an adapter: all_linear (the attention projections, the "
        "dense MLP and shared experts; routed experts and the router stay frozen), attention (its projections) or qkv "
        "(the query, key and value projections alone: Megatron-Bridge's linear_qkv).",
    )
    flash_attention: StrictBool = Field(default=True, description="Fused attention: no s x s score matrix is stored.")
    attention_kernel: AttentionKernel | None = Field(
        default=None,
        description="The fused attention's kernel: fused (the chip's best: Transformer Engine's cuDNN attention on "
        "Hopper) or flash2 (FlashAttention-2: Transformer Engine's flash-attn backend, as Megatron-LM "
        "--attention-backend flash or NVTE_FUSED_ATTN=0 select it, or PyTorch SDPA's flash backend); null = the "
        "engine's (its profile's kernels.attention_kernel).",
    )
    overlap_grad_reduce: StrictBool = Field(
        default=True,
        description="Data-parallel gradient reduction overlaps the backward pass (PyTorch DDP/FSDP, "
        "Megatron --overlap-grad-reduce); false for a reduction after backward (Megatron 2021 'local' DDP).",
    )
    overlap_tp_comm: StrictBool = Field(
        default=False,
        description="Tensor-parallel collectives overlap the GEMMs (Megatron --tp-comm-overlap, async TP).",
    )
    fp8_param_gather: StrictBool = Field(
        default=False,
        description="fp8 (fp4) training keeps the transformer layers' compute weights in fp8 (NVFP4) and all-gathers "
        "them so (Megatron-LM --fp8-param-gather, --fp4-param); needs dtype fp8 or fp4 and a sharded optimizer "
        "(zero >= 1).",
    )
    fp8_recipe: Fp8Recipe = Field(
        default="tensorwise",
        description="How fp8 training scales its casts (dtype fp8): tensorwise (per-tensor current scaling, an "
        "amax pass then the cast: NeMo/Megatron-Bridge FP8-CS, torchao's tensorwise float8), delayed (a per-tensor "
        "scale from an amax history, the cast records the amax: Megatron-LM's --fp8-recipe default, Transformer "
        "Engine's DelayedScaling), mxfp8 (a scale per 32 elements, chips with block-scaled fp8 tensor cores: "
        "Blackwell), blockwise (1 x 128 activation and 128 x 128 weight blocks, DeepSeek-V3's) or rowwise (a scale "
        "per row of each operand: torchao's rowwise float8, torchtitan float8 recipe_name rowwise).",
    )
    offload_optimizer: StrictBool = Field(
        default=False,
        description="Optimizer states and their step on the CPU (ZeRO-Offload, FSDP CPUOffload, Megatron "
        "--optimizer-cpu-offload).",
    )
    offload_params: StrictBool = Field(
        default=False, description="16-bit parameter shards kept on the host (ZeRO-Infinity / FSDP CPUOffload; zero 3)."
    )
    cpu_optimizer: Literal["fused", "torch"] | None = Field(
        default=None,
        description="The CPU Adam of offloaded states: fused (DeepSpeedCPUAdam) or torch (torch.optim); null = the "
        "engine's.",
    )
    offload_activation_layers: LayersOrNone = Field(
        default=0,
        description="Layers per stage whose activations go to the host in forward and come back in backward "
        "(Megatron-Core --cpu-offloading-num-layers, DeepSpeed cpu_checkpointing for all checkpointed layers).",
    )
    shard_group: Degree | None = Field(
        default=None,
        description="Hybrid sharding (HSDP, ZeRO++ hpZ/MiCS): ZeRO shards over groups of this many data-parallel "
        "ranks (dp x cp) and replicates across groups; null = one group of all dp x cp ranks.",
    )
    etp: Degree | None = Field(
        default=None,
        description="Expert tensor-parallel degree (Megatron --expert-tensor-parallel-size); null = tp. The expert "
        "layers' etp x ep ranks (then the expert data-parallel ones) span the tp x cp x dp ranks of a stage, kept "
        "adjacent (Megatron's expert rank order; MoE parallel folding).",
    )
    moe_dispatcher: MoeDispatcher = Field(
        default="alltoall",
        description="MoE token dispatcher: alltoall (NCCL), allgather, deepep or hybridep (Megatron's flex "
        "dispatcher backends: one copy of a token per remote node, fanned out inside the NVLink domain).",
    )
    moe_ep_overlap: StrictBool = Field(
        default=False,
        description="Expert all-to-all hidden behind another micro-batch's compute (Megatron "
        "--overlap-moe-expert-parallel-comm: 1F1B batch-level overlap; DualPipe does the same).",
    )
    moe_delay_wgrad: StrictBool | None = Field(
        default=None,
        description="The routed experts' weight gradients wait until the dispatch's backward all-to-all has started, "
        "so it runs beside them: with moe_ep_overlap Megatron's --delay-wgrad-compute (the dispatch's gradient waits "
        "for the experts' data gradients only), without it --overlap-dispatch-backward-with-experts-wgrad (the weight "
        "gradients on a side stream); null = on with moe_ep_overlap or the dualpipe schedule (every published overlap "
        "recipe pairs them; DualPipe splits each backward into its input and weight gradients), off without.",
    )
    moe_shared_expert_overlap: StrictBool = Field(
        default=False,
        description="The shared experts run beside the dispatch and combine (Megatron --moe-shared-expert-overlap).",
    )
    moe_capacity_factor: float | None = Field(
        default=None,
        gt=0,
        le=64,
        description="Token drop: each expert takes at most this times its balanced share of tokens, padded to it "
        "(Megatron --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity); null = dropless.",
    )
    moe_load_imbalance: float = Field(
        default=1.0,
        ge=1.0,
        le=MAX_MOE_LOAD_IMBALANCE,
        description="Dropless routing's load on the busiest expert-parallel rank over the balanced share (max / mean "
        "of the routed copies the EP ranks receive): that rank's expert GEMMs, regrouping and received all-to-all "
        "bytes set every rank's pace. 1 = balanced, as the benchmark recipes force it "
        "(--moe-router-force-load-balancing); capped at ep (a rank cannot receive more than its group's copies); no "
        "effect without expert parallelism. Measure it from your router's per-expert token counts.",
    )
    cuda_graph_scope: tuple[CudaGraphScope, ...] = Field(
        default=(),
        description="Parts of each layer captured in CUDA graphs (Megatron --cuda-graph-scope: full, attn, mlp, moe, "
        "moe_router, moe_preprocess); empty = eager launches.",
    )
    optimizer_state_dtype: MomentsDtype = Field(
        default="fp32",
        description="Adam moments' dtype (Megatron --exp-avg-dtype/--exp-avg-sq-dtype with "
        "--use-precision-aware-optimizer; DeepSpeed bf16_optimizer_states); int8: bitsandbytes' 8-bit blockwise "
        "states (the Hugging Face Trainer's --optim adamw_bnb_8bit).",
    )
    master_weights_dtype: StateDtype = Field(
        default="fp32",
        description="Master weights' dtype: fp32 (a copy beside the 16-bit weights) or bf16 (the 16-bit weights are "
        "the master; DeepSpeed bf16_master_weights_and_grads, Megatron --main-params-dtype).",
    )
    mtp_layers: LayersOrNone | None = Field(
        default=None,
        description="Multi-token-prediction layers trained with the model (Megatron --mtp-num-layers); null = the "
        "model's (HF num_nextn_predict_layers), 0 = none.",
    )
    activation_input_fp8: StrictBool = Field(
        default=False,
        description="The gated activation's input (fc1's output) is kept for the backward in fp8, wherever it is "
        "kept: by the SwiGLU itself (Megatron --activation-func-fp8-input-store) or as the checkpoint of a "
        "recomputed activation (DeepSeek-V3's framework, report Sec. 3.3.3; Megatron's checkpoint keeps it 16-bit).",
    )
    engine: EngineName = Field(
        default="megatron",  # planner.specs.engine.DEFAULT_ENGINE
        description="The training engine that runs the layout (planner.specs.engine profiles: megatron, nemo, "
        "torchtitan, fsdp, deepspeed); its profile sets kernels, ZeRO implementation and what it can run.",
    )
    compile: StrictBool = Field(
        default=False,
        description="torch.compile on (torch engines): element-wise kernels fused as the compiler fuses them.",
    )
    compile_loss: StrictBool | None = Field(
        default=None,
        description="torch.compile on the loss (torch engines; torchtitan [compile] components 'loss'): the fused "
        "cross-entropy keeps the 16-bit logits alone for its backward (EngineProfile.kernels."
        "compiled_loss_bytes_per_logit). None: as `compile`.",
    )
    fp8_attention: StrictBool = Field(
        default=False,
        description="Transformer Engine's FP8 attention (Megatron --fp8-dot-product-attention, Megatron-Bridge "
        "mixed_precision.fp8_dot_product_attention): the fused attention kernel runs on fp8 Q, K and V, at the speed "
        "the hardware profile measures for it (efficiency.attention_fp8), and keeps them in fp8 for its backward; "
        "needs dtype fp8 with per-tensor or MX scales (fp8_recipe tensorwise, delayed or mxfp8) and flash attention.",
    )
    moe_fused_mlp: StrictBool = Field(
        default=False,
        description="Transformer Engine's fused grouped MLP for the routed experts (Megatron "
        "--use-transformer-engine-op-fuser with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1; Megatron-Bridge's "
        "cutedsl_fused_grouped_mlp): fc1's grouped GEMM applies the gated activation, the routing weight and the "
        "MXFP8 quantization of fc2's input in its epilogue, and fc2's data-gradient GEMM the activation's gradient "
        "and the quantization of fc1's output gradient, one kernel for all local experts (CuTe DSL kernels of "
        "cuDNN frontend); needs dtype fp8 with fp8_recipe mxfp8, a MoE model with a gated MLP, and a chip of compute "
        "capability 10 (the hardware profile's accelerator.fused_grouped_mlp).",
    )

    @model_validator(mode="after")
    def _check_flags(self) -> Layout:
        if self.recompute_layers_per_stage is not None and self.recompute != "full":
            raise ValueError("recompute_layers_per_stage applies only with recompute 'full'")
        if self.fp8_param_gather and (self.dtype not in QUANTIZED_DTYPES or self.zero < Zero.OPTIMIZER):
            raise ValueError("fp8_param_gather needs dtype fp8 or fp4 and zero >= 1 (Megatron-LM allows it only with "
                             "the distributed optimizer or FSDP)")
        if self.recompute_modules is not None and self.recompute != "selective":
            raise ValueError("recompute_modules applies only with recompute 'selective'")
        if self.offload_params and self.zero != Zero.PARAMETERS:
            raise ValueError("offload_params needs zero 3 (parameters are offloaded as shards)")
        if self.shard_group is not None and (self.dp * self.cp) % self.shard_group != 0:
            raise ValueError(
                f"shard_group({self.shard_group}) must divide dp({self.dp}) * cp({self.cp}) = {self.dp * self.cp}"
            )
        if self.cpu_optimizer is not None and not self.offload_optimizer:
            raise ValueError("cpu_optimizer applies only with offload_optimizer")
        if self.optimizer_state_dtype != "fp32" and self.optimizer != "adam":
            raise ValueError(f"optimizer_state_dtype {self.optimizer_state_dtype} applies to adam's moments only")
        if self.optimizer != "muon" and (self.muon_ns_steps != MUON_NS_STEPS_DEFAULT
                                         or self.muon_tp_mode != "duplicated" or not self.muon_split_qkv):
            raise ValueError("muon_ns_steps, muon_tp_mode and muon_split_qkv apply only with optimizer muon")
        if self.lora_rank is None and self.lora_targets != "all_linear":
            raise ValueError("lora_targets applies only with lora_rank")
        if self.lora_rank is not None and self.optimizer == "muon":
            raise ValueError("lora_rank with optimizer muon: LoRA's adapters are low-rank matrices that Muon's "
                             "orthogonalisation is not run on by any engine planner reads; use adam")
        if self.optimizer == "muon":
            if self.dtype == "fp16":
                raise ValueError("optimizer muon with dtype fp16: Megatron-Core's emerging optimizers refuse fp16 "
                                 "(megatron/core/optimizer/__init__.py: 'emerging optimizer with fp16 is not "
                                 "supported'); train in bf16")
            if self.zero >= Zero.GRADIENTS:
                raise ValueError(f"optimizer muon with zero {self.zero}: Muon orthogonalises whole matrices, and "
                                 "Megatron-Core shards it only as its layer-wise distributed optimizer (zero 1: whole "
                                 "matrices owned by data-parallel ranks; Megatron FSDP with it is not validated); "
                                 "use zero 0 or 1")
            if self.offload_optimizer:
                raise ValueError("optimizer muon with offload_optimizer: the CPU optimizers (DeepSpeed CPUAdam, "
                                 "Megatron's hybrid device optimizer) run Adam; set offload_optimizer false")
        if self.attention_kernel is not None and not self.flash_attention:
            raise ValueError("attention_kernel applies only with flash_attention (the unfused path has no kernel choice)")
        if self.fp8_recipe != "tensorwise" and self.dtype != "fp8":
            raise ValueError(f"fp8_recipe {self.fp8_recipe} applies only with dtype fp8 (got dtype {self.dtype})")
        if self.fp8_attention and (self.dtype != "fp8" or not self.flash_attention):
            raise ValueError("fp8_attention runs the fused attention kernel on fp8 inputs: it needs dtype fp8 and "
                             "flash_attention (Megatron-LM's --fp8-dot-product-attention needs --fp8-format, which "
                             "--fp4-format excludes)")
        if self.fp8_attention and self.fp8_recipe == "blockwise":
            raise ValueError("fp8_attention with fp8_recipe blockwise: Transformer Engine has no fused fp8 attention "
                             "for block scaling (its backend selection disables it); use tensorwise, delayed or mxfp8, "
                             "or set fp8_attention false")
        if self.moe_fused_mlp and (self.dtype != "fp8" or self.fp8_recipe != "mxfp8"):
            raise ValueError("moe_fused_mlp is Transformer Engine's fused grouped MLP, which runs only under block "
                             "scaling (its fuser leaves the experts unfused for any other recipe): it needs dtype fp8 "
                             "with fp8_recipe mxfp8, or set moe_fused_mlp false")
        if self.moe_load_imbalance != 1.0 and self.moe_capacity_factor is not None:
            raise ValueError(f"moe_load_imbalance({self.moe_load_imbalance:g}) applies to dropless routing: with "
                             f"moe_capacity_factor({self.moe_capacity_factor:g}) every expert is padded to its capacity "
                             "whatever the routing; set one of them")
        return self

    @property
    def expert_tp(self) -> int:
        """The expert layers' tensor-parallel degree (etp, or tp when unset)."""
        return self.tp if self.etp is None else self.etp

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def resolved_moe_delay_wgrad(self) -> bool:
        """Whether the experts' weight gradients wait for the dispatch's backward (moe_delay_wgrad, else
        delay_wgrad_default)."""
        if self.moe_delay_wgrad is not None:
            return self.moe_delay_wgrad
        return bool(delay_wgrad_default(self.moe_ep_overlap, self.schedule == "dualpipe"))

    @property
    def resolved_attention_kernel(self) -> AttentionKernel:
        """The attention kernel that runs: the layout's, else its engine's."""
        return attention_kernel_run(self.engine, self.attention_kernel)

    def to_arrays(self) -> LayoutArrays:
        return LayoutArrays.from_layouts([self])


def delay_wgrad_default(moe_ep_overlap: Any, dualpipe: Any) -> Any:
    """Layout.moe_delay_wgrad where it is null: on with the 1F1B all-to-all overlap or DualPipe (every published run
    with the overlap sets --delay-wgrad-compute; DualPipe splits each backward into input and weight gradients), off
    without. Booleans or boolean arrays alike."""
    return moe_ep_overlap | dualpipe


_INT_FIELDS = ("tp", "pp", "cp", "dp", "ep", "zero", "micro_batch", "global_batch", "seq_len", "interleave")


@dataclass(frozen=True)
class LayoutArrays:
    """Layouts as parallel numpy arrays (shape (n,)); the cost model's only input besides the specs.

    `recompute` holds RECOMPUTE_CODES; `recompute_layers` is -1 where all layers are recomputed;
    `recompute_modules` a RECOMPUTE_MODULE_BITS mask (read with recompute selective).
    `sequence_parallel`, `flash_attention` and `gpipe` are booleans; precisions are per-candidate too,
    as bytes and as peak-FLOP keys, so mixed grids stay possible.
    """

    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    dp: np.ndarray
    ep: np.ndarray
    zero: np.ndarray
    sequence_parallel: np.ndarray
    recompute: np.ndarray
    recompute_layers: np.ndarray
    recompute_modules: np.ndarray
    micro_batch: np.ndarray
    global_batch: np.ndarray
    seq_len: np.ndarray
    interleave: np.ndarray
    microbatch_group: np.ndarray  # Layout.microbatch_group_size; 0 = pp (Megatron-Core's default)
    gpipe: np.ndarray
    dualpipe: np.ndarray  # schedule dualpipe
    flash_attention: np.ndarray
    attention_flash2: np.ndarray  # resolved: the layout's attention_kernel, else its engine's, is flash2
    grad_bytes: np.ndarray
    optimizer_bytes: np.ndarray
    optimizer: np.ndarray  # OPTIMIZER_CODES
    muon_ns_steps: np.ndarray  # Layout.muon_ns_steps
    muon_tp_mode: np.ndarray  # MUON_TP_MODE_CODES
    muon_split_qkv: np.ndarray
    lora_rank: np.ndarray  # Layout.lora_rank; 0: no LoRA (every weight trains)
    lora_targets: np.ndarray  # LORA_TARGET_CODES (Layout.lora_targets)
    fp8: np.ndarray  # the layers' GEMMs run on quantized inputs: dtype fp8, or fp4 (fp8_recipe NVFP4)
    overlap_grad_reduce: np.ndarray
    overlap_tp_comm: np.ndarray
    fp8_params: np.ndarray  # transformer-layer weights held in fp8, or NVFP4 under fp4 (fp8_param_gather)
    fp8_recipe: np.ndarray  # FP8_RECIPE_CODES (Layout.fp8_recipe); Fp8RecipeCode.NVFP4 for dtype fp4
    compile: np.ndarray
    compile_loss: np.ndarray  # resolved: the loss runs compiled (Layout.compile_loss, else compile)
    clamp_fused: np.ndarray  # resolved: a clamped activation's clamp runs inside a fused kernel (compile, or the engine's)
    offload_optimizer: np.ndarray
    offload_params: np.ndarray
    torch_cpu_adam: np.ndarray
    offload_activation_layers: np.ndarray
    shard_group: np.ndarray
    etp: np.ndarray  # resolved: tp where the layout leaves it unset
    moe_dispatcher: np.ndarray  # DISPATCHER_CODES
    moe_ep_overlap: np.ndarray
    moe_delay_wgrad: np.ndarray  # resolved (Layout.resolved_moe_delay_wgrad)
    moe_shared_expert_overlap: np.ndarray
    moe_capacity_factor: np.ndarray  # 0.0 = dropless
    moe_load_imbalance: np.ndarray  # Layout.moe_load_imbalance (1.0 = balanced)
    cuda_graphs: np.ndarray  # CUDA_GRAPH_BITS mask
    moments_bf16: np.ndarray  # Adam moments in bf16 (optimizer_bytes already counts it)
    moments_int8: np.ndarray  # Adam moments in bitsandbytes' 8-bit blockwise form (optimizer_bytes counts it)
    master_bf16: np.ndarray  # no fp32 master copy (optimizer_bytes already counts it)
    mtp_layers: np.ndarray  # -1 = the model's
    activation_input_fp8: np.ndarray  # fc1's output kept in fp8 for the backward (Layout.activation_input_fp8)
    fp8_attention: np.ndarray  # the fused attention on fp8 inputs (Layout.fp8_attention)
    moe_fused_mlp: np.ndarray  # the routed experts in Transformer Engine's fused grouped MLP (Layout.moe_fused_mlp)

    @cached_property
    def shape(self) -> tuple[int, ...]:
        """The broadcast shape of all fields: (n,) for a list of layouts; a search grid may give each field
        its own axis (fields of shape (a, 1, 1), (1, z, 1), ...) so terms that depend on few fields are
        computed once per distinct value. Computed once (the fields of a frozen instance keep their shapes; the
        rules and the stage formulas ask for it hundreds of times per estimate)."""
        return np.broadcast_shapes(*(getattr(self, f.name).shape for f in fields(self)))

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def gpus(self) -> np.ndarray:
        return np.asarray(self.tp * self.pp * self.cp * self.dp)

    @property
    def fp4(self) -> np.ndarray:
        """NVFP4 training (dtype fp4): the quantized GEMMs run on fp4 tensor cores."""
        return np.asarray(self.fp8 & (self.fp8_recipe == Fp8RecipeCode.NVFP4))

    @property
    def shard_degree(self) -> np.ndarray:
        """Ranks a ZeRO shard group spans: the HSDP shard group, or all dp x cp ranks."""
        return np.where(self.shard_group > 0, self.shard_group, self.dp * self.cp)

    @property
    def replicas(self) -> np.ndarray:
        """Shard groups that hold the same shards (HSDP replicas): dp x cp / shard_degree."""
        return np.asarray(np.maximum(self.dp * self.cp // np.maximum(self.shard_degree, 1), 1))

    @property
    def num_micro_batches(self) -> np.ndarray:
        """Micro-batches per step per pipeline (gradient-accumulation steps); floor where indivisible."""
        return np.asarray(np.maximum(self.global_batch // np.maximum(self.dp * self.micro_batch, 1), 1))

    @property
    def microbatch_group_size(self) -> np.ndarray:
        """Micro-batches each virtual stage runs in a row under interleaved 1F1B: the layout's, else pp."""
        return np.asarray(np.where(self.microbatch_group > 0, self.microbatch_group, self.pp))

    @classmethod
    def from_layouts(cls, layouts: list[Layout]) -> LayoutArrays:
        cols: dict[str, np.ndarray] = {
            name: np.array([getattr(lay, name) for lay in layouts], dtype=np.int64) for name in _INT_FIELDS
        }
        cols["sequence_parallel"] = np.array([lay.sequence_parallel for lay in layouts], dtype=bool)
        cols["microbatch_group"] = np.array([lay.microbatch_group_size or 0 for lay in layouts], dtype=np.int64)
        cols["recompute"] = np.array([RECOMPUTE_CODES[lay.recompute] for lay in layouts], dtype=np.int64)
        cols["recompute_layers"] = np.array(
            [-1 if lay.recompute_layers_per_stage is None else lay.recompute_layers_per_stage for lay in layouts],
            dtype=np.int64,
        )
        cols["recompute_modules"] = np.array(
            [recompute_module_mask(lay.recompute_modules) for lay in layouts], dtype=np.int64
        )
        cols["gpipe"] = np.array([lay.schedule == "gpipe" for lay in layouts], dtype=bool)
        cols["dualpipe"] = np.array([lay.schedule == "dualpipe" for lay in layouts], dtype=bool)
        cols["flash_attention"] = np.array([lay.flash_attention for lay in layouts], dtype=bool)
        cols["attention_flash2"] = np.array([lay.resolved_attention_kernel == "flash2" for lay in layouts], dtype=bool)
        cols["grad_bytes"] = np.array([4 if lay.grad_dtype == "fp32" else 2 for lay in layouts], dtype=np.int64)
        cols["optimizer_bytes"] = np.array(
            [optimizer_state_bytes(lay.optimizer, lay.optimizer_state_dtype, lay.master_weights_dtype) for lay in layouts],
            dtype=np.int64,
        )
        cols["optimizer"] = np.array([OPTIMIZER_CODES[lay.optimizer] for lay in layouts], dtype=np.int64)
        cols["muon_ns_steps"] = np.array([lay.muon_ns_steps for lay in layouts], dtype=np.int64)
        cols["muon_tp_mode"] = np.array([MUON_TP_MODE_CODES[lay.muon_tp_mode] for lay in layouts], dtype=np.int64)
        cols["muon_split_qkv"] = np.array([lay.muon_split_qkv for lay in layouts], dtype=bool)
        cols["lora_rank"] = np.array([lay.lora_rank or 0 for lay in layouts], dtype=np.int64)
        cols["lora_targets"] = np.array([LORA_TARGET_CODES[lay.lora_targets] for lay in layouts], dtype=np.int64)
        cols["moments_bf16"] = np.array([lay.optimizer_state_dtype == "bf16" for lay in layouts], dtype=bool)
        cols["moments_int8"] = np.array([lay.optimizer_state_dtype == "int8" for lay in layouts], dtype=bool)
        cols["master_bf16"] = np.array([lay.master_weights_dtype == "bf16" for lay in layouts], dtype=bool)
        cols["etp"] = np.array([lay.expert_tp for lay in layouts], dtype=np.int64)
        cols["moe_dispatcher"] = np.array([DISPATCHER_CODES[lay.moe_dispatcher] for lay in layouts], dtype=np.int64)
        cols["moe_ep_overlap"] = np.array([lay.moe_ep_overlap for lay in layouts], dtype=bool)
        cols["moe_delay_wgrad"] = np.array([lay.resolved_moe_delay_wgrad for lay in layouts], dtype=bool)
        cols["moe_shared_expert_overlap"] = np.array([lay.moe_shared_expert_overlap for lay in layouts], dtype=bool)
        cols["moe_capacity_factor"] = np.array([lay.moe_capacity_factor or 0.0 for lay in layouts], dtype=float)
        cols["moe_load_imbalance"] = np.array([lay.moe_load_imbalance for lay in layouts], dtype=float)
        cols["cuda_graphs"] = np.array([cuda_graph_mask(lay.cuda_graph_scope) for lay in layouts], dtype=np.int64)
        cols["mtp_layers"] = np.array([-1 if lay.mtp_layers is None else lay.mtp_layers for lay in layouts], dtype=np.int64)
        cols["activation_input_fp8"] = np.array([lay.activation_input_fp8 for lay in layouts], dtype=bool)
        cols["fp8_attention"] = np.array([lay.fp8_attention for lay in layouts], dtype=bool)
        cols["moe_fused_mlp"] = np.array([lay.moe_fused_mlp for lay in layouts], dtype=bool)
        cols["fp8"] = np.array([lay.dtype in QUANTIZED_DTYPES for lay in layouts], dtype=bool)
        for flag in ("overlap_grad_reduce", "overlap_tp_comm", "compile", "offload_optimizer", "offload_params"):
            cols[flag] = np.array([getattr(lay, flag) for lay in layouts], dtype=bool)
        cols["clamp_fused"] = np.array([clamp_fused(lay.engine, lay.compile) for lay in layouts], dtype=bool)
        cols["compile_loss"] = np.array([lay.compile if lay.compile_loss is None else lay.compile_loss
                                         for lay in layouts], dtype=bool)
        cols["fp8_params"] = np.array([lay.fp8_param_gather for lay in layouts], dtype=bool)
        cols["fp8_recipe"] = np.array([Fp8RecipeCode.NVFP4 if lay.dtype == "fp4" else FP8_RECIPE_CODES[lay.fp8_recipe]
                                       for lay in layouts], dtype=np.int64)
        cols["torch_cpu_adam"] = np.array(
            [(lay.cpu_optimizer or engine_profile(lay.engine).offload.cpu_optimizer) == "torch" for lay in layouts],
            dtype=bool,
        )
        cols["offload_activation_layers"] = np.array([lay.offload_activation_layers for lay in layouts], dtype=np.int64)
        cols["shard_group"] = np.array([lay.shard_group or 0 for lay in layouts], dtype=np.int64)
        return cls(**cols)

    def take(self, index: np.ndarray | int) -> LayoutArrays:
        """The candidates at `index` (an int keeps a length-1 array)."""
        idx = np.atleast_1d(index)
        return LayoutArrays(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    def _cpu_optimizer_of(self, i: int, engine: str) -> str | None:
        if not bool(self.offload_optimizer[i]):
            return None
        chosen = "torch" if bool(self.torch_cpu_adam[i]) else "fused"
        return None if chosen == engine_profile(engine).offload.cpu_optimizer else chosen

    def _attention_kernel_of(self, i: int, engine: str) -> AttentionKernel | None:
        chosen: AttentionKernel = "flash2" if bool(self.attention_flash2[i]) else "fused"
        return None if chosen == engine_profile(engine).kernels.attention_kernel else chosen

    def _modules_of(self, i: int) -> tuple[str, ...] | None:
        mask = int(self.recompute_modules[i])
        if int(self.recompute[i]) != RECOMPUTE_CODES["selective"] or mask == recompute_module_mask(None):
            return None
        return recompute_module_names(mask)

    def to_layout(self, i: int, *, dtype: str = "bf16", engine: str = DEFAULT_ENGINE) -> Layout:
        """Candidate i back as a `Layout` (the compute dtype and the engine are passed, as grids share one)."""
        rl = int(self.recompute_layers[i])
        grad = {4: "fp32", 2: "bf16"}[int(self.grad_bytes[i])]
        moments = "int8" if bool(self.moments_int8[i]) else "bf16" if bool(self.moments_bf16[i]) else "fp32"
        master = "bf16" if bool(self.master_bf16[i]) else "fp32"
        opt = OPTIMIZER_NAMES[int(self.optimizer[i])]
        muon = opt == "muon"
        etp = int(self.etp[i])
        mtp = int(self.mtp_layers[i])
        capacity = float(self.moe_capacity_factor[i])
        return Layout(
            **{name: int(getattr(self, name)[i]) for name in _INT_FIELDS},
            microbatch_group_size=int(self.microbatch_group[i]) or None,
            sequence_parallel=bool(self.sequence_parallel[i]),
            recompute=RECOMPUTE_NAMES[int(self.recompute[i])],
            recompute_layers_per_stage=None if rl < 0 else rl,
            recompute_modules=self._modules_of(i),
            schedule="gpipe" if bool(self.gpipe[i]) else ("dualpipe" if bool(self.dualpipe[i]) else "1f1b"),
            flash_attention=bool(self.flash_attention[i]),
            attention_kernel=self._attention_kernel_of(i, engine) if bool(self.flash_attention[i]) else None,
            overlap_grad_reduce=bool(self.overlap_grad_reduce[i]),
            overlap_tp_comm=bool(self.overlap_tp_comm[i]),
            fp8_param_gather=bool(self.fp8_params[i]),
            fp8_recipe=FP8_RECIPE_NAMES.get(int(self.fp8_recipe[i]), "tensorwise") if bool(self.fp8[i]) else "tensorwise",
            compile=bool(self.compile[i]),
            compile_loss=None if bool(self.compile_loss[i]) == bool(self.compile[i]) else bool(self.compile_loss[i]),
            offload_optimizer=bool(self.offload_optimizer[i]),
            offload_params=bool(self.offload_params[i]),
            offload_activation_layers=int(self.offload_activation_layers[i]),
            shard_group=int(self.shard_group[i]) or None,
            cpu_optimizer=self._cpu_optimizer_of(i, engine),
            engine=engine,
            grad_dtype=grad,
            optimizer=opt,
            muon_ns_steps=int(self.muon_ns_steps[i]) if muon else MUON_NS_STEPS_DEFAULT,
            muon_tp_mode=MUON_TP_MODE_NAMES[int(self.muon_tp_mode[i])] if muon else "duplicated",
            muon_split_qkv=bool(self.muon_split_qkv[i]) if muon else True,
            lora_rank=int(self.lora_rank[i]) or None,
            lora_targets=LORA_TARGETS[int(self.lora_targets[i])] if int(self.lora_rank[i]) else "all_linear",
            optimizer_state_dtype=moments,
            master_weights_dtype=master,
            etp=None if etp == int(self.tp[i]) else etp,
            moe_dispatcher=DISPATCHER_NAMES[int(self.moe_dispatcher[i])],
            moe_ep_overlap=bool(self.moe_ep_overlap[i]),
            # null where it is what the overlap (or DualPipe) implies, as Layout resolves it
            moe_delay_wgrad=None if bool(self.moe_delay_wgrad[i]) == bool(
                delay_wgrad_default(self.moe_ep_overlap[i], self.dualpipe[i])) else bool(self.moe_delay_wgrad[i]),
            moe_shared_expert_overlap=bool(self.moe_shared_expert_overlap[i]),
            moe_capacity_factor=capacity if capacity > 0 else None,
            moe_load_imbalance=float(self.moe_load_imbalance[i]),
            cuda_graph_scope=cuda_graph_names(int(self.cuda_graphs[i])),
            mtp_layers=None if mtp < 0 else mtp,
            activation_input_fp8=bool(self.activation_input_fp8[i]),
            fp8_attention=bool(self.fp8_attention[i]),
            moe_fused_mlp=bool(self.moe_fused_mlp[i]),
            dtype=(("fp4" if int(self.fp8_recipe[i]) == Fp8RecipeCode.NVFP4 else "fp8") if bool(self.fp8[i])
                   else dtype),
        )
