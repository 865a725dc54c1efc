"""NeMo AutoModel recipe (YAML) -> Layout fields.

Read as AutoModel's recipes read it (NVIDIA-NeMo/Automodel @ 36044ad3, the `automodel <recipe.yaml>` launcher):
`step_scheduler` gives the batch (grad_acc_steps = global_batch_size // (local_batch_size x dp),
components/training/step_scheduler.py), `distributed` the parallel degrees, FSDP2 and activation
checkpointing (components/distributed/config.py), `distributed.pipeline` the torch-pipelining schedule and its
virtual stages (components/distributed/pipelining/functional.py calculate_virtual_stages: ceil(layers /
layers_per_stage) stages, rounded to a multiple of pp as `round_virtual_stages_to_pp_multiple` says),
`model.backend` the attention kernel and the MoE dispatcher (components/models/common/utils.py BackendConfig),
`dataset.seq_len` the sequence length.

Mapping: strategy fsdp2 (or megatron_fsdp) -> ZeRO 3 over dp, ZeRO 1 with pipeline parallelism (torch
pipelining keeps the stage gathered for the step: specs.engine _TORCH_PP_FSDP); HSDP (dp_replicate_size > 1) ->
shard_group = dp / replicate; activation_checkpointing true -> full recompute per block; the micro-batch is
pp_microbatch_size under PP, else local_batch_size. The model is the Hugging Face repository the recipe names
(`model.config.pretrained_model_name_or_path` or `model.pretrained_model_name_or_path`); planner.engines.job maps
it to the catalog.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from planner.engines.common import Collected, EngineImport, ExportContext, lora_targets_of, prediction_lines
from planner.engines.torchtitan import hf_repo_id
from planner.errors import PlannerError, short_repr
from planner.specs.layout import Layout, Zero
from planner.specs.model import ModelSpec

FORMAT = "automodel"
# TEFp8Config's recipe names (Transformer Engine's current and block scaling) as Layout.fp8_recipe names them.
TE_FP8_RECIPES: dict[str, str] = {"current": "tensorwise", "block": "blockwise"}

# model.backend.attn -> the attention kernel that runs (Layout.attention_kernel): Transformer Engine's
# DotProductAttention and cuDNN are cuDNN fused attention on Hopper; PyTorch SDPA picks FlashAttention-2.
ATTENTION_KERNELS = {"te": "fused", "cudnn": "fused", "sdpa": "flash2"}
# model.backend.dispatcher -> Layout.moe_dispatcher ("torch": DTensor all-gather/reduce-scatter)
DISPATCHERS = {"deepep": "deepep", "hybridep": "hybridep", "torch": "allgather"}
SINGLE_STAGE = {"1f1b", "gpipe"}
MULTI_STAGE = {"interleaved1f1b", "loopedbfs"}
STRATEGIES = {"fsdp2", "megatron_fsdp", "ddp"}
SECTIONS = ("distributed", "distributed.pipeline", "autopipeline", "parallelizer", "step_scheduler", "model",
            "model.config", "model.backend", "optimizer", "dataset", "packed_sequence", "peft")


# AutoModel's config loader turns these words into Python values wherever a setting holds one (config/loader.py
# translate_value @ 36044ad3), so its recipes write `dp_size: none` for "derive it from the world size", and it
# evaluates a setting written as a quoted number as that number.
SPECIAL_WORDS: dict[str, Any] = {"none": None, "None": None, "true": True, "True": True, "false": False,
                                 "False": False}
_INTEGER = re.compile(r"[+-]?\d{1,18}")


def _translated(value: Any) -> Any:
    """A setting's value as AutoModel's loader reads it (SPECIAL_WORDS; a quoted whole number as the number)."""
    if isinstance(value, str):
        if value in SPECIAL_WORDS:
            return SPECIAL_WORDS[value]
        if _INTEGER.fullmatch(value.strip()):
            return int(value)
    return value


def _get(config: dict[str, Any], path: str, default: Any = None) -> Any:
    node: Any = config
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = _translated(node[key])
    return node


# The 2025 recipes put the pipeline settings in an `autopipeline` section and the activation checkpointing under
# `parallelizer`, and name the strategy by its manager class (examples/benchmark/configs/*.yaml @ 89e3a9fd): read
# both spellings, the newer first.
ALIASES = {
    "distributed.pipeline.": "autopipeline.",
    "distributed.activation_checkpointing": "parallelizer.activation_checkpointing",
}
MANAGERS = {"FSDP2Manager": "fsdp2", "MegatronFSDPManager": "megatron_fsdp", "DDPManager": "ddp"}


def _lookup(config: dict[str, Any], path: str, default: Any = None) -> Any:
    value = _get(config, path)
    if value is not None:
        return value
    for new, old in ALIASES.items():
        if path.startswith(new):
            return _get(config, old + path[len(new):], default)
    return default


def _name(config: dict[str, Any], path: str, default: str, source: str) -> str:
    """A setting that names something (a class, a kernel, a dtype, a recipe): its text, `default` where it is absent.
    A list or a mapping is refused before str() walks it (a YAML alias bomb holds 9^9 items)."""
    value = _get(config, path)
    if value is None:
        return default
    if isinstance(value, (list, dict)):
        raise PlannerError(f"must be a name, got {short_repr(value)}", source=source, field=path)
    return str(value)


def _strategy(config: dict[str, Any], source: str) -> str:
    strategy = _get(config, "distributed.strategy")
    if strategy is not None and not isinstance(strategy, str):  # str() of a list walks it all (an alias bomb)
        raise PlannerError(f"must be a name (fsdp2, megatron_fsdp, ddp), got {short_repr(strategy)}",
                           source=source, field="distributed.strategy")
    if strategy is not None:
        return strategy
    target = _name(config, "distributed._target_", "", source)
    return next((name for cls, name in MANAGERS.items() if target.endswith(cls)), "fsdp2")


def _int(config: dict[str, Any], path: str, source: str, default: int | None = None) -> int | None:
    value = _lookup(config, path)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlannerError(f"{path} must be a positive whole number, got {short_repr(value)}", source=source,
                           field=path)
    return value


def model_repo(config: dict[str, Any]) -> str | None:
    """The Hugging Face repository the recipe builds its model from, or None."""
    for path in ("model.config.pretrained_model_name_or_path", "model.pretrained_model_name_or_path"):
        value = _get(config, path)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def virtual_stages(num_layers: int, layers_per_stage: int | None, pp: int, schedule: str, rounding: str | None,
                   source: str) -> int:
    """Stages per pipeline rank, as AutoModel's calculate_virtual_stages derives them."""
    single = schedule in SINGLE_STAGE
    if layers_per_stage is None:
        return 1 if single else 2
    stages = math.ceil(num_layers / layers_per_stage)
    if stages % pp:
        if rounding == "up":
            stages += pp - stages % pp
        elif rounding == "down":
            stages -= stages % pp
        else:
            raise PlannerError(f"{stages} virtual stages ({num_layers} layers, layers_per_stage {layers_per_stage}) "
                               f"do not divide over pp_size {pp}; set round_virtual_stages_to_pp_multiple or change "
                               "layers_per_stage (AutoModel raises the same)", source=source,
                               field="distributed.pipeline.layers_per_stage")
    per_rank = stages // pp
    if single and per_rank != 1:
        raise PlannerError(f"schedule {schedule} runs one stage per rank, and layers_per_stage {layers_per_stage} "
                           f"gives {per_rank}; raise layers_per_stage to {num_layers // pp} (AutoModel raises the same)",
                           source=source, field="distributed.pipeline.layers_per_stage")
    if not single and per_rank < 2:
        raise PlannerError(f"schedule {schedule} needs at least 2 stages per rank, and layers_per_stage "
                           f"{layers_per_stage} gives {per_rank}; lower it to {num_layers // (2 * pp)}",
                           source=source, field="distributed.pipeline.layers_per_stage")
    return per_rank


