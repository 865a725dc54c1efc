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
from planner.physics import sparse_attention
from planner.physics.elementwise import elementwise_bytes_per_token
from planner.physics.kernels import NVFP4_COPY_BYTES_PER_ELEMENT
from planner.physics.linear_attention import layer_linear_counts
from planner.physics.params import (
    count_params,
    indexer_cache_bytes_per_token_per_layer,
    kv_cache_elements_per_token_per_layer,
    linear_state_bytes_per_sequence,
)
from planner.physics.shapes import LayerShape, attention_dims, kv_heads_per_rank, layer_shape
from planner.specs.dtypes import bytes_per_element
from planner.specs.model import ModelSpec
from planner.specs.serving import DEFAULT_MAX_BATCHED_TOKENS, ServingLayout

WEIGHT_DTYPES: tuple[str, ...] = ("bf16", "fp8", "fp4", "int8", "int4")
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

PREFILL_CHUNK_TOKENS = DEFAULT_MAX_BATCHED_TOKENS
"""Default of the most tokens one forward pass processes (`max_batched_tokens`): prompts are packed
(no padding) and split into passes of at most this many tokens. 8192 is TensorRT-LLM's default
max_num_tokens and vLLM's default max_num_batched_tokens with chunked prefill. It sizes the
activation workspace and the number of prefill passes."""


# --- Inputs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class InferenceArrays:
    """Serving layouts as numpy arrays that broadcast against each other (0-d for one layout).

    tp, pp: tensor- and pipeline-parallel degrees of one replica.
    concurrency: sequences in flight per replica (the batch, for static batching).
    input_len, output_len: prompt and generated tokens per sequence (output includes the first
        token, which the prefill produces).
    weight_bytes: bytes per element of the transformer layers' weights (2, 1, 0.5, 1 or 0.5), scales apart.
    fp8_compute: GEMMs run on fp8 tensor cores (fp8 weights); else 16-bit compute.
    fp4_weights: NVFP4 weights (fp4): their GEMMs run on fp4 tensor cores where the chip has them, else
        weight-only at the 16-bit rate.
    kv_bytes: bytes per element of the KV cache (2 or 1).
    per_head_decode_attention: the decode-attention kernel streams K/V once per query head
        (TensorRT-LLM <= 0.6 masked MHA, vLLM's first paged-attention kernel) instead of once
        per KV head (FlashInfer, FlashAttention decode, TensorRT-LLM XQA).
    request_rate: requests per second arriving at one replica (open loop, Poisson); 0: a closed loop
        of `concurrency` clients (continuous batching only).
    max_batched_tokens: most tokens one forward pass carries (the chunked-prefill budget).
    """

    tp: np.ndarray
    pp: np.ndarray
    concurrency: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    weight_bytes: np.ndarray
    fp8_compute: np.ndarray
    fp4_weights: np.ndarray
    kv_bytes: np.ndarray
    per_head_decode_attention: np.ndarray
    request_rate: np.ndarray
    max_batched_tokens: np.ndarray

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
        request_rate: object = 0.0,
        max_batched_tokens: object = PREFILL_CHUNK_TOKENS,
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
            wd == "fp4",
            kv_bytes,
            np.asarray(per_head_decode_attention, dtype=bool),
            np.asarray(request_rate, dtype=float),
            np.asarray(max_batched_tokens, dtype=np.int64),
        )
        return cls(*(np.array(a) for a in arrays))

    @classmethod
    def from_layout(cls, layout: ServingLayout) -> InferenceArrays:
        """One layout as 0-d arrays (the request rate per replica)."""
        return cls.build(
            tp=layout.tp, pp=layout.pp, concurrency=layout.concurrency, input_len=layout.input_len,
            output_len=layout.output_len, weight_dtype=layout.weight_dtype, kv_dtype=layout.kv_dtype,
            per_head_decode_attention=layout.decode_attention == "per-head",
            request_rate=layout.request_rate_per_replica, max_batched_tokens=layout.max_batched_tokens,
        )

    @property
    def gpus_per_replica(self) -> np.ndarray:
        return np.asarray(self.tp * self.pp)

    @property
    def context_len(self) -> np.ndarray:
        """Tokens cached per sequence when it finishes: prompt plus generated."""
        return np.asarray(self.input_len + self.output_len)

    def with_concurrency(self, concurrency: np.ndarray | int) -> InferenceArrays:
        c = np.broadcast_to(np.asarray(concurrency, dtype=np.int64), self.tp.shape)
        return InferenceArrays(**{**self.__dict__, "concurrency": np.array(c)})


