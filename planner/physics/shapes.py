"""Per-rank shapes of one transformer layer under tensor and expert parallelism.

Everything here is a count of elements (parameters, or activation elements per
token), as numpy arrays broadcast over the layout grid. Memory and time both
read these, so each shape is written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from planner.physics.params import (
    attention_params,
    embedding_params,
    head_params,
    norm_params,
)
from planner.specs.layout import LayoutArrays
from planner.specs.model import ModelSpec


def kv_shard(model: ModelSpec, tp: np.ndarray) -> np.ndarray:
    """Divisor of K/V tensors under TP: tp, or kv_heads when there are fewer KV heads than TP ranks
    (each rank then keeps one replicated KV head, as Megatron-LM does)."""
    return np.minimum(np.asarray(tp), model.kv_heads)


class AttentionWidths(NamedTuple):
    """Widths (elements per token, all heads) of the attention tensors."""

    query: int  # Q
    key: int  # K as stored: kv_heads x head_dim (GQA), or per query head for MLA
    value: int  # V as stored, likewise
    output: int  # the attention output (input of the output projection): heads x value head_dim


def attention_dims(model: ModelSpec) -> AttentionWidths:
    """Q, K, V and output widths. The attention core costs 2 s (query + output) FLOPs per token (QK^T, PV)."""
    a = model.num_attention_heads
    if model.mla is not None:  # MLA materialises per-head K and V after the up-projection
        m = model.mla
        qk = a * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        return AttentionWidths(qk, qk, a * m.v_head_dim, a * m.v_head_dim)
    d = model.head_size
    kv = model.kv_heads * d
    return AttentionWidths(a * d, kv, kv, a * d)


def kv_divisor(model: ModelSpec, tp: np.ndarray) -> np.ndarray:
    """What K and V tensors are divided by under TP: kv_shard for GQA/MHA; tp for MLA's per-head K/V."""
    if model.mla is not None:
        return np.asarray(tp)
    return kv_shard(model, tp)


@dataclass(frozen=True)
class GemmShapes:
    """Weight elements per rank of each GEMM in one layer (a token's forward GEMM FLOPs = 2 x these)."""

    qkv: np.ndarray
    out: np.ndarray
    fc1: np.ndarray
    fc2: np.ndarray
    expert_fc1: np.ndarray  # one routed expert's fc1 on this rank (0 for dense layers)
    expert_fc2: np.ndarray
    routed_experts_per_token: int


def layer_gemms(model: ModelSpec, lay: LayoutArrays, *, moe_layer: bool) -> GemmShapes:
    """Per-rank GEMM weight sizes of a dense or MoE layer (TP splits every matrix; KV may replicate)."""
    h = model.hidden_size
    t = lay.tp.astype(float)
    widths = attention_dims(model)
    q_width, v_width = widths.query, widths.output
    if model.mla is not None:
        out = v_width * h / t
        qkv = (attention_params(model) - v_width * h) / t
    else:
        kv_width = model.kv_heads * model.head_size
        qkv = h * q_width / t + 2 * h * kv_width / kv_shard(model, lay.tp)
        out = q_width * h / t
    gate = 2 if model.mlp_kind == "gated" else 1
    zero = np.zeros_like(t)
    if moe_layer and model.moe is not None:
        moe = model.moe
        shared = moe.num_shared_experts * moe.moe_ffn_hidden_size
        # The router (h x E) is replicated on every TP rank (Megatron-Core); shared experts split like a dense MLP.
        fc1 = h * moe.num_experts + gate * h * shared / t
        fc2 = shared * h / t
        e_fc1 = gate * h * moe.moe_ffn_hidden_size / t
        e_fc2 = moe.moe_ffn_hidden_size * h / t
        return GemmShapes(qkv, out, fc1, fc2, e_fc1 + zero, e_fc2 + zero, moe.experts_per_token)
    f = model.ffn_hidden_size
    return GemmShapes(qkv, out, gate * h * f / t, f * h / t, zero, zero, 0)


@dataclass(frozen=True)
class RankParams:
    """Parameters held by one rank for one layer, split by how ZeRO shards them."""

    dense: np.ndarray  # sharded over the data-parallel group (dp x cp)
    expert: np.ndarray  # routed experts: sharded over the expert-data-parallel group (dp x cp / ep)


def _bias_params_per_rank(model: ModelSpec, lay: LayoutArrays, *, moe_layer: bool) -> np.ndarray:
    """Biases on one rank: column-parallel ones (QKV, fc1) split over TP, row-parallel ones (output
    projection, fc2) replicated, as Megatron-LM lays them out."""
    h, t = model.hidden_size, lay.tp.astype(float)
    widths = attention_dims(model)
    column = np.zeros_like(t)
    row = 0.0
    if model.qkv_bias and model.mla is None:
        column = column + widths.query / t + 2 * widths.key / kv_shard(model, lay.tp)
    if model.attention_output_bias:
        row += h
    if model.mlp_bias and not (moe_layer and model.moe is not None):
        column = column + (2 if model.mlp_kind == "gated" else 1) * model.ffn_hidden_size / t
        row += h
    return column + row


def layer_params_per_rank(model: ModelSpec, lay: LayoutArrays, *, moe_layer: bool) -> RankParams:
    """Parameters of one layer on one rank: matrices split by TP (experts also by EP); norms replicated."""
    g = layer_gemms(model, lay, moe_layer=moe_layer)
    norms = model.norms_per_layer * norm_params(model, model.hidden_size) + (2 * model.head_size if model.qk_norm else 0)
    dense = g.qkv + g.out + g.fc1 + g.fc2 + norms + _bias_params_per_rank(model, lay, moe_layer=moe_layer)
    if moe_layer and model.moe is not None:
        moe = model.moe
        # Expert MLP biases (rare; Megatron-style layout): fc1's split over TP, fc2's replicated.
        expert_bias = ((2 if model.mlp_kind == "gated" else 1) * moe.moe_ffn_hidden_size / lay.tp + model.hidden_size
                       if model.mlp_bias else 0.0)
        experts_here = moe.num_experts / lay.ep
        router_bias = moe.num_experts if moe.router_bias else 0  # replicated with the router
        return RankParams(
            dense=dense + moe.num_shared_experts * expert_bias + router_bias,
            expert=experts_here * (g.expert_fc1 + g.expert_fc2 + expert_bias),
        )
    return RankParams(dense=dense, expert=np.zeros_like(dense))


def embedding_params_per_rank(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """Vocabulary-parallel embedding (Megatron-LM): the word table split over TP, the rest replicated."""
    word = model.vocab_size * model.hidden_size
    return word / lay.tp + (embedding_params(model) - word)


def head_params_per_rank(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """Final norm plus the output projection (split over TP). With tied embeddings and pp > 1 the last
    stage keeps its own copy of the word table (Megatron-LM shares it by an all-reduce of gradients)."""
    word = model.vocab_size * model.hidden_size
    lm_head = head_params(model) - norm_params(model, model.hidden_size)
    copy = np.where(model.tied_embeddings & (lay.pp > 1), word, 0)
    return (lm_head + copy) / lay.tp + norm_params(model, model.hidden_size)
