"""A job (file, or the flags of a direct engine check) -> model, hardware, GPU count and a validated Layout.

Files are read through `planner.engines.load`; the engine importers are pure. Every
error is a PlannerError naming the job or engine file and the field.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.engines import (
    automodel,
    deepspeed,
    hf_trainer,
    load,
    megatron,
    megatron_bridge,
    torchtitan,
    torchtitan_registry,
)
from planner.engines.common import EngineImport, require
from planner.errors import PlannerError, short_repr
from planner.specs import bounds
from planner.specs.engine import ENGINE_PROFILES
from planner.specs.hardware import HardwareProfile
from planner.specs.job import Job
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.training.estimate import DEFAULT_HEADROOM
from planner.training.rules import resolve_layout


@dataclass(frozen=True)
class ResolvedJob:
    """Everything `check` and `export` need for one job."""

    source: str  # the job file, or the engine file of a direct check
    model_id: str
    model: ModelSpec
    hardware_id: str
    hardware: HardwareProfile
    gpus: int
    layout: Layout
    headroom: float
    engine: str | None = None
    warnings: tuple[str, ...] = ()
    profile: Any = None  # the ProfileOverlay applied to `hardware`, if any


def load_job(path: Path, *, profile: Path | None = None) -> ResolvedJob:
    """Read and resolve a job file; paths inside it are relative to it. `profile` (an overlay file) overrides
    the job's own `profile:`."""
    job = load.load_job_file(path)
    return resolve_job(job, base=path.parent, source=str(path), profile=profile)


def overlaid(hw: HardwareProfile, profile: Path | None) -> tuple[HardwareProfile, Any]:
    """`hw` with the profile overlay at `profile` applied (and the overlay), or `hw` as it is."""
    if profile is None:
        return hw, None
    from planner.specs.overlay import apply_overlay

    overlay = load.load_overlay(profile)
    return apply_overlay(hw, overlay, source=str(profile)), overlay


def _job_file(ref: str, base: Path, source: str, field: str) -> Path:
    """A file a job names (relative to the job file): an error naming the job and its field when it is missing or
    not a file, so that among many jobs checked at once the broken one is plain."""
    path = _relative(ref, base)
    why = load.path_problem(path)
    if why is not None:
        shown = ref.replace("\0", "\\0")
        raise PlannerError(f"{shown} {why} (paths are relative to the job file); fix the path", source=source,
                           field=field)
    return path


def _model(job: Job, base: Path, source: str) -> load.Loaded | None:
    if job.model is None:
        return None
    if isinstance(job.model, ModelSpec):
        return load.Loaded(id=Path(source).stem, spec=job.model, source=source)
    try:
        return load.load_model(load.relative_ref(job.model, base))
    except PlannerError as err:
        raise PlannerError(err.render(), source=source, field="model") from None


