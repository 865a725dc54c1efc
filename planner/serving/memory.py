"""Serving memory per GPU: weights, KV cache, activation workspace and a reserve; what fits.

Reported for the most loaded pipeline stage. Placement: TP innermost (inside a node), PP
outward; a replica is tp x pp GPUs. Formulas and sources: docs/inference.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerError
from planner.physics.linear_attention import in_proj_width, layer_linear_counts, mixer_period, mixer_widths
from planner.physics.params import kv_cache_bytes_per_token
from planner.physics.reserve import NCCL_BYTES_PER_COMMUNICATOR, PROCESS_BYTES
from planner.physics.shapes import LayerShape, gemm_elements_per_rank
from planner.physics.stages import candidate_stages, first_layer_of_stage, max_layers_per_stage, stage_layer_split
from planner.serving.inputs import (
    ACTIVATION_BYTES_PER_ELEMENT,
    EMBEDDING_BYTES_PER_ELEMENT,
    LOGIT_BYTES_PER_ELEMENT,
    NORM_BYTES_PER_ELEMENT,
    InferenceArrays,
    ModelShapes,
    model_shapes,
    quantized_bytes_per_element,
)
from planner.specs.hardware import HardwareProfile
from planner.specs.model import ModelSpec

COMM_BUFFER_BYTES = 2 * NCCL_BYTES_PER_COMMUNICATOR
"""Communication buffers when a replica spans more than one GPU: an NCCL communicator plus the
engine's custom all-reduce / IPC staging buffers, taken as a second communicator's worth."""

SERVING_FREE_MEMORY_FRACTION = 0.05
"""Fraction of device memory kept free for allocator fragmentation and paged-KV block rounding
(vLLM's default gpu_memory_utilization=0.9 leaves 10% for this and for activations, which we
count separately)."""


# --- Weights ------------------------------------------------------------------------------------


def layer_weight_bytes_per_gpu(shapes: ModelShapes, layer: LayerShape, x: InferenceArrays) -> np.ndarray:
    """Bytes of one layer's weights on one GPU: matrices at the weight dtype, small params at 16 bits."""
    elements = sum(gemm_elements_per_rank(g, shapes.kv_heads, x.tp) for g in layer.gemms)
    return elements * quantized_bytes_per_element(x) + layer.small_params * NORM_BYTES_PER_ELEMENT


@dataclass(frozen=True)
class StageWeights:
    """Weight bytes per GPU on the first, a middle, and the last pipeline stage (pp = 1: all one)."""

    first_bytes: np.ndarray
    middle_bytes: np.ndarray
    last_bytes: np.ndarray

    @property
    def max_bytes(self) -> np.ndarray:
        return np.asarray(np.maximum(np.maximum(self.first_bytes, self.middle_bytes), self.last_bytes))


def linear_mixer_weight_delta_bytes(shapes: ModelShapes, x: InferenceArrays) -> np.ndarray:
    """What a Gated DeltaNet layer's weights add on one GPU to an attention layer's (its mixer's projections and
    small parameters in place of the attention's; the feed-forward block is the same); 0 without GDN layers."""
    if shapes.dense_linear is None:
        return np.zeros(np.shape(x.tp))
    return np.asarray(layer_weight_bytes_per_gpu(shapes, shapes.dense_linear, x)
                      - layer_weight_bytes_per_gpu(shapes, shapes.dense, x))


def stage_linear_layers(shapes: ModelShapes, x: InferenceArrays, stage: np.ndarray, n: np.ndarray) -> np.ndarray:
    """GDN layers among the `n` layers of `stage` (the training split, physics.linear_attention's placement)."""
    return layer_linear_counts(shapes.spec, first_layer_of_stage(shapes.num_layers, x.pp, stage), n)


