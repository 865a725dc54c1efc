"""DeepSpeed JSON config -> Layout fields, read as DeepSpeed's runtime reads it.

What the JSON holds: the ZeRO stage, the batch sizes (with DeepSpeed's derivation
rules and the HuggingFace Trainer's "auto"), bf16/fp16, the gradient-accumulation
dtype, the optimizer, activation checkpointing, AutoTP's `tensor_parallel.autotp_size`,
the pipeline engine's `pipeline.stages` and Ulysses' `sequence_parallel_size` (read as
context parallelism: the same split of the sequence). What it does not hold (model, GPU
count, sequence length, what the model code decides: attention kernel, which layers are
checkpointed, fp8 through Transformer Engine) comes from the job, or from the `_planner`
block that `planner export --to deepspeed` writes (DeepSpeed ignores it). Parallel degrees
are never taken from that block: a layout DeepSpeed keys cannot express is not exported.

Refused as DeepSpeed refuses them: bf16 without ZeRO with fp32 gradient accumulation
(DeepSpeed >= 0.18.5, engine._do_optimizer_sanity_check), ZeRO 2/3 with a pipeline
(PipelineEngine asserts). CPU offload of optimizer states and parameters is read (offload_optimizer,
offload_param, torch_adam); NVMe offload and ZeRO++ secondary partitions are refused because planner
does not model them (exit 2, naming the setting).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from planner.engines.common import (
    Collected,
    EngineImport,
    ExportContext,
    data_parallel_degree,
    prediction_lines,
    require,
    resolve_batch,
)
from planner.errors import PlannerError
from planner.specs.bounds import over_limit
from planner.specs.layout import Layout, Zero
from planner.specs.model import ModelSpec
from planner.specs.validation import field_problem

PLANNER_KEY = "_planner"

# Top-level keys that do not change per-GPU memory (logging, schedules, clipping, checkpoint I/O).
IGNORED_KEYS: frozenset[str] = frozenset({
    "scheduler", "gradient_clipping", "steps_per_print", "wall_clock_breakdown", "prescale_gradients",
    "gradient_predivide_factor", "communication_data_type", "seq_parallel_communication_data_type",
    "tensorboard", "wandb", "csv_monitor", "comet", "monitor_config", "flops_profiler", "comms_logger",
    "memory_breakdown", "dump_state", "checkpoint", "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer", "sparse_gradients", "timers", "disable_allgather",
    "dataloader_drop_last", "load_universal_checkpoint", "use_node_local_storage", "graph_harvesting",
    "eigenvalue", "progressive_layer_drop", "nebula", "compile", "use_data_before_expert_parallelism",
    "zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "fp16", "bf16", "bfloat16", "data_types", "optimizer", "activation_checkpointing", "pipeline",
    "tensor_parallel", "amp", "aio", "sequence_parallel_size", "data_parallel_size", PLANNER_KEY,
})
# Layout fields the model code decides (DeepSpeed has no key for them): the only ones read from `_planner`.
MODEL_CODE_FIELDS: tuple[str, ...] = ("seq_len", "recompute", "recompute_layers_per_stage", "flash_attention",
                                      "dtype", "fp8_recipe", "optimizer")

# Settings that change memory in ways planner does not model: read the rest, say so on stderr.
APPROXIMATED_KEYS: dict[str, str] = {
    "curriculum_learning": "curriculum learning shortens early sequences; planner uses the full seq_len",
    "data_efficiency": "data-efficiency sampling/routing is not modelled; planner uses the full seq_len",
    "elasticity": "elastic training may change the batch size; planner uses the configured one",
    "autotuning": "autotuning picks micro-batch and ZeRO settings at run time; planner uses the ones given",
    "compression_training": "compression training (quantisation/pruning) is not modelled",
    "sparse_attention": "sparse attention is not modelled; planner assumes dense attention",
    "quantize_training": "quantised training is not modelled",
    "hybrid_engine": "the RLHF hybrid engine's inference buffers are not modelled",
}

ZERO_IGNORED: frozenset[str] = frozenset({
    "stage", "contiguous_gradients", "reduce_scatter", "allgather_partitions", "overlap_comm",
    "load_from_fp32_weights", "elastic_checkpoint", "sub_group_size", "stage3_param_persistence_threshold",
    "stage3_model_persistence_threshold", "stage3_max_reuse_distance", "stage3_max_live_parameters", "stage3_gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save", "gather_16bit_weights_on_model_save", "ignore_unused_parameters",
    "legacy_stage1", "round_robin_gradients", "memory_efficient_linear", "use_multi_rank_bucket_allreduce",
    "stage3_module_granularity_threshold", "stage3_use_all_reduce_for_fetch_params", "pipeline_loading_checkpoint",
    "override_module_apply", "log_trace_cache_warnings", "zero_quantized_weights",
    "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "mics_hierarchical_params_gather",
    "offload_optimizer", "offload_param", "cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory",
    "zero_hpz_partition_size", "mics_shard_size", "zeropp_loco_param",
})
BUCKET_KEYS: tuple[str, ...] = ("reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size")
# zero_optimization keys that hold a count or a size (DeepSpeedZeroConfig: int fields, some written as 5e8): not
# modelled, but each must still be a number within the limit of any integer engine setting (docs/errors.md).
ZERO_COUNT_KEYS: tuple[str, ...] = BUCKET_KEYS + (
    "sub_group_size", "stage3_param_persistence_threshold", "stage3_model_persistence_threshold",
    "stage3_max_reuse_distance", "stage3_max_live_parameters", "stage3_module_granularity_threshold",
    "zero_hpz_partition_size", "mics_shard_size",
)

# Optimizer state per parameter: Adam-like keep two fp32 moments, the rest one.
ADAM_LIKE: frozenset[str] = frozenset({
    "adam", "adamw", "fusedadam", "cpuadam", "deepspeedcpuadam", "onebitadam", "zerooneadam", "lamb",
    "fusedlamb", "onebitlamb",
})
ONE_STATE: frozenset[str] = frozenset({"sgd", "lion", "fusedlion", "adagrad", "cpuadagrad"})

_DTYPES = {"fp32": "fp32", "float32": "fp32", "torch.float32": "fp32", "bf16": "bf16", "bfloat16": "bf16",
           "torch.bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "torch.float16": "fp16"}


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == "auto"


def _int_or_auto(config: Mapping[str, Any], key: str, source: str) -> int | None:
    """An int, or None when the key is missing or "auto" (the HF Trainer fills those)."""
    value = config.get(key)
    if value is None or _is_auto(value):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlannerError(f"must be a positive integer or \"auto\", got {value!r}", source=source, field=key)
    problem = over_limit(_KEY_LIMITS.get(key, "count"), value)
    if problem:
        raise PlannerError(problem, source=source, field=key)
    return value


_KEY_LIMITS = {"train_batch_size": "global_batch", "train_micro_batch_size_per_gpu": "micro_batch",
               "gradient_accumulation_steps": "grad_accum"}


def _count_setting(section: Mapping[str, Any], key: str, source: str, field: str) -> None:
    """An integer setting planner does not model: absent, "auto", or a whole number (5e8 is one) of at most
    2^53 in size; true/false, other strings, fractions and non-finite numbers are errors."""
    value = section.get(key)
    if value is None or _is_auto(value):
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and math.isfinite(value) and not value.is_integer()):
        raise PlannerError(f"must be a whole number or \"auto\", got {value!r}", source=source, field=field)
    problem = over_limit("count", value) or (over_limit("count", -value) and f"{value:.3g} is below -2^53; see "
                                                                             "docs/errors.md")
    if problem:
        raise PlannerError(problem, source=source, field=field)


def _enabled(section: Any, key: str, source: str) -> bool | None:
    """`{"enabled": true|false|"auto"}` -> True/False, None for "auto" or a missing section."""
    if section is None:
        return None
    if not isinstance(section, dict):
        raise PlannerError("expected a mapping with 'enabled'", source=source, field=key)
    value = section.get("enabled", False)
    if _is_auto(value):
        return None
    if not isinstance(value, bool):
        raise PlannerError(f"enabled must be true, false or \"auto\", got {value!r}", source=source, field=key)
    return value


def _offload_device(section: Any) -> str:
    if isinstance(section, dict):
        return str(section.get("device", "none")).lower()
    return "none" if not section else "cpu"


def _read_zero(config: Mapping[str, Any], got: Collected) -> None:
    zero = config.get("zero_optimization")
    if zero is None:
        return
    if not isinstance(zero, dict):
        raise PlannerError("expected a mapping", source=got.source, field="zero_optimization")
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise PlannerError(f"stage must be 0, 1, 2 or 3, got {stage!r}", source=got.source, field="zero_optimization.stage")
    got.set("zero", stage, "zero_optimization.stage")
    overlap = zero.get("overlap_comm")
    if isinstance(overlap, bool):
        got.set("overlap_grad_reduce", overlap, "zero_optimization.overlap_comm")
    elif overlap is None or _is_auto(overlap):  # DeepSpeedZeroConfig: None -> on for stage 3 only
        got.set("overlap_grad_reduce", stage == 3, "zero_optimization.overlap_comm", explicit=False)
    for key, name in (("offload_optimizer", "offload_optimizer"), ("offload_param", "offload_params")):
        device = _offload_device(zero.get(key))
        if device == "cpu":
            got.set(name, True, f"zero_optimization.{key}.device")
        elif device not in ("none", ""):
            raise PlannerError(
                f"{device.upper()} offload is not modelled by planner (only CPU offload is: it moves "
                f"{'optimizer states' if key == 'offload_optimizer' else 'parameters'} to host memory); use "
                "device cpu or none",
                source=got.source, field=f"zero_optimization.{key}.device",
            )
    for key, name in (("cpu_offload", "offload_optimizer"), ("cpu_offload_param", "offload_params")):
        if zero.get(key):
            got.set(name, True, f"zero_optimization.{key}")
    for key in ZERO_COUNT_KEYS:
        _count_setting(zero, key, got.source, f"zero_optimization.{key}")
    hpz = zero.get("zero_hpz_partition_size", 1)
    if isinstance(hpz, int) and hpz > 1:
        raise PlannerError("ZeRO++ hierarchical partitioning keeps a secondary parameter copy that planner does "
                           "not model; remove it or set it to 1", source=got.source,
                           field="zero_optimization.zero_hpz_partition_size")
    mics = zero.get("mics_shard_size", -1)
    if isinstance(mics, int) and mics > 0:
        raise PlannerError("MiCS shards within sub-groups, which planner does not model; remove mics_shard_size",
                           source=got.source, field="zero_optimization.mics_shard_size")
    buckets = [f"{k}={zero[k]}" for k in BUCKET_KEYS if k in zero and not _is_auto(zero[k])]
    if buckets:
        got.warn(f"zero_optimization {', '.join(buckets)}: bucket sizes are not read; planner sizes ZeRO "
                 "communication buffers as one layer's parameters/gradients")
    for key in zero:
        if key not in ZERO_IGNORED and key not in BUCKET_KEYS:
            got.warn(f"zero_optimization.{key} is not known to planner and was ignored; if it changes memory, "
                     "the estimate does not include it")


def _read_precision(config: Mapping[str, Any], got: Collected) -> None:
    fp16 = _enabled(config.get("fp16"), "fp16", got.source)
    bf16_section = config.get("bf16", config.get("bfloat16"))
    bf16 = _enabled(bf16_section, "bf16", got.source)
    amp = _enabled(config.get("amp"), "amp", got.source)
    if amp:
        raise PlannerError("NVIDIA Apex AMP is not modelled; use bf16 or fp16 mixed precision", source=got.source,
                           field="amp.enabled")
    if fp16 and bf16:
        raise PlannerError("fp16 and bf16 are both enabled; enable one", source=got.source, field="bf16.enabled")
    if fp16:
        got.set("dtype", "fp16", "fp16.enabled")
    elif bf16:
        got.set("dtype", "bf16", "bf16.enabled")
    elif bf16 is False:
        raise PlannerError("bf16 is disabled and fp16 is not enabled, so DeepSpeed trains in fp32, which planner "
                           "does not model; enable bf16 or fp16", source=got.source, field="bf16.enabled")
    _read_bf16_states(bf16_section, got)
    data_types = config.get("data_types") or {}
    accum = data_types.get("grad_accum_dtype") if isinstance(data_types, dict) else None
    if accum is not None:
        if str(accum).lower() not in _DTYPES:
            raise PlannerError(f"unknown dtype {accum!r}; use fp32, bf16 or fp16", source=got.source,
                               field="data_types.grad_accum_dtype")
        got.set("grad_dtype", _DTYPES[str(accum).lower()], "data_types.grad_accum_dtype")


def _read_bf16_states(section: Any, got: Collected) -> None:
    """bf16.bf16_master_weights_and_grads (the bf16 weights are the master copy and gradients stay bf16) and
    bf16.bf16_optimizer_states (Adam's moments in bf16 too), deepspeed/runtime/precision_config.py
    (deepspeedai/DeepSpeed#7700, 39a682d7); DeepSpeedConfig asserts the second needs the first. The ZeRO-stage
    and offload requirements are checked once the stage is known (`_check_bf16_states`)."""
    if not isinstance(section, dict):
        return
    flags = {}
    for key in ("bf16_master_weights_and_grads", "bf16_optimizer_states"):
        value = section.get(key, False)
        if not isinstance(value, bool):
            raise PlannerError(f"must be true or false, got {value!r}", source=got.source, field=f"bf16.{key}")
        flags[key] = value
    if flags["bf16_optimizer_states"] and not flags["bf16_master_weights_and_grads"]:
        raise PlannerError("bf16_optimizer_states needs bf16_master_weights_and_grads (DeepSpeed asserts it); set "
                           "both or neither", source=got.source, field="bf16.bf16_optimizer_states")
    if flags["bf16_master_weights_and_grads"]:
        got.set("master_weights_dtype", "bf16", "bf16.bf16_master_weights_and_grads")
        got.set("grad_dtype", "bf16", "bf16.bf16_master_weights_and_grads")
    if flags["bf16_optimizer_states"]:
        got.set("optimizer_state_dtype", "bf16", "bf16.bf16_optimizer_states")


def _check_bf16_states(fields: Mapping[str, Any], got: Collected) -> None:
    """DeepSpeed runs bf16 master weights with ZeRO 1-3 only (DeepSpeedConfig), and with fp32 optimizer states
    only under ZeRO-Offload with DeepSpeedCPUAdam (ZeROOptimizer._configure_master_weights)."""
    if fields.get("master_weights_dtype") != "bf16":
        return
    where = "bf16.bf16_master_weights_and_grads"
    if fields.get("dtype") not in ("bf16", "fp8"):
        raise PlannerError("bf16_master_weights_and_grads needs bf16 training; enable bf16", source=got.source,
                           field=where)
    if int(fields.get("zero", 0)) < 1:
        raise PlannerError("bf16_master_weights_and_grads is only supported with ZeRO stage 1, 2 or 3 (DeepSpeed "
                           "asserts it); set zero_optimization.stage", source=got.source, field=where)
    if fields.get("optimizer_state_dtype") != "bf16" and not fields.get("offload_optimizer"):
        raise PlannerError("bf16_master_weights_and_grads without bf16_optimizer_states needs ZeRO-Offload "
                           "(offload_optimizer device cpu, DeepSpeedCPUAdam): DeepSpeed keeps the fp32 states on the "
                           "CPU; add bf16_optimizer_states or the offload", source=got.source, field=where)
    if fields.get("grad_dtype") != "bf16":
        raise PlannerError(f"bf16_master_weights_and_grads keeps gradients in bf16, and "
                           f"{got.origin.get('grad_dtype', 'the job')} says {fields.get('grad_dtype')}; remove one",
                           source=got.source, field=where)


def _read_optimizer(config: Mapping[str, Any], got: Collected) -> None:
    opt = config.get("optimizer")
    if not isinstance(opt, dict) or "type" not in opt:
        return  # the client's optimizer (HF Trainer: AdamW); the job's or planner's default applies
    name = str(opt["type"]).lower().replace("_", "")
    if name in ADAM_LIKE:
        got.set("optimizer", "adam", "optimizer.type")
        params = opt.get("params")
        if isinstance(params, dict) and params.get("torch_adam") is True:  # with offload: torch.optim's Adam steps the CPU states
            got.set("cpu_optimizer", "torch", "optimizer.params.torch_adam")
    elif name in ONE_STATE:
        got.set("optimizer", "sgd", "optimizer.type")
        if name != "sgd":
            got.warn(f"optimizer {opt['type']} keeps one state per parameter; planner counts it as SGD with "
                     "momentum (fp32 master + one fp32 state)")
    else:
        raise PlannerError(f"optimizer {opt['type']!r} is not modelled; planner knows Adam-like optimizers "
                           "(Adam, AdamW, Lamb, 1-bit Adam) and one-state ones (SGD, Lion, Adagrad)",
                           source=got.source, field="optimizer.type")


def _read_checkpointing(config: Mapping[str, Any], got: Collected, *, said: bool) -> None:
    """`pipeline.activation_checkpoint_interval` > 0 makes DeepSpeed's PipelineModule checkpoint its layers.
    An `activation_checkpointing` section only configures DeepSpeed's checkpointing API: whether layers are
    checkpointed is up to the model code (Megatron-DeepSpeed's --checkpoint-activations, the HF Trainer's
    --gradient_checkpointing). So the section reads as recompute full by default, which the job may
    override; `said` is whether the job (or planner's own export) states it, else a warning says so."""
    ac = config.get("activation_checkpointing")
    if ac is not None and not isinstance(ac, dict):
        raise PlannerError(f"expected a mapping (e.g. {{\"partition_activations\": false}}), got {ac!r}",
                           source=got.source, field="activation_checkpointing")
    pipe = config.get("pipeline") if isinstance(config.get("pipeline"), dict) else {}
    interval = pipe.get("activation_checkpoint_interval", 0) if pipe else 0
    if isinstance(interval, int) and not isinstance(interval, bool) and interval > 0:
        got.set("recompute", "full", "pipeline.activation_checkpoint_interval")
    if isinstance(ac, dict):
        if ac.get("cpu_checkpointing"):
            raise PlannerError("checkpointed activations offloaded to the CPU are not modelled; set it to false",
                               source=got.source, field="activation_checkpointing.cpu_checkpointing")
        if "recompute" not in got.values:
            got.set("recompute", "full", "activation_checkpointing", explicit=False)
            if not said:
                got.warn("activation_checkpointing configures DeepSpeed's checkpointing API, but the model code "
                         "decides whether layers are checkpointed (HF Trainer: --gradient_checkpointing); read as "
                         "recompute full. If the model does not checkpoint, give parallel.recompute none "
                         "(--recompute none)")
        if ac.get("partition_activations"):
            got.warn("activation_checkpointing.partition_activations splits checkpoints across tensor-parallel "
                     "ranks; planner does not model the split (its activation figure is an upper bound)")


def _read_degrees(config: Mapping[str, Any], got: Collected) -> None:
    sp = config.get("sequence_parallel_size")
    if sp is not None:
        if isinstance(sp, bool) or not isinstance(sp, int) or sp < 1:
            raise PlannerError(f"must be a positive integer, got {sp!r}", source=got.source,
                               field="sequence_parallel_size")
        if sp > 1:
            got.set("cp", sp, "sequence_parallel_size")
            got.warn(f"sequence_parallel_size {sp} (DeepSpeed Ulysses) is modelled as context parallelism: the same "
                     "split of the sequence and of the activations; Ulysses' all-to-all of the attention heads is "
                     "timed as ring attention's exchange")
    dp_size = config.get("data_parallel_size")
    if isinstance(dp_size, int) and not isinstance(dp_size, bool) and dp_size >= 1:
        got.set("dp", dp_size, "data_parallel_size")
    tp_section = config.get("tensor_parallel")
    if isinstance(tp_section, dict):
        size = tp_section.get("autotp_size", tp_section.get("tp_size", 0))
        if isinstance(size, int) and size > 1:
            got.set("tp", size, "tensor_parallel.autotp_size")
    pipe = config.get("pipeline")
    if isinstance(pipe, dict):
        stages = pipe.get("stages", "auto")
        if isinstance(stages, int) and not isinstance(stages, bool) and stages >= 1:
            got.set("pp", stages, "pipeline.stages")


def _bf16_optimizer(fields: dict[str, Any], got: Collected, given: Mapping[str, Any]) -> None:
    """bf16 without ZeRO, as DeepSpeed's _do_optimizer_sanity_check (>= 0.18.5) picks the optimizer for it.

    - gradients accumulated in bf16 (the default: grad_accum_dtype follows the model dtype) with a
      pipeline (PipelineModule): BF16_Optimizer, which shards the fp32 master weights and optimizer states
      over data parallelism, i.e. ZeRO 1; without a pipeline the unsharded DDP_BFLOAT16 path, ZeRO 0;
    - fp32 accumulation without ZeRO: DeepSpeed raises NotImplementedError ('unsupported mix of model_dtype
      and grad_accum_dtype'); 0.18.5 removed the BF16_Optimizer branch that earlier versions took for it
      (deepspeedai/DeepSpeed commit 09885efe, #7790)."""
    if fields.get("dtype") not in ("bf16", "fp8") or int(fields.get("zero", 0)) != 0:
        return
    if fields.get("grad_dtype") == "fp32":
        where = got.origin.get("grad_dtype", "training.grad_dtype")
        raise PlannerError(f"bf16 without ZeRO with fp32 gradient accumulation ({where}): DeepSpeed >= 0.18.5 "
                           "refuses it ('unsupported mix of model_dtype and grad_accum_dtype'); use "
                           "zero_optimization.stage 1 (BF16_Optimizer) or grad_accum_dtype \"bf16\"",
                           source=got.source, field="data_types.grad_accum_dtype")
    if int(fields.get("pp", 1)) > 1 and "zero" not in given:
        fields["zero"] = 1
        got.origin["zero"] = "bf16 with a pipeline (DeepSpeed's BF16_Optimizer shards optimizer states as ZeRO 1)"


def _planner_fallback(config: Mapping[str, Any], source: str) -> dict[str, Any]:
    """What the model code decides, from the `_planner` block an export wrote: used only where neither the
    config's keys nor the job set it. Degrees and batch sizes are never read from it."""
    block = config.get(PLANNER_KEY)
    if not isinstance(block, dict):
        return {}
    fields = block.get("model_code", block.get("layout"))
    if not isinstance(fields, dict):
        return {}
    out = {k: v for k, v in fields.items() if k in MODEL_CODE_FIELDS}
    where = "model_code" if "model_code" in block else "layout"
    for key, value in out.items():  # checked as Layout checks them, before any arithmetic uses them
        problem = field_problem(Layout, key, value)
        if problem:
            raise PlannerError(problem, source=source, field=f"{PLANNER_KEY}.{where}.{key}")
    return out


def import_deepspeed(
    config: Any, *, gpus: int, given: Mapping[str, Any], source: str
) -> EngineImport:
    """A DeepSpeed config dict, the GPU count and the job's own layout fields -> Layout fields."""
    if not isinstance(config, dict):
        raise PlannerError("a DeepSpeed config is a JSON object", source=source)
    got = Collected(source=source)
    got.set("engine", "deepspeed", "the engine file", explicit=False)  # the engine that reads it runs it
    for key, note in APPROXIMATED_KEYS.items():
        if key in config:
            got.warn(f"{key}: {note}")
    for key in config:
        if key not in IGNORED_KEYS and key not in APPROXIMATED_KEYS:
            got.warn(f"{key} is not known to planner and was ignored; if it changes memory, the estimate does "
                     "not include it")
    _read_zero(config, got)
    _read_precision(config, got)
    _read_optimizer(config, got)
    fallback = _planner_fallback(config, source)
    _read_checkpointing(config, got, said="recompute" in given or fallback.get("recompute") == "full")
    _read_degrees(config, got)

    fields = got.merge({k: v for k, v in given.items() if k not in ("global_batch", "micro_batch")}, fallback)
    if fields.get("dtype") == "bf16" and fallback.get("dtype") == "fp8" and "dtype" not in given:
        fields["dtype"] = "fp8"  # an exported fp8 layout: bf16 is its base precision, fp8 the GEMMs (TE, in code)
        got.origin["dtype"] = f"{PLANNER_KEY}.layout.dtype"
    if fields.get("dtype") is None:
        auto = any(isinstance(config.get(k), dict) and _is_auto(config[k].get("enabled")) for k in ("bf16", "fp16"))
        raise PlannerError(
            ("bf16/fp16 \"enabled\" is \"auto\" (the HuggingFace Trainer fills it from --bf16/--fp16)" if auto else
             "the config enables neither bf16 nor fp16 (DeepSpeed would train in fp32, which planner does not model)")
            + "; give training.dtype or --dtype", source=source)
    if "grad_dtype" not in fields:
        # DeepSpeed's engine.get_data_types() (0.18+): gradients accumulate in the model dtype unless
        # data_types.grad_accum_dtype says otherwise (fp8 trains on a bf16 base).
        fields["grad_dtype"] = "bf16" if fields["dtype"] == "fp8" else fields["dtype"]
    _bf16_optimizer(fields, got, given)
    _check_bf16_states(fields, got)
    if int(fields.get("pp", 1)) > 1 and int(fields.get("zero", 0)) >= 2:
        raise PlannerError(f"ZeRO {fields['zero']} with pipeline.stages {fields['pp']}: DeepSpeed's PipelineEngine "
                           "asserts 'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'; use stage 0 or 1",
                           source=source, field="zero_optimization.stage")
    if not fields.get("offload_optimizer"):
        fields.pop("cpu_optimizer", None)  # torch_adam picks the CPU optimizer only for offloaded states

    dp = data_parallel_degree(gpus, fields, source)
    fields["dp"] = dp
    train = _int_or_auto(config, "train_batch_size", source)
    micro = _int_or_auto(config, "train_micro_batch_size_per_gpu", source)
    accum = _int_or_auto(config, "gradient_accumulation_steps", source)
    for name, file_value, key in (("global_batch", train, "train_batch_size"),
                                  ("micro_batch", micro, "train_micro_batch_size_per_gpu")):
        if name in given and file_value is not None and given[name] != file_value:
            raise PlannerError(f"{name} = {given[name]} contradicts {key} = {file_value} in the engine file; "
                               "remove it from the job or change the file", source=source)
    names = ("train_batch_size" if train is not None else "training.global_batch",
             "train_micro_batch_size_per_gpu" if micro is not None else "parallel.micro_batch",
             "gradient_accumulation_steps")
    # DeepSpeedConfig's batch check counts world_size / sequence_parallel_size ranks, or the pipeline mpu's
    # data-parallel ranks; AutoTP's groups come after it, so with autotp_size > 1 (and no pipeline) its
    # train_batch_size counts every tensor-parallel rank too, as the HF Trainer's "auto" fills it
    # (world_size x per-device batch x accumulation). planner's global batch is sequences per step.
    replicas = int(fields.get("tp", 1)) if "tp" in got.values and int(fields.get("pp", 1)) == 1 else 1
    given_train = given.get("global_batch")
    train = train if train is not None else (given_train * replicas if given_train is not None else None)
    micro = micro if micro is not None else given.get("micro_batch")
    if micro is None and train is None and _is_auto(config.get("train_micro_batch_size_per_gpu")):
        raise PlannerError("train_micro_batch_size_per_gpu is \"auto\" (the HuggingFace Trainer fills it from "
                           "--per_device_train_batch_size); give parallel.micro_batch or --micro-batch",
                           source=source)
    counted, fields["micro_batch"] = resolve_batch(
        global_batch=train, micro_batch=micro, grad_accum=accum, dp=dp * replicas, source=source, names=names,
    )
    fields["global_batch"] = counted // replicas
    require(fields, "seq_len", source, "a DeepSpeed config has no sequence length; add it to the job or pass --seq-len")
    return EngineImport(format="deepspeed", source=source, fields=fields, warnings=tuple(got.warnings),
                        origins=dict(got.origin))


# --- writer ----------------------------------------------------------------------------------------
# Layout -> DeepSpeed JSON config.
#
# Every parallel degree is a DeepSpeed key (tensor_parallel.autotp_size, pipeline.stages,
# sequence_parallel_size for Ulysses), or the layout is not exported. JSON has no comments, so
# planner's prediction goes in a top-level `"_planner"` key, which DeepSpeed's config reader never
# looks up; the same block holds what the model code decides and DeepSpeed has no key for (sequence
# length, which layers are checkpointed, the attention kernel, fp8 through Transformer Engine, the
# client optimizer), which `planner check` reads back only where the job is silent.

def engine_layout(model: ModelSpec, layout: Layout) -> tuple[Layout, tuple[str, ...]]:
    """The layout DeepSpeed runs for this one, with a note per change; PlannerError when DeepSpeed cannot.

    Refused: expert parallelism (DeepSpeed MoE takes ep_size in the model code), interleaved or GPipe
    pipelines (the PipelineEngine runs one 1F1B schedule), ZeRO 2/3 with a pipeline (it asserts), fp8
    parameter gathering, and context parallelism whose degree does not divide the attention and KV heads
    (Ulysses splits heads). Mapped: AutoTP has no sequence parallelism and no overlapped TP communication;
    without ZeRO, gradients accumulate in the model dtype (fp32 accumulation needs ZeRO >= 1) and bf16 with
    a pipeline runs BF16_Optimizer, which shards the optimizer states as ZeRO 1."""
    if layout.ep > 1:
        raise PlannerError(f"ep({layout.ep}): DeepSpeed MoE sets ep_size in the model code "
                           "(deepspeed.moe.layer.MoE), not in its config; export for Megatron-LM or torchtitan")
    if layout.interleave > 1:
        raise PlannerError(f"interleave({layout.interleave}): DeepSpeed's pipeline engine has no interleaved "
                           "schedule; use interleave 1")
    if layout.pp > 1 and layout.schedule == "gpipe":
        raise PlannerError("schedule gpipe: DeepSpeed's pipeline engine runs 1F1B; use schedule 1f1b")
    if layout.pp > 1 and layout.zero >= Zero.GRADIENTS:
        raise PlannerError(f"zero({layout.zero}) with pp({layout.pp}): DeepSpeed asserts 'ZeRO-2 and ZeRO-3 are "
                           "incompatible with pipeline parallelism'; use zero 0 or 1")
    if layout.activation_input_fp8:
        raise PlannerError("activation_input_fp8: DeepSpeed's models keep the activation's input in 16 bits (the fp8 store is "
                           "Megatron-LM's --activation-func-fp8-input-store); export for Megatron-LM")
    if layout.fp8_param_gather:
        raise PlannerError("fp8_param_gather: DeepSpeed keeps 16-bit weights; export for Megatron-LM")
    if layout.fp8_attention:
        raise PlannerError("fp8_attention: DeepSpeed's models run their attention in 16 bits (FP8 attention is Transformer "
                           "Engine's, Megatron-LM's --fp8-dot-product-attention); export for Megatron-LM")
    if layout.moe_fused_mlp:
        raise PlannerError("moe_fused_mlp: DeepSpeed-MoE runs the user's expert modules (Transformer Engine's fused "
                           "grouped MLP is Megatron-Core's --use-transformer-engine-op-fuser); export for Megatron-LM")
    if layout.cp > 1 and (model.num_attention_heads % layout.cp or model.kv_heads % layout.cp):
        raise PlannerError(f"cp({layout.cp}): DeepSpeed's Ulysses sequence parallelism splits the attention heads, "
                           f"and {model.num_attention_heads} query / {model.kv_heads} KV heads do not divide by it")
    changes: dict[str, Any] = {}
    notes: list[str] = []
    _moe_layout(model, layout, changes, notes)
    if layout.compile or layout.compile_loss:
        changes["compile"], changes["compile_loss"] = False, None
        notes.append("compile -> false: planner writes no compile setting into the DeepSpeed config (DeepSpeed compiles "
                     "the model when the training script calls engine.compile())")
    if layout.sequence_parallel:
        changes["sequence_parallel"] = False
        notes.append("sequence_parallel -> false: DeepSpeed's AutoTP does not split the sequence")
    if layout.overlap_tp_comm:
        changes["overlap_tp_comm"] = False
        notes.append("overlap_tp_comm -> false: DeepSpeed's AutoTP does not overlap its collectives")
    if layout.pp == 1 and layout.schedule != "1f1b":
        changes["schedule"] = "1f1b"
    if layout.zero == Zero.NONE:
        half = "fp16" if layout.dtype == "fp16" else "bf16"
        if layout.grad_dtype != half:
            changes["grad_dtype"] = half
            notes.append(f"grad_dtype {layout.grad_dtype} -> {half}: without ZeRO DeepSpeed accumulates {layout.dtype} "
                         f"gradients in {half} (it refuses other accumulation dtypes)")
        if half == "bf16" and layout.pp > 1:
            changes["zero"] = 1
            notes.append("zero 0 -> 1: DeepSpeed runs bf16 with a pipeline through its BF16_Optimizer, which shards "
                         "the optimizer states over data parallelism as ZeRO 1")
    return (layout.model_copy(update=changes) if changes else layout), tuple(notes)


def _moe_layout(model: ModelSpec, layout: Layout, changes: dict[str, Any], notes: list[str]) -> None:
    """What a DeepSpeed config can say of the MoE, CUDA-graph, optimizer-precision and MTP fields: bf16 master
    weights and gradients (ZeRO 1-3, bf16; with fp32 optimizer states only under ZeRO-Offload) and bf16
    optimizer states (with bf16 master weights). Without expert parallelism (which DeepSpeed takes in the model
    code) no dispatcher runs; the rest has no DeepSpeed key."""
    if layout.etp is not None and layout.etp != layout.tp:
        raise PlannerError(f"etp({layout.etp}): DeepSpeed splits experts with the model's tensor parallelism; leave "
                           "etp unset or export for Megatron-LM")
    if layout.etp is not None:
        changes["etp"] = None
    for name, default in (("moe_dispatcher", "alltoall"), ("moe_ep_overlap", False), ("moe_delay_wgrad", None),
                          ("moe_shared_expert_overlap", False)):
        if getattr(layout, name) != default:
            changes[name] = default
            notes.append(f"{name} {getattr(layout, name)} -> {default}: without expert parallelism in a DeepSpeed "
                         "config the experts compute locally")
    for name, value in (("moe_capacity_factor", layout.moe_capacity_factor is not None),
                        ("cuda_graph_scope", bool(layout.cuda_graph_scope))):
        if value:
            raise PlannerError(f"{name}: a DeepSpeed config has no such setting (the model code decides); export for "
                               "Megatron-LM")
    if layout.mtp_layers is not None:
        if layout.mtp_layers != model.mtp_layers:
            raise PlannerError(f"mtp_layers({layout.mtp_layers}): a DeepSpeed config has no MTP setting (the model "
                               "code decides); export for Megatron-LM")
        changes["mtp_layers"] = None
    if layout.optimizer_state_dtype == "bf16" and layout.master_weights_dtype != "bf16":
        raise PlannerError("optimizer_state_dtype bf16: DeepSpeed keeps bf16 optimizer states only with bf16 master "
                           "weights (bf16_optimizer_states needs bf16_master_weights_and_grads)")
    if layout.master_weights_dtype == "bf16":
        if layout.dtype == "fp16" or layout.zero < Zero.OPTIMIZER:
            raise PlannerError("master_weights_dtype bf16: DeepSpeed's bf16_master_weights_and_grads needs bf16 "
                               "training with ZeRO stage 1, 2 or 3")
        if layout.optimizer_state_dtype != "bf16" and not layout.offload_optimizer:
            raise PlannerError("master_weights_dtype bf16 with fp32 optimizer states: DeepSpeed keeps those on the "
                               "CPU only (ZeRO-Offload); add offload_optimizer or optimizer_state_dtype bf16")
        if layout.grad_dtype != "bf16":
            changes["grad_dtype"] = "bf16"
            notes.append(f"grad_dtype {layout.grad_dtype} -> bf16: bf16_master_weights_and_grads keeps gradients in "
                         "bf16")


def config_dict(ctx: ExportContext) -> dict[str, Any]:
    lay = ctx.layout
    accum = lay.global_batch // (lay.micro_batch * lay.dp)
    config: dict[str, Any] = {}
    if lay.tp == 1 or lay.pp > 1:
        # DeepSpeedConfig._batch_assertion: train = micro x accum x (world / sequence_parallel_size), or the
        # pipeline's data-parallel ranks. With AutoTP its world counts tensor-parallel ranks too, so the key is
        # left for DeepSpeed to derive from the two below.
        config["train_batch_size"] = lay.global_batch
    config["train_micro_batch_size_per_gpu"] = lay.micro_batch
    config["gradient_accumulation_steps"] = accum
    if lay.dtype == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    else:  # bf16, and the bf16 base of fp8 training (Transformer Engine casts per GEMM)
        config["bf16"] = {"enabled": True}
        if lay.master_weights_dtype == "bf16":
            config["bf16"]["bf16_master_weights_and_grads"] = True
        if lay.optimizer_state_dtype == "bf16":
            config["bf16"]["bf16_optimizer_states"] = True
    config["data_types"] = {"grad_accum_dtype": lay.grad_dtype}
    config["zero_optimization"] = {"stage": lay.zero, "overlap_comm": lay.overlap_grad_reduce,
                                   "contiguous_gradients": True}
    if lay.offload_optimizer:
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if lay.cpu_optimizer == "torch":
            config["optimizer"] = {"type": "AdamW", "params": {"torch_adam": True}}
    if lay.offload_params:
        config["zero_optimization"]["offload_param"] = {"device": "cpu", "pin_memory": True}
    if lay.recompute == "full":
        config["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": False,
                                              "contiguous_memory_optimization": False}
    if lay.tp > 1:
        config["tensor_parallel"] = {"autotp_size": lay.tp}
    if lay.pp > 1:
        config["pipeline"] = {"stages": lay.pp}
    if lay.cp > 1:
        config["sequence_parallel_size"] = lay.cp
    config["gradient_clipping"] = 1.0
    config["steps_per_print"] = 10
    config[PLANNER_KEY] = {
        "comment": "Written by planner; DeepSpeed ignores this key. 'model_code' holds what the training script "
                   "decides (DeepSpeed has no key for it); planner check reads it back where the job is silent.",
        "prediction": prediction_lines(ctx),
        "model": ctx.model_id,
        "hardware": ctx.hardware_id,
        "gpus": lay.gpus,
        "model_code": {name: getattr(lay, name) for name in MODEL_CODE_FIELDS},
    }
    return config


def render(ctx: ExportContext) -> str:
    return json.dumps(config_dict(ctx), indent=2) + "\n"
