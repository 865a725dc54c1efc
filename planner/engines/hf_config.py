"""HuggingFace `config.json` -> `ModelSpec`.

Each supported `model_type` has a reader that maps the keys which decide tensor shapes and
lists the keys it ignores on purpose (with the reason). Any other key is an error that names it:
a key we do not know might change the architecture, and a silent guess would give wrong memory
figures. Defaults for optional keys are those of the matching `transformers` config class.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Literal, overload

from pydantic import ValidationError

from planner.errors import PlannerError, short_repr
from planner.physics.rotary import yarn_concentration_factor
from planner.specs.model import ModelSpec
from planner.specs.validation import describe_validation_error

# Keys every PretrainedConfig may carry (saved by `save_pretrained` / `to_dict`); none changes a
# weight shape: token ids, generation defaults, labels, dtype of the checkpoint (the layout picks
# the training/serving dtype), numerical epsilons, the classification head's dropout, attention kernels.
COMMON_IGNORED_KEYS: frozenset[str] = frozenset({
    "model_type", "architectures", "auto_map", "_name_or_path", "name_or_path", "transformers_version",
    "_commit_hash", "torch_dtype", "dtype", "use_bfloat16", "quantization_config", "use_cache",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "initializer_range", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
    "classifier_dropout",
    "output_attentions", "output_hidden_states", "return_dict", "torchscript", "tf_legacy_loss",
    "chunk_size_feed_forward", "is_decoder", "cross_attention_hidden_size", "tie_encoder_decoder",
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens", "finetuning_task", "id2label", "label2id",
    "num_labels", "tokenizer_class", "prefix", "task_specific_params", "problem_type",
    "_attn_implementation", "attn_implementation", "_attn_implementation_autoset",
})

# Generic keys allowed only at the value that leaves the decoder-only architecture unchanged.
COMMON_REQUIRED_VALUES: dict[str, Any] = {
    "is_encoder_decoder": False,
    "add_cross_attention": False,
    "pruned_heads": {},
}

# Training-time dropout rates; any rate above zero sets ModelSpec.dropout (masks kept for backward).
DROPOUT_KEYS: tuple[str, ...] = ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop",
                                  "residual_dropout", "embedding_dropout")

# Position-encoding details: rotary bases, scaling recipes, partial rotary. None adds a weight.
ROPE_KEYS: frozenset[str] = frozenset({
    "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor", "rotary_pct",
    "rotary_emb_base", "rope_interleave",
})
_ROPE = "rotary-embedding settings add no parameters"
_ACT = "the activation function does not change any weight shape"


class _Reader:
    """Reads one config dict, remembering which keys were consumed, and builds ModelSpec kwargs."""

    def __init__(self, data: dict[str, Any], source: str, model_type: str, prefix: str = "") -> None:
        self.data = data
        self.source = source
        self.model_type = model_type
        self.prefix = prefix  # "text_config." when reading the language model of a multimodal config
        self.notes: list[str] = []
        self.used: set[str] = set()
        self.spec: dict[str, Any] = {}
        self.origin: dict[str, str] = {}  # ModelSpec field -> HF key it came from

    def error(self, key: str | None, message: str) -> PlannerError:
        return PlannerError(message, source=self.source, field=None if key is None else self.prefix + key)

    def raw(self, key: str) -> Any:
        self.used.add(key)
        return self.data.get(key)

    @overload
    def int_(self, key: str, default: int, *, required: bool = ...) -> int: ...
    @overload
    def int_(self, key: str, default: None = None, *, required: Literal[True] = True) -> int: ...
    @overload
    def int_(self, key: str, default: None = None, *, required: bool) -> int | None: ...

    def int_(self, key: str, default: int | None = None, *, required: bool = True) -> int | None:
        """A positive integer; missing or null means `default` (an error when required and no default)."""
        value = self.raw(key)
        if value is None:
            if default is None and required:
                raise self.error(key, f"missing; model_type '{self.model_type}' needs it to size the model")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected a positive integer, got {value!r}")
        if value <= 0:
            raise self.error(key, f"must be positive, got {value}")
        return value

    def positive_float(self, key: str, default: float) -> float:
        """A positive number; missing or null means `default`."""
        value = self.raw(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise self.error(key, f"expected a positive number, got {value!r}")
        return float(value)

    def bool_(self, key: str, default: bool) -> bool:
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def require(self, key: str, allowed: Any, why: str) -> None:
        """Accept `key` only when absent, null or equal to `allowed`."""
        value = self.raw(key)
        if value is not None and value != allowed:
            raise self.error(key, f"{json.dumps(value)} cannot be imported ({why}); only {json.dumps(allowed)} "
                             "is supported")

    def put(self, field: str, value: Any, key: str | None = None) -> None:
        self.spec[field] = value
        if key is not None:
            self.origin[field] = key


# Shared pieces ------------------------------------------------------------------------------------
def _core(r: _Reader, *, layers: str = "num_hidden_layers", hidden: str = "hidden_size",
          heads: str = "num_attention_heads", vocab: str = "vocab_size") -> None:
    r.put("num_layers", r.int_(layers), layers)
    r.put("hidden_size", r.int_(hidden), hidden)
    r.put("num_attention_heads", r.int_(heads), heads)
    r.put("vocab_size", r.int_(vocab), vocab)


def _kv_heads(r: _Reader, default: int | None = None) -> None:
    """num_key_value_heads; absent, the config class's default (`default`), else the query heads (MHA)."""
    heads = r.spec["num_attention_heads"]
    kv = r.int_("num_key_value_heads", default or heads)
    if heads % kv:
        raise r.error("num_key_value_heads", f"num_attention_heads ({heads}) is not divisible by num_key_value_heads "
                      f"({kv}); use a divisor of the head count")
    r.put("num_kv_heads", kv, "num_key_value_heads")


def _head_dim(r: _Reader, default: int | None = None) -> None:
    value = r.int_("head_dim", default, required=False)
    if value is not None:
        r.put("head_dim", value, "head_dim")


def _rotary_decoder(r: _Reader, *, tied_default: bool, kv_default: int | None = None,
                    ffn_default: int | None = None) -> None:
    """Llama-shaped decoder: RoPE, RMSNorm, gated MLP of intermediate_size (`kv_default`: the config class's
    num_key_value_heads when the file leaves it out; None: the query heads; `ffn_default`: the dense width when
    the file has no intermediate_size, for models without dense layers)."""
    _core(r)
    _kv_heads(r, kv_default)
    _llama_block(r, tied_default=tied_default, ffn_default=ffn_default)


def _llama_block(r: _Reader, *, tied_default: bool, ffn_default: int | None = None) -> None:
    """What Llama-shaped configs share beyond the core sizes: gated MLP, RoPE, RMSNorm, context, tying."""
    r.put("ffn_hidden_size", r.int_("intermediate_size", ffn_default), "intermediate_size")
    r.put("max_seq_len", r.int_("max_position_embeddings"), "max_position_embeddings")
    r.put("tied_embeddings", r.bool_("tie_word_embeddings", tied_default), "tie_word_embeddings")
    r.put("mlp_kind", "gated")
    r.put("position_embedding", "rotary")
    r.put("norm_kind", "rmsnorm")
    _partial_rotary(r)


def _attention_bias(r: _Reader, default: bool = False) -> None:
    """`attention_bias` (Llama, Qwen3): a bias on q, k, v and the output projection."""
    bias = r.bool_("attention_bias", default)
    r.put("qkv_bias", bias, "attention_bias")
    r.put("attention_output_bias", bias, "attention_bias")


def _window_all_layers(r: _Reader, key: str = "sliding_window") -> None:
    """Mistral/Phi-3: a window, when set, applies to every layer."""
    window = r.int_(key, required=False)
    if window is not None:
        r.put("sliding_window_tokens", window, key)
        r.put("sliding_window_layers", r.spec["num_layers"], key)


