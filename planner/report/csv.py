"""CSV rendering: named columns (numpy arrays or lists) to text, one row per entry, with the csv module."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence

import numpy as np


def to_csv(columns: Mapping[str, np.ndarray | Sequence[object]]) -> str:
    """A header of the column names, then one line per row; numpy columns convert in one `tolist()` each."""
    names = list(columns)
    values = [col.tolist() if isinstance(col, np.ndarray) else list(col) for col in columns.values()]
    lengths = {len(v) for v in values}
    if len(lengths) > 1:
        raise ValueError(f"columns differ in length: {sorted(lengths)}")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(names)
    writer.writerows(zip(*values))
    return buffer.getvalue()