def _sequence_length(config: dict[str, Any], source: str, got: Collected, given: dict[str, Any]) -> None:
    """The tokens per sample: packed_sequence.packed_sequence_size where packing is on (every sample is packed to
    that length), else the dataset's dataset.seq_len (the mock and pre-training datasets: fixed length), else its
    dataset.seq_length (the chat and SFT datasets: the length a sample is truncated to, and padded to only with
    padding max_length; otherwise a batch is as long as its longest sample, so the length is an upper bound and a
    warning says so). Where the recipe fixes none, the job must give one."""
    packed = _get(config, "packed_sequence.packed_sequence_size")
    if packed is not None and packed != 0:
        size = _int(config, "packed_sequence.packed_sequence_size", source)
        got.set("seq_len", size, "packed_sequence.packed_sequence_size")
        return
    seq = _int(config, "dataset.seq_len", source)
    if seq is not None:
        got.set("seq_len", seq, "dataset.seq_len")
        return
    longest = _int(config, "dataset.seq_length", source)
    if longest is not None:
        got.set("seq_len", longest, "dataset.seq_length")
        padding = _get(config, "dataset.padding")
        if padding != "max_length" and "seq_len" not in given:
            got.warn(f"dataset.seq_length {longest} is the length samples are truncated to; with padding "
                     f"{short_repr(padding)} a batch is as long as its longest sample unless the collater pads every "
                     "batch to it, so the plan is for the longest batch (give training.seq_len for a typical one)")
        return
    if "seq_len" not in given:
        raise PlannerError("the recipe fixes no sequence length: no dataset.seq_len, dataset.seq_length or "
                           "packed_sequence.packed_sequence_size; its batches are padded to their longest sample, so "
                           "give the length to plan for (--seq-len, or training.seq_len in a job)", source=source,
                           field="dataset")


