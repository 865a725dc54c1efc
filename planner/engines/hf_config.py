"""HuggingFace `config.json` -> `ModelSpec`.

Each supported `model_type` has a reader that maps the keys which decide tensor shapes and
lists the keys it ignores on purpose (with the reason). Any other key is an error that names it:
a key we do not know might change the architecture, and a silent guess would give wrong memory
figures. Defaults for optional keys are those of the matching `transformers` config class.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from pydantic import ValidationError

from planner.errors import PlannerError
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
DROPOUT_KEYS: tuple[str, ...] = ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop")

# Position-encoding details: rotary bases, scaling recipes, partial rotary. None adds a weight.
ROPE_KEYS: frozenset[str] = frozenset({
    "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor", "rotary_pct",
    "rotary_emb_base", "rope_interleave",
})
_ROPE = "rotary-embedding settings add no parameters"
_ACT = "the activation function does not change any weight shape"


class _Reader:
    """Reads one config dict, remembering which keys were consumed, and builds ModelSpec kwargs."""

    def __init__(self, data: dict[str, Any], source: str, model_type: str) -> None:
        self.data = data
        self.source = source
        self.model_type = model_type
        self.used: set[str] = set()
        self.spec: dict[str, Any] = {}
        self.origin: dict[str, str] = {}  # ModelSpec field -> HF key it came from

    def error(self, key: str | None, message: str) -> PlannerError:
        return PlannerError(message, source=self.source, field=key)

    def raw(self, key: str) -> Any:
        self.used.add(key)
        return self.data.get(key)

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


def _kv_heads(r: _Reader) -> None:
    heads = r.spec["num_attention_heads"]
    kv = r.int_("num_key_value_heads", heads)
    if heads % kv:
        raise r.error("num_key_value_heads", f"num_attention_heads ({heads}) is not divisible by num_key_value_heads "
                      f"({kv}); use a divisor of the head count")
    r.put("num_kv_heads", kv, "num_key_value_heads")


def _head_dim(r: _Reader, default: int | None = None) -> None:
    value = r.int_("head_dim", default, required=False)
    if value is not None:
        r.put("head_dim", value, "head_dim")


def _rotary_decoder(r: _Reader, *, tied_default: bool) -> None:
    """Llama-shaped decoder: RoPE, RMSNorm, gated MLP of intermediate_size."""
    _core(r)
    _kv_heads(r)
    _llama_block(r, tied_default=tied_default)


def _llama_block(r: _Reader, *, tied_default: bool) -> None:
    """What Llama-shaped configs share beyond the core sizes: gated MLP, RoPE, RMSNorm, context, tying."""
    r.put("ffn_hidden_size", r.int_("intermediate_size"), "intermediate_size")
    r.put("max_seq_len", r.int_("max_position_embeddings"), "max_position_embeddings")
    r.put("tied_embeddings", r.bool_("tie_word_embeddings", tied_default), "tie_word_embeddings")
    r.put("mlp_kind", "gated")
    r.put("position_embedding", "rotary")
    r.put("norm_kind", "rmsnorm")


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
    return sum(t == "sliding_attention" for t in types)


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


def _qwen3(r: _Reader) -> None:
    _rotary_decoder(r, tied_default=False)
    _head_dim(r, default=128)  # Qwen3Config default
    _attention_bias(r)
    r.put("qk_norm", True)
    _qwen_window(r)


def _qwen3_moe(r: _Reader) -> None:
    _qwen3(r)
    r.require("decoder_sparse_step", 1, "MoE on every layer is the only interleave planner models")
    dense = r.raw("mlp_only_layers") or []
    if dense != list(range(len(dense))):
        raise r.error("mlp_only_layers", f"{dense} is not a leading run of layers 0..k-1, the only dense-layer "
                      "placement planner models")
    _moe(r, experts="num_experts", ffn="moe_intermediate_size", dense_layers=len(dense))


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


def _gpt2(r: _Reader) -> None:
    _core(r, layers="n_layer", hidden="n_embd", heads="n_head")
    hidden = r.spec["hidden_size"]
    r.put("ffn_hidden_size", r.int_("n_inner", 4 * hidden, required=False), "n_inner")
    r.put("max_seq_len", r.int_("n_positions"), "n_positions")
    r.put("tied_embeddings", r.bool_("tie_word_embeddings", True), "tie_word_embeddings")
    r.put("mlp_kind", "standard")
    r.put("position_embedding", "learned")
    r.put("norm_kind", "layernorm")
    for field in ("qkv_bias", "attention_output_bias", "mlp_bias"):
        r.put(field, True)


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


def _q_lora_rank(r: _Reader) -> int | None:
    """Required key; null means queries are projected directly (DeepSeek-V2-Lite)."""
    if "q_lora_rank" not in r.data:
        raise r.error("q_lora_rank", "missing; give the query compression rank, or null for none")
    return r.int_("q_lora_rank", required=False)


def _deepseek_v3(r: _Reader) -> None:
    _core(r)  # no _kv_heads: MLA derives keys and values from the shared latent
    _llama_block(r, tied_default=False)
    r.require("attention_bias", False, "planner's MLA count has no projection biases")
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
    topk_method = r.raw("topk_method") or "noaux_tc"
    # noaux_tc routing adds a learned per-expert correction bias (e_score_correction_bias).
    _moe(r, experts="n_routed_experts", ffn="moe_intermediate_size", shared=shared, dense_layers=dense,
         router_bias=topk_method == "noaux_tc")


# Keys each reader ignores on purpose, with the reason (shown in docs/models.md).
_LLAMA_IGNORED = {"pretraining_tp": "tensor-parallel split of the original checkpoint; same shapes",
                  "hidden_act": _ACT, **{k: _ROPE for k in ROPE_KEYS}}
_MOE_ROUTING = {"output_router_logits": "training output switch", "router_aux_loss_coef": "load-balancing loss weight",
                "router_jitter_noise": "training-time router noise", "norm_topk_prob": "routing normalisation"}
_QWEN_IGNORED = {**_LLAMA_IGNORED, "use_mrope": "multimodal rotary variant; no weights"}
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
    "qwen3_moe": {**_QWEN_IGNORED, **_MOE_ROUTING},
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
                    "n_group": "group-limited routing", "topk_group": "group-limited routing",
                    "routed_scaling_factor": "routing weight scale", "scoring_func": "routing score function",
                    "norm_topk_prob": "routing normalisation", "aux_loss_alpha": "load-balancing loss weight",
                    "seq_aux": "load-balancing loss variant", "ep_size": "expert-parallel degree of the original run",
                    "num_nextn_predict_layers": "multi-token-prediction module: not part of the served model "
                                                "(HF's DeepseekV3ForCausalLM does not build it)"},
}

READERS: dict[str, Callable[[_Reader], None]] = {
    "llama": _llama, "mistral": _mistral, "mixtral": _mixtral, "qwen2": _qwen2, "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe, "gemma": _gemma, "gemma2": _gemma2, "phi3": _phi3, "gpt2": _gpt2,
    "gpt_neox": _gpt_neox, "deepseek_v3": _deepseek_v3,
}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(READERS))

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


def _check_leftovers(r: _Reader) -> None:
    for key, allowed in COMMON_REQUIRED_VALUES.items():
        r.require(key, allowed, "planner models decoder-only transformers")
    ignored = IGNORED_KEYS.get(r.model_type, {})
    for key in sorted(r.data):
        if key in r.used or key in COMMON_IGNORED_KEYS or key in ignored:
            continue
        raise r.error(key, f"unknown key for model_type '{r.model_type}'; planner cannot tell whether it changes "
                      "the architecture. Remove it if it does not, or describe the model in planner's YAML spec")


def _name(data: dict[str, Any], source: str) -> str:
    """`_name_or_path` when the file has one, else the folder of a config.json, else the file name."""
    for key in _DISPLAY_NAMES:
        if isinstance(data.get(key), str) and data[key]:
            return data[key]
    path = PurePath(source)
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def model_from_hf_config(data: dict, source: str) -> ModelSpec:
    """Map a HuggingFace config.json dict to a ModelSpec, refusing anything it cannot map exactly."""
    if not isinstance(data, dict):
        raise PlannerError(f"expected a JSON object, got {type(data).__name__}", source=source)
    model_type = data.get("model_type")
    if model_type not in READERS:
        supported = ", ".join(SUPPORTED_MODEL_TYPES)
        what = f"unsupported model_type {model_type!r}" if model_type is not None else "missing model_type"
        raise PlannerError(f"{what}; supported: {supported}", source=source, field="model_type")
    reader = _Reader(data, source, model_type)
    READERS[model_type](reader)
    _dropout(reader)
    _check_leftovers(reader)
    spec = {"name": _name(data, source), "source": f"HF config.json ({model_type}): {source}", **reader.spec}
    try:
        return ModelSpec.model_validate(spec)
    except ValidationError as err:
        loc = err.errors()[0]["loc"]
        key = reader.origin.get(str(loc[0])) if loc else None
        raise PlannerError(describe_validation_error(err), source=source, field=key) from None
