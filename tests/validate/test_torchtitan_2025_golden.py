"""Golden: torchtitan's 2025 benchmark runs (async TP on 256 H100, Trainy's H200 nodes, torchao's float8 page), each
read from the TOML of the torchtitan commit its authors ran and their command line, and predicted by planner. Data
and sources: benchmarks/data/torchtitan_2025.yaml; the TOMLs: tests/fixtures/engines/upstream/torchtitan/. Held out:
no parameter was chosen on these rows.

Tolerances: 25% per row for the step (the worst row, 70B fp8 with async TP, is 20% slow: torch's async TP gained more
there than the share solved from the 2024-12 pair gives; docs/validation.md) and a 10% median over the 17 NVIDIA rows;
10% for the peak memory of every row (torchtitan logs the caching allocator's reservation, planner its modelled peak).
The three MI300X rows of torchao's README are open: their steps are 26-39% faster in planner than measured (each a strict
expected failure with its reason), their memory within the 10%."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from outside_torchtitan import measured_step_seconds, predict, rows  # noqa: E402

ROWS = rows()
# Open: the out-of-box MI300X runs (pytorch/ao 853f87d1b: "without any performance debugging ... The tensorwise number
# looks lower than expected"); the mi300x profile's GEMM plateau is its MAMF entry and its attention plateau an
# assumption, and no measurement of the ROCm SDPA (AOTriton) kernels or of hipBLASLt's fp8 GEMMs says what they reach
# (docs/validation.md, torchtitan 2025).
OPEN_STEP_ROWS = {
    row["id"]: "MI300X out of the box (torch nightly on ROCm 6.4): 26-39% slower than planner's mi300x profile, whose "
    "fp8 plateau is the bf16 one (an assumption) and whose attention plateau is not measured"
    for row in ROWS if row["hardware"] == "mi300x"
}
STEP_TOLERANCE = 0.25
MEDIAN_TOLERANCE = 0.10
MEMORY_TOLERANCE = 0.10


def _error(row: dict) -> float:
    result = predict(row)
    measured = measured_step_seconds(row, result)
    return (result.scalar("step_seconds") - measured) / measured


def _param(row: dict):  # type: ignore[no-untyped-def]
    if row["id"] in OPEN_STEP_ROWS:
        return pytest.param(row, marks=pytest.mark.xfail(strict=True, reason=OPEN_STEP_ROWS[row["id"]]), id=row["id"])
    return pytest.param(row, id=row["id"])


@pytest.mark.parametrize("row", [_param(row) for row in ROWS])
def test_row_step_within_tolerance(row):
    result = predict(row)
    measured = measured_step_seconds(row, result)
    assert result.scalar("step_seconds") == pytest.approx(measured, rel=STEP_TOLERANCE)


@pytest.mark.parametrize("row", ROWS, ids=[row["id"] for row in ROWS])
def test_row_fits_and_its_memory_within_tolerance(row):
    result = predict(row)
    assert result.fits  # every row ran
    if "peak_memory_GiB" in row:
        assert result.scalar("peak_bytes") / 2**30 == pytest.approx(row["peak_memory_GiB"], rel=MEMORY_TOLERANCE)


def test_the_rows_are_read_as_their_command_lines_say():
    # the recipe names and the compile switch travel from the flags: rowwise where --float8.recipe_name says so,
    # tensorwise otherwise; the torchao page's torchtitan (54ef422) ran its loss eager
    for row in ROWS:
        lay = predict(row).layout
        expected = "rowwise" if "recipe_name" in row["args"] else "tensorwise"
        assert (lay.dtype == "fp8") == ("converters" in row["args"])
        if lay.dtype == "fp8":
            assert lay.fp8_recipe == expected
        assert lay.compile
        assert lay.compile_loss is (False if row["source"] == "torchao" else None)


def test_median_error_over_the_rows():
    errors = np.asarray([_error(row) for row in ROWS if row["id"] not in OPEN_STEP_ROWS])
    assert len(errors) == 17
    assert float(np.median(np.abs(errors))) <= MEDIAN_TOLERANCE