def resolve_job(job: Job, *, base: Path, source: str, profile: Path | None = None) -> ResolvedJob:
    """Resolve a validated Job: load model and hardware, read the engine file, build and check the Layout."""
    try:
        hw = load.load_hardware(load.relative_ref(job.hardware, base))
    except PlannerError as err:
        raise PlannerError(err.render(), source=source, field="hardware") from None
    if profile is None and job.profile is not None:
        profile = _job_file(job.profile, base, source, "profile")
    spec, overlay = overlaid(hw.spec, profile)
    if overlay is not None:
        hw = load.Loaded(id=hw.id, spec=spec, source=hw.source, aliases=hw.aliases)
    if job.gpus is not None:
        gpus = job.gpus
    else:
        assert job.nodes is not None  # Job._gpus_or_nodes: exactly one of gpus and nodes is given
        gpus = job.nodes * hw.spec.node.gpus_per_node
        if gpus > bounds.maximum("gpus"):  # each factor is within its own limit; their product need not be
            raise PlannerError(f"{job.nodes:,} nodes x {hw.spec.node.gpus_per_node:,} GPUs per node = {gpus:,} GPUs, "
                               f"above planner's limit of {bounds.describe('gpus')}; use fewer nodes",
                               source=source, field="nodes")
    loaded = _model(job, base, source)
    given = job.given_fields()
    engine = job.engine
    if engine is None:
        if loaded is None:
            raise PlannerError("model is required (a catalog id, a path or an inline spec)", source=source,
                               field="model")
        for name, hint in (("global_batch", "sequences per optimizer step"), ("seq_len", "tokens per sequence")):
            require(given, name, source, f"{hint}; add it under training")
        fields = dict(given)
        if "sequence_parallel" not in fields:  # as `planner estimate`: on whenever tensor parallelism is
            fields["sequence_parallel"] = int(fields.get("tp", 1)) > 1
        imported = EngineImport(format="job", source=source, fields=fields)
    else:
        imported, loaded = _import_engine(job, loaded, gpus, given, base, source)
        # The engine that reads the file runs it, unless the job names another (NeMo runs Megatron arguments).
        if engine.format in ENGINE_PROFILES:
            imported = replace(imported, fields={"engine": engine.format, **imported.fields})
    assert loaded is not None
    model = imported.model if imported.model is not None else loaded.spec
    try:
        layout = resolve_layout(model, gpus, **imported.fields)
    except PlannerError as err:
        raise PlannerError(err.message, source=err.source or imported.source, field=err.field) from None
    warnings = imported.warnings
    if layout.moe_fused_mlp and "moe_fused_mlp" in imported.origins and not hw.spec.accelerator.fused_grouped_mlp:
        # Transformer Engine's fuser falls back to its unfused ops on a chip its fused kernels are not built for
        layout = layout.model_copy(update={"moe_fused_mlp": False})
        warnings = (*warnings, f"{imported.source}: {imported.origins['moe_fused_mlp']} fuses the experts only on "
                    f"compute capability 10 (accelerator.fused_grouped_mlp); on {hw.spec.name} Transformer Engine runs "
                    "them unfused, as planner reads it")
    peaks = hw.spec.accelerator.peak_flops_per_s
    if layout.dtype not in peaks and "dtype" in imported.origins:
        raise PlannerError(f"{hw.spec.name} has no {layout.dtype} peak (it has {', '.join(sorted(peaks))}); the "
                           f"engine file asks for {layout.dtype} with {imported.origins['dtype']}: change it there",
                           source=imported.source)
    return ResolvedJob(
        source=source, model_id=loaded.id, model=model, hardware_id=hw.id, hardware=hw.spec, gpus=gpus,
        layout=layout, headroom=job.headroom if job.headroom is not None else DEFAULT_HEADROOM,
        engine=imported.format if engine else None, warnings=warnings, profile=overlay,
    )


