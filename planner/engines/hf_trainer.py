"""Hugging Face Trainer runs: TrainingArguments command lines and accelerate config files -> Layout fields,
and a layout -> a Trainer command line.

Read as the Trainer and accelerate read them (transformers' TrainingArguments and HfArgumentParser,
accelerate's `launch` and its config YAML):

- the launcher: `torchrun` / `python -m torch.distributed.run` (--nproc_per_node x --nnodes), `accelerate
  launch` (--num_processes, all machines together; --config_file; --mixed_precision; --use_fsdp /
  --use_deepspeed with their --fsdp_* / --zero_stage flags), `deepspeed` (--num_gpus x --num_nodes);
- the script's TrainingArguments: --per_device_train_batch_size (micro batch), --gradient_accumulation_steps,
  --bf16 / --fp16 (a bare flag or `true`/`false`), --gradient_checkpointing (full recompute of every layer),
  --fsdp "full_shard auto_wrap" (full_shard / hybrid_shard: ZeRO 3, shard_grad_op: ZeRO 2, no_shard: DDP),
  --deepspeed ds_config.json (read as DeepSpeed reads it, with the Trainer's "auto" values filled),
  --optim, and --model_name_or_path (a catalog id, a Hugging Face id or a config.json / model folder);
  the sequence length from the script's own --max_seq_length / --max_length / --block_size /
  --model_max_length / --max_seq_len, else from the job;
- the accelerate config: distributed_type (FSDP, DEEPSPEED, MULTI_GPU, NO), mixed_precision, num_processes
  (checked against num_machines, of which it is a multiple),
  fsdp_config (fsdp_sharding_strategy, or FSDP2's fsdp_reshard_after_forward; fsdp_activation_checkpointing;
  fsdp_offload_params; fsdp_auto_wrap_policy) and deepspeed_config (a deepspeed_config_file, or zero_stage,
  offload_*_device and gradient_accumulation_steps inline).

FSDP and DDP keep fp32 parameters and gradients under bf16/fp16 autocast: gradients are read as fp32 (as for
torchtitan); the weights are counted as a 16-bit copy plus the optimizer's fp32 master, 2 bytes a parameter
above what autocast keeps (an upper bound).

CPU offload (FSDP --fsdp offload, fsdp_offload_params, DeepSpeed offload_*_device cpu) is read into the
layout's offload fields (host memory, GPU-host copies and the CPU optimizer step: docs/engines.md); NVMe
offload is refused, exit 2 naming the setting, as it is not estimated. Flags the Trainer has that do not
change memory are skipped; unknown ones (the script's own) are warned about.

Pure: text and parsed dicts in, values out; `planner.engines.job` reads the files and resolves the model.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.engines.common import (
    Collected,
    EngineImport,
    ExportContext,
    lora_targets_of,
    prediction_lines,
    resolve_batch,
)
from planner.engines.shell import before_redirection, run_script, script_index
from planner.errors import PlannerError
from planner.specs.bounds import over_limit
from planner.specs.layout import Layout, Zero
from planner.specs.model import ModelSpec

LAUNCHERS = ("torchrun", "accelerate", "deepspeed", "python", "python3")
SEQ_FLAGS = ("max_seq_length", "max_length", "block_size", "model_max_length", "max_seq_len", "seq_length")
TRUE, FALSE = ("true", "1", "yes", "y", "t", "on"), ("false", "0", "no", "n", "f", "off")
# bitsandbytes' AdamW with optim_bits 8 (Trainer.get_optimizer_cls_and_kwargs: "8bit" in the name; adamw_8bit is an
# alias of adamw_bnb_8bit; paged_ keeps its states in CUDA unified memory, resident on the GPU until evicted): Adam with
# optimizer_state_dtype int8
INT8_STATE_OPTIMIZERS = frozenset({"adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit"})
OPTIMIZERS = {  # transformers OptimizerNames -> planner's optimizer (Adam-like keep two fp32 moments)
    **{name: "adam" for name in ("adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw_apex_fused",
                                 "adamw_torch_xla", "adamw_torch_npu_fused", "adamw_anyprecision",
                                 "paged_adamw_32bit", *INT8_STATE_OPTIMIZERS)},
    "sgd": "sgd",
}


def optimizer_fields(optim: str) -> dict[str, str]:
    """The layout fields of a Trainer optimizer planner models (OPTIMIZERS): the optimizer and, for bitsandbytes'
    8-bit ones, the moments' dtype."""
    fields = {"optimizer": OPTIMIZERS[optim]}
    if optim in INT8_STATE_OPTIMIZERS:
        fields["optimizer_state_dtype"] = "int8"
    return fields
