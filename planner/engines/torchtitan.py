"""torchtitan job config (TOML, plus `--section.option` overrides) -> Layout fields.

Read as torchtitan's JobConfig / ParallelDims / Trainer read it (v0.1.0 - v0.2.x, the
releases that take `--job.config_file x.toml`; the 2024 layout with the degrees and float8
under [training] and [experimental] is read too). Since February 2026 torchtitan's main branch
describes runs as Python functions (`--module`/`--config`): planner.engines.torchtitan_registry reads those
(without running them) into the settings this reader takes.

Mapping: FSDP (data_parallel_shard_degree > 1, or context parallelism, which torchtitan
always wraps in FSDP) -> ZeRO 3 over dp = replicate x shard; DDP (replicate only) -> ZeRO 0;
HSDP (replicate > 1 and shard > 1) -> ZeRO 3 with shard_group = shard x cp (torchtitan shards over the
shard group and replicates across groups). With pipeline parallelism FSDP is ZeRO 1: torch pipelining keeps a
stage gathered and its gradients unsharded for the step (torch/distributed/pipelining/stage.py). Tensor parallelism always comes with sequence
parallelism (torchtitan's TP plans shard the norms along the sequence). Gradients are fp32
(FSDP reduces and keeps sharded gradients in fp32; DDP autocasts fp32 parameters).
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from planner.engines.common import (
    Collected,
    EngineImport,
    ExportContext,
    prediction_lines,
    resolve_batch,
)
from planner.errors import PlannerError
from planner.specs.bounds import over_limit
from planner.specs.layout import Layout, Zero
from planner.specs.model import ModelSpec

# torchtitan (model name, flavor) -> planner catalog id. Flavor suffixes that only pick an attention
# kernel (_flex, _varlen, _flex_attn, _irope) are dropped before the lookup.
CATALOG_IDS: dict[tuple[str, str], str] = {
    ("llama3", "8B"): "llama-3.1-8b",
    ("llama3", "70B"): "llama-3.1-70b",
    ("llama3", "405B"): "llama-3.1-405b",
    ("llama4", "17bx16e"): "llama-4-scout",
    ("llama4", "17bx128e"): "llama-4-maverick",
    ("qwen3", "0.6B"): "qwen3-0.6b",
    ("qwen3", "1.7B"): "qwen3-1.7b",
    ("qwen3", "4B"): "qwen3-4b",
    ("qwen3", "8B"): "qwen3-8b",
    ("qwen3", "14B"): "qwen3-14b",
    ("qwen3", "32B"): "qwen3-32b",
    ("qwen3", "30B-A3B"): "qwen3-30b-a3b",
    ("qwen3", "235B-A22B"): "qwen3-235b-a22b",
    ("deepseek_v3", "16B"): "deepseek-v2-lite",
    ("deepseek_v3", "236B"): "deepseek-v2",
    ("deepseek_v3", "671B"): "deepseek-v3",
    ("gpt_oss", "20b"): "gpt-oss-20b",
    ("gpt_oss", "120b"): "gpt-oss-120b",
}
FLAVOR_SUFFIXES = ("_flex_attn", "_varlen_attn", "_flex", "_varlen", "_irope")
DEFAULT_MODEL = ("llama3", "debugmodel")  # JobConfig.model defaults
# torchtitan's Hugging Face transformers backend (torchtitan/experiments/transformers_modeling_backend, v0.2.x):
# [model] name = HF_BACKEND, flavor "full" builds [hf_transformers] model (a Hugging Face id) as published;
# "debugmodel" shrinks it to 2 layers of width 256. It runs dense models with FSDP/TP/PP/CP, MoE models with
# FSDP only (its README: "Missing TP/PP/EP supports for MoE"), and needs
# --job.custom_config_module=torchtitan.experiments.transformers_modeling_backend.job_config.
HF_BACKEND = "transformers_modeling_backend"
HF_BACKEND_CONFIG_MODULE = "torchtitan.experiments.transformers_modeling_backend.job_config"

SINGLE_STAGE = {"1f1b": "1f1b", "gpipe": "gpipe"}
MULTI_STAGE = {"interleaved1f1b", "loopedbfs", "interleavedzerobubble", "zbvzerobubble", "dualpipev"}

KNOWN: dict[str, frozenset[str]] = {
    "parallelism": frozenset({
        "data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
        "tensor_parallel_degree", "disable_loss_parallel", "enable_async_tensor_parallel", "pipeline_parallel_degree",
        "module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
        "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
        "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatch_size", "pipeline_parallel_expert_parallel_overlap",
        "context_parallel_degree", "context_parallel_load_balancer", "context_parallel_rotate_method",
        "expert_parallel_degree", "expert_tensor_parallel_degree", "expert_parallel_comm_backend",
        "pipeline_parallel_split_points", "enable_sequence_parallel",
    }),
    "training": frozenset({
        "dataset", "dataset_path", "local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps",
        "enable_cpu_offload", "dtype", "mixed_precision_param", "mixed_precision_reduce", "gc_freq", "gc_debug",
        "dataloader", "batch_size", "warmup_steps", "compile", "data_parallel_replicate_degree",
        "data_parallel_shard_degree", "data_parallel_degree", "tensor_parallel_degree", "enable_loss_parallel",
        "fsdp_reshard_after_forward", "deterministic", "seed", "enable_compiled_autograd",
        # 2024 releases: pp and float8 under [training]
        "pipeline_parallel_degree", "fp8_linear", "enable_float8_linear", "enable_fsdp_float8_all_gather",
        "precompute_float8_dynamic_scale_for_fsdp",
    }),
    "activation_checkpoint": frozenset({
        "mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop",
        "memory_budget", "visualize_memory_budget_pareto", "preserve_rng_state", "determinism_check", "debug",
    }),
    "model": frozenset({"name", "flavor", "hf_assets_path", "tokenizer_path", "converters", "print_after_conversion",
                        "norm_type"}),
    "optimizer": frozenset({"name", "lr", "eps", "weight_decay", "implementation", "early_step_in_backward", "fused",
                            "beta1", "beta2"}),
}
OTHER_SECTIONS = frozenset({
    "job", "hf_transformers", "profiling", "metrics", "lr_scheduler", "checkpoint", "compile", "quantize", "comm", "memory_estimation",
    "fault_tolerance", "experimental", "validation", "debug", "float8", "mx",
})


# --section.option overrides ---------------------------------------------------------------------
def _value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def apply_overrides(config: Mapping[str, Any], args: Sequence[str], source: str) -> dict[str, Any]:
    """The TOML dict with `--section.option value` / `--section.option=value` / `--section.flag` /
    `--section.no-flag` applied, as torchtitan's CLI applies them over the file (CLI wins)."""
    out = copy.deepcopy(dict(config))
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("--") or "." not in tok:
            raise PlannerError(f"expected a --section.option flag, got {tok!r}", source=source)
        name, eq, inline = tok[2:].partition("=")
        values = [inline] if eq else []
        while not eq and i < len(args) and not args[i].startswith("--"):
            values.append(args[i])
            i += 1
        *path, key = name.replace("-", "_").split(".")
        if path in (["job"],) and key == "config_file":
            continue
        parsed: Any  # a flag's value: bool, scalar or list, as the flag was written
        if key.startswith("no_") and not values:
            key, parsed = key[3:], False
        elif not values:
            parsed = True
        elif len(values) == 1:
            parsed = _value(values[0]) if "," not in values[0] else [_value(v) for v in values[0].split(",") if v]
        else:
            parsed = [_value(v) for v in values]
        node = out
        for part in path:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise PlannerError(f"--{name}: '{part}' is not a section", source=source)
        node[key] = parsed
    return out


