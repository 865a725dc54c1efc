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

from rich.console import Console, RenderableType
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


def simple_table(title: str | None, headers: Sequence[str], rows: Sequence[Sequence[object]], *,
                 right: Sequence[str] = (), caption: str | None = None) -> Table:
    """A table with `headers`; columns named in `right` are right-aligned; cells may be str or rich Text."""
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for header in headers:
        table.add_column(header, justify="right" if header in right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(cell if isinstance(cell, Text) else Text(str(cell)) for cell in row))
    return table


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