# TrainingArguments that change no per-GPU memory planner models (logging, schedule, data loading, saving)
IGNORED: frozenset[str] = frozenset({
    # TRL's SFTConfig data options, which change no memory or time (trl/trainer/sft_config.py)
    "eos_token", "pad_token", "packing_strategy", "padding_free",
    "completion_only_loss", "assistant_only_loss", "chat_template_path", "dataset_num_proc", "dataset_config",
    "dataset_train_split", "dataset_test_split",
    "output_dir", "overwrite_output_dir", "do_train", "do_eval", "do_predict", "eval_strategy",
    "evaluation_strategy", "per_device_eval_batch_size", "eval_steps", "learning_rate", "weight_decay",
    "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "num_train_epochs", "max_steps",
    "lr_scheduler_type", "warmup_ratio", "warmup_steps", "logging_dir", "logging_strategy", "logging_steps",
    "logging_first_step", "save_strategy", "save_steps", "save_total_limit", "save_only_model", "seed",
    "data_seed", "tf32", "dataloader_num_workers", "dataloader_pin_memory", "dataloader_drop_last",
    "report_to", "run_name", "remove_unused_columns", "label_names", "load_best_model_at_end",
    "metric_for_best_model", "greater_is_better", "push_to_hub", "hub_model_id", "hub_token", "resume_from_checkpoint",
    "ddp_timeout", "ddp_find_unused_parameters", "ddp_backend", "torch_compile_backend",
    "torch_compile_mode", "gradient_checkpointing_kwargs", "include_num_input_tokens_seen", "disable_tqdm",
    "group_by_length", "length_column_name", "full_determinism", "log_level", "lr_scheduler_kwargs",
    "fsdp_transformer_layer_cls_to_wrap", "fsdp_min_num_params", "bf16_full_eval", "fp16_full_eval",
    "dataset_name", "dataset_config_name", "train_file", "validation_file", "preprocessing_num_workers",
    "cache_dir", "tokenizer_name", "config_name", "use_fast_tokenizer", "trust_remote_code", "torch_dtype",
    "dataset_text_field", "packing", "low_cpu_mem_usage", "streaming", "overwrite_cache", "model_revision",
    "token", "use_auth_token", "max_train_samples", "max_eval_samples", "validation_split_percentage",
    "save_safetensors", "neftune_noise_alpha", "optim_args", "average_tokens_across_devices",
    "accelerator_config", "use_liger_kernel", "ignore_data_skip",
})
# accelerate launch options that take no value
ACCELERATE_SWITCHES = frozenset({"multi_gpu", "use_fsdp", "use_deepspeed", "cpu", "no_python", "main_process_only",
                                 "module", "debug", "quiet", "same_network", "tpu", "use_xpu", "monitor_interval"})


@dataclass
class Command:
    """A Trainer launch: the launcher's GPU count, the script's flags, and what they point to."""

    source: str
    launcher: str  # torchrun, accelerate, deepspeed, python
    gpus: int | None  # processes the launcher starts, when it says
    launcher_args: dict[str, str | bool] = field(default_factory=dict)
    args: dict[str, str | bool] = field(default_factory=dict)  # the training script's --flags
    warnings: list[str] = field(default_factory=list)
    script: str = ""  # the training script as the command names it (a path or a URL)

    @property
    def trl_script(self) -> str | None:
        """TRL's own script this command runs (sft, dpo, grpo, ...: trl/scripts/*.py, or its raw URL), or None."""
        parts = self.script.replace("\\", "/").split("/")
        if "trl" in parts[:-1] and parts[-1].endswith(".py"):
            return parts[-1][:-3]
        return None

    @property
    def model_ref(self) -> str | None:
        value = self.args.get("model_name_or_path", self.args.get("model_name", self.args.get("model_id")))
        return value if isinstance(value, str) else None

    @property
    def deepspeed_path(self) -> str | None:
        value = self.args.get("deepspeed")
        return value if isinstance(value, str) else None

    @property
    def accelerate_config_path(self) -> str | None:
        value = self.launcher_args.get("config_file")
        return value if isinstance(value, str) else None


# --- command line -> Command ---------------------------------------------------------------------
def _options(tokens: Sequence[str], source: str, switches: frozenset[str] = frozenset()) -> dict[str, str | bool]:
    """`--name value`, `--name=value`, bare `--name` (True); '-' and '_' alike, as HfArgumentParser and
    accelerate accept both."""
    out: dict[str, str | bool] = {}
    last: str | None = None  # the flag the words before this one belong to
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("-") or tok == "-":
            # HfArgumentParser gives a list-typed field nargs="+" (--report_to wandb tensorboard, TRL's
            # --lora_target_modules q_proj v_proj): a further word after a flag's value is that value's
            if out and last is not None and isinstance(out[last], str) and tok != "-":
                out[last] = f"{out[last]} {tok}"
                continue
            raise PlannerError(f"unexpected argument {tok!r} (not a --flag or its value)", source=source)
        name, eq, inline = tok.lstrip("-").partition("=")
        name = name.replace("-", "_")
        last = name
        if eq:
            out[name] = inline
        elif name not in switches and i < len(tokens) and not tokens[i].startswith("--"):
            out[name] = tokens[i]
            i += 1
        else:
            out[name] = True
    return out


def parse_command(text: str, source: str) -> Command:
    """The Trainer launch in a command line or a launch script (the last command that runs a Python script)."""
    script = run_script(text, source)
    launches = [tokens for _, tokens in script.commands if script_index(tokens) is not None]
    if not launches:
        raise PlannerError("no command that runs a training script (torchrun / python -m torch.distributed.run / "
                           "accelerate launch / deepspeed ... train.py --flags) was found", source=source)
    tokens = launches[-1]
    at = script_index(tokens)
    assert at is not None
    # `... --bf16 | tee log` / `&> log`: bash passes the program nothing from the redirection or pipe on
    head, args = tokens[:at], before_redirection(tokens[at + 1:])
    launcher = _launcher(head, source)
    launcher_opts = _launcher_options(head, launcher, source)
    command = Command(source=source, launcher=launcher, gpus=None, launcher_args=launcher_opts,
                      args=_options(args, source), script=tokens[at])
    command.gpus = _launcher_gpus(launcher, launcher_opts, source)
    return command