def _import_engine(
    job: Job, loaded: load.Loaded | None, gpus: int, given: dict[str, Any], base: Path, source: str
) -> tuple[EngineImport, load.Loaded]:
    engine = job.engine
    assert engine is not None
    path = None
    if engine.path:
        path = _job_file(engine.path, base, source, "engine.path")
    where = str(path) if path else f"{source}: engine.args"
    if engine.format == "deepspeed":
        if loaded is None:
            raise PlannerError("model is required: a DeepSpeed config does not name the model", source=source,
                               field="model")
        data = load.read_engine_file("deepspeed", path)  # type: ignore[arg-type]
        return deepspeed.import_deepspeed(data, gpus=gpus, given=given, source=where), loaded
    if engine.format in ("hf_trainer", "accelerate"):
        return _import_hf_trainer(job, loaded, gpus, given, base, path, source)
    if engine.format == "automodel":
        return _import_automodel(loaded, gpus, given, path, source, where)
    if engine.format == "megatron":
        tokens: list[str] = []
        notes: list[str] = []
        from_bridge = False
        model_args = None
        if path is not None:
            file_text = load.read_engine_file("megatron", path)
            words = _words(engine.args)
            # the file's variables: the NAME=value words that open the engine args (after them, a word with '='
            # is a flag's value)
            count = next((i for i, w in enumerate(words) if not megatron.is_variable_assignment(w)), len(words))
            model_args, repeated = megatron.read_model_args(file_text, str(path), words[:count])
            if model_args is not None:  # Megatron-LM's MODEL_ARGS YAML (its functional tests, the MoE model zoo)
                tokens, notes = megatron.read_launch_text(megatron.model_args_script(model_args, str(path)), str(path))
                notes += repeated + megatron.unused_variables(file_text, words[:count], str(path))
                engine_args = shlex.join(words[count:]) if words else engine.args
            elif (bridge := megatron_bridge.parse_bridge_text(file_text, str(path))) is not None:
                tokens, notes = megatron_bridge.bridge_tokens(bridge, str(path))  # a ConfigContainer YAML
                from_bridge, engine_args = True, engine.args
                # its LoRA (no Megatron-LM flag says it): the job's own fields win
                given = {**megatron_bridge.peft_fields(bridge, str(path)), **given}
            else:
                tokens, notes = megatron.read_launch_text(file_text, str(path))
                engine_args = engine.args
        else:
            engine_args = engine.args
        if engine_args:
            more, warnings = megatron.read_launch_text(engine_args, f"{source}: engine.args")
            tokens, notes = [*tokens, *more], [*notes, *warnings]
        try:
            imported = megatron.import_megatron(tokens, gpus=gpus, given=given,
                                                model=loaded.spec if loaded else None, source=where)
        except PlannerError as err:  # a Megatron-Bridge file's values are named by their fields, not the arguments
            if model_args is not None:
                raise megatron.in_model_args_terms(err) from None
            raise megatron_bridge.in_bridge_terms(err) if from_bridge else err from None
        if notes:
            imported = replace(imported, warnings=(*notes, *imported.warnings))
        if loaded is None:
            assert imported.model is not None
            loaded = load.Loaded(id=(path.stem if path else Path(source).stem), spec=imported.model, source=where)
        return imported, loaded
    overrides = torchtitan.split_args(engine.args) if engine.args else []
    registry_notes: tuple[str, ...] = ()
    if path is not None and path.suffix == ".py":  # torchtitan's Python config registry (main since 2026-02)
        module, function, overrides = torchtitan_registry.split_registry_args(overrides)
        registry = torchtitan_registry.read_registry(load.read_text(path), function, source=where, module=module,
                                                     overrides=overrides)
        config, registry_notes, overrides = registry.config, registry.warnings, []
    else:
        config = load.read_engine_file("torchtitan", path) if path is not None else {}
    applied = torchtitan.apply_overrides(config, overrides, where)
    name, flavor = torchtitan.model_name(applied, where)
    mapped = torchtitan.catalog_id(name, flavor)
    described = f"torchtitan model {name} flavor {flavor}"
    if name == torchtitan.HF_BACKEND:
        repo = torchtitan.hf_backend_model(applied, where)
        mapped, described = _catalog_id_for_hf(repo), f"torchtitan's transformers backend with {repo}"
    known = f"maps to '{mapped}', which is not in planner's catalog" if mapped else "has no entry in planner's catalog"
    loaded = _file_model(loaded, _catalog_entry(mapped), described=described, missing=f"{described} {known}",
                         where=where, source=source, field="model.flavor", file="file")
    imported = torchtitan.import_torchtitan(config, overrides, gpus=gpus, given=given, model=loaded.spec, source=where)
    if registry_notes:
        imported = replace(imported, warnings=(*registry_notes, *imported.warnings))
    return imported, loaded


def _file_model(loaded: load.Loaded | None, catalog: load.Loaded | None, *, described: str, missing: str, where: str,
                source: str, field: str, file: str) -> load.Loaded:
    """The model an engine file trains: the job's, which must be the catalog model the file names (`catalog`,
    `described` in messages) where it names one; else that catalog model, or an error (`missing`, at `field`)."""
    if loaded is None:
        if catalog is None:
            raise PlannerError(f"{missing}; give the model (--model or 'model' in the job: a catalog id, a YAML spec or "
                               "the model's config.json)", source=where, field=field)
        return catalog
    if catalog is not None and not same_architecture(catalog.spec, loaded.spec):
        raise PlannerError(f"the job's model '{loaded.id}' is not {described} ('{catalog.id}'), which the {file} "
                           f"trains; remove the model from the job or change the {file}", source=source, field="model")
    return loaded


