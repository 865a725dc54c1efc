"""simple_table above LONG_TABLE_ROWS rows: the same text as rich's Table draws, in a fraction of the time; a table
wider than the console still gets rich's narrowing."""

from __future__ import annotations

import io
import re

from rich.console import Console
from rich.text import Text

from planner.report import tables
from planner.report.tables import LONG_TABLE_ROWS, LongTable, render, simple_table

HEADERS = ["#", "memory per GPU", "step", "notes"]
CAPTION = ("bubble, comm: share of the step lost to the pipeline bubble and to communication not hidden behind "
           "compute. v: interleaved stages per rank. A layout equal in degrees")


def _rows(n: int) -> list[list[object]]:
    return [[i, Text("█" * (i % 7) + "░" * (7 - i % 7) + f" {i * 1.5:5.1f}/79 GiB", style="green"),
             f"{i * 0.123:.2f} s", "x" * (i % 5)] for i in range(1, n + 1)]


def _rich(rows: list[list[object]]) -> str:
    cells = [[c if isinstance(c, Text) else Text(str(c)) for c in row] for row in rows]
    return render(tables._rich_table("a title", HEADERS, cells, right=["#", "step"], caption=CAPTION))


def _ansi(renderable: object) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=160, force_terminal=True, color_system="truecolor", highlight=False).print(renderable)
    return buffer.getvalue()


def test_a_long_table_prints_what_rich_prints() -> None:
    rows = _rows(LONG_TABLE_ROWS + 1)
    table = simple_table("a title", HEADERS, rows, right=["#", "step"], caption=CAPTION)
    assert isinstance(table, LongTable)
    assert render(table) == _rich(rows)  # piped: plain text, the caption wrapped at the table's width


def test_its_colours_are_rich_ones_too() -> None:
    rows = _rows(LONG_TABLE_ROWS + 1)
    long = _ansi(simple_table("a title", HEADERS, rows, right=["#", "step"], caption=CAPTION))
    cells = [[c if isinstance(c, Text) else Text(str(c)) for c in row] for row in rows]
    short = _ansi(tables._rich_table("a title", HEADERS, cells, right=["#", "step"], caption=CAPTION))
    plain = re.compile(r"\x1b\[[0-9;]*m")
    assert plain.sub("", long) == plain.sub("", short)
    assert "\x1b[32m█" in long and "\x1b[1m" in long and "\x1b[3m" in long  # the bar's green, bold headers, the title


def test_a_short_table_is_rich_table_and_a_wide_one_falls_back() -> None:
    assert not isinstance(simple_table(None, HEADERS, _rows(3)), LongTable)
    wide = [[i, "w" * 200, "1 s", ""] for i in range(LONG_TABLE_ROWS + 1)]
    text = render(simple_table(None, HEADERS, wide))
    assert max(len(line) for line in text.splitlines()) <= tables.PIPED_WIDTH  # narrowed to fit, as rich does
    assert "…" in text