def split_args(text: str) -> list[str]:
    """Override flags written as one string (e.g. from a job file's engine.args)."""
    import shlex

    return shlex.split(text, comments=True)


# model -------------------------------------------------------------------------------------------
def check_sections(config: Mapping[str, Any], source: str) -> None:
    """Every top-level key of a torchtitan job config is a section of JobConfig (a TOML table): a plain value there
    (`model = "llama3"`) is not a config torchtitan reads."""
    for key, value in config.items():
        if not isinstance(value, Mapping):
            raise PlannerError(f"expected a [{key}] table (torchtitan's job config is made of sections), got "
                               f"{type(value).__name__} {value!r:.60}", source=source, field=key)


def model_name(config: Mapping[str, Any], source: str = "torchtitan config") -> tuple[str, str]:
    """torchtitan's (model.name, model.flavor), with JobConfig's defaults."""
    check_sections(config, source)
    section = config.get("model") or {}
    return str(section.get("name", DEFAULT_MODEL[0])), str(section.get("flavor", DEFAULT_MODEL[1]))


def catalog_id(name: str, flavor: str) -> str | None:
    """Our catalog id for a torchtitan model flavor, or None when there is none."""
    for suffix in FLAVOR_SUFFIXES:
        if flavor.endswith(suffix):
            flavor = flavor[: -len(suffix)]
            break
    return CATALOG_IDS.get((name, flavor))


def hf_backend_model(config: Mapping[str, Any], source: str) -> str:
    """The Hugging Face id a transformers-backend config trains ([hf_transformers] model, flavor full)."""
    _, flavor = model_name(config, source)
    found = config.get("hf_transformers")
    section: Mapping[str, Any] = found if isinstance(found, dict) else {}
    repo = section.get("model")
    if not isinstance(repo, str) or not repo:
        raise PlannerError(f"[model] name = \"{HF_BACKEND}\" needs [hf_transformers] model = \"<Hugging Face id>\"",
                           source=source, field="hf_transformers.model")
    if flavor != "full":
        raise PlannerError(f"flavor {flavor!r} of torchtitan's transformers backend is not {repo} as published "
                           "(debugmodel trains 2 layers of width 256); use flavor \"full\", or give the model it "
                           "builds with --model", source=source, field="model.flavor")
    return repo


HF_SOURCE = re.compile(r"\bHF ([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)")


def hf_repo_id(model: ModelSpec) -> str | None:
    """The Hugging Face id a catalog model's source names ('HF org/name config.json'), or None."""
    match = HF_SOURCE.search(model.source or "")
    return match.group(1) if match else None


def flavor_for(model_id: str) -> tuple[str, str] | None:
    """The torchtitan (name, flavor) of a catalog id, for export."""
    for key, value in CATALOG_IDS.items():
        if value == model_id:
            return key
    return None


# config -> Layout fields ----------------------------------------------------------------------
def _get(config: Mapping[str, Any], *paths: str, default: Any = None) -> Any:
    """The first of dotted `section.key` paths present (new location first, then the 2024 ones); a path may name
    nested tables (`quantize.linear.float8.recipe_name`)."""
    for path in paths:
        *tables, key = path.split(".")
        node: Any = config
        for table in tables:
            node = node.get(table) if isinstance(node, Mapping) else None
        if isinstance(node, dict) and key in node:
            return node[key]
    return default


def _flag(config: Mapping[str, Any], *paths: str, source: str, default: bool = False) -> bool:
    """A boolean setting (TOML true/false; a --section.flag override gives one too): anything else, "no" or 1
    included, is an error naming the setting rather than a silent false."""
    value = _get(config, *paths, default=default)
    if not isinstance(value, bool):
        where = next((path for path in paths if _has(config, path)), paths[0])
        raise PlannerError(f"must be true or false, got {value!r}", source=source, field=where)
    return value


def _has(config: Mapping[str, Any], *paths: str) -> bool:
    marker = object()
    return _get(config, *paths, default=marker) is not marker


# The kind of quantity (planner.specs.bounds.LIMITS) of each integer setting read, by its last name part.
_PATH_LIMITS: dict[str, str] = {"local_batch_size": "micro_batch", "batch_size": "micro_batch",
                                "global_batch_size": "global_batch", "seq_len": "seq_len",
                                "pipeline_parallel_microbatch_size": "micro_batch"}
_PATH_LIMITS.update({name: "degree" for name in ("data_parallel_replicate_degree", "data_parallel_shard_degree",
                                                 "tensor_parallel_degree", "pipeline_parallel_degree",
                                                 "context_parallel_degree", "expert_parallel_degree")})


class _Picker:
    """A setting from the file when it is written there, else from the job, else torchtitan's default;
    a job value that contradicts the file is an error."""

    def __init__(self, config: Mapping[str, Any], given: Mapping[str, Any], source: str) -> None:
        self.config, self.given, self.source = config, given, source

    def int(self, name: str | None, *paths: str, default: int) -> int:
        if _has(self.config, *paths):
            value = _get(self.config, *paths)
            if isinstance(value, bool) or not isinstance(value, int):
                raise PlannerError(f"must be an integer, got {value!r}", source=self.source, field=paths[0])
            problem = over_limit(_PATH_LIMITS.get(paths[0].rsplit(".", 1)[-1], "count"), value)
            if problem:
                raise PlannerError(problem, source=self.source, field=paths[0])
            if name and name in self.given and self.given[name] != value:
                raise PlannerError(f"{name} = {self.given[name]} in the job contradicts {paths[0]} = {value} in the "
                                   "engine file; remove it from the job or change the file", source=self.source)
            return value
        return int(self.given[name]) if name and name in self.given else default


