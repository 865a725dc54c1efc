"""Golden tests: every published serving measurement in inference_cases.yaml within its tolerance.

The fitted constants in planner/serving/time.py come from benchmarks/calibrate_serving.py, run on all of
these cases (the 0.9.0 ones, held_out: true, were held out of the first calibration); its leave-one-source-out
errors are in docs/inference.md, Calibration.
"""

from __future__ import annotations

import statistics

import pytest

from planner.validate import ValidationRow
from planner.validate.inference import (
    inference_cases,
    kv_cache_rows,
    measured_si,
    predict_case,
    rows,
    serving_rows,
)

CASES = inference_cases()["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case_within_tolerance(case: dict) -> None:
    predicted = predict_case(case)
    published = measured_si(case)
    error = (predicted - published) / published
    assert abs(error) <= case["tolerance"], f"{case['id']}: predicted {predicted:.4g}, published {published:.4g}"


def test_median_error_below_25_percent() -> None:
    errors = [abs(r.error) for r in serving_rows()]
    assert statistics.median(errors) < 0.25
    held_out = [abs(r.error) for r in serving_rows() if "held out" in r.group]
    assert held_out and statistics.median(held_out) < 0.25


def test_kv_cache_rows_exact() -> None:
    for row in kv_cache_rows():
        assert row.predicted == row.published, row.case_id


def test_rows_are_validation_rows_with_sources() -> None:
    all_rows = rows()
    assert len(all_rows) == len(CASES) + len(inference_cases()["kv_cache_cases"])
    assert all(isinstance(r, ValidationRow) and r.source and r.passed for r in all_rows)
    assert len({r.case_id for r in all_rows}) == len(all_rows)


def test_cases_name_what_they_assume() -> None:
    for case in CASES:
        assert case["decode_attention"] in ("grouped", "per-head")
        assert case["tolerance"] <= 0.25
        assert case["notes"]
        if case["hardware"] == "a100-80gb" and case["measured"]["name"] != "ttft_seconds" and not case["held_out"]:
            assert "per GPU" in case["notes"]
