"""Per-rank shapes of one transformer layer under tensor and expert parallelism.

Everything here is a count of elements (parameters, or activation elements per
token), as numpy arrays broadcast over the layout grid. Memory and time both
read these, so each shape is written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from planner.physics.linear_attention import in_proj_width, mixer_widths, split_params
from planner.physics.params import (
    attention_params,
    embedding_params,
    head_params,
    mlp_params,
    mtp_layer_is_moe,
    norm_params,
)
from planner.specs.layout import LayoutArrays
from planner.specs.model import ModelSpec


def kv_heads_per_rank(kv_heads: int, tp: np.ndarray) -> np.ndarray:
    """K/V heads one rank of a TP group holds: kv_heads / tp, at least one (replicated when kv_heads < tp)."""
    return np.asarray(np.maximum(kv_heads // np.maximum(np.asarray(tp), 1), 1))


def kv_shard(model: ModelSpec, tp: np.ndarray) -> np.ndarray:
    """Divisor of K/V tensors under TP: tp, or kv_heads when there are fewer KV heads than TP ranks
    (each rank then keeps one replicated KV head, as Megatron-LM does)."""
    return np.asarray(np.minimum(np.asarray(tp), model.kv_heads))


class AttentionWidths(NamedTuple):
    """Widths (elements per token, all heads) of the attention tensors."""

    query: int  # Q
    key: int  # K as stored: kv_heads x head_dim (GQA), or per query head for MLA
    value: int  # V as stored, likewise
    output: int  # the attention output (input of the output projection): heads x value head_dim


def attention_dims(model: ModelSpec, *, absorbed: bool = True) -> AttentionWidths:
    """Q, K, V and output widths. The attention core costs 2 s (query + output) FLOPs per token (QK^T, PV).
    `absorbed`: sparse attention's MQA form, which its kernels run; False gives MLA's own Q and K (what the
    rotary embedding sees, and the attention's math that model FLOPs count)."""
    a = model.num_attention_heads
    if absorbed and model.sparse_attention is not None and model.mla is not None:
        # DeepSeek Sparse Attention runs MLA in its MQA form (DeepSeek-V3.2-Exp report Sec. 1; Megatron-Core
        # AbsorbedMLASelfAttention): each query head, absorbed through the key up-projection, is kv_lora + rope
        # wide, the key is the one shared latent with its rotary part (V is its first kv_lora channels, no
        # tensor of its own), and each head's output is kv_lora wide before the value up-projection.
        m = model.mla
        latent = m.kv_lora_rank + m.qk_rope_head_dim
        return AttentionWidths(a * latent, latent, 0, a * m.kv_lora_rank)
    if model.mla is not None:  # MLA materialises per-head K and V after the up-projection
        m = model.mla
        qk = a * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        return AttentionWidths(qk, qk, a * m.v_head_dim, a * m.v_head_dim)
    d = model.head_size
    kv = model.kv_heads * d
    return AttentionWidths(a * d, kv, kv, a * d)


def kv_divisor(model: ModelSpec, tp: np.ndarray, *, absorbed: bool = True) -> np.ndarray:
    """What K and V tensors are divided by under TP: kv_shard for GQA/MHA; tp for MLA's per-head K/V; 1 for the
    shared latent key of sparse attention's MQA form (every TP rank holds it whole; `absorbed` as in
    attention_dims)."""
    if absorbed and model.sparse_attention is not None:
        return np.ones_like(np.asarray(tp))
    if model.mla is not None:
        return np.asarray(tp)
    return kv_shard(model, tp)


# --- The GEMMs of a layer, before any split ------------------------------------------------------------------


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
    copies: int = 1  # experts this GEMM stands for (routed or shared); each copy is one GEMM of 1/copies the size
    # The weight's side that TP leaves whole, at full length: the hidden size (0) for every projection that reads
    # or writes the residual stream, a latent rank for MLA's up-projections and the indexer's query.
    side: int = 0
    row_parallel: bool = False  # TP splits the input features (output projection, fc2), else the output features


@dataclass(frozen=True)
class LayerShape:
    """One kind of transformer layer (dense or MoE): its GEMMs and its 16-bit small parameters."""

    gemms: tuple[Gemm, ...]
    small_params: int  # norms, biases, q/k norms, router bias: replicated, 16-bit
    ffn_width: int  # active intermediate width per token (element-wise traffic)


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
            gemms.append(Gemm("q_up", tp_elements=m.q_lora_rank * a * qk, side=m.q_lora_rank))
        gemms.append(Gemm("kv_down", replicated_elements=h * (m.kv_lora_rank + m.qk_rope_head_dim)))
        gemms.append(Gemm("kv_up", tp_elements=m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim),
                          side=m.kv_lora_rank))
        gemms.append(Gemm("attn_out", tp_elements=a * m.v_head_dim * h, row_parallel=True))
        dsa = model.sparse_attention
        if dsa is not None and m.q_lora_rank is not None:
            # the lightning indexer's projections, replicated on every TP rank (Megatron-Core dsa.py @ d98e8a64:
            # parallel_mode="duplicated", inputs all-gathered under sequence parallelism)
            heads, d = dsa.index_heads, dsa.index_head_dim
            gemms.append(Gemm("index_q", replicated_elements=m.q_lora_rank * heads * d, side=m.q_lora_rank))
            gemms.append(Gemm("index_k", replicated_elements=h * d))
            gemms.append(Gemm("index_weights", replicated_elements=h * heads))
    else:
        gate = 2 if model.attention_output_gate else 1  # the gated query projection also computes the output gate
        gemms = [Gemm("qkv", tp_elements=gate * h * a * d, kv_elements_per_head=2 * h * d),
                 Gemm("attn_out", tp_elements=a * d * h, row_parallel=True)]
    weights = sum(g.tp_elements + g.replicated_elements + g.kv_elements_per_head * kv for g in gemms)
    return tuple(gemms), total - weights


