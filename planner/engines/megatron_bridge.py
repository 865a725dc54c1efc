"""Megatron-Bridge's ConfigContainer YAML -> the Megatron-LM arguments planner's Megatron reader takes, and back.

Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge, the NeMo framework's Megatron-Core trainer since 2025) describes a
run as a `ConfigContainer` of dataclasses and writes it out as YAML in two places a user has:
- `run_config.yaml` in every checkpoint iteration folder (what `AutoBridge` reads back), and
- the `------- Task Configuration -------` block it prints at start-up (`ConfigContainer.print_yaml`, v0.2-v0.3;
  v0.4 on logs a summary of the fields that differ from Megatron-Core's defaults instead: configuration_summary);
and it takes a partial YAML of the same shape as an override of a recipe (`--config-file`, the tutorials'
`conf/*.yaml`). Every section is a dataclass dump with `_target_` keys (ignored here). The writer at the end makes
such an override of a layout.

The sections and fields read (megatron/bridge/training/config.py, mixed_precision.py, comm_overlap.py @ v0.6.0):
- `model` (a GPTModelProvider: Megatron-Core's TransformerConfig and ModelParallelConfig fields; or a GPTModelConfig,
  the same TransformerConfig fields nested under `transformer` with the GPT ones beside it): the model's
  shape and the layout, under the names Megatron-LM's arguments take with '-' for '_' (MODEL_VALUES and
  MODEL_SWITCHES list them),
  plus the few whose argument differs (RENAMED: `num_moe_experts` is `--num-experts`, `fp8` is `--fp8-format`,
  `fp8_param` is `--fp8-param-gather`, `num_layers_in_first_pipeline_stage` is
  `--decoder-first-pipeline-num-layers`, ...) and those that are flags in Megatron-LM but values here
  (`gated_linear_unit` + `activation_func` -> `--swiglu` / `--squared-relu`, `add_bias_linear: false` ->
  `--disable-bias-linear`, `share_embeddings_and_output_weights: false` -> `--untie-embeddings-and-output-weights`,
  `attention_backend: AttnBackend(n)` -> its name, `num_query_groups` -> `--group-query-attention`);
- `train`: `global_batch_size`, `micro_batch_size`; `dataset`: `sequence_length` (or `seq_length`);
- `ddp`: `use_distributed_optimizer`, `overlap_grad_reduce`, `grad_reduce_in_fp32`, `use_megatron_fsdp`,
  `data_parallel_sharding_strategy`, `fp8_param_gather`;
- `optimizer`: `optimizer`, `use_precision_aware_optimizer`, `main_grads_dtype`, `main_params_dtype`,
  `exp_avg_dtype`, `exp_avg_sq_dtype` (`_target_: torch.bfloat16` -> bf16), `optimizer_cpu_offload`;
- `mixed_precision` (applied onto the model by Megatron-Bridge, so it wins over the model's own fields when set):
  `bf16`, `fp16`, `fp8`, `fp8_recipe`, `fp8_param_gather`, `fp4`, `fp4_recipe`, `fp4_param_gather` (or `fp4_param`),
  `grad_reduce_in_fp32`; a recipe name (`bf16_mixed`, `bf16_with_fp8_current_scaling_mixed`, `bf16_with_mxfp8_mixed`,
  `bf16_with_nvfp4_mixed`, ...) is read by what it names;
- `comm_overlap`: `tp_comm_overlap`, `overlap_moe_expert_parallel_comm`, `delay_wgrad_compute` (CommOverlapConfig sets
  the model's at run time);
- `tokenizer`: `vocab_size`, where the model gives none (padded as Megatron pads the tokenizer's vocabulary).
A value of null is Megatron-Bridge's "unset" and is not passed on. The GPU count is not in the file (give --gpus).
"""

from __future__ import annotations

import ast
import math
import re
import reprlib
from collections.abc import Mapping
from typing import Any

import yaml

from planner.engines import load, megatron
from planner.engines.common import ExportContext, lora_targets_of, prediction_lines
from planner.errors import PlannerError
from planner.physics.rotary import yarn_concentration_factor
from planner.specs.bounds import over_limit
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec

# model fields whose Megatron-LM argument is the same name with '-' for '_': int/float/str values
MODEL_VALUES = (
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
    "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size", "num_layers", "hidden_size",
    "ffn_hidden_size", "num_attention_heads", "kv_channels", "make_vocab_size_divisible_by", "moe_router_topk",
    "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_layer_freq", "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend", "moe_expert_capacity_factor", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
    "qk_pos_emb_head_dim", "v_head_dim", "mtp_num_layers", "recompute_granularity", "recompute_method",
    "recompute_num_layers", "cpu_offloading_num_layers", "cuda_graph_impl", "fp8_recipe", "fp4_recipe", "softmax_type",
    "window_attn_skip_freq", "pipeline_model_parallel_layout", "normalization", "position_embedding_type",
    "moe_mlp_glu_interleave_size", "hybrid_override_pattern", "hybrid_layer_pattern", "attention_dropout",
    "moe_latent_size", "moe_expert_rank_capacity_factor",
    "hidden_dropout", "experimental_attention_variant", "linear_attention_freq", "dsa_indexer_n_heads",
    "dsa_indexer_head_dim", "dsa_indexer_topk", "dsa_indexer_topk_freq", "dsa_kernel_backend",
    *(flag.replace("-", "_") for flag in megatron.GDN_SIZE_FLAGS),
)
# model fields that are store_true flags in Megatron-LM: passed when true
MODEL_SWITCHES = (
    "sequence_parallel", "add_qkv_bias", "qk_layernorm", "multi_latent_attention", "moe_router_enable_expert_bias",
    "moe_enable_deepep", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute", "moe_shared_expert_overlap",
    "overlap_dispatch_backward_with_experts_wgrad", "moe_paged_stash", "fine_grained_activation_offloading",
    "moe_pad_expert_input_to_capacity", "enable_cuda_graph", "external_cuda_graph", "cpu_offloading", "tp_comm_overlap",
    "fp8_dot_product_attention", "fp8_multi_head_attention", "activation_func_fp8_input_store",
    "use_transformer_engine_op_fuser", "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
    "moe_shared_expert_gate", "moe_layer_recompute", "distribute_saved_activations", "bf16", "fp16",
    "dsa_indexer_use_sparse_loss", "attention_output_gate",
)
# model fields whose Megatron-LM argument has another name
RENAMED = {
    "num_moe_experts": "num-experts", "fp8": "fp8-format", "fp8_param": "fp8-param-gather", "fp4": "fp4-format",
    "fp4_param": "fp4-param-gather",
    "num_layers_in_first_pipeline_stage": "decoder-first-pipeline-num-layers",
    "num_layers_in_last_pipeline_stage": "decoder-last-pipeline-num-layers",
    "microbatch_group_size_per_vp_stage": "microbatch-group-size-per-virtual-pipeline-stage",
}
# Megatron-Core's enums as dumped (`{_target_: ...enums.AttnBackend, _args_: [5]}`): value -> the name Megatron-LM's
# arguments take (megatron/core/transformer/enums.py @ d98e8a64; CudaGraphScope is the older numbering)
ATTN_BACKENDS = {1: "flash", 2: "fused", 3: "unfused", 4: "local", 5: "auto"}
ENUMS: dict[str, dict[int, str]] = {
    "AttnBackend": ATTN_BACKENDS,
    "CudaGraphModule": {1: "attn", 2: "mlp", 3: "moe", 4: "moe_router", 5: "moe_preprocess", 6: "mamba"},
    "CudaGraphScope": {1: "full_iteration", 2: "attn", 3: "mlp", 4: "moe", 5: "moe_router", 6: "moe_preprocess",
                       7: "mamba", 8: "full_iteration_inference"},
}
# torch dtypes as Megatron-LM's --*-dtype arguments name them
TORCH_DTYPES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16",
                "torch.float8_e4m3fn": "fp8", "torch.uint8": "fp8"}
