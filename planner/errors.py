"""The one error type the library raises for bad input; the CLI turns it into `error: ...`, exit 2."""

from __future__ import annotations


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
