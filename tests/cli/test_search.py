"""`planner search`: table, JSON and CSV shapes, filters, Pareto, plot, and one-line errors with exit 2."""

from __future__ import annotations

import csv
import io
import json

import pytest

from planner.engines.load import load_hardware, load_model
from planner.specs.layout import Layout
from planner.training.estimate import estimate

BASE = ("search", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "16", "--global-batch", "64",
        "--seq-len", "4096")
ESTIMATE_KEYS = {"config", "memory", "stages", "fits", "time", "throughput"}
CONFIG_KEYS = {"tp", "pp", "cp", "dp", "zero", "sequence_parallel", "recompute", "micro_batch", "interleave"}


def as_json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_table_has_top_layouts_summary_and_reasons(run_cli):
    result = run_cli(*BASE)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "top 10 by throughput" in out
    assert "memory per GPU" in out and "GiB" in out
    assert "Evaluated" in out and "fit in" in out and "layouts/s" in out
    assert "Rejected:" in out and "out_of_memory" in out


def test_json_shape_and_candidates_equal_estimate(run_cli):
    doc = as_json(run_cli(*BASE, "--format", "json", "--top", "3"))
    assert {"evaluated", "feasible", "rejected", "candidates"} <= set(doc)
    assert doc["evaluated"] == doc["feasible"] + sum(doc["rejected"].values())
    assert len(doc["candidates"]) == 3
    steps = [c["time"]["step_seconds"] for c in doc["candidates"]]
    assert steps == sorted(steps)
    model, hw = load_model("llama-3.1-8b").spec, load_hardware("h100-sxm").spec
    for n, cand in enumerate(doc["candidates"]):
        assert ESTIMATE_KEYS <= set(cand) and CONFIG_KEYS <= set(cand["config"])
        assert cand["fits"] is True and cand["rank"] >= n + 1
        cfg = cand["config"]
        assert cfg["tp"] * cfg["pp"] * cfg["cp"] * cfg["dp"] == 16
        assert 64 % (cfg["dp"] * cfg["micro_batch"]) == 0
        fields = {k: v for k, v in cfg.items() if k not in ("gpus", "num_micro_batches")}
        again = json.loads(json.dumps(estimate(model, hw, Layout(**fields)).to_json()))
        assert again == {k: v for k, v in cand.items() if k not in ("rank", "cost")}


def test_filters_restrict_the_candidates(run_cli):
    doc = as_json(run_cli(*BASE, "--format", "json", "--tp", "2,4", "--zero", "1", "--recompute", "full",
                          "--micro-batch", "1", "--sequence-parallel", "on", "--top", "50"))
    assert doc["candidates"]
    for cand in doc["candidates"]:
        cfg = cand["config"]
        assert cfg["tp"] in (2, 4) and cfg["zero"] == 1 and cfg["recompute"] == "full"
        assert cfg["micro_batch"] == 1 and cfg["sequence_parallel"] is True


def test_memory_objective_orders_by_peak(run_cli):
    doc = as_json(run_cli(*BASE, "--format", "json", "--objective", "memory", "--top", "5"))
    peaks = [c["memory"]["total_bytes"] for c in doc["candidates"]]
    assert peaks == sorted(peaks)


def test_cost_objective_reports_hours_and_dollars(run_cli):
    doc = as_json(run_cli(*BASE, "--format", "json", "--objective", "cost", "--tokens", "1T",
                          "--price-per-gpu-hour", "2.5", "--top", "2"))
    cost = doc["candidates"][0]["cost"]
    tps = doc["candidates"][0]["throughput"]["tokens_per_second"]
    assert cost["hours"] == pytest.approx(1e12 / tps / 3600)
    assert cost["dollars"] == pytest.approx(cost["hours"] * 16 * 2.5)
    table = run_cli(*BASE, "--objective", "cost", "--tokens", "1T", "--price-per-gpu-hour", "2.5", "--top", "2")
    assert "hours" in table.stdout and "$" in table.stdout