def _mlp_gemms(model: ModelSpec, ffn: int, prefix: str, routed: bool, copies: int) -> tuple[tuple[Gemm, ...], int]:
    """Feed-forward GEMMs (gate+up fused, down) for `copies` experts of width `ffn`, and their biases. Routed
    experts run as one GEMM each; shared experts as one GEMM of the summed width (Megatron-Core's
    SharedExpertMLP, vLLM's fused shared expert)."""
    h = model.hidden_size
    up = 2 if model.mlp_kind == "gated" else 1
    gemms = (
        Gemm(f"{prefix}up", tp_elements=copies * up * h * ffn, routed=routed, copies=copies if routed else 1),
        Gemm(f"{prefix}down", tp_elements=copies * ffn * h, routed=routed, copies=copies if routed else 1,
             row_parallel=True),
    )
    bias = copies * (mlp_params(model, ffn) - (up + 1) * h * ffn)
    return gemms, bias


def _linear_mixer_gemms(model: ModelSpec) -> tuple[tuple[Gemm, ...], int]:
    """A Gated DeltaNet mixer's GEMMs (physics.linear_attention): the fused input projection (column-parallel,
    the heads split over TP, as the attention's QKV) and the output projection (row-parallel), and its small
    parameters (the convolution's taps, A_log, dt_bias, the gated norm's weights)."""
    la = model.linear_attention
    assert la is not None
    h = model.hidden_size
    gemms = (Gemm("qkv", tp_elements=h * in_proj_width(la)), Gemm("attn_out", tp_elements=mixer_widths(la).value * h,
                                                                       row_parallel=True))
    return gemms, split_params(la) + la.value_head_dim


def layer_shape(model: ModelSpec, *, moe_layer: bool, linear: bool = False) -> LayerShape:
    """The GEMMs of a dense or MoE layer as Megatron-Core, vLLM and TensorRT-LLM lay them out, and its small
    parameters; one list for training and serving. `linear`: the layer's mixer is Gated DeltaNet (its projections
    take the attention's names: they sit where QKV and the output projection sit, for TP and its overlap)."""
    attn, attn_small = _linear_mixer_gemms(model) if linear else _attention_gemms(model)
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
            model, moe.shared_expert_ffn_hidden_size or moe.moe_ffn_hidden_size, "shared_", routed=False,
            copies=moe.num_shared_experts,
        )
        gemms += shared
        small += shared_bias
    if moe.shared_expert_gate:  # Qwen2-MoE: h -> 1, replicated like the router
        gemms += (Gemm("shared_gate", replicated_elements=model.hidden_size),)
    width = moe.experts_per_token * moe.moe_ffn_hidden_size + moe.shared_ffn_width
    return LayerShape(gemms=gemms, small_params=small, ffn_width=width)