OPTIMIZER_DTYPES = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
# mixed_precision given as a recipe name (megatron/bridge/training/mixed_precision.py @ v0.6.0, each registered with
# '_' and with '-'): the fields each sets that planner reads. The fp16 recipes reduce gradients in fp16
# (grad_reduce_in_fp32 False), the bf16 ones in fp32. The current-scaling recipes also keep the first and last
# layers in 16 bits (first_last_layers_bf16), which planner does not model.
_BF16 = {"bf16": True, "grad_reduce_in_fp32": True}
_FP16 = {"fp16": True, "grad_reduce_in_fp32": False}
PRECISION_RECIPES: dict[str, dict[str, Any]] = {
    "bf16_mixed": _BF16,
    "fp16_mixed": _FP16,
    **{f"{half}_with_fp8_delayed_scaling_mixed": {**base, "fp8": "hybrid", "fp8_recipe": "delayed",
                                                  "fp8_param_gather": True}
       for half, base in (("bf16", _BF16), ("fp16", _FP16))},
    **{f"{half}_with_fp8_current_scaling_mixed": {**base, "fp8": "hybrid", "fp8_recipe": "tensorwise",
                                                  "fp8_param_gather": True}
       for half, base in (("bf16", _BF16), ("fp16", _FP16))},
    "nemotron_h_bf16_with_fp8_current_scaling_mixed": {**_BF16, "fp8": "hybrid", "fp8_recipe": "tensorwise",
                                                       "fp8_param_gather": True},
    "nanov2_bf16_with_fp8_current_scaling_mixed": {**_BF16, "fp8": "hybrid", "fp8_recipe": "blockwise",
                                                   "fp8_param_gather": True},
    **{f"{half}_with_mxfp8_mixed": {**base, "fp8": "e4m3", "fp8_recipe": "mxfp8", "fp8_param_gather": True}
       for half, base in (("bf16", _BF16), ("fp16", _FP16))},
    **{f"{half}_with_fp8_subchannel_scaling_mixed": {**base, "fp8": "hybrid", "fp8_recipe": "blockwise",
                                                     "fp8_param_gather": False}
       for half, base in (("bf16", _BF16), ("fp16", _FP16))},
}
# NVFP4 (@ v0.6.0): fp4 e2m1 with the nvfp4 recipe, the layers' weights kept and gathered in NVFP4
PRECISION_RECIPES["bf16_with_nvfp4_mixed"] = {**_BF16, "fp4": "e2m1", "fp4_recipe": "nvfp4", "fp4_param_gather": True}
# recipes that keep layers in 16 bits, which planner does not model: name -> why
UNMODELLED_RECIPES = {"nemotron_3_super_bf16_with_nvfp4_mixed": "keeps its last 14 layers in bf16 "
                      "(first_last_layers_bf16, num_layers_at_end_in_bf16 14), which planner does not model"}
SECTIONS = ("model", "train", "dataset", "ddp", "optimizer", "mixed_precision", "comm_overlap", "dist", "tokenizer")
# What an override file (no top-level `_target_: ...ConfigContainer`: a partial config merged onto a recipe) leaves to
# the recipe, taken from the base every pre-training recipe starts from (megatron/bridge/recipes/common.py
# _pretrain_common @ v0.6.0): bf16 mixed precision, the distributed optimizer, fp32 gradient reduction overlapped
# with the backward pass. A recipe that changes them (an fp8 recipe, FSDP) is not seen: the reader says so.
RECIPE_BASE: dict[str, dict[str, Any]] = {
    "mixed_precision": PRECISION_RECIPES["bf16_mixed"],
    "ddp": {"use_distributed_optimizer": True, "grad_reduce_in_fp32": True, "overlap_grad_reduce": True},
}


def is_bridge_config(data: Any) -> bool:
    """Whether parsed YAML is a Megatron-Bridge ConfigContainer (full or an override): a mapping with a `model`
    or `train` section and no key outside the container's sections (plus `_target_` and the ones ignored)."""
    if not isinstance(data, Mapping) or not any(isinstance(data.get(s), Mapping) for s in ("model", "train")):
        return False
    target = str(data.get("_target_", ""))
    return target.endswith("ConfigContainer") or isinstance(data.get("model"), Mapping)


def parse_bridge_text(text: str, source: str) -> Mapping[str, Any] | None:
    """The YAML of a Megatron-Bridge config, or None when the text is not one (an argument list, a launch script).
    From a log: its `------- Task Configuration -------` block (v0.2-v0.3), else its `Configuration Summary`
    (v0.4 on)."""
    block = task_configuration(text)
    if block is None:
        summary = configuration_summary(text)
        if summary is not None:
            return summary
    body = block if block is not None else text
    try:  # planner's YAML loader: duplicate keys, nesting and non-finite numbers refused, shared aliases walked once
        data = load.parse_yaml(body, source, engine=True)
    except PlannerError:
        if _BRIDGE_SECTION.search(body):
            raise  # a Megatron-Bridge file that is not valid YAML: say so
        return None  # Megatron-LM arguments or a launch script
    return data if is_bridge_config(data) else None


_BRIDGE_SECTION = re.compile(r"^(?:model|train|_target_):", re.MULTILINE)


TASK_HEADER = "------- Task Configuration -------"
SUMMARY_HEADER = "Configuration Summary (Non-Default Values vs Megatron Core)"
SUMMARY_TARGET = "logged summary of a ConfigContainer"
_SUMMARY_SECTION = re.compile(r"^\[(\w+)\](?: Non-default values \(vs Mcore \w+\))?:\s*$")
_SUMMARY_ENTRY = re.compile(r"^  (\w+): (.*?)(?:  \(Mcore default: .*\))?\s*$")
_ENUM_REPR = re.compile(r"^<\w+\.(\w+): [^>]*>$")
_LIST_ITEM = re.compile(r"<\w+\.(\w+): [^>]*>|'([^']*)'")