def _import_automodel(loaded: load.Loaded | None, gpus: int, given: dict[str, Any], path: Path | None, source: str,
                      where: str) -> tuple[EngineImport, load.Loaded]:
    if path is None:
        raise PlannerError("an AutoModel engine needs engine.path (the recipe YAML)", source=source, field="engine.path")
    config = load.read_engine_file("automodel", path)
    if not isinstance(config, dict):
        raise PlannerError("an AutoModel recipe is a YAML mapping", source=where)
    repo = automodel.model_repo(config)
    loaded = _file_model(loaded, _catalog_entry(_catalog_id_for_hf(repo)) if repo else None, described=str(repo),
                         missing=f"its model {repo} is not in planner's catalog" if repo else "it names no model",
                         where=where, source=source, field="model.config.pretrained_model_name_or_path", file="recipe")
    return automodel.import_automodel(config, gpus=gpus, given=given, model=loaded.spec, source=where), loaded


def _catalog_entry(model_id: str | None) -> load.Loaded | None:
    if model_id is None:
        return None
    try:
        return load.load_model(model_id)
    except PlannerError:
        return None


def _catalog_id_for_hf(repo: str) -> str | None:
    """The catalog model whose source names Hugging Face id `repo`, or whose alias is its name."""
    for entry in load.model_catalog():
        if torchtitan.hf_repo_id(entry.spec) == repo:
            return entry.id
    name = repo.rsplit("/", 1)[-1].lower()
    return name if _catalog_entry(name) is not None else None


def same_architecture(a: ModelSpec, b: ModelSpec) -> bool:
    """Two specs describe the same network (names, sources and the context limit aside)."""
    skip = {"name", "source", "max_seq_len"}
    return a.model_dump(exclude=skip) == b.model_dump(exclude=skip)


def _words(args: str | None) -> list[str]:
    """The shell words of a job's engine args (none when they do not split: the Megatron reader says why)."""
    try:
        return shlex.split(args or "")  # no comments: '#' inside a word is the word's, as bash reads it
    except ValueError:
        return []