# --- Shapes derived from the model once (Python ints) --------------------------------------------


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
    attn_qk_dim: int  # per head, prefill (MLA: nope + rope; sparse attention: kv_lora + rope)
    attn_v_dim: int  # per head
    decode_qk_dim: int  # per head, decode (MLA absorbed: kv_lora + rope)
    decode_v_dim: int  # per head, decode (MLA absorbed: kv_lora)
    sliding_window_tokens: int  # 0 when none
    sliding_window_layers: int
    spec: ModelSpec  # what the shared physics functions take
    num_attention_layers: int = 0  # layers with softmax attention and a KV cache (num_layers without GDN layers)
    dense_linear: LayerShape | None = None  # a dense layer with the Gated DeltaNet mixer (None without them)
    moe_linear: LayerShape | None = None  # and a MoE layer
    num_linear_dense_layers: int = 0  # GDN layers among the dense layers (which come first), and among the MoE ones
    num_linear_moe_layers: int = 0
    linear_state_bytes_per_layer: float = 0.0  # one sequence's GDN state in one layer, whole (state dtype)
    sparse_topk: int = 0  # DeepSeek Sparse Attention: keys each query attends (0: dense attention)
    indexer_flop_per_pair: float = 0.0  # its indexer's logit FLOPs per (query, key) pair, all indexer heads
    indexer_cache_bytes_per_token_per_layer: float = 0.0  # its indexer's key cache (fp8 values and a scale)

    def kv_bytes_per_token_per_layer_per_gpu(self, tp: np.ndarray, kv_bytes: np.ndarray) -> np.ndarray:
        """Cache bytes per token per layer on one GPU: the K/V (or MLA latent) elements at the KV dtype, and under
        sparse attention the indexer's key cache, fixed at fp8 with its scale and whole on every GPU."""
        return np.asarray(self.kv_elements_per_token_per_layer_per_gpu(tp) * kv_bytes
                          + self.indexer_cache_bytes_per_token_per_layer)

    def kv_bytes_per_token_per_layer(self, kv_bytes: np.ndarray) -> np.ndarray:
        """Cache bytes per token per layer of one replica (before any split)."""
        return np.asarray(self.kv_elements_per_token_per_layer * kv_bytes + self.indexer_cache_bytes_per_token_per_layer)

    def elementwise_bytes_per_token(self, tp: np.ndarray) -> np.ndarray:
        """Element-wise bytes per token of one dense layer on one GPU (planner.physics.elementwise, the
        function training uses; inference has no dropout and no sequence parallelism)."""
        return elementwise_bytes_per_token(self.spec, tp, moe_layer=False)

    def elementwise_bytes_per_token_moe(self, tp: np.ndarray) -> np.ndarray:
        return elementwise_bytes_per_token(self.spec, tp, moe_layer=True)

    def kv_heads_per_gpu(self, tp: np.ndarray) -> np.ndarray:
        """K/V heads each GPU holds (physics.shapes.kv_heads_per_rank)."""
        return kv_heads_per_rank(self.kv_heads, tp)

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
        """Attention layers that cache every token (the GDN layers cache none, the windowed ones their window)."""
        return self.num_attention_layers - self.sliding_window_layers

    @property
    def num_linear_layers(self) -> int:
        return self.num_linear_dense_layers + self.num_linear_moe_layers

    def elementwise_bytes_per_token_linear(self, tp: np.ndarray, *, moe_layer: bool) -> np.ndarray:
        """Element-wise bytes per token of a GDN layer (its mixer's kernels in place of the attention's)."""
        return elementwise_bytes_per_token(self.spec, tp, moe_layer=moe_layer, linear=True)

    def head_matrix_params(self) -> int:
        """What the output head reads each pass: the final norm and the V x h projection, which is the
        embedding's word table when the two are tied (Gemma, GPT-2, Llama 3.2 1B/3B)."""
        return self.head_params + (self.vocab * self.hidden if self.tied_embeddings else 0)


