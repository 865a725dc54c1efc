"""Memory per GPU on one pipeline stage: model states, activations, buffers, reserve.

Model states follow ZeRO (Rajbhandari et al. 2020, Sec. 3.1 and Fig. 1):
16-bit weights (2 bytes), gradients (grad dtype), optimizer states (K bytes,
12 for mixed-precision Adam), sharded over the data-parallel group by stage.
Activations follow Korthikanti et al. 2022 (Sec. 4, Table 2), generalised to
GQA, gated MLPs, MoE, head_dim != h/a, flash attention and context parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planner.physics import linear_attention
from planner.physics.kernels import NVFP4_COPY_BYTES_PER_ELEMENT
from planner.physics.linear_attention import layer_linear_counts
from planner.physics.lora import adapter_params
from planner.physics.moe import capacity_factor
from planner.physics.params import mtp_layer_is_moe
from planner.physics.reserve import NCCL_BYTES_PER_COMMUNICATOR, PROCESS_BYTES
from planner.physics.shapes import (
    attention_dims,
    embedding_params_per_rank,
    expert_shard_degree,
    head_params_per_rank,
    kv_divisor,
    layer_params_per_rank,
    mtp_embedding_params_per_rank,
    mtp_params_per_rank,
)
from planner.physics.stages import first_layer_of_stage, microbatches_in_flight, mtp_layers_on_stage, stage_layer_split
from planner.specs.engine import EngineProfile
from planner.specs.layout import (
    LORA_TARGET_CODES,
    MUON_SCALAR_EXTRA_BYTES,
    OPTIMIZER_CODES,
    RECOMPUTE_MODULE_BITS,
    Fp8RecipeCode,
    LayoutArrays,
    RecomputeCode,
    Zero,
)
from planner.specs.model import ModelSpec

# Bytes of a 16-bit weight copy (bf16/fp16); fp8 training keeps 16-bit weights too (Transformer Engine
# casts per GEMM), so fp8 changes GEMM speed here, not model-state memory.
WEIGHT_BYTES = 2
# Megatron-LM --fp8-param-gather: the transformer layers' compute weights are Transformer Engine fp8
# tensors (1 byte; "keep the compute param in fp8", megatron/training/arguments.py), all-gathered in fp8;
# the fp32 main copy stays with the optimizer, and the embedding, LM head and router stay 16-bit.
# The layers' norm weights are counted at 1 byte too (2h per layer, below 0.01% of a layer).
FP8_WEIGHT_BYTES = 1
ACTIVATION_BYTES = 2  # 16-bit activations (Korthikanti et al. 2022 Sec. 4.1)
FP8_ACTIVATION_BYTES = 1  # an fp8 (E4M3) copy of a GEMM input saved for the backward pass
LOGITS_BYTES = 4  # logits are upcast to fp32 for the cross-entropy (Korthikanti et al. 2022 Sec. 4.3: 4sbv/t)
# At the loss's peak (its backward) a vocabulary element of the last micro-batch holds the fp32 softmax kept
# for the backward (4) and the bf16 gradient of the logits written from it for the LM head's backward (2):
# 6 bytes, not Korthikanti's 4. Megatron-Core's vocab-parallel cross-entropy upcasts the bf16 logits (freed
# then), exponentiates in place and turns the saved softmax into the gradient in place. PyTorch's eager
# cross_entropy on upcast logits (torchtitan: pred.float()) holds, at log_softmax's backward, the saved fp32
# log-softmax, nll_loss's fp32 gradient of it and the new fp32 gradient of the logits at once, 12 bytes
# (benchmarks/torch_loss_peak.py): the engine profile's kernels.loss_bytes_per_logit tells them apart
# (planner.specs.engine, 12 for torch); this constant is the Megatron value. With a 128K vocabulary at tp 1 this is 0.77 MB per token.
LOSS_PEAK_BYTES_PER_LOGIT = LOGITS_BYTES + 2
# Not counted: Transformer Engine's fp8 copies of the weights (an fp8 weight and its transpose, 2 bytes per
# layer parameter). The fp8 recipes of the published runs gather fp8 parameters (Megatron --fp8-param-gather,
# torchao's float8 all-gather), so the fp8 copy replaces the 16-bit one; counting it on top called six of the
# published fp8 runs that ran (NeMo, Megatron-Bridge) "does not fit".
LSE_BYTES = 4  # flash attention keeps an fp32 log-sum-exp per query row and head (Dao et al. 2022, Alg. 1)
# MoE bookkeeping kept from forward to backward, per token the rank routes. The router's scores in fp32 [T, E]
# (Megatron-Core moe/router.py computes them in fp32; its sigmoid/softmax keeps its output). The fused
# permutation (Megatron's --moe-permute-fusion, on in the Megatron-Bridge MoE recipes) keeps Transformer
# Engine's row map, int32 [T, 2E + 1] (NVIDIA/TransformerEngine transformer_engine/pytorch/triton/permutation.py
# @ d0067d0, make_row_id_map; saved by the permute and the unpermute autograd functions alike, one tensor).
ROUTER_SCORE_BYTES = 4
PERMUTE_MAP_BYTES_PER_EXPERT = 4
# Per routed copy on the expert's rank: its fp32 probability, which the weighted activation keeps
# (Megatron-Core moe/experts.py @ d98e8a64, TEGroupedMLP.forward: weighted_bias_swiglu_impl(fc1_output, ...,
# permuted_probs)), and the int32 row of the chunk sort after the all-to-all (permutation.py, sort_chunks_by_index
# saves its row_id_map). The unpermute of the combine gets no probabilities (token_dispatcher.py,
# MoEAlltoAllTokenDispatcher.token_unpermutation) and saves only its map.
PERMUTED_COPY_INDEX_BYTES = 4 + 4

# The allocator's unusable slack, a share of the activation memory that churns within a step
# (PyTorch memory snapshots typically show 5-10%); we take 5%. The process and NCCL figures are
# shared with the serving model in reserve.py.
FRAGMENTATION_FRACTION = 0.05


@dataclass(frozen=True)
class StageMemory:
    """Bytes per GPU on one stage, every term named (arrays over candidates or stages)."""

    weights_bytes: np.ndarray
    gradients_bytes: np.ndarray
    optimizer_bytes: np.ndarray
    activations_bytes: np.ndarray
    buffers_bytes: np.ndarray  # ZeRO-3 gathered parameters, gradient buckets, recompute working set
    reserve_bytes: np.ndarray  # CUDA context, NCCL, allocator fragmentation
    params: np.ndarray  # parameters held by this rank before ZeRO sharding
    host_bytes: np.ndarray  # offloaded states and activations this rank keeps in host memory

    @cached_property
    def other_bytes(self) -> np.ndarray:
        return np.asarray(self.buffers_bytes + self.reserve_bytes)

    @cached_property
    def total_bytes(self) -> np.ndarray:
        return np.asarray(
            self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes + self.other_bytes
        )


@dataclass(frozen=True)
class StageParams:
    """Parameters on one rank of a stage: replicated-by-DP part and expert part, plus the largest layer."""

    dense: np.ndarray
    expert: np.ndarray
    largest_layer_dense: np.ndarray  # the largest layer's parameters sharded like `dense`
    largest_layer_expert: np.ndarray  # and its routed experts
    num_layers: np.ndarray  # the stage's transformer layers (its MTP modules not included)
    num_moe_layers: np.ndarray
    ends: np.ndarray | float = 0.0  # embedding and LM-head parameters within `dense` (16-bit under fp8 params)
    num_mtp_layers: np.ndarray | int = 0  # multi-token-prediction modules (the last stage's), within dense/expert
    num_linear_dense: np.ndarray | int = 0  # the dense layers (within num_layers) whose mixer is Gated DeltaNet
    num_linear_moe: np.ndarray | int = 0  # and the MoE layers
    adapters: np.ndarray | float = 0.0  # LoRA's trainable adapter parameters (physics.lora), besides dense/expert
    lora: np.ndarray | bool = False  # the base weights (dense, expert, ends) are frozen: only `adapters` train

    @property
    def trainable_dense(self) -> np.ndarray:
        """The parameters with gradients and optimizer states, sharded like `dense`: all of them, or the adapters."""
        return np.asarray(np.where(self.lora, self.adapters, self.dense))

    @property
    def trainable_expert(self) -> np.ndarray:
        return np.asarray(np.where(self.lora, 0.0, self.expert))

    @property
    def trainable_ends(self) -> np.ndarray:
        return np.asarray(np.where(self.lora, 0.0, self.ends))


def stage_params(model: ModelSpec, lay: LayoutArrays, stage: np.ndarray) -> StageParams:
    """Parameters on one rank of `stage`: its layers (dense and MoE), plus embedding / head on the ends and
    the multi-token-prediction modules (with the embedding they need when pp > 1) on the last stage."""
    n, n_moe = stage_layer_split(model.num_layers, model.num_dense_layers, lay.pp, stage)
    n_dense = n - n_moe
    dense_layer = layer_params_per_rank(model, lay, moe_layer=False)
    moe_layer = layer_params_per_rank(model, lay, moe_layer=True)
    # Gated DeltaNet layers among the stage's dense layers (first) and MoE layers: their mixer in place of attention
    lin_dense, lin_moe = stage_linear_split(model, lay, stage, n_dense, n_moe)
    if model.linear_attention is not None:
        delta_dense = layer_params_per_rank(model, lay, moe_layer=False, linear=True).dense - dense_layer.dense
        delta_moe = layer_params_per_rank(model, lay, moe_layer=True, linear=True).dense - moe_layer.dense
    else:
        delta_dense = delta_moe = np.zeros_like(dense_layer.dense)
    is_first = np.asarray(stage) == 0
    is_last = np.asarray(stage) == lay.pp - 1
    n_mtp = mtp_layers_on_stage(model.mtp_layers, lay, stage)
    has_mtp = n_mtp > 0
    mtp = mtp_params_per_rank(model, lay)
    # The MTP embedding is one of the stage's ends (16-bit under fp8 params, like the first stage's).
    ends = np.where(is_first, embedding_params_per_rank(model, lay), 0) + np.where(
        is_last, head_params_per_rank(model, lay), 0
    ) + np.where(has_mtp, mtp_embedding_params_per_rank(model, lay), 0.0)
    dense = (n_dense * dense_layer.dense + n_moe * moe_layer.dense + lin_dense * delta_dense + lin_moe * delta_moe
             + ends + n_mtp * mtp.dense)
    expert = n_moe * moe_layer.expert + n_mtp * mtp.expert
    has_moe = n_moe > 0
    # the largest layer of each kind: an attention layer, or a GDN layer where the stage has one and it is larger
    dense_kind = np.where(n_dense > lin_dense, dense_layer.dense, 0.0)
    dense_kind = np.maximum(dense_kind, np.where(lin_dense > 0, dense_layer.dense + delta_dense, 0.0))
    moe_kind = np.where(n_moe > lin_moe, moe_layer.dense, 0.0)
    moe_kind = np.maximum(moe_kind, np.where(lin_moe > 0, moe_layer.dense + delta_moe, 0.0))
    largest_dense = np.maximum(np.where(n_dense > 0, dense_kind, 0.0), np.where(has_moe, moe_kind, 0.0))
    lora = lay.lora_rank > 0
    if np.any(lora):
        adapters = ((n_dense - lin_dense) * adapter_params(model, lay, moe_layer=False)
                    + (n_moe - lin_moe) * adapter_params(model, lay, moe_layer=True))
        if model.linear_attention is not None:
            adapters = adapters + (lin_dense * adapter_params(model, lay, moe_layer=False, linear=True)
                                   + lin_moe * adapter_params(model, lay, moe_layer=True, linear=True))
    else:
        adapters = np.zeros(())
    return StageParams(
        dense=dense,
        expert=expert,
        largest_layer_dense=np.maximum(largest_dense, np.where(has_mtp, mtp.dense, 0.0)),
        largest_layer_expert=np.maximum(np.where(has_moe, moe_layer.expert, 0.0), np.where(has_mtp, mtp.expert, 0.0)),
        num_layers=n,
        num_moe_layers=n_moe,
        ends=ends,
        num_mtp_layers=n_mtp,
        num_linear_dense=lin_dense,
        num_linear_moe=lin_moe,
        adapters=adapters,
        lora=lora,
    )


def stage_linear_split(model: ModelSpec, lay: LayoutArrays, stage: np.ndarray, n_dense: np.ndarray,
                       n_moe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Gated DeltaNet layers among the stage's dense layers, among its MoE layers): the dense layers come first
    (stage_layer_split), and the model's pattern says which of them keep attention (physics.linear_attention).

    With interleaving over evenly split layers a rank holds the chunks r, r + p, ... of L / (p v) layers each
    (Megatron-Core's virtual pipeline stages), so its GDN layers are counted chunk by chunk, for a model without
    leading dense layers (Qwen3.5, Qwen3-Next); otherwise its layers are taken as one contiguous block, as the
    dense/MoE split takes them."""
    start = first_layer_of_stage(model.num_layers, lay.pp, stage)
    lin_dense, lin_moe = layer_linear_counts(model, start, n_dense), layer_linear_counts(model, start + n_dense, n_moe)
    chunks = lay.pp * lay.interleave
    chunked = (lay.interleave > 1) & (model.num_layers % chunks == 0)
    if model.linear_attention is None or model.num_dense_layers and model.moe is not None or not np.any(chunked):
        return lin_dense, lin_moe
    size = model.num_layers // chunks
    total = np.zeros(np.broadcast_shapes(np.shape(stage), np.shape(chunks)), dtype=np.int64)
    for j in range(int(np.max(lay.interleave))):
        total = total + np.where(j < lay.interleave, layer_linear_counts(model, (stage + j * lay.pp) * size, size), 0)
    moe = model.moe is not None  # then every layer is a MoE layer (no leading dense ones)
    return (np.where(chunked, 0 if moe else total, lin_dense), np.where(chunked, total if moe else 0, lin_moe))