def gemm_elements_per_rank(gemm: Gemm, kv_heads: int, tp: np.ndarray) -> np.ndarray:
    """Weight elements of one GEMM (all its copies) held by one rank of a TP group: the TP-split part over tp,
    K/V heads by the heads the rank keeps (at least one: replicated when kv_heads < tp), the rest whole."""
    tp = np.asarray(tp)
    kv_here = kv_heads_per_rank(kv_heads, tp)
    return np.asarray(gemm.tp_elements / tp + gemm.kv_elements_per_head * kv_here + gemm.replicated_elements)


@dataclass(frozen=True)
class WeightMatrix:
    """One shape of 2-D weight in one layer (what Muon orthogonalises, what LoRA puts an adapter beside)."""

    rows: int  # output features, whole (before any TP split)
    cols: int  # input features, whole
    count: int  # matrices of this shape in the layer (routed experts: all of the layer's)
    split: bool  # TP splits it: its rows (column-parallel) or, row_parallel, its columns
    row_parallel: bool
    routed: bool  # a routed expert's weight: split over etp, the layer's experts spread over ep
    parts: int = 1  # the parameter it is one part of holds this many (the split QKV: 3, or 4 with an output gate)
    name: str = ""  # the GEMM it belongs to (Gemm.name)


def layer_weight_matrices(model: ModelSpec, *, moe_layer: bool, linear: bool = False, split_qkv: bool = True
                          ) -> tuple[WeightMatrix, ...]:
    """The 2-D weights of one layer, from its GEMMs (layer_shape): every GEMM weight is one matrix (a shared expert's
    summed width is one, as Megatron-Core's SharedExpertMLP holds it; each routed expert's are their own), the fused
    QKV of a plain attention layer split into its Q (and output-gate), K and V parts when `split_qkv` (as Hugging
    Face models hold them: q_proj, k_proj, v_proj). A Gated DeltaNet mixer's fused input projection stays whole."""
    h = model.hidden_size
    out: list[WeightMatrix] = []
    for g in layer_shape(model, moe_layer=moe_layer and model.moe is not None, linear=linear).gemms:
        side = g.side or h
        if g.name == "qkv" and not linear and model.mla is None:
            gate = 2 if model.attention_output_gate else 1
            query_rows = g.tp_elements // side // gate
            kv_rows = g.kv_elements_per_head * model.kv_heads // 2 // side
            parts = [query_rows] * gate + [kv_rows, kv_rows] if split_qkv else [gate * query_rows + 2 * kv_rows]
            out += [WeightMatrix(rows, side, 1, split=True, row_parallel=False, routed=False, parts=len(parts),
                                 name=g.name) for rows in parts]
            continue
        elements = g.tp_elements + g.kv_elements_per_head * model.kv_heads + g.replicated_elements
        other = elements // g.copies // side
        rows, cols = (side, other) if g.row_parallel else (other, side)
        out.append(WeightMatrix(rows, cols, g.copies, split=g.tp_elements > 0, row_parallel=g.row_parallel,
                                routed=g.routed, name=g.name))
    return tuple(out)


def rank_gemms(model: ModelSpec, tp: np.ndarray, *, moe_layer: bool, linear: bool = False
               ) -> list[tuple[Gemm, np.ndarray]]:
    """Each GEMM of a dense or MoE layer (`linear`: with the Gated DeltaNet mixer) with the weight elements one
    rank of a TP group holds for it (all copies of a routed GEMM: divide by ep for the experts on one rank, by
    copies for one expert)."""
    shape = layer_shape(model, moe_layer=moe_layer and model.moe is not None, linear=linear)
    return [(g, gemm_elements_per_rank(g, model.kv_heads, tp)) for g in shape.gemms]


class GemmKernel(NamedTuple):
    """One GEMM kernel an engine runs for a layer weight on one rank: a token's k input features to n outputs."""

    part: str  # "q", "k", "v", "gate", "up" for a split projection, else the Gemm's own name
    k: np.ndarray
    n: np.ndarray


SPLIT_UP_GEMMS = ("mlp_up", "shared_up")  # gated MLPs' gate and up projections (routed experts run grouped)