def model_shapes(model: ModelSpec) -> ModelShapes:
    counts = count_params(model)
    mla = model.mla
    dsa = model.sparse_attention
    # per head, as the prefill kernels run it (sparse attention: MLA's MQA form, FlashMLA's sparse prefill)
    prefill = attention_dims(model)
    return ModelShapes(
        num_layers=model.num_layers,
        hidden=model.hidden_size,
        heads=model.num_attention_heads,
        kv_heads=model.kv_heads,
        vocab=model.vocab_size,
        dense=layer_shape(model, moe_layer=False),
        moe=layer_shape(model, moe_layer=True) if model.moe is not None else None,
        num_dense_layers=model.num_dense_layers,
        num_moe_layers=model.num_moe_layers,
        experts=model.moe.num_experts if model.moe else 1,
        experts_per_token=model.moe.experts_per_token if model.moe else 1,
        embedding_params=counts.embedding,
        head_params=counts.head,
        tied_embeddings=model.tied_embeddings,
        kv_elements_per_token_per_layer=kv_cache_elements_per_token_per_layer(model),
        mla=mla is not None,
        attn_qk_dim=prefill.query // model.num_attention_heads,
        attn_v_dim=prefill.output // model.num_attention_heads,
        decode_qk_dim=(mla.kv_lora_rank + mla.qk_rope_head_dim) if mla else model.head_size,
        decode_v_dim=mla.kv_lora_rank if mla else model.head_size,
        sliding_window_tokens=model.sliding_window_tokens or 0,
        sliding_window_layers=model.sliding_window_layers,
        spec=model,
        num_attention_layers=model.num_attention_layers,
        dense_linear=layer_shape(model, moe_layer=False, linear=True) if model.linear_attention else None,
        moe_linear=(layer_shape(model, moe_layer=True, linear=True)
                    if model.linear_attention and model.moe is not None else None),
        num_linear_dense_layers=int(layer_linear_counts(model, np.int64(0), np.int64(model.num_dense_layers))),
        num_linear_moe_layers=int(layer_linear_counts(model, np.int64(model.num_dense_layers),
                                                      np.int64(model.num_moe_layers))),
        linear_state_bytes_per_layer=(linear_state_bytes_per_sequence(model) / model.num_linear_layers
                                      if model.num_linear_layers else 0.0),
        sparse_topk=dsa.topk if dsa else 0,
        indexer_flop_per_pair=sparse_attention.indexer_flop_per_pair(model) if dsa else 0.0,
        indexer_cache_bytes_per_token_per_layer=indexer_cache_bytes_per_token_per_layer(model),
    )


# --- Weights ------------------------------------------------------------------------------------


def quantized_bytes_per_element(x: InferenceArrays) -> np.ndarray:
    """Bytes per layer weight, with int4's group scales (one 16-bit scale per INT4_GROUP_SIZE) and NVFP4's block
    scales (physics.kernels.NVFP4_COPY_BYTES_PER_ELEMENT: ModelOpt / TensorRT-LLM / vLLM NVFP4 checkpoints)."""
    w = x.weight_bytes
    return np.where(x.fp4_weights, NVFP4_COPY_BYTES_PER_ELEMENT, np.where(w < 1, w + 2.0 / INT4_GROUP_SIZE, w))