def _launcher(head: Sequence[str], source: str) -> str:
    words = [w.rsplit("/", 1)[-1] for w in head if not w.startswith("-") and "=" not in w]
    if not words:
        return "python"
    first = words[0]
    if first in ("python", "python3") and "torch.distributed.run" in head:
        return "torchrun"
    if first == "accelerate":
        if "launch" not in words:
            raise PlannerError("'accelerate' without 'launch' starts no training", source=source)
        return "accelerate"
    if first in ("torchrun", "deepspeed"):
        return first
    if first in ("python", "python3"):
        return "python"
    return first


def _launcher_options(head: Sequence[str], launcher: str, source: str) -> dict[str, str | bool]:
    if launcher == "python":
        return {}
    words = list(head)
    # skip the program and subcommand words: torchrun / python -m torch.distributed.run / accelerate launch
    while words and not words[0].startswith("-"):
        words.pop(0)
    if launcher == "torchrun" and words[:2] == ["-m", "torch.distributed.run"]:
        words = words[2:]
    clean: list[str] = []
    for w in words:
        if w in ("-m", "torch.distributed.run", "launch", "-u"):
            continue
        clean.append(w)
    return _options(clean, source, ACCELERATE_SWITCHES if launcher == "accelerate" else frozenset())


def int_flag(value: Any, flag: str, source: str) -> int:
    """A count from the command line (--per_device_train_batch_size 4): a positive integer, else PlannerError."""
    try:
        number = int(str(value))
    except ValueError:
        raise PlannerError(f"--{flag} needs an integer, got {value!r}", source=source) from None
    if number < 1:
        raise PlannerError(f"--{flag} must be positive, got {number}", source=source)
    return number


def _launcher_gpus(launcher: str, opts: Mapping[str, str | bool], source: str) -> int | None:
    if launcher == "torchrun":
        per = opts.get("nproc_per_node", opts.get("nproc-per-node"))
        if per is None or per in ("gpu", "auto"):
            return None
        nodes = str(opts.get("nnodes", "1")).split(":")[-1]  # elastic "1:4": the largest
        return int_flag(per, "nproc_per_node", source) * int_flag(nodes, "nnodes", source)
    if launcher == "accelerate":
        n = opts.get("num_processes")
        return int_flag(n, "num_processes", source) if n is not None else None
    if launcher == "deepspeed":
        gpus_each = opts.get("num_gpus")
        if gpus_each is None:
            return None
        return int_flag(gpus_each, "num_gpus", source) * int_flag(opts.get("num_nodes", "1"), "num_nodes", source)
    return 1  # plain python: one process


def flag_value(args: Mapping[str, str | bool], name: str, source: str) -> bool | None:
    """A TrainingArguments boolean: absent None, a bare flag True, else its value parsed as transformers does."""
    if name not in args:
        return None
    value = args[name]
    if isinstance(value, bool):
        return value
    low = value.lower()
    if low in TRUE:
        return True
    if low in FALSE:
        return False
    raise PlannerError(f"--{name} must be true or false, got {value!r}", source=source)


# --- accelerate config YAML -------------------------------------------------------------------------
FSDP1_STRATEGIES = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0, "HYBRID_SHARD": 3, "HYBRID_SHARD_ZERO2": 2,
                    "1": 3, "2": 2, "3": 0, "4": 3, "5": 2}  # FSDP ShardingStrategy names and accelerate's numbers


def _config_count(config: Mapping[str, Any], key: str, kind: str, source: str) -> int | None:
    """A count in an accelerate config YAML (num_processes, num_machines): None when absent, else a whole number
    (true, '2', 2.0 and two are errors), at least 1 and at most planner's limit for `kind`."""
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        shown = str(value).lower() if isinstance(value, bool) else repr(value)
        raise PlannerError(f"expected a whole number, got {shown}", source=source, field=key)
    if value < 1:
        raise PlannerError(f"must be at least 1, got {value}", source=source, field=key)
    problem = over_limit(kind, value)
    if problem:
        raise PlannerError(problem, source=source, field=key)
    return value


def accelerate_gpus(config: Any, source: str) -> int | None:
    """The GPU count an accelerate config states (num_processes, all machines together), None when it does not;
    PlannerError naming the file and key when num_processes or num_machines is malformed."""
    if not isinstance(config, Mapping):
        return None
    gpus = _config_count(config, "num_processes", "gpus", source)
    machines = _config_count(config, "num_machines", "nodes", source)
    if gpus is not None and machines is not None and gpus % machines:
        raise PlannerError(f"num_processes({gpus}) is the count over all machines and must be a multiple of "
                           f"num_machines({machines})", source=source, field="num_processes")
    return gpus


def _config_bool(section: Mapping[str, Any], key: str, default: bool, source: str, field: str) -> bool:
    """A boolean accelerate setting as accelerate reads it: `accelerate launch` passes config values on as
    environment variables, which the FSDP plugin reads with accelerate.utils.str_to_bool (y/yes/t/true/on/1 and
    n/no/f/false/off/0, any case); a YAML boolean or 0/1 likewise. Anything else is an error naming the setting."""
    value = section.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE + FALSE:
        return value.strip().lower() in TRUE
    shown = repr(value)
    raise PlannerError(f"must be true or false, got {shown}", source=source, field=field)