def test_csv_has_every_feasible_layout(run_cli):
    result = run_cli(*BASE, "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    doc = as_json(run_cli(*BASE, "--format", "json", "--top", "1"))
    assert len(rows) == doc["feasible"]
    first = rows[0]
    assert {"rank", "tp", "pp", "cp", "dp", "zero", "recompute", "micro_batch", "interleave", "peak_bytes",
            "step_seconds", "ep_comm_seconds", "host_seconds", "tokens_per_second", "mfu"} <= set(first)
    assert float(first["step_seconds"]) == pytest.approx(doc["candidates"][0]["time"]["step_seconds"])
    assert all(int(r["tp"]) * int(r["pp"]) * int(r["cp"]) * int(r["dp"]) == 16 for r in rows)
    assert [int(r["rank"]) for r in rows] == sorted(int(r["rank"]) for r in rows)


def test_pareto_json_is_non_dominated(run_cli):
    doc = as_json(run_cli(*BASE, "--format", "json", "--pareto"))
    points = [(c["time"]["step_seconds"], c["memory"]["total_bytes"]) for c in doc["candidates"]]
    assert points and doc["pareto"] is True
    for s, m in points:
        assert not any((s2 <= s and m2 <= m) and (s2 < s or m2 < m) for s2, m2 in points)
    rows = list(csv.DictReader(io.StringIO(run_cli(*BASE, "--format", "csv", "--pareto").stdout)))
    assert len(rows) == len(points)


def test_nothing_fits_explains_what_to_change(run_cli):
    args = ("search", "--model", "llama-3.1-405b", "--hardware", "h100-sxm", "--gpus", "64", "--global-batch", "256",
            "--seq-len", "8192")
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    assert "Nothing fits" in result.stdout and "->" in result.stdout and "GPUs:" in result.stdout
    doc = as_json(run_cli(*args, "--format", "json"))
    assert doc["feasible"] == 0 and doc["candidates"] == []
    assert doc["closest"] and "suggestions" in doc["closest"][0] and "diagnosis" in doc["closest"][0]
    assert doc["fewest_gpus"]["gpus"] > 64 and doc["fewest_gpus"]["best"]["fits"] is True
    # CSV holds feasible layouts only: a header alone, and a note on stderr instead of silence
    empty = run_cli(*args, "--format", "csv")
    assert empty.exit_code == 0 and empty.stdout.count("\n") == 1
    assert "no layout fits" in empty.stderr


def test_table_lines_fit_160_columns_when_piped(run_cli, monkeypatch):
    # Regression: the summary line ran to 186 characters for a large search (one line: counts, memory,
    # timings); it is two lines now, and no line of the table is wider than 160 columns.
    monkeypatch.delenv("COLUMNS", raising=False)
    for args in (
        ("search", "-m", "deepseek-v3", "-w", "mi325x", "--gpus", "16384", "--global-batch", "16384", "--seq-len",
         "4096", "--tokens", "1000T", "--price-per-gpu-hour", "2.5", "--top", "5"),
        ("search", "-m", "llama-3.1-405b", "-w", "h100-sxm", "--gpus", "64", "--global-batch", "256", "--seq-len",
         "8192"),
    ):
        result = run_cli(*args)
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert max(len(line) for line in lines) <= 160
        assert any(line.startswith("Evaluated ") for line in lines)
        assert any(line.startswith("Search took ") and "layouts/s" in line for line in lines)


def test_plot_writes_a_file(run_cli, tmp_path):
    pytest.importorskip("matplotlib")
    for suffix in ("png", "svg"):
        path = tmp_path / f"front.{suffix}"
        result = run_cli(*BASE, "--plot", str(path), "--top", "1")
        assert result.exit_code == 0, result.output
        assert path.stat().st_size > 1000


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--tp", "3"), "divides gpus(16)"),
        (("--tp", "4,,8"), "empty item"),
        (("--recompute", "some"), "some"),
        (("--sequence-parallel", "maybe"), "not on or off"),
        (("--objective", "cost"), "--tokens"),
        (("--objective", "cost", "--tokens", "1T"), "--price-per-gpu-hour"),
        (("--tokens", "lots"), "token count"),
        (("--plot", "out.jpg"), ".png or .svg"),
        (("--headroom", "1"), "headroom"),
        (("--model", "no-such-model"), "unknown model"),
        (("--dtype", "fp8", "--hardware", "a100-80gb"), "fp8"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(run_cli, extra, message):
    result = run_cli(*BASE, *extra)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.stderr


def test_help_ends_with_an_example(run_cli):
    result = run_cli("search", "--help")
    assert result.exit_code == 0
    assert "Example:" in result.stdout and "planner search --model" in result.stdout


@pytest.mark.parametrize(
    "options",
    [
        (),
        ("--optimizer", "sgd"),
        ("--no-overlap-grad-reduce", "--zero", "0,1"),
        ("--tp-comm-overlap", "--tp", "2,4"),
        ("--grad-dtype", "fp32", "--no-flash-attention", "--dtype", "fp8"),
        ("--grad-dtype", "fp16", "--dtype", "fp16"),
    ],
)
def test_top_candidate_equals_planner_estimate(run_cli, options):
    """The same layout and layout-independent options through `planner estimate --format json` give the same
    step time and memory."""
    doc = as_json(run_cli(*BASE, *options, "--format", "json", "--top", "1"))
    cfg = doc["candidates"][0]["config"]
    args = ["estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "16", "--global-batch", "64",
            "--seq-len", "4096", "--format", "json"]
    for key in ("tp", "pp", "cp", "dp", "ep", "zero", "micro_batch", "interleave"):
        args += [f"--{key.replace('_', '-')}", str(cfg[key])]
    args += ["--recompute", cfg["recompute"],
             "--sequence-parallel" if cfg["sequence_parallel"] else "--no-sequence-parallel",
             "--tp-comm-overlap" if cfg["overlap_tp_comm"] else "--no-tp-comm-overlap"]
    layout_filters = {"--tp", "--zero", "--tp-comm-overlap"}
    args += [o for n, o in enumerate(options) if o not in layout_filters and options[n - 1] not in layout_filters]
    est = as_json(run_cli(*args))
    cand = doc["candidates"][0]
    assert est["config"] == cand["config"]
    assert est["time"]["step_seconds"] == pytest.approx(cand["time"]["step_seconds"], rel=1e-3)
    assert est["memory"]["total_bytes"] == pytest.approx(cand["memory"]["total_bytes"], rel=1e-3)
    assert est["fits"] is True


@pytest.mark.parametrize(("text", "tokens"), [("15T", 15e12), ("15e12", 15e12), ("15E12", 15e12),
                                              ("1.5e+13", 1.5e13), ("300B", 3e11), ("2.5m", 2.5e6)])
def test_tokens_accepts_the_usual_spellings(text, tokens):
    # Regression: '15E12' and '1.5e+13' (as Python and numpy print large floats) were 'not a token count'.
    from planner.cli.search import TokenCount

    assert TokenCount().convert(text, None, None) == pytest.approx(tokens)


def test_tokens_zero_says_above_zero(run_cli):
    from click.testing import CliRunner

    from planner.cli import cli

    result = CliRunner().invoke(cli, [*BASE, "--tokens", "0"])
    assert result.exit_code == 2 and "must be above zero" in result.stderr


MIXTRAL = ("search", "--model", "mixtral-8x7b", "--hardware", "h100-sxm", "--gpus", "32", "--global-batch", "64",
           "--seq-len", "4096")


def test_moe_search_states_the_dispatcher_and_overlap_it_assumed(run_cli):
    # the engine's two-tier dispatcher (search_dispatcher: DeepEP on 8-GPU H100 nodes) and its default of no
    # overlap; an engine without one keeps its default (deepspeed: alltoall)
    out = run_cli(*MIXTRAL, "--top", "3")
    assert out.exit_code == 0, out.output
    assert "deepep token dispatcher, expert all-to-all not overlapped" in out.stdout.split("\n")[0]
    assert "MoE: every layout assumes the deepep token dispatcher" in out.stdout
    titan = as_json(run_cli(*MIXTRAL, "--engine", "torchtitan", "--format", "json", "--top", "1"))
    assert titan["moe"]["dispatcher"] == "deepep" and titan["problem"]["moe_dispatcher"] == "deepep"
    assert "etp" in out.stdout
    doc = as_json(run_cli(*MIXTRAL, "--format", "json", "--top", "2", "--moe-dispatcher", "deepep", "--moe-ep-overlap",
                          "--optimizer-state-dtype", "bf16"))
    assert doc["moe"]["dispatcher"] == "deepep" and doc["moe"]["ep_overlap"] is True
    assert "overlapped with compute" in doc["moe"]["assumed"]
    assert doc["problem"]["moe_dispatcher"] == "deepep" and doc["problem"]["optimizer_state_dtype"] == "bf16"
    for cand in doc["candidates"]:  # every candidate is costed with them
        cfg = cand["config"]
        assert cfg["moe_dispatcher"] == "deepep" and cfg["moe_ep_overlap"] is True
        assert cfg["optimizer_state_dtype"] == "bf16"
    dense = as_json(run_cli(*BASE, "--format", "json", "--top", "1"))
    assert "moe" not in dense
    assert "dispatcher" not in run_cli(*BASE, "--top", "1").stdout


def test_moe_search_with_delayed_expert_weight_gradients(run_cli):
    # without the overlap, every candidate runs the experts' weight gradients beside the dispatch's backward
    # (Megatron-Core's overlap_dispatch_backward_with_experts_wgrad): never slower than the same search without them
    args = (*MIXTRAL, "--format", "json", "--top", "1", "--tp", "1", "--pp", "1", "--ep", "8")
    plain, delayed = as_json(run_cli(*args)), as_json(run_cli(*args, "--moe-delay-wgrad"))
    assert delayed["problem"]["moe_delay_wgrad"] is True and plain["problem"]["moe_delay_wgrad"] is None
    assert "the dispatch's backward beside the experts' weight gradients" in delayed["moe"]["assumed"]
    assert delayed["candidates"][0]["config"]["moe_delay_wgrad"] is True
    assert delayed["candidates"][0]["time"]["step_seconds"] <= plain["candidates"][0]["time"]["step_seconds"]
    # a skewed routing: every candidate's busiest rank at 1.3x the balanced load, said and costed
    skewed = as_json(run_cli(*args, "--moe-load-imbalance", "1.3"))
    assert skewed["problem"]["moe_load_imbalance"] == 1.3
    assert "the busiest rank at 1.3x the balanced load" in skewed["moe"]["assumed"]
    assert skewed["candidates"][0]["config"]["moe_load_imbalance"] == 1.3
    assert skewed["candidates"][0]["time"]["step_seconds"] > plain["candidates"][0]["time"]["step_seconds"]
    # an engine that has no such stream: one line, exit 2
    titan = run_cli(*MIXTRAL, "--engine", "torchtitan", "--moe-delay-wgrad")
    assert titan.exit_code == 2 and "moe.dispatch_wgrad_overlap" in titan.stderr
    assert len(titan.stderr.strip().splitlines()) == 1


def test_bf16_moments_cut_the_optimizer_state_a_third(run_cli):
    # Adam with fp32 master and moments: 12 bytes per parameter; bf16 moments: 4 + 2 x 2 = 8
    args = (*BASE, "--format", "json", "--top", "1", "--tp", "1", "--pp", "1", "--zero", "1", "--micro-batch", "1",
            "--recompute", "full")
    fp32 = as_json(run_cli(*args))["candidates"][0]["memory"]["optimizer_bytes"]
    bf16 = as_json(run_cli(*args, "--optimizer-state-dtype", "bf16"))["candidates"][0]["memory"]["optimizer_bytes"]
    assert bf16 == pytest.approx(fp32 * 8 / 12)
    bad = run_cli(*BASE, "--optimizer", "sgd", "--optimizer-state-dtype", "bf16")
    assert bad.exit_code == 2 and bad.stderr.startswith("error: optimizer_state_dtype bf16 applies to adam")


def test_etp_filter_and_csv_column(run_cli):
    rows = list(csv.DictReader(io.StringIO(run_cli(*MIXTRAL, "--format", "csv", "--etp", "1", "--tp", "2,4").stdout)))
    assert rows and {r["etp"] for r in rows} == {"1"} and {r["tp"] for r in rows} <= {"2", "4"}
    assert any(int(r["ep"]) * int(r["etp"]) > int(r["dp"]) for r in rows)  # folded EP spans TP ranks too


def test_dispatcher_choices_match_the_layout_codes():
    from planner.cli.search import MOE_DISPATCHERS
    from planner.specs.layout import DISPATCHER_CODES

    assert MOE_DISPATCHERS == tuple(DISPATCHER_CODES)


def test_moe_fused_mlp_search_costs_every_candidate_with_it_and_says_so(run_cli):
    qwen = ("search", "--model", "qwen3-30b-a3b", "--hardware", "gb300-nvl72", "--gpus", "8", "--global-batch", "512",
            "--seq-len", "4096", "--dtype", "fp8", "--fp8-recipe", "mxfp8", "--top", "2")
    out = run_cli(*qwen, "--moe-fused-mlp")
    assert out.exit_code == 0, out.output
    assert "experts in the fused grouped MLP" in " ".join(out.stdout.split())
    doc = as_json(run_cli(*qwen, "--moe-fused-mlp", "--format", "json"))
    assert doc["problem"]["moe_fused_mlp"] is True
    assert all(cand["config"]["moe_fused_mlp"] for cand in doc["candidates"])
    plain = as_json(run_cli(*qwen, "--format", "json"))
    assert doc["candidates"][0]["time"]["step_seconds"] < plain["candidates"][0]["time"]["step_seconds"]
    dense = run_cli("search", "--model", "llama-3.1-8b", "--hardware", "b200", "--gpus", "8", "--global-batch", "64",
                    "--seq-len", "4096", "--dtype", "fp8", "--fp8-recipe", "mxfp8", "--moe-fused-mlp")
    assert dense.exit_code == 2 and dense.stderr.startswith("error:") and "no experts" in dense.stderr
    torch = run_cli(*qwen, "--moe-fused-mlp", "--engine", "torchtitan")
    assert torch.exit_code == 2 and "cannot run moe_fused_mlp" in torch.stderr


def test_a_lora_search_holds_lora_in_every_candidate_and_fits_more(run_cli):
    one_gpu = ("search", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "1", "--global-batch", "32",
               "--seq-len", "4096", "--engine", "automodel")
    full = as_json(run_cli(*one_gpu, "--format", "json", "--top", "3"))
    lora = as_json(run_cli(*one_gpu, "--lora-rank", "16", "--format", "json", "--top", "3"))
    assert lora["candidates"] and all(c["config"]["lora_rank"] == 16 for c in lora["candidates"])
    # 8B with Adam on one 80 GB GPU: full fine-tuning's 16 bytes of state per parameter leave fewer layouts that fit
    assert lora["feasible"] > full["feasible"]
    result = run_cli(*one_gpu, "--lora-rank", "16", "--engine", "torchtitan")
    assert result.exit_code == 2 and result.stderr.startswith("error:") and "no LoRA" in result.stderr
    assert result.stderr.count("\n") == 1