def _count_layer_types(r: _Reader) -> int | None:
    """Newer configs list each layer's attention: count the sliding ones."""
    types = r.raw("layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != r.spec["num_layers"]:
        raise r.error("layer_types", f"expected a list of {r.spec['num_layers']} attention types")
    unknown = sorted({t for t in types if t not in ("full_attention", "sliding_attention")})
    if unknown:
        raise r.error("layer_types", f"unsupported attention type {unknown[0]!r}; planner knows "
                      "'full_attention' and 'sliding_attention'")
    return sum(1 for t in types if t == "sliding_attention")


def _qwen_window(r: _Reader) -> None:
    """Qwen2/Qwen3: with use_sliding_window, layers from index max_window_layers on use the window."""
    use = r.bool_("use_sliding_window", False)
    window = r.int_("sliding_window", required=False)
    first_sliding = _optional_count(r, "max_window_layers")
    counted = _count_layer_types(r)
    if not use:
        return
    if window is None:
        raise r.error("sliding_window", "use_sliding_window is true but no window is given; set sliding_window")
    if counted is None and first_sliding is None:
        raise r.error("max_window_layers", "use_sliding_window is true; give max_window_layers (or layer_types) "
                      "to say which layers use the window")
    layers = r.spec["num_layers"]
    sliding = counted if counted is not None else layers - min(first_sliding or 0, layers)
    if sliding:
        r.put("sliding_window_tokens", window, "sliding_window")
        r.put("sliding_window_layers", sliding, "max_window_layers")


def _optional_count(r: _Reader, key: str) -> int | None:
    """A non-negative integer, or None when absent or null."""
    value = r.raw(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise r.error(key, f"expected a non-negative integer, got {value!r}")
    return value


def _count(r: _Reader, key: str) -> int:
    """A required non-negative integer (a count that may be zero)."""
    value = _optional_count(r, key)
    if value is None:
        raise r.error(key, f"missing; model_type '{r.model_type}' needs it to size the model")
    return value


def _mtp_count(r: _Reader, key: str, note: str | None = None) -> None:
    """Multi-token-prediction layers counted by `key` (DeepSeek-V3's form: mtp_layers), with a note when given."""
    mtp = _optional_count(r, key)
    if mtp:
        r.put("mtp_layers", mtp, key)
        if note:
            r.notes.append(f"{key} {mtp}: {note}")


def _moe(r: _Reader, *, experts: str, ffn: str, shared: int = 0, dense_layers: int = 0,
         router_bias: bool = False) -> None:
    moe = {
        "num_experts": r.int_(experts),
        "experts_per_token": r.int_("num_experts_per_tok"),
        "moe_ffn_hidden_size": r.int_(ffn),
        "num_shared_experts": shared,
        "num_dense_layers": dense_layers,
        "router_bias": router_bias,
    }
    if moe["experts_per_token"] > moe["num_experts"]:
        raise r.error("num_experts_per_tok", f"{moe['experts_per_token']} exceeds the {moe['num_experts']} experts")
    r.put("moe", moe, experts)


# Readers per model_type ----------------------------------------------------------------------------
def _llama(r: _Reader) -> None:
    _rotary_decoder(r, tied_default=False)
    _head_dim(r)
    _attention_bias(r)
    r.put("mlp_bias", r.bool_("mlp_bias", False), "mlp_bias")


def _mistral(r: _Reader) -> None:
    _rotary_decoder(r, tied_default=False)
    _head_dim(r)
    _window_all_layers(r)


def _mixtral(r: _Reader) -> None:
    _mistral(r)
    _moe(r, experts="num_local_experts", ffn="intermediate_size")


def _qwen2(r: _Reader) -> None:
    _rotary_decoder(r, tied_default=False)
    r.put("qkv_bias", True)  # Qwen2 hard-codes a bias on q, k and v (not on the output projection)
    _qwen_window(r)


def _qwen3(r: _Reader, head_dim_default: int | None = 128) -> None:
    """Qwen3: bias from attention_bias, per-head q/k norms, head_dim by default 128 (Qwen3Config; Qwen3-VL-MoE's
    text config defaults to hidden / heads: None)."""
    _rotary_decoder(r, tied_default=False)
    _head_dim(r, default=head_dim_default)
    _attention_bias(r)
    r.put("qk_norm", True)
    _qwen_window(r)


def _qwen3_moe(r: _Reader) -> None:
    _qwen3(r)
    _moe(r, experts="num_experts", ffn="moe_intermediate_size", dense_layers=_leading_dense_layers(r))


def _gemma(r: _Reader) -> None:
    _rotary_decoder(r, tied_default=True)
    _head_dim(r, default=256)  # GemmaConfig default
    _attention_bias(r)


def _gemma2(r: _Reader) -> None:
    _gemma(r)
    r.put("norms_per_layer", 4)  # pre- and post-norm around both attention and MLP
    window = r.int_("sliding_window", required=False)
    counted = _count_layer_types(r)
    # Gemma 2 alternates: layers 0, 2, 4, ... use the window.
    sliding = counted if counted is not None else (r.spec["num_layers"] + 1) // 2
    if window is not None and sliding:
        r.put("sliding_window_tokens", window, "sliding_window")
        r.put("sliding_window_layers", sliding, "sliding_window")


def _phi3(r: _Reader) -> None:
    _rotary_decoder(r, tied_default=False)
    _window_all_layers(r)
    r.require("attention_bias", False, "Phi3 projections carry no bias")
    r.require("mlp_bias", False, "Phi3 projections carry no bias")
    r.require("lm_head_bias", False, "Phi3 output projection carries no bias")


def _gpt2_block(r: _Reader) -> None:
    """GPT-2's block, which GPTBigCode keeps: GeLU MLP of n_inner (4h), learned positions, LayerNorm, biases
    everywhere, tied head by default."""
    hidden = r.spec["hidden_size"]
    r.put("ffn_hidden_size", r.int_("n_inner", 4 * hidden, required=False), "n_inner")
    r.put("max_seq_len", r.int_("n_positions"), "n_positions")
    r.put("tied_embeddings", r.bool_("tie_word_embeddings", True), "tie_word_embeddings")
    r.put("mlp_kind", "standard")
    r.put("position_embedding", "learned")
    r.put("norm_kind", "layernorm")
    for field in ("qkv_bias", "attention_output_bias", "mlp_bias"):
        r.put(field, True)


def _gpt2(r: _Reader) -> None:
    _core(r, layers="n_layer", hidden="n_embd", heads="n_head")
    _gpt2_block(r)


def _gpt_neox(r: _Reader) -> None:
    _core(r)
    r.put("ffn_hidden_size", r.int_("intermediate_size"), "intermediate_size")
    r.put("max_seq_len", r.int_("max_position_embeddings"), "max_position_embeddings")
    r.put("tied_embeddings", r.bool_("tie_word_embeddings", False), "tie_word_embeddings")
    bias = r.bool_("attention_bias", True)
    r.put("qkv_bias", bias, "attention_bias")
    r.put("attention_output_bias", bias, "attention_bias")
    r.put("mlp_bias", True)
    r.put("mlp_kind", "standard")
    r.put("position_embedding", "rotary")
    r.put("norm_kind", "layernorm")
    _partial_rotary(r, "rotary_pct", default=0.25)  # GPTNeoXConfig default
    if r.bool_("use_parallel_residual", True):  # x + attn(ln1(x)) + mlp(ln2(x)): same weights, one residual add
        r.put("parallel_attention_mlp", True, "use_parallel_residual")


def _q_lora_rank(r: _Reader) -> int | None:
    """Required key; null means queries are projected directly (DeepSeek-V2-Lite)."""
    if "q_lora_rank" not in r.data:
        raise r.error("q_lora_rank", "missing; give the query compression rank, or null for none")
    return r.int_("q_lora_rank", required=False)


def _deepseek(r: _Reader, *, default_topk_method: str) -> None:
    """DeepSeek-V2/V3: multi-head latent attention, shared + routed experts after leading dense layers."""
    _core(r)  # no _kv_heads: MLA derives keys and values from the shared latent
    _llama_block(r, tied_default=False)
    r.require("attention_bias", False, "planner's MLA count has no projection biases")
    r.require("mlp_bias", False, "DeepSeek's feed-forward projections carry no bias")
    r.require("moe_layer_freq", 1, "MoE on every layer after the dense ones is the only interleave planner models")
    r.put("mla", {
        "q_lora_rank": _q_lora_rank(r),
        "kv_lora_rank": r.int_("kv_lora_rank"),
        "qk_nope_head_dim": r.int_("qk_nope_head_dim"),
        "qk_rope_head_dim": r.int_("qk_rope_head_dim"),
        "v_head_dim": r.int_("v_head_dim"),
    }, "kv_lora_rank")
    dense = _count(r, "first_k_dense_replace")
    shared = _count(r, "n_shared_experts")
    topk_method = r.raw("topk_method") or default_topk_method
    # noaux_tc routing adds a learned per-expert correction bias (e_score_correction_bias); V2's greedy and
    # group_limited_greedy routing has none.
    _moe(r, experts="n_routed_experts", ffn="moe_intermediate_size", shared=shared, dense_layers=dense,
         router_bias=topk_method == "noaux_tc")
    groups, group_topk = _optional_count(r, "n_group"), _optional_count(r, "topk_group")
    if groups and group_topk and topk_method in ("noaux_tc", "group_limited_greedy") and groups > 1:
        r.put("moe", {**r.spec["moe"], "router_groups": groups, "router_group_topk": group_topk}, "n_group")
    mtp = _optional_count(r, "num_nextn_predict_layers")
    if mtp:  # trained with the model (its memory and time in training); serving ignores it
        r.put("mtp_layers", mtp, "num_nextn_predict_layers")
        r.notes.append(f"num_nextn_predict_layers {mtp}: multi-token-prediction modules trained with the model "
                       "(mtp_layers); not part of the served model (HF's DeepseekV3ForCausalLM does not build them)")


def _deepseek_v3(r: _Reader) -> None:
    _deepseek(r, default_topk_method="noaux_tc")


def _sparse_attention(r: _Reader, *, default_heads: int) -> None:
    """DeepSeek Sparse Attention's indexer (DeepseekV32Config / GlmMoeDsaConfig): index_n_heads heads of
    index_head_dim, index_topk keys per query; every layer runs its own indexer (GLM-5.2's `indexer_types` with
    shared layers, which reuse an earlier layer's top-k, are refused)."""
    r.put("sparse_attention", {"index_heads": r.int_("index_n_heads", default_heads),
                               "index_head_dim": r.int_("index_head_dim", 128),
                               "topk": r.int_("index_topk", 2048)}, "index_topk")
    for field, key in (("index_heads", "index_n_heads"), ("index_head_dim", "index_head_dim"), ("topk", "index_topk")):
        r.origin[f"sparse_attention.{field}"] = key  # a nested field's error names its own key
    types = r.raw("indexer_types")
    freq = r.raw("index_topk_freq")
    pattern = r.raw("index_topk_pattern")
    r.raw("index_skip_topk_offset")
    layers = r.spec["num_layers"]
    if types is not None and not (isinstance(types, list) and len(types) == layers
                                  and all(t in ("full", "shared") for t in types)):
        raise r.error("indexer_types", f"expected a list of {layers} entries, each 'full' or 'shared'")
    if freq is not None and (isinstance(freq, bool) or not isinstance(freq, int) or freq < 1):
        raise r.error("index_topk_freq", f"expected a positive integer, got {freq!r}")
    if (isinstance(types, list) and any(t != "full" for t in types)) or (freq not in (None, 1)) or pattern:
        key = "indexer_types" if types is not None else ("index_topk_freq" if freq not in (None, 1) else
                                                         "index_topk_pattern")
        raise r.error(key, "layers that reuse another layer's top-k (shared indexers, GLM-5.2) are not modelled; "
                      "planner models an indexer on every layer")


def _deepseek_v32(r: _Reader) -> None:
    """DeepSeek-V3.2 (transformers DeepseekV32Config / modeling_deepseek_v32): DeepSeek-V3 (MLA, shared and routed
    experts after first_k_dense_replace dense layers, the router's correction bias) with DeepSeek Sparse
    Attention's lightning indexer on every layer."""
    _deepseek(r, default_topk_method="noaux_tc")
    _sparse_attention(r, default_heads=64)
    _mlp_layer_types(r)


def _glm_moe_dsa(r: _Reader) -> None:
    """GLM-5 (transformers GlmMoeDsaConfig / modeling_glm_moe_dsa): DeepSeek-V3's layout (MLA with q_lora_rank,
    routed and one shared expert after first_k_dense_replace dense layers, sigmoid routing with a correction bias)
    and DeepSeek Sparse Attention (index_n_heads 32 by default)."""
    _deepseek(r, default_topk_method="noaux_tc")
    _sparse_attention(r, default_heads=32)
    _mlp_layer_types(r)


def _mlp_layer_types(r: _Reader) -> None:
    """`mlp_layer_types`, when written out, must be what first_k_dense_replace implies (dense first, then MoE)."""
    types = r.raw("mlp_layer_types")
    if types is None:
        return
    layers, dense = r.spec["num_layers"], r.spec["moe"]["num_dense_layers"]
    if types != ["dense"] * dense + ["sparse"] * (layers - dense):
        raise r.error("mlp_layer_types", f"expected {dense} 'dense' then {layers - dense} 'sparse' (first_k_dense_"
                      "replace); other placements of the dense layers are not modelled")


def _deepseek_v2(r: _Reader) -> None:
    _deepseek(r, default_topk_method="greedy")  # DeepseekV2Config default


def _fraction(r: _Reader, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise r.error(key, f"expected a fraction in (0, 1], got {value!r}")
    return float(value)


def _partial_rotary(r: _Reader, key: str = "partial_rotary_factor", default: float | None = None) -> None:
    """Share of each head's channels that rotary embedding rotates (top-level key, or inside rope_parameters)."""
    value = r.raw(key)
    params = r.data.get("rope_parameters")
    if value is None and isinstance(params, dict) and params.get("partial_rotary_factor") is not None:
        key, value = "rope_parameters.partial_rotary_factor", params["partial_rotary_factor"]
    if value is None:
        value = default
    if value is not None:
        r.put("rotary_fraction", _fraction(r, key, value), key)


def _leading_dense_layers(r: _Reader) -> int:
    """Qwen-MoE: `mlp_only_layers` must be a leading run 0..k-1; MoE on every other layer."""
    r.require("decoder_sparse_step", 1, "MoE on every layer is the only interleave planner models")
    dense = r.raw("mlp_only_layers")
    dense = [] if dense is None else dense
    if not isinstance(dense, list):
        raise r.error("mlp_only_layers", f"expected a list of layer indices, got {dense!r:.40}")
    if dense != list(range(len(dense))):
        raise r.error("mlp_only_layers", f"{dense} is not a leading run of layers 0..k-1, the only dense-layer "
                      "placement planner models")
    return len(dense)


def _qwen2_moe(r: _Reader) -> None:
    _rotary_decoder(r, tied_default=False)
    r.put("qkv_bias", r.bool_("qkv_bias", True), "qkv_bias")  # Qwen2MoeConfig default: bias on q, k, v
    _qwen_window(r)
    dense = _leading_dense_layers(r)
    _moe(r, experts="num_experts", ffn="moe_intermediate_size", shared=1, dense_layers=dense)
    # One shared expert of its own width, scaled by a sigmoid gate (shared_expert_gate: Linear(h, 1)).
    r.spec["moe"]["shared_expert_ffn_hidden_size"] = r.int_("shared_expert_intermediate_size")
    r.spec["moe"]["shared_expert_gate"] = True
    r.origin["moe.shared_expert_ffn_hidden_size"] = "shared_expert_intermediate_size"


def _gemma3_text(r: _Reader) -> None:
    _gemma(r)
    r.put("norms_per_layer", 4)  # pre- and post-norm around both attention and MLP, as Gemma 2
    r.put("qk_norm", True)  # q_norm and k_norm over head_dim, shared by the heads
    window = r.int_("sliding_window", 4096, required=False)  # Gemma3TextConfig default
    r.require("use_bidirectional_attention", False, "planner models causal decoders")
    counted = _count_layer_types(r)
    pattern = r.int_("sliding_window_pattern", 6, required=False)  # legacy key; every pattern-th layer is global
    layers = r.spec["num_layers"]
    sliding = counted if counted is not None else layers - layers // (pattern or 6)
    if window is not None and sliding:
        r.put("sliding_window_tokens", window, "sliding_window")
        r.put("sliding_window_layers", sliding, "layer_types" if counted is not None else "sliding_window_pattern")


def _gpt_oss(r: _Reader) -> None:
    _rotary_decoder(r, tied_default=False)
    _head_dim(r, default=64)  # GptOssConfig default
    _attention_bias(r, default=True)
    r.put("mlp_bias", True)  # experts carry gate_up_proj_bias (2 f) and down_proj_bias (h)
    r.put("attention_sinks", True)  # self_attn.sinks: one logit per query head
    # GptOssExperts clamps the gate to at most swiglu_limit and the linear half to +-swiglu_limit (default 7.0)
    r.put("activation_clamp", r.positive_float("swiglu_limit", 7.0), "swiglu_limit")
    window = r.int_("sliding_window", 128, required=False)
    counted = _count_layer_types(r)
    sliding = counted if counted is not None else (r.spec["num_layers"] + 1) // 2  # default: even layers slide
    if window is not None and sliding:
        r.put("sliding_window_tokens", window, "sliding_window")
        r.put("sliding_window_layers", sliding, "layer_types")
    per_token = r.raw("experts_per_token")
    _moe(r, experts="num_local_experts", ffn="intermediate_size", router_bias=True)
    if per_token is not None and per_token != r.spec["moe"]["experts_per_token"]:
        raise r.error("experts_per_token", f"{per_token} contradicts num_experts_per_tok "
                      f"({r.spec['moe']['experts_per_token']}); transformers reads num_experts_per_tok")


def _llama4_text(r: _Reader) -> None:
    """Llama 4's language model (transformers Llama4TextConfig / modeling_llama4, Meta 2025): MoE layers of
    num_local_experts experts of intermediate_size, top num_experts_per_tok, plus one shared expert of the same
    width, on the layers `moe_layers` names (default every interleave_moe_layer_step-th: range(step - 1, L, step));
    the other layers are dense MLPs of intermediate_size_mlp. Attention has no biases; its q/k norm is a
    weightless L2 norm (no parameters). The RoPE layers (no_rope_layers[i] == 1; default all but every
    no_rope_layer_interval-th) attend within chunks of attention_chunk_size tokens, the NoPE layers attend fully.
    planner has no chunked mask: those layers are read as a sliding window of the chunk size, exact up to one
    chunk of context and for their KV cache, an upper bound on their attention FLOPs beyond it (a chunk attends
    on average half of itself)."""
    _core(r)
    _kv_heads(r)
    # Llama4TextConfig: 128 when the key is absent; an explicit null is hidden_size // num_attention_heads there
    _head_dim(r, default=None if "head_dim" in r.data and r.data["head_dim"] is None else 128)
    r.put("ffn_hidden_size", r.int_("intermediate_size_mlp", 16384), "intermediate_size_mlp")
    r.put("max_seq_len", r.int_("max_position_embeddings", 131072), "max_position_embeddings")
    r.put("tied_embeddings", r.bool_("tie_word_embeddings", False), "tie_word_embeddings")
    r.put("mlp_kind", "gated")
    r.put("position_embedding", "rotary")
    r.put("norm_kind", "rmsnorm")
    # Llama4TextConfig writes attention_bias (always false: its __init__ sets it so) and the modeling has no bias
    r.require("attention_bias", False, "Llama 4's projections have no bias")
    r.put("qkv_bias", False)
    r.put("attention_output_bias", False)
    r.raw("use_qk_norm")  # L2 norm of q and k: no weights
    layers = r.spec["num_layers"]
    step = r.int_("interleave_moe_layer_step", 1)
    moe_layers = r.raw("moe_layers")
    if moe_layers is None:
        moe_layers = list(range(step - 1, layers, step))
    if not isinstance(moe_layers, list) or not all(isinstance(i, int) and 0 <= i < layers for i in moe_layers):
        raise r.error("moe_layers", f"expected a list of layer indices below {layers}, got {moe_layers!r}")
    if not moe_layers:
        raise r.error("moe_layers", "names no MoE layer; planner reads Llama 4 as a MoE model")
    dense = layers - len(set(moe_layers))
    if sorted(set(moe_layers)) != list(range(dense, layers)):
        r.notes.append(f"{len(set(moe_layers))} MoE layers between {dense} dense layers: planner places the dense "
                       "layers first (totals exact; per-stage figures approximate with pipeline parallelism)")
    r.put("moe", {
        "num_experts": r.int_("num_local_experts", 16),
        "experts_per_token": r.int_("num_experts_per_tok", 1),
        "moe_ffn_hidden_size": r.int_("intermediate_size", 8192),
        "num_shared_experts": 1,
        "num_dense_layers": dense,
        "router_bias": False,
    }, "num_local_experts")
    if r.spec["moe"]["experts_per_token"] > r.spec["moe"]["num_experts"]:
        raise r.error("num_experts_per_tok", "exceeds num_local_experts")
    interval = r.int_("no_rope_layer_interval", 4)
    no_rope = r.raw("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
    if not isinstance(no_rope, list) or len(no_rope) != layers or not all(v in (0, 1) for v in no_rope):
        raise r.error("no_rope_layers", f"expected {layers} entries of 0/1 (1: the layer uses RoPE), got {no_rope!r}")
    chunk = r.int_("attention_chunk_size", 8192, required=False)
    chunked = sum(no_rope)
    if chunk is not None and chunked:
        r.put("sliding_window_tokens", chunk, "attention_chunk_size")
        r.put("sliding_window_layers", chunked, "no_rope_layers")
        r.notes.append(f"{chunked} chunked-attention layers ({chunk}-token chunks) read as a {chunk}-token sliding "
                       "window (attention FLOPs beyond one chunk an upper bound)")


def _glm4_moe(r: _Reader) -> None:
    """GLM-4.5 / GLM-4.7 (transformers Glm4MoeConfig and modeling_glm4_moe): a GQA decoder with partial rotary
    embedding (partial_rotary_factor, default 0.5), a bias on q, k and v but not on the output projection when
    attention_bias is set, per-head q/k RMSNorm when use_qk_norm is; DeepSeek-V3's MoE after the leading
    first_k_dense_replace dense layers (n_routed_experts experts of moe_intermediate_size, n_shared_experts shared
    ones, a sigmoid router with a per-expert correction bias), and num_nextn_predict_layers MTP layers."""
    _core(r)
    _kv_heads(r)
    _llama_block(r, tied_default=False)
    if "rotary_fraction" not in r.spec:
        r.put("rotary_fraction", 0.5)  # Glm4MoeConfig's default (kwargs.setdefault("partial_rotary_factor", 0.5))
    # Glm4MoeAttention: getattr(config, "head_dim", hidden_size // num_attention_heads); absent is the spec's default
    _head_dim(r)
    r.put("qkv_bias", r.bool_("attention_bias", False), "attention_bias")  # o_proj: bias=False always
    if r.bool_("use_qk_norm", False):
        r.put("qk_norm", True, "use_qk_norm")
    dense = _count(r, "first_k_dense_replace") if r.raw("first_k_dense_replace") is not None else 1
    shared = _count(r, "n_shared_experts") if r.raw("n_shared_experts") is not None else 1
    _moe(r, experts="n_routed_experts", ffn="moe_intermediate_size", shared=shared, dense_layers=dense,
         router_bias=True)
    groups, group_topk = _optional_count(r, "n_group"), _optional_count(r, "topk_group")
    if groups and group_topk and groups > 1:
        r.put("moe", {**r.spec["moe"], "router_groups": groups, "router_group_topk": group_topk}, "n_group")
    _mtp_count(r, "num_nextn_predict_layers", "multi-token-prediction layers trained with the model (mtp_layers); "
               "serving ignores them")


def _minimax_m2(r: _Reader) -> None:
    """MiniMax-M2 (transformers MiniMaxM2Config / modular_minimax_m2.py; the hub's own modeling file): a GQA decoder
    of full-attention layers (MiniMax-01's lightning attention layers, attn_type_list 0, are not modelled), no
    biases, q/k RMSNorm over all heads of the flat projection (use_qk_norm, qk_norm_type per_layer), rotary
    embedding on rotary_dim of head_dim channels; every layer a Mixtral-style MoE of num_local_experts gated experts
    of intermediate_size with a sigmoid router and a per-expert correction bias, no shared expert
    (shared_intermediate_size 0); use_mtp with num_mtp_modules x mtp_transformer_layers MTP layers."""
    _core(r)
    _kv_heads(r)
    _llama_block(r, tied_default=False)
    _head_dim(r, default=128)  # MiniMaxM2Config's default
    types = r.raw("attn_type_list")
    if types is not None:
        if not isinstance(types, list) or len(types) != r.spec["num_layers"] or any(t not in (0, 1) for t in types):
            raise r.error("attn_type_list", f"expected a list of {r.spec['num_layers']} layer kinds (1 full attention, "
                          "0 lightning attention)")
        if 0 in types:
            raise r.error("attn_type_list", f"{types.count(0)} lightning (linear) attention layers: MiniMax-01's "
                          "hybrid attention is not modelled; planner models softmax attention layers")
    if r.raw("sliding_window") is not None:
        raise r.error("sliding_window", "a sliding window on MiniMax-M2's layers is not a released configuration; "
                      "give the model as a planner ModelSpec")
    rotary = r.int_("rotary_dim", required=False)
    head_dim = r.spec.get("head_dim", 128)
    if rotary is not None:
        if rotary > head_dim:
            raise r.error("rotary_dim", f"{rotary} exceeds head_dim {head_dim}")
        r.put("rotary_fraction", rotary / head_dim, "rotary_dim")
    if r.bool_("use_qk_norm", True):  # transformers' MiniMaxM2Attention always has the norms
        r.require("qk_norm_type", "per_layer", "q/k norms over all heads of the flat projection, as released")
        r.put("qk_norm", True, "use_qk_norm")
        r.put("qk_norm_shape", "all_heads", "qk_norm_type")
    if _optional_count(r, "shared_intermediate_size"):
        raise r.error("shared_intermediate_size", "a shared expert beside the routed ones is not in the released "
                      "MiniMax-M2 (0); give the model as a planner ModelSpec")
    r.require("scoring_func", "sigmoid", "the released router's sigmoid scores")
    _moe(r, experts="num_local_experts", ffn="intermediate_size", router_bias=r.bool_("use_routing_bias", True))
    if r.bool_("use_mtp", False):
        modules = _count(r, "num_mtp_modules")
        layers = _optional_count(r, "mtp_transformer_layers")
        mtp = modules * (1 if layers is None else layers)
        if mtp:
            r.put("mtp_layers", mtp, "num_mtp_modules")
            r.notes.append(f"use_mtp with num_mtp_modules {modules}: {mtp} multi-token-prediction layers trained with "
                           "the model, counted in DeepSeek-V3's form (mtp_layers; transformers loads none); serving "
                           "ignores them")


def _olmo2(r: _Reader) -> None:
    _rotary_decoder(r, tied_default=False)
    _attention_bias(r)
    # q_norm over all query heads (a d) and k_norm over all key heads (kv d); the two layer norms sit after
    # attention and after the MLP (post_attention_layernorm, post_feedforward_layernorm).
    r.put("qk_norm", True)
    r.put("qk_norm_shape", "all_heads")


def _local_global_windows(r: _Reader, default_sliding: int) -> None:
    """Sliding-window layers of OLMo 3 and EXAONE 4: `layer_types` when given, else `default_sliding` (what the
    config class would write into layer_types); a null `sliding_window` is no sliding layer, an absent one the
    classes' default of 4,096 tokens (Olmo3Config, Exaone4Config)."""
    if "sliding_window" in r.data and r.raw("sliding_window") is None:
        _count_layer_types(r)
        return
    window = r.int_("sliding_window", 4096, required=False)
    counted = _count_layer_types(r)
    sliding = counted if counted is not None else default_sliding
    if sliding:
        r.put("sliding_window_tokens", window, "sliding_window")
        r.put("sliding_window_layers", sliding, "layer_types" if counted is not None else "sliding_window")


def _every_nth_global(layers: int, period: int) -> int:
    """Sliding layers when every period-th layer is global (Olmo3Config / Exaone4Config.__post_init__: layer i slides
    unless (i + 1) % period == 0)."""
    return layers - layers // period


def _olmo3(r: _Reader) -> None:
    """OLMo 3 (transformers Olmo3Config / modeling_olmo3): OLMo 2's decoder (q/k norms over all heads, the two norms
    after attention and after the MLP) with sliding-window attention on three layers in four."""
    _olmo2(r)
    _local_global_windows(r, _every_nth_global(r.spec["num_layers"], 4))


def _exaone4(r: _Reader) -> None:
    """EXAONE 4.0 (transformers Exaone4Config / modeling_exaone4): a GQA decoder without biases, per-head q/k
    RMSNorm, the two norms after attention and after the MLP (no norm before them), sliding-window attention on
    the local layers of `layer_types`, else of `sliding_window_pattern`: an integer period (every period-th layer
    global; the class default 4) or the hub's string of L (local) and G (global) repeated over the layers."""
    _rotary_decoder(r, tied_default=False)
    _head_dim(r)
    r.put("qk_norm", True)  # q_norm and k_norm over head_dim, shared by the heads
    layers = r.spec["num_layers"]
    pattern = r.raw("sliding_window_pattern")
    if isinstance(pattern, str):
        if not pattern or set(pattern) - {"L", "G"}:
            raise r.error("sliding_window_pattern", f"{pattern!r}: expected a string of L (local) and G (global)")
        whole, rest = divmod(layers, len(pattern))  # the pattern repeated over the layers, counted without a loop
        default = whole * pattern.count("L") + pattern[:rest].count("L")
    else:
        default = _every_nth_global(layers, 4 if pattern is None else _count(r, "sliding_window_pattern") or layers + 1)
    _local_global_windows(r, default)


def _starcoder2(r: _Reader) -> None:
    _core(r)
    _kv_heads(r)
    r.put("ffn_hidden_size", r.int_("intermediate_size"), "intermediate_size")
    r.put("max_seq_len", r.int_("max_position_embeddings"), "max_position_embeddings")
    r.put("tied_embeddings", r.bool_("tie_word_embeddings", True), "tie_word_embeddings")
    bias = r.bool_("use_bias", True)
    for field in ("qkv_bias", "attention_output_bias", "mlp_bias"):
        r.put(field, bias, "use_bias")
    r.put("mlp_kind", "standard")  # c_fc, c_proj
    r.put("position_embedding", "rotary")
    r.put("norm_kind", "layernorm")
    r.require("mlp_type", "default", "the original code's only MLP is c_fc -> GeLU -> c_proj")
    r.require("norm_type", "layer_norm", "transformers' Starcoder2 uses LayerNorm")
    _window_all_layers(r)


def _cohere(r: _Reader) -> None:
    _rotary_decoder(r, tied_default=True)
    _attention_bias(r)
    r.put("norm_kind", "layernorm_no_bias")  # CohereLayerNorm: weight only
    r.put("norms_per_layer", 1)  # input_layernorm feeds both attention and MLP
    r.put("parallel_attention_mlp", True)
    if r.bool_("use_qk_norm", False):  # CohereLayerNorm((heads, head_dim)): a weight per head
        r.put("qk_norm", True, "use_qk_norm")
        r.put("qk_norm_shape", "all_heads", "use_qk_norm")


def _gpt_bigcode(r: _Reader) -> None:
    _core(r, layers="n_layer", hidden="n_embd", heads="n_head")
    if r.bool_("multi_query", True):  # one K/V head shared by all query heads (c_attn: h -> h + 2 d)
        r.put("num_kv_heads", 1, "multi_query")
    _gpt2_block(r)


def _gptj(r: _Reader) -> None:
    _core(r, layers="n_layer", hidden="n_embd", heads="n_head")
    hidden, heads = r.spec["hidden_size"], r.spec["num_attention_heads"]
    r.put("ffn_hidden_size", r.int_("n_inner", 4 * hidden, required=False), "n_inner")
    r.put("max_seq_len", r.int_("n_positions"), "n_positions")
    r.put("tied_embeddings", r.bool_("tie_word_embeddings", False), "tie_word_embeddings")
    r.put("mlp_kind", "standard")  # fc_in, fc_out with biases; q, k, v, out_proj without
    r.put("mlp_bias", True)
    r.put("position_embedding", "rotary")
    r.put("norm_kind", "layernorm")
    r.put("norms_per_layer", 1)  # ln_1 feeds attention and MLP
    r.put("parallel_attention_mlp", True)
    r.put("lm_head_bias", True)  # GPTJForCausalLM's lm_head is Linear(n_embd, vocab) with bias
    r.require("rotary", True, "GPT-J always rotates")
    rotary_dim = r.int_("rotary_dim", 64, required=False)  # GPTJConfig default; null rotates all channels
    head = hidden // heads
    if rotary_dim is not None:
        if rotary_dim > head:
            raise r.error("rotary_dim", f"{rotary_dim} exceeds the head size {head}")
        r.put("rotary_fraction", rotary_dim / head, "rotary_dim")


def _stablelm(r: _Reader) -> None:
    _rotary_decoder(r, tied_default=False)
    r.put("norm_kind", "layernorm")
    r.put("qkv_bias", r.bool_("use_qkv_bias", False), "use_qkv_bias")
    _partial_rotary(r, default=0.25)  # StableLmConfig default
    if r.bool_("use_parallel_residual", False):  # one input_layernorm feeds attention and MLP
        r.put("parallel_attention_mlp", True, "use_parallel_residual")
        r.put("norms_per_layer", 1, "use_parallel_residual")
    if r.bool_("qk_layernorm", False):  # a bias-free LayerNorm per head for queries and for keys
        r.put("qk_norm", True, "qk_layernorm")
        r.put("qk_norm_shape", "all_heads", "qk_layernorm")


def _olmoe(r: _Reader) -> None:
    """OLMoE (OlmoeConfig / modeling_olmoe.py): OLMo 2's attention with q and k norms over all heads (q_norm of h,
    k_norm of the key heads' width), and every layer a MoE of `num_experts` SwiGLU experts of `intermediate_size`,
    top `num_experts_per_tok`, a router without bias, no shared expert."""
    _rotary_decoder(r, tied_default=False)
    _attention_bias(r)
    r.put("qk_norm", True)
    r.put("qk_norm_shape", "all_heads")
    _moe(r, experts="num_experts", ffn="intermediate_size")


def _nemotron(r: _Reader) -> None:
    """Nemotron-4 and Minitron (NemotronConfig / modeling_nemotron.py): GQA attention with a partial rotary (default
    half the head), a two-matrix MLP with squared ReLU (up_proj, down_proj), LayerNorm1P (a LayerNorm with a bias;
    the +1 adds no weight), untied embeddings."""
    _rotary_decoder(r, tied_default=False)
    _head_dim(r)
    _attention_bias(r)
    act = r.raw("hidden_act")
    if act is not None and act not in ("relu2", "squared-relu", "relu", "gelu", "gelu_pytorch_tanh", "silu"):
        raise r.error("hidden_act", f"{act!r} is not an activation of NemotronMLP planner knows; it applies one "
                      "activation between up_proj and down_proj (relu2 in the released models)")
    r.put("mlp_kind", "standard")  # NemotronMLP: up_proj, activation, down_proj (no gate)
    r.put("mlp_bias", r.bool_("mlp_bias", False), "mlp_bias")
    r.put("norm_kind", "layernorm")  # NemotronLayerNorm1P: weight and bias
    _partial_rotary(r, default=0.5)  # NemotronConfig default


def _internlm2(r: _Reader) -> None:
    """InternLM2 (remote code): Llama-shaped; fused wqkv and wo carry a bias when `bias` is true."""
    _rotary_decoder(r, tied_default=False)
    if r.data.get("bias") is None:
        raise r.error("bias", "missing; InternLM2 checkpoints differ (give true or false for the wqkv/wo bias)")
    bias = r.bool_("bias", False)
    r.put("qkv_bias", bias, "bias")
    r.put("attention_output_bias", bias, "bias")


def _minicpm(r: _Reader) -> None:
    """MiniCPM (remote code): Llama's modules with muP scalars (scale_emb, dim_model_base, scale_depth); with
    `num_experts`, MiniCPM-MoE's Mixtral-style experts (router h x E, experts of intermediate_size)."""
    if r.data.get("tie_word_embeddings") is None:
        raise r.error("tie_word_embeddings", "missing; MiniCPM checkpoints differ (2B ties its output layer, "
                      "2B-128k does not): give true or false")
    _rotary_decoder(r, tied_default=False)
    _attention_bias(r)
    if r.data.get("num_experts") is not None:  # MiniCPM-MoE: every layer routes to experts of intermediate_size
        _moe(r, experts="num_experts", ffn="intermediate_size")


def _qwen2_vl_text(r: _Reader) -> None:
    """The language model of Qwen2-VL / Qwen2.5-VL: Qwen2's decoder (bias on q, k, v) with multimodal rotary."""
    _qwen2(r)


def _qwen3_vl_text(r: _Reader) -> None:
    """The language model of Qwen3-VL (transformers Qwen3VLTextConfig / modeling_qwen3_vl): Qwen3's decoder (per-head
    q/k RMSNorm, no biases unless attention_bias) with interleaved multimodal rotary embedding, which has no weights;
    the DeepStack visual features are added to the first layers' hidden states, also without weights."""
    _qwen3(r)


def _qwen3_vl_moe_text(r: _Reader) -> None:
    """The language model of Qwen3-VL-MoE (Qwen3VLMoeTextConfig / modeling_qwen3_vl_moe): Qwen3-MoE's decoder (routed
    experts of moe_intermediate_size, no shared expert, the layers of mlp_only_layers dense); head_dim defaults to
    hidden_size / heads here (Qwen3VLMoeTextConfig.__post_init__), not to Qwen3's 128."""
    _qwen3(r, head_dim_default=None)
    _moe(r, experts="num_experts", ffn="moe_intermediate_size", dense_layers=_leading_dense_layers(r))


def _phimoe(r: _Reader) -> None:
    """Phi-3.5-MoE and Phi-mini-MoE (transformers PhimoeConfig / modeling_phimoe): a GQA decoder with LayerNorm
    (weight and bias), attention_bias on q, k, v and the output, lm_head_bias, `sliding_window` on every layer
    when set; every layer a MoE of num_local_experts SwiGLU experts of intermediate_size, top num_experts_per_tok,
    a router without bias, no shared expert."""
    _rotary_decoder(r, tied_default=False, kv_default=8)  # PhimoeConfig: num_key_value_heads 8
    _head_dim(r)
    r.put("norm_kind", "layernorm")  # nn.LayerNorm(hidden_size, elementwise_affine=True): weight and bias
    _attention_bias(r)
    r.put("lm_head_bias", r.bool_("lm_head_bias", False), "lm_head_bias")
    _window_all_layers(r)
    _moe(r, experts="num_local_experts", ffn="intermediate_size")


def _mimo(r: _Reader) -> None:
    """Xiaomi MiMo (remote code, XiaomiMiMo/MiMo-7B modeling_mimo.py: MiMoConfig is Qwen2Config plus
    num_nextn_predict_layers): Qwen2's decoder (bias on q, k and v) and num_nextn_predict_layers MiMoMTPLayers,
    each the token and hidden norms, a 2h -> h input_proj without bias, one Qwen2 attention and MLP with their two
    norms, and a final norm: planner's MTP module (mtp_layers), trained with the model."""
    _qwen2(r)
    _head_dim(r)  # Qwen2Attention: getattr(config, "head_dim", hidden_size // num_attention_heads)
    if r.raw("attention_bias") not in (None, True):
        raise r.error("attention_bias", "MiMo's attention is Qwen2's, which always has a bias on q, k and v")
    _mtp_count(r, "num_nextn_predict_layers")


def _smollm3(r: _Reader) -> None:
    """SmolLM3 (transformers SmolLM3Config / modeling_smollm3): Llama's decoder, tied by default, attention_bias on
    q, k, v and the output, mlp_bias; rotary embedding left out on the layers `no_rope_layers` marks 0 (default
    every no_rope_layer_interval-th: a cost too small to count, and no weights either way); with use_sliding_window,
    `sliding_window` on the `sliding_attention` layers of layer_types (SmolLM3Config's default: the NoPE layers)."""
    _rotary_decoder(r, tied_default=True, kv_default=4)  # SmolLM3Config: num_key_value_heads 4
    _head_dim(r)
    _attention_bias(r)
    r.put("mlp_bias", r.bool_("mlp_bias", False), "mlp_bias")
    layers = r.spec["num_layers"]
    interval = r.int_("no_rope_layer_interval", 4)
    marks = r.raw("no_rope_layers")
    if marks is None:
        nope = layers // interval
    elif isinstance(marks, list) and len(marks) == layers and all(m in (0, 1) and not isinstance(m, float)
                                                                  for m in marks):
        nope = marks.count(0)
    else:
        raise r.error("no_rope_layers", f"expected a list of {layers} flags, 1 for a layer with rotary embedding "
                      "and 0 for one without")
    use = r.bool_("use_sliding_window", False)
    window = r.int_("sliding_window", required=False)
    counted = _count_layer_types(r)
    sliding = counted if counted is not None else (nope if use and window is not None else 0)
    if use and window is not None and sliding:  # modeling_smollm3: the window needs use_sliding_window too
        r.put("sliding_window_tokens", window, "sliding_window")
        r.put("sliding_window_layers", sliding, "layer_types" if counted is not None else "no_rope_layers")


def _granite(r: _Reader) -> None:
    """IBM Granite 3 (transformers GraniteConfig / modeling_granite): Llama's decoder (attention_bias on q, k, v and
    the output, mlp_bias); its muP multipliers scale activations and logits and size nothing."""
    _llama(r)


def _granitemoe(r: _Reader) -> None:
    """IBM Granite 3 MoE (GraniteMoeConfig / modeling_granitemoe): Granite's attention and, on every layer,
    num_local_experts gated experts of intermediate_size (fused input_linear / output_layer, no bias), top
    num_experts_per_tok, a router without bias, no shared expert."""
    _rotary_decoder(r, tied_default=False)
    _head_dim(r)
    _attention_bias(r)
    _moe(r, experts="num_local_experts", ffn="intermediate_size")


def _per_layer_uniform(r: _Reader, key: str, default: int) -> int:
    """A positive integer, or a list of one per layer that must all be equal (Hunyuan's per-layer moe_topk,
    num_experts, num_shared_expert: the released models repeat one value; planner's layers are alike)."""
    value = r.raw(key)
    if value is None:
        return default
    if isinstance(value, list):
        if len(value) != r.spec["num_layers"]:
            raise r.error(key, f"expected one value per layer ({r.spec['num_layers']}), got {len(value)}")
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value):
            raise r.error(key, f"expected non-negative integers, got {reprlib.repr(value)}")
        if len(set(value)) > 1:
            raise r.error(key, f"differs from layer to layer ({sorted(set(value))}); planner models layers alike: "
                          "give the model as a planner ModelSpec")
        return int(value[0])
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise r.error(key, f"expected a non-negative integer or one per layer, got {value!r}")
    return value


def _hunyuan_moe(r: _Reader, *, shared_from_config: bool) -> None:
    """The Hunyuan MoE layer: num_experts SwiGLU experts of intermediate_size without bias (the modeling files build
    every expert with config.intermediate_size; moe_intermediate_size is not read), top moe_topk, a router without
    bias, and one shared MLP beside them. `shared_from_config`: Tencent's remote code builds the shared MLP only under
    use_mixed_mlp_moe, intermediate_size x num_shared_expert[0] wide; transformers' HunYuanMoEV1 always builds it,
    intermediate_size wide. num_experts 1 is a dense MLP of intermediate_size (Hunyuan's dense models)."""
    ffn = r.spec["ffn_hidden_size"]
    experts = _per_layer_uniform(r, "num_experts", 1)
    widths = r.raw("moe_intermediate_size")
    listed = widths if isinstance(widths, list) else [] if widths is None else [widths]
    if any(w != ffn for w in listed):
        raise r.error("moe_intermediate_size", f"{reprlib.repr(widths)} differs from intermediate_size ({ffn}): "
                      "Hunyuan's modeling files build every expert intermediate_size wide and other implementations "
                      "read this key; give the model as a planner ModelSpec")
    topk = _per_layer_uniform(r, "moe_topk", 1)
    shared_count = _per_layer_uniform(r, "num_shared_expert", 1)
    mixed = r.bool_("use_mixed_mlp_moe", False)
    if experts <= 1:
        if mixed:
            raise r.error("use_mixed_mlp_moe", "true with num_experts 1: the modeling file builds a dense MLP then; "
                          "set it false")
        return
    if topk < 1 or topk > experts:
        raise r.error("moe_topk", f"{topk} must be between 1 and num_experts ({experts})")
    shared_width = ffn * shared_count if shared_from_config else ffn
    has_shared = mixed if shared_from_config else True
    if has_shared and shared_width == 0:
        raise r.error("num_shared_expert", "0 with use_mixed_mlp_moe: the shared MLP would have no width; set "
                      "use_mixed_mlp_moe false")
    r.put("moe", {"num_experts": experts, "experts_per_token": topk, "moe_ffn_hidden_size": ffn,
                  "num_shared_experts": int(has_shared), "num_dense_layers": 0, "router_bias": False,
                  "shared_expert_ffn_hidden_size": shared_width if has_shared else None}, "num_experts")
    r.origin["moe.shared_expert_ffn_hidden_size"] = "num_shared_expert" if shared_from_config else "intermediate_size"
    r.origin["moe.moe_ffn_hidden_size"] = "intermediate_size"


def _hunyuan(r: _Reader) -> None:
    """Tencent Hunyuan, remote code (model_type hunyuan: HunYuanConfig / modeling_hunyuan.py of
    Tencent-Hunyuan/Hunyuan-A13B, models/ @ 2798f3c8): a GQA decoder of hidden / heads head width, RMSNorm,
    attention_bias on q, k, v and o, per-head q/k RMSNorms under use_qk_norm (applied after the rotary embedding),
    and the Hunyuan MoE layer (_hunyuan_moe). Cross-layer attention (use_cla: layers share the K/V of the one
    before), MLA (use_mla), the XD-RoPE variant and the classification head are refused."""
    _core(r)
    _kv_heads(r)
    _llama_block(r, tied_default=False)
    heads_width = r.spec["hidden_size"] // r.spec["num_attention_heads"]
    if r.spec["hidden_size"] % r.spec["num_attention_heads"]:
        raise r.error("num_attention_heads", f"hidden_size ({r.spec['hidden_size']}) is not divisible by it: the "
                      "modeling file's heads are hidden_size / num_attention_heads wide")
    stated = r.int_("attention_head_dim", required=False)
    if stated is not None and stated != heads_width:
        raise r.error("attention_head_dim", f"{stated} differs from hidden_size / num_attention_heads ({heads_width}), "
                      "which the modeling file uses; give the model as a planner ModelSpec")
    _attention_bias(r)
    r.put("qk_norm", r.bool_("use_qk_norm", False), "use_qk_norm")
    r.require("use_rotary_pos_emb", True, "the rotary embedding of the released models")
    r.require("position_embedding_xdrope", False, "XD-RoPE is the multimodal variant's")
    r.require("use_cla", False, "cross-layer attention shares K/V between layers, which planner does not model")
    r.require("use_mla", False, "Hunyuan's MLA option is not a released configuration")
    r.require("mlp_bias", False, "the modeling file builds its MLPs without bias whatever this says")
    r.require("moe_layer_num_skipped", 0, "the modeling file puts the MoE on every layer")
    r.require("add_classification_head", False, "planner models the causal language model")
    _hunyuan_moe(r, shared_from_config=True)


def _hunyuan_v1_moe(r: _Reader) -> None:
    """Hunyuan-A13B as transformers builds it (HunYuanMoEV1Config / modular_hunyuan_v1_moe.py): Llama's attention
    with head_dim (default hidden / heads) and per-head q/k RMSNorms always, and on every layer the Hunyuan MoE layer
    with its shared MLP always built intermediate_size wide (use_mixed_mlp_moe and num_shared_expert are not read)."""
    _rotary_decoder(r, tied_default=False)
    _head_dim(r)
    _attention_bias(r)
    r.put("qk_norm", True)
    if r.raw("sliding_window") is not None:
        r.notes.append("sliding_window ignored: transformers' HunYuanMoEV1 attention attends to every earlier token")
    _hunyuan_moe(r, shared_from_config=False)


_STATE_DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
# LinearAttentionSpec's sizes and the config.json keys that give them (Qwen3NextConfig, Qwen3_5TextConfig)
_GDN_SIZE_KEYS = {"num_key_heads": "linear_num_key_heads", "num_value_heads": "linear_num_value_heads",
                  "key_head_dim": "linear_key_head_dim", "value_head_dim": "linear_value_head_dim",
                  "conv_kernel": "linear_conv_kernel_dim"}


def _linear_attention(r: _Reader, *, interval_default: int, state_dtype_default: str) -> None:
    """Gated DeltaNet layers (Qwen3-Next, Qwen3.5): the linear_* sizes, and which layers keep softmax attention:
    every full_attention_interval-th (layer_types, when written, must say the same: planner places them so)."""
    layers = r.spec["num_layers"]
    interval = r.int_("full_attention_interval", interval_default)
    types = r.raw("layer_types")
    if types is not None:
        if not isinstance(types, list):
            raise r.error("layer_types", f"expected a list of layer kinds, got {types!r:.40}")
        if len(types) != layers:  # (checked before a list of num_layers entries is built)
            raise r.error("layer_types", f"has {len(types)} entries, but num_hidden_layers is {layers:,}; give one "
                          "per layer")
        unknown = sorted({str(t) for t in types if t not in ("full_attention", "linear_attention")})
        if unknown:
            raise r.error("layer_types", f"unsupported layer kind {unknown[0]!r:.40}; planner knows "
                          "'linear_attention' (Gated DeltaNet) and 'full_attention'")
        expected = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
        if types != expected:
            raise r.error("layer_types", f"does not put softmax attention on layers {interval - 1}, {2 * interval - 1}, "
                          f"... (one in every {interval}, full_attention_interval's placement and the only one "
                          "planner models); make the two agree, or give the model as a planner ModelSpec")
    dtype = r.raw("mamba_ssm_dtype")
    if dtype is not None and (not isinstance(dtype, str) or dtype not in _STATE_DTYPES):
        raise r.error("mamba_ssm_dtype", f"expected one of {', '.join(_STATE_DTYPES)}, got {dtype!r:.40}")
    spec: dict[str, int] = {field: r.int_(key) for field, key in _GDN_SIZE_KEYS.items()}
    spec |= {"full_attention_interval": interval, "state_bytes_per_element": _STATE_DTYPES[dtype or state_dtype_default]}
    if spec["num_value_heads"] % spec["num_key_heads"]:
        raise r.error("linear_num_value_heads", f"{spec['num_value_heads']} is not a multiple of "
                      f"linear_num_key_heads ({spec['num_key_heads']})")
    if interval > layers:
        raise r.error("full_attention_interval", f"{interval} exceeds num_hidden_layers ({layers}): no layer would "
                      "keep attention")
    if interval > 1:  # 1: every layer keeps attention, no GDN layer
        r.put("linear_attention", spec, "linear_num_value_heads")
        for field, key in {**_GDN_SIZE_KEYS, "full_attention_interval": "full_attention_interval"}.items():
            r.origin[f"linear_attention.{field}"] = key  # a nested field's error names its own key


def _qwen_gated_shared_expert(r: _Reader) -> None:
    """Qwen2-MoE's shared expert, kept by Qwen3-Next and Qwen3.5-MoE: one of shared_expert_intermediate_size,
    scaled by a sigmoid gate (shared_expert_gate, Linear(h, 1) without bias)."""
    r.spec["moe"]["num_shared_experts"] = 1
    r.spec["moe"]["shared_expert_ffn_hidden_size"] = r.int_("shared_expert_intermediate_size")
    r.spec["moe"]["shared_expert_gate"] = True
    r.origin["moe.shared_expert_ffn_hidden_size"] = "shared_expert_intermediate_size"


def _qwen3_5_text(r: _Reader, *, moe: bool) -> None:
    """The language model of Qwen3.5 (transformers Qwen3_5TextConfig / modeling_qwen3_5): Qwen3's decoder (per-head
    q/k RMSNorms, head_dim default 256, rotary on partial_rotary_factor of each head, inside rope_parameters) with
    the gated attention (attn_output_gate: q_proj also computes a sigmoid gate per channel of the output) on every
    full_attention_interval-th layer and a Gated DeltaNet mixer (Qwen3_5GatedDeltaNet: in_proj_qkv, in_proj_z,
    in_proj_b, in_proj_a, a depthwise conv1d over q, k, v without bias, dt_bias, A_log, a gated RMSNorm over
    value_head_dim, out_proj) on the others; mtp_num_hidden_layers MTP layers (an fc 2h -> h, the embedding and
    hidden norms, a full-attention decoder layer, a final norm: planner's MTP module). `moe`: the MoE text model,
    which has no dense layer unless mlp_only_layers names some (then intermediate_size sizes them)."""
    # without dense layers the dense width sizes nothing: the experts' width stands in when the file has none
    dense_width = r.int_("moe_intermediate_size") if moe and not _leading_dense_layers(r) else None
    _rotary_decoder(r, tied_default=False, ffn_default=dense_width)
    _head_dim(r, default=256)
    _attention_bias(r)
    r.put("qk_norm", True)
    r.put("attention_output_gate", r.bool_("attn_output_gate", True), "attn_output_gate")
    # vLLM keeps Qwen3.5's GDN states in fp32 (qwen3_5.py @ 36c110bd), as the checkpoints' mamba_ssm_dtype says
    _linear_attention(r, interval_default=4, state_dtype_default="float32")
    if r.bool_("mtp_use_dedicated_embeddings", False):
        raise r.error("mtp_use_dedicated_embeddings", "MTP layers with an embedding of their own are not modelled "
                      "(planner's MTP module shares the main model's)")
    _mtp_count(r, "mtp_num_hidden_layers", "multi-token-prediction layers trained with the model, counted in "
               "DeepSeek-V3's form (mtp_layers; transformers loads none); serving ignores them")


def _qwen3_5_dense_text(r: _Reader) -> None:
    _qwen3_5_text(r, moe=False)
    if r.raw("mlp_only_layers") not in (None, []):
        raise r.error("mlp_only_layers", "a dense Qwen3.5 has an MLP on every layer already; expected []")


def _qwen3_5_moe_text(r: _Reader) -> None:
    """Qwen3.5-MoE's language model (Qwen3_5MoeTextConfig): Qwen3.5's layers with, on every layer, num_experts
    SwiGLU experts of moe_intermediate_size, top num_experts_per_tok, a router without bias, and Qwen2-MoE's gated
    shared expert of shared_expert_intermediate_size."""
    _qwen3_5_text(r, moe=True)
    _moe(r, experts="num_experts", ffn="moe_intermediate_size", dense_layers=_leading_dense_layers(r))
    _qwen_gated_shared_expert(r)


def _qwen3_next(r: _Reader) -> None:
    """Qwen3-Next (transformers Qwen3NextConfig / modeling_qwen3_next): the same layers as Qwen3.5-MoE with the
    rotary share at the top level (partial_rotary_factor, default 0.25) and the attention's output gate always
    built; MTP modules are not part of the transformers model (num_nextn_predict_layers, when given, counts them)."""
    _rotary_decoder(r, tied_default=False)
    _head_dim(r, default=256)
    _attention_bias(r)
    _partial_rotary(r, default=0.25)
    r.put("qk_norm", True)
    r.put("attention_output_gate", True)
    # vLLM's default mamba cache dtype for Qwen3-Next is the model's (qwen3_next.py @ 6365b387: "auto")
    _linear_attention(r, interval_default=4, state_dtype_default="bfloat16")
    _moe(r, experts="num_experts", ffn="moe_intermediate_size", dense_layers=_leading_dense_layers(r))
    _qwen_gated_shared_expert(r)
    _mtp_count(r, "num_nextn_predict_layers")


# Keys each reader ignores on purpose, with the reason (shown in docs/models.md).
_LLAMA_IGNORED = {"pretraining_tp": "tensor-parallel split of the original checkpoint; same shapes",
                  "hidden_act": _ACT, **{k: _ROPE for k in ROPE_KEYS}}
_MOE_ROUTING = {"output_router_logits": "training output switch", "router_aux_loss_coef": "load-balancing loss weight",
                "router_jitter_noise": "training-time router noise", "norm_topk_prob": "routing normalisation"}
_QWEN_IGNORED = {**_LLAMA_IGNORED, "use_mrope": "multimodal rotary variant; no weights"}
# Keys some Qwen3-MoE hub files carry (Qwen3-Coder-480B-A35B) that Qwen3MoeConfig does not define and
# modeling_qwen3_moe never reads: its q/k/v bias is attention_bias, its q/k norm is always there, it has no shared
# expert. transformers builds the same model whatever they hold.
_QWEN3_MOE_UNREAD = {
    "qkv_bias": "not read by transformers' Qwen3-MoE (its q/k/v bias is attention_bias)",
    "use_qk_norm": "not read by transformers' Qwen3-MoE (its q/k norm is always built)",
    "shared_expert_intermediate_size": "not read by transformers' Qwen3-MoE (it builds no shared expert)",
}
_HUNYUAN_ROUTING = {
    "moe_drop_tokens": "routing setting (the layout's capacity factor decides drops); no weights",
    "moe_random_routing_dropped_token": "routing of dropped tokens; no weights",
    "norm_topk_prob": "routing weight normalisation; no weights",
    "routed_scaling_factor": "routing weight scale; no weights",
}
# Keys of Tencent's HunYuanConfig that modeling_hunyuan.py (Hunyuan-A13B, models/ @ 2798f3c8) does not read, or
# reads only for parts refused elsewhere (use_cla, use_mla, the classification head).
_HUNYUAN_REMOTE = {
    **{key: "vision settings of the multimodal variant; HunYuanMoEV1ForCausalLM builds no vision tower" for key in (
        "vit_path", "vit_type", "vit_input_resolution", "vit_token", "vit_patch", "vit_mapping_type", "vit_norm_type",
        "vit_used_rms_norm", "vit_remove_prenorm", "vit_add_patchemb_bias", "anyres_vit_max_image_size",
        "anyres_pooling_size", "anyres_vit_two_views", "skip_cls_token", "num_media_embeds", "xdrope_section")},
    **{key: "token id; no weights" for key in (
        "eod_token_id", "im_start_id", "im_end_id", "text_start_id", "text_end_id", "image_token_id",
        "video_start_id", "video_end_id", "im_newline_id", "mask_init_id", "pad_id")},
    "org_vocab_size": "the vocabulary before padding; the embedding is vocab_size rows",
    "cla_share_factor": "cross-layer attention's period; read only under use_cla (refused)",
    "kv_lora_rank": "MLA size; read only under use_mla (refused)", "q_lora_rank": "MLA size; read only under use_mla",
    "qk_nope_head_dim": "MLA size; read only under use_mla", "qk_rope_head_dim": "MLA size; read only under use_mla",
    "v_head_dim": "MLA size; read only under use_mla",
    "group_limited_greedy": "group-limited routing; not read by the modeling file",
    "n_group": "group-limited routing; not read by the modeling file",
    "topk_group": "group-limited routing; not read by the modeling file",
    "norm_type": "not read by the modeling file (every norm is HunYuanRMSNorm)",
    "class_num": "classification head size; read only with add_classification_head (refused)",
    "pool_type": "classification head pooling; read only with add_classification_head",
    "dense_list": "classification head sizes; read only with add_classification_head",
}
_GEMMA_IGNORED = {**_LLAMA_IGNORED, "hidden_activation": _ACT,
                  "query_pre_attn_scalar": "attention score scale", "attn_logit_softcapping": "score soft-capping",
                  "final_logit_softcapping": "logit soft-capping", "cache_implementation": "KV-cache class choice",
                  "sliding_window_size": "legacy duplicate of sliding_window"}

IGNORED_KEYS: dict[str, dict[str, str]] = {
    "llama": _LLAMA_IGNORED,
    "mistral": _LLAMA_IGNORED,
    "mixtral": {**_LLAMA_IGNORED, **_MOE_ROUTING},
    "qwen2": _QWEN_IGNORED,
    "qwen3": _QWEN_IGNORED,
    "qwen3_moe": {**_QWEN_IGNORED, **_MOE_ROUTING, **_QWEN3_MOE_UNREAD},
    "gemma": _GEMMA_IGNORED,
    "gemma2": _GEMMA_IGNORED,
    "phi3": {**_LLAMA_IGNORED, "original_max_position_embeddings": "rope scaling reference length"},
    "gpt2": {"activation_function": _ACT, "n_ctx": "legacy duplicate of n_positions",
             "scale_attn_weights": "attention score scale", "scale_attn_by_inverse_layer_idx": "attention score scale",
             "reorder_and_upcast_attn": "numerics of the attention kernel", "output_past": "legacy cache switch",
             "summary_type": "head of GPT2DoubleHeadsModel only", "summary_use_proj": "head of GPT2DoubleHeadsModel only",
             "summary_activation": "head of GPT2DoubleHeadsModel only",
             "summary_proj_to_labels": "head of GPT2DoubleHeadsModel only",
             "summary_first_dropout": "head of GPT2DoubleHeadsModel only",
             "n_special": "legacy OpenAI-GPT key, unused by GPT-2", "predict_special_tokens": "legacy OpenAI-GPT key"},
    "gpt_neox": {"hidden_act": _ACT, "use_parallel_residual": "residual wiring; same weights",
                 **{k: _ROPE for k in ROPE_KEYS}},
    "deepseek_v3": {"hidden_act": _ACT, **{k: _ROPE for k in ROPE_KEYS},
                    "num_key_value_heads": "MLA derives keys and values from the shared latent",
                    "head_dim": "MLA head sizes come from qk_nope/qk_rope/v_head_dim",
                    "pretraining_tp": "tensor-parallel split of the original checkpoint; same shapes",
                    "routed_scaling_factor": "routing weight scale", "scoring_func": "routing score function",
                    "norm_topk_prob": "routing normalisation", "aux_loss_alpha": "load-balancing loss weight",
                    "seq_aux": "load-balancing loss variant", "ep_size": "expert-parallel degree of the original run"},
}


_GPT_LEGACY = {"activation_function": _ACT, "scale_attn_weights": "attention score scale",
               "summary_type": "sequence-classification head of the original GPT-2 code, not built for causal LM",
               "summary_use_proj": "sequence-classification head, not built for causal LM",
               "summary_activation": "sequence-classification head, not built for causal LM",
               "summary_proj_to_labels": "sequence-classification head, not built for causal LM",
               "summary_first_dropout": "sequence-classification head, not built for causal LM"}
_SOFTMAX_FP32 = {"attention_softmax_in_fp32": "numerics of the attention kernel",
                 "scale_attention_softmax_in_fp32": "numerics of the attention kernel"}
_VL_TOKENS = {key: "token id of the image/video placeholders; no weights" for key in (
    "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id", "vision_token_id")}

_GRANITE_MULTIPLIERS = {
    "embedding_multiplier": "scales the embeddings (muP); no weights",
    "residual_multiplier": "scales the residual branches (muP); no weights",
    "attention_multiplier": "attention score scale (muP); no weights",
    "logits_scaling": "divides the logits (muP); no weights",
}
_DSA_IGNORED = {
    "head_dim": "MLA head sizes come from qk_nope/qk_rope/v_head_dim (the config points head_dim at the rotary part)",
    "qk_head_dim": "qk_nope_head_dim + qk_rope_head_dim", "rope_interleave": "rotary layout; no weights",
    "indexer_rope_interleave": "the indexer's rotary layout; no weights",
    "index_share_for_mtp_iteration": "MTP reuses the top-k when drafting; no weights",
    "layer_types": "every layer indexed attention (the cache class it drives)",
}
IGNORED_KEYS.update({
    "deepseek_v32": {**IGNORED_KEYS["deepseek_v3"], **_DSA_IGNORED},
    "glm_moe_dsa": {**IGNORED_KEYS["deepseek_v3"], **_DSA_IGNORED},
    "mimo": _QWEN_IGNORED,
    "phimoe": {**_LLAMA_IGNORED, **_MOE_ROUTING, "input_jitter_noise": "training-time input noise",
               "expert_dropout": "not read by transformers' Phimoe (PhimoeConfig has no such field)"},
    "smollm3": {**_LLAMA_IGNORED, "max_window_layers": "not read by transformers' SmolLM3 (layer_types decide "
                "the windows)"},
    "granite": {**_LLAMA_IGNORED, **_GRANITE_MULTIPLIERS},
    "granitemoe": {**_LLAMA_IGNORED, **_GRANITE_MULTIPLIERS, **_MOE_ROUTING},
    "qwen3_vl_text": {**_QWEN_IGNORED, **_VL_TOKENS},
    "qwen3_vl_moe_text": {**_QWEN_IGNORED, **_MOE_ROUTING, **_VL_TOKENS},
    "qwen3_5_text": {**_QWEN_IGNORED, **_VL_TOKENS},
    "qwen3_5_moe_text": {**_QWEN_IGNORED, **_MOE_ROUTING, **_VL_TOKENS},
    "qwen3_next": {**_QWEN_IGNORED, **_MOE_ROUTING},
    "hunyuan": {**_LLAMA_IGNORED, **_MOE_ROUTING, **_HUNYUAN_ROUTING, **_HUNYUAN_REMOTE},
    "hunyuan_v1_moe": {**_LLAMA_IGNORED, **_MOE_ROUTING, **_HUNYUAN_ROUTING,
                       "use_mixed_mlp_moe": "not read by transformers' HunYuanMoEV1 (the shared MLP is always built)",
                       "num_shared_expert": "not read by transformers' HunYuanMoEV1 (one shared MLP of "
                       "intermediate_size)", "use_qk_norm": "not read by transformers' HunYuanMoEV1 (its q/k norms "
                       "are always built)", "eod_token_id": "token id"},
    "gemma3_text": {**_GEMMA_IGNORED, "rope_local_base_freq": _ROPE,
                    "_sliding_window_pattern": "private copy of sliding_window_pattern written by transformers"},
    "qwen2_moe": {**_QWEN_IGNORED, **_MOE_ROUTING},
    "gpt_oss": {**_LLAMA_IGNORED, **_MOE_ROUTING,
                "initial_context_length": "YaRN's original context length (rotary scaling); no weights",
                "swiglu_alpha": "activation slope; no weights"},
    "olmo2": _LLAMA_IGNORED,
    "olmo3": _LLAMA_IGNORED,
    "exaone4": _LLAMA_IGNORED,
    "starcoder2": {"hidden_act": _ACT, "activation_function": "legacy duplicate of hidden_act",
                   "norm_epsilon": "numerical epsilon", **_SOFTMAX_FP32,
                   "scale_attn_weights": "attention score scale", **{k: _ROPE for k in ROPE_KEYS}},
    "cohere": {**_LLAMA_IGNORED, "logit_scale": "a scalar multiplying the logits; no weights"},
    "deepseek_v2": {**IGNORED_KEYS["deepseek_v3"]},
    "kimi_k2": {**IGNORED_KEYS["deepseek_v3"]},
    "glm4_moe": {**_LLAMA_IGNORED, "routed_scaling_factor": "routing weight scale",
                 "norm_topk_prob": "routing normalisation", "mtp_lambda_weight": "MTP loss weight",
                 **_MOE_ROUTING},
    "minimax_m2": {**_LLAMA_IGNORED, **_MOE_ROUTING,
                   "mlp_intermediate_size": "the dense MLP width of MiniMax-01's dense layers; MiniMax-M2 has none",
                   "shared_moe_mode": "how a shared expert would be gated; there is none",
                   **{k: "MiniMax-01's residual scaling per sublayer; no weights" for k in (
                       "layernorm_full_attention_beta", "layernorm_linear_attention_beta", "layernorm_mlp_beta",
                       "layernorm_full_attention_alpha", "layernorm_linear_attention_alpha", "layernorm_mlp_alpha")}},
    "llama4_text": {**_LLAMA_IGNORED, "attn_temperature_tuning": "attention temperature at long context; no weights",
                    "floor_scale": "attention temperature setting; no weights",
                    "attn_scale": "attention temperature setting; no weights",
                    "cache_implementation": "the KV cache class of generate()",
                    "router_jitter_noise": "routing noise in training", "output_router_logits": "what forward returns",
                    "router_aux_loss_coef": "load-balancing loss weight",
                    "for_llm_compressor": "a quantization tool's flag; no weights",
                    "layer_types": "per-layer attention kinds, the same as no_rope_layers"},
    "gpt_bigcode": {**_GPT_LEGACY, **_SOFTMAX_FP32,
                    **{k: "settings of the original inference runner (BigCode's fork); no weights" for k in (
                        "runner_max_sequence_length", "inference_runner", "validate_runner_input",
                        "pre_allocate_kv_cache", "max_batch_size", "max_sequence_length", "pad_key_length")},
                    "n_ctx": "legacy duplicate of n_positions"},
    "gptj": {**_GPT_LEGACY, **{k: _ROPE for k in ROPE_KEYS}},
    "stablelm": _LLAMA_IGNORED,
    "olmoe": {**_LLAMA_IGNORED, **_MOE_ROUTING,
              "clip_qkv": "a clamp of q, k and v's values inside the layer (element-wise, no weights)"},
    "nemotron": {**_LLAMA_IGNORED, "norm_eps": "LayerNorm1P epsilon; no weights",
                 "kv_channels": "key NVIDIA's exports write beside head_dim; NemotronConfig does not read it (the "
                 "head width is head_dim, else hidden_size / num_attention_heads)"},
    "internlm2": _LLAMA_IGNORED,
    "minicpm": {**_LLAMA_IGNORED, "scale_emb": "muP multiplier of the embedding output; no weights",
                "dim_model_base": "muP base width for the logit scale; no weights",
                "scale_depth": "muP multiplier of the residual branches; no weights"},
    "ministral3": _LLAMA_IGNORED,
    "qwen2_vl_text": {**_QWEN_IGNORED, **_VL_TOKENS},
    "qwen2_5_vl_text": {**_QWEN_IGNORED, **_VL_TOKENS},
})
IGNORED_KEYS["phi3"] = {**IGNORED_KEYS["phi3"],
                        "interpolate_factor": "rotary interpolation setting of Phi-4-mini's remote code; no weights"}

# Keys that are harmless in every model type (seen in real configs that planner refused before), with reasons.
HARMLESS_KEYS: dict[str, str] = {
    "is_llama_config": "a marker nanotron writes when exporting to Llama's format (SmolLM); no weights",
    "rope_interleaved": "rotary channel order (interleaved or halves); no weights",
    "transformers.js_config": "settings for transformers.js (ONNX dtypes); not the model",
    "interpolate_factor": "rotary interpolation setting of remote-code configs; no weights",
    "keys_to_ignore_at_inference": "outputs dropped at inference; not the model",
    "_commit_hash": "hub revision",
    "model_name": "a display name",
}

# Keys whose only harmless value is the one given (any other changes the attention pattern).
HARMLESS_AT: dict[str, tuple[Any, str]] = {
    "full_attn_mod": (1, "Phi-4-mini's remote code uses full attention on every layer i with i % full_attn_mod == 0"),
}

# Words that mark a key as possibly changing parameters, memory or time: an unknown key containing one
# (split on '_', '.', '-') is refused; any other unknown key is ignored and noted in the spec's source.
ARCHITECTURE_WORDS: frozenset[str] = frozenset({
    "layer", "layers", "hidden", "head", "heads", "expert", "experts", "moe", "dim", "dims", "size", "vocab",
    "intermediate", "ffn", "mlp", "embed", "embedding", "embeddings", "bias", "norm", "layernorm", "rank", "lora",
    "window", "sliding", "kv", "attn", "attention", "shared", "dense", "sparse", "tie", "tied", "position",
    "positions", "parallel", "residual", "gate", "gated", "router", "proj", "projection", "query", "key", "value",
    "qk", "qkv", "mla", "block", "blocks", "width", "depth", "group", "groups", "sink", "sinks", "num", "n",
    "chunk", "local", "global", "inner", "conv", "state", "ssm", "mamba", "linear", "cross", "encoder", "decoder",
    "vision", "audio", "adapter", "mtp", "nextn", "channels", "interleave",
})


def _architecture_relevant(key: str) -> bool:
    words = [w for w in re.split(r"[^a-z0-9]+", key.lower()) if w]
    return any(w in ARCHITECTURE_WORDS or re.fullmatch(r"(num|n)\d*", w) for w in words)


# Multimodal configs: the language model is read from `text_config` (or, for Qwen2-VL/Qwen2.5-VL hub files,
# from the top level); the vision tower and projector are not modelled.
MULTIMODAL_TEXT_TYPES: dict[str, str] = {
    "llava": "llama", "llava_next": "llama", "mistral3": "mistral", "gemma3": "gemma3_text",
    "qwen2_vl": "qwen2_vl_text", "qwen2_5_vl": "qwen2_5_vl_text", "llama4": "llama4_text",
    "qwen3_vl": "qwen3_vl_text", "qwen3_vl_moe": "qwen3_vl_moe_text",
    "qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text",
}
_FLAT_MULTIMODAL = frozenset({"qwen2_vl", "qwen2_5_vl"})
# The wrapper's own tie_word_embeddings default (transformers 5.x: the wrapper's key decides tying).
_WRAPPER_TIED_DEFAULT: dict[str, bool] = {
    "llava": False, "llava_next": False, "mistral3": True, "gemma3": True, "qwen2_vl": False, "qwen2_5_vl": False,
    "llama4": False, "qwen3_vl": False, "qwen3_vl_moe": False, "qwen3_5": False, "qwen3_5_moe": False,
}
_WRAPPER_DECIDES_TYING = frozenset({"qwen3_vl", "qwen3_vl_moe"})
WRAPPER_IGNORED_KEYS: dict[str, str] = {
    "vision_config": "the vision tower: not modelled (planner counts and times the language model only)",
    "image_token_index": "token id of the image placeholder", "image_token_id": "token id of the image placeholder",
    "boi_token_index": "token id", "eoi_token_index": "token id", "ignore_index": "loss masking value",
    "mm_tokens_per_image": "image tokens per image (input length, not weights)",
    "projector_hidden_act": "activation of the vision projector (not modelled)",
    "multimodal_projector_bias": "bias of the vision projector (not modelled)",
    "spatial_merge_size": "vision patch merging (not modelled)",
    "vision_feature_layer": "which vision layer feeds the projector (not modelled)",
    "vision_feature_select_strategy": "vision feature selection (not modelled)",
    "image_grid_pinpoints": "image tiling (input length, not weights)", "image_seq_length": "image tokens per image",
    # Kimi K2.5 (KimiK25Config, remote code): the MoonViT tower's media handling
    "use_unified_vision_chunk": "how the vision tower chunks images and video (not modelled)",
    "media_placeholder_token_id": "token id of the media placeholder", "video_placeholder": "text of the video "
    "placeholder",
    **_VL_TOKENS,
}
# Class defaults of the text configs (transformers 5.24) for nested text_config blocks, which transformers
# writes as a diff against these defaults (llava-1.5's text_config names only what differs from LlamaConfig).
NESTED_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "max_position_embeddings": 2048},
    "mistral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
                "sliding_window": 4096},
    "ministral3": {"vocab_size": 131072, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 34,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                   "max_position_embeddings": 262144},
    "gemma3_text": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                    "max_position_embeddings": 131072},
    "qwen3_vl_text": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
                      "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128,
                      "max_position_embeddings": 128000},
    "qwen3_vl_moe_text": {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632,
                          "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
                          "max_position_embeddings": 128000, "moe_intermediate_size": 1408, "num_experts_per_tok": 4,
                          "num_experts": 60},
    **{t: {"vocab_size": 152064, "hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80,
           "num_attention_heads": 64, "num_key_value_heads": 8, "max_position_embeddings": 32768}
       for t in ("qwen2_vl_text", "qwen2_5_vl_text")},
}

