"""`planner validate --only training`: predicted vs published, as a table, JSON and markdown; its exit code
says whether every case is within its tolerance."""

from __future__ import annotations

import json

import pytest

from planner.validate.training import rows

CASE_KEYS = {"id", "group", "quantity", "unit", "predicted", "published", "error", "tolerance", "passed", "source"}
SUMMARY_KEYS = {"cases", "passed", "median_abs_error", "max_abs_error"}


@pytest.fixture(scope="module")
def training_json():
    from click.testing import CliRunner

    from planner.cli import cli

    result = CliRunner().invoke(cli, ["validate", "--only", "training", "--format", "json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def test_json_shape(training_json):
    _, data = training_json
    assert set(data) == {"summary", "cases"}
    assert data["cases"], "no cases"
    for case in data["cases"]:
        assert set(case) == CASE_KEYS
        assert case["error"] == pytest.approx((case["predicted"] - case["published"]) / case["published"])
        assert case["passed"] == (abs(case["error"]) <= case["tolerance"])
    for group, stats in data["summary"].items():
        assert set(stats) == SUMMARY_KEYS, group
        cases = [c for c in data["cases"] if c["group"] == group]
        assert stats["cases"] == len(cases)
        assert stats["passed"] == sum(c["passed"] for c in cases)


def test_json_lists_every_training_row(training_json):
    _, data = training_json
    assert [c["id"] for c in data["cases"]] == [r.case_id for r in rows()]
    groups = set(data["summary"])
    assert "Narayanan et al. 2021, Table 1 (A100, Selene)" in groups
    assert "Megatron-LM README 2024, H100 weak scaling" in groups
    assert not any("TensorRT" in g for g in groups)  # --only training leaves the serving cases out


def test_exit_code_says_whether_any_case_failed(training_json):
    exit_code, data = training_json
    assert exit_code == (0 if all(c["passed"] for c in data["cases"]) else 1)


def test_every_training_case_passes_so_validate_exits_0(training_json):
    exit_code, data = training_json
    assert [c["id"] for c in data["cases"] if not c["passed"]] == []
    assert exit_code == 0


def test_markdown(run_cli):
    result = run_cli("validate", "--only", "training", "--format", "markdown")
    assert result.exit_code in (0, 1), result.output
    text = result.stdout
    assert "### Narayanan et al. 2021, Table 1 (A100, Selene)" in text
    assert "| case | quantity | predicted | published | error | tolerance | ok |" in text
    assert "| ptdp_table1_1.7B |" in text
    assert "within tolerance; median |error|" in text
    table_rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| case")]
    assert len(table_rows) == len(rows())


def test_table(run_cli):
    result = run_cli("validate", "--only", "training")
    assert result.exit_code in (0, 1), result.output
    for text in ("ptdp_table1_1.7B", "mlm24_h100_weak_scaling_462B", "kor_activations_175B_b1_tp", "within tolerance"):
        assert text in result.stdout


def test_unknown_only_value_is_a_usage_error(run_cli):
    result = run_cli("validate", "--only", "everything")
    assert result.exit_code == 2
    assert result.stderr.startswith("error:")