def embedding_and_head_bytes(shapes: ModelShapes, x: InferenceArrays) -> tuple[np.ndarray, np.ndarray]:
    """Bytes on one GPU of the embedding (the first stage's) and of the final norm + output head (the last
    stage's), both split over TP by vocabulary; with tied embeddings and pp > 1 the head is its own copy of the
    word table (see stage_weight_bytes)."""
    emb = shapes.embedding_params * EMBEDDING_BYTES_PER_ELEMENT / x.tp
    head_params = np.where(x.pp > 1, shapes.head_matrix_params(), shapes.head_params)
    return np.asarray(emb), np.asarray(head_params * EMBEDDING_BYTES_PER_ELEMENT / x.tp)


def stage_layers_weight_bytes(shapes: ModelShapes, x: InferenceArrays) -> Callable[[np.ndarray], tuple[
        np.ndarray, np.ndarray]]:
    """A function of the stage giving (its layer count, its layers' weight bytes on one GPU): dense layers first,
    then MoE ones (physics.stages' training split), each GDN layer's mixer in place of the attention's. The
    per-layer bytes are taken once, for every stage asked after."""
    dense_b = layer_weight_bytes_per_gpu(shapes, shapes.dense, x)
    moe_b = layer_weight_bytes_per_gpu(shapes, shapes.moe, x) if shapes.moe else dense_b
    delta = linear_mixer_weight_delta_bytes(shapes, x)

    def layers_bytes(stage: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n, n_moe = stage_layer_split(shapes.num_layers, shapes.num_dense_layers, x.pp, stage)
        return n, np.asarray((n - n_moe) * dense_b + n_moe * moe_b + stage_linear_layers(shapes, x, stage, n) * delta)

    return layers_bytes


def stage_weight_bytes(shapes: ModelShapes, x: InferenceArrays) -> StageWeights:
    """Stages hold the layers of the training split (physics.stages: the first and last stages one layer
    lighter when the count does not divide, dense layers first, as DeepSeek places them); the embedding
    sits on the first stage and the final norm + output head on the last, both split over TP by
    vocabulary. With tied embeddings and pp > 1 the last stage holds its own copy of the word table for
    the head (Megatron-LM, vLLM and TensorRT-LLM all load it there); with pp = 1 the one table serves
    both. `middle_bytes` is the heaviest middle stage (among the candidates that can be heaviest)."""
    emb, head = embedding_and_head_bytes(shapes, x)
    layers_bytes = stage_layers_weight_bytes(shapes, x)
    last_stage = x.pp - 1
    first = emb + layers_bytes(np.zeros_like(x.pp))[1] + np.where(x.pp == 1, head, 0.0)
    last = head + layers_bytes(last_stage)[1] + np.where(x.pp == 1, emb, 0.0)
    stages = candidate_stages(shapes.num_layers, shapes.num_dense_layers, x.pp, mixer_period(shapes.spec))
    inner = (stages > 0) & (stages < last_stage)
    middle = np.where(inner, layers_bytes(stages)[1], 0.0).max(axis=0)
    return StageWeights(first_bytes=first, middle_bytes=middle, last_bytes=last)


# --- KV cache -------------------------------------------------------------------------------


def cached_tokens(shapes: ModelShapes, context: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens a global and a sliding-window layer keep for a sequence of `context` tokens."""
    window = shapes.sliding_window_tokens
    capped = np.minimum(context, window) if window else context
    return np.asarray(context), np.asarray(capped)


def layer_mix(shapes: ModelShapes, n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(global, sliding-window, GDN) layers among `n` layers of a stage, for its cache.

    Sliding-window and GDN layers are taken as spread evenly (Gemma 2 alternates, Mistral v0.1 is all sliding,
    Qwen3.5 keeps attention on every 4th layer); the global share and the GDN share are each rounded up, so
    neither the stage's KV nor its recurrent states are under-counted (the two may then hold one layer more than
    the stage has)."""
    n = np.asarray(n)
    attention = np.minimum(-(-(n * shapes.num_attention_layers) // shapes.num_layers), n)
    global_layers = np.minimum(-(-(n * shapes.global_layers()) // shapes.num_layers), attention)
    linear = -(-(n * shapes.num_linear_layers) // shapes.num_layers)
    return global_layers, attention - global_layers, linear


def state_bytes_per_sequence_per_gpu(shapes: ModelShapes, x: InferenceArrays, linear_layers: np.ndarray) -> np.ndarray:
    """A sequence's GDN states on one GPU: each layer's recurrent and convolution state, split over TP with the
    heads (vLLM's mamba_utils: n_v / tp heads and conv_dim / tp channels per rank)."""
    return np.asarray(linear_layers * shapes.linear_state_bytes_per_layer / x.tp)


def stage_kv_bytes_per_sequence_per_gpu(shapes: ModelShapes, x: InferenceArrays, context: np.ndarray,
                                        layers: np.ndarray) -> np.ndarray:
    """KV-cache bytes one sequence of `context` tokens occupies on a GPU of a stage of `layers` layers (global and
    windowed in the model's proportion, layer_mix), and its GDN layers' states (fixed, whatever the length)."""
    g_layers, s_layers, l_layers = layer_mix(shapes, layers)
    full, capped = cached_tokens(shapes, context)
    per_token_layer = shapes.kv_bytes_per_token_per_layer_per_gpu(x.tp, x.kv_bytes)
    return np.asarray(per_token_layer * (g_layers * full + s_layers * capped)
                      + state_bytes_per_sequence_per_gpu(shapes, x, l_layers))


def kv_bytes_per_sequence_per_gpu(shapes: ModelShapes, x: InferenceArrays, context: np.ndarray) -> np.ndarray:
    """KV-cache bytes and GDN states of one sequence of `context` tokens on a GPU of the most loaded stage."""
    return stage_kv_bytes_per_sequence_per_gpu(shapes, x, context, max_layers_per_stage(shapes.num_layers, x.pp))


def kv_bytes_per_sequence_replica(shapes: ModelShapes, x: InferenceArrays, context: np.ndarray) -> np.ndarray:
    """KV-cache bytes of one sequence in the whole model (one replica, before any split), GDN states included."""
    full, capped = cached_tokens(shapes, context)
    per_token_layer = shapes.kv_bytes_per_token_per_layer(x.kv_bytes)
    return np.asarray(per_token_layer * (shapes.global_layers() * full + shapes.sliding_window_layers * capped)
                      + shapes.num_linear_layers * shapes.linear_state_bytes_per_layer)


# --- Activations and the reserve -----------------------------------------------------------------


def prefill_pass_tokens(x: InferenceArrays, concurrency: np.ndarray | None = None) -> np.ndarray:
    """Tokens in one prefill forward pass: all prompts packed, at most max_batched_tokens."""
    c = x.concurrency if concurrency is None else concurrency
    return np.asarray(np.minimum(c * x.input_len, x.max_batched_tokens))


def activation_bytes_per_token(shapes: ModelShapes, tp: np.ndarray) -> np.ndarray:
    """Peak live activation bytes per token of a forward pass (inference keeps no layer's output).

    Inside the largest layer: the residual stream and its normalized copy (2h) plus the wider of
    the attention block (fused QKV output and attention output: (a + 2 kv) d / tp + a d / tp) and
    the MLP block (gate and up outputs and the activated product: 3 ffn / tp).
    """
    d_qk = shapes.attn_qk_dim
    kv_per_gpu = shapes.kv_heads_per_gpu(tp)
    attn = shapes.heads * (d_qk + shapes.attn_v_dim) / tp + 2 * kv_per_gpu * d_qk
    la = shapes.spec.linear_attention
    if la is not None:  # a GDN layer: its input projection's output and the kernel's output
        attn = np.maximum(attn, (in_proj_width(la) + mixer_widths(la).value) / tp)
    widths = [shapes.dense.ffn_width] + ([shapes.moe.ffn_width] if shapes.moe else [])
    mlp = 3 * max(widths) / tp
    return np.asarray((2 * shapes.hidden + np.maximum(attn, mlp)) * ACTIVATION_BYTES_PER_ELEMENT)


def activation_workspace_bytes(shapes: ModelShapes, x: InferenceArrays, concurrency: np.ndarray) -> np.ndarray:
    """One prefill pass's live activations plus the fp32 logits of every sequence's next token."""
    per_token = activation_bytes_per_token(shapes, x.tp)
    logits = concurrency * shapes.vocab / x.tp * LOGIT_BYTES_PER_ELEMENT
    return np.asarray(prefill_pass_tokens(x, concurrency) * per_token + logits)


def reserve_bytes(x: InferenceArrays) -> np.ndarray:
    """CUDA context + runtime workspaces, plus communication buffers when a replica spans GPUs."""
    comm = np.where(x.gpus_per_replica > 1, COMM_BUFFER_BYTES, 0)
    return PROCESS_BYTES + comm


# --- Memory result ----------------------------------------------------------------------------


@dataclass(frozen=True)
class InferenceMemory:
    """Bytes per GPU on the most loaded pipeline stage (arrays shaped like the inputs).

    kv_cache_bytes_per_token is for the whole model and one replica (not per GPU), at the KV dtype,
    without sliding-window caps; kv_cache_bytes holds the GDN layers' states too (a fixed size per sequence,
    linear_state_bytes_per_sequence for the whole model). total = weights + kv_cache + activations + other.
    fits: total <= capacity x (1 - headroom). max_concurrency: the largest concurrency that fits
    at this context length (0 when not even one sequence does).
    """

    weights_bytes: np.ndarray
    kv_cache_bytes: np.ndarray
    kv_cache_bytes_per_token: np.ndarray
    kv_cache_bytes_per_sequence: np.ndarray
    activations_bytes: np.ndarray
    other_bytes: np.ndarray
    total_bytes: np.ndarray
    capacity_bytes: np.ndarray
    usable_bytes: np.ndarray
    fits: np.ndarray
    max_concurrency: np.ndarray
    stage_weights: StageWeights
    concurrency: np.ndarray  # the sequences in flight the figures are for
    linear_state_bytes_per_sequence: int = 0  # GDN layers' states of one sequence, whole model (in the KV cache)


def memory_total_bytes(shapes: ModelShapes, x: InferenceArrays, concurrency: np.ndarray) -> np.ndarray:
    """Total bytes per GPU at `concurrency` (the one formula `fits` and `max_concurrency` share)."""
    weights = stage_weight_bytes(shapes, x).max_bytes
    kv = concurrency * kv_bytes_per_sequence_per_gpu(shapes, x, x.context_len)
    return np.asarray(weights + kv + activation_workspace_bytes(shapes, x, concurrency) + reserve_bytes(x))


def max_concurrency(shapes: ModelShapes, x: InferenceArrays, usable_bytes: float) -> np.ndarray:
    """Largest c with memory_total_bytes(c) <= usable, in closed form.

    memory(c) = base + c u + a min(c s, K) is the smaller of two lines in c, so it is within
    budget exactly when one of the lines is: c = max(floor((B - base)/(u + a s)),
    floor((B - base - a K)/u)). A final check steps back one where float rounding overshoots.
    """
    zero = np.zeros_like(x.concurrency)
    base = memory_total_bytes(shapes, x, zero)
    a = activation_bytes_per_token(shapes, x.tp)
    u = kv_bytes_per_sequence_per_gpu(shapes, x, x.context_len) + shapes.vocab / x.tp * LOGIT_BYTES_PER_ELEMENT
    room = usable_bytes - base
    c1 = np.floor(room / (u + a * x.input_len))
    c2 = np.floor((room - a * x.max_batched_tokens) / u)
    c = np.maximum(np.maximum(c1, c2), 0).astype(np.int64)
    over = memory_total_bytes(shapes, x, c) > usable_bytes
    return np.asarray(np.maximum(np.where(over, c - 1, c), 0))


def inference_memory(
    model: ModelSpec, hw: HardwareProfile, x: InferenceArrays, *, headroom: float = SERVING_FREE_MEMORY_FRACTION,
    shapes: ModelShapes | None = None,
) -> InferenceMemory:
    """Memory per GPU of each serving layout in `x`."""
    if not 0 <= headroom < 1:
        raise PlannerError(f"headroom must be a fraction in [0, 1), got {headroom}")
    s = shapes or model_shapes(model)
    stages = stage_weight_bytes(s, x)
    per_seq = kv_bytes_per_sequence_per_gpu(s, x, x.context_len)
    kv = x.concurrency * per_seq
    act = activation_workspace_bytes(s, x, x.concurrency)
    other = reserve_bytes(x) + np.zeros(x.tp.shape)
    total = stages.max_bytes + kv + act + other
    capacity = float(hw.accelerator.memory_bytes)
    usable = capacity * (1 - headroom)
    per_token = np.where(
        x.kv_bytes == 1, kv_cache_bytes_per_token(model, "fp8"), kv_cache_bytes_per_token(model, "bf16")
    )
    return InferenceMemory(
        weights_bytes=stages.max_bytes,
        kv_cache_bytes=kv,
        kv_cache_bytes_per_token=per_token,
        kv_cache_bytes_per_sequence=kv_bytes_per_sequence_replica(s, x, x.context_len),
        activations_bytes=act,
        other_bytes=other,
        total_bytes=total,
        capacity_bytes=np.full(x.tp.shape, capacity),
        usable_bytes=np.full(x.tp.shape, usable),
        fits=total <= usable,
        max_concurrency=max_concurrency(s, x, usable),
        stage_weights=stages,
        concurrency=x.concurrency,
        linear_state_bytes_per_sequence=round(s.num_linear_layers * s.linear_state_bytes_per_layer),
    )


@dataclass(frozen=True)
class StageMemory:
    """Bytes per GPU on each of the given pipeline stages (arrays over the stages)."""

    stage: np.ndarray
    layers: np.ndarray
    weights_bytes: np.ndarray
    kv_cache_bytes: np.ndarray
    activations_bytes: np.ndarray
    other_bytes: np.ndarray

    @property
    def total_bytes(self) -> np.ndarray:
        return np.asarray(self.weights_bytes + self.kv_cache_bytes + self.activations_bytes + self.other_bytes)


def stage_memory(shapes: ModelShapes, x: InferenceArrays, stages: np.ndarray) -> StageMemory:
    """Memory per GPU of every stage in `stages` for one layout (0-d `x`): the stage's layers (the split
    of `stage_weight_bytes`), the embedding on the first and the head on the last, the KV cache of its
    layers (stage_kv_bytes_per_sequence_per_gpu), the same activation
    workspace and reserve on every stage. The most loaded stage equals `inference_memory`'s figures."""
    stages = np.asarray(stages)
    emb, head = embedding_and_head_bytes(shapes, x)
    n, layers = stage_layers_weight_bytes(shapes, x)(stages)
    weights = layers + np.where(stages == 0, emb, 0.0) + np.where(stages == x.pp - 1, head, 0.0)
    kv = x.concurrency * stage_kv_bytes_per_sequence_per_gpu(shapes, x, x.context_len, n)
    act = activation_workspace_bytes(shapes, x, x.concurrency) + np.zeros(stages.shape)
    other = reserve_bytes(x) + np.zeros(stages.shape)
    return StageMemory(stage=stages, layers=n, weights_bytes=weights, kv_cache_bytes=kv, activations_bytes=act,
                       other_bytes=other)