def _import_hf_trainer(
    job: Job, loaded: load.Loaded | None, gpus: int, given: dict[str, Any], base: Path, path: Path | None,
    source: str,
) -> tuple[EngineImport, load.Loaded]:
    """A Hugging Face Trainer run: its command line (a launch script, or `args`), the accelerate config it names
    or the job gives, and the DeepSpeed config it points to; the model from --model_name_or_path or the job."""
    engine = job.engine
    assert engine is not None
    accelerate_config = None
    accelerate_source = ""
    text, where, folder = engine.args, f"{source}: engine.args", base
    if engine.format == "accelerate":
        assert path is not None
        accelerate_config = load.read_structured(path, engine=True)
        if not isinstance(accelerate_config, dict):
            raise PlannerError("an accelerate config is a YAML mapping", source=str(path))
        where = accelerate_source = str(path)
    elif path is not None:
        text, where, folder = load.read_engine_file("hf_trainer", path), str(path), path.parent
    command = hf_trainer.parse_command(text, where) if text else None
    if command is not None and command.accelerate_config_path and accelerate_config is None:
        accel_path = _relative(command.accelerate_config_path, folder)
        accelerate_config = load.read_structured(accel_path, engine=True)
        if not isinstance(accelerate_config, dict):  # `accelerate launch --config_file` names a list, an empty file
            raise PlannerError("an accelerate config is a YAML mapping", source=str(accel_path))
        accelerate_source = str(accel_path)
    ds_ref = command.deepspeed_path if command else None
    if accelerate_config is not None and ds_ref is None:
        ds_ref = (accelerate_config.get("deepspeed_config") or {}).get("deepspeed_config_file") \
            if isinstance(accelerate_config.get("deepspeed_config"), dict) else None
        if ds_ref is not None and not isinstance(ds_ref, str):  # a number or a list is no path to open
            shown = str(ds_ref).lower() if isinstance(ds_ref, bool) else short_repr(ds_ref)
            raise PlannerError(f"expected the path of a DeepSpeed JSON config, got {shown}",
                               source=accelerate_source,
                               field="deepspeed_config.deepspeed_config_file")
        folder = path.parent if engine.format == "accelerate" and path is not None else folder
    deepspeed_import = None
    if ds_ref:
        ds_path = _relative(ds_ref, folder)
        data = load.read_engine_file("deepspeed", ds_path)
        args = command.args if command else {}
        micro = args.get("per_device_train_batch_size")
        accum = args.get("gradient_accumulation_steps")
        dtype = "bf16" if hf_trainer.flag_value(args, "bf16", where) else ("fp16" if hf_trainer.flag_value(args, "fp16", where)
                                                                       else None)
        if dtype is None and isinstance(accelerate_config, dict):
            precision = str(accelerate_config.get("mixed_precision", "no"))
            dtype = precision if precision in ("bf16", "fp16") else None
        filled = hf_trainer.fill_deepspeed_auto(
            data if isinstance(data, dict) else {},
            micro=hf_trainer.int_flag(micro, "per_device_train_batch_size", where) if isinstance(micro, str) else None,
            accum=hf_trainer.int_flag(accum, "gradient_accumulation_steps", where) if isinstance(accum, str) else None,
            world=gpus, dtype=dtype, source=str(ds_path))
        ds_given = {k: v for k, v in given.items() if k in ("seq_len", "recompute")}
        seq = next((n for n in hf_trainer.SEQ_FLAGS if isinstance(args.get(n), str)), None)
        if seq is not None and "seq_len" not in ds_given:
            ds_given["seq_len"] = hf_trainer.int_flag(args[seq], seq, where)
        ds_given.setdefault("seq_len", 1)  # the Trainer's sequence length is checked below, not in the JSON
        if hf_trainer.flag_value(args, "gradient_checkpointing", where) is not None:
            ds_given["recompute"] = "full" if hf_trainer.flag_value(args, "gradient_checkpointing", where) else "none"
        deepspeed_import = deepspeed.import_deepspeed(filled, gpus=gpus, given=ds_given, source=str(ds_path))
    model_ref = command.model_ref if command else None
    if model_ref is not None:
        named = _hf_model(model_ref, folder)
        if named is None and loaded is None:
            raise PlannerError(f"--model_name_or_path {model_ref} is not in planner's catalog and not a local folder; "
                               "give its config.json with --model (or 'model' in the job)", source=where, field="model")
        # a placeholder or a hub id planner cannot resolve (`your_model_path`) says nothing against the job's model
        if named is not None and loaded is not None and not same_architecture(named.spec, loaded.spec):
            raise PlannerError(f"the job's model '{loaded.id}' is not --model_name_or_path {model_ref}; remove one",
                               source=source, field="model")
        loaded = loaded or named
    if loaded is None:
        raise PlannerError("model is required: give --model_name_or_path in the command line or the job's model",
                           source=source, field="model")
    imported = hf_trainer.import_hf_trainer(command, accelerate_config, gpus=gpus, given=given,
                                            deepspeed_import=deepspeed_import, source=where,
                                            model_has_mtp=loaded.spec.mtp_layers > 0)
    return imported, loaded


def _relative(ref: str, folder: Path) -> Path:
    return Path(ref) if Path(ref).is_absolute() else folder / ref


def _hf_model(ref: str, folder: Path) -> load.Loaded | None:
    """--model_name_or_path: a model folder or config.json, a catalog id, or a Hugging Face id in the catalog; None
    when it is none of these."""
    candidate = _relative(ref, folder)
    if load.is_directory(candidate) and load.path_problem(candidate / "config.json") is None:
        return load.load_model(str(candidate / "config.json"))
    if load.path_problem(candidate) is None:
        return load.load_model(str(candidate))
    catalog_id = _catalog_id_for_hf(ref) if "/" in ref else ref
    return _catalog_entry(catalog_id)


def launch_gpus(fmt: str, path: Path | None, args: str | None) -> int | None:
    """The GPU count a Trainer launch (torchrun --nproc_per_node x --nnodes, accelerate's num_processes) states,
    for a direct check without --gpus; None when it does not say."""
    if fmt not in ("hf_trainer", "accelerate"):
        return None
    if fmt == "accelerate" and path is not None:
        config = load.read_structured(path, engine=True)
        if not isinstance(config, dict):  # an empty file, a list: said here, before a missing --gpus is
            raise PlannerError("an accelerate config is a YAML mapping", source=str(path))
        gpus = hf_trainer.accelerate_gpus(config, str(path))
        if gpus is not None:
            return gpus
        path = None
    text = load.read_engine_file("hf_trainer", path) if path is not None else args
    if not text:
        return None
    return hf_trainer.parse_command(text, str(path) if path else "command line").gpus
