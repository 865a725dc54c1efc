"""The only module that reads files: catalogs, user YAML specs, HF config.json.

Everything that goes wrong here becomes a `PlannerError` naming the file and
field and saying what to change.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import yaml
from pydantic import BaseModel

from planner.errors import PlannerError
from planner.specs.bounds import MAX_FILE_BYTES, MAX_LOG_BYTES, MAX_NESTING
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


def path_problem(path: Path) -> str | None:
    """None when `path` is a regular file, else what is wrong with it in words for a message ("not found", "is a
    directory"). Path.is_file() and .exists() raise OSError on a name longer than the file system allows
    (ENAMETOOLONG, a command line taken for a path) and say False, "not found", for a path holding a NUL byte."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "not found"
    except ValueError:
        return "is not a path: it holds a NUL byte"
    except OSError as err:
        return f"cannot be read: {err.strerror or err}"
    if stat.S_ISDIR(info.st_mode):
        return "is a directory"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    return None


def is_directory(path: Path) -> bool:
    """Path.is_dir() that says False, as for a missing path, where the name cannot be a path at all."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def read_text(path: Path, *, limit: int = MAX_FILE_BYTES) -> str:
    """A regular file's text: a FIFO, a device (/dev/zero) or a directory is an error, not a hang, and so is
    a file above `limit` bytes (MAX_FILE_BYTES for a config file) or one that is not UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise PlannerError("file not found; check the path", source=str(path)) from None
    except IsADirectoryError:
        raise PlannerError("is a directory, not a file", source=str(path)) from None
    except OSError as err:
        raise PlannerError(f"cannot read: {err.strerror or err}", source=str(path)) from None
    except ValueError:  # os.open refuses a path holding a NUL byte (a file's path setting, "a\0b")
        raise PlannerError("is not a path: it holds a NUL byte; check the path",
                           source=str(path).replace("\0", "\\0")) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise PlannerError("is a directory, not a file", source=str(path))
        if not stat.S_ISREG(info.st_mode):
            raise PlannerError("is not a regular file (a pipe, device or socket); give a file", source=str(path))
        if info.st_size > limit:
            raise PlannerError(f"is {info.st_size:,} bytes, above planner's limit of {limit:,} bytes "
                               "for this kind of file", source=str(path))
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    except OSError as err:
        raise PlannerError(f"cannot read: {err.strerror or err}", source=str(path)) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise PlannerError(f"is above planner's limit of {limit:,} bytes for this kind of file", source=str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise PlannerError(f"is not UTF-8 text (byte {err.start}); give a text file", source=str(path)) from None


class _DuplicateKey(Exception):
    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


def _yaml_loader(*, yaml_1_2_numbers: bool, keep_last: bool = False) -> type:
    """PyYAML's safe loader (libyaml's C parser when built with it; `planner check` reads many files), where
    a key given twice in one mapping is an error naming both lines, and `80e9` is a number as in YAML 1.2.
    `yaml_1_2_numbers`: planner's own files read numbers as YAML 1.2 does (below); an engine's file is read as its
    engine reads it, by PyYAML or OmegaConf, with YAML 1.1's forms. `keep_last`: a key given twice is not an error
    but noted (the loader's `duplicates`) and its last value kept, as PyYAML and the tools that pass every entry on
    in order (yq's to_entries into argparse) read it."""
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc,valid-type]
        duplicates: list[str]

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.get(key)
                    except TypeError:
                        continue  # an unhashable key: PyYAML's own error names it
                    line = key_node.start_mark.line + 1
                    if first is not None and keep_last:
                        self.duplicates = [*getattr(self, "duplicates", []),
                                           f"key {key!r} is given twice (lines {first} and {line})"]
                    elif first is not None:
                        raise _DuplicateKey(f"duplicate key {key!r} at lines {first} and {line}; keep one")
                    seen[key] = line
            return super().construct_mapping(node, deep=deep)

    if not yaml_1_2_numbers:
        Loader.add_implicit_resolver(
            "tag:yaml.org,2002:float",
            re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
            list("-+0123456789"),
        )
        return Loader
    # Numbers as YAML 1.2's core schema reads them, not YAML 1.1's: `1:00` (base 60) and `010` (octal) are not 60 and
    # 8 but a string and 10; `0o10` and `0x8` are octal and hexadecimal (yaml.org/spec/1.2.2, 10.3.2).
    int_tag, float_tag = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
    Loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in (int_tag, float_tag)]
        for first, resolvers in base.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(int_tag, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
                                 list("-+0123456789"))
    Loader.add_implicit_resolver(
        float_tag,
        re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
        list("-+0123456789."),
    )

    def construct_int(loader: Any, node: Any) -> int:
        text = str(loader.construct_scalar(node))
        if text.startswith("0o"):
            return int(text[2:], 8)
        if text.startswith("0x"):
            return int(text[2:], 16)
        return int(text, 10)

    Loader.add_constructor(int_tag, construct_int)
    return Loader


_YAML_LOADER = _yaml_loader(yaml_1_2_numbers=True)
_ENGINE_YAML_LOADER = _yaml_loader(yaml_1_2_numbers=False)
_ENGINE_YAML_LAST_LOADER = _yaml_loader(yaml_1_2_numbers=False, keep_last=True)


def _check_structure(data: Any, source: str) -> Any:
    """Parsed data no deeper than MAX_NESTING and with only finite numbers (iterative; shared YAML aliases
    are walked once)."""
    stack: list[tuple[Any, int, str]] = [(data, 0, "")]
    seen: set[int] = set()
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise PlannerError(f"{value} is not a finite number; give a finite value", source=source,
                               field=where or None)
        if isinstance(value, (dict, list)):
            if depth >= MAX_NESTING:
                raise PlannerError(f"nested more than {MAX_NESTING} levels deep (planner's limit)", source=source,
                                   field=where or None)
            if id(value) in seen:
                continue
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                stack.append((item, depth + 1, f"{where}.{key}" if where else str(key)))
    return data