READERS: dict[str, Callable[[_Reader], None]] = {
    "llama": _llama, "mistral": _mistral, "mixtral": _mixtral, "qwen2": _qwen2, "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe, "gemma": _gemma, "gemma2": _gemma2, "phi3": _phi3, "gpt2": _gpt2,
    "gpt_neox": _gpt_neox, "deepseek_v3": _deepseek_v3, "deepseek_v2": _deepseek_v2, "gemma3_text": _gemma3_text,
    "qwen2_moe": _qwen2_moe, "gpt_oss": _gpt_oss, "olmo2": _olmo2, "starcoder2": _starcoder2, "cohere": _cohere,
    "gpt_bigcode": _gpt_bigcode, "gptj": _gptj, "stablelm": _stablelm, "internlm2": _internlm2, "minicpm": _minicpm,
    "ministral3": _mistral, "qwen2_vl_text": _qwen2_vl_text, "qwen2_5_vl_text": _qwen2_vl_text,
    # Moonshot's Kimi K2 ships DeepseekV3ForCausalLM (its own code, the same keys) under model_type kimi_k2
    "kimi_k2": _deepseek_v3,
    "llama4_text": _llama4_text,
    "glm4_moe": _glm4_moe,
    "minimax_m2": _minimax_m2,
    "olmo3": _olmo3,
    "exaone4": _exaone4,
    "qwen3_vl_text": _qwen3_vl_text,
    "deepseek_v32": _deepseek_v32,
    "glm_moe_dsa": _glm_moe_dsa,
    "smollm3": _smollm3,
    "mimo": _mimo,
    "phimoe": _phimoe,
    "granite": _granite,
    "granitemoe": _granitemoe,
    "qwen3_vl_moe_text": _qwen3_vl_moe_text,
    "hunyuan": _hunyuan,
    "qwen3_5_text": _qwen3_5_dense_text,
    "qwen3_5_moe_text": _qwen3_5_moe_text,
    "qwen3_next": _qwen3_next,
    "hunyuan_v1_moe": _hunyuan_v1_moe,
    "nemotron": _nemotron,
    "olmoe": _olmoe,
}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted([*READERS, *MULTIMODAL_TEXT_TYPES]))

