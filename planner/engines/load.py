"""The only module that reads files: catalogs, user YAML specs, HF config.json.

Everything that goes wrong here becomes a `PlannerError` naming the file and
field and saying what to change.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel

from planner.errors import PlannerError
from planner.specs.hardware import HardwareProfile
from planner.specs.model import ModelSpec
from planner.specs.validation import validate_spec

T = TypeVar("T", bound=BaseModel)

MODEL_CATALOG = "planner.model_specs"
HARDWARE_CATALOG = "planner.hardware_profiles"
CATALOG_ONLY_KEYS = ("aliases",)


@dataclass(frozen=True)
class Loaded:
    """A spec and where it came from (catalog id or path)."""

    id: str
    spec: Any
    source: str
    aliases: tuple[str, ...] = ()


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlannerError("file not found; check the path", source=str(path)) from None
    except IsADirectoryError:
        raise PlannerError("is a directory, not a file", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise PlannerError(f"cannot read: {err}", source=str(path)) from None


# libyaml's C parser when PyYAML was built with it (several times faster; `planner check` reads many files).
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise PlannerError(f"malformed YAML{where}: {problem}", source=source) from None


def parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise PlannerError(f"malformed JSON at line {err.lineno}, column {err.colno}: {err.msg}", source=source) from None


def read_structured(path: Path) -> Any:
    """A YAML or JSON file (JSON is YAML, but its own parser gives better messages)."""
    text = read_text(path)
    if path.suffix.lower() == ".json":
        return parse_json(text, str(path))
    return parse_yaml(text, str(path))


# Catalogs ---------------------------------------------------------------------
def _catalog_root(package: str) -> Any:
    """The catalog folder: package data of an installed planner, or the repository's top-level folder
    (model_specs/, hardware_profiles/) when planner is imported from a source checkout, where the
    `planner.model_specs` mapping of pyproject.toml does not exist."""
    try:
        return resources.files(package)
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / package.rsplit(".", 1)[-1]


def _catalog_files(package: str) -> dict[str, Any]:
    root = _catalog_root(package)
    return {
        entry.name.rsplit(".", 1)[0]: entry
        for entry in root.iterdir()
        if entry.name.endswith((".yaml", ".yml"))
    }


# Catalog entries parsed once per process (specs are frozen, so sharing them is safe): `planner check`
# on many jobs names the same model and hardware again and again.
_CATALOG_CACHE: dict[tuple[str, str], Loaded] = {}


def _load_catalog_entry(package: str, cls: type[T], entry_id: str, entry: Any) -> Loaded:
    key = (package, str(entry))
    if key not in _CATALOG_CACHE:
        _CATALOG_CACHE[key] = _read_catalog_entry(package, cls, entry_id, entry)
    return _CATALOG_CACHE[key]


def _read_catalog_entry(package: str, cls: type[T], entry_id: str, entry: Any) -> Loaded:
    source = f"{package.split('.')[-1]}/{entry.name}"
    data = parse_yaml(entry.read_text(encoding="utf-8"), source)
    if not isinstance(data, dict):
        raise PlannerError("expected a mapping of fields", source=source)
    data = dict(data)
    aliases = tuple(data.pop("aliases", ()) or ())
    return Loaded(id=entry_id, spec=validate_spec(cls, data, source), source=source, aliases=aliases)


def load_catalog(package: str, cls: type[T]) -> list[Loaded]:
    files = _catalog_files(package)
    return [_load_catalog_entry(package, cls, entry_id, files[entry_id]) for entry_id in sorted(files)]


def _resolve(package: str, cls: type[T], ref: str, kind: str) -> Loaded:
    files = _catalog_files(package)
    if ref in files:
        return _load_catalog_entry(package, cls, ref, files[ref])
    entries = load_catalog(package, cls)
    lowered = ref.lower()
    for entry in entries:
        if lowered == entry.id.lower() or lowered in (a.lower() for a in entry.aliases):
            return entry
    names = [e.id for e in entries] + [a for e in entries for a in e.aliases]
    close = difflib.get_close_matches(lowered, names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"run 'planner {kind}' to list them"
    raise PlannerError(f"unknown {kind[:-1] if kind.endswith('s') else kind} id '{ref}'; {hint}")


def _looks_like_path(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml", ".json")) or "/" in ref or "\\" in ref


def load_model(ref: str) -> Loaded:
    """A model from a catalog id or alias, our YAML spec, or a HuggingFace config.json."""
    if not _looks_like_path(ref):
        return _resolve(MODEL_CATALOG, ModelSpec, ref, "models")
    path = Path(ref)
    data = read_structured(path)
    if path.suffix.lower() == ".json" or (isinstance(data, dict) and "model_type" in data):
        from planner.engines.hf_config import model_from_hf_config

        return Loaded(id=path.stem if path.name != "config.json" else path.parent.name or path.stem,
                      spec=model_from_hf_config(data, source=str(path)), source=str(path))
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k not in CATALOG_ONLY_KEYS}
    return Loaded(id=path.stem, spec=validate_spec(ModelSpec, data, str(path)), source=str(path))


def load_hardware(ref: str) -> Loaded:
    """A hardware profile from a catalog id or alias, or a YAML file."""
    if not _looks_like_path(ref):
        return _resolve(HARDWARE_CATALOG, HardwareProfile, ref, "hardware")
    path = Path(ref)
    data = read_structured(path)
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k not in CATALOG_ONLY_KEYS}
    return Loaded(id=path.stem, spec=validate_spec(HardwareProfile, data, str(path)), source=str(path))


def model_catalog() -> list[Loaded]:
    return load_catalog(MODEL_CATALOG, ModelSpec)


def hardware_catalog() -> list[Loaded]:
    return load_catalog(HARDWARE_CATALOG, HardwareProfile)


def read_package_yaml(package: str, name: str) -> Any:
    """A YAML data file shipped inside the package (validation cases)."""
    entry = resources.files(package).joinpath(name)
    return parse_yaml(entry.read_text(encoding="utf-8"), f"{package}/{name}")


# Job files and engine configs (planner check / export) ---------------------------------------------
def parse_toml(text: str, source: str) -> dict[str, Any]:
    """TOML via the standard library's tomllib (Python 3.11+), or tomli where installed on 3.10."""
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[import-not-found,no-redef]
        except ModuleNotFoundError:
            raise PlannerError("reading TOML needs Python 3.11+ or the 'tomli' package; pip install tomli",
                               source=source) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise PlannerError(f"malformed TOML: {err}", source=source) from None


