"""Serving inputs: layouts as broadcasting arrays, and the model's shapes as engines split them.

One formula, evaluated two ways: every serving function takes an `InferenceArrays` whose fields
broadcast against each other, so `infer estimate` (0-d arrays) and `infer search` (one entry per
candidate) run the same code. `ModelShapes` is computed once per model (Python ints): every
weight GEMM of a layer, how tensor parallelism splits it, and the attention dimensions.
Formulas and sources: docs/inference.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerError
from planner.physics.params import (
    attention_params,
    count_params,
    kv_cache_elements_per_token_per_layer,
    mlp_params,
    norm_params,
)
from planner.specs.dtypes import bytes_per_element
from planner.specs.model import ModelSpec

WEIGHT_DTYPES: tuple[str, ...] = ("bf16", "fp8", "int8", "int4")
KV_DTYPES: tuple[str, ...] = ("bf16", "fp8")

# --- Named constants (each one is discussed in docs/inference.md) ---------------------------

ACTIVATION_BYTES_PER_ELEMENT = 2
"""Activations, all-reduce payloads and logits' inputs are 16-bit, whatever the weight dtype
(fp8 and weight-only int recipes quantize weights, not the residual stream)."""

EMBEDDING_BYTES_PER_ELEMENT = 2
"""Input embedding and output head stay 16-bit: TensorRT-LLM's fp8/AWQ recipes and vLLM's
fp8/GPTQ/AWQ checkpoints quantize the transformer layers' linear layers only."""

NORM_BYTES_PER_ELEMENT = 2
"""Norm weights and biases stay 16-bit under every weight dtype (the router, a GEMM, follows the
weight dtype)."""

INT4_GROUP_SIZE = 128
"""int4 weight-only quantization keeps one 16-bit scale per group of 128 weights (AWQ/GPTQ
default), i.e. 2/128 extra bytes per weight; int8 (per-channel) and fp8 (per-tensor) scales
are negligible."""

LOGIT_BYTES_PER_ELEMENT = 4
"""Logits of the sampled position are materialized in fp32 for sampling."""

PREFILL_CHUNK_TOKENS = 8192
"""Most tokens one forward pass processes: prompts are packed (no padding) and split into
passes of at most this many tokens. 8192 is TensorRT-LLM's default max_num_tokens and vLLM's
default max_num_batched_tokens with chunked prefill. It sizes the activation workspace and the
number of prefill passes."""


# --- Inputs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class InferenceArrays:
    """Serving layouts as numpy arrays that broadcast against each other (0-d for one layout).

    tp, pp: tensor- and pipeline-parallel degrees of one replica.
    concurrency: sequences in flight per replica (the batch, for static batching).
    input_len, output_len: prompt and generated tokens per sequence (output includes the first
        token, which the prefill produces).
    weight_bytes: bytes per element of the transformer layers' weights (2, 1, 1 or 0.5).
    fp8_compute: GEMMs run on fp8 tensor cores (fp8 weights); else 16-bit compute.
    kv_bytes: bytes per element of the KV cache (2 or 1).
    per_head_decode_attention: the decode-attention kernel streams K/V once per query head
        (TensorRT-LLM <= 0.6 masked MHA, vLLM's first paged-attention kernel) instead of once
        per KV head (FlashInfer, FlashAttention decode, TensorRT-LLM XQA).
    """

    tp: np.ndarray
    pp: np.ndarray
    concurrency: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    weight_bytes: np.ndarray
    fp8_compute: np.ndarray
    kv_bytes: np.ndarray
    per_head_decode_attention: np.ndarray

    @classmethod
    def build(
        cls,
        *,
        tp: object = 1,
        pp: object = 1,
        concurrency: object = 1,
        input_len: object,
        output_len: object,
        weight_dtype: object = "bf16",
        kv_dtype: object = "bf16",
        per_head_decode_attention: object = False,
    ) -> InferenceArrays:
        """Broadcast scalars or arrays (dtypes as names, or arrays of names) into one shape."""
        wd = np.asarray(weight_dtype)
        kd = np.asarray(kv_dtype)
        for names, allowed, what in ((wd, WEIGHT_DTYPES, "weight dtype"), (kd, KV_DTYPES, "kv dtype")):
            bad = sorted({str(n) for n in np.ravel(names)} - set(allowed))
            if bad:
                raise PlannerError(f"unknown {what} {', '.join(bad)}; use one of {', '.join(allowed)}")
        weight_bytes = np.vectorize(bytes_per_element, otypes=[float])(wd)
        kv_bytes = np.vectorize(bytes_per_element, otypes=[float])(kd)
        arrays = np.broadcast_arrays(
            np.asarray(tp, dtype=np.int64),
            np.asarray(pp, dtype=np.int64),
            np.asarray(concurrency, dtype=np.int64),
            np.asarray(input_len, dtype=np.int64),
            np.asarray(output_len, dtype=np.int64),
            weight_bytes,
            wd == "fp8",
            kv_bytes,
            np.asarray(per_head_decode_attention, dtype=bool),
        )
        return cls(*(np.array(a) for a in arrays))

    @property
    def gpus_per_replica(self) -> np.ndarray:
        return self.tp * self.pp

    @property
    def context_len(self) -> np.ndarray:
        """Tokens cached per sequence when it finishes: prompt plus generated."""
        return self.input_len + self.output_len

    def with_concurrency(self, concurrency: np.ndarray | int) -> InferenceArrays:
        c = np.broadcast_to(np.asarray(concurrency, dtype=np.int64), self.tp.shape)
        return InferenceArrays(**{**self.__dict__, "concurrency": np.array(c)})