def _check_keys(config: Mapping[str, Any], got: Collected) -> None:
    for section, body in config.items():
        if section in KNOWN:
            if not isinstance(body, dict):
                raise PlannerError("expected a table", source=got.source, field=section)
            for key in body:
                if key not in KNOWN[section]:
                    got.warn(f"{section}.{key} is not known to planner and was ignored; if it changes memory, the "
                             "estimate does not include it")
        elif section not in OTHER_SECTIONS:
            got.warn(f"[{section}] is not known to planner and was ignored")


def _degrees(pick: _Picker, gpus: int, got: Collected) -> dict[str, int]:
    src = got.source
    rep = pick.int(None, "parallelism.data_parallel_replicate_degree", "training.data_parallel_replicate_degree",
                   default=1)
    shard = pick.int(None, "parallelism.data_parallel_shard_degree", "training.data_parallel_shard_degree",
                     "training.data_parallel_degree", default=-1)
    tp = pick.int("tp", "parallelism.tensor_parallel_degree", "training.tensor_parallel_degree", default=1)
    pp = pick.int("pp", "parallelism.pipeline_parallel_degree", "experimental.pipeline_parallel_degree",
                  "training.pipeline_parallel_degree", default=1)
    cp = pick.int("cp", "parallelism.context_parallel_degree", "experimental.context_parallel_degree", default=1)
    ep = pick.int("ep", "parallelism.expert_parallel_degree", "experimental.expert_parallel_degree", default=1)
    for name, value in (("data_parallel_replicate_degree", rep), ("tensor_parallel_degree", tp),
                        ("pipeline_parallel_degree", pp), ("context_parallel_degree", cp),
                        ("expert_parallel_degree", ep)):
        if value < 1:
            raise PlannerError(f"must be >= 1 (only data_parallel_shard_degree may be -1), got {value}", source=src,
                               field=f"parallelism.{name}")
    if shard == -1:
        shard = gpus // (rep * cp * tp * pp)
    if shard < 1 or rep * shard * cp * tp * pp != gpus:
        raise PlannerError(f"dp_replicate({rep}) * dp_shard({shard}) * cp({cp}) * tp({tp}) * pp({pp}) = "
                           f"{rep * shard * cp * tp * pp} != gpus({gpus}); change a degree or the GPU count",
                           source=src)
    if rep > 1 and shard > 1:  # HSDP: FSDP over the shard group (x cp, which torchtitan folds into FSDP)
        got.set("shard_group", shard * cp, "parallelism.data_parallel_shard_degree")
    if ep > 1:
        _expert_parallel(pick, tp, got)
    return {"rep": rep, "shard": shard, "tp": tp, "pp": pp, "cp": cp, "ep": ep}


# [parallelism] expert_parallel_comm_backend (torchtitan/config/job_config.py, 238fa995) -> moe_dispatcher
# standard and deepep: the TOML job config (238fa995); hybridep: torchtitan main's model_registry(moe_comm_backend=...)
# (torchtitan/models/common/config_utils.py @ b5bcd76c), read through planner.engines.torchtitan_registry
COMM_BACKENDS = {"standard": "alltoall", "deepep": "deepep", "hybridep": "hybridep"}


def _expert_parallel(pick: _Picker, tp: int, got: Collected) -> None:
    """Expert TP and the all-to-all backend; both have no effect without expert parallelism (job_config.py,
    238fa995). expert_tensor_parallel_degree defaults to 1 and takes 1 or tp only."""
    src, config = got.source, pick.config
    etp = pick.int(None, "parallelism.expert_tensor_parallel_degree", default=1)
    if etp not in (1, tp):
        raise PlannerError(f"must be 1 or tensor_parallel_degree({tp}) (torchtitan supports only these), got {etp}",
                           source=src, field="parallelism.expert_tensor_parallel_degree")
    got.set("etp", None if etp == tp else etp, "parallelism.expert_tensor_parallel_degree")
    backend = _get(config, "parallelism.expert_parallel_comm_backend", default="standard")
    if backend not in COMM_BACKENDS:
        raise PlannerError(f"must be standard, deepep or hybridep, got {backend!r}", source=src,
                           field="parallelism.expert_parallel_comm_backend")
    got.set("moe_dispatcher", COMM_BACKENDS[str(backend)], "parallelism.expert_parallel_comm_backend")


def _interleave(config: Mapping[str, Any], model: ModelSpec, pp: int, got: Collected) -> tuple[str, int]:
    schedule = str(_get(config, "parallelism.pipeline_parallel_schedule", "experimental.pipeline_parallel_schedule",
                        default="1F1B"))
    key = schedule.lower().replace("_", "")
    if pp == 1:
        return "1f1b", 1
    if key in SINGLE_STAGE:
        return SINGLE_STAGE[key], 1
    if key not in MULTI_STAGE:
        raise PlannerError(f"pipeline schedule {schedule!r} is not known to planner (1F1B, GPipe, Interleaved1F1B, "
                           "LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV)", source=got.source,
                           field="parallelism.pipeline_parallel_schedule")
    if key != "interleaved1f1b":
        got.warn(f"pipeline schedule {schedule} is modelled as interleaved 1F1B (same stages per rank)")
    if key == "dualpipev" and _flag(config, "parallelism.pipeline_parallel_expert_parallel_overlap",
                                    source=got.source, default=True):
        # job_config.py (238fa995): DualPipeV overlaps expert-parallel with pipeline communication when ep > 1
        got.set("moe_ep_overlap", int(got.values.get("ep", 1)) > 1, "parallelism.pipeline_parallel_expert_parallel_overlap")
    per_stage = _get(config, "parallelism.pipeline_parallel_layers_per_stage")
    if per_stage is None:
        return "1f1b", 2  # torchtitan's default for multi-stage schedules: two stages per rank
    first = int(_get(config, "parallelism.pipeline_parallel_first_stage_less_layers", default=1))
    last = int(_get(config, "parallelism.pipeline_parallel_last_stage_less_layers", default=1))
    stages = math.ceil((model.num_layers + first + last) / int(per_stage))
    if stages % pp:
        raise PlannerError(f"{stages} virtual stages are not divisible by pipeline_parallel_degree({pp}) (torchtitan "
                           "rejects this)", source=got.source, field="parallelism.pipeline_parallel_layers_per_stage")
    return "1f1b", stages // pp