def gemm_kernels(model: ModelSpec, g: Gemm, elements: np.ndarray, tp: np.ndarray, *, separate: bool,
                 linear: bool = False) -> tuple[GemmKernel, ...]:
    """The kernels that run `g` (its `elements` weight elements on one rank, gemm_elements_per_rank) and their widths.
    The side TP leaves whole (g.side, else the hidden size) is the input of a column-parallel or replicated weight and
    the output of a row-parallel one. `separate`: the engine keeps the query, key and value projections and a gated
    MLP's gate and up projections as Linears of their own (EngineProfile.kernels.separate_projections: Hugging Face
    models, torchtitan), so each is a GEMM of its own over the same input; Megatron-Core fuses each set into one
    (linear_qkv, linear_fc1). A Gated DeltaNet mixer's (`linear`) input projection is one GEMM either way."""
    side = g.side or model.hidden_size
    if g.row_parallel:
        return (GemmKernel(g.name, np.asarray(elements / side), np.full(np.shape(elements), float(side))),)
    k = np.full(np.shape(elements), float(side))
    n = np.asarray(elements / side)
    if separate and g.name == "qkv" and model.mla is None and not linear:
        kv = np.asarray(kv_heads_per_rank(model.kv_heads, tp) * model.head_size, dtype=float)
        kv = np.broadcast_to(kv, np.shape(n))
        return (GemmKernel("q", k, n - 2 * kv), GemmKernel("k", k, kv), GemmKernel("v", k, kv))
    if separate and g.name in SPLIT_UP_GEMMS and model.mlp_kind == "gated":
        return (GemmKernel("gate", k, n / 2), GemmKernel("up", k, n / 2))
    return (GemmKernel(g.name, k, n),)


@dataclass(frozen=True)
class RankParams:
    """Parameters held by one rank for one layer, split by how ZeRO shards them."""

    dense: np.ndarray  # sharded over the data-parallel group (dp x cp)
    expert: np.ndarray  # routed experts: sharded over the expert-data-parallel group (expert_shard_degree)


def expert_data_parallel(lay: LayoutArrays) -> np.ndarray:
    """Ranks of a stage that hold the same routed experts: tp x cp x dp / (etp x ep).

    Megatron-Core regroups a stage's tp x cp x dp ranks for the expert layers into etp x ep x edp
    (megatron/core/parallel_state.py @ d98e8a64, initialize_model_parallel: expert_data_parallel_size =
    world_size // (expert_tensor_parallel_size x expert_model_parallel_size x pipeline_model_parallel_size));
    with etp = tp this is dp x cp / ep.
    """
    return np.asarray(np.maximum(lay.tp * lay.cp * lay.dp / (lay.etp * lay.ep), 1.0))


def expert_shard_degree(lay: LayoutArrays) -> np.ndarray:
    """Ranks a ZeRO shard of the routed experts spans: the expert-data-parallel group, or its part inside an
    HSDP shard group (shard_degree of the dp x cp ranks, so shard_degree x tp / (etp x ep)); at least 1."""
    return np.asarray(np.maximum(lay.shard_degree * lay.tp / (lay.etp * lay.ep), 1.0))


def _bias_params_per_rank(model: ModelSpec, lay: LayoutArrays, *, moe_layer: bool, linear: bool = False
                          ) -> np.ndarray:
    """Biases on one rank: column-parallel ones (QKV, fc1) split over TP, row-parallel ones (output
    projection, fc2) replicated, as Megatron-LM lays them out. A Gated DeltaNet mixer has none."""
    h, t = model.hidden_size, lay.tp.astype(float)
    widths = attention_dims(model)
    column = np.zeros_like(t)
    row = 0.0
    if model.qkv_bias and model.mla is None and not linear:
        column = column + widths.query / t + 2 * widths.key / kv_shard(model, lay.tp)
    if model.attention_output_bias and not linear:
        row += h
    if model.mlp_bias and not (moe_layer and model.moe is not None):
        column = column + (2 if model.mlp_kind == "gated" else 1) * model.ffn_hidden_size / t
        row += h
    return column + row