# --- Shapes derived from the model once (Python ints) --------------------------------------------


@dataclass(frozen=True)
class Gemm:
    """One weight GEMM (fused where engines fuse it) of a layer, before any split.

    Weight elements on one GPU = tp_elements / tp + kv_elements_per_head x kv heads on that GPU
    + replicated_elements. `routed`: a routed-expert GEMM, of which a token uses top-k of E.
    """

    name: str
    tp_elements: int = 0
    kv_elements_per_head: int = 0
    replicated_elements: int = 0
    routed: bool = False


@dataclass(frozen=True)
class LayerShape:
    """One kind of transformer layer (dense or MoE): its GEMMs and its 16-bit small parameters."""

    gemms: tuple[Gemm, ...]
    small_params: int  # norms, biases, q/k norms, router bias: replicated, 16-bit
    ffn_width: int  # active intermediate width per token (element-wise traffic)


@dataclass(frozen=True)
class ModelShapes:
    """What the serving formulas need from a ModelSpec, computed once."""

    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    vocab: int
    dense: LayerShape
    moe: LayerShape | None
    num_dense_layers: int
    num_moe_layers: int
    experts: int
    experts_per_token: int
    embedding_params: int
    head_params: int  # final norm, plus the output projection when it is not tied to the embedding
    tied_embeddings: bool  # the output projection is the embedding's word table (V x h)
    kv_elements_per_token_per_layer: int  # whole layer, before TP
    mla: bool
    attn_qk_dim: int  # per head, prefill (MLA: nope + rope)
    attn_v_dim: int  # per head
    decode_qk_dim: int  # per head, decode (MLA absorbed: kv_lora + rope)
    decode_v_dim: int  # per head, decode (MLA absorbed: kv_lora)
    sliding_window_tokens: int  # 0 when none
    sliding_window_layers: int

    def kv_heads_per_gpu(self, tp: np.ndarray) -> np.ndarray:
        """K/V heads each GPU holds: kv_heads / tp, at least one (replicated when kv_heads < tp)."""
        return np.maximum(self.kv_heads // np.maximum(tp, 1), 1)

    def kv_elements_per_token_per_layer_per_gpu(self, tp: np.ndarray) -> np.ndarray:
        """Cached elements per token per layer on one GPU.

        MHA/GQA: split over TP by KV head (replicated when kv_heads < tp). MLA: the latent c_KV and
        the shared rotary key are used by every query head, so each TP rank keeps all of them.
        """
        if self.mla:
            return np.broadcast_to(np.int64(self.kv_elements_per_token_per_layer), np.shape(tp))
        per_head = self.kv_elements_per_token_per_layer // self.kv_heads
        return per_head * self.kv_heads_per_gpu(tp)

    def global_layers(self) -> int:
        return self.num_layers - self.sliding_window_layers

    def head_matrix_params(self) -> int:
        """What the output head reads each pass: the final norm and the V x h projection, which is the
        embedding's word table when the two are tied (Gemma, GPT-2, Llama 3.2 1B/3B)."""
        return self.head_params + (self.vocab * self.hidden if self.tied_embeddings else 0)


def _attention_gemms(model: ModelSpec) -> tuple[tuple[Gemm, ...], int]:
    """Attention projections as engines fuse them, and the attention's small parameters."""
    h, a, kv, d = model.hidden_size, model.num_attention_heads, model.kv_heads, model.head_size
    total = attention_params(model)
    if model.mla is not None:
        m = model.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        gemms: list[Gemm] = []
        if m.q_lora_rank is None:
            gemms.append(Gemm("q", tp_elements=h * a * qk))
        else:
            gemms.append(Gemm("q_down", replicated_elements=h * m.q_lora_rank))
            gemms.append(Gemm("q_up", tp_elements=m.q_lora_rank * a * qk))
        gemms.append(Gemm("kv_down", replicated_elements=h * (m.kv_lora_rank + m.qk_rope_head_dim)))
        gemms.append(Gemm("kv_up", tp_elements=m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)))
        gemms.append(Gemm("attn_out", tp_elements=a * m.v_head_dim * h))
    else:
        gemms = [Gemm("qkv", tp_elements=h * a * d, kv_elements_per_head=2 * h * d), Gemm("attn_out", tp_elements=a * d * h)]
    weights = sum(g.tp_elements + g.replicated_elements + g.kv_elements_per_head * kv for g in gemms)
    return tuple(gemms), total - weights


