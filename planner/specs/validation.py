"""Pydantic validation errors in our terms: 'field: message', and a spec validated with that message."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError, create_model

from planner.errors import PlannerError

T = TypeVar("T", bound=BaseModel)


def describe_validation_error(err: ValidationError) -> str:
    """The first problem of a pydantic error as 'field: message'."""
    first = err.errors()[0]
    loc = ".".join(str(part) for part in first["loc"]) or "(top level)"
    kind = first["type"]
    msg = first["msg"]
    if kind == "extra_forbidden":
        msg = "unknown key; remove it or check its spelling"
    elif kind == "missing":
        msg = "required field is missing; add it"
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
