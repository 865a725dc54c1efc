"""The model spec: architecture only (no layout, no hardware).

A decoder-only transformer, optionally with mixture-of-experts feed-forward
layers and multi-head latent attention (DeepSeek-V2/V3). Every size is a count
of elements; bytes appear only where a dtype is named.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, model_validator

from planner.specs.bounds import Experts, ExpertsOrNone, Heads, Layers, LayersOrNone, SeqLen, Vocab, Width, strict_float

MlpKind = Literal["gated", "standard"]
PositionEmbedding = Literal["rotary", "alibi", "learned", "none"]
NormKind = Literal["rmsnorm", "layernorm", "layernorm_no_bias"]
QkNormShape = Literal["head_dim", "all_heads"]

_STRICT = ConfigDict(extra="forbid", frozen=True)


class MoESpec(BaseModel):
    """Mixture-of-experts feed-forward layers (Mixtral, DeepSeek-V3, Qwen-MoE)."""

    model_config = _STRICT

    num_experts: Experts = Field(description="Routed experts per MoE layer.")
    experts_per_token: Experts = Field(description="Routed experts each token is sent to (top-k).")
    moe_ffn_hidden_size: Width = Field(description="Intermediate size of one routed expert.")
    num_shared_experts: ExpertsOrNone = Field(
        default=0, description="Always-active shared experts per MoE layer (DeepSeek), each of moe_ffn_hidden_size."
    )
    num_dense_layers: LayersOrNone = Field(
        default=0, description="Leading layers with a dense FFN (ffn_hidden_size) before the first MoE layer."
    )
    router_bias: StrictBool = Field(
        default=False, description="Router carries a per-expert bias term (DeepSeek-V3 e_score_correction_bias)."
    )
    shared_expert_ffn_hidden_size: Width | None = Field(
        default=None,
        description="Intermediate size of each shared expert when it differs from moe_ffn_hidden_size (Qwen2-MoE's "
        "shared_expert_intermediate_size); null means moe_ffn_hidden_size.",
    )
    shared_expert_gate: StrictBool = Field(
        default=False,
        description="A learned sigmoid gate (h -> 1) scales the shared experts' output (Qwen2-MoE): h weights per MoE layer.",
    )
    router_groups: ExpertsOrNone = Field(
        default=0,
        description="Group-limited routing (DeepSeek-V3 'node-limited routing', HF n_group, Megatron "
        "--moe-router-num-groups): the experts form this many groups; 0 = no groups.",
    )
    router_group_topk: ExpertsOrNone = Field(
        default=0,
        description="Groups a token may use under group-limited routing (HF topk_group, Megatron --moe-router-group-topk).",
    )

    @model_validator(mode="after")
    def _topk_within_experts(self) -> MoESpec:
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) exceeds num_experts ({self.num_experts}); lower experts_per_token"
            )
        if self.router_groups and (self.num_experts % self.router_groups or self.router_group_topk > self.router_groups):
            raise ValueError(
                f"router_groups ({self.router_groups}) must divide num_experts ({self.num_experts}) and be at least "
                f"router_group_topk ({self.router_group_topk})"
            )
        return self

    @property
    def shared_ffn_width(self) -> int:
        """Intermediate width of all shared experts together (0 without shared experts)."""
        width = self.shared_expert_ffn_hidden_size or self.moe_ffn_hidden_size
        return self.num_shared_experts * width


class MLASpec(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank compressed K/V with a shared rotary key."""

    model_config = _STRICT

    q_lora_rank: Width | None = Field(
        default=None, description="Rank of the query compression; null means queries are projected directly."
    )
    kv_lora_rank: Width = Field(description="Rank of the joint K/V latent (what the KV cache stores).")
    qk_nope_head_dim: Width = Field(description="Per-head query/key dimension without rotary embedding.")
    qk_rope_head_dim: Width = Field(description="Per-head query/key dimension carrying rotary embedding (shared key).")
    v_head_dim: Width = Field(description="Per-head value dimension.")


