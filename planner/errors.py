"""The one error type the library raises for bad input; the CLI turns it into `error: ...`, exit 2."""

from __future__ import annotations

import reprlib
from typing import Any

_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60


def short_repr(value: Any, width: int = 60) -> str:
    """The start of `value`'s repr for a message: reprlib's, which stops after a few items and levels, so that a
    YAML alias bomb (nine levels of nine aliases, 9^9 items when walked) is not walked whole by repr() or str()
    before the text is cut."""
    return f"{_SHORT.repr(value):.{width}}"


class PlannerError(Exception):
    """Bad input: names where it came from (file, field) and what to change."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None) -> None:
        self.message = message
        self.source = source
        self.field = field
        super().__init__(self.render())

    def render(self) -> str:
        where = ""
        if self.source:
            where = f"{self.source}: "
        if self.field:
            where += f"{self.field}: "
        return f"{where}{self.message}"