def read_toml(path: Path) -> dict[str, Any]:
    return parse_toml(read_text(path), str(path))


def relative_ref(ref: str, base: Path) -> str:
    """A catalog id as it is; a path relative to `base` (the job file's folder) when it is not absolute."""
    if not _looks_like_path(ref) or Path(ref).is_absolute():
        return ref
    return str(base / ref)


def load_job_file(path: Path) -> Any:
    """A job file (YAML) validated as `planner.specs.job.Job`."""
    from planner.specs.job import Job

    return validate_spec(Job, read_structured(path), str(path))


def read_log_file(path: Path) -> str:
    """A training log as text (planner.engines.logs reads it)."""
    return read_text(path)


def load_overlay(path: Path) -> Any:
    """A profile overlay written by `planner calibrate` (`--profile FILE`, a job's `profile:`)."""
    from planner.specs.overlay import ProfileOverlay

    overlay = validate_spec(ProfileOverlay, read_structured(path), str(path))
    overlay.check_factors(str(path))
    return overlay


def read_engine_file(fmt: str, path: Path) -> Any:
    """An engine config as its engine parses it: DeepSpeed JSON -> dict, torchtitan TOML -> dict,
    Megatron-LM arguments or launch script -> text."""
    if fmt == "deepspeed":
        return parse_json(read_text(path), str(path))
    if fmt == "torchtitan":
        return read_toml(path)
    return read_text(path)
