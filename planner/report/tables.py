"""Shared rich-table helpers: number formatting, a memory bar against capacity, rendering to text.

Rendering returns a string; only the CLI writes it. rich is imported here, so command modules import
this module lazily (inside the function that draws a table) to keep `planner --help` and JSON/CSV
output free of rich's import time.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from collections.abc import Sequence

from rich.box import HEAVY_HEAD
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

GIB = 2.0**30
PIPED_WIDTH = 160  # columns when stdout is not a terminal and COLUMNS is unset, so piped tables do not wrap


def human_bytes(n: float) -> str:
    """Binary units, as PyTorch and nvidia-smi report device memory (and `planner check` prints it):
    71.2 GiB, 512.0 MiB."""
    for unit, size in (("TiB", 2.0**40), ("GiB", GIB), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def human_seconds(s: float) -> str:
    """0.84 ms, 6.04 s, 12.3 min, 4.2 h, 3.1 d."""
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    if s < 120:
        return f"{s:.2f} s"
    if s < 2 * 3600:
        return f"{s / 60:.1f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def human_count(x: float) -> str:
    """5.56 M, 812 k, 12.3 G."""
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x:.3g}"


def percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def memory_bar(used_bytes: float, capacity_bytes: float, usable_bytes: float | None = None, width: int = 10) -> Text:
    """A bar of `width` cells filled in proportion to used / capacity, then the figures.

    Green below the usable limit (capacity less headroom), yellow within the headroom, red above capacity;
    the cells between the usable limit and capacity are drawn as the headroom.
    """
    usable = capacity_bytes if usable_bytes is None else usable_bytes
    fraction = used_bytes / capacity_bytes if capacity_bytes > 0 else 0.0
    filled = min(width, max(0, round(fraction * width)))
    limit = min(width, max(filled, round(usable / capacity_bytes * width))) if capacity_bytes > 0 else width
    style = "green" if used_bytes <= usable else ("yellow" if used_bytes <= capacity_bytes else "red")
    bar = Text()
    bar.append("█" * filled, style=style)
    bar.append("░" * (limit - filled), style="dim")
    bar.append("▒" * (width - limit), style="dim yellow")
    bar.append(f"{'>' if fraction > 1 else ' '}{used_bytes / GIB:5.1f}/{capacity_bytes / GIB:.0f} GiB")
    return bar


# Above this many rows simple_table lays the table out itself: rich's Table measures and renders every cell through
# its general layout, about 2.7 ms a row of the search table (a 20,000-row `search --top` took 19 s to print).
LONG_TABLE_ROWS = 400


def simple_table(title: str | None, headers: Sequence[str], rows: Sequence[Sequence[object]], *,
                 right: Sequence[str] = (), caption: str | None = None) -> RenderableType:
    """A table with `headers`; columns named in `right` are right-aligned; cells may be str or rich Text. Up to
    LONG_TABLE_ROWS rows it is rich's Table; above, a LongTable that draws the same box."""
    cells = [[cell if isinstance(cell, Text) else Text(str(cell)) for cell in row] for row in rows]
    if len(cells) > LONG_TABLE_ROWS:
        return LongTable(title, headers, cells, right=right, caption=caption)
    return _rich_table(title, headers, cells, right=right, caption=caption)


def _rich_table(title: str | None, headers: Sequence[str], rows: Sequence[Sequence[Text]], *,
                right: Sequence[str], caption: str | None) -> Table:
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for header in headers:
        table.add_column(header, justify="right" if header in right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


class LongTable:
    """What rich's Table draws for simple_table (the heavy-head box, one space of padding, the title and caption
    left-justified at the table's width, bold headers), laid out in one pass: every column as wide as its widest
    cell. A table wider than the console falls back to rich's Table, which narrows columns to fit."""

    def __init__(self, title: str | None, headers: Sequence[str], rows: Sequence[Sequence[Text]], *,
                 right: Sequence[str], caption: str | None) -> None:
        self.title, self.caption = title, caption
        self.headers = list(headers)
        self.right = list(right)
        self.right_aligned = [header in right for header in headers]
        self.rows = rows
        self.widths = [max([cell_len(header)] + [cell_len(row[i].plain) for row in rows])
                       for i, header in enumerate(self.headers)]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table_width = sum(self.widths) + 3 * len(self.widths) + 1
        if table_width > options.max_width:
            yield _rich_table(self.title, self.headers, self.rows, right=self.right, caption=self.caption)
            return
        annotation_options = options.update(width=table_width, height=None, justify="left")

        def annotation(text: str, style: str) -> RenderResult:
            return console.render(console.render_str(text, style=style, highlight=False), annotation_options)

        def rule(left: str, fill: str, cross: str, end: str) -> Segment:
            return Segment(left + cross.join(fill * (w + 2) for w in self.widths) + end)

        def line(cells: Sequence[Text], edge: str, style: str = "") -> RenderResult:
            # a cell's own style and spans on its text, `style` (the header's) over the whole padded cell, as rich does
            yield Segment(edge)
            for cell, width, right_aligned in zip(cells, self.widths, self.right_aligned):
                pad = " " * (width - cell_len(cell.plain))
                before, after = (pad, "") if right_aligned else ("", pad)
                if cell.spans or cell.style or style:
                    padded = Text(" " + before)
                    padded.append_text(cell)
                    padded.append(after + " ")
                    if style:
                        padded.stylize(style)
                    yield from padded.render(console, end="")
                else:
                    yield Segment(" " + before + cell.plain + after + " ")
                yield Segment(edge)
            yield Segment.line()

        if self.title:
            yield from annotation(self.title, "table.title")
        box = HEAVY_HEAD.substitute(options, safe=console.safe_box)  # an ASCII box where rich's Table draws one
        yield rule(box.top_left, box.top, box.top_divider, box.top_right)
        yield Segment.line()
        yield from line([Text(h) for h in self.headers], box.head_vertical, style="table.header")
        yield rule(box.head_row_left, box.head_row_horizontal, box.head_row_cross, box.head_row_right)
        yield Segment.line()
        for row in self.rows:
            yield from line(row, box.mid_vertical)
        yield rule(box.bottom_left, box.bottom, box.bottom_divider, box.bottom_right)
        yield Segment.line()
        if self.caption:
            yield from annotation(self.caption, "table.caption")


def render(*renderables: RenderableType | str) -> str:
    """Render to text as stdout would show it: colour and the terminal's width on a terminal; plain and
    PIPED_WIDTH columns wide (unless COLUMNS is set) when piped."""
    tty = sys.stdout.isatty()
    width = shutil.get_terminal_size((PIPED_WIDTH, 24)).columns if tty or "COLUMNS" in os.environ else PIPED_WIDTH
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=tty, color_system="auto" if tty else None,
                      highlight=False)
    for renderable in renderables:
        console.print(renderable)
    return buffer.getvalue()
