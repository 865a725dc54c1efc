"""Exact parameter counts and KV-cache sizes from a model spec.

Counts follow the modules as the reference implementations allocate them
(HuggingFace transformers / Megatron-LM): every weight matrix, bias and norm
vector. Nothing is divided by 1024 and nothing is rounded.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.physics.linear_attention import in_proj_width, mixer_widths, split_params
from planner.specs.dtypes import bytes_per_element
from planner.specs.model import ModelSpec


def norm_params(model: ModelSpec, width: int) -> int:
    """RMSNorm (and Cohere's bias-free LayerNorm) has a weight vector; LayerNorm a weight and a bias."""
    return width * (2 if model.norm_kind == "layernorm" else 1)


def attention_params(model: ModelSpec) -> int:
    """Parameters of one attention block (projections, biases, q/k norms)."""
    h, a, kv, d = model.hidden_size, model.num_attention_heads, model.kv_heads, model.head_size
    if model.mla is not None:
        m = model.mla
        qk_dim = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank is None:
            q = h * a * qk_dim
        else:  # down-projection, its RMSNorm, up-projection (DeepSeek-V2 eq. 12-13)
            q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a * qk_dim
        # joint K/V down-projection plus the shared rotary key, its RMSNorm, up-projection to K_nope and V
        kv_proj = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
        kv_proj += m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
        out = a * m.v_head_dim * h
        out_bias = h if model.attention_output_bias else 0  # projection biases are not modelled for MLA's q/kv
        return q + kv_proj + out + out_bias + qk_norm_params(model) + sink_params(model) + indexer_params(model)
    q = h * a * d * (2 if model.attention_output_gate else 1)  # the gated query projection doubles its output
    k_and_v = 2 * h * kv * d
    out = a * d * h
    bias = 0
    if model.qkv_bias:
        bias += a * d + 2 * kv * d
    if model.attention_output_bias:
        bias += h
    return q + k_and_v + out + bias + qk_norm_params(model) + sink_params(model)


def linear_attention_params(model: ModelSpec) -> int:
    """One Gated DeltaNet mixer (transformers Qwen3NextGatedDeltaNet; Qwen3.5's splits the same input projection
    in four): the input projection h -> q, k (num_key_heads x key_head_dim each), v and the output gate z
    (num_value_heads x value_head_dim each), and the write strength b and decay input a (one per value head), all
    without bias; the depthwise causal convolution over q, k and v (kernel taps per channel, no bias); dt_bias and
    A_log (one per value head); the gated RMSNorm over value_head_dim; the output projection v -> h without
    bias. 0 without linear attention."""
    la = model.linear_attention
    if la is None:
        return 0
    h = model.hidden_size
    value = mixer_widths(la).value
    return h * in_proj_width(la) + split_params(la) + la.value_head_dim + value * h


def linear_mixer_delta_params(model: ModelSpec) -> int:
    """What a Gated DeltaNet layer holds beyond an attention layer of the same model (negative where it holds
    less): its mixer in place of the attention block; norms and feed-forward alike. 0 without linear attention."""
    if model.linear_attention is None:
        return 0
    return linear_attention_params(model) - attention_params(model)


def indexer_params(model: ModelSpec) -> int:
    """DeepSeek Sparse Attention's lightning indexer, one layer (DeepSeek-V3.2-Exp inference/model.py Indexer;
    transformers DeepseekV32Indexer, GlmMoeDsaIndexer): wq_b from the query latent to H_I x d_I, wk from the
    hidden state to one d_I key, its LayerNorm (weight and bias), and weights_proj (h -> H_I), all without bias.
    0 without sparse attention."""
    dsa = model.sparse_attention
    if dsa is None or model.mla is None or model.mla.q_lora_rank is None:
        return 0
    h, heads, d = model.hidden_size, dsa.index_heads, dsa.index_head_dim
    return model.mla.q_lora_rank * heads * d + h * d + 2 * d + h * heads


def qk_norm_params(model: ModelSpec) -> int:
    """Weights of the query and key norms of one layer: head_dim each when shared across heads (Qwen3,
    Gemma 3), one per channel of every query and key head otherwise (OLMo 2, Cohere, StableLM 2)."""
    if not model.qk_norm:
        return 0
    d = model.head_size
    if model.qk_norm_shape == "all_heads":
        return (model.num_attention_heads + model.kv_heads) * d
    return 2 * d


def sink_params(model: ModelSpec) -> int:
    """Attention sinks (gpt-oss): one learned logit per query head per layer."""
    return model.num_attention_heads if model.attention_sinks else 0


def mlp_params(model: ModelSpec, ffn: int) -> int:
    """One feed-forward block of intermediate size `ffn`: 3 matrices if gated, 2 otherwise."""
    h = model.hidden_size
    if model.mlp_kind == "gated":
        weights = 3 * h * ffn
        bias = 2 * ffn + h if model.mlp_bias else 0
    else:
        weights = 2 * h * ffn
        bias = ffn + h if model.mlp_bias else 0
    return weights + bias


def moe_params(model: ModelSpec, *, active: bool) -> int:
    """One MoE feed-forward block: router, routed experts (all, or top-k when `active`), shared experts
    (each of its own width when given) and their gate."""
    assert model.moe is not None
    moe = model.moe
    routed = moe.experts_per_token if active else moe.num_experts
    router = model.hidden_size * moe.num_experts + (moe.num_experts if moe.router_bias else 0)
    experts = routed * mlp_params(model, moe.moe_ffn_hidden_size)
    shared_width = moe.shared_expert_ffn_hidden_size or moe.moe_ffn_hidden_size
    shared = moe.num_shared_experts * mlp_params(model, shared_width)
    gate = model.hidden_size if moe.shared_expert_gate else 0  # Linear(h, 1), no bias
    return router + experts + shared + gate


def layer_params(model: ModelSpec, *, moe_layer: bool, active: bool = False) -> int:
    """One transformer layer: attention, feed-forward and the layer's norms."""
    ffn = moe_params(model, active=active) if moe_layer else mlp_params(model, model.ffn_hidden_size)
    return attention_params(model) + ffn + model.norms_per_layer * norm_params(model, model.hidden_size)


def mtp_layer_is_moe(model: ModelSpec) -> bool:
    """A multi-token-prediction module's transformer layer is of the model's last layer's kind (DeepSeek-V3: MLA
    + MoE): MoE when the model has MoE layers (they follow the leading dense ones)."""
    return model.num_moe_layers > 0


def mtp_module_params(model: ModelSpec) -> int:
    """One multi-token-prediction module (DeepSeek-V3 report, Sec. 2.2, eq. 21-22), as Megatron-Core builds it
    (megatron/core/transformer/multi_token_prediction.py, MultiTokenPredictionLayer): RMSNorms of the hidden
    state and of the next token's embedding (hnorm, enorm), the 2h -> h projection eh_proj (no bias), one
    transformer layer of the model's last layer's kind and its own final norm. The embedding and the output
    head are the main model's (shared, not counted here)."""
    h = model.hidden_size
    return 2 * h * h + 3 * norm_params(model, h) + layer_params(model, moe_layer=mtp_layer_is_moe(model))


def embedding_params(model: ModelSpec) -> int:
    """Input embedding (+ learned positions, + BLOOM's embedding norm)."""
    h = model.hidden_size
    total = model.vocab_size * h
    if model.position_embedding == "learned":
        total += model.max_seq_len * h
    if model.embedding_norm:
        total += norm_params(model, h)
    return total


def head_params(model: ModelSpec) -> int:
    """Final norm and, when untied, the output projection (plus its bias, GPT-J)."""
    lm_head = 0 if model.tied_embeddings else model.vocab_size * model.hidden_size
    bias = model.vocab_size if model.lm_head_bias else 0
    return norm_params(model, model.hidden_size) + lm_head + bias


@dataclass(frozen=True)
class ParamCount:
    """Parameters by place, all exact integers."""

    embedding: int
    dense_layer: int
    moe_layer: int
    moe_layer_active: int
    head: int
    num_dense_layers: int
    num_moe_layers: int
    mtp_module: int = 0  # one multi-token-prediction module (shared embedding and head not included)
    num_mtp_layers: int = 0
    linear_mixer_delta: int = 0  # a Gated DeltaNet layer's mixer less an attention block (linear_mixer_delta_params)
    num_linear_layers: int = 0

    @property
    def layers(self) -> int:
        """All layers; dense_layer and moe_layer are attention layers, each GDN layer differs by its mixer."""
        return (self.num_dense_layers * self.dense_layer + self.num_moe_layers * self.moe_layer
                + self.num_linear_layers * self.linear_mixer_delta)

    @property
    def total(self) -> int:
        """The main model's parameters: without the multi-token-prediction modules, as DeepSeek-V3's 671B is
        counted (its report, Sec. 2.2 and the HF model card: 671B main model + 14B MTP module = 685B)."""
        return self.embedding + self.layers + self.head

    @property
    def mtp(self) -> int:
        """Parameters the multi-token-prediction modules add in training (the embedding and head are shared)."""
        return self.num_mtp_layers * self.mtp_module

    @property
    def total_with_mtp(self) -> int:
        """What training holds: the main model plus its MTP modules."""
        return self.total + self.mtp

    @property
    def layers_active(self) -> int:
        """Layer parameters one token passes through (MoE: top-k routed plus shared experts; GDN layers their mixer)."""
        return (self.num_dense_layers * self.dense_layer + self.num_moe_layers * self.moe_layer_active
                + self.num_linear_layers * self.linear_mixer_delta)

    @property
    def active(self) -> int:
        """Parameters one token passes through: layers_active, the embedding and the head."""
        return self.embedding + self.layers_active + self.head


def count_params(model: ModelSpec) -> ParamCount:
    has_moe = model.moe is not None
    return ParamCount(
        embedding=embedding_params(model),
        dense_layer=layer_params(model, moe_layer=False),
        moe_layer=layer_params(model, moe_layer=True) if has_moe else 0,
        moe_layer_active=layer_params(model, moe_layer=True, active=True) if has_moe else 0,
        head=head_params(model),
        num_dense_layers=model.num_dense_layers,
        num_moe_layers=model.num_moe_layers,
        mtp_module=mtp_module_params(model) if model.mtp_layers else 0,
        num_mtp_layers=model.mtp_layers,
        linear_mixer_delta=linear_mixer_delta_params(model),
        num_linear_layers=model.num_linear_layers,
    )


def kv_cache_elements_per_token_per_layer(model: ModelSpec) -> int:
    """Elements cached per token per layer: 2 x kv_heads x head_dim, or MLA's latent + rotary key."""
    if model.mla is not None:
        # DeepSeek-V2 Sec. 2.1.3: the cache holds the compressed latent c_KV and the shared rotary key k_R.
        return model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
    return 2 * model.kv_heads * model.head_size


INDEXER_CACHE_SCALE_BYTES = 4
"""What a sparse-attention layer's indexer key cache adds to its d_I fp8 values per token: one fp32 scale
(DeepSeek-V3.2-Exp inference/model.py; DeepGEMM's paged layout, block_size x (head_dim + 4) bytes): 132 bytes at
d_I 128, whatever the KV cache's own dtype."""


def indexer_cache_bytes_per_token_per_layer(model: ModelSpec) -> float:
    """Bytes of DeepSeek Sparse Attention's indexer key cache per token and layer (0 without it)."""
    if model.sparse_attention is None:
        return 0.0
    return float(model.sparse_attention.index_head_dim + INDEXER_CACHE_SCALE_BYTES)


def kv_cache_bytes_per_token(model: ModelSpec, dtype: str = "bf16") -> float:
    """KV-cache bytes per token for the whole model: 2 . L . kv_heads . head_dim . bytes (or MLA latent), plus a
    sparse-attention model's indexer keys."""
    per_layer = kv_cache_elements_per_token_per_layer(model) * bytes_per_element(dtype)
    # Gated DeltaNet layers keep no per-token cache (their fixed state per sequence: linear_state_bytes_per_sequence)
    return model.num_attention_layers * (per_layer + indexer_cache_bytes_per_token_per_layer(model))


def linear_state_bytes_per_sequence(model: ModelSpec) -> float:
    """What a sequence keeps in serving for the Gated DeltaNet layers, whatever its length: per layer the
    recurrent state, num_value_heads x key_head_dim x value_head_dim, and the convolution's last kernel - 1 inputs
    of q, k and v, both in the state dtype (vLLM's mamba_utils.py @ 2afe1e85: conv state (kernel - 1, conv_dim),
    recurrent state (n_v, d_k, d_v); qwen3_5.py @ 36c110bd keeps both fp32, as the checkpoints' mamba_ssm_dtype
    says; Qwen3-Next's default is the model's 16-bit dtype). 0 without linear attention."""
    la = model.linear_attention
    if la is None:
        return 0.0
    state = la.num_value_heads * la.key_head_dim * la.value_head_dim
    conv = mixer_widths(la).conv * (la.conv_kernel - 1)
    return float(model.num_linear_layers * (state + conv) * la.state_bytes_per_element)
