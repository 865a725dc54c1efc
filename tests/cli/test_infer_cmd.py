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
        (["--input-len", "0"], "'--input-len': must be at least 1, got 0"),
        (["--output-len", "-5"], "'--output-len': must be at least 1, got -5"),
        (["--concurrency", "0"], "'--concurrency': must be at least 1, got 0"),
        (["--pp", "100"], "exceeds num_layers"),
        (["--weight-dtype", "fp2"], "Invalid value"),
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


# --- regressions from the review of the serving commands ----------------------------------------------------

NOTHING_MEETS = SEARCH + ["--ttft-max", "1ms", "--tpot-max", "5ms"]
NOTHING_FITS = ["infer", "search", "-m", "llama-3.1-405b", "-w", "a100-40gb", "--gpus", "8", "--input-len", "4000",
                "--output-len", "500"]


def test_search_pareto_rank_is_the_place_in_the_ranking(run_cli) -> None:
    # The front is listed by TPOT; '#'/'rank' used to restart at 1 there, calling the slowest-per-GPU
    # layout the best. It is the place in the ranking by tokens/s per GPU, as in 'planner search --pareto'.
    top = json.loads(run_cli(*SEARCH, "--top", "10000", "--format", "json").stdout)["results"]
    front = json.loads(run_cli(*SEARCH, "--pareto", "--format", "json").stdout)["results"]
    key = ("tp", "pp", "weight_dtype", "kv_dtype", "concurrency")
    place = {tuple(row[k] for k in key): row["rank"] for row in top}
    assert [row["rank"] for row in top] == list(range(1, len(top) + 1))
    assert len(front) >= 3
    for row in front:
        assert row["rank"] == place[tuple(row[k] for k in key)]
    assert front[-1]["rank"] == 1  # the front ends at the best layout
    assert front[0]["rank"] > len(front)


def test_search_bytes_are_integers(run_cli) -> None:
    rows = json.loads(run_cli(*SEARCH, "--format", "json").stdout)["results"]
    assert rows and all(isinstance(row["total_bytes"], int) for row in rows)
    text = run_cli(*SEARCH, "--format", "csv").stdout
    assert all("." not in r["total_bytes"] for r in csv.DictReader(io.StringIO(text)))


def test_search_nothing_meets_the_limits_says_how_close_it_came(run_cli) -> None:
    result = run_cli(*NOTHING_MEETS)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "┏" not in out.split("No layout meets")[0]  # no empty table of layouts
    assert "No layout meets the limits (--ttft-max 1.0 ms, --tpot-max 5.0 ms)" in out
    assert "lowest TTFT" in out and "lowest TPOT" in out and "relax --ttft-max or --tpot-max" in out
    assert "0 feasible" in out
    doc = json.loads(run_cli(*NOTHING_MEETS, "--format", "json").stdout)
    assert doc["results"] == [] and doc["feasible"] == 0
    low = doc["closest"]["lowest_tpot"]
    assert low["tpot_seconds"] > 0.005 and low["rank"] is None
    assert doc["closest"]["lowest_ttft"]["ttft_seconds"] > 0.001
    both = json.loads(run_cli(*SEARCH, "--top", "10000", "--format", "json").stdout)["results"]
    assert low["tpot_seconds"] == pytest.approx(min(row["tpot_seconds"] for row in both))
    csv_run = run_cli(*NOTHING_MEETS, "--format", "csv")
    assert csv_run.stdout.count("\n") == 1 and "no layout meets the limits" in csv_run.stderr


def test_search_nothing_fits_in_memory(run_cli) -> None:
    result = run_cli(*NOTHING_FITS)
    assert result.exit_code == 0, result.output
    assert "No layout fits in memory" in result.stdout and "add GPUs" in result.stdout
    assert "--weight-dtype bf16,fp8,int4" in result.stdout and "--kv-dtype bf16,fp8" in result.stdout
    doc = json.loads(run_cli(*NOTHING_FITS, "--format", "json").stdout)
    assert doc["closest"] == {"lowest_ttft": None, "lowest_tpot": None}