def parse_yaml(text: str, source: str, *, engine: bool = False) -> Any:
    """A YAML document; `engine`: an engine's own file, its numbers read as the engine's YAML 1.1 parser reads them
    (planner's files: YAML 1.2, docs/errors.md)."""
    return _parse_yaml(text, source, _ENGINE_YAML_LOADER if engine else _YAML_LOADER)[0]


def parse_engine_yaml_keeping_last(text: str, source: str) -> tuple[Any, list[str]]:
    """An engine's YAML read as a tool that keeps a repeated key's last value reads it (Megatron-LM's functional-test
    harness: yq passes every MODEL_ARGS entry to the launcher in order, and argparse keeps the last), with one note
    per repeated key."""
    return _parse_yaml(text, source, _ENGINE_YAML_LAST_LOADER)


def _parse_yaml(text: str, source: str, loader_class: type) -> tuple[Any, list[str]]:
    loader = loader_class(text)
    try:
        data = loader.get_single_data()
    except _DuplicateKey as err:
        raise PlannerError(err.message, source=source) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise PlannerError(f"malformed YAML{where}: {problem}", source=source) from None
    except RecursionError:
        raise PlannerError(f"nested more than {MAX_NESTING} levels deep (planner's limit)", source=source) from None
    finally:
        loader.dispose()
    return _check_structure(data, source), list(getattr(loader, "duplicates", []))


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _json_depth(text: str) -> int:
    """The deepest nesting of [ and { in JSON text, outside strings."""
    bare = _JSON_STRING.sub("", text)
    codes = np.frombuffer(bare.encode("utf-8", "replace"), dtype=np.uint8)
    steps = np.isin(codes, (ord("["), ord("{"))).astype(np.int64) - np.isin(codes, (ord("]"), ord("}")))
    return int(np.cumsum(steps).max(initial=0))


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def parse_json(text: str, source: str, *, before_check: Callable[[Any], None] | None = None) -> Any:
    """JSON data, checked for depth and finite numbers; `before_check` sees the data first (a HuggingFace config's
    model_type is judged before a key of an unsupported architecture holds Infinity: Nemotron-H's
    time_step_limit)."""
    if _json_depth(text) > MAX_NESTING:
        raise PlannerError(f"nested more than {MAX_NESTING} levels deep (planner's limit)", source=source)
    try:
        data = json.loads(text, object_pairs_hook=_json_pairs)  # NaN, Infinity, 1e400: refused below, by key
    except _DuplicateKey as err:
        key = err.message
        lines = [text.count("\n", 0, m.start()) + 1
                 for m in re.finditer(re.escape(json.dumps(key)) + r"\s*:", text)][:2]
        where = f" at lines {lines[0]} and {lines[1]}" if len(lines) == 2 else ""
        raise PlannerError(f"duplicate key {key!r}{where}; keep one", source=source) from None
    except json.JSONDecodeError as err:
        raise PlannerError(f"malformed JSON at line {err.lineno}, column {err.colno}: {err.msg}", source=source) from None
    except RecursionError:
        raise PlannerError(f"nested more than {MAX_NESTING} levels deep (planner's limit)", source=source) from None
    if before_check is not None:
        before_check(data)
    return _check_structure(data, source)


def read_structured(path: Path, *, engine: bool = False) -> Any:
    """A YAML or JSON file (JSON is YAML, but its own parser gives better messages); `engine` as parse_yaml."""
    text = read_text(path)
    if path.suffix.lower() == ".json":
        return parse_json(text, str(path))
    return parse_yaml(text, str(path), engine=engine)


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
    from planner.engines.hf_config import model_from_hf_config, refuse_unsupported_model_type

    if path.suffix.lower() == ".json":
        data = parse_json(read_text(path), str(path),
                          before_check=lambda d: refuse_unsupported_model_type(d, str(path)))
    else:
        data = read_structured(path)
    if path.suffix.lower() == ".json" or (isinstance(data, dict) and "model_type" in data):
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
            import tomli as tomllib  # type: ignore[import-not-found]
        except ModuleNotFoundError:
            raise PlannerError("reading TOML needs Python 3.11+ or the 'tomli' package; pip install tomli",
                               source=source) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise PlannerError(f"malformed TOML: {err}", source=source) from None
    except RecursionError:
        raise PlannerError(f"nested more than {MAX_NESTING} levels deep (planner's limit)", source=source) from None
    return _check_structure(data, source)  # type: ignore[no-any-return]


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
    """A training log as text (planner.engines.logs reads it); logs may be far larger than a config file."""
    return read_text(path, limit=MAX_LOG_BYTES)


def load_overlay(path: Path) -> Any:
    """A profile overlay written by `planner calibrate` (`--profile FILE`, a job's `profile:`)."""
    from planner.specs.overlay import ProfileOverlay

    overlay = validate_spec(ProfileOverlay, read_structured(path), str(path))
    overlay.check_factors(str(path))
    return overlay


def read_engine_file(fmt: str, path: Path) -> Any:
    """An engine config as its engine parses it: DeepSpeed JSON -> dict, torchtitan TOML -> dict, an AutoModel
    recipe (YAML) -> dict, Megatron-LM arguments or launch script -> text."""
    if fmt == "deepspeed":
        return parse_json(read_text(path), str(path))
    if fmt == "torchtitan":
        return read_toml(path)
    if fmt == "automodel":
        return parse_yaml(read_text(path), str(path), engine=True)
    return read_text(path)