def config_block(text: str) -> str | None:
    """The part of a log that holds its Megatron-Bridge config, from its header on (either form), or None."""
    for header in (TASK_HEADER, SUMMARY_HEADER):
        start = text.find(header)
        if start >= 0:
            return text[start:]
    return None


def configuration_summary(text: str) -> dict[str, Any] | None:
    """The config Megatron-Bridge v0.4+ logs at start-up instead of the whole YAML
    (ConfigContainer.log_non_default_values, megatron/bridge/training/config.py @ v0.6.0): for the model,
    ddp and optimizer sections the fields that differ from Megatron-Core's defaults, `  name: repr  (Mcore
    default: repr)`; for train, dataset, tokenizer and the rest every set field, `  name: repr`. A field not
    printed has Megatron-Core's default, so the result is read as a whole config, not as a recipe override.
    None when the text holds no summary."""
    start = text.find(SUMMARY_HEADER)
    if start < 0:
        return None
    config: dict[str, Any] = {"_target_": SUMMARY_TARGET}
    section: dict[str, Any] | None = None
    for line in text[start + len(SUMMARY_HEADER):].splitlines()[2:]:
        if line.startswith("=" * 10):
            break
        m = _SUMMARY_SECTION.match(line)
        if m:
            section = config.setdefault(m.group(1), {})
            continue
        m = _SUMMARY_ENTRY.match(line)
        if m and section is not None:
            section[m.group(1)] = _logged_value(m.group(2))
    if not isinstance(config.get("model"), dict):
        return None
    # a field the summary leaves out has Megatron-Core's default; the one the reader would otherwise take from
    # Megatron-LM's bf16 rule: DistributedDataParallelConfig.grad_reduce_in_fp32 = False (bf16 gradient reduction)
    config.setdefault("ddp", {}).setdefault("grad_reduce_in_fp32", False)
    return config


def _logged_value(text: str) -> Any:
    """A value as `repr` printed it: Python literals, enum members (`<AttnBackend.auto: 5>` -> auto), torch dtypes
    (`torch.bfloat16` -> bf16); anything else as the text."""
    text = text.strip()
    if text in TORCH_DTYPES:
        return TORCH_DTYPES[text]
    m = _ENUM_REPR.match(text)
    if m:
        return m.group(1)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    if text.startswith("[") and text.endswith("]"):  # a list of enum members and strings: [<CudaGraphModule.attn: 1>]
        return [enum or quoted for enum, quoted in _LIST_ITEM.findall(text)]
    return text


def task_configuration(text: str) -> str | None:
    """The YAML Megatron-Bridge prints at start-up between `------- Task Configuration -------` and a line of
    dashes (megatron/bridge/training/setup.py), or None."""
    start = text.find(TASK_HEADER)
    if start < 0:
        return None
    lines = text[start + len(TASK_HEADER):].splitlines()[1:]
    block: list[str] = []
    for line in lines:
        if line.startswith("----"):
            break
        block.append(line)
    return "\n".join(block)


def _plain(value: Any, top: bool = True) -> Any:
    """A dumped value as Megatron-LM's argument takes it: `{_target_: torch.bfloat16}` -> bf16, an enum
    `{_target_: ...AttnBackend, _args_: [5]}` -> auto, the items of a list (one level: no field nests deeper,
    and a YAML alias of lists of lists is not walked into) likewise, anything else as is."""
    if isinstance(value, (list, tuple)):
        return [_plain(v, top=False) for v in value] if top else value
    if isinstance(value, Mapping) and "_target_" in value:
        target = str(value["_target_"])
        if target in TORCH_DTYPES:
            return TORCH_DTYPES[target]
        names = ENUMS.get(target.rsplit(".", 1)[-1])
        if names is not None:
            args = value.get("_args_") or []
            if args and isinstance(args[0], int) and args[0] in names:
                return names[args[0]]
            if args and isinstance(args[0], str) and args[0] in names.values():
                return args[0]
            return f"<{target} {reprlib.repr(args)}>"  # not a member planner knows: the reader names it in its error
        return value
    return value