def test_search_plot_is_skipped_when_nothing_meets_the_limits(run_cli, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "front.png"
    result = run_cli(*NOTHING_MEETS, "--plot", str(path))
    assert result.exit_code == 0 and not path.exists()
    assert "not written" in result.stderr


def test_search_one_layout_no_rejections_reads_well(run_cli) -> None:
    out = run_cli("infer", "search", "-m", "llama-3.1-8b", "-w", "h100-sxm", "--gpus", "1", "--input-len", "100",
                  "--output-len", "10").stdout
    assert "1 layout (" in out and "Rejected: none" in out and "1 layouts" not in out


@pytest.mark.parametrize("args", [
    ESTIMATE + ["--pp", "2", "--gpus", "8"],
    ["infer", "estimate", "-m", "llama-3.1-405b", "-w", "gb200-nvl72", "--tp", "8", "--pp", "9", "--gpus", "72",
     "--input-len", "100000", "--output-len", "1000", "--concurrency", "3", "--weight-dtype", "fp8"],
    SEARCH + ["--pareto", "--weight-dtype", "bf16,fp8,int8,int4", "--kv-dtype", "bf16,fp8"],
    NOTHING_MEETS,
    NOTHING_FITS,
])
def test_tables_fit_160_columns_when_piped(run_cli, monkeypatch, args) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 160


def test_estimate_pipeline_breakdown_is_one_pass_through_every_stage(run_cli) -> None:
    args = ["infer", "estimate", "-m", "llama-3.1-70b", "-w", "h100-sxm", "--tp", "2", "--pp", "4",
            "--input-len", "1000", "--output-len", "100", "--concurrency", "64"]
    out = run_cli(*args).stdout
    assert "One static decode pass of a micro-batch (16 sequences, 4 micro-batches) through all 4 stages" in out
    data = json.loads(run_cli(*args, "--format", "json").stdout)
    d = data["breakdown"]["decode_step"]
    assert data["breakdown"]["decode_micro_batches"] == 4
    parts = ("gemm_seconds", "attention_seconds", "elementwise_seconds", "layer_overhead_seconds", "tp_comm_seconds",
             "head_seconds", "pass_overhead_seconds", "pp_comm_seconds")
    assert sum(d[k] for k in parts) == pytest.approx(d["traversal_seconds"])


def test_estimate_notes_fp8_on_a_chip_without_fp8_units(run_cli) -> None:
    args = ["infer", "estimate", "-m", "llama-3.1-8b", "-w", "a100-40gb", "--input-len", "100", "--output-len", "10",
            "--weight-dtype", "fp8", "--kv-dtype", "fp8"]
    data = json.loads(run_cli(*args, "--format", "json").stdout)
    assert len(data["notes"]) == 2 and "weight-only" in data["notes"][0]
    assert "note: " in run_cli(*args).stdout
    h100 = json.loads(run_cli(*ESTIMATE, "--weight-dtype", "fp8", "--kv-dtype", "fp8", "--format", "json").stdout)
    assert h100["notes"] == []


def test_estimate_headline_is_one_line_when_piped(run_cli, monkeypatch) -> None:
    # Regression: serving tables were rendered 120 columns wide when piped (160 elsewhere), so the
    # headline broke before 'KV bf16'.
    monkeypatch.delenv("COLUMNS", raising=False)
    first = run_cli(*ESTIMATE, "--weight-dtype", "fp8").stdout.splitlines()[0]
    assert first.startswith("Llama 3.1 70B on ") and first.rstrip().endswith("weights fp8, KV bf16")


def test_estimate_notes_a_tensor_parallel_group_across_nodes(run_cli) -> None:
    args = ["infer", "estimate", "-m", "llama-3.1-70b", "-w", "h100-sxm", "--tp", "16", "--input-len", "100",
            "--output-len", "10", "--format", "json"]
    notes = json.loads(run_cli(*args).stdout)["notes"]
    assert notes == ["tp 16 spans 2 nodes of 8 GPUs: its all-reduces (two per layer per pass) cross the inter-node "
                     "network"]
    assert json.loads(run_cli(*ESTIMATE, "--format", "json").stdout)["notes"] == []


def test_estimate_json_stages_match_the_most_loaded_stage(run_cli) -> None:
    # like `planner estimate --format json`: one entry per stage with its layers and memory; the heaviest is
    # the stage the `memory` block reports
    data = json.loads(run_cli("infer", "estimate", "-m", "llama-3.1-70b", "-w", "h100-sxm", "--tp", "2", "--pp", "3",
                              "--input-len", "1000", "--output-len", "200", "--concurrency", "16",
                              "--format", "json").stdout)
    stages = data["stages"]
    assert [s["stage"] for s in stages] == [0, 1, 2]
    assert sum(s["layers"] for s in stages) == 80
    heaviest = max(stages, key=lambda s: s["total_bytes"])
    assert heaviest["total_bytes"] == pytest.approx(data["memory"]["total_bytes"], rel=1e-9)
    assert heaviest["weights_bytes"] == pytest.approx(data["memory"]["weights_bytes"], rel=1e-9)
    for s in stages:
        assert s["total_bytes"] == pytest.approx(s["weights_bytes"] + s["kv_cache_bytes"] + s["activations_bytes"]
                                                 + s["other_bytes"])


def test_estimate_percentiles_and_request_rate(run_cli) -> None:
    closed = json.loads(run_cli(*ESTIMATE, "--format", "json").stdout)
    lat = closed["latency"]
    assert lat["ttft_p50_seconds"] <= lat["ttft_p90_seconds"] <= lat["ttft_p99_seconds"]
    assert lat["tpot_p50_seconds"] <= lat["tpot_p90_seconds"] <= lat["tpot_p99_seconds"]
    assert closed["steady_state"]["in_flight"] == pytest.approx(64, rel=1e-6)
    # open loop: 2 req/s over 2 replicas is 1 req/s each; Little's law sizes what is in flight
    opened = json.loads(run_cli(*ESTIMATE, "--request-rate", "2", "--format", "json").stdout)
    st = opened["steady_state"]
    assert st["request_rate"] == pytest.approx(1.0, rel=1e-6)
    assert st["in_flight"] == pytest.approx(opened["latency"]["e2e_seconds"], rel=1e-6)
    assert opened["throughput"]["output_tokens_per_second_all_replicas"] == pytest.approx(2 * 200, rel=1e-6)
    # far beyond what 8 GPUs serve: overloaded, said in the table, null latencies in JSON
    over = json.loads(run_cli(*ESTIMATE, "--request-rate", "5000", "--format", "json").stdout)
    assert over["steady_state"]["stable"] is False and over["latency"]["ttft_seconds"] is None
    assert "OVERLOADED" in run_cli(*ESTIMATE, "--request-rate", "5000").stdout


def test_request_rate_needs_continuous_batching(run_cli) -> None:
    result = run_cli(*ESTIMATE, "--request-rate", "2", "--batching", "static")
    assert result.exit_code == 2 and result.output.startswith("error: --request-rate needs --batching continuous")


def test_search_limits_apply_to_the_percentile(run_cli) -> None:
    # a TTFT limit between a layout's mean and its p99 passes it with --percentile mean, rejects it at p99
    base = [*SEARCH, "--weight-dtype", "fp8", "--format", "json", "--top", "1"]
    best = json.loads(run_cli(*base, "--percentile", "mean").stdout)["results"][0]
    assert best["ttft_p99_seconds"] > best["ttft_seconds"]
    limit = f"{(best['ttft_seconds'] + best['ttft_p99_seconds']) / 2:.6f}"
    mean_rows = json.loads(run_cli(*base, "--percentile", "mean", "--ttft-max", limit).stdout)["results"]
    p99 = json.loads(run_cli(*base, "--percentile", "p99", "--ttft-max", limit).stdout)
    assert mean_rows and all(r["ttft_p99_seconds"] <= float(limit) for r in p99["results"])
    assert p99["rejected"]["ttft"] > json.loads(
        run_cli(*base, "--percentile", "mean", "--ttft-max", limit).stdout)["rejected"].get("ttft", 0)


def test_search_at_a_request_rate(run_cli) -> None:
    data = json.loads(run_cli(*SEARCH, "--weight-dtype", "fp8", "--request-rate", "10", "--format", "json").stdout)
    rows = data["results"]
    assert rows and all(r["output_tokens_per_second_all_replicas"] == pytest.approx(10 * 200, rel=1e-6) for r in rows)
    e2e = [r["e2e_seconds"] for r in rows]
    assert e2e == sorted(e2e)  # same load for all: ranked by end-to-end latency
    heavy = json.loads(run_cli(*SEARCH, "--request-rate", "100000", "--format", "json").stdout)
    assert heavy["results"] == [] and heavy["rejected"].get("overload", 0) > 0


def test_a_smaller_token_budget_chunks_the_prompt(run_cli) -> None:
    # 8,000-token prompts among 16 clients: a 2,048-token budget splits each prompt over several iterations,
    # which lowers TPOT (shorter iterations) and raises TTFT (its prompt waits for more of them)
    base = ["infer", "estimate", "-m", "llama-3.1-8b", "-w", "h100-sxm", "--input-len", "8000", "--output-len", "200",
            "--concurrency", "16", "--format", "json"]
    big = json.loads(run_cli(*base).stdout)
    small = json.loads(run_cli(*base, "--max-batched-tokens", "2048").stdout)
    assert big["steady_state"]["prefill_chunks"] == 1 and small["steady_state"]["prefill_chunks"] == 4
    assert small["latency"]["tpot_p99_seconds"] < big["latency"]["tpot_p99_seconds"]
    assert small["latency"]["ttft_seconds"] > big["latency"]["ttft_seconds"]


def test_fp4_weights_on_hopper_are_costed_weight_only_and_say_so(run_cli):
    result = run_cli("infer", "estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "1",
                     "--input-len", "1000", "--output-len", "100", "--weight-dtype", "fp4")
    assert result.exit_code == 0, result.output
    assert "fp4 weights are costed weight-only" in result.output
    blackwell = run_cli("infer", "estimate", "--model", "llama-3.1-8b", "--hardware", "b200", "--tp", "1",
                        "--input-len", "1000", "--output-len", "100", "--weight-dtype", "fp4")
    assert blackwell.exit_code == 0 and "weight-only" not in blackwell.output