def _head_wise_params_per_rank(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """q/k norm weights, attention sinks and MLA's latent norms on one rank: shared head_dim norms and the
    latent norms are replicated; per-head weights and sinks follow their heads (queries split over TP, keys
    like the K/V heads)."""
    t = lay.tp.astype(float)
    d = model.head_size
    total = np.zeros_like(t)
    if model.qk_norm:
        if model.qk_norm_shape == "all_heads":
            total = total + model.num_attention_heads * d / t + model.kv_heads * d / kv_shard(model, lay.tp)
        else:
            total = total + 2 * d
    if model.attention_sinks:
        total = total + model.num_attention_heads / t
    if model.mla is not None:  # RMSNorms of the query and K/V latents, replicated with the down-projections
        total = total + (model.mla.q_lora_rank or 0) + model.mla.kv_lora_rank
    if model.sparse_attention is not None:  # the indexer key's LayerNorm (weight and bias), replicated with it
        total = total + 2 * model.sparse_attention.index_head_dim
    return total


def _linear_mixer_small_params_per_rank(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """A Gated DeltaNet mixer's small parameters on one rank: the convolution's taps, A_log and dt_bias follow
    their heads over TP; the gated norm's head-wide weights are replicated."""
    la = model.linear_attention
    assert la is not None
    return np.asarray(split_params(la) / lay.tp.astype(float) + la.value_head_dim)


def layer_params_per_rank(model: ModelSpec, lay: LayoutArrays, *, moe_layer: bool, linear: bool = False) -> RankParams:
    """Parameters of one layer on one rank: matrices split by TP, routed experts by expert TP and EP
    (etp x ep); norms replicated. `linear`: the layer's mixer is Gated DeltaNet.

    Routed experts: Megatron-Core's TEGroupedMLP / SequentialMLP split each expert over the expert-TP group
    (megatron/core/transformer/moe/experts.py @ d98e8a64: tp_group = pg_collection.expt_tp); shared experts
    are an MLP over the ordinary TP group (moe/shared_experts.py, SharedExpertMLP: tp_group = pg_collection.tp).
    """
    gemms = rank_gemms(model, lay.tp, moe_layer=moe_layer, linear=linear)
    matrices = sum((el for g, el in gemms if not g.routed), np.zeros_like(lay.tp, dtype=float))
    routed = sum((gemm_elements_per_rank(g, model.kv_heads, lay.etp) for g, _ in gemms if g.routed),
                 np.zeros_like(lay.tp, dtype=float))
    norms = model.norms_per_layer * norm_params(model, model.hidden_size)
    mixer_small = (_linear_mixer_small_params_per_rank(model, lay) if linear
                   else _head_wise_params_per_rank(model, lay))
    dense = matrices + norms + _bias_params_per_rank(model, lay, moe_layer=moe_layer, linear=linear) + mixer_small
    if moe_layer and model.moe is not None:
        moe = model.moe
        # Expert MLP biases (rare; Megatron-style layout): fc1's split over expert TP, fc2's replicated.
        expert_bias = ((2 if model.mlp_kind == "gated" else 1) * moe.moe_ffn_hidden_size / lay.etp + model.hidden_size
                       if model.mlp_bias else 0.0)
        experts_here = moe.num_experts / lay.ep
        router_bias = moe.num_experts if moe.router_bias else 0  # replicated with the router
        shared_bias = (((2 if model.mlp_kind == "gated" else 1) * moe.shared_ffn_width / lay.tp
                        + moe.num_shared_experts * model.hidden_size) if model.mlp_bias else 0.0)
        return RankParams(
            dense=dense + shared_bias + router_bias,
            expert=routed / lay.ep + experts_here * expert_bias,
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
    return np.asarray((lm_head + copy) / lay.tp + norm_params(model, model.hidden_size))


def mtp_params_per_rank(model: ModelSpec, lay: LayoutArrays) -> RankParams:
    """One multi-token-prediction module on one rank (physics.params.mtp_module_params): its transformer layer
    split like the model's layers, eh_proj column-parallel over TP (Megatron-Core multi_token_prediction.py
    @ d98e8a64: built with gather_output=False, bias=False on the TP group) and its three norms replicated."""
    layer = layer_params_per_rank(model, lay, moe_layer=mtp_layer_is_moe(model))
    h = model.hidden_size
    return RankParams(dense=layer.dense + 2 * h * h / lay.tp + 3 * norm_params(model, h), expert=layer.expert)


def mtp_embedding_params_per_rank(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """The embedding the MTP modules need on the last stage: with pp > 1 Megatron-Core builds one there
    (megatron/core/models/gpt/gpt_model.py @ d98e8a64: `if self.pre_process or self.mtp_process: self.embedding
    = LanguageModelEmbedding(...)`), its weights kept in step with the first stage's like tied embeddings. With
    tied embeddings the last stage holds that word table already (head_params_per_rank), so only the rest."""
    word = model.vocab_size * model.hidden_size / lay.tp
    extra = embedding_params_per_rank(model, lay) - (word if model.tied_embeddings else 0.0)
    return np.asarray(np.where(lay.pp > 1, extra, 0.0))