def _accelerate_fields(config: Mapping[str, Any], got: Collected) -> dict[str, Any]:
    """Layout fields from an accelerate config; returns {'distributed_type', 'deepspeed_config_file', ...}."""
    src = got.source
    kind = str(config.get("distributed_type", "NO")).upper()
    extra: dict[str, Any] = {"distributed_type": kind}
    precision = str(config.get("mixed_precision", "no")).lower()
    if precision in ("bf16", "fp16", "fp8"):
        got.set("dtype", precision, "mixed_precision")
    elif precision not in ("no", "none"):
        raise PlannerError(f"mixed_precision must be no, fp16, bf16 or fp8, got {precision!r}", source=src,
                           field="mixed_precision")
    gpus = accelerate_gpus(config, src)
    if gpus is not None:
        extra["gpus"] = gpus
    if kind == "FSDP":
        _fsdp_plugin(config.get("fsdp_config") or {}, got)
    elif kind == "DEEPSPEED":
        ds = config.get("deepspeed_config") or {}
        if not isinstance(ds, dict):
            raise PlannerError("expected a mapping", source=src, field="deepspeed_config")
        for key, field in (("offload_optimizer_device", "offload_optimizer"), ("offload_param_device", "offload_params")):
            device = str(ds.get(key, "none")).lower()
            if device == "cpu":  # ZeRO-Offload / ZeRO-Infinity to host memory (docs/engines.md, offload)
                got.set(field, True, f"deepspeed_config.{key}")
            elif device not in ("none", ""):
                raise PlannerError(f"{device} offload is not modelled (cpu or none); NVMe is not estimated", source=src,
                                   field=f"deepspeed_config.{key}")
        if ds.get("deepspeed_config_file"):
            extra["deepspeed_config_file"] = str(ds["deepspeed_config_file"])
        else:
            stage = ds.get("zero_stage", 0)
            if stage not in (0, 1, 2, 3):
                raise PlannerError(f"zero_stage must be 0-3, got {stage!r}", source=src,
                                   field="deepspeed_config.zero_stage")
            got.set("zero", int(stage), "deepspeed_config.zero_stage")
            if ds.get("gradient_accumulation_steps") not in (None, "auto"):
                extra["gradient_accumulation_steps"] = int_flag(ds["gradient_accumulation_steps"],
                                                            "gradient_accumulation_steps", src)
            extra["inline_deepspeed"] = True
    elif kind in ("MULTI_GPU", "NO"):
        got.set("zero", 0, f"distributed_type {kind}")
        got.set("grad_dtype", "fp32", "DDP under autocast (fp32 gradients)")
    else:
        raise PlannerError(f"distributed_type {kind} is not modelled (FSDP, DEEPSPEED, MULTI_GPU or NO)", source=src,
                           field="distributed_type")
    return extra


def _fsdp_plugin(fsdp: Mapping[str, Any], got: Collected, prefix: str = "fsdp_config.") -> None:
    """`prefix` names where the settings came from in messages: the config's fsdp_config, or `--` for the
    `accelerate launch --fsdp_*` flags."""
    src = got.source
    if not isinstance(fsdp, dict):
        raise PlannerError("expected a mapping", source=src, field="fsdp_config")
    if _config_bool(fsdp, "fsdp_offload_params", False, src, f"{prefix}fsdp_offload_params"):
        _fsdp_cpu_offload(got, f"{prefix}fsdp_offload_params")
    version = fsdp.get("fsdp_version", 1)
    if isinstance(version, str) and version.strip() in ("1", "2"):  # a launch flag's value
        version = int(version)
    if isinstance(version, bool) or version not in (1, 2):
        raise PlannerError(f"must be 1 or 2, got {version!r}", source=src, field=f"{prefix}fsdp_version")
    if version == 2:  # FSDP2: fully_shard; reshard_after_forward false keeps parameters gathered (ZeRO 2)
        reshard = _config_bool(fsdp, "fsdp_reshard_after_forward", True, src, f"{prefix}fsdp_reshard_after_forward")
        got.set("zero", 3 if reshard else 2, f"{prefix}fsdp_reshard_after_forward")
    else:
        strategy = str(fsdp.get("fsdp_sharding_strategy", "FULL_SHARD")).upper()
        if strategy not in FSDP1_STRATEGIES:
            raise PlannerError(f"fsdp_sharding_strategy {strategy} is not known (FULL_SHARD, SHARD_GRAD_OP, "
                               "NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2)", source=src,
                               field="fsdp_config.fsdp_sharding_strategy")
        got.set("zero", FSDP1_STRATEGIES[strategy], "fsdp_config.fsdp_sharding_strategy")
        if strategy.startswith("HYBRID") or strategy in ("4", "5"):
            got.warn(f"fsdp_sharding_strategy {strategy} shards within a node and replicates across nodes; planner "
                     "shards over all data-parallel ranks, so the model-state figure is a lower bound")
    if _config_bool(fsdp, "fsdp_activation_checkpointing", False, src, f"{prefix}fsdp_activation_checkpointing"):
        got.set("recompute", "full", f"{prefix}fsdp_activation_checkpointing")
    if str(fsdp.get("fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP")).upper() == "NO_WRAP":
        got.warn("fsdp_auto_wrap_policy NO_WRAP makes the whole model one FSDP unit, gathered at once; planner "
                 "counts one layer's gather buffer")
    got.set("grad_dtype", "fp32", "FSDP (fp32 sharded gradients under mixed precision)")


def _fsdp_cpu_offload(got: Collected, origin: str) -> None:
    """FSDP CPUOffload(offload_params=True): parameter shards on the host, gradients offloaded with them and the
    optimizer step on the CPU (torch.distributed.fsdp CPUOffload docs); planner's offload of parameters and of
    the optimizer (states and step), which the fsdp engine profile runs with torch's CPU Adam."""
    got.set("offload_params", True, origin)
    got.set("offload_optimizer", True, origin)