class SparseAttentionSpec(BaseModel):
    """DeepSeek Sparse Attention (DeepSeek-V3.2-Exp report Sec. 1, eq. 1-2; GLM-5): on every layer a lightning
    indexer scores each preceding token with index_heads small heads (ReLU, weighted by the query token, FP8),
    and MLA attends only the topk best keys of each query, in MLA's MQA form (the latent shared by all heads)."""

    model_config = _STRICT

    index_heads: Heads = Field(description="Indexer heads H_I (HF index_n_heads; DeepSeek-V3.2: 64, GLM-5: 32).")
    index_head_dim: Width = Field(description="Indexer query/key dimension d_I (HF index_head_dim; 128).")
    topk: SeqLen = Field(description="Keys each query attends (HF index_topk; 2,048).")


class LinearAttentionSpec(BaseModel):
    """Gated DeltaNet layers between the softmax-attention layers (Qwen3-Next, Qwen3.5: Yang, Kautz & Hatamizadeh,
    "Gated Delta Networks", ICLR 2025): each such layer replaces the attention block by a GDN mixer (an input
    projection to q, k, v, the output gate z and the per-head decay and write strength, a causal depthwise
    convolution over q, k, v, the gated delta rule's recurrence over a num_value_heads x key_head_dim x
    value_head_dim state, a gated RMSNorm and the output projection); the feed-forward block is the model's."""

    model_config = _STRICT
    num_key_heads: Heads = Field(description="Query/key heads of the GDN mixer (HF linear_num_key_heads).")
    num_value_heads: Heads = Field(description="Value heads (HF linear_num_value_heads); a multiple of the key heads.")
    key_head_dim: Width = Field(description="Query/key head width (HF linear_key_head_dim).")
    value_head_dim: Width = Field(description="Value head width (HF linear_value_head_dim).")
    conv_kernel: Width = Field(description="Taps of the causal depthwise convolution (HF linear_conv_kernel_dim).")
    full_attention_interval: Layers = Field(
        description="Every this-many-th layer (indices k-1, 2k-1, ...) keeps softmax attention; the others are GDN "
        "layers (HF full_attention_interval; Qwen3-Next and Qwen3.5: 4).")
    state_bytes_per_element: Literal[2, 4] = Field(
        default=4, description="Bytes of one element of the recurrent state kept per sequence in serving (HF "
        "mamba_ssm_dtype float32: 4).")

    @model_validator(mode="after")
    def _check_heads(self) -> LinearAttentionSpec:
        if self.num_value_heads % self.num_key_heads:
            raise ValueError(f"linear_attention.num_value_heads ({self.num_value_heads}) is not a multiple of "
                             f"num_key_heads ({self.num_key_heads}); the value heads share the key heads in groups")
        if self.full_attention_interval < 2:
            raise ValueError("linear_attention.full_attention_interval must be at least 2 (1 would leave no GDN "
                             "layer: remove linear_attention)")
        return self


