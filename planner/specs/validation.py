"""Pydantic validation errors in our terms: 'field: message', and a spec validated with that message."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError, create_model

from planner.errors import PlannerError, short_repr

T = TypeVar("T", bound=BaseModel)


_KIND_WORDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false",
               "list": "a list", "dict": "a mapping", "tuple": "a list", "none": "null"}


def _is_type_tag(part: object) -> bool:
    """A part of a pydantic error location that names a member of a union (`str`, `ModelSpec`,
    `function-after[...]`, `list[int]`), not a field."""
    text = str(part)
    if text == "[key]":  # pydantic's marker of a mapping's key, not a union member
        return False
    return (not isinstance(part, int)) and (text in _KIND_WORDS or "[" in text or text[:1].isupper())


def _kind_word(tag: str) -> str:
    base = tag.split("[", 1)[0]
    if base in _KIND_WORDS:
        return _KIND_WORDS[base]
    if base.startswith("function-") or base.startswith("constrained"):  # function-after[check(), ModelSpec]
        inner = tag[tag.index("[") + 1:-1].split(",")[-1].strip() if "[" in tag else ""
        return _kind_word(inner) if inner and inner != tag else "a value"
    return f"a mapping of {base}'s fields" if base[:1].isupper() else base


def describe_validation_error(err: ValidationError) -> str:
    """The first problem of a pydantic error as 'field: message', in the file's words: a union's member names
    (`model.str`, `ModelSpec`) become what the field accepts."""
    errors = err.errors()
    first = errors[0]
    parts = list(first["loc"])
    fields = [p for p in parts if not _is_type_tag(p)]
    loc = ".".join(str(part) for part in fields if str(part) != "[key]") or "(top level)"
    kind = first["type"]
    msg = first["msg"]
    if len(fields) < len(parts):  # a union: say every member this field accepts
        tags = []
        for e in errors:
            if [p for p in e["loc"] if not _is_type_tag(p)] == fields:
                tags += [str(p) for p in e["loc"] if _is_type_tag(p)][:1]
        words = list(dict.fromkeys(_kind_word(tag) for tag in tags))
        got = first.get("input")
        msg = f"expected {' or '.join(words)}, got {type(got).__name__} {short_repr(got)}"
    elif kind == "extra_forbidden":
        msg = "unknown key; remove it or check its spelling"
    elif kind == "missing":
        msg = "required field is missing; add it"
    elif kind == "model_type":
        got = first.get("input")
        msg = f"expected a mapping of fields, got {type(got).__name__} {short_repr(got)}"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return f"{loc}: {msg}"


def validate_spec(cls: type[T], data: Any, source: str) -> T:
    if not isinstance(data, dict):
        raise PlannerError(f"expected a mapping of fields, got {type(data).__name__}", source=source)
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        raise PlannerError(describe_validation_error(err), source=source) from None


def field_problem(cls: type[BaseModel], name: str, value: Any) -> str | None:
    """Why `value` is not valid for field `name` of `cls` on its own (type and bounds), or None."""
    info = cls.model_fields.get(name)
    if info is None:
        return "unknown key; remove it or check its spelling"
    annotation: Any = info.annotation
    try:
        create_model("Field", field=(annotation, info)).model_validate({"field": value})
    except ValidationError as err:
        return describe_validation_error(err).split(": ", 1)[-1]
    return None