# --- TrainingArguments -> fields -------------------------------------------------------------------
def _fsdp_option(value: str | bool, got: Collected) -> None:
    if isinstance(value, bool) or value.lower() in TRUE + FALSE:  # transformers v5: --fsdp true + fsdp_config
        value = "full_shard" if value is True or str(value).lower() in TRUE else "no_shard"
    words = str(value).replace(",", " ").split()
    if "offload" in words:
        _fsdp_cpu_offload(got, "--fsdp offload")
    zero = None
    for word in words:
        if word in ("full_shard", "hybrid_shard"):
            zero = 3
        elif word in ("shard_grad_op", "hybrid_shard_zero2"):
            zero = 2
        elif word == "no_shard":
            zero = 0
        elif word not in ("auto_wrap", "offload"):
            raise PlannerError(f"--fsdp option {word!r} is not known (full_shard, shard_grad_op, hybrid_shard, "
                               "hybrid_shard_zero2, no_shard, offload, auto_wrap)", source=got.source, field="--fsdp")
    if zero is None:
        return
    got.set("zero", zero, "--fsdp")
    got.set("grad_dtype", "fp32", "--fsdp (fp32 sharded gradients under mixed precision)")
    if any(w.startswith("hybrid") for w in words):
        got.warn("--fsdp hybrid_shard shards within a node and replicates across nodes; planner shards over all "
                 "data-parallel ranks, so the model-state figure is a lower bound")


def fill_deepspeed_auto(ds: Mapping[str, Any], *, micro: int | None, accum: int | None, world: int,
                        dtype: str | None, source: str) -> dict[str, Any]:
    """A DeepSpeed config with the Trainer's "auto" values filled (transformers' HfTrainerDeepSpeedConfig:
    micro batch, accumulation, train batch = world x micro x accumulation, fp16/bf16 from --fp16/--bf16); a
    value that disagrees with the command line is an error, as the Trainer raises one."""
    out = dict(ds)

    def fill(key: str, value: Any, flag: str) -> None:
        if value is None:
            return
        if out.get(key) == "auto":
            out[key] = value
        elif key in out and out[key] != value:
            raise PlannerError(f"{key} = {out[key]} in the DeepSpeed config disagrees with {flag} = {value}; the "
                               "Trainer refuses the mismatch: write \"auto\" or the same value", source=source,
                               field=key)

    fill("train_micro_batch_size_per_gpu", micro, "--per_device_train_batch_size")
    fill("gradient_accumulation_steps", accum, "--gradient_accumulation_steps")
    if micro is not None and out.get("train_batch_size") == "auto":
        out["train_batch_size"] = world * micro * (accum or 1)
    for key in ("bf16", "fp16"):
        section = out.get(key)
        if not isinstance(section, dict):
            continue
        if section.get("enabled") == "auto":
            out[key] = {**section, "enabled": dtype == key}
        elif dtype is not None and bool(section.get("enabled", False)) != (dtype == key):
            raise PlannerError(f"{key}.enabled = {str(section.get('enabled')).lower()} in the DeepSpeed config "
                               f"disagrees with --{dtype}; the Trainer refuses the mismatch: write \"auto\"",
                               source=source, field=f"{key}.enabled")
    return out


# TRL's ModelConfig (trl/trainer/model_config.py @ f2cd5771): --use_peft wraps the model in PEFT's LoRA of rank
# --lora_r (16 by default) on --lora_target_modules; without it PEFT takes its default target modules for the model
# type (peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: q_proj and v_proj for Llama,
# Mistral, Qwen2 and most decoders): lora_targets qkv, which also adapts k (r x (h + kv) parameters more). The other
# flags are LoRA's hyper-parameters (alpha, dropout, rsLoRA's scaling, the task type), which change no memory or time.
TRL_LORA_DEFAULT_RANK = 16
TRL_SFT_MAX_LENGTH = 1024
TRL_PEFT_FLAGS = ("use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_task_type",
                  "use_rslora", "use_dora", "lora_modules_to_save", "lora_target_parameters", "load_in_4bit",
                  "load_in_8bit", "bnb_4bit_quant_type", "use_bnb_nested_quant")


def _trl_peft(args: Mapping[str, str | bool], got: Collected, source: str) -> None:
    """TRL's PEFT flags (TRL_PEFT_FLAGS) -> lora_rank and lora_targets; DoRA and a quantised base refused."""
    if not flag_value(args, "use_peft", source):
        if any(name in args for name in ("lora_r", "lora_target_modules")):
            got.warn("--lora_r / --lora_target_modules without --use_peft: TRL trains every weight")
        return
    if flag_value(args, "use_dora", source):
        raise PlannerError("--use_dora: DoRA's weight decomposition is not modelled; planner models LoRA",
                           source=source, field="--use_dora")
    for flag in ("load_in_4bit", "load_in_8bit"):
        if flag_value(args, flag, source):
            raise PlannerError(f"--{flag}: a quantised base model (QLoRA) is not modelled; planner holds the frozen "
                               "base weights in 16 bits", source=source, field=f"--{flag}")
    rank = int_flag(args["lora_r"], "lora_r", source) if "lora_r" in args else TRL_LORA_DEFAULT_RANK
    got.set("lora_rank", rank, "--use_peft --lora_r")
    targets = args.get("lora_target_modules")
    if isinstance(targets, str):
        got.set("lora_targets", "all_linear" if targets.strip() == "all-linear" else lora_targets_of(targets.split()),
                "--lora_target_modules")
    else:
        got.set("lora_targets", "qkv", "PEFT's default target modules for the model type (q_proj, v_proj)")
        got.warn("--use_peft without --lora_target_modules: PEFT's default targets for the model type (q_proj and "
                 "v_proj for Llama-family models) are read as the query, key and value projections (lora_targets qkv)")
    if args.get("lora_modules_to_save"):
        got.warn("--lora_modules_to_save trains those modules whole (their gradients and optimizer states are not "
                 "counted)")