class ModelSpec(BaseModel):
    """A decoder-only transformer's architecture."""

    model_config = _STRICT

    name: str = Field(description="Human-readable model name.")
    source: str | None = Field(default=None, description="Where the figures come from (paper, HF config, ...).")
    num_layers: Layers = Field(description="Transformer layers (L).")
    hidden_size: Width = Field(description="Model width (h).")
    num_attention_heads: Heads = Field(description="Query heads (a).")
    num_kv_heads: Heads | None = Field(
        default=None, description="Key/value heads (GQA/MQA); defaults to num_attention_heads (MHA)."
    )
    head_dim: Width | None = Field(default=None, description="Per-head dimension; defaults to hidden_size / heads.")
    ffn_hidden_size: Width = Field(description="Intermediate size of the dense feed-forward block.")
    mlp_kind: MlpKind = Field(
        default="gated", description="'gated' (SwiGLU/GeGLU, three matrices) or 'standard' (GeLU, two matrices)."
    )
    vocab_size: Vocab = Field(description="Vocabulary size (padded, as the embedding table is allocated).")
    tied_embeddings: StrictBool = Field(default=False, description="Output projection shares the input embedding matrix.")
    position_embedding: PositionEmbedding = Field(
        default="rotary", description="'learned' adds max_seq_len x hidden parameters; rotary/alibi/none add none."
    )
    norm_kind: NormKind = Field(
        default="rmsnorm",
        description="RMSNorm (weight only), LayerNorm (weight and bias), or LayerNorm without bias (Cohere).",
    )
    norms_per_layer: Layers = Field(
        default=2, description="Norm layers per transformer layer (2 pre-norm; Gemma 2 uses 4: pre and post)."
    )
    embedding_norm: StrictBool = Field(default=False, description="A norm right after the embedding (BLOOM).")
    qk_norm: StrictBool = Field(default=False, description="A norm on the queries and on the keys before attention (Qwen3).")
    qk_norm_shape: QkNormShape = Field(
        default="head_dim",
        description="Weights of the q/k norms: 'head_dim', one head_dim vector shared by all heads (Qwen3, Gemma 3: "
        "2 d per layer); 'all_heads', a weight for every channel of every head (OLMo 2 normalises the whole "
        "projection, Cohere and StableLM 2 each head with its own weights: (a + kv) d per layer).",
    )
    attention_sinks: StrictBool = Field(
        default=False, description="A learned sink logit per query head in the softmax (gpt-oss): a weights per layer."
    )
    lm_head_bias: StrictBool = Field(default=False, description="Bias on the output projection (GPT-J): V weights.")
    parallel_attention_mlp: StrictBool = Field(
        default=False,
        description="Attention and MLP read the same layer input and both outputs join the residual together "
        "(GPT-J, Cohere, GPT-NeoX/StableLM use_parallel_residual). Same weights; the norm inputs are stored once.",
    )
    rotary_fraction: Annotated[float, BeforeValidator(strict_float)] = Field(
        default=1.0, gt=0, le=1,
        description="Share of each head's channels that rotary embedding rotates (GPT-J rotary_dim/head_dim, "
        "StableLM/Phi partial_rotary_factor, GPT-NeoX rotary_pct). No weights.",
    )
    rotary_attention_factor: Annotated[float, BeforeValidator(strict_float)] = Field(
        default=1.0, gt=0, le=100,
        description="YaRN's attention factor: the rotary's cos and sin are multiplied by it, which scales the "
        "attention logits by its square (Peng et al. 2023, YaRN, Sec. 3.4: sqrt(1/t) = 0.1 ln(s) + 1 for a context "
        "scale s; gpt-oss 1.35, OLMo 3.1 1.21; 1 for plain RoPE and for DeepSeek's mscale = mscale_all_dim). No "
        "weights; Megatron-Core runs such a rotary unfused (EngineKernels.scaled_rotary_unfused).",
    )
    qkv_bias: StrictBool = Field(default=False, description="Bias on the query/key/value projections.")
    attention_output_bias: StrictBool = Field(default=False, description="Bias on the attention output projection.")
    mlp_bias: StrictBool = Field(default=False, description="Bias on the feed-forward projections.")
    activation_clamp: Annotated[float, BeforeValidator(strict_float)] | None = Field(
        default=None, gt=0, le=1e6,
        description="The gated activation's two inputs clamped to this bound before the activation (gpt-oss: "
        "HF swiglu_limit 7.0; the gate at most c, the linear half within +-c); null: no clamp. No weights.",
    )
    max_seq_len: SeqLen = Field(description="Longest context the model supports (tokens).")
    dropout: StrictBool = Field(
        default=False,
        description="Trained with hidden and attention dropout (GPT-3, BLOOM); adds 1-byte masks to activations "
        "(Korthikanti et al. 2022, Sec. 4.1). Modern recipes (Llama, Mistral, Qwen) use none.",
    )
    sliding_window_tokens: SeqLen | None = Field(
        default=None, description="Attention window of the sliding-window layers; null when every layer attends globally."
    )
    sliding_window_layers: LayersOrNone = Field(
        default=0, description="How many layers use the sliding window (Gemma 2: half; Mistral v0.1: all)."
    )
    moe: MoESpec | None = Field(default=None, description="Mixture-of-experts settings; null for a dense model.")
    mla: MLASpec | None = Field(default=None, description="Multi-head latent attention settings; null for standard attention.")
    sparse_attention: SparseAttentionSpec | None = Field(
        default=None, description="DeepSeek Sparse Attention over MLA (DeepSeek-V3.2, GLM-5); null for dense attention."
    )
    linear_attention: LinearAttentionSpec | None = Field(
        default=None, description="Gated DeltaNet layers between the attention layers (Qwen3-Next, Qwen3.5); null: "
        "every layer is softmax attention.")
    attention_output_gate: StrictBool = Field(
        default=False, description="A sigmoid gate on the attention output, computed by the query projection "
        "(Qwen3-Next's gated attention, HF attn_output_gate): heads x head_dim x h more weights per attention layer.")
    mtp_layers: LayersOrNone = Field(
        default=0,
        description="Multi-token-prediction modules (DeepSeek-V3 Sec. 2.2; HF num_nextn_predict_layers): each a "
        "transformer layer like the model's last, a 2h -> h projection and two norms, sharing the embedding and head.",
    )

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelSpec:
        kv = self.kv_heads
        if self.num_attention_heads % kv != 0:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) is not divisible by num_kv_heads ({kv}); "
                "set num_kv_heads to a divisor of the head count"
            )
        if self.head_dim is None and self.mla is None and self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads ({self.num_attention_heads}); "
                "give head_dim explicitly"
            )
        if self.moe is not None and self.moe.num_dense_layers > self.num_layers:
            raise ValueError(
                f"moe.num_dense_layers ({self.moe.num_dense_layers}) exceeds num_layers ({self.num_layers})"
            )
        if self.sliding_window_layers > self.num_layers:
            raise ValueError(f"sliding_window_layers ({self.sliding_window_layers}) exceeds num_layers ({self.num_layers})")
        if self.sliding_window_layers and self.sliding_window_tokens is None:
            raise ValueError("sliding_window_layers is set but sliding_window_tokens is not; give the window size")
        if self.sparse_attention is not None and (self.mla is None or self.mla.q_lora_rank is None):
            raise ValueError("sparse_attention needs mla with a q_lora_rank: the indexer's queries come from MLA's "
                             "query latent")
        if self.sparse_attention is not None and self.sliding_window_layers:
            raise ValueError("sparse_attention and sliding-window layers together are not modelled; give one")
        if self.linear_attention is not None:
            if self.linear_attention.full_attention_interval > self.num_layers:
                raise ValueError(f"linear_attention.full_attention_interval ({self.linear_attention.full_attention_interval}) "
                                 f"exceeds num_layers ({self.num_layers}): no layer would keep attention")
            if self.mla is not None or self.sparse_attention is not None:
                raise ValueError("linear_attention with MLA or sparse attention is not modelled; give one")
            if self.sliding_window_layers > self.num_attention_layers:
                raise ValueError(f"sliding_window_layers ({self.sliding_window_layers}) exceeds the "
                                 f"{self.num_attention_layers} softmax-attention layers")
        if self.rotary_attention_factor != 1.0 and self.position_embedding != "rotary":
            raise ValueError(f"rotary_attention_factor ({self.rotary_attention_factor}) scales a rotary embedding; "
                             f"set position_embedding 'rotary' or remove rotary_attention_factor")
        if self.activation_clamp is not None and self.mlp_kind != "gated":
            raise ValueError("activation_clamp bounds a gated activation's two inputs; set mlp_kind 'gated' or "
                             "remove activation_clamp")
        return self

    # Derived shapes -------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads if self.num_kv_heads is not None else self.num_attention_heads

    @property
    def head_size(self) -> int:
        if self.head_dim is not None:
            return self.head_dim
        return self.hidden_size // self.num_attention_heads

    @property
    def num_linear_layers(self) -> int:
        """Gated DeltaNet layers: all but every full_attention_interval-th (0 without linear attention)."""
        la = self.linear_attention
        return 0 if la is None else self.num_layers - self.num_layers // la.full_attention_interval

    @property
    def num_attention_layers(self) -> int:
        """Layers with softmax attention (and a KV cache)."""
        return self.num_layers - self.num_linear_layers

    @property
    def num_moe_layers(self) -> int:
        return 0 if self.moe is None else self.num_layers - self.moe.num_dense_layers

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers
