"""`planner infer estimate` and `planner infer search`: outputs, JSON keys, and one-line errors."""

from __future__ import annotations

import csv
import io
import json
import sys

import pytest

from planner.cli import cli

ESTIMATE = ["infer", "estimate", "-m", "llama-3.1-70b", "-w", "h100-sxm", "--tp", "4", "--gpus", "8",
            "--input-len", "1000", "--output-len", "200", "--concurrency", "64"]
SEARCH = ["infer", "search", "-m", "llama-3.1-70b", "-w", "h100-sxm", "--gpus", "8", "--input-len", "1000",
          "--output-len", "200"]


def test_estimate_json_keys(run_cli) -> None:
    result = run_cli(*ESTIMATE, "--weight-dtype", "fp8", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in ("config", "memory", "fits", "max_concurrency", "latency", "throughput"):
        assert key in data
    for key in ("weights_bytes", "kv_cache_bytes", "kv_cache_bytes_per_token", "activations_bytes", "other_bytes",
                "total_bytes", "capacity_bytes"):
        assert isinstance(data["memory"][key], (int, float))
    assert set(data["latency"]) >= {"ttft_seconds", "tpot_seconds", "e2e_seconds"}
    assert set(data["throughput"]) >= {"output_tokens_per_second", "output_tokens_per_second_per_gpu"}
    assert data["memory"]["kv_cache_bytes_per_token"] == 327_680  # whole model, bf16 KV by default
    assert data["config"]["replicas"] == 2
    assert data["fits"] is True and data["max_concurrency"] > 64
    m = data["memory"]
    assert m["total_bytes"] == pytest.approx(
        m["weights_bytes"] + m["kv_cache_bytes"] + m["activations_bytes"] + m["other_bytes"])
    assert data["throughput"]["output_tokens_per_second_per_gpu"] == pytest.approx(
        data["throughput"]["output_tokens_per_second"] / 4)


def test_estimate_batching_selects_the_reported_figures(run_cli) -> None:
    static = json.loads(run_cli(*ESTIMATE, "--batching", "static", "--format", "json").stdout)
    cont = json.loads(run_cli(*ESTIMATE, "--batching", "continuous", "--format", "json").stdout)
    assert static["latency"]["ttft_seconds"] == static["batching"]["static"]["ttft_seconds"]
    assert cont["latency"]["ttft_seconds"] == cont["batching"]["continuous"]["ttft_seconds"]
    assert static["batching"] == cont["batching"]


def test_estimate_kv_fp8_halves_per_token(run_cli) -> None:
    data = json.loads(run_cli(*ESTIMATE, "--kv-dtype", "fp8", "--format", "json").stdout)
    assert data["memory"]["kv_cache_bytes_per_token"] == 163_840


def test_estimate_table(run_cli) -> None:
    result = run_cli(*ESTIMATE)
    assert result.exit_code == 0, result.output
    for text in ("Memory per GPU", "KV cache", "weights", "TTFT", "TPOT", "fits", "█"):
        assert text in result.stdout


def test_estimate_does_not_fit(run_cli) -> None:
    result = run_cli("infer", "estimate", "-m", "llama-3.1-70b", "-w", "h100-sxm", "--input-len", "100",
                     "--output-len", "100", "--format", "json")
    data = json.loads(result.stdout)
    assert data["fits"] is False and data["max_concurrency"] == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--tp", "3"], "does not divide num_attention_heads"),
        (["--tp", "4", "--gpus", "6"], "not a multiple of tp"),
        (["--input-len", "130000", "--output-len", "2000"], "max_seq_len"),
        (["--input-len", "0"], "--input-len must be at least 1"),
        (["--output-len", "-5"], "--output-len must be at least 1"),
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--pp", "100"], "exceeds num_layers"),
        (["--weight-dtype", "fp4"], "Invalid value"),
    ],
)
def test_estimate_bad_input_one_line_exit_2(args: list[str], needle: str) -> None:
    from click.testing import CliRunner

    base = ["infer", "estimate", "-m", "llama-3.1-70b", "-w", "h100-sxm", "--input-len", "100",
            "--output-len", "100"]
    result = CliRunner().invoke(cli, base + args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert needle in lines[0]


def test_search_table_and_reasons(run_cli) -> None:
    result = run_cli(*SEARCH, "--tpot-max", "40ms", "--weight-dtype", "bf16,fp8")
    assert result.exit_code == 0, result.output
    assert "Best layouts" in result.stdout and "Rejected" in result.stdout and "tpot" in result.stdout


def test_search_json(run_cli) -> None:
    result = run_cli(*SEARCH, "--ttft-max", "0.5", "--tpot-max", "50ms", "--top", "3", "--format", "json")
    data = json.loads(result.stdout)
    assert data["config"]["tpot_max_seconds"] == pytest.approx(0.05)
    assert len(data["results"]) == 3
    rates = [row["output_tokens_per_second_per_gpu"] for row in data["results"]]
    assert rates == sorted(rates, reverse=True)
    for row in data["results"]:
        assert row["tpot_seconds"] <= 0.05 and row["ttft_seconds"] <= 0.5
        assert row["tp"] * row["pp"] * row["replicas"] == 8
    assert data["feasible"] >= 3 and isinstance(data["rejected"], dict)


def test_search_csv_pareto(run_cli) -> None:
    result = run_cli(*SEARCH, "--pareto", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) >= 3
    tpot = [float(r["tpot_seconds"]) for r in rows]
    rate = [float(r["output_tokens_per_second_per_gpu"]) for r in rows]
    assert tpot == sorted(tpot) and rate == sorted(rate)


def test_search_bad_duration_and_plot_suffix() -> None:
    from click.testing import CliRunner

    runner = CliRunner()
    bad = runner.invoke(cli, SEARCH + ["--tpot-max", "fast"])
    assert bad.exit_code == 2 and "not a duration" in bad.stderr
    plot = runner.invoke(cli, SEARCH + ["--plot", "front.pdf"])
    assert plot.exit_code == 2 and plot.stderr.strip().startswith("error: plot file")


def test_search_plot(run_cli, tmp_path, monkeypatch) -> None:
    path = tmp_path / "front.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        from click.testing import CliRunner

        result = CliRunner().invoke(cli, SEARCH + ["--plot", str(path)])
        assert result.exit_code == 2 and "needs matplotlib" in result.stderr
        return
    result = run_cli(*SEARCH, "--plot", str(path))
    assert result.exit_code == 0 and path.stat().st_size > 0


def test_search_plot_without_matplotlib(tmp_path, monkeypatch) -> None:
    from click.testing import CliRunner

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    result = CliRunner().invoke(cli, SEARCH + ["--plot", str(tmp_path / "x.svg")])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: --plot needs matplotlib; install it with: pip install 'planner[plot]'"


def test_help_ends_with_examples(run_cli) -> None:
    for args in (["infer", "--help"], ["infer", "estimate", "--help"], ["infer", "search", "--help"]):
        result = run_cli(*args)
        assert result.exit_code == 0 and "Example" in result.stdout
