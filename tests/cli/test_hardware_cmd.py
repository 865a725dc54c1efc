"""`planner hardware` and `planner hardware show`: output, JSON keys, and one-line errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CATALOG_IDS = sorted(path.stem for path in (REPO / "hardware_profiles").glob("*.yaml"))
SHOW_KEYS = {
    "id", "memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops", "gpus_per_node",
    "intra_node_bandwidth_bytes_per_s", "inter_node_bandwidth_bytes_per_s",
}


def small_profile() -> dict[str, Any]:
    """A valid profile written for these tests: 2 GPUs per node, 1 NIC of 200 Gb/s -> 12.5e9 B/s per GPU."""
    return {
        "name": "Two-GPU test box",
        "accelerator": {
            "name": "Test GPU",
            "memory_bytes": 24_000_000_000,
            "memory_bandwidth_bytes_per_s": 0.9e12,
            "peak_flops_per_s": {"bf16": 200.0e12},
            "source": "made up for the test",
        },
        "node": {
            "gpus_per_node": 2,
            "link_kind": "pcie",
            "bandwidth_bytes_per_s": 32.0e9,
            "latency_s": 5.0e-6,
            "source": "made up for the test",
        },
        "network": {
            "kind": "roce",
            "bandwidth_bytes_per_s": 12.5e9,
            "nics_per_node": 1,
            "nic_bits_per_s": 200.0e9,
            "latency_s": 1.0e-5,
            "source": "made up for the test",
        },
        "efficiency": {
            "matmul": {"peak_fraction": 0.7, "note": "test matmul note"},
            "attention": {"fraction": 0.5, "note": "test attention note"},
            "memory_bandwidth": {"fraction": 0.8, "note": "test memory note"},
            "intra_node_link": {"fraction": 0.7, "note": "test intra note"},
            "inter_node_link": {"fraction": 0.8, "note": "test inter note"},
        },
    }


def write_profile(tmp_path: Path, data: Any, name: str = "box.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def assert_one_line_error(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# Listing -------------------------------------------------------------------------------------
def test_list_table_names_every_profile(run_cli) -> None:
    result = run_cli("hardware")
    assert result.exit_code == 0, result.output
    for hw_id in CATALOG_IDS:
        assert hw_id in result.stdout
    assert "Hardware catalog" in result.stdout
    assert "one direction" in result.stdout


def test_list_table_shows_headline_figures(run_cli) -> None:
    out = run_cli("hardware").stdout
    row = next(line for line in out.splitlines() if " h100-sxm " in line)
    for cell in ("NVIDIA H100 SXM5 80GB", " 989 ", " 1,979 ", "3.35", "450", "50"):
        assert cell in row
    v100 = next(line for line in out.splitlines() if " v100-32gb " in line)
    assert "125 (fp16)" in v100


def test_list_table_rows_do_not_wrap_at_160_columns(run_cli, monkeypatch) -> None:
    # Regression: 'NVIDIA B200 in GB200 (1200 W)' broke over two lines of the gb200-nvl72 row.
    monkeypatch.delenv("COLUMNS", raising=False)
    lines = run_cli("hardware").stdout.splitlines()
    assert max(len(line) for line in lines) <= 160
    body = [line for line in lines if line.startswith("│")]
    assert len(body) == len(CATALOG_IDS)
    gb200 = next(line for line in body if " gb200-nvl72 " in line)
    assert "NVIDIA B200 in GB200 (1200 W)" in gb200


def test_list_json_has_the_show_keys_for_every_profile(run_cli) -> None:
    result = run_cli("hardware", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [item["id"] for item in data] == CATALOG_IDS
    for item in data:
        assert SHOW_KEYS <= set(item)
    a100 = next(item for item in data if item["id"] == "a100-80gb")
    assert a100["peak_flops"]["bf16"] == 312e12
    assert a100["intra_node_bandwidth_bytes_per_s"] == 600e9 / 2
    assert a100["inter_node_bandwidth_bytes_per_s"] == 8 * 200e9 / 8 / 8


# Show ------------------------------------------------------------------------------------------
def test_show_json_keys_and_values(run_cli) -> None:
    result = run_cli("hardware", "show", "h100-sxm", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert SHOW_KEYS <= set(data)
    assert data["id"] == "h100-sxm"
    assert data["peak_flops"]["bf16"] == 989e12
    assert data["peak_flops"]["fp8"] == 1979e12
    assert data["gpus_per_node"] == 8
    assert data["intra_node_bandwidth_bytes_per_s"] == 900e9 / 2
    assert data["inter_node_bandwidth_bytes_per_s"] == 8 * 400e9 / 8 / 8
    assert data["memory_bandwidth_bytes_per_s"] == 3.35e12
    assert 80e9 <= data["memory_bytes"] <= 80 * 2**30
    assert set(data["sources"]) == {"accelerator", "node", "network"}
    assert data["efficiency"]["matmul"]["note"]
    assert data["spec"]["node"]["link_kind"] == "nvlink"


@pytest.mark.parametrize(("ref", "hw_id"), [("H100", "h100-sxm"), ("dgx-a100", "a100-80gb"), ("nvl72", "gb200-nvl72")])
def test_show_resolves_aliases(run_cli, ref: str, hw_id: str) -> None:
    result = run_cli("hardware", "show", ref, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["id"] == hw_id


def test_show_table_has_efficiencies_notes_and_sources(run_cli) -> None:
    result = run_cli("hardware", "show", "mi300x")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ("Hardware profile mi300x", "AMD Instinct MI300X", "xgmi", "448 GB/s one direction",
                 "896 GB/s bidirectional", "Efficiency", "not calibrated", "Sources", "accelerator", "network"):
        assert text in out, text


def test_show_a_yaml_file(run_cli, tmp_path: Path) -> None:
    path = write_profile(tmp_path, small_profile())
    result = run_cli("hardware", "show", str(path), "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["id"] == "box"
    assert data["inter_node_bandwidth_bytes_per_s"] == 200e9 / 8 / 2
    table = run_cli("hardware", "show", str(path))
    assert table.exit_code == 0, table.output
    assert "test attention note" in table.stdout and "made up for the test" in table.stdout


def test_show_a_single_node_profile_without_network(run_cli, tmp_path: Path) -> None:
    data = small_profile()
    data["network"] = None
    path = write_profile(tmp_path, data)
    result = run_cli("hardware", "show", str(path))
    assert result.exit_code == 0, result.output
    assert "single-node" in result.stdout


def test_catalog_file_aliases_key_is_accepted_in_a_user_file(run_cli, tmp_path: Path) -> None:
    data = {"aliases": ["mine"], **small_profile()}
    result = run_cli("hardware", "show", str(write_profile(tmp_path, data)), "--format", "json")
    assert result.exit_code == 0, result.output


# Help ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [("hardware", "--help"), ("hardware", "show", "--help")])
def test_help_ends_with_an_example(run_cli, args: tuple[str, ...]) -> None:
    result = run_cli(*args)
    assert result.exit_code == 0
    text = result.stdout
    # click prints the docstring, then the options; the docstring's last lines are the examples.
    doc = text[: text.index("Options:")].rstrip().splitlines()
    assert doc[-1].strip().startswith("planner hardware")
    assert any(line.strip().startswith("Example") for line in doc)


def test_hardware_is_listed_in_the_top_level_help(run_cli) -> None:
    assert "hardware" in run_cli("--help").stdout


# Bad input: one line, exit 2 ----------------------------------------------------------------------
def test_unknown_id_suggests_close_ids(run_cli) -> None:
    line = assert_one_line_error(run_cli("hardware", "show", "h100-sxn"), "unknown hardware id 'h100-sxn'")
    assert "did you mean" in line and "h100-sxm" in line


def test_unknown_id_without_close_match_points_to_the_list(run_cli) -> None:
    assert_one_line_error(run_cli("hardware", "show", "zzzzzzzz"), "run 'planner hardware'")


def test_missing_file(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    assert_one_line_error(run_cli("hardware", "show", str(path)), str(path), "file not found")


def test_malformed_yaml(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\naccelerator: {\n", encoding="utf-8")
    assert_one_line_error(run_cli("hardware", "show", str(path)), str(path), "malformed YAML at line")


def test_not_a_mapping(run_cli, tmp_path: Path) -> None:
    path = write_profile(tmp_path, ["a", "list"])
    assert_one_line_error(run_cli("hardware", "show", str(path)), str(path), "expected a mapping")


def test_unknown_key(run_cli, tmp_path: Path) -> None:
    data = small_profile()
    data["node"]["gpus_per_nod"] = 2
    path = write_profile(tmp_path, data)
    assert_one_line_error(run_cli("hardware", "show", str(path)), str(path), "node.gpus_per_nod", "unknown key")


def test_wrong_type(run_cli, tmp_path: Path) -> None:
    data = small_profile()
    data["node"]["gpus_per_node"] = "two"
    path = write_profile(tmp_path, data)
    assert_one_line_error(run_cli("hardware", "show", str(path)), str(path), "node.gpus_per_node",
                          "expected an integer, got 'two'")


def test_non_positive_value(run_cli, tmp_path: Path) -> None:
    data = small_profile()
    data["accelerator"]["memory_bandwidth_bytes_per_s"] = 0
    path = write_profile(tmp_path, data)
    assert_one_line_error(run_cli("hardware", "show", str(path)), str(path),
                          "accelerator.memory_bandwidth_bytes_per_s", "greater than 0")


def test_missing_source(run_cli, tmp_path: Path) -> None:
    data = small_profile()
    del data["network"]["source"]
    path = write_profile(tmp_path, data)
    assert_one_line_error(run_cli("hardware", "show", str(path)), str(path), "network.source",
                          "required field is missing")


def test_empty_source(run_cli, tmp_path: Path) -> None:
    data = small_profile()
    data["accelerator"]["source"] = ""
    path = write_profile(tmp_path, data)
    assert_one_line_error(run_cli("hardware", "show", str(path)), str(path), "accelerator.source", "must not be empty")


def test_inconsistent_nic_figures(run_cli, tmp_path: Path) -> None:
    data = small_profile()
    data["network"]["nics_per_node"] = 2  # 2 x 200 Gb/s / 8 / 2 GPUs = 25e9, not the 12.5e9 given
    path = write_profile(tmp_path, data)
    assert_one_line_error(run_cli("hardware", "show", str(path)), str(path), "network.bandwidth_bytes_per_s",
                          "disagrees", "nics_per_node")


def test_half_given_nic_figures(run_cli, tmp_path: Path) -> None:
    data = small_profile()
    del data["network"]["nic_bits_per_s"]
    path = write_profile(tmp_path, data)
    assert_one_line_error(run_cli("hardware", "show", str(path)), str(path), "network",
                          "give both nics_per_node and nic_bits_per_s")


def test_missing_argument_is_a_usage_error(run_cli) -> None:
    assert_one_line_error(run_cli("hardware", "show"), "Missing argument", "hardware show --help")


def test_bad_format_is_a_usage_error(run_cli) -> None:
    assert_one_line_error(run_cli("hardware", "--format", "csv"), "--format")


def test_show_prints_the_power_limit(run_cli) -> None:
    result = run_cli("hardware", "show", "h100-sxm-96gb")
    assert result.exit_code == 0, result.output
    assert "500 W of 700 W: compute-bound kernels x 0.78" in result.stdout
    assert "power limit" not in run_cli("hardware", "show", "h100-sxm").stdout
    data = json.loads(run_cli("hardware", "show", "h100-sxm-96gb", "--format", "json").stdout)
    assert data["spec"]["accelerator"]["power_limit"]["compute_fraction"] == 0.78


def test_show_lists_the_measured_fp8_attention_range_where_the_profile_has_one(run_cli) -> None:
    shown = run_cli("hardware", "show", "gb300-nvl72")
    assert shown.exit_code == 0, shown.output
    # cudnn-frontend's GB300 rows (the profile's table): 192-wide heads, per-tensor 1.68 at 2K up to 1.84 at 16K
    assert "hd192 per-tensor 1.68-1.84x" in shown.stdout
    assert "attention (fp8)" not in run_cli("hardware", "show", "a100-80gb").stdout