_DISPLAY_NAMES = ("_name_or_path", "name_or_path")


def _dropout(r: _Reader) -> None:
    rates = []
    for key in DROPOUT_KEYS:
        value = r.raw(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise r.error(key, f"expected a dropout rate in [0, 1), got {value!r}")
        rates.append(value)
    r.put("dropout", any(rate > 0 for rate in rates))


def _rotary_scaling(r: _Reader) -> None:
    """YaRN's attention factor from `rope_scaling` (or transformers v5's `rope_parameters`, flat or per layer type,
    where the full-attention layers' entry is read), as Megatron-Bridge's conversion hands it to Megatron-Core
    (conversion/model_bridge.py maps `factor`, `mscale` and `mscale_all_dim` to GPTModelProvider's yarn_* fields,
    @ 067f987d; Megatron-Core's _yarn_get_concentration_factor): the ratio of the factors at `mscale` and
    `mscale_all_dim` where both are set and non-zero (DeepSeek: 1 when they agree), else 0.1 ln(factor) + 1; an
    explicit `attention_factor` is taken as written. (transformers' own _compute_yarn_parameters takes the scale as
    max_position_embeddings / original_max_position_embeddings where the latter is given.) Other rope types
    (linear, dynamic, llama3, longrope) leave the rotary kernel's work as it is: factor 1."""
    if r.spec.get("position_embedding") != "rotary":
        return
    key = "rope_scaling" if isinstance(r.data.get("rope_scaling"), dict) else "rope_parameters"
    params = r.data.get(key)
    if not isinstance(params, dict):
        return
    if "rope_type" not in params and "type" not in params and params and all(
            isinstance(v, dict) for v in params.values()):
        # transformers v5 per layer type ({"full_attention": {...}, "sliding_attention": {...}})
        if not isinstance(params.get("full_attention"), dict):
            return
        key, params = f"{key}.full_attention", params["full_attention"]
        r.notes.append(f"YaRN's attention factor read from {key} (the full-attention layers'); every layer is "
                       "charged its rotary alike")
    kind_key = "rope_type" if params.get("rope_type") is not None else "type"
    kind = params.get(kind_key)
    if kind is not None and not isinstance(kind, str):
        raise r.error(f"{key}.{kind_key}", f"expected the name of a rope type (yarn, linear, dynamic, ...), got "
                      f"{short_repr(kind)}")
    if kind != "yarn":
        return

    def number(name: str, default: float | None) -> float | None:
        value = params.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise r.error(f"{key}.{name}", f"expected a non-negative number, got {short_repr(value)}")
        try:
            out = float(value)
        except OverflowError:  # an integer beyond a float
            out = math.inf
        if not math.isfinite(out) or out < 0:
            raise r.error(f"{key}.{name}", f"expected a finite, non-negative number, got {short_repr(value)}")
        return out

    explicit = number("attention_factor", None)
    if explicit is not None:
        if not 0 < explicit <= 100:
            raise r.error(f"{key}.attention_factor", f"expected a number in (0, 100], got {explicit!r}")
        r.put("rotary_attention_factor", explicit, f"{key}.attention_factor")
        return
    scale = number("factor", 1.0)
    assert scale is not None
    # transformers and Megatron-Bridge's conversion take a zero mscale as unset
    mscale, mscale_all_dim = number("mscale", None) or None, number("mscale_all_dim", None) or None
    factor = yarn_concentration_factor(scale, mscale, mscale_all_dim)
    named = (f"{key}.factor, {key}.mscale and {key}.mscale_all_dim" if mscale and mscale_all_dim
             else f"{key}.factor")
    if not 0 < factor <= 100:
        raise r.error(f"{key}.factor", f"{named} give YaRN an attention factor of {factor:g}; planner takes "
                      "(0, 100]: give the model's own scale and mscale values")
    r.put("rotary_attention_factor", factor, f"{key}.factor")


def _check_leftovers(r: _Reader) -> None:
    """Keys no reader consumed: known harmless ones pass, architecture-looking ones are refused, the rest are
    ignored and noted (see docs/models.md, "Unknown keys")."""
    for key, allowed in COMMON_REQUIRED_VALUES.items():
        r.require(key, allowed, "planner models decoder-only transformers")
    for key, (allowed, why) in HARMLESS_AT.items():
        r.require(key, allowed, why)
    ignored = IGNORED_KEYS.get(r.model_type, {})
    unknown: list[str] = []
    for key in sorted(r.data):
        if key in r.used or key in COMMON_IGNORED_KEYS or key in ignored or key in HARMLESS_KEYS:
            continue
        if _architecture_relevant(key):
            raise r.error(key, f"unknown key for model_type '{r.model_type}' that may change the architecture; "
                          "planner cannot tell how. Remove it if it does not, or describe the model in planner's "
                          "YAML spec")
        unknown.append(key)
    if unknown:
        r.notes.append(f"ignored unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                       "(no architecture word in the name)")


def _name(data: dict[str, Any], source: str) -> str:
    """`_name_or_path` when the file has one, else the folder of a config.json, else the file name."""
    for key in _DISPLAY_NAMES:
        value = data.get(key)
        if isinstance(value, str) and value:
            return value
    path = PurePath(source)
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


@dataclass(frozen=True)
class HfImport:
    """A config.json read as a ModelSpec, with what the reader noted (keys ignored, parts not modelled)."""

    spec: ModelSpec
    notes: tuple[str, ...]


def _unwrap_multimodal(data: dict[str, Any], source: str, wrapper: Any) -> tuple[dict[str, Any], Any, str, list[str]]:
    """The language model's config of a multimodal config, its model_type, the key prefix, and notes."""
    notes = ["text model only: the vision tower and projector are not modelled"]
    nested = data.get("text_config")
    if nested is None and wrapper in _FLAT_MULTIMODAL:  # Qwen2-VL hub files keep the text keys at the top
        text = {k: v for k, v in data.items() if k not in WRAPPER_IGNORED_KEYS and k != "model_type"}
        return text, MULTIMODAL_TEXT_TYPES[wrapper], "", notes
    if not isinstance(nested, dict):
        raise PlannerError("missing or not an object; a multimodal config names its language model in text_config",
                           source=source, field="text_config")
    text_type = _text_model_type(nested, wrapper)
    if wrapper not in MULTIMODAL_TEXT_TYPES:
        notes.append(f"model_type {wrapper!r} read as a wrapper around its text_config")
    text = {**(NESTED_TEXT_DEFAULTS.get(text_type, {}) if isinstance(text_type, str) else {}), **nested}
    # transformers 5.x ties the output layer by the wrapper's key when it is given; Qwen3-VL's wrappers decide it
    # alone (their class default when the key is absent: Qwen3VLConfig, Qwen3VLMoeConfig carry no fallback to
    # the text config's key, as LlavaConfig does)
    if "tie_word_embeddings" in data:
        text["tie_word_embeddings"] = data["tie_word_embeddings"]
    elif wrapper in _WRAPPER_DECIDES_TYING or ("tie_word_embeddings" not in nested and wrapper in _WRAPPER_TIED_DEFAULT):
        text["tie_word_embeddings"] = _WRAPPER_TIED_DEFAULT[wrapper]
    if "vocab_size" in data and data["vocab_size"] != text.get("vocab_size"):
        raise PlannerError(f"{data['vocab_size']} contradicts text_config.vocab_size ({text.get('vocab_size')})",
                           source=source, field="vocab_size")
    unknown = []
    for key in sorted(data):
        if key in ("text_config", "model_type", "vocab_size", "tie_word_embeddings") or key in WRAPPER_IGNORED_KEYS \
                or key in COMMON_IGNORED_KEYS or key in HARMLESS_KEYS:
            continue
        if _architecture_relevant(key):
            raise PlannerError(f"unknown key for model_type '{wrapper}' that may change the architecture; planner "
                               "cannot tell how", source=source, field=key)
        unknown.append(key)
    if unknown:
        notes.append(f"ignored unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    return text, text_type, "text_config.", notes


# Architectures planner knows it does not model, and why: their layers are not softmax-attention decoder layers
# (or attend sparsely), so no reader can map them onto planner's layer.
NOT_MODELLED: dict[str, str] = {
    **{t: "a hybrid stack of Mamba-2 (state-space) and attention layers" for t in (
        "nemotron_h", "falcon_h1", "jamba", "bamba", "zamba", "zamba2", "granitemoehybrid", "mamba", "mamba2")},
    "kimi_linear": "Kimi Delta Attention (linear attention) layers between its attention layers",
    "minimax": "lightning (linear) attention layers (MiniMax-01)",
    "lfm2": "short-convolution layers between its attention layers",
}


def _unsupported(text_type: Any) -> str:
    what = f"unsupported model_type {text_type!r}" if text_type is not None else "missing model_type"
    why = NOT_MODELLED.get(text_type) if isinstance(text_type, str) else None
    if why:
        return f"{what}: {why}, which planner does not model; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
    return f"{what}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"


def _check_model_type_names(data: dict[str, Any], source: str) -> None:
    """model_type (top level and text_config's) must be a name when given."""
    nested = data.get("text_config")
    for field, value in (("model_type", data.get("model_type")),
                         ("text_config.model_type", nested.get("model_type") if isinstance(nested, dict) else None)):
        if value is not None and not isinstance(value, str):
            raise PlannerError(f"expected a name, got {reprlib.repr(value)}", source=source, field=field)


def _is_wrapper(data: dict[str, Any]) -> bool:
    """A known multimodal type, or any config that nests its language model in a text_config (a text config never
    has one)."""
    return data.get("model_type") in MULTIMODAL_TEXT_TYPES or isinstance(data.get("text_config"), dict)


def _text_model_type(nested: Any, wrapper: Any) -> Any:
    """A wrapper's language-model type: its text_config's model_type, or the wrapper's usual one."""
    text_type = nested.get("model_type") if isinstance(nested, dict) else None
    return text_type or (MULTIMODAL_TEXT_TYPES.get(wrapper) if isinstance(wrapper, str) else None)


def refuse_unsupported_model_type(data: Any, source: str) -> None:
    """The error for a config whose model_type (or text_config's) planner has no reader for, or is not a name;
    nothing for others, which read_hf_config judges key by key."""
    if not isinstance(data, dict):
        return
    _check_model_type_names(data, source)
    if _is_wrapper(data):
        text_type, field = _text_model_type(data.get("text_config"), data.get("model_type")), "text_config.model_type"
    else:
        text_type, field = data.get("model_type"), "model_type"
    if isinstance(text_type, str) and text_type not in READERS:
        raise PlannerError(_unsupported(text_type), source=source, field=field)


def read_hf_config(data: dict[str, Any], source: str) -> HfImport:
    """Map a HuggingFace config.json dict to a ModelSpec, refusing anything it cannot map exactly."""
    if not isinstance(data, dict):
        raise PlannerError(f"expected a JSON object, got {type(data).__name__}", source=source)
    _check_model_type_names(data, source)
    model_type = data.get("model_type")
    notes: list[str] = []
    text, text_type, prefix = data, model_type, ""
    if _is_wrapper(data):  # read the language model
        text, text_type, prefix, notes = _unwrap_multimodal(data, source, model_type)
    if text_type not in READERS:
        raise PlannerError(_unsupported(text_type), source=source, field=prefix + "model_type")
    assert isinstance(text_type, str)
    reader = _Reader(text, source, text_type, prefix)
    reader.used.add("model_type")
    READERS[text_type](reader)
    _rotary_scaling(reader)
    _dropout(reader)
    _check_leftovers(reader)
    notes += reader.notes
    kind = model_type if text_type == model_type else f"{model_type}, language model {text_type}"
    described = f"HF config.json ({kind}): {source}" + "".join(f"; {note}" for note in notes)
    spec = {"name": _name(data, source), "source": described, **reader.spec}
    try:
        return HfImport(spec=ModelSpec.model_validate(spec), notes=tuple(notes))
    except ValidationError as err:
        loc = err.errors()[0]["loc"]
        nested = ".".join(str(part) for part in loc[:2])
        key = reader.origin.get(nested, reader.origin.get(str(loc[0]))) if loc else None
        raise PlannerError(describe_validation_error(err), source=source,
                           field=None if key is None else prefix + key) from None


def model_from_hf_config(data: dict[str, Any], source: str) -> ModelSpec:
    """Map a HuggingFace config.json dict to a ModelSpec (notes are kept in the spec's `source`)."""
    return read_hf_config(data, source).spec