def _mlp_gemms(model: ModelSpec, ffn: int, prefix: str, routed: bool, copies: int) -> tuple[tuple[Gemm, ...], int]:
    """Feed-forward GEMMs (gate+up fused, down) for `copies` experts of width `ffn`, and their biases."""
    h = model.hidden_size
    up = 2 if model.mlp_kind == "gated" else 1
    gemms = (
        Gemm(f"{prefix}up", tp_elements=copies * up * h * ffn, routed=routed),
        Gemm(f"{prefix}down", tp_elements=copies * ffn * h, routed=routed),
    )
    bias = copies * (mlp_params(model, ffn) - (up + 1) * h * ffn)
    return gemms, bias


def _layer_shape(model: ModelSpec, *, moe_layer: bool) -> LayerShape:
    attn, attn_small = _attention_gemms(model)
    small = attn_small + model.norms_per_layer * norm_params(model, model.hidden_size)
    if not moe_layer:
        mlp, bias = _mlp_gemms(model, model.ffn_hidden_size, "mlp_", routed=False, copies=1)
        return LayerShape(gemms=attn + mlp, small_params=small + bias, ffn_width=model.ffn_hidden_size)
    moe = model.moe
    assert moe is not None
    routed, routed_bias = _mlp_gemms(model, moe.moe_ffn_hidden_size, "expert_", routed=True, copies=moe.num_experts)
    gemms = attn + (Gemm("router", replicated_elements=model.hidden_size * moe.num_experts),) + routed
    small += routed_bias + (moe.num_experts if moe.router_bias else 0)
    if moe.num_shared_experts:
        shared, shared_bias = _mlp_gemms(
            model, moe.moe_ffn_hidden_size, "shared_", routed=False, copies=moe.num_shared_experts
        )
        gemms += shared
        small += shared_bias
    width = (moe.experts_per_token + moe.num_shared_experts) * moe.moe_ffn_hidden_size
    return LayerShape(gemms=gemms, small_params=small, ffn_width=width)


def model_shapes(model: ModelSpec) -> ModelShapes:
    counts = count_params(model)
    mla = model.mla
    return ModelShapes(
        num_layers=model.num_layers,
        hidden=model.hidden_size,
        heads=model.num_attention_heads,
        kv_heads=model.kv_heads,
        vocab=model.vocab_size,
        dense=_layer_shape(model, moe_layer=False),
        moe=_layer_shape(model, moe_layer=True) if model.moe is not None else None,
        num_dense_layers=model.num_dense_layers,
        num_moe_layers=model.num_moe_layers,
        experts=model.moe.num_experts if model.moe else 1,
        experts_per_token=model.moe.experts_per_token if model.moe else 1,
        embedding_params=counts.embedding,
        head_params=counts.head,
        tied_embeddings=model.tied_embeddings,
        kv_elements_per_token_per_layer=kv_cache_elements_per_token_per_layer(model),
        mla=mla is not None,
        attn_qk_dim=(mla.qk_nope_head_dim + mla.qk_rope_head_dim) if mla else model.head_size,
        attn_v_dim=mla.v_head_dim if mla else model.head_size,
        decode_qk_dim=(mla.kv_lora_rank + mla.qk_rope_head_dim) if mla else model.head_size,
        decode_v_dim=mla.kv_lora_rank if mla else model.head_size,
        sliding_window_tokens=model.sliding_window_tokens or 0,
        sliding_window_layers=model.sliding_window_layers,
    )


# --- Weights ------------------------------------------------------------------------------------


def quantized_bytes_per_element(weight_bytes: np.ndarray) -> np.ndarray:
    """Bytes per layer weight, with int4's group scales (one 16-bit scale per INT4_GROUP_SIZE)."""
    return np.where(weight_bytes < 1, weight_bytes + 2.0 / INT4_GROUP_SIZE, weight_bytes)


def gemm_elements_per_gpu(shapes: ModelShapes, gemm: Gemm, tp: np.ndarray) -> np.ndarray:
    """Weight elements of one GEMM held by one GPU of a TP group."""
    return gemm.tp_elements / tp + gemm.kv_elements_per_head * shapes.kv_heads_per_gpu(tp) + gemm.replicated_elements


def stage_layers(shapes: ModelShapes, pp: np.ndarray) -> np.ndarray:
    """Layers on the most loaded pipeline stage: ceil(L / pp)."""
    return -(-shapes.num_layers // pp)