def import_hf_trainer(
    command: Command | None,
    accelerate: Mapping[str, Any] | None,
    *,
    gpus: int,
    given: Mapping[str, Any],
    deepspeed_import: Any = None,
    source: str,
    model_has_mtp: bool = False,
) -> EngineImport:
    """The Trainer command line and/or accelerate config, the GPU count and the job's own fields -> Layout fields.

    `deepspeed_import` is the EngineImport of the DeepSpeed config the run points to (read by the caller with
    the Trainer's "auto" values filled by `fill_deepspeed_auto`); its fields take precedence for ZeRO and
    precision, as DeepSpeed then runs the optimizer."""
    got = Collected(source=source, warnings=list(command.warnings) if command else [])
    # the Trainer runs DeepSpeed when pointed at its config, else PyTorch DDP/FSDP (the fsdp engine profile)
    got.set("engine", "deepspeed" if deepspeed_import is not None else "fsdp", "the Trainer's backend", explicit=False)
    # the Trainer trains the transformers model, which builds no multi-token-prediction modules (DeepseekV3, MiMo,
    # Qwen3.5: the checkpoints' MTP weights are not loaded)
    if model_has_mtp:
        got.set("mtp_layers", 0, "transformers' models build no MTP modules", explicit=False)
    if command is not None and command.gpus is not None and command.gpus != gpus:
        started = f"{command.gpus} process" + ("" if command.gpus == 1 else "es")
        raise PlannerError(f"the launcher starts {started} but the job has gpus({gpus}); make them "
                           "agree", source=source)
    extra: dict[str, Any] = {}
    if accelerate is not None:
        extra = _accelerate_fields(accelerate, got)
        if extra.get("inline_deepspeed") or extra.get("deepspeed_config_file"):
            got.set("engine", "deepspeed", "distributed_type DEEPSPEED", explicit=False)
        if extra.get("gpus") is not None and extra["gpus"] != gpus:
            raise PlannerError(f"num_processes({extra['gpus']}) in the accelerate config disagrees with gpus({gpus})",
                               source=source, field="num_processes")
    args = command.args if command else {}
    launcher = command.launcher_args if command else {}
    # accelerate launch flags override its config file
    if command is not None and command.launcher == "accelerate":
        if isinstance(launcher.get("mixed_precision"), str) and launcher["mixed_precision"] in ("bf16", "fp16", "fp8"):
            got.set("dtype", launcher["mixed_precision"], "accelerate launch --mixed_precision")
        if launcher.get("use_fsdp"):
            _fsdp_plugin({k: v for k, v in launcher.items() if k.startswith("fsdp_")}, got, prefix="--")
        elif _config_bool(launcher, "fsdp_offload_params", False, source, "--fsdp_offload_params"):
            _fsdp_cpu_offload(got, "accelerate launch --fsdp_offload_params")
    # precision: --bf16 / --fp16 (the Trainer's autocast)
    bf16, fp16 = flag_value(args, "bf16", source), flag_value(args, "fp16", source)
    if bf16 and fp16:
        raise PlannerError("--bf16 and --fp16 are both true; keep one", source=source)
    if bf16 or fp16:
        got.set("dtype", "bf16" if bf16 else "fp16", "--bf16" if bf16 else "--fp16")
    elif command is not None and command.trl_script is not None and bf16 is None:
        # TRL's trainer configs train in bf16 unless told fp16 (trl/trainer/base_config.py @ f2cd5771:
        # bf16 = not fp16 when unset)
        got.set("dtype", "bf16", "TRL's default (bf16 unless --fp16)", explicit=False)
    if "fsdp" in args and args["fsdp"] not in ("", False):
        _fsdp_option(args["fsdp"], got)
    elif "zero" not in got.values and deepspeed_import is None and extra.get("distributed_type") in (None,):
        got.set("zero", 0, "DDP (no --fsdp, no --deepspeed)")
        got.set("grad_dtype", "fp32", "DDP under autocast (fp32 gradients)")
    if flag_value(args, "torch_compile", source):
        # TrainingArguments.torch_compile wraps the model in torch.compile; transformers' causal-LM models compute
        # their loss inside forward (self.loss_function), so the loss compiles with them (compile_loss follows)
        got.set("compile", True, "--torch_compile")
    if flag_value(args, "gradient_checkpointing", source):
        got.set("recompute", "full", "--gradient_checkpointing")
    elif "gradient_checkpointing" in args or "recompute" not in got.values:
        got.set("recompute", "none", "--gradient_checkpointing", explicit="gradient_checkpointing" in args)
    optim = args.get("optim")
    if isinstance(optim, str):
        if optim not in OPTIMIZERS:
            raise PlannerError(f"--optim {optim} is not modelled (planner knows {', '.join(sorted(OPTIMIZERS))}; "
                               "factored, low-rank and other 8-bit optimizers keep other state sizes)", source=source,
                               field="--optim")
        for name, value in optimizer_fields(optim).items():
            got.set(name, value, "--optim")
    for name in SEQ_FLAGS:
        if name in args:
            got.set("seq_len", int_flag(args[name], name, source), f"--{name}")
            break
    else:
        if command is not None and command.trl_script == "sft":
            # SFTConfig.max_length defaults to 1024 (trl/trainer/sft_config.py @ f2cd5771); with --packing every
            # sequence is packed to it, else batches are as long as their longest sample
            got.set("seq_len", TRL_SFT_MAX_LENGTH, "SFTConfig's default max_length", explicit=False)
            got.warn(f"no --max_length: TRL's SFT default {TRL_SFT_MAX_LENGTH} tokens is planned for"
                     + ("" if flag_value(args, "packing", source) else " (without --packing a batch is as long as its "
                        "longest sample: the plan is for the longest)"))
    _trl_peft(args, got, source)
    got.set("flash_attention", True, "the Trainer's SDPA attention", explicit=False)
    got.set("overlap_grad_reduce", True, "DDP/FSDP overlap", explicit=False)
    for name in args:
        if name in IGNORED or name in ("model_name_or_path", "model_name", "model_id", "deepspeed", "bf16", "fp16",
                                       "fsdp", "gradient_checkpointing", "optim", "per_device_train_batch_size",
                                       "torch_compile",
                                       "gradient_accumulation_steps", "fsdp_config", *SEQ_FLAGS, *TRL_PEFT_FLAGS):
            continue
        got.warn(f"--{name} is not a setting planner reads (the script's own, or one that does not change memory); "
                 "ignored")
    if isinstance(args.get("fsdp_config"), str):
        got.warn("--fsdp_config is not read; give its settings in an accelerate config or the --fsdp option")
    if extra.get("distributed_type") == "DEEPSPEED" and deepspeed_import is None and not extra.get("inline_deepspeed"):
        raise PlannerError("the accelerate config names a DeepSpeed config file planner could not read",
                           source=source, field="deepspeed_config.deepspeed_config_file")

    micro = int_flag(args["per_device_train_batch_size"], "per_device_train_batch_size", source) \
        if "per_device_train_batch_size" in args else None
    accum = int_flag(args["gradient_accumulation_steps"], "gradient_accumulation_steps", source) \
        if "gradient_accumulation_steps" in args else extra.get("gradient_accumulation_steps")
    if micro is None and "per_device_train_batch_size" not in args and deepspeed_import is None:
        micro = 8  # TrainingArguments' default per_device_train_batch_size
        got.warn("--per_device_train_batch_size is not given: the Trainer's default 8 is used")
    if accum is None and deepspeed_import is None:
        accum = 1  # TrainingArguments' default
    if deepspeed_import is not None:
        ds_fields = dict(deepspeed_import.fields)
        got.warnings.extend(deepspeed_import.warnings)
        for name in ("zero", "dtype", "grad_dtype", "optimizer", "tp", "pp", "cp", "dp", "overlap_grad_reduce",
                     "offload_optimizer", "offload_params", "cpu_optimizer"):
            if name in ds_fields:
                got.set(name, ds_fields[name], deepspeed_import.origins.get(name, "the DeepSpeed config"))
        if "recompute" in ds_fields and "recompute" not in got.values:
            got.set("recompute", ds_fields["recompute"], "the DeepSpeed config")
        micro, accum = ds_fields["micro_batch"], ds_fields["global_batch"] // (ds_fields["micro_batch"] *
                                                                              ds_fields["dp"])
    fields = got.merge({k: v for k, v in given.items() if k not in ("global_batch", "micro_batch")})
    if fields.get("dtype") is None:
        raise PlannerError("neither --bf16 nor --fp16 (nor accelerate's mixed_precision) is set, so the Trainer "
                           "would train in fp32, which planner does not model; add --bf16 true", source=source)
    tp, pp, cp = (int(fields.get(k, 1)) for k in ("tp", "pp", "cp"))
    if gpus % (tp * pp * cp):
        raise PlannerError(f"gpus({gpus}) is not divisible by tp({tp}) * pp({pp}) * cp({cp})", source=source)
    dp = int(fields.get("dp") or gpus // (tp * pp * cp))
    fields["dp"] = dp
    if micro is None:
        micro = given.get("micro_batch")
    global_batch = given.get("global_batch")
    fields["global_batch"], fields["micro_batch"] = resolve_batch(
        global_batch=global_batch, micro_batch=micro, grad_accum=accum if global_batch is None or accum else None,
        dp=dp, source=source,
        names=("training.global_batch", "--per_device_train_batch_size", "--gradient_accumulation_steps"))
    if fields.get("seq_len") is None:
        raise PlannerError("the sequence length is not on the command line (--max_seq_length, --max_length, "
                           "--block_size, ...); give training.seq_len or --seq-len", source=source)
    # with a DeepSpeed config DeepSpeed runs the optimizer and the sharding: its rules apply to changes
    return EngineImport(format="deepspeed" if deepspeed_import is not None or extra.get("inline_deepspeed")
                        else "hf_trainer", source=source, fields=fields, warnings=tuple(got.warnings),
                        origins=dict(got.origin))


# --- writer --------------------------------------------------------------------------------------
# Layout -> a Trainer launch command (torchrun ... train.py TrainingArguments), as a bash script whose
# comments carry planner's prediction. The Trainer runs data parallelism only (DDP, or FSDP through
# --fsdp); its gradient checkpointing recomputes whole layers.

def engine_layout(model: ModelSpec, layout: Layout) -> tuple[Layout, tuple[str, ...]]:
    """The layout the Trainer runs for this one, with a note per change; PlannerError when it cannot."""
    for name, word in (("tp", "tensor"), ("pp", "pipeline"), ("cp", "context"), ("ep", "expert")):
        if getattr(layout, name) > 1:
            raise PlannerError(f"{name}({getattr(layout, name)}): the Trainer's --fsdp runs data parallelism only; "
                               f"{word} parallelism needs Megatron-LM, torchtitan or DeepSpeed")
    if layout.zero == Zero.OPTIMIZER:
        raise PlannerError("zero(1): the Trainer's --fsdp shards gradients too (shard_grad_op, ZeRO 2) or "
                           "everything (full_shard, ZeRO 3); ZeRO 1 needs --deepspeed (export for deepspeed)")
    if layout.recompute == "selective":
        raise PlannerError("recompute(selective): --gradient_checkpointing recomputes whole layers; use recompute "
                           "full or none")
    if layout.recompute_layers_per_stage is not None:
        raise PlannerError("recompute_layers_per_stage: --gradient_checkpointing checkpoints every layer")
    if layout.dtype == "fp8":
        raise PlannerError("dtype(fp8): TrainingArguments has no fp8 flag (accelerate's fp8 needs its own config); "
                           "use bf16")
    if layout.activation_input_fp8:
        raise PlannerError("activation_input_fp8: the Trainer's models keep the activation's input in 16 bits (the fp8 store is "
                           "Megatron-LM's --activation-func-fp8-input-store); export for Megatron-LM")
    if layout.fp8_param_gather:
        raise PlannerError("fp8_param_gather: the Trainer keeps 16-bit weights")
    if not layout.flash_attention:
        raise PlannerError("flash_attention(false): the Trainer's models pick their attention kernel "
                           "(attn_implementation) themselves; use flash_attention true")
    changes: dict[str, Any] = {}
    notes: list[str] = []
    if layout.compile_loss is not None and layout.compile_loss != layout.compile:  # one switch for both
        both = layout.compile or layout.compile_loss
        changes["compile"], changes["compile_loss"] = both, None
        notes.append(f"compile and compile_loss -> {str(both).lower()}: --torch_compile compiles the model and the loss "
                     "its forward computes together")
    if layout.grad_dtype != "fp32":
        changes["grad_dtype"] = "fp32"
        notes.append(f"grad_dtype {layout.grad_dtype} -> fp32: DDP and FSDP keep fp32 gradients under autocast")
    if not layout.overlap_grad_reduce:
        changes["overlap_grad_reduce"] = True
        notes.append("overlap_grad_reduce -> true: DDP/FSDP overlap the reduction with backward")
    if layout.overlap_tp_comm:
        changes["overlap_tp_comm"] = False
        notes.append("overlap_tp_comm -> false: the Trainer runs no tensor parallelism")
    if layout.schedule != "1f1b":
        changes["schedule"] = "1f1b"
    mtp = model.mtp_layers if layout.mtp_layers is None else layout.mtp_layers
    if mtp:
        notes.append(f"mtp_layers {mtp} -> 0: the Trainer trains the transformers model, which builds no "
                     "multi-token-prediction modules")
    if mtp:
        changes["mtp_layers"] = 0
    return (layout.model_copy(update=changes) if changes else layout), tuple(notes)


FSDP_OPTION = {3: "full_shard auto_wrap", 2: "shard_grad_op auto_wrap"}


def command_args(ctx: ExportContext, model_ref: str) -> list[str]:
    lay = ctx.layout
    accum = lay.global_batch // (lay.micro_batch * lay.dp)
    args = ["--model_name_or_path", model_ref, "--per_device_train_batch_size", str(lay.micro_batch),
            "--gradient_accumulation_steps", str(accum), "--max_seq_length", str(lay.seq_len),
            f"--{'fp16' if lay.dtype == 'fp16' else 'bf16'}", "true",
            "--gradient_checkpointing", "true" if lay.recompute == "full" else "false"]
    if lay.zero in FSDP_OPTION:
        args += ["--fsdp", FSDP_OPTION[lay.zero]]
    optim = "sgd" if lay.optimizer == "sgd" else "adamw_bnb_8bit" if lay.optimizer_state_dtype == "int8" else (
        "adamw_torch_fused")
    args += ["--optim", optim]
    if lay.compile:
        args += ["--torch_compile", "true"]
    return args


def render(ctx: ExportContext) -> str:
    from planner.engines.torchtitan import hf_repo_id

    lay = ctx.layout
    per_node = min(lay.gpus, ctx.hardware.node.gpus_per_node)
    nodes = -(-lay.gpus // ctx.hardware.node.gpus_per_node)
    model_ref = hf_repo_id(ctx.model) or ctx.model_id
    lines = ["#!/bin/bash", "# Hugging Face Trainer launch (TrainingArguments). train.py: your script that builds the "
             "Trainer from HfArgumentParser."]
    lines += [f"# {line}" for line in prediction_lines(ctx)]
    lines.append("# --max_seq_length is read by planner; pass it to your tokenisation if your script names it "
                 "otherwise.")
    launcher = ["torchrun", "--nnodes", str(nodes), "--nproc_per_node", str(per_node)]
    body = [*launcher, "train.py", *command_args(ctx, model_ref)]
    lines += ["", " ".join(shlex.quote(w) for w in body), ""]
    return "\n".join(lines)