def _flag_value(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


# Megatron-Bridge's LoRA (megatron/bridge/peft/lora.py @ 067f987d: dim 32, and linear_qkv, linear_proj,
# linear_fc1 and linear_fc2 unless target_modules says otherwise).
BRIDGE_LORA_DIM = 32
BRIDGE_LORA_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")


def peft_fields(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Layout fields of a Megatron-Bridge config's `peft` section (LoRA: lora_rank and lora_targets); none without
    one. Megatron-LM's arguments, which bridge_tokens produces, have no LoRA flag, so the callers add these to the
    job's own fields. DoRA and other PEFT schemes are refused."""
    peft = data.get("peft")
    if peft in (None, False, "none", "None"):
        return {}
    if isinstance(peft, str):
        if peft.lower() != "lora":
            raise PlannerError(f"peft {peft!r}: planner models LoRA only", source=source, field="peft")
        return {"lora_rank": BRIDGE_LORA_DIM, "lora_targets": lora_targets_of(list(BRIDGE_LORA_TARGETS))}
    if not isinstance(peft, Mapping):
        raise PlannerError(f"expected a PEFT config (a mapping), got {reprlib.repr(peft)}", source=source, field="peft")
    kind = str(peft.get("_target_", "LoRA")).rsplit(".", 1)[-1]
    if kind != "LoRA":
        raise PlannerError(f"peft {kind}: planner models LoRA only (DoRA's weight decomposition is not modelled)",
                           source=source, field="peft._target_")
    dim = peft.get("dim", BRIDGE_LORA_DIM)
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise PlannerError(f"peft.dim must be a positive whole number, got {reprlib.repr(dim)}", source=source,
                           field="peft.dim")
    targets = peft.get("target_modules") or list(BRIDGE_LORA_TARGETS)
    if isinstance(targets, str):
        targets = [targets]
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise PlannerError(f"peft.target_modules must be module names, got {reprlib.repr(targets)}", source=source,
                           field="peft.target_modules")
    return {"lora_rank": dim, "lora_targets": lora_targets_of(targets)}


def bridge_tokens(data: Mapping[str, Any], source: str) -> tuple[list[str], list[str]]:
    """The Megatron-LM arguments a Megatron-Bridge config stands for, and warnings (see the module docstring)."""
    warnings: list[str] = []
    sections: dict[str, dict[str, Any]] = {}
    data = _with_recipe_base(data, warnings, source)
    for name in SECTIONS:
        section = data.get(name)
        if section is None:
            continue
        if name == "mixed_precision" and isinstance(section, str):
            section = section.replace("-", "_")  # Megatron-Bridge registers each recipe under both spellings
            if section in UNMODELLED_RECIPES:
                raise PlannerError(f"{section} {UNMODELLED_RECIPES[section]}; use bf16_with_nvfp4_mixed or write "
                                   "the precision fields as a mapping", source=source, field="mixed_precision")
            if section not in PRECISION_RECIPES:
                raise PlannerError(f"{section!r} is not a recipe planner knows ("
                                   f"{', '.join(PRECISION_RECIPES)}); write its fields as a mapping", source=source,
                                   field="mixed_precision")
            section = PRECISION_RECIPES[section]
        if not isinstance(section, Mapping):
            what = "a recipe name or a mapping of its fields" if name == "mixed_precision" else "a mapping of its fields"
            raise PlannerError(f"expected {what}, got {reprlib.repr(section)}", source=source, field=name)
        sections[name] = {k: _plain(v) for k, v in section.items() if k != "_target_"}
    if data.get("_target_") == SUMMARY_TARGET:
        warnings.append(f"{source}: the logged configuration summary prints the TransformerConfig fields only, not the "
                        "GPT model's (tied embeddings, vocabulary, position embedding): read with Megatron-LM's "
                        "defaults (embeddings tied, the tokenizer's vocabulary); name the model (--job with model) "
                        "where they differ")
    model = dict(sections.get("model", {}))
    nested = model.pop("transformer", None)
    if nested is not None and not isinstance(nested, Mapping):
        raise PlannerError(f"expected a mapping of TransformerConfig fields, got {reprlib.repr(nested)}",
                           source=source, field="model.transformer")
    if isinstance(nested, Mapping):  # GPTModelConfig (Megatron-LM megatron/training/models/gpt.py): the
        # TransformerConfig nested under `transformer`, the GPT fields (vocab, sequence, embeddings) beside it
        model = {**{k: _plain(v) for k, v in nested.items() if k != "_target_"}, **model}
    # what Megatron-Bridge applies onto the model at run time wins over the model's own fields
    precision = sections.get("mixed_precision", {})
    for key in ("bf16", "fp16", "fp8", "fp8_recipe", "fp8_dot_product_attention", "fp8_multi_head_attention", "fp4",
                "fp4_recipe"):
        if precision.get(key) is not None:
            model[key] = precision[key]
    for key in ("fp8", "fp4"):  # fp4_param_gather and fp4_param are one setting (MixedPrecisionConfig keeps them equal)
        gather = precision.get(f"{key}_param_gather", precision.get(f"{key}_param"))
        if gather is not None:
            model[f"{key}_param"] = gather
    overlap = sections.get("comm_overlap", {})
    # CommOverlapConfig.setup applies these onto the model at run time, its value or False for each of the MoE pair
    # (comm_overlap.py _get_model_comm_overlap_cfgs @ 067f987df): where the section sets one, it wins
    for key in ("tp_comm_overlap", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute"):
        if overlap.get(key) is not None:
            model[key] = overlap[key]
    tokens: list[str] = []

    def put(flag: str, value: Any = None) -> None:
        tokens.append(f"--{flag}")
        if value is not None:
            tokens.extend(_flag_value(value))

    layout = model.get("pipeline_model_parallel_layout")
    if isinstance(layout, (list, tuple)):  # Megatron-Core's list form: one list of layer names per virtual stage
        model["pipeline_model_parallel_layout"] = _layout_string(layout, source)
    for key, value in model.items():  # each field read is checked against the kind of its argument, by its name
        _check_kind(f"model.{key}", value, _flag_of(key), source, RENAMED.get(key, key.replace("_", "-")))
    freq = model.get("moe_layer_freq")
    if isinstance(freq, (list, tuple)) and not all(isinstance(v, int) and not isinstance(v, bool) and v in (0, 1)
                                                   for v in freq):
        raise PlannerError("expected an integer or a list of 0 (dense) and 1 (MoE) per layer", source=source,
                           field="model.moe_layer_freq")
    for key in ("cuda_graph_scope", "recompute_modules"):  # names, one by one (never a nested list walked)
        value = model.get(key)
        if isinstance(value, (list, tuple)) and not all(isinstance(v, str) for v in value):
            raise PlannerError(f"expected a list of names, got {len(value)} items not all names", source=source,
                               field=f"model.{key}")
        if value is not None and not isinstance(value, (str, list, tuple)):
            raise PlannerError(f"expected a name or a list of names, got {reprlib.repr(value)}", source=source,
                               field=f"model.{key}")
    # a provider dumps its expert fields whatever the model; a file that says the model has no experts has no use
    # for them (an override that does not say takes them as written: the recipe's model decides)
    moe = "num_moe_experts" not in model or int(model.get("num_moe_experts") or 0) > 0
    for key in MODEL_VALUES:
        value = model.get(key)
        if value is None or value == "" or (key.startswith("moe_") and not moe):
            continue  # unset, or an expert setting of a dense model (the provider's defaults)
        if key == "moe_layer_freq" and isinstance(value, (list, tuple)):
            value = "[" + ",".join(str(v) for v in value) + "]"  # Megatron-LM's pattern expression
        put(key.replace("_", "-"), value)
    for key in MODEL_SWITCHES:
        if model.get(key) is True and not (key.startswith("moe_") and not moe):
            put(key.replace("_", "-"))
    for key, flag in RENAMED.items():
        value = model.get(key)
        if value is not None and value is not False:
            put(flag, None if value is True else value)
    _model_shape_flags(model, put, warnings, source)
    tokenizer_vocab = sections.get("tokenizer", {}).get("vocab_size")
    if model.get("vocab_size") is None and tokenizer_vocab is not None:
        put("vocab-size", tokenizer_vocab)  # the tokenizer's, padded for TP as the model pads it
    train = sections.get("train", {})
    for key in ("global_batch_size", "micro_batch_size"):
        if train.get(key) is not None:
            _check_kind(f"train.{key}", train[key], "int", source, key.replace("_", "-"))
            put(key.replace("_", "-"), train[key])
    dataset = sections.get("dataset", {})
    for key in ("sequence_length", "seq_length"):
        _check_kind(f"dataset.{key}", dataset.get(key), "int", source, "seq-length")
    data_seq = dataset.get("sequence_length", dataset.get("seq_length"))
    model_seq = model.get("seq_length")
    if data_seq is not None and model_seq is not None and data_seq != model_seq:
        warnings.append(f"{source}: dataset.sequence_length {data_seq} and model.seq_length {model_seq} differ; the "
                        "dataset's is read: its samples are the sequences trained (Megatron-Bridge v0.4+ asserts "
                        "they match)")
    seq = data_seq if data_seq is not None else model_seq
    if seq is not None:
        put("seq-length", seq)
    _ddp_flags(sections.get("ddp", {}), precision, put)
    _optimizer_flags(sections.get("optimizer", {}), put, warnings, source)
    if sections.get("dist", {}).get("use_torch_fsdp2"):
        put("use-torch-fsdp2")
    return tokens, warnings


def _with_recipe_base(data: Mapping[str, Any], warnings: list[str], source: str) -> Mapping[str, Any]:
    """An override file with what it leaves to the recipe filled from RECIPE_BASE (a full dump: unchanged)."""
    if str(data.get("_target_", "")).endswith("ConfigContainer"):
        return data
    merged = dict(data)
    filled: list[str] = []
    section = data.get("model")
    model: Mapping[str, Any] = section if isinstance(section, Mapping) else {}
    if data.get("mixed_precision") is None and not any(model.get(k) for k in ("bf16", "fp16", "fp8")):
        merged["mixed_precision"] = RECIPE_BASE["mixed_precision"]
        filled.append("mixed_precision bf16_mixed")
    ddp = data.get("ddp")
    if ddp is None or isinstance(ddp, Mapping):
        given = dict(ddp or {})
        for key, value in RECIPE_BASE["ddp"].items():
            if key not in given:
                given[key] = value
                filled.append(f"ddp.{key} {str(value).lower()}")
        merged["ddp"] = given
    if filled:
        warnings.append(f"{source}: an override file (no ConfigContainer _target_): what it leaves to its recipe is "
                        f"read as Megatron-Bridge's pre-training base (recipes/common.py): {', '.join(filled)}; a "
                        "recipe that sets these otherwise (fp8, FSDP) is not seen, so give them in the file")
    return merged


LAYOUT_LETTERS = {name: letter for letter, name in megatron.LAYOUT_LAYERS.items()}
MAX_LAYOUT_ENTRIES = 1_000_000  # layers named over all stages; a YAML alias cannot make more be walked


def _layout_string(stages: Any, source: str) -> str:
    """`pipeline_model_parallel_layout` as lists of names ([["embedding", "decoder"], ["decoder", "loss"]], what
    Megatron-Bridge's DeepSeek recipes set) -> Megatron-LM's argument string (`Et|tL`)."""
    field = "model.pipeline_model_parallel_layout"
    total = 0
    out: list[str] = []
    for stage in stages:
        if not isinstance(stage, (list, tuple)):
            raise PlannerError(f"expected a list of stages, each a list of layer names; got {reprlib.repr(stage)} as a "
                               "stage",
                               source=source, field=field)
        total += len(stage)
        if total > MAX_LAYOUT_ENTRIES:
            raise PlannerError(f"more than {MAX_LAYOUT_ENTRIES:,} layers named (planner's limit)", source=source,
                               field=field)
        if not all(isinstance(name, str) for name in stage):
            raise PlannerError("expected a list of stages, each a list of layer names; a stage holds something else",
                               source=source, field=field)
        unknown = sorted({name for name in stage if name not in LAYOUT_LETTERS})
        if unknown:
            raise PlannerError(f"unknown layer name {unknown[0]!r} (embedding, decoder, mtp, loss)", source=source,
                               field=field)
        out.append("".join(LAYOUT_LETTERS[name] for name in stage))
    return "|".join(out)


def _field_names() -> dict[str, str]:
    """Megatron-LM argument -> the Megatron-Bridge field it is read from (for error messages)."""
    names = {key.replace("_", "-"): f"model.{key}" for key in (*MODEL_VALUES, *MODEL_SWITCHES)}
    names.update({flag: f"model.{key}" for key, flag in RENAMED.items()})
    names.update({"global-batch-size": "train.global_batch_size", "micro-batch-size": "train.micro_batch_size",
                  "seq-length": "dataset.seq_length", "num-query-groups": "model.num_query_groups",
                  "vocab-size": "model.vocab_size", "padded-vocab-size": "model.vocab_size",
                  "window-size": "model.window_size", "attention-backend": "model.attention_backend",
                  "cuda-graph-scope": "model.cuda_graph_scope", "recompute-modules": "model.recompute_modules",
                  "rotary-scaling-factor": "model.yarn_rotary_scaling_factor", "mscale": "model.yarn_mscale",
                  "mscale-all-dim": "model.yarn_mscale_all_dim",
                  "data-parallel-sharding-strategy": "ddp.data_parallel_sharding_strategy",
                  "optimizer": "optimizer.optimizer", "muon-num-ns-steps": "optimizer.muon_num_ns_steps",
                  "muon-tp-mode": "optimizer.muon_tp_mode", "muon-no-split-qkv": "optimizer.muon_split_qkv",
                  "muon-use-syrk": "optimizer.muon_use_syrk", "muon-fp32-matmul-prec": "optimizer.muon_fp32_matmul_prec",
                  "muon-scalar-optimizer": "optimizer.muon_scalar_optimizer"})
    return names


FIELD_OF_FLAG = _field_names()
_FLAG_IN_TEXT = re.compile(r"--([a-z0-9-]+)")


def in_bridge_terms(err: PlannerError) -> PlannerError:
    """The Megatron reader's error about an argument, said with the Megatron-Bridge field it came from: the first
    such field becomes the error's field (`model.tensor_model_parallel_size: --tensor-model-parallel-size must be
    positive`), any later one is named beside its argument."""
    first: list[str] = []

    def name(match: re.Match[str]) -> str:
        field = FIELD_OF_FLAG.get(match.group(1))
        if field is None:
            return match.group(0)
        first.append(field)
        # the first field becomes the error's own field (printed before the message): its argument stays as is
        return match.group(0) if len(first) == 1 and err.field is None else f"{field} ({match.group(0)})"

    message = _FLAG_IN_TEXT.sub(name, err.message)
    return PlannerError(message, source=err.source, field=err.field or (first[0] if first else None))


def _flag_of(key: str) -> str | None:
    """The kind of the Megatron-LM argument a model field becomes (planner.engines.megatron.READ_FLAGS): int, float,
    str, list or bool; None for a field read another way or not at all."""
    if key in MODEL_SWITCHES:
        return "bool"
    flag = RENAMED.get(key, key.replace("_", "-"))
    if key in ("moe_layer_freq", "window_size", "cuda_graph_scope", "recompute_modules"):
        return None  # each checked where it is read
    if key in (*MODEL_VALUES, *RENAMED, "num_query_groups", "vocab_size", "seq_length"):
        return megatron.READ_FLAGS.get(flag, "int" if key in ("num_query_groups", "vocab_size") else None)
    if key in ("gated_linear_unit", "add_bias_linear", "share_embeddings_and_output_weights", "should_pad_vocab",
               "is_hybrid_model"):
        return "bool"
    return None


def _check_kind(field: str, value: Any, kind: str | None, source: str, flag: str | None = None) -> None:
    """One error naming the field when a value is not of its argument's kind (null is unset: always allowed), or,
    for a count, not positive or above planner's limit for what it counts (the Megatron reader's own checks of
    `flag`, said with the field)."""
    if value is None or kind is None:
        return
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool) and flag is not None:
        if value < (0 if flag in megatron.NON_NEGATIVE_FLAGS else 1):
            raise PlannerError(f"must be {'>= 0' if flag in megatron.NON_NEGATIVE_FLAGS else 'positive'}, got "
                               f"{value}", source=source, field=field)
        problem = over_limit(megatron.FLAG_LIMITS.get(flag, "count"), value)
        if problem:
            raise PlannerError(problem, source=source, field=field)
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = {"int": isinstance(value, int) and not isinstance(value, bool), "float": number, "bool": isinstance(value, bool),
          "str": isinstance(value, str) or number, "path": isinstance(value, str),
          "list": isinstance(value, (str, list))}.get(kind, True)
    if not ok:
        wanted = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
                  "path": "a path", "list": "a list"}[kind]
        raise PlannerError(f"expected {wanted}, got {reprlib.repr(value)}", source=source, field=field)


def _model_shape_flags(model: Mapping[str, Any], put: Any, warnings: list[str], source: str) -> None:
    """The model fields that are values in Megatron-Bridge and flags (or other names) in Megatron-LM."""
    heads, groups = model.get("num_attention_heads"), model.get("num_query_groups")
    if groups is not None and groups != heads:
        put("group-query-attention")
        put("num-query-groups", groups)
    activation = model.get("activation_func")
    name = str(activation.get("_target_", "")) if isinstance(activation, Mapping) else str(activation or "")
    if model.get("gated_linear_unit"):
        if name.endswith("silu") or not name:
            put("swiglu")
        elif name.endswith("quick_gelu"):
            put("quick-geglu")
        else:
            warnings.append(f"{source}: model.gated_linear_unit with activation {name}: read as SwiGLU (the same shapes)")
            put("swiglu")
    elif "squared_relu" in name:
        put("squared-relu")
    if model.get("add_bias_linear") is False:
        put("disable-bias-linear")
    if model.get("share_embeddings_and_output_weights") is False:
        put("untie-embeddings-and-output-weights")
    vocab = model.get("vocab_size")
    if vocab is not None:
        put("padded-vocab-size" if model.get("should_pad_vocab") is False else "vocab-size", vocab)
    backend = model.get("attention_backend")
    if backend is not None:
        if not (isinstance(backend, str) and backend in ATTN_BACKENDS.values()):
            raise PlannerError(f"{reprlib.repr(backend)} is not one of Megatron-Core's AttnBackend members "
                               f"({', '.join(ATTN_BACKENDS.values())})", source=source, field="model.attention_backend")
        put("attention-backend", backend)
    window = model.get("window_size")
    if window is not None:
        if not (isinstance(window, (list, tuple)) and len(window) == 2 and all(
                isinstance(w, int) and not isinstance(w, bool) for w in window)):
            raise PlannerError(f"expected [left, right] token counts, got {reprlib.repr(window)}", source=source,
                               field="model.window_size")
        put("window-size", f"{window[0]},{window[1]}")
    _yarn_flags(model, put, source)
    scope = model.get("cuda_graph_scope")
    graphs = model.get("cuda_graph_impl") not in (None, "none") or model.get("enable_cuda_graph") or model.get(
        "external_cuda_graph")
    if scope and graphs:  # the provider's default scope ("full") captures nothing without an impl
        put("cuda-graph-scope", scope if isinstance(scope, (list, tuple)) else [scope])
    modules = model.get("recompute_modules")
    if modules and model.get("recompute_granularity") == "selective":
        put("recompute-modules", modules)
    if model.get("is_hybrid_model") and not (model.get("hybrid_override_pattern") or model.get("hybrid_layer_pattern")):
        raise PlannerError("hybrid (Mamba) layer patterns are not modelled; planner models "
                           "transformer layers", source=source, field="model.is_hybrid_model")


def _yarn_flags(model: Mapping[str, Any], put: Any, source: str) -> None:
    """YaRN's context scale and mscale pair as Megatron-LM's --rotary-scaling-factor, --mscale and --mscale-all-dim:
    GPTModelProvider's yarn_* fields (MLA's providers use the unprefixed names). Megatron-Core takes the concentration
    factor as the ratio at the two mscales only where both are set, else 0.1 ln(s) + 1
    (yarn_rotary_pos_embedding._yarn_get_concentration_factor @ d98e8a64; Megatron-Bridge v0.6.0 gpt_provider.py
    passes the yarn_* fields to it), which Megatron-LM's defaults (1 and 0) give: the pair is written only whole."""
    prefix = "" if model.get("multi_latent_attention") else "yarn_"
    values: dict[str, float | None] = {}
    for name in ("rotary_scaling_factor", "mscale", "mscale_all_dim"):
        value = model.get(prefix + name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise PlannerError(f"expected a number, got {reprlib.repr(value)}", source=source,
                               field=f"model.{prefix}{name}")
        try:
            values[name] = None if value is None else float(value)
        except OverflowError:  # an integer beyond a float
            values[name] = math.inf
        value = values[name]
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise PlannerError(f"expected a finite, non-negative number, got {value!r}", source=source,
                               field=f"model.{prefix}{name}")
    scale, mscale, mscale_all_dim = values["rotary_scaling_factor"], values["mscale"], values["mscale_all_dim"]
    if scale is not None:
        factor = yarn_concentration_factor(scale, mscale, mscale_all_dim)
        if not (math.isfinite(factor) and 0 < factor <= 100):
            raise PlannerError(f"YaRN's attention factor from these fields is {factor:g}; planner takes (0, 100]: give "
                               "the model's own scale and mscale values", source=source,
                               field=f"model.{prefix}rotary_scaling_factor")
        put("rotary-scaling-factor", scale)
    if mscale is not None and mscale_all_dim is not None:
        put("mscale", mscale)
        put("mscale-all-dim", mscale_all_dim)


def _ddp_flags(ddp: Mapping[str, Any], precision: Mapping[str, Any], put: Any) -> None:
    if ddp.get("use_distributed_optimizer"):
        put("use-distributed-optimizer")
    if ddp.get("overlap_grad_reduce"):
        put("overlap-grad-reduce")
    grad_fp32 = precision.get("grad_reduce_in_fp32", ddp.get("grad_reduce_in_fp32"))
    if grad_fp32 is True:
        put("accumulate-allreduce-grads-in-fp32")
    elif grad_fp32 is False:
        put("grad-reduce-in-bf16")
    if ddp.get("use_megatron_fsdp") or ddp.get("use_custom_fsdp"):
        put("use-megatron-fsdp")
        if ddp.get("data_parallel_sharding_strategy"):
            put("data-parallel-sharding-strategy", ddp["data_parallel_sharding_strategy"])
    if ddp.get("fp8_param_gather"):
        put("fp8-param-gather")


def _optimizer_flags(optimizer: Mapping[str, Any], put: Any, warnings: list[str], source: str) -> None:
    if optimizer.get("optimizer"):
        put("optimizer", optimizer["optimizer"])
    # Muon's settings: Megatron-Core's OptimizerConfig fields, the arguments of the same names
    # (megatron/core/optimizer/optimizer_config.py @ d98e8a64)
    for key in ("muon_num_ns_steps", "muon_tp_mode", "muon_fp32_matmul_prec", "muon_scalar_optimizer"):
        if optimizer.get(key) is not None:
            _check_kind(f"optimizer.{key}", optimizer[key], megatron.READ_FLAGS[key.replace("_", "-")], source)
            put(key.replace("_", "-"), optimizer[key])
    if optimizer.get("muon_split_qkv") is False:
        put("muon-no-split-qkv")
    if optimizer.get("muon_use_syrk"):
        put("muon-use-syrk")
    if optimizer.get("use_distributed_optimizer"):
        put("use-distributed-optimizer")
    if optimizer.get("use_precision_aware_optimizer"):
        put("use-precision-aware-optimizer")
        for key in OPTIMIZER_DTYPES:
            value = optimizer.get(key)
            if isinstance(value, str):
                put(key.replace("_", "-"), value)
    if optimizer.get("optimizer_cpu_offload"):
        fraction = optimizer.get("optimizer_offload_fraction")
        _check_kind("optimizer.optimizer_offload_fraction", fraction, "float", source)
        if fraction is not None and float(fraction) <= 0:
            warnings.append(f"{source}: optimizer.optimizer_cpu_offload with optimizer_offload_fraction {fraction}: "
                            "nothing is offloaded; read as no offload")
            return
        if fraction is not None and float(fraction) < 1:
            warnings.append(f"{source}: optimizer_offload_fraction {fraction}: planner offloads the whole optimizer "
                            "state or none; read as all of it")
        put("optimizer-cpu-offload")


# --- writer ----------------------------------------------------------------------------------------
# Layout -> an override file for a Megatron-Bridge recipe (the YAML that `process_config_with_overrides` merges onto a
# recipe's ConfigContainer: tutorials/recipes/llama/02_pretrain_with_yaml.py --config-file, @ v0.6.0). The recipe
# builds the model, so the file holds the layout only: the Megatron-LM flags planner writes for the layout
# (planner.engines.megatron.layout_flags) under the ConfigContainer fields that hold them (WRITTEN_FIELDS), the
# precision as the recipe that sets it, and the dtypes and enums in the form `to_yaml` dumps them.

# flag -> (section, field); a flag with no value writes true
WRITTEN_FIELDS: dict[str, tuple[str, str]] = {
    **{f: ("model", f.replace("-", "_")) for f in (
        "tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
        "expert-model-parallel-size", "expert-tensor-parallel-size", "sequence-parallel", "recompute-granularity",
        "recompute-method", "recompute-num-layers", "recompute-modules", "account-for-embedding-in-pipeline-split",
        "pipeline-model-parallel-layout",
        "account-for-loss-in-pipeline-split", "moe-token-dispatcher-type", "moe-flex-dispatcher-backend",
        "moe-enable-deepep", "moe-shared-expert-overlap", "overlap-dispatch-backward-with-experts-wgrad",
        "moe-expert-capacity-factor", "moe-pad-expert-input-to-capacity", "cuda-graph-impl", "cuda-graph-scope",
        "mtp-num-layers", "cpu-offloading", "cpu-offloading-num-layers", "fp8-dot-product-attention",
        "activation-func-fp8-input-store")},
    "decoder-first-pipeline-num-layers": ("model", "num_layers_in_first_pipeline_stage"),
    "decoder-last-pipeline-num-layers": ("model", "num_layers_in_last_pipeline_stage"),
    "microbatch-group-size-per-virtual-pipeline-stage": ("model", "microbatch_group_size_per_vp_stage"),
    "micro-batch-size": ("train", "micro_batch_size"),
    "global-batch-size": ("train", "global_batch_size"),
    "use-distributed-optimizer": ("ddp", "use_distributed_optimizer"),
    "overlap-grad-reduce": ("ddp", "overlap_grad_reduce"),
    "use-megatron-fsdp": ("ddp", "use_megatron_fsdp"),
    "data-parallel-sharding-strategy": ("ddp", "data_parallel_sharding_strategy"),
    "ckpt-format": ("checkpoint", "ckpt_format"),
    "optimizer": ("optimizer", "optimizer"),
    "use-precision-aware-optimizer": ("optimizer", "use_precision_aware_optimizer"),
    "optimizer-cpu-offload": ("optimizer", "optimizer_cpu_offload"),
    "tp-comm-overlap": ("comm_overlap", "tp_comm_overlap"),
    # the recipes set the MoE overlap pair here: CommOverlapConfig.setup overwrites the model's with these (False where
    # a CommOverlapConfig leaves them unset), so a model-level value under a recipe's CommOverlapConfig would be lost
    "overlap-moe-expert-parallel-comm": ("comm_overlap", "overlap_moe_expert_parallel_comm"),
    "delay-wgrad-compute": ("comm_overlap", "delay_wgrad_compute"),
}
# flags the writer spells another way: the precision (a recipe name), the sequence (model and dataset), the
# optimizer's dtypes and the attention backend (dumped objects), the virtual stages (a count per rank)
PRECISION_FLAGS = frozenset({"bf16", "fp16", "fp8-format", "fp8-recipe", "fp8-param-gather", "fp4-format",
                             "fp4-recipe", "fp4-param-gather", "grad-reduce-in-bf16",
                             "accumulate-allreduce-grads-in-fp32"})
# Muon's settings, written whole from the layout below (the flags carry only what differs from Megatron's defaults)
MUON_FLAGS = frozenset({"muon-num-ns-steps", "muon-tp-mode", "muon-no-split-qkv"})
# the Megatron-Bridge recipe for a layout's precision: (dtype, fp8 recipe) -> name; its gradient reduction and
# fp8 parameter gathering are the recipe's (PRECISION_RECIPES)
RECIPE_OF: dict[tuple[str, str | None], str] = {
    ("bf16", None): "bf16_mixed", ("fp16", None): "fp16_mixed",
    ("fp8", "tensorwise"): "bf16_with_fp8_current_scaling_mixed",
    ("fp8", "delayed"): "bf16_with_fp8_delayed_scaling_mixed",
    ("fp8", "mxfp8"): "bf16_with_mxfp8_mixed",
    ("fp8", "blockwise"): "bf16_with_fp8_subchannel_scaling_mixed",
    ("fp4", None): "bf16_with_nvfp4_mixed",
}
ATTN_BACKEND_VALUES = {name: value for value, name in ATTN_BACKENDS.items()}


def precision_recipe(lay: Layout) -> str:
    return RECIPE_OF[(lay.dtype, lay.fp8_recipe if lay.dtype == "fp8" else None)]


def engine_layout(model: ModelSpec, layout: Layout) -> tuple[Layout, tuple[str, ...]]:
    """What a Megatron-Bridge override runs for this layout: Megatron-LM's (planner.engines.megatron.engine_layout),
    with the gradient reduction and fp8 parameter gathering of the precision recipe it names, and without the
    fused grouped MLP (switched on by an environment variable, not by the file)."""
    mapped, notes = megatron.engine_layout(model, layout)
    recipe = PRECISION_RECIPES[precision_recipe(mapped)]
    changes: dict[str, Any] = {}
    more: list[str] = []
    grad = "fp32" if recipe["grad_reduce_in_fp32"] else mapped.dtype if mapped.dtype == "fp16" else "bf16"
    if mapped.grad_dtype != grad:
        changes["grad_dtype"] = grad
        more.append(f"grad_dtype {mapped.grad_dtype} -> {grad}: the file names the mixed-precision recipe "
                    f"{precision_recipe(mapped)}, which reduces gradients in {grad} (set "
                    "cfg.mixed_precision.grad_reduce_in_fp32 in the training script to change it)")
    gather = recipe.get(f"{mapped.dtype}_param_gather")
    if gather is not None and mapped.fp8_param_gather != gather and (mapped.zero >= 1 or not gather):
        changes["fp8_param_gather"] = gather
        more.append(f"fp8_param_gather {str(mapped.fp8_param_gather).lower()} -> "
                    f"{str(gather).lower()}: the recipe {precision_recipe(mapped)} sets it")
    if mapped.moe_fused_mlp:
        changes["moe_fused_mlp"] = False
        more.append("moe_fused_mlp -> false: Transformer Engine's fused grouped MLP is switched on by "
                    f"{megatron.FUSED_MLP_ENV}=1 in the environment with model.use_transformer_engine_op_fuser and "
                    "model.moe_mlp_glu_interleave_size 32, which an override file cannot carry")
    if changes:
        mapped = mapped.model_copy(update=changes)
    return mapped, (*notes, *more)


def override(model: ModelSpec, lay: Layout) -> dict[str, Any]:
    """The ConfigContainer fields of the layout, by section (see WRITTEN_FIELDS)."""
    out: dict[str, dict[str, Any]] = {name: {} for name in ("model", "train", "dataset", "ddp", "optimizer",
                                                             "comm_overlap", "checkpoint")}
    flags = megatron.layout_flags(model, lay)
    tokens = [tok for flag in flags for tok in flag]
    i = 0
    while i < len(tokens):
        name = tokens[i][2:]
        values: list[str] = []
        i += 1
        while i < len(tokens) and not tokens[i].startswith("--"):
            values.append(tokens[i])
            i += 1
        if name in PRECISION_FLAGS or name in MUON_FLAGS:
            continue
        if name == "seq-length":
            out["model"]["seq_length"] = out["dataset"]["seq_length"] = int(values[0])
        elif name == "num-layers-per-virtual-pipeline-stage":
            out["model"]["virtual_pipeline_model_parallel_size"] = lay.interleave
        elif name in ("exp-avg-dtype", "exp-avg-sq-dtype"):
            out["optimizer"][name.replace("-", "_")] = {"_call_": False, "_target_": "torch.bfloat16"}
        elif name == "attention-backend":
            out["model"]["attention_backend"] = {"_args_": [ATTN_BACKEND_VALUES[values[0]]], "_call_": True,
                                                 "_target_": "megatron.core.transformer.enums.AttnBackend"}
        elif name in WRITTEN_FIELDS:
            section, field = WRITTEN_FIELDS[name]
            out[section][field] = True if not values else values if name in LIST_FLAGS else _scalar(values[0])
        else:  # a flag the layout writer gained without a field here: a bug to fix, not a file to write
            raise PlannerError(f"--{name}: planner has no Megatron-Bridge field for it yet; export --to megatron")
    if lay.optimizer == "muon":  # stated whole: Megatron-Bridge's distributed-Muon helper defaults to blockwise
        out["optimizer"].update(muon_num_ns_steps=lay.muon_ns_steps, muon_tp_mode=lay.muon_tp_mode,
                                muon_split_qkv=lay.muon_split_qkv)
    if lay.offload_optimizer:
        out["optimizer"]["optimizer_offload_fraction"] = 1.0  # Megatron-Bridge's default is 0.0: nothing offloaded
    # the distributed optimizer from ZeRO 1 up: Megatron-FSDP always runs it (ConfigContainer
    # _validate_and_apply_megatron_fsdp_configs turns it on)
    out["ddp"]["use_distributed_optimizer"] = out["optimizer"]["use_distributed_optimizer"] = lay.zero >= 1
    out["ddp"].setdefault("overlap_grad_reduce", False)
    recipe = precision_recipe(lay)
    out["ddp"]["grad_reduce_in_fp32"] = PRECISION_RECIPES[recipe]["grad_reduce_in_fp32"]  # as the recipe sets it
    result: dict[str, Any] = {name: section for name, section in out.items() if section}
    result["mixed_precision"] = recipe
    if lay.lora_rank is not None:  # Megatron-Bridge's PEFT: LoRA of that dim on the modules the targets name
        modules = {"attention": ["linear_qkv", "linear_proj"], "qkv": ["linear_qkv"]}
        result["peft"] = {"_target_": "megatron.bridge.peft.lora.LoRA", "dim": lay.lora_rank,
                          "target_modules": modules.get(lay.lora_targets, list(BRIDGE_LORA_TARGETS))}
    return result


LIST_FLAGS = frozenset({"recompute-modules", "cuda-graph-scope"})


def _scalar(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def render(ctx: ExportContext) -> str:
    lay = ctx.layout
    lines = ["# Megatron-Bridge override file: merged onto the recipe that builds the model, e.g.",
             "#   python tutorials/recipes/llama/02_pretrain_with_yaml.py --config-file <this file>",
             "# (Megatron-Bridge's process_config_with_overrides; the recipe keeps the model, data, tokenizer,",
             "# learning rate and checkpoints). Degrees, batch, recompute, precision and MoE dispatch are set here."]
    lines += [f"# {line}" for line in prediction_lines(ctx)]
    nodes = -(-lay.gpus // ctx.hardware.node.gpus_per_node)
    lines.append(f"# Run on {lay.gpus} GPUs: torchrun --nnodes {nodes} --nproc-per-node "
                 f"{min(lay.gpus, ctx.hardware.node.gpus_per_node)} <script> --config-file <this file>")
    return "\n".join(lines) + "\n" + yaml.safe_dump(override(ctx.model, lay), sort_keys=False,
                                                    default_flow_style=False)