def _recompute(config: Mapping[str, Any], given: Mapping[str, Any], model: ModelSpec, pp: int, got: Collected) -> None:
    if not _has(config, "activation_checkpoint.mode") and "recompute" in given:
        return  # the job's recompute applies
    mode = str(_get(config, "activation_checkpoint.mode", default="selective")).lower()
    option = str(_get(config, "activation_checkpoint.selective_ac_option", default="2"))
    origin = "activation_checkpoint.mode"
    if mode in ("none", "full"):
        got.set("recompute", mode, origin)
    elif mode == "selective":
        if option.isdigit():
            every = int(option)
            problem = "must be at least 1, got 0" if every < 1 else over_limit("layers", every)
            if problem:
                raise PlannerError(f"selective_ac_option (checkpoint one layer in N) {problem}", source=got.source,
                                   field="activation_checkpoint.selective_ac_option")
            per_stage = -(-model.num_layers // pp)
            layers = per_stage // every if every > 0 else per_stage
            if every <= 1:
                got.set("recompute", "full", origin)
            elif layers == 0:
                got.set("recompute", "none", origin)
            else:
                got.set("recompute", "full", origin)
                got.set("recompute_layers_per_stage", layers, "activation_checkpoint.selective_ac_option")
                got.warn(f"selective_ac_option {every} (full checkpointing of one layer in {every}) is modelled as "
                         f"full recompute of {layers} of the {per_stage} layers per stage")
        elif option == "op":
            got.set("recompute", "op", origin)  # op-level selective AC, modelled as such
        else:
            raise PlannerError(f"selective_ac_option must be 'op' or a positive integer, got {option!r}",
                               source=got.source, field="activation_checkpoint.selective_ac_option")
    else:
        raise PlannerError(f"activation checkpointing mode {mode!r} is not modelled (none, selective, full)",
                           source=got.source, field="activation_checkpoint.mode")


def _precision(config: Mapping[str, Any], got: Collected, *, fsdp_shards: bool) -> None:
    src = got.source
    param = str(_get(config, "training.mixed_precision_param", default="bfloat16"))
    if param != "bfloat16":
        raise PlannerError(f"mixed_precision_param {param} (fp32 training) is not modelled; use bfloat16", source=src,
                           field="training.mixed_precision_param")
    pure = str(_get(config, "training.dtype", default="float32"))
    if pure not in ("float32", "bfloat16"):
        raise PlannerError(f"must be float32 or bfloat16, got {pure!r}", source=src, field="training.dtype")
    converters = _get(config, "model.converters", default=[]) or []
    if isinstance(converters, str):
        converters = [converters]
    elif not isinstance(converters, list):
        raise PlannerError(f"must be a list of converter names, got {converters!r}", source=src,
                           field="model.converters")
    fp8_flag = next((path for path in ("float8.enable_float8_linear", "training.enable_float8_linear",
                                       "training.fp8_linear") if _get(config, path)), None)  # the last: "" or a recipe
    fp8 = any("float8" in str(c) for c in converters) or fp8_flag is not None
    mx = any(str(c).endswith("mx") or ".mx" in str(c) for c in converters)
    fp8 = fp8 or mx
    origin = fp8_flag or "model.converters"
    got.set("dtype", "fp8" if fp8 else "bf16", origin if fp8 else "training.mixed_precision_param")
    if fp8:  # torchao's float8 scales per tensor (dynamic) or per row (recipe_name); its MX converter per 32 elements
        got.set("fp8_recipe", "mxfp8" if mx else _float8_recipe(config, src), "model.converters")
        if not mx:
            _float8_all_gather(config, got, fsdp_shards=fsdp_shards)
    if pure == "bfloat16":  # 'all parameters, gradients, and optimizer states in bfloat16' (job_config.py)
        for name in ("grad_dtype", "optimizer_state_dtype", "master_weights_dtype"):
            got.set(name, "bf16", "training.dtype")
    else:
        got.set("grad_dtype", "fp32", "training.mixed_precision_reduce")
    name = str(_get(config, "optimizer.name", default="AdamW")).lower()
    if name not in ("adamw", "adam"):
        raise PlannerError(f"optimizer {name!r} is not modelled (Adam or AdamW)", source=src, field="optimizer.name")
    got.set("optimizer", "adam", "optimizer.name")
    if _flag(config, "training.enable_cpu_offload", source=src):  # FSDP2 CPUOffloadPolicy: parameters, gradients, optimizer step
        got.set("offload_params", True, "training.enable_cpu_offload")
        got.set("offload_optimizer", True, "training.enable_cpu_offload")
    compiled = next((path for path in ("compile.enable", "training.compile") if _flag(config, path, source=src)), None)
    if compiled is not None:  # [compile] components: the model, the loss or both (CompileConfig's default: both)
        components = _get(config, "compile.components", default=["model", "loss"]) if compiled == "compile.enable" \
            else ["model", "loss"]
        if not isinstance(components, list) or not set(map(str, components)) <= {"model", "loss"}:
            raise PlannerError(f"must be a list of 'model' and 'loss', got {components!r}", source=src,
                               field="compile.components")
        if "model" in components:
            got.set("compile", True, compiled)
        if ("loss" in components) != ("model" in components):
            got.set("compile_loss", "loss" in components, "compile.components")
    if str(_get(config, "parallelism.fsdp_reshard_after_forward", default="default")) == "never":
        got.warn("fsdp_reshard_after_forward 'never' keeps gathered parameters from forward to backward; planner "
                 "counts ZeRO-3's one-layer gather buffers only")


FLOAT8_RECIPE_PATHS = ("float8.recipe_name", "quantize.linear.float8.recipe_name")  # 2025 TOMLs, v0.2 TOMLs
# the float8 converter's FSDP settings: [float8] in 2025 TOMLs, [training] in 2024's, [quantize.linear.float8] in v0.2
FLOAT8_ALL_GATHER_PATHS = ("float8.enable_fsdp_float8_all_gather", "training.enable_fsdp_float8_all_gather",
                           "quantize.linear.float8.enable_fsdp_float8_all_gather")
FLOAT8_PRECOMPUTE_PATHS = ("float8.precompute_float8_dynamic_scale_for_fsdp",
                           "training.precompute_float8_dynamic_scale_for_fsdp",
                           "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp")


def _float8_all_gather(config: Mapping[str, Any], got: Collected, *, fsdp_shards: bool) -> None:
    """enable_fsdp_float8_all_gather: torchao's float8 FSDP all-gather (Layout.fp8_param_gather under the torchtitan
    engine, whose weights stay as they are and only the gathered copy is fp8). torchtitan turns it on only where FSDP
    shards (parallel_dims.dp_shard_enabled) and refuses it beside a recipe_name (torchtitan/components/quantization/
    float8.py before 6348d93d1: 'using enable_fsdp_float8_all_gather together with recipe_name is not supported');
    precompute_float8_dynamic_scale_for_fsdp takes every weight's amax in one all-reduce after the optimizer step."""
    src = got.source
    if not _flag(config, *FLOAT8_ALL_GATHER_PATHS, source=src):
        return
    where = next(path for path in FLOAT8_ALL_GATHER_PATHS if _has(config, path))
    if _get(config, *FLOAT8_RECIPE_PATHS) is not None:
        raise PlannerError("torchtitan refuses enable_fsdp_float8_all_gather together with a float8 recipe_name "
                           "(the float8 all-gather is the tensorwise recipe's); drop one of them", source=src,
                           field=where)
    if not fsdp_shards:
        got.warn(f"{where}: FSDP does not shard here (data_parallel_shard_degree 1), so torchtitan gathers nothing "
                 "in float8; ignored")
        return
    got.set("fp8_param_gather", True, where)
    if not _flag(config, *FLOAT8_PRECOMPUTE_PATHS, source=src):
        got.warn(f"{where} without precompute_float8_dynamic_scale_for_fsdp: each weight's amax is all-reduced before "
                 "its gather, a small collective per weight that planner does not count; set "
                 "precompute_float8_dynamic_scale_for_fsdp = true")


def _float8_recipe(config: Mapping[str, Any], source: str) -> str:
    """Layout.fp8_recipe of torchtitan's float8 converter: its recipe_name, torchao's Float8LinearConfig recipe
    (torchtitan/config_manager.py @ 820504e, [float8] recipe_name: tensorwise, rowwise or rowwise_with_gw_hp; unset:
    the tensorwise default)."""
    path = next((p for p in FLOAT8_RECIPE_PATHS if _get(config, p) is not None), None)
    name = str(_get(config, path)).lower() if path else "tensorwise"
    if name in ("tensorwise", "rowwise"):
        return name
    if name == "rowwise_with_gw_hp":
        raise PlannerError("float8 recipe rowwise_with_gw_hp (the weight-gradient GEMM in bf16) is not modelled; use "
                           "rowwise or tensorwise", source=source, field=path)
    raise PlannerError(f"float8 recipe_name must be tensorwise, rowwise or rowwise_with_gw_hp, got {name!r}",
                       source=source, field=path)


def import_torchtitan(
    config: Mapping[str, Any],
    overrides: Sequence[str],
    *,
    gpus: int,
    given: Mapping[str, Any],
    model: ModelSpec,
    source: str,
) -> EngineImport:
    """A torchtitan TOML dict plus CLI overrides, the GPU count, the job's own fields and the model -> Layout fields.

    A setting the file (or an override) writes wins; one it leaves out takes the job's value, else torchtitan's
    default; a job value that contradicts the file is an error."""
    check_sections(config, source)
    config = apply_overrides(config, overrides, source)
    pick = _Picker(config, given, source)
    got = Collected(source=source)
    got.set("engine", "torchtitan", "the engine file", explicit=False)  # the engine that reads it runs it
    _check_keys(config, got)
    deg = _degrees(pick, gpus, got)
    dp = deg["rep"] * deg["shard"]
    for name, word in (("tp", "tensor"), ("pp", "pipeline"), ("cp", "context"), ("ep", "expert")):
        got.set(name, deg[name], f"parallelism.{word}_parallel_degree")
    got.set("dp", dp, "data_parallel_replicate_degree x data_parallel_shard_degree")
    # FSDP under torch pipelining keeps each stage's parameters gathered and its gradients unsharded for the
    # step's micro-batches: ZeRO-1 (specs.engine _TORCH_PP_FSDP)
    fsdp = deg["shard"] > 1 or deg["cp"] > 1
    got.set("zero", (1 if deg["pp"] > 1 else 3) if fsdp else 0,
            "data_parallel_shard_degree (FSDP" + (" under pipeline parallelism: ZeRO-1)" if deg["pp"] > 1 else ")"))
    # torchtitan's TP plans shard the sequence; main (2026) can turn that off (parallelism.enable_sequence_parallel)
    sp_on = _flag(config, "parallelism.enable_sequence_parallel", source=source, default=True)
    got.set("sequence_parallel", deg["tp"] > 1 and sp_on, "parallelism.tensor_parallel_degree (TP plans shard the "
            "sequence)" if sp_on else "parallelism.enable_sequence_parallel")
    got.set("overlap_tp_comm", _flag(config, "parallelism.enable_async_tensor_parallel",
                                     "experimental.enable_async_tensor_parallel", source=source),
            "parallelism.enable_async_tensor_parallel")
    got.set("overlap_grad_reduce", True, "FSDP/DDP overlap")
    got.set("flash_attention", True, "torchtitan's SDPA/flex attention")
    if model.mtp_layers:
        got.set("mtp_layers", 0, "torchtitan trains no multi-token-prediction layers", explicit=False)
    if deg["pp"] > 1 or not ("schedule" in given or "interleave" in given):
        schedule, v = _interleave(config, model, deg["pp"], got)
        got.set("schedule", schedule, "parallelism.pipeline_parallel_schedule")
        got.set("interleave", v, "parallelism.pipeline_parallel_schedule")
    _recompute(config, given, model, deg["pp"], got)
    _precision(config, got, fsdp_shards=deg["shard"] > 1)
    got.set("seq_len", pick.int("seq_len", "training.seq_len", default=2048), "training.seq_len")

    local_default = 8
    if "micro_batch" in given and deg["pp"] == 1:
        local_default = int(given["micro_batch"])
    local = pick.int("micro_batch" if deg["pp"] == 1 else None, "training.local_batch_size", "training.batch_size",
                     default=local_default)
    if local < 1:
        raise PlannerError(f"must be a positive integer, got {local}", source=source,
                           field="training.local_batch_size")
    global_batch = pick.int("global_batch", "training.global_batch_size", default=-1)
    global_batch = local * dp if global_batch < 0 else global_batch
    if global_batch % (local * dp):
        raise PlannerError(f"global batch size must be a multiple of local batch size times data-parallel degree "
                           f"({global_batch} % ({local} * {dp}) != 0)", source=source, field="training.global_batch_size")
    micro = local
    if deg["pp"] > 1:
        chunks = _get(config, "experimental.pipeline_parallel_microbatches")
        if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1):
            raise PlannerError(f"must be a positive integer, got {chunks!r}", source=source,
                               field="experimental.pipeline_parallel_microbatches")
        micro = local // chunks if chunks else pick.int(
            "micro_batch", "parallelism.pipeline_parallel_microbatch_size", default=1)
        if micro < 1 or local % micro:
            raise PlannerError(f"local_batch_size({local}) is not divisible by the pipeline micro-batch size({micro})",
                               source=source, field="parallelism.pipeline_parallel_microbatch_size")
    got.set("global_batch", global_batch, "training.global_batch_size")
    got.set("micro_batch", micro, "training.local_batch_size" if deg["pp"] == 1 else
            "parallelism.pipeline_parallel_microbatch_size")
    fields = got.merge(given)
    resolve_batch(global_batch=fields["global_batch"], micro_batch=fields["micro_batch"], grad_accum=None, dp=dp,
                  source=source)
    return EngineImport(format="torchtitan", source=source, fields=fields, warnings=tuple(got.warnings),
                        origins=dict(got.origin))