def shared_embedding_params(model: ModelSpec, lay: LayoutArrays, stage: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Parameters one rank holding both `stage` and `other` keeps once, not twice: the MTP modules' embedding on
    the last stage is the first stage's own (mtp_embedding_params_per_rank counts it for a last stage alone).
    DualPipe puts the shallowest layers (with the embedding) and the deepest (with the output head) on the same
    rank, "which enables the physical sharing of parameters and gradients, of the shared embedding and output
    head, between the MTP module and the main model" (DeepSeek-V3 technical report, arXiv:2412.19437, Sec. 3.2.3).
    The output head is shared on the last stage already (the MTP modules own none here)."""
    stage, other = np.asarray(stage), np.asarray(other)
    last = lay.pp - 1
    ends = ((stage == 0) & (other == last)) | ((other == 0) & (stage == last))
    has_mtp = mtp_layers_on_stage(model.mtp_layers, lay, last) > 0
    return np.asarray(np.where(ends & has_mtp & (lay.pp > 1), mtp_embedding_params_per_rank(model, lay), 0.0))


def layer_weight_bytes(lay: LayoutArrays) -> np.ndarray:
    """Bytes per transformer-layer weight: 16-bit, or fp8 (NVFP4 under fp4) under fp8_param_gather."""
    return np.where(lay.fp8_params, np.where(lay.fp4, NVFP4_COPY_BYTES_PER_ELEMENT, FP8_WEIGHT_BYTES), WEIGHT_BYTES)


def held_weight_bytes(lay: LayoutArrays, fp8_params_held: bool = True) -> np.ndarray:
    """Bytes per layer weight as the engine holds it, and per routed-expert weight as it gathers it:
    layer_weight_bytes where its fp8 parameters are held in fp8 (Transformer Engine's, grouped linears among them),
    16-bit where only a float8 all-gather casts the weights (engine optimizer.fp8_params_held false: torchao's, which
    converts Float8Linear modules, not a MoE's grouped experts)."""
    return np.asarray(layer_weight_bytes(lay) if fp8_params_held else np.full(lay.shape, WEIGHT_BYTES))


def saved_gemm_input_bytes(lay: LayoutArrays) -> np.ndarray:
    """Bytes per element of a GEMM input kept for the backward: 16-bit, its fp8 copy under fp8, its NVFP4 copy
    under fp4. torchao's rowwise recipe keeps the 16-bit input, which its backward casts again along the other axis
    (physics.kernels FP8_ROWWISE_CAST_BYTES_PER_ELEMENT)."""
    quantized = lay.fp8 & (lay.fp8_recipe != Fp8RecipeCode.ROWWISE)
    return np.where(quantized, np.where(lay.fp4, NVFP4_COPY_BYTES_PER_ELEMENT, FP8_ACTIVATION_BYTES), ACTIVATION_BYTES)


def model_state_bytes(lay: LayoutArrays, sp: StageParams, *, fp8_params_held: bool = True
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, gradients, optimizer) bytes under ZeRO stage 0-3 (Rajbhandari et al. 2020, Fig. 1).

    Dense parameters shard over dp x cp (Megatron's distributed optimizer and FSDP both shard over the
    data-parallel group that includes context-parallel ranks); routed experts over their expert-data-parallel
    group, tp x cp x dp / (etp x ep) (physics.shapes.expert_shard_degree). Bytes per parameter are the layout's:
    optimizer_bytes counts the master copy and the moments in their dtypes (specs.layout.optimizer_state_bytes:
    12 for fp32 Adam, 8 with bf16 moments, 8 with bf16 master weights, 4 with both), dense and experts alike.
    """
    shard = lay.shard_degree.astype(float)  # dp x cp, or the HSDP shard group
    expert_shard = expert_shard_degree(lay)

    def sharded(bytes_per_param: np.ndarray, from_stage: int, dense: np.ndarray, expert: np.ndarray) -> np.ndarray:
        on = lay.zero >= from_stage
        return np.asarray(bytes_per_param * (
            np.where(on, dense / shard, dense) + np.where(on, expert / expert_shard, expert)
        ))

    # the layers' weights at their own width (16-bit where the engine gathers fp8 but holds its weights as they are:
    # `fp8_params_held`, the engine profile's optimizer.fp8_params_held); the embedding and LM head stay 16-bit;
    # LoRA's adapters beside them
    held = held_weight_bytes(lay, fp8_params_held)
    weights = (sharded(held.astype(float), 3, sp.dense, sp.expert)
               + (WEIGHT_BYTES - held) * np.where(lay.zero >= Zero.PARAMETERS, sp.ends / shard, sp.ends)
               + np.where(sp.lora, WEIGHT_BYTES * np.where(lay.zero >= Zero.PARAMETERS, sp.adapters / shard,
                                                           sp.adapters), 0.0))
    # gradients and optimizer states: of every parameter, or (LoRA) of the adapters alone
    grads = sharded(lay.grad_bytes.astype(float), 2, sp.trainable_dense, sp.trainable_expert)
    optim = sharded(lay.optimizer_bytes.astype(float), 1, sp.trainable_dense, sp.trainable_expert)
    # Muon leaves the embedding and the output layer to Adam (physics.muon), whose second moment they add; norms
    # and biases, also Adam's, are under 0.1% of a model and counted at Muon's bytes. The layer-wise distributed
    # optimizer owns whole matrices per data-parallel rank: its shard is taken as the average, 1 / (dp x cp).
    muon_ends = np.where(lay.zero >= Zero.OPTIMIZER, sp.ends / shard, sp.ends)
    optim = optim + np.where(lay.optimizer == OPTIMIZER_CODES["muon"], MUON_SCALAR_EXTRA_BYTES * muon_ends, 0.0)
    # Offload (ZeRO-Offload / ZeRO-Infinity, FSDP CPUOffload): optimizer states live on the host; parameter
    # shards too with offload_params; under ZeRO-3 the gradient partitions are reduced into host buffers
    # (DeepSpeed stage3 with offload, FSDP CPUOffload), while ZeRO 1-2 keep theirs on the GPU until copied.
    optim = np.where(lay.offload_optimizer, 0.0, optim)
    weights = np.where(lay.offload_params, 0.0, weights)
    grads = np.where((lay.offload_optimizer | lay.offload_params) & (lay.zero >= Zero.PARAMETERS), 0.0, grads)
    return weights, grads, optim


# Host bytes per parameter of an offloaded shard: fp32 master weights, momentum and variance (the optimizer
# states, K = 12 for Adam) plus the fp32 gradient copy the CPU optimizer steps on (4); 16-bit parameters (2).
HOST_GRAD_BYTES = 4


def host_state_bytes(lay: LayoutArrays, sp: StageParams) -> np.ndarray:
    """Bytes one rank keeps in host memory for offloaded model states (its ZeRO shard)."""
    shard = lay.shard_degree.astype(float)
    expert_shard = expert_shard_degree(lay)
    on = lay.zero >= Zero.OPTIMIZER
    params = np.where(on, sp.trainable_dense / shard + sp.trainable_expert / expert_shard,
                      sp.trainable_dense + sp.trainable_expert)
    optimizer = np.where(lay.offload_optimizer, params * (lay.optimizer_bytes + HOST_GRAD_BYTES), 0.0)
    weights = np.where(lay.offload_params, params * WEIGHT_BYTES, 0.0)
    return optimizer + weights


@dataclass(frozen=True)
class LayerActivations:
    """Activation bytes per token of one layer on one rank, by recompute choice."""

    stored: np.ndarray  # what the layer keeps for backward under the layout's recompute setting
    full: np.ndarray  # what it keeps with no recompute at all
    working: np.ndarray  # what its backward re-materialises on top of `stored` (the recompute working set)


def layer_activation_bytes_per_token(
    model: ModelSpec, lay: LayoutArrays, *, moe_layer: bool, proj_cast_copy: bool = False, linear: bool = False
) -> LayerActivations:
    """Korthikanti et al. 2022 Sec. 4.1 / Table 2, per token of the rank's sequence shard.

    No parallelism, GPT (a x d = h, f = 4h, dropout): 34h + 5as bytes per token, of which 10h stay
    replicated under TP (layer-norm inputs 4h, the two GEMM inputs after the norms 4h, two dropout
    masks 2h) unless sequence parallelism splits them, 24h split over TP (Q, K, V 6h, attention output
    2h, MLP 16h), and 5as the attention scores (softmax output 2as, dropout mask as, dropout output 2as),
    split over TP. Here: K and V use the KV width (GQA) and may be replicated; the MLP stores its input to
    fc2 and the activation's input (gated 6f bytes, standard 4f); flash
    attention replaces the scores by an fp32 log-sum-exp per head; selective recompute drops the scores;
    full recompute keeps only the layer input (2h, split under SP). Under fp8 training the tensors kept
    as inputs of a GEMM's weight gradient (the two post-norm GEMM inputs, the attention output, fc2's
    input, the routed tokens) are kept in their 1-byte fp8 cast (Transformer Engine saves the quantised
    input of an fp8 Linear for its backward); the residual stream, Q/K/V and fc1's output stay 16-bit.
    The attention output stays 16-bit too, for the attention kernel keeps it for its own backward; with
    `proj_cast_copy` (the engine's kernels.fp8_proj_keeps_cast_input) the output projection keeps its fp8
    cast beside it, else it reads that one 16-bit tensor (Megatron-Core's save_original_input).
    `linear`: the layer's mixer is Gated DeltaNet, whose saved tensors (physics.linear_attention.saved_bytes_per_token)
    replace the attention's, with no scores or log-sum-exp.
    """
    h = model.hidden_size
    t = lay.tp.astype(float)
    rep_div = np.where(lay.sequence_parallel, t, 1.0)
    dropout = 1.0 if model.dropout else 0.0
    e = ACTIVATION_BYTES
    g = saved_gemm_input_bytes(lay)  # GEMM inputs kept for backward
    widths = attention_dims(model)
    kv_div = kv_divisor(model, lay.tp).astype(float)
    if model.parallel_attention_mlp:  # every norm reads the same layer input, kept once; each norm's output
        norm_inputs, gemm_inputs = 1, model.norms_per_layer  # feeds its GEMMs (one shared for GPT-J/Cohere)
    else:
        norm_inputs, gemm_inputs = model.norms_per_layer, 2
    # In an MoE layer the pre-MLP norm's output stays 16-bit under fp8: the router's GEMM runs in 16 bits and
    # keeps it (Megatron-Core moe/moe_utils.py @ d98e8a64, RouterGatingLinearFunction.forward saves its input),
    # and the shared experts' fc1 keeps that same tensor rather than an fp8 copy (moe/shared_experts.py,
    # set_save_original_input); the routed experts' inputs are the dispatched copies below.
    moe_norm_out = moe_layer and model.moe is not None and not model.parallel_attention_mlp
    post_norm = (g + e) * h if moe_norm_out else gemm_inputs * g * h  # the GEMM inputs after the norms
    # LoRA (physics.lora): a linear layer keeps its input for a weight gradient only (Transformer Engine's Linear:
    # backward_needs_input = weight.requires_grad, transformer_engine/pytorch/module/linear.py @ d0067d0), so a
    # frozen weight keeps none; its adapter keeps the 16-bit input it reads (PEFT's nn.Linear, Megatron-Bridge's
    # ParallelLinearAdapter: 16-bit GEMMs, no fp8 cast). The QKV input is kept in 16 bits; in a dense layer fc1's
    # input (the second norm's output) and fc2's input only where the MLP has adapters (all_linear); the output
    # projection's fp8 cast never. In an MoE layer the routed experts are frozen: their dispatched copies keep no
    # fc1 input and their activation output (fc2's input) is not kept; the shared experts' fc2 input only with MLP
    # adapters; the second norm's output stays kept in 16 bits, for the router (an upper bound where it is frozen).
    lora = np.asarray(lay.lora_rank > 0)
    mlp_adapted = np.asarray(lay.lora_targets == LORA_TARGET_CODES["all_linear"])
    lora_layer = not model.parallel_attention_mlp
    if lora_layer:
        second = e * h if moe_norm_out else np.where(mlp_adapted, e * h, 0.0)
        post_norm = np.where(lora, e * h + second, post_norm)
    replicated = norm_inputs * e * h + post_norm + 2 * dropout * h
    # the attention output: the fused kernel's 16-bit copy (its backward needs O), plus under fp8 the projection's
    # own cast where it keeps one; without flash attention the output of the AV batched matmul is needed only as
    # the projection's input, kept as that GEMM keeps its inputs
    # Delayed scaling keeps the projection's fp8 cast on every engine: Megatron-Core hands linear_proj its original
    # (16-bit) input only under the other recipes (attention.py @ d98e8a64, since 781e765), and a Transformer
    # Engine Linear otherwise saves the quantised input it computed.
    keeps_cast = lay.fp8 & (proj_cast_copy | (lay.fp8_recipe == Fp8RecipeCode.DELAYED)) & ~(lay.lora_rank > 0)
    # Transformer Engine's FP8 attention keeps the fp8 Q, K and V it quantized for its backward, and O in fp8 under
    # delayed scaling (the other recipes keep O 16-bit: NVTE_DPA_FP8CS_O_in_F16 defaults to 1; backends.py
    # FusedAttnFunc @ d0067d0).
    attention_fp8 = lay.fp8 & lay.fp8_attention
    qkv_bytes = np.where(attention_fp8, FP8_ACTIVATION_BYTES, e)
    kernel_out = np.where(attention_fp8 & (lay.fp8_recipe == Fp8RecipeCode.DELAYED), FP8_ACTIVATION_BYTES, e)
    out = np.where(lay.flash_attention, kernel_out + np.where(keeps_cast, g, 0), g)
    attention = qkv_bytes * widths.query / t + qkv_bytes * (widths.key + widths.value) / kv_div + out * widths.output / t
    if model.attention_output_gate:
        # Qwen3-Next's gated attention: the gate, kept for its sigmoid's backward, and the gated output, a tensor of
        # its own that the output projection keeps as its input (16-bit; its fp8 cast where `keeps_cast` counted one
        # above); without flash attention the projection's input is counted in `out` and the ungated output is kept
        gated_output = np.where(lay.flash_attention & keeps_cast, 0.0, e)
        attention = attention + (e + gated_output) * widths.output / t
    if model.mla is not None:
        # MLA's compressed latents: the query and K/V down-projections' outputs, kept by their RMSNorms, and
        # the norms' outputs, kept as the up-projections' GEMM inputs (and as the checkpointed inputs under
        # mla_up_proj recompute); per token of the rank's sequence-parallel shard (Megatron-Core
        # multi_latent_attention.py @ d98e8a64, get_query_key_value_tensors: q_compressed and kv_compressed are
        # [s / TP, b, rank] under sequence parallelism). The rotary key joins K, counted there.
        latents = (model.mla.q_lora_rank or 0) + model.mla.kv_lora_rank
        if model.sparse_attention is None:
            attention = attention + (e + g) * latents / rep_div
        else:
            attention = attention + (e + g) * (model.mla.q_lora_rank or 0) / rep_div + e * model.mla.kv_lora_rank / rep_div
            attention = attention + sparse_attention_bytes_per_token(model, lay, g)
    up = 2 if model.mlp_kind == "gated" else 1
    if moe_layer and model.moe is not None:
        moe = model.moe
        k = moe.experts_per_token
        f_routed = k * moe.moe_ffn_hidden_size
        f_shared = moe.shared_ffn_width
        # Token drop padded to capacity (Megatron --moe-expert-capacity-factor c with
        # --moe-pad-expert-input-to-capacity): every expert runs exactly c x its balanced share
        # (moe_utils.get_capacity: ceil(tokens x k / E x c) per source rank); dropless, the busiest rank's load
        # imbalance (1 balanced): physics.moe.capacity_factor.
        c = capacity_factor(lay)
        f = c * f_routed + f_shared  # intermediate width per token on this rank (the routed part over etp x ep)
        # Routed copies a rank's experts receive per token of its micro-batch: a stage's tp x cp x dp ranks send
        # k copies of each token, spread over edp x ep = tp x cp x dp / etp expert slots: k etp / t (k with
        # etp = t: the expert-TP group gathers its tokens); x c when padded to capacity. Each copy keeps fc1's
        # input (h, fp8 under fp8 recipes) and, for the weighted activation and the chunk sort after the
        # all-to-all, its probability and row index (PERMUTED_COPY_INDEX_BYTES).
        copies = c * k * lay.etp / t
        permuted = copies * (np.where(lora, 0.0, g * h) + PERMUTED_COPY_INDEX_BYTES)
        # The router's fp32 scores and the fused permutation's row map, per token the rank routes (its
        # sequence-parallel shard).
        router = (ROUTER_SCORE_BYTES * moe.num_experts + PERMUTE_MAP_BYTES_PER_EXPERT * (2 * moe.num_experts + 1)
                  ) / rep_div
    else:
        f = np.asarray(float(model.ffn_hidden_size))
        permuted = np.zeros(())
        router = np.zeros(())
    # Elements per token: gated keeps fc1's output (gate and up, 2f) and the activation output (f); standard
    # keeps fc1's output (f) and GeLU's output (f): Korthikanti's 8sbh + 8sbh bytes for f = 4h. fc1's output is
    # the activation's input: 1 byte where the layout keeps it in fp8 (activation_input_fp8, SwiGLU only).
    fc1_out = np.where(lay.activation_input_fp8 & (model.mlp_kind == "gated"), FP8_ACTIVATION_BYTES, e)
    # A clamped gated activation (activation_clamp, gpt-oss) keeps fc1's output twice: the clamps save their
    # input, the fused activation its clamped concatenation (physics.elementwise ACTIVATION_CLAMP_*; where one
    # fused kernel clamps, torch.compile's or the engine's, it saves the input alone).
    clamped = np.where(lay.clamp_fused | (model.activation_clamp is None), 0.0, up * e)
    # fc2's input (the activation output): training keeps its cast; LoRA the 16-bit tensor for an adapter on fc2, on
    # the dense MLP and the shared experts with all_linear targets, none for the frozen routed experts
    fc2_input = np.where(lora, np.where(mlp_adapted, e, 0.0), g) if lora_layer else np.asarray(g)
    fc2_routed = np.where(lora, 0.0, g) if lora_layer else np.asarray(g)
    if moe_layer and model.moe is not None:
        mlp = ((up * fc1_out + clamped) * f + fc2_routed * c * f_routed + fc2_input * f_shared) / t + permuted + router
    else:
        mlp = (up * fc1_out + clamped + fc2_input) * f / t + permuted + router
    heads_per_rank = model.num_attention_heads / t
    # Scores per token: softmax output (2 bytes) + with dropout its mask (1) and output (2): a*s*(2+3) bytes.
    scores = heads_per_rank * lay.seq_len * (e + dropout * (1 + e))
    lse = heads_per_rank * LSE_BYTES
    if linear and model.linear_attention is not None:  # the GDN mixer's tensors in place of the attention's
        attention = linear_attention.saved_bytes_per_token(model.linear_attention, lay.tp, g)
        scores = lse = np.zeros_like(t)

    # Selective recompute drops the tensors of the modules it recomputes (Megatron-Core --recompute-modules;
    # the default list is the attention core alone, which with flash attention keeps nothing extra anyway).
    selective = lay.recompute == RecomputeCode.SELECTIVE

    def has(module: str) -> np.ndarray:
        return np.asarray(selective & ((lay.recompute_modules & RECOMPUTE_MODULE_BITS[module]) != 0))

    core_drop = np.where(has("core_attn") & ~lay.flash_attention, scores, 0.0)
    norm_drop = np.where(has("layernorm"), post_norm / rep_div, 0.0)  # the two norm outputs (GEMM inputs)
    mla_drop = (
        np.where(has("mla_up_proj"), e * widths.query / t + e * (widths.key + widths.value) / kv_div, 0.0)
        if model.mla is not None
        else 0.0
    )
    if moe_layer and model.moe is not None:
        routed_act = c * (fc2_routed + clamped) * f_routed / t  # the experts' activation output (fc2's input), clamped copy
        shared_internal = (up * fc1_out + clamped + fc2_input) * f_shared / t
        mlp_drop = np.where(
            has("moe"), mlp, np.where(has("moe_act"), routed_act, 0.0) + np.where(has("shared_experts"), shared_internal, 0.0)
        )
    else:
        mlp_drop = np.where(has("mlp"), (up * fc1_out + clamped + fc2_input) * f / t, 0.0)
    module_drop = norm_drop + mla_drop + mlp_drop

    keeps_scores = ~lay.flash_attention & (lay.recompute == RecomputeCode.NONE) | (selective & ~has("core_attn") & ~lay.flash_attention)
    core = np.where(lay.flash_attention, lse, np.where(keeps_scores, scores, 0.0))
    full = replicated / rep_div + attention + mlp + np.where(lay.flash_attention, lse, scores)
    stored_no_full = replicated / rep_div + attention + mlp + core - module_drop
    checkpoint = e * h / rep_div  # full recompute: the layer input only
    # torchtitan op-level selective AC (torchtitan/models/llama3/infra/parallelize.py, _apply_ac_to_transformer_block,
    # op mode): in the block's forward the matmuls run wq, wk, wv, wo, w1, (w3,) w2; the output of every second one
    # is recomputed (wk, wo, w3; standard MLP: w2), the others' and the attention kernel's outputs are saved, and
    # every other op is recomputed. Kept: the block input, wq and wv outputs, the attention output (+ its
    # log-sum-exp), w1's output and, gated, w2's output (the block output before the residual add). That last one
    # no backward reads (it feeds only the residual add): eager SAC keeps it all the same, for its caching mode
    # stores the output of every MUST_SAVE op (torch/utils/checkpoint.py, torch 2.6, _CachingTorchDispatchMode);
    # under torch.compile the policy is only a tag on the traced node and AOTAutograd's partitioner saves just
    # the forward values the backward reads, so the compiled block does not keep it (benchmarks/torch_sac_saved.py).
    saved_attention = e * widths.query / t + e * widths.value / kv_div + e * widths.output / t
    if linear and model.linear_attention is not None:  # the input projection's and the kernel's outputs
        mixer = linear_attention.mixer_widths(model.linear_attention)
        saved_attention = e * (mixer.conv + 2 * mixer.value) / t
    saved_mlp = e * f / t + permuted + router
    unread = np.where(lay.compile, 0.0, e * h / rep_div if model.mlp_kind == "gated" else 0.0)
    needed_op = checkpoint + saved_attention + saved_mlp + np.where(lay.flash_attention, lse, 0.0)
    stored_op = needed_op + unread
    stored = np.where(lay.recompute == RecomputeCode.FULL, checkpoint, np.where(lay.recompute == RecomputeCode.OP, stored_op, stored_no_full))
    # During its backward a recomputed layer holds again what was dropped: everything but the checkpointed
    # input under full recompute, everything not saved under op-level AC, the dropped modules' tensors (and
    # the attention scores without flash attention) under selective recompute.
    working = np.where(
        lay.recompute == RecomputeCode.FULL,
        full - checkpoint,
        np.where(lay.recompute == RecomputeCode.OP, np.maximum(full - needed_op, 0.0), np.where(selective, core_drop + module_drop, 0.0)),
    )
    return LayerActivations(stored=stored, full=full, working=working)


TOPK_INDEX_BYTES = 4
"""Bytes per selected key of the top-k index list a sparse-attention layer keeps for its backward: int32, the
index type FlashMLA's sparse kernels and DeepSeek-V3.2-Exp's reference take (deepseek-ai/FlashMLA README
@ 9241ae3e; inference/model.py)."""


def sparse_attention_bytes_per_token(model: ModelSpec, lay: LayoutArrays, gemm_input_bytes: np.ndarray) -> np.ndarray:
    """What DeepSeek Sparse Attention keeps per token beyond MLA's latents and the MQA-form core's Q, K and O
    (counted through attention_dims): the query heads' no-rotary part before the key absorption and the value
    up-projection's output (the output projection's input), split over TP; the indexer's queries (H_I x d_I), key
    (d_I) and head weights (H_I) and the top-k index list, 16-bit and int32, whole on every TP rank (the indexer
    scores the all-gathered sequence on each: Megatron-Core dsa.py @ d98e8a64, FusedDSAIndexerLoss saving q,
    weights, k, query, key and topk_indices)."""
    assert model.sparse_attention is not None and model.mla is not None
    dsa, m = model.sparse_attention, model.mla
    t = lay.tp.astype(float)
    a = model.num_attention_heads
    absorbed = (ACTIVATION_BYTES * a * m.qk_nope_head_dim + gemm_input_bytes * a * m.v_head_dim) / t
    indexer = ACTIVATION_BYTES * (dsa.index_heads * dsa.index_head_dim + dsa.index_head_dim + dsa.index_heads)
    topk = TOPK_INDEX_BYTES * np.minimum(float(dsa.topk), lay.seq_len)
    # all-gather context parallelism (Megatron-Core's only CP for DSA): the other ranks' latent and indexer keys,
    # gathered for the forward, are kept for the backward, cp - 1 chunks as large as the rank's own per token
    gathered = (lay.cp - 1) * ACTIVATION_BYTES * (m.kv_lora_rank + m.qk_rope_head_dim + dsa.index_head_dim)
    return np.asarray(absorbed + indexer + topk + gathered)


def tokens_per_microbatch(lay: LayoutArrays) -> np.ndarray:
    """Tokens of one micro-batch on one rank: context parallelism splits the sequence."""
    return np.asarray(lay.micro_batch * lay.seq_len / lay.cp)


def loss_bytes_per_logit(engine: EngineProfile, lay: LayoutArrays) -> np.ndarray:
    """Bytes per logit live at the loss's peak: the engine's compiled loss where the candidate compiles it
    (LayoutArrays.compile_loss), else its eager loss (EngineProfile.kernels)."""
    kernels = engine.kernels
    compiled = kernels.compiled_loss_bytes_per_logit
    eager = kernels.loss_bytes_per_logit
    return np.asarray(np.where(lay.compile_loss, eager if compiled is None else compiled, eager))


def stage_activation_bytes(
    model: ModelSpec,
    lay: LayoutArrays,
    stage: np.ndarray,
    sp: StageParams,
    loss_bytes_per_logit: np.ndarray | float = LOSS_PEAK_BYTES_PER_LOGIT,
    proj_cast_copy: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(activations held at the peak, recompute working set) in bytes on one rank of `stage` (what activation
    offload moves to the host is not held: see offloaded_activation_bytes)."""
    per_microbatch, once, working = stage_activation_parts(model, lay, stage, sp, loss_bytes_per_logit, proj_cast_copy)
    offloaded = offloaded_activation_bytes(model, lay, stage, sp, proj_cast_copy)
    held = microbatches_in_flight(lay, stage) * per_microbatch - offloaded
    return held + once, working


def stage_activation_parts(
    model: ModelSpec,
    lay: LayoutArrays,
    stage: np.ndarray,
    sp: StageParams,
    loss_bytes_per_logit: np.ndarray | float = LOSS_PEAK_BYTES_PER_LOGIT,
    proj_cast_copy: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes per micro-batch in flight, bytes held once, recompute working set) of `stage`'s activations:
    stage_activation_bytes holds in-flight x the first plus the second (less what is offloaded)."""

    tokens = tokens_per_microbatch(lay)
    dense = layer_activation_bytes_per_token(model, lay, moe_layer=False, proj_cast_copy=proj_cast_copy)
    moe = layer_activation_bytes_per_token(model, lay, moe_layer=True, proj_cast_copy=proj_cast_copy)
    n_dense = sp.num_layers - sp.num_moe_layers
    n_moe = sp.num_moe_layers
    # Megatron 'block' recompute: only the first k layers of a stage are recomputed, the rest keep all.
    k = np.where(lay.recompute_layers < 0, sp.num_layers, np.minimum(lay.recompute_layers, sp.num_layers))
    k_dense = np.minimum(k, n_dense)
    k_moe = k - k_dense
    full_recompute = lay.recompute == RecomputeCode.FULL
    per_microbatch = np.where(
        full_recompute,
        k_dense * dense.stored + (n_dense - k_dense) * dense.full + k_moe * moe.stored + (n_moe - k_moe) * moe.full,
        n_dense * dense.stored + n_moe * moe.stored,
    ) * tokens
    lin_working = np.zeros_like(per_microbatch)
    if model.linear_attention is not None:
        # Gated DeltaNet layers keep their mixer's tensors in place of the attention's: what each adds is the
        # difference of the two layers' (a recomputed layer keeps its input alone either way; of a stage's
        # block-recomputed layers, the GDN ones are taken in their share of the stage's layers).
        dense_lin = layer_activation_bytes_per_token(model, lay, moe_layer=False, proj_cast_copy=proj_cast_copy,
                                                     linear=True)
        moe_lin = layer_activation_bytes_per_token(model, lay, moe_layer=True, proj_cast_copy=proj_cast_copy,
                                                   linear=True)
        lin_dense, lin_moe = np.asarray(sp.num_linear_dense), np.asarray(sp.num_linear_moe)
        kept_dense = np.where(n_dense > 0, (n_dense - k_dense) / np.maximum(n_dense, 1), 0.0)
        kept_moe = np.where(n_moe > 0, (n_moe - k_moe) / np.maximum(n_moe, 1), 0.0)
        per_microbatch = per_microbatch + np.where(
            full_recompute,
            lin_dense * kept_dense * (dense_lin.full - dense.full) + lin_moe * kept_moe * (moe_lin.full - moe.full),
            lin_dense * (dense_lin.stored - dense.stored) + lin_moe * (moe_lin.stored - moe.stored),
        ) * tokens
        lin_working = np.maximum(np.where(lin_dense > 0, dense_lin.working, 0.0),
                                 np.where(lin_moe > 0, moe_lin.working, 0.0))
    h = model.hidden_size
    rep_div = np.where(lay.sequence_parallel, lay.tp, 1)
    is_first = np.asarray(stage) == 0
    is_last = np.asarray(stage) == lay.pp - 1
    # First stage: the embedding's dropout mask per micro-batch in flight (Korthikanti et al. 2022, eq. 6).
    embed = np.where(is_first & model.dropout, tokens * h / rep_div, 0.0)
    # Last stage: final-norm input and LM-head input (2h each) and what the engine's loss keeps live per
    # logit at its peak (LOSS_PEAK_BYTES_PER_LOGIT for Megatron). Each MTP module adds its activations per
    # micro-batch in flight in its chunk and its own loss's logits: what that loss saves for backward (the
    # peak's bf16 logits gradient, ACTIVATION_BYTES, exists for one loss at a time; Megatron: the fp32 softmax).
    head = np.where(
        is_last,
        tokens * (2 * ACTIVATION_BYTES * h / rep_div + loss_bytes_per_logit * model.vocab_size / lay.tp),
        0.0,
    )
    mtp_kind = moe if mtp_layer_is_moe(model) else dense
    has_mtp = np.asarray(sp.num_mtp_layers) > 0
    largest_working = np.maximum(np.where(n_dense > 0, dense.working, 0.0), np.where(n_moe > 0, moe.working, 0.0))
    largest_working = np.maximum(largest_working, np.where(has_mtp, mtp_kind.working, 0.0))
    largest_working = np.maximum(largest_working, lin_working)
    working = largest_working * tokens
    mtp = sp.num_mtp_layers * tokens * (
        mtp_microbatches_in_flight(lay) * mtp_activation_bytes_per_token(model, lay, mtp_kind)
        + (loss_bytes_per_logit - ACTIVATION_BYTES) * model.vocab_size / lay.tp
    )
    return per_microbatch + embed, head + mtp, working


def mtp_microbatches_in_flight(lay: LayoutArrays) -> np.ndarray:
    """Micro-batches whose MTP activations the last stage holds: the MTP modules run in the last model chunk,
    whose backward follows each micro-batch's forward at once under 1F1B, plain or interleaved; GPipe holds
    all m."""
    return np.asarray(np.where(lay.gpipe & (lay.pp > 1), lay.num_micro_batches, 1).astype(float))


def mtp_activation_bytes_per_token(model: ModelSpec, lay: LayoutArrays, layer: LayerActivations) -> np.ndarray:
    """What one MTP module keeps for backward per token (DeepSeek-V3 report Sec. 2.2, eq. 21-22; Megatron-Core
    MultiTokenPredictionLayer): its transformer layer's activations as the layout keeps them, the inputs of
    its two norms (the previous depth's hidden state and the next token's embedding, 2h each), eh_proj's input
    (the two norm outputs, 2h wide), the inputs of its final norm and of the shared output head (2h each);
    the h-wide tensors split under sequence parallelism. Its loss's logits are counted by the caller."""
    h = model.hidden_size
    rep_div = np.where(lay.sequence_parallel, lay.tp, 1).astype(float)
    g = saved_gemm_input_bytes(lay)
    own = (2 * ACTIVATION_BYTES * h + 2 * g * h + 2 * ACTIVATION_BYTES * h) / rep_div
    return np.asarray(layer.stored + own)


def offloaded_activation_bytes(
    model: ModelSpec, lay: LayoutArrays, stage: np.ndarray, sp: StageParams, proj_cast_copy: bool = False
) -> np.ndarray:
    """Activation offload (Megatron-Core --cpu-offloading-num-layers, DeepSpeed cpu_checkpointing): the stored
    activations of the stage's first `offload_activation_layers` layers, for every micro-batch in flight, go to
    the host in forward and come back for their backward; one rank's bytes on the host."""
    tokens = tokens_per_microbatch(lay)
    n_dense = sp.num_layers - sp.num_moe_layers
    offloaded = np.minimum(lay.offload_activation_layers, sp.num_layers)
    off_dense = np.minimum(offloaded, n_dense)
    dense = layer_activation_bytes_per_token(model, lay, moe_layer=False, proj_cast_copy=proj_cast_copy).stored
    moe = layer_activation_bytes_per_token(model, lay, moe_layer=True, proj_cast_copy=proj_cast_copy).stored
    per_token = off_dense * dense + (offloaded - off_dense) * moe
    if model.linear_attention is not None:  # the offloaded GDN layers keep their mixer's tensors
        start = first_layer_of_stage(model.num_layers, lay.pp, stage)
        lin_dense = layer_linear_counts(model, start, off_dense)
        lin_moe = layer_linear_counts(model, start + n_dense, offloaded - off_dense)
        for lin, moe_layer, attn in ((lin_dense, False, dense), (lin_moe, True, moe)):
            gdn = layer_activation_bytes_per_token(model, lay, moe_layer=moe_layer, proj_cast_copy=proj_cast_copy,
                                                   linear=True).stored
            per_token = per_token + lin * (gdn - attn)
    return np.asarray(microbatches_in_flight(lay, stage) * tokens * per_token)


def buffer_bytes(lay: LayoutArrays, sp: StageParams, unsharded_grad_bytes: float = 0.0, fp8_params_held: bool = True
                 ) -> np.ndarray:
    """Communication buffers outside the model states.

    ZeRO-3 / FSDP gathers one layer's full parameters for the layer running and prefetches the next
    (2 layers of 16-bit weights, or the whole stage if it holds less), and reduce-scatters one layer's
    full gradients (FSDP's default forward/backward prefetch of one unit; DeepSpeed's stage3 prefetch
    bucket plays the same role). ZeRO-2 reduces gradients through a bucket, taken as one layer's
    gradients. Only the part beyond the rank's own shard is extra: (1 - 1/N) of it for a shard group
    of N, so a higher stage never needs more memory than the one below it.
    """
    shard = lay.shard_degree
    beyond = 1.0 - 1.0 / shard
    beyond_expert = 1.0 - 1.0 / expert_shard_degree(lay)
    layer = sp.largest_layer_dense * beyond + sp.largest_layer_expert * beyond_expert
    gathered_dense = np.minimum(2 * sp.largest_layer_dense, sp.dense) * beyond
    gathered_expert = np.minimum(2 * sp.largest_layer_expert, sp.expert) * beyond_expert
    # ... and, where the engine copies the unit's unsharded gradients into its reduce-scatter buffer (FSDP2), those
    # gradients beside it at the copy (`unsharded_grad_bytes`, the profile's zero.unsharded_grad_bytes_per_param)
    zero3 = (layer_weight_bytes(lay) * gathered_dense + held_weight_bytes(lay, fp8_params_held) * gathered_expert
             + (lay.grad_bytes + unsharded_grad_bytes) * layer)
    zero2 = lay.grad_bytes * layer
    return np.where(lay.zero >= Zero.PARAMETERS, zero3, np.where(lay.zero == Zero.GRADIENTS, zero2, 0.0))


# Transformer Engine's userbuffers for --tp-comm-overlap: one communicator per overlapped GEMM of a layer kind
# (qkv, proj, fc1, fc2, each fprop, dgrad and wgrad: 12), each with a buffer of the gathered activation,
# [s x b / cp, h] (Megatron-LM passes that shape to initialize_ub); the 8 all-gather ones hold fp8 under an fp8
# recipe (NVIDIA/TransformerEngine transformer_engine/pytorch/module/base.py @ d0067d0, initialize_ub:
# layers_all_gather_overlap, layers_reduce_scatter_overlap, CommOverlap / CommOverlapP2P(shape, buffer_dtype)).
USERBUFFER_ALL_GATHER_BUFFERS = 8
USERBUFFER_REDUCE_SCATTER_BUFFERS = 4


def userbuffer_bytes(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """The communication buffers --tp-comm-overlap allocates once per rank (needs SP and tp > 1)."""
    per_buffer = tokens_per_microbatch(lay) * model.hidden_size
    gather = np.where(lay.fp8, FP8_ACTIVATION_BYTES, ACTIVATION_BYTES)
    total = per_buffer * (USERBUFFER_ALL_GATHER_BUFFERS * gather + USERBUFFER_REDUCE_SCATTER_BUFFERS * ACTIVATION_BYTES)
    return np.asarray(np.where(lay.overlap_tp_comm & lay.sequence_parallel & (lay.tp > 1), total, 0.0))


def reserve_bytes(lay: LayoutArrays, churn_bytes: np.ndarray) -> np.ndarray:
    """CUDA context, NCCL communicators (one per parallel dimension in use), allocator fragmentation
    (a share of the activations, which are allocated and freed every micro-batch)."""
    groups = sum((deg > 1).astype(float) for deg in (lay.tp, lay.pp, lay.cp, lay.dp, lay.ep))
    return PROCESS_BYTES + NCCL_BYTES_PER_COMMUNICATOR * groups + FRAGMENTATION_FRACTION * churn_bytes


def stage_memory(
    model: ModelSpec,
    lay: LayoutArrays,
    stage: np.ndarray,
    sp: StageParams | None = None,
    engine: EngineProfile | None = None,
) -> StageMemory:
    """Everything on one GPU of `stage` at the step's peak (`stage` broadcasts against the layouts: shape
    (n,) for one stage per candidate, or (k, n) for k stages of each)."""
    if sp is None:
        sp = stage_params(model, lay, stage)
    fp8_held = engine.optimizer.fp8_params_held if engine is not None else True
    weights, grads, optim = model_state_bytes(lay, sp, fp8_params_held=fp8_held)
    loss_bytes = loss_bytes_per_logit(engine, lay) if engine is not None else LOSS_PEAK_BYTES_PER_LOGIT
    cast_copy = engine.kernels.fp8_proj_keeps_cast_input if engine is not None else False
    held, working = stage_activation_bytes(model, lay, stage, sp, loss_bytes, cast_copy)
    host_activations = offloaded_activation_bytes(model, lay, stage, sp, cast_copy)
    unsharded = engine.zero.unsharded_grad_bytes_per_param if engine is not None else 0.0
    buffers = buffer_bytes(lay, sp, unsharded, fp8_held) + working + userbuffer_bytes(model, lay)
    reserve = reserve_bytes(lay, held + working)
    return StageMemory(
        weights_bytes=weights,
        gradients_bytes=grads,
        optimizer_bytes=optim,
        activations_bytes=held,
        buffers_bytes=buffers,
        reserve_bytes=reserve,
        params=sp.dense + sp.expert,
        host_bytes=host_state_bytes(lay, sp) + host_activations,
    )