def import_automodel(config: dict[str, Any], *, gpus: int, given: dict[str, Any], model: ModelSpec,
                     source: str) -> EngineImport:
    """Layout fields of an AutoModel recipe for `model` on `gpus` GPUs; `given` fills what the recipe lacks (a
    job value that contradicts it is an error)."""
    if not isinstance(config, dict):
        raise PlannerError("an AutoModel recipe is a YAML mapping", source=source)
    for section in SECTIONS:
        value = _get(config, section)
        if value is not None and not isinstance(value, dict):
            raise PlannerError(f"{section} must be a mapping of settings, got {short_repr(value)}", source=source,
                               field=section)
    got = Collected(source=source)
    got.set("engine", "automodel", "the engine file", explicit=False)
    strategy = _strategy(config, source)
    if strategy not in STRATEGIES:
        raise PlannerError(f"distributed.strategy {strategy} is not known to planner (it reads "
                           f"{', '.join(sorted(STRATEGIES))})", source=source, field="distributed.strategy")
    degrees = {name: _int(config, f"distributed.{name}_size", source, 1) or 1 for name in ("tp", "cp", "pp", "ep")}
    for name, value in degrees.items():
        got.set(name, value, f"distributed.{name}_size")
    model_parallel = degrees["tp"] * degrees["cp"] * degrees["pp"]
    if gpus % model_parallel:
        raise PlannerError(f"gpus({gpus}) is not divisible by tp_size x cp_size x pp_size = {model_parallel}",
                           source=source, field="distributed")
    dp = _int(config, "distributed.dp_size", source) or gpus // model_parallel
    if dp * model_parallel != gpus:
        raise PlannerError(f"distributed.dp_size {dp} x tp x cp x pp = {dp * model_parallel}, not the {gpus} GPUs",
                           source=source, field="distributed.dp_size")
    got.set("dp", dp, "distributed.dp_size (or the GPUs left over)")
    pp = degrees["pp"]
    sharded = strategy != "ddp" and (dp > 1 or degrees["cp"] > 1)
    got.set("zero", (1 if pp > 1 else 3) if sharded else 0,
            f"distributed.strategy {strategy}" + (" under pipeline parallelism: ZeRO-1" if sharded and pp > 1 else ""))
    replicate = _int(config, "distributed.dp_replicate_size", source, 1) or 1
    if replicate > 1:
        if dp % replicate:
            raise PlannerError(f"dp_replicate_size {replicate} does not divide dp {dp}", source=source,
                               field="distributed.dp_replicate_size")
        got.set("shard_group", dp // replicate * degrees["cp"], "distributed.dp_replicate_size (HSDP)")
    got.set("sequence_parallel", bool(_get(config, "distributed.sequence_parallel", False)) and degrees["tp"] > 1,
            "distributed.sequence_parallel")
    if model.moe is not None and degrees["tp"] > 1:  # the experts shard over EP only: no expert TP
        got.set("etp", 1, "distributed.tp_size (AutoModel's experts are not tensor-parallel)")
    ac = _lookup(config, "distributed.activation_checkpointing", False)
    if isinstance(ac, str) and ac.lower().replace("-", "_") == "selective":
        raise PlannerError("distributed.activation_checkpointing selective (AutoModel's MoE selective AC) is not "
                           "modelled; give true (per-block) or false", source=source,
                           field="distributed.activation_checkpointing")
    got.set("recompute", "full" if ac else "none", "distributed.activation_checkpointing")

    global_batch = _int(config, "step_scheduler.global_batch_size", source)
    local = _int(config, "step_scheduler.local_batch_size", source)
    micro = _int(config, "distributed.pipeline.pp_microbatch_size", source, 1) if pp > 1 else local
    if global_batch is not None:
        got.set("global_batch", global_batch, "step_scheduler.global_batch_size")
        if local is not None and global_batch % (local * dp):
            raise PlannerError(f"global_batch_size {global_batch} is not a multiple of local_batch_size {local} x dp "
                               f"{dp} (AutoModel's grad_acc_steps = global // (local x dp))", source=source,
                               field="step_scheduler.global_batch_size")
    if micro is not None:
        if pp > 1 and local is not None and local % micro:
            raise PlannerError(f"local_batch_size {local} is not a multiple of pp_microbatch_size {micro}",
                               source=source, field="distributed.pipeline.pp_microbatch_size")
        got.set("micro_batch", micro, "distributed.pipeline.pp_microbatch_size" if pp > 1 else
                "step_scheduler.local_batch_size")
    _sequence_length(config, source, got, given)

    if pp > 1:
        schedule = str(_lookup(config, "distributed.pipeline.pp_schedule", "1f1b")).lower()
        if schedule not in SINGLE_STAGE | MULTI_STAGE:
            raise PlannerError(f"pp_schedule {schedule} is not modelled (planner reads "
                               f"{', '.join(sorted(SINGLE_STAGE | MULTI_STAGE))})", source=source,
                               field="distributed.pipeline.pp_schedule")
        got.set("schedule", "gpipe" if schedule == "gpipe" else "1f1b", "distributed.pipeline.pp_schedule")
        layers = _int(config, "distributed.pipeline.layers_per_stage", source)
        rounding = _lookup(config, "distributed.pipeline.round_virtual_stages_to_pp_multiple")
        got.set("interleave", virtual_stages(model.num_layers, layers, pp, schedule, rounding, source),
                "distributed.pipeline.layers_per_stage")

    attn = _name(config, "model.backend.attn", "te", source)
    if attn == "eager":  # the unfused attention (scores materialised)
        pass
    elif attn in ATTENTION_KERNELS:
        if ATTENTION_KERNELS[attn] != "fused":  # fused is the profile's own (Layout.attention_kernel null)
            got.set("attention_kernel", ATTENTION_KERNELS[attn], "model.backend.attn")
    else:
        got.warn(f"model.backend.attn {attn}: timed as the profile's fused attention")
    got.set("flash_attention", attn != "eager", "model.backend.attn")
    if model.moe is not None and degrees["ep"] > 1:
        dispatcher = _name(config, "model.backend.dispatcher", "deepep", source)
        if dispatcher not in DISPATCHERS:
            got.warn(f"model.backend.dispatcher {dispatcher}: timed as DeepEP's")
        got.set("moe_dispatcher", DISPATCHERS.get(dispatcher, "deepep"), "model.backend.dispatcher")
    if model.mtp_layers:
        got.set("mtp_layers", 0, "the Hugging Face modeling code AutoModel trains builds no MTP module", explicit=False)
    target = _name(config, "optimizer._target_", "torch.optim.Adam", source)
    if target.endswith(("SGD", ".sgd")):
        got.set("optimizer", "sgd", "optimizer._target_")
    elif "transformer_engine" in target and "FusedAdam" in target:
        # Transformer Engine's FusedAdam keeps fp32 moments (exp_avg_dtype / exp_avg_sq_dtype default float32) and no
        # master copy unless master_weights is set (transformer_engine/pytorch/optimizers/fused_adam.py)
        master = bool(_get(config, "optimizer.master_weights", False))
        got.set("optimizer_state_dtype", "fp32", "optimizer._target_ (TE FusedAdam: fp32 moments)")
        got.set("master_weights_dtype", "fp32" if master else "bf16", "optimizer.master_weights")
    dtype_path = "model.torch_dtype" if _get(config, "model.torch_dtype") is not None else "model.dtype"
    dtype = _name(config, dtype_path, "bf16", source).replace("torch.", "")
    if dtype in ("bfloat16", "bf16", "auto"):
        got.set("dtype", "bf16", "model.torch_dtype (AutoModel builds in bf16)", explicit=False)
    elif dtype in ("float32", "fp32"):
        raise PlannerError("model.torch_dtype float32: planner's layouts train in 16 bits or fp8; give bf16",
                           source=source, field="model.torch_dtype")
    # FP8: Transformer Engine's recipe under model.backend.te_fp8 (TEFp8Config: current or block scaling), or the
    # torchao path's fp8 section
    if _get(config, "model.backend.te_fp8") not in (None, False):
        got.set("dtype", "fp8", "model.backend.te_fp8")
        recipe = _name(config, "model.backend.te_fp8.recipe", "current", source)
        if recipe in TE_FP8_RECIPES:
            got.set("fp8_recipe", TE_FP8_RECIPES[recipe], "model.backend.te_fp8.recipe")
        else:
            got.warn(f"model.backend.te_fp8.recipe {recipe!r} is not current or block scaling: modelled as per-tensor "
                     "current scaling (fp8_recipe tensorwise)")
    elif _get(config, "fp8") not in (None, False) and _get(config, "fp8.enabled", True):
        got.set("dtype", "fp8", "fp8")
        _torchao_fp8(config, got)
    _peft(config, source, got)
    fields = got.merge(given)
    return EngineImport(format=FORMAT, source=source, fields=fields, warnings=tuple(got.warnings), origins=got.origin)


def _torchao_fp8(config: dict[str, Any], got: Collected) -> None:
    """The `fp8:` section is AutoModel's torchao path (components/quantization/fp8.py @ 36044ad3, FP8Config): torchao's
    Float8Linear, which the automodel profile does not tell apart from its Transformer Engine path. Say what that
    leaves out: torchao casts the weights in every micro-batch (the profile caches them per step, as its Transformer
    Engine path does), a rowwise recipe_name runs torchao's per-row scaling (read here as per-tensor), and the float8
    FSDP all-gather gathers fp8 (read here as bf16); torchtitan's profile models all three."""
    recipe = _get(config, "fp8.recipe_name")
    left_out = ["torchao casts the weights in every micro-batch (counted once per step)"]
    if recipe not in (None, "tensorwise"):
        left_out.append(f"recipe_name {recipe} (read as per-tensor scaling)")
    elif _get(config, "fp8.enable_fsdp_float8_all_gather") is True:
        left_out.append("enable_fsdp_float8_all_gather (gathered in bf16 here)")
    got.warn("fp8: AutoModel's torchao Float8Linear path is modelled with the automodel profile's Transformer Engine "
             f"fp8 casts; left out: {'; '.join(left_out)}. torchtitan's profile models torchao's float8")


LORA_DEFAULT_RANK = 8  # PeftConfig.dim's default (components/_peft/lora.py @ 36044ad3)


def _peft(config: dict[str, Any], source: str, got: Collected) -> None:
    """The `peft:` section (components/_peft/lora.py PeftConfig, module_matcher.py ModuleMatcher @ 36044ad3): LoRA of
    rank `dim` (8 when unset) on the modules `target_modules` matches (`*_proj` when nothing is given: every
    projection), or on every linear layer with `match_all_linear`; the target list becomes lora_targets as
    engines.common.lora_targets_of reads it (qkv, attention, else all_linear). DoRA and a quantised base (QLoRA)
    are not modelled."""
    peft = _get(config, "peft")
    if peft is None:
        return
    if _get(config, "peft.use_dora") is True:
        raise PlannerError("peft.use_dora: DoRA's weight decomposition (a magnitude vector and a column norm of W + "
                           "B A every step) is not modelled; planner models LoRA (use_dora false)", source=source,
                           field="peft.use_dora")
    for key in ("quantization", "model.quantization_config", "model.load_in_4bit", "model.load_in_8bit"):
        if _get(config, key) not in (None, False):
            raise PlannerError("a quantised base model (QLoRA) is not modelled: planner holds the frozen base "
                               "weights in 16 bits; drop the quantisation to plan the bf16 LoRA run", source=source,
                               field=key)
    rank = _int(config, "peft.dim", source, LORA_DEFAULT_RANK)
    got.set("lora_rank", rank, "peft.dim")
    targets = _get(config, "peft.target_modules")
    patterns = [targets] if isinstance(targets, str) else list(targets) if isinstance(targets, list) else []
    if any(not isinstance(p, str) for p in patterns):
        raise PlannerError(f"peft.target_modules must be module-name patterns, got {short_repr(targets)}",
                           source=source, field="peft.target_modules")
    got.set("lora_targets", lora_targets_of(patterns), "peft.target_modules")
    if _get(config, "peft.match_all_linear") is True:
        got.warn("peft.match_all_linear also adapts the output layer (lm_head), which planner leaves frozen: its "
                 "adapter is 2 r (h + vocab) parameters more")
    if _get(config, "peft.exclude_modules"):
        got.warn("peft.exclude_modules: read as every linear layer of the blocks (lora_targets all_linear)")


# --- writer -------------------------------------------------------------------------------------------------

def layers_per_stage_for(num_layers: int, pp: int, per_rank: int) -> tuple[int, str] | None:
    """(layers_per_stage, rounding) that AutoModel's calculate_virtual_stages turns into `per_rank` stages per rank
    on `pp` ranks, or None where no value does."""
    for rounding in ("down", "up"):
        for lps in range(1, num_layers + 1):
            stages = math.ceil(num_layers / lps)
            stages = stages - stages % pp if rounding == "down" else stages + (-stages) % pp
            if stages == pp * per_rank:
                return lps, rounding
    return None


def engine_layout(model: ModelSpec, layout: Layout) -> tuple[Layout, tuple[str, ...]]:
    """The layout AutoModel would run for this one, and a note per change."""
    if layout.dtype == "fp16":
        raise PlannerError("AutoModel builds its models in bf16 (or trains fp8 through Transformer Engine), not "
                           "fp16; use dtype bf16")
    for flag, why in (("activation_input_fp8", "the fp8 store of the SwiGLU input is Megatron-LM's"),
                      ("fp8_param_gather", "FSDP2 gathers the bf16 parameters"),
                      ("fp8_attention", "its Transformer Engine attention runs in 16 bits in these recipes"),
                      ("moe_fused_mlp", "its experts are its own GroupedExperts modules, not Transformer Engine's fused "
                       "grouped MLP"),
                      ("offload_optimizer", "the recipes write no CPUOffloadPolicy here"),
                      ("offload_params", "the recipes write no CPUOffloadPolicy here")):
        if getattr(layout, flag):
            raise PlannerError(f"{flag}: {why}; export for Megatron-LM or drop it")
    if layout.dtype == "fp8" and layout.fp8_recipe not in TE_FP8_RECIPES.values():
        raise PlannerError(f"fp8_recipe {layout.fp8_recipe}: AutoModel's TEFp8Config takes current (tensorwise) or block "
                           "(blockwise) scaling; export for Megatron-LM or choose one of those")
    if layout.schedule == "dualpipe":
        raise PlannerError("schedule dualpipe: AutoModel's pipelining runs 1f1b, gpipe, interleaved1f1b or loopedbfs")
    moe_tp = model.moe is not None and layout.tp > 1
    if moe_tp and layout.expert_tp not in (1, layout.tp):
        raise PlannerError(f"etp({layout.expert_tp}): AutoModel's experts shard over EP only (expert TP 1)")
    changes: dict[str, Any] = {}
    notes: list[str] = []
    # the experts' TP degree as the reader reads it: 1 for a MoE model under TP (AutoModel's experts shard over EP
    # only), else unset (tp)
    target_etp = 1 if moe_tp else None
    if layout.etp != target_etp:
        changes["etp"] = target_etp
        if moe_tp and layout.expert_tp != 1:
            notes.append(f"etp {layout.expert_tp} -> 1: AutoModel's experts shard over EP only")
    sharded = (layout.zero > Zero.NONE and layout.dp > 1) or layout.cp > 1
    target = (1 if layout.pp > 1 else 3) if sharded else 0
    if layout.zero != target:
        changes["zero"] = target
        notes.append(f"zero {layout.zero} -> {target}: AutoModel shards with FSDP2 over dp (ZeRO-1 under pipeline "
                     "parallelism, which keeps the stage gathered for the step), or replicates with DDP")
    if layout.recompute not in ("none", "full") or layout.recompute_layers_per_stage is not None:
        changes.update(recompute="full", recompute_modules=None, recompute_layers_per_stage=None)
        notes.append(f"recompute {layout.recompute} -> full: AutoModel checkpoints every block or none")
    if layout.grad_dtype != "bf16":
        changes["grad_dtype"] = "bf16"
        notes.append(f"grad_dtype {layout.grad_dtype} -> bf16: FSDP2 reduces in fp32 into the bf16 parameters' "
                     "gradient shards")
    if layout.sequence_parallel and layout.tp == 1:
        changes["sequence_parallel"] = False
    if layout.overlap_tp_comm:
        changes["overlap_tp_comm"] = False
        notes.append("overlap_tp_comm -> false: AutoModel's TP plans have no overlap switch")
    if not layout.overlap_grad_reduce:
        changes["overlap_grad_reduce"] = True
        notes.append("overlap_grad_reduce -> true: FSDP2 reduce-scatters during the backward")
    if layout.pp == 1 and (layout.schedule != "1f1b" or layout.interleave != 1):
        changes.update(schedule="1f1b", interleave=1)
    if layout.pp > 1 and layout.interleave > 1 and layers_per_stage_for(model.num_layers, layout.pp,
                                                                          layout.interleave) is None:
        raise PlannerError(f"interleave({layout.interleave}): no layers_per_stage gives {layout.interleave} stages per "
                           f"rank for {model.num_layers} layers on pp({layout.pp}) (AutoModel's calculate_virtual_stages)")
    if layout.attention_kernel == "fused":  # Transformer Engine's attention (attn te) is the profile's own
        changes["attention_kernel"] = None
    if layout.compile or layout.compile_loss:
        changes["compile"], changes["compile_loss"] = False, None
        notes.append("compile -> false: the Transformer Engine recipes run eager")
    if layout.cuda_graph_scope:
        changes["cuda_graph_scope"] = ()
        notes.append("cuda_graph_scope -> none: not written for AutoModel")
    is_moe = model.moe is not None and layout.ep > 1
    if is_moe and layout.moe_dispatcher == "alltoall":
        changes["moe_dispatcher"] = "deepep"
        notes.append("moe_dispatcher alltoall -> deepep: AutoModel dispatches with DeepEP, HybridEP or DTensor's "
                     "all-gather")
    if not is_moe and layout.moe_dispatcher != Layout.model_fields["moe_dispatcher"].default:
        changes["moe_dispatcher"] = Layout.model_fields["moe_dispatcher"].default
    for flag in ("moe_ep_overlap", "moe_shared_expert_overlap"):
        if getattr(layout, flag):
            changes[flag] = False
            notes.append(f"{flag} -> false: no overlap schedule in AutoModel's recipes")
    if layout.moe_delay_wgrad is not None:
        changes["moe_delay_wgrad"] = None
        if layout.moe_delay_wgrad:
            notes.append("moe_delay_wgrad -> false: AutoModel's experts compute their weight gradients in autograd's order")
    if layout.moe_capacity_factor is not None:
        changes["moe_capacity_factor"] = None
        notes.append("moe_capacity_factor -> dropless: AutoModel routes dropless")
    if model.mtp_layers and layout.mtp_layers != 0:
        changes["mtp_layers"] = 0
        notes.append("mtp_layers -> 0: the Hugging Face modeling code AutoModel trains builds no MTP module")
    if not model.mtp_layers and layout.mtp_layers == 0:
        changes["mtp_layers"] = None  # none either way, spelled as the reader reads it
    states = (layout.optimizer_state_dtype, layout.master_weights_dtype)
    if layout.optimizer == "adam" and states == ("bf16", "fp32"):
        changes["optimizer_state_dtype"] = "fp32"
        notes.append("optimizer_state_dtype bf16 -> fp32 with an fp32 master: Transformer Engine's FusedAdam "
                     "(master_weights) keeps fp32 moments")
    mapped = layout.model_copy(update=changes) if changes else layout
    return mapped, tuple(notes)


def recipe(ctx: ExportContext) -> dict[str, Any]:
    """The AutoModel recipe of the context's (mapped) layout, as a mapping."""
    lay, model = ctx.layout, ctx.model
    repo = hf_repo_id(model)
    if repo is None:
        raise PlannerError(f"{ctx.model_id}: AutoModel builds Hugging Face models, and this model's source names no "
                           "Hugging Face id (its spec's source: 'HF org/name config.json')")
    pipeline: dict[str, Any] = {"pp_microbatch_size": lay.micro_batch}
    if lay.pp > 1:
        pipeline["pp_schedule"] = "gpipe" if lay.schedule == "gpipe" else (
            "interleaved1f1b" if lay.interleave > 1 else "1f1b")
        found = layers_per_stage_for(model.num_layers, lay.pp, lay.interleave)
        if found is not None:
            pipeline["layers_per_stage"], pipeline["round_virtual_stages_to_pp_multiple"] = found
    distributed: dict[str, Any] = {
        "strategy": "fsdp2" if lay.zero > Zero.NONE or lay.cp > 1 else "ddp",
        "dp_size": lay.dp, "tp_size": lay.tp, "cp_size": lay.cp, "pp_size": lay.pp, "ep_size": lay.ep,
        "sequence_parallel": lay.sequence_parallel, "activation_checkpointing": lay.recompute == "full",
    }
    if lay.shard_group:
        distributed["dp_replicate_size"] = lay.dp * lay.cp // lay.shard_group
    distributed["pipeline"] = pipeline
    local = lay.global_batch // lay.dp if lay.pp > 1 else lay.micro_batch
    backend: dict[str, Any] = {
        "_target_": "nemo_automodel.components.models.common.BackendConfig",
        "attn": "eager" if not lay.flash_attention else ("sdpa" if lay.resolved_attention_kernel == "flash2" else "te"),
        "linear": "te", "rms_norm": "te", "rope_fusion": True,
    }
    if model.moe is not None and lay.ep > 1:
        backend["dispatcher"] = {v: k for k, v in DISPATCHERS.items()}[lay.moe_dispatcher]
    if lay.dtype == "fp8":
        backend["te_fp8"] = {"_target_": "nemo_automodel.components.models.common.utils.TEFp8Config",
                             "recipe": {v: k for k, v in TE_FP8_RECIPES.items()}[lay.fp8_recipe]}
    if lay.optimizer == "sgd":
        optimizer: dict[str, Any] = {"_target_": "torch.optim.SGD", "lr": 0.0001}
    elif (lay.optimizer_state_dtype, lay.master_weights_dtype) == ("bf16", "bf16"):
        optimizer = {"_target_": "torch.optim.Adam", "lr": 0.0001}
    else:  # fp32 moments: Transformer Engine's FusedAdam, with an fp32 master copy when the layout keeps one
        optimizer = {"_target_": "transformer_engine.pytorch.optimizers.FusedAdam", "lr": 0.0001,
                     "master_weights": lay.master_weights_dtype == "fp32"}
    out: dict[str, Any] = {
        "recipe": "TrainFinetuneRecipeForNextTokenPrediction",
        "step_scheduler": {"global_batch_size": lay.global_batch, "local_batch_size": local},
        "distributed": distributed,
        "model": {"_target_": "nemo_automodel.NeMoAutoModelForCausalLM.from_config",
                  "config": {"_target_": "transformers.AutoConfig.from_pretrained",
                             "pretrained_model_name_or_path": repo},
                  "backend": backend},
        "optimizer": optimizer,
        "dataset": {"_target_": "nemo_automodel.components.datasets.llm.mock_iterable_dataset.MockIterableDataset",
                    "seq_len": lay.seq_len},
    }
    if lay.lora_rank is not None:
        modules = {"attention": ["*q_proj", "*k_proj", "*v_proj", "*o_proj"], "qkv": ["*q_proj", "*k_proj", "*v_proj"]}
        out["peft"] = {"_target_": "nemo_automodel.components._peft.lora.PeftConfig", "dim": lay.lora_rank,
                       "target_modules": modules.get(lay.lora_targets, "*_proj")}
    return out


def render(ctx: ExportContext) -> str:
    lines = [f"# {line}" for line in prediction_lines(ctx)]
    lines.append(f"# Run: automodel <this file> --nproc-per-node {min(ctx.layout.gpus, ctx.hardware.node.gpus_per_node)} "
                 "(on each node)")
    return "\n".join(lines) + "\n" + yaml.safe_dump(recipe(ctx), sort_keys=False, default_flow_style=False)
