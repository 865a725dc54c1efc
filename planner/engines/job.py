"""A job (file, or the flags of a direct engine check) -> model, hardware, GPU count and a validated Layout.

Files are read through `planner.engines.load`; the engine importers are pure. Every
error is a PlannerError naming the job or engine file and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.engines import deepspeed, load, megatron, torchtitan
from planner.engines.common import EngineImport, require
from planner.errors import PlannerError
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
        profile = Path(job.profile) if Path(job.profile).is_absolute() else base / job.profile
    spec, overlay = overlaid(hw.spec, profile)
    if overlay is not None:
        hw = load.Loaded(id=hw.id, spec=spec, source=hw.source, aliases=hw.aliases)
    gpus = job.gpus if job.gpus is not None else job.nodes * hw.spec.node.gpus_per_node  # type: ignore[operator]
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
    assert loaded is not None
    model = imported.model if imported.model is not None else loaded.spec
    try:
        layout = resolve_layout(model, gpus, **imported.fields)
    except PlannerError as err:
        raise PlannerError(err.message, source=err.source or imported.source, field=err.field) from None
    peaks = hw.spec.accelerator.peak_flops_per_s
    if layout.dtype not in peaks and "dtype" in imported.origins:
        raise PlannerError(f"{hw.spec.name} has no {layout.dtype} peak (it has {', '.join(sorted(peaks))}); the "
                           f"engine file asks for {layout.dtype} with {imported.origins['dtype']}: change it there",
                           source=imported.source)
    return ResolvedJob(
        source=source, model_id=loaded.id, model=model, hardware_id=hw.id, hardware=hw.spec, gpus=gpus,
        layout=layout, headroom=job.headroom if job.headroom is not None else DEFAULT_HEADROOM,
        engine=engine.format if engine else None, warnings=imported.warnings, profile=overlay,
    )


def _import_engine(
    job: Job, loaded: load.Loaded | None, gpus: int, given: dict[str, Any], base: Path, source: str
) -> tuple[EngineImport, load.Loaded]:
    engine = job.engine
    assert engine is not None
    path = None
    if engine.path:
        path = Path(engine.path) if Path(engine.path).is_absolute() else base / engine.path
    where = str(path) if path else f"{source}: engine.args"
    if engine.format == "deepspeed":
        if loaded is None:
            raise PlannerError("model is required: a DeepSpeed config does not name the model", source=source,
                               field="model")
        data = load.read_engine_file("deepspeed", path)  # type: ignore[arg-type]
        return deepspeed.import_deepspeed(data, gpus=gpus, given=given, source=where), loaded
    if engine.format == "megatron":
        tokens: list[str] = []
        notes: list[str] = []
        for text, origin in ((load.read_engine_file("megatron", path) if path is not None else None, str(path)),
                             (engine.args, f"{source}: engine.args")):
            if text:
                more, warnings = megatron.read_launch_text(text, origin)
                tokens += more
                notes += warnings
        imported = megatron.import_megatron(tokens, gpus=gpus, given=given,
                                            model=loaded.spec if loaded else None, source=where)
        if notes:
            imported = replace(imported, warnings=(*notes, *imported.warnings))
        if loaded is None:
            assert imported.model is not None
            loaded = load.Loaded(id=(path.stem if path else Path(source).stem), spec=imported.model, source=where)
        return imported, loaded
    config = load.read_engine_file("torchtitan", path) if path is not None else {}
    overrides = torchtitan.split_args(engine.args) if engine.args else []
    applied = torchtitan.apply_overrides(config, overrides, where)
    name, flavor = torchtitan.model_name(applied)
    mapped = torchtitan.catalog_id(name, flavor)
    described = f"torchtitan model {name} flavor {flavor}"
    if name == torchtitan.HF_BACKEND:
        repo = torchtitan.hf_backend_model(applied, where)
        mapped, described = _catalog_id_for_hf(repo), f"torchtitan's transformers backend with {repo}"
    catalog = _catalog_entry(mapped)
    if loaded is None:
        if catalog is None:
            known = f"maps to '{mapped}', which is not in planner's catalog" if mapped else "has no entry in planner's catalog"
            raise PlannerError(f"{described} {known}; give the model (--model or 'model' in the job: a catalog id, a "
                               "YAML spec or the model's config.json)", source=where, field="model.flavor")
        loaded = catalog
    elif catalog is not None and not same_architecture(catalog.spec, loaded.spec):
        raise PlannerError(f"the job's model '{loaded.id}' is not {described} ('{catalog.id}'), which the file "
                           "trains; remove the model from the job or change the file", source=source, field="model")
    imported = torchtitan.import_torchtitan(config, overrides, gpus=gpus, given=given, model=loaded.spec, source=where)
    return imported, loaded


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