# --- writer ----------------------------------------------------------------------------------------
# Layout -> torchtitan TOML job config (the `--job.config_file` format of torchtitan v0.1 - v0.2).
#
# torchtitan fixes some settings itself, so the layout is first mapped onto what it runs
# (`engine_layout`): FSDP (ZeRO 3) or DDP (ZeRO 0) only, fp32 gradients, sequence parallelism
# whenever tp > 1, bf16 (or fp8 through the float8 converter), Adam, flash attention, overlapped
# gradient reduction. Each change is noted in the header.

def _layers_per_stage(model: ModelSpec, lay: Layout) -> int | None:
    """pipeline_parallel_layers_per_stage giving pp x interleave virtual stages (torchtitan counts the embedding
    and the output as one layer each); None when torchtitan's default (2 stages per rank) already does."""
    if lay.interleave == 2:
        return None
    stages = lay.pp * lay.interleave
    effective = model.num_layers + 2
    per = -(-effective // stages)
    if -(-effective // per) != stages:
        raise PlannerError(f"torchtitan cannot split {model.num_layers} layers into {stages} virtual stages; "
                           "choose another interleave")
    return per


def hf_backend_repo(model_id: str, model: ModelSpec, layout: Layout) -> str:
    """The Hugging Face id to train a model torchtitan has no flavor for through its transformers backend;
    PlannerError when there is none or the backend cannot run the layout (MoE: FSDP only)."""
    repo = hf_repo_id(model)
    if repo is None:
        raise PlannerError(f"torchtitan has no model flavor for '{model_id}', and its source names no Hugging Face "
                           "id for torchtitan's transformers backend; export for Megatron-LM or DeepSpeed")
    if model.moe is not None and (layout.tp > 1 or layout.pp > 1 or layout.ep > 1):
        raise PlannerError(f"tp({layout.tp}) pp({layout.pp}) ep({layout.ep}): torchtitan trains {repo} through its "
                           "transformers backend, which runs MoE models with FSDP only; use tp 1, pp 1, ep 1")
    return repo


def engine_layout(model: ModelSpec, layout: Layout, *, registry: bool = False) -> tuple[Layout, tuple[str, ...]]:
    """The layout torchtitan would run for this one, and a note per change (`registry`: as torchtitan main's Python
    config registries can say it, planner.engines.torchtitan_registry)."""
    if layout.dtype == "fp16":
        raise PlannerError("torchtitan trains in bf16 (or fp8), not fp16; use dtype bf16")
    if layout.optimizer != "adam":
        raise PlannerError(f"torchtitan's optimizers are Adam/AdamW; '{layout.optimizer}' cannot be exported")
    if layout.activation_input_fp8:
        raise PlannerError("activation_input_fp8: torchtitan keeps the activation's input in 16 bits (the fp8 store is "
                           "Megatron-LM's --activation-func-fp8-input-store); export for Megatron-LM")
    if layout.fp8_attention:
        raise PlannerError("fp8_attention: torchtitan's float8 converts the Linear layers only and its attention runs "
                           "in 16 bits; export for Megatron-LM")
    if layout.moe_fused_mlp:
        raise PlannerError("moe_fused_mlp: torchtitan's experts are torch grouped matmuls with the activation a kernel "
                           "of its own (Transformer Engine's fused grouped MLP is Megatron-Core's); export for Megatron-LM")
    if layout.dtype == "fp8" and layout.fp8_recipe not in ("tensorwise", "rowwise", "mxfp8"):
        raise PlannerError(f"fp8_recipe {layout.fp8_recipe}: torchtitan's float8 converter scales per tensor or per row "
                           "(tensorwise, rowwise) and its MX converter per 32 elements (mxfp8); export for Megatron-LM "
                           "or choose one of those")
    changes: dict[str, Any] = {}
    notes: list[str] = []
    sharded = (layout.zero > Zero.NONE and layout.dp > 1) or layout.cp > 1  # torchtitan wraps CP in FSDP
    target = (1 if layout.pp > 1 else 3) if sharded else 0  # FSDP under PP runs as ZeRO-1 (_TORCH_PP_FSDP)
    if layout.zero != target:
        changes["zero"] = target
        notes.append(f"zero {layout.zero} -> {target}: torchtitan shards with FSDP over dp x cp (ZeRO-1 under "
                     "pipeline parallelism, which keeps the stage gathered for the step), or replicates with DDP")
    if layout.grad_dtype != "fp32":
        changes["grad_dtype"] = "fp32"
        notes.append(f"grad_dtype {layout.grad_dtype} -> fp32: torchtitan reduces and keeps gradients in fp32")
    if layout.sequence_parallel != (layout.tp > 1):
        changes["sequence_parallel"] = layout.tp > 1
        notes.append("sequence_parallel follows tp: torchtitan's tensor-parallel plans shard the sequence")
    if not layout.overlap_grad_reduce:
        changes["overlap_grad_reduce"] = True
        notes.append("overlap_grad_reduce -> true: FSDP/DDP overlap the reduction with backward")
    if layout.pp == 1 and layout.schedule != "1f1b":
        changes["schedule"] = "1f1b"  # one stage: no pipeline schedule (torchtitan reads none back)
    if not layout.flash_attention:
        changes["flash_attention"] = True
        notes.append("flash_attention -> true: torchtitan uses fused SDPA/flex attention")
    if layout.recompute == "selective":
        changes["recompute"] = "op"
        changes["recompute_modules"] = None
        notes.append("recompute selective -> op: torchtitan's selective AC is op-level (every second matmul output "
                     "and all non-matmul ops recomputed); it has no attention-core-only mode")
    rl = layout.recompute_layers_per_stage
    if rl is not None:
        per_stage = -(-model.num_layers // layout.pp)
        if per_stage % rl or per_stage // rl < 2:
            changes["recompute_layers_per_stage"] = None
            notes.append(f"recompute of {rl} layers per stage -> all layers: torchtitan checkpoints every n-th layer")
    if layout.offload_optimizer != layout.offload_params:
        if changes.get("zero", layout.zero) != Zero.PARAMETERS:
            raise PlannerError("offload_optimizer: torchtitan's CPU offload (training.enable_cpu_offload) is FSDP2's "
                               "and needs FSDP (zero 3)")
        changes["offload_optimizer"] = changes["offload_params"] = True
        notes.append("offload_optimizer and offload_params -> true: torchtitan's enable_cpu_offload moves parameters, "
                     "gradients and the optimizer step to the CPU together")
    if layout.fp8_param_gather:
        why = _no_float8_all_gather(layout, changes.get("zero", layout.zero), registry=registry)
        if why:
            changes["fp8_param_gather"] = False
            notes.append(f"fp8_param_gather -> false: {why}")
    if registry and layout.dtype == "fp8" and layout.fp8_recipe == "tensorwise":
        changes["fp8_recipe"] = "rowwise"
        notes.append("fp8_recipe tensorwise -> rowwise: torchtitan main's Float8LinearConverter runs torchao's rowwise "
                     "recipes only (recipe_name rowwise or rowwise_with_gw_hp, torchtitan/components/quantization/"
                     "float8.py since 6348d93d1, 2026-04); export --to torchtitan for a v0.2 TOML with tensorwise")
    _moe_layout(model, layout, changes, notes, registry=registry)
    mapped = layout.model_copy(update=changes) if changes else layout
    if mapped.interleave > 1:
        _layers_per_stage(model, mapped)
    return mapped, tuple(notes)


def data_parallel_shard_degree(layout: Layout, zero: int) -> int:
    """torchtitan's data_parallel_shard_degree for a layout run at ZeRO stage `zero`: FSDP is zero 3, or zero 1 under
    pipeline parallelism (the ZeRO-1 that FSDP runs as there); under HSDP the shard group (x cp, which torchtitan
    folds into FSDP), else every dp rank; 1 without FSDP."""
    fsdp = zero == Zero.PARAMETERS or (layout.pp > 1 and zero == Zero.OPTIMIZER)
    return (layout.shard_group // layout.cp if layout.shard_group else layout.dp) if fsdp else 1


def _no_float8_all_gather(layout: Layout, zero: int, *, registry: bool) -> str | None:
    """Why torchtitan would gather this layout's weights in 16 bits although it asks for fp8_param_gather, or None
    where its float8 all-gather runs (the tensorwise recipe, FSDP sharding over data_parallel_shard_degree > 1)."""
    if registry:
        return ("torchtitan main has no float8 all-gather (removed with the tensorwise recipe, torchtitan/components/"
                "quantization/float8.py since 6348d93d1); export --to torchtitan for a v0.2 TOML that has it")
    if layout.dtype != "fp8" or layout.fp8_recipe != "tensorwise":
        return f"torchao's float8 all-gather runs with the tensorwise recipe only, not {layout.fp8_recipe}"
    if data_parallel_shard_degree(layout, zero) <= 1:
        return "torchtitan casts for the all-gather only where FSDP shards over data_parallel_shard_degree > 1"
    return None


def _moe_layout(model: ModelSpec, layout: Layout, changes: dict[str, Any], notes: list[str], *,
                registry: bool = False) -> None:
    """What torchtitan's TOML job config (238fa995) can say of the MoE, CUDA-graph, optimizer-precision and MTP
    fields: expert TP 1 or tp (with ep > 1), the standard or DeepEP all-to-all, EP overlap only as the DualPipeV
    schedule, bf16 moments and master weights only together (training.dtype bfloat16); no shared-expert overlap,
    token drop, CUDA graphs or MTP layers. `registry`: torchtitan main's Python configs, whose model_registry also
    takes the HybridEP all-to-all."""
    ep = layout.ep
    if layout.etp is not None and layout.etp == layout.tp:
        changes["etp"] = None  # the same degree, spelled as the reader reads it
    trained_mtp = model.mtp_layers if layout.mtp_layers is None else layout.mtp_layers
    if layout.mtp_layers == 0 and not model.mtp_layers:
        changes["mtp_layers"] = None  # a model without MTP trains none either way, spelled as the reader reads it
    if ep > 1 and layout.expert_tp not in (1, layout.tp):
        raise PlannerError(f"etp({layout.expert_tp}): torchtitan's expert_tensor_parallel_degree is 1 or "
                           f"tensor_parallel_degree({layout.tp}); export for Megatron-LM")
    if ep == 1 and layout.expert_tp != layout.tp:
        raise PlannerError(f"etp({layout.expert_tp}) without expert parallelism: torchtitan splits experts with tp "
                           "when ep is 1; use ep > 1 or leave etp unset")
    if ep > 1 and layout.moe_dispatcher not in ("alltoall", "deepep") and not (
            registry and layout.moe_dispatcher == "hybridep"):
        raise PlannerError(f"moe_dispatcher {layout.moe_dispatcher}: torchtitan's expert_parallel_comm_backend is "
                           "standard (all-to-all) or deepep in its TOML configs; export for Megatron-LM")
    if ep == 1 and layout.moe_dispatcher != "alltoall":
        changes["moe_dispatcher"] = "alltoall"
        notes.append(f"moe_dispatcher {layout.moe_dispatcher} -> alltoall: without expert parallelism torchtitan "
                     "dispatches tokens locally")
    if layout.moe_ep_overlap and not (layout.pp > 1 and ep > 1 and layout.interleave == 2 and
                                      layout.recompute == "none"):
        raise PlannerError("moe_ep_overlap: torchtitan overlaps expert all-to-all only with the DualPipeV schedule "
                           "(pp > 1, ep > 1, two stages per rank: interleave 2) and no activation checkpointing")
    if layout.moe_delay_wgrad is not None and layout.moe_delay_wgrad != layout.moe_ep_overlap:
        raise PlannerError(f"moe_delay_wgrad {str(layout.moe_delay_wgrad).lower()}: torchtitan splits the weight "
                           "gradients off the backward only inside DualPipeV (moe_ep_overlap), always there; leave it "
                           "unset or export for Megatron-LM")
    for name, value in (("moe_shared_expert_overlap", layout.moe_shared_expert_overlap),
                        ("moe_capacity_factor", layout.moe_capacity_factor is not None),
                        ("cuda_graph_scope", bool(layout.cuda_graph_scope))):
        if value:
            raise PlannerError(f"{name}: torchtitan's TOML job config has no such setting; export for Megatron-LM")
    if trained_mtp:
        raise PlannerError(f"mtp_layers({trained_mtp}): torchtitan trains no multi-token-prediction layers; set "
                           "mtp_layers 0 or export for Megatron-LM")
    states = (layout.optimizer_state_dtype, layout.master_weights_dtype)
    if states not in (("fp32", "fp32"), ("bf16", "bf16")):
        raise PlannerError(f"optimizer_state_dtype {states[0]} with master_weights_dtype {states[1]}: torchtitan "
                           "keeps both in fp32 (mixed precision) or both in bf16 (training.dtype bfloat16)")
    if states == ("bf16", "bf16"):
        changes.pop("grad_dtype", None)
        notes[:] = [n for n in notes if not n.startswith("grad_dtype")]
        if layout.grad_dtype != "bf16":
            changes["grad_dtype"] = "bf16"
            notes.append(f"grad_dtype {layout.grad_dtype} -> bf16: with training.dtype bfloat16 torchtitan keeps "
                         "gradients in bf16")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def tables(ctx: ExportContext) -> dict[str, dict[str, Any]]:
    lay, model = ctx.layout, ctx.model
    out: dict[str, dict[str, Any]] = {"job": {"description": f"{ctx.model_id} on {lay.gpus} GPUs (planner export)"}}
    named = flavor_for(ctx.model_id)
    if named:
        out["model"] = {"name": named[0], "flavor": named[1]}
    else:  # torchtitan's transformers backend builds the published Hugging Face model
        repo = hf_backend_repo(ctx.model_id, model, lay)
        out["model"] = {"name": HF_BACKEND, "flavor": "full", "hf_assets_path": f"./assets/hf/{repo.split('/')[-1]}"}
        out["hf_transformers"] = {"model": repo}
    if lay.dtype == "fp8":
        out["model"]["converters"] = ["quantize.linear.mx" if lay.fp8_recipe == "mxfp8" else "quantize.linear.float8"]
        if lay.fp8_recipe == "rowwise":  # torchao's Float8LinearConfig recipe ([quantize.linear.float8] in v0.2)
            out["quantize.linear.float8"] = {"recipe_name": "rowwise"}
        if lay.fp8_param_gather:  # torchao's float8 FSDP all-gather, its amaxes in one all-reduce per step
            out["quantize.linear.float8"] = {"enable_fsdp_float8_all_gather": True,
                                             "precompute_float8_dynamic_scale_for_fsdp": True}
    training: dict[str, Any] = {"seq_len": lay.seq_len, "global_batch_size": lay.global_batch,
                                "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32"}
    training["local_batch_size"] = lay.micro_batch if lay.pp == 1 else lay.global_batch // lay.dp
    if lay.master_weights_dtype == "bf16":  # and bf16 moments: engine_layout allows only both
        training["dtype"] = "bfloat16"
    out["training"] = training
    shard = data_parallel_shard_degree(lay, lay.zero)
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": lay.dp // shard,
        "data_parallel_shard_degree": shard,
        "tensor_parallel_degree": lay.tp,
        "pipeline_parallel_degree": lay.pp,
        "context_parallel_degree": lay.cp,
    }
    if lay.ep > 1:
        parallelism["expert_parallel_degree"] = lay.ep
        parallelism["expert_tensor_parallel_degree"] = lay.expert_tp  # torchtitan's default is 1, planner's tp
        if lay.moe_dispatcher == "deepep":
            parallelism["expert_parallel_comm_backend"] = "deepep"
    if lay.overlap_tp_comm:
        parallelism["enable_async_tensor_parallel"] = True
    if lay.pp > 1:
        parallelism["pipeline_parallel_schedule"] = "DualPipeV" if lay.moe_ep_overlap else (
            "Interleaved1F1B" if lay.interleave > 1 else ("GPipe" if lay.schedule == "gpipe" else "1F1B"))
        parallelism["pipeline_parallel_microbatch_size"] = lay.micro_batch
        per = _layers_per_stage(model, lay) if lay.interleave > 1 else None
        if per is not None:
            parallelism["pipeline_parallel_layers_per_stage"] = per
    out["parallelism"] = parallelism
    ac: dict[str, Any] = {"mode": lay.recompute}
    if lay.recompute in ("selective", "op"):
        ac = {"mode": "selective", "selective_ac_option": "op"}
    elif lay.recompute == "full" and lay.recompute_layers_per_stage is not None:
        per_stage = -(-model.num_layers // lay.pp)
        ac = {"mode": "selective", "selective_ac_option": str(per_stage // lay.recompute_layers_per_stage)}
    out["activation_checkpoint"] = ac
    loss = lay.compile if lay.compile_loss is None else lay.compile_loss
    if lay.compile or loss:
        out["compile"] = {"enable": True, "components": ["model"] * lay.compile + ["loss"] * loss}
    if lay.offload_params or lay.offload_optimizer:
        out.setdefault("training", {})["enable_cpu_offload"] = True
    return out


def render(ctx: ExportContext) -> str:
    lines = [f"# {line}" for line in prediction_lines(ctx)]
    run = (f"# Run: NGPU={min(ctx.layout.gpus, ctx.hardware.node.gpus_per_node)} CONFIG_FILE=<this file> "
           "./run_train.sh")
    if flavor_for(ctx.model_id) is None:
        lines.append(f"{run} --job.custom_config_module={HF_BACKEND_CONFIG_MODULE} (on each node)")
        lines.append(f"# torchtitan has no flavor for '{ctx.model_id}': its transformers backend builds the Hugging "
                     "Face model named under [hf_transformers].")
    else:
        lines.append(f"{run} (on each node)")
    for name, table in tables(ctx).items():
        lines += ["", f"[{name}]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"
