"""--engine on estimate, search, check and export; importers set the engine from the file they read."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "tests" / "fixtures" / "jobs"
BASE = ("--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "16", "--global-batch", "64", "--seq-len", "4096")


def one_line_error(result, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error:") and result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def test_estimate_reports_the_engine_and_eager_kernels_cost_time(run_cli) -> None:  # type: ignore[no-untyped-def]
    args = ("estimate", *BASE, "--zero", "3", "--format", "json")
    megatron = json.loads(run_cli(*args).stdout)
    titan = json.loads(run_cli(*args, "--engine", "torchtitan").stdout)
    compiled = json.loads(run_cli(*args, "--engine", "torchtitan", "--compile").stdout)
    assert titan["config"]["engine"] == "torchtitan"
    assert titan["time"]["step_seconds"] > compiled["time"]["step_seconds"]
    assert megatron["config"]["engine"] == "megatron"


def test_estimate_refuses_what_the_engine_cannot_run(run_cli) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli("estimate", *BASE, "--pp", "2", "--zero", "2", "--engine", "deepspeed"),
                   "engine deepspeed cannot run pp(2) with zero(2)")
    one_line_error(run_cli("estimate", *BASE, "--pp", "2", "--interleave", "2", "--global-batch", "64",
                           "--engine", "deepspeed"), "interleave(2)")
    one_line_error(run_cli("estimate", *BASE, "--tp", "2", "--engine", "fsdp"), "engine fsdp cannot run tp(2)")
    one_line_error(run_cli("estimate", *BASE, "--compile"), "engine megatron cannot run compile")


def test_search_offers_only_what_the_engine_runs(run_cli) -> None:  # type: ignore[no-untyped-def]
    out = json.loads(run_cli("search", *BASE, "--engine", "fsdp", "--format", "json", "--top", "50").stdout)
    rows = out["candidates"]
    assert rows
    for row in rows:
        config = row["config"]
        assert config["tp"] == 1 and config["pp"] == 1 and config["engine"] == "fsdp"


def test_export_to_deepspeed_refuses_pipeline_with_zero3(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("export", "--to", "deepspeed", *BASE, "--pp", "2", "--zero", "3")
    one_line_error(result, "zero(3)", "pp(2)")  # the exporter's own refusal or the engine rule's, either names both


def test_check_of_a_deepspeed_job_runs_under_the_deepspeed_engine(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("check", JOBS / "deepspeed_job.yaml", "--format", "json")
    assert result.exit_code in (0, 1), result.output
    (job,) = json.loads(result.stdout)
    assert job["config"]["engine"] == "deepspeed"


ACCELERATE = REPO / "tests" / "fixtures" / "engines" / "upstream" / "accelerate" / "deepspeed_config_templates"


def test_accelerate_offload_templates_are_read_and_estimated(run_cli) -> None:  # type: ignore[no-untyped-def]
    for name in ("zero_stage2_offload_config.json", "zero_stage3_offload_config.json"):
        result = run_cli("check", "--deepspeed", ACCELERATE / name, "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                         "--gpus", "8", "--global-batch", "8", "--micro-batch", "1", "--seq-len", "4096")
        assert result.exit_code in (0, 1), result.output
        assert "host" in result.stdout and "GiB per node" in result.stdout and "CPU optimizer step" in result.stdout
        data = json.loads(run_cli("check", "--deepspeed", ACCELERATE / name, "--model", "llama-3.1-8b", "--hardware",
                                  "h100-sxm", "--gpus", "8", "--global-batch", "8", "--micro-batch", "1", "--seq-len",
                                  "4096", "--format", "json").stdout)[0]
        assert data["config"]["engine"] == "deepspeed" and data["config"]["offload_optimizer"] is True
        assert data["memory"]["host_bytes_per_node"] > 0 and data["time"]["cpu_optimizer_seconds"] > 0


def test_exported_deepspeed_config_keeps_the_offload(run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "ds.json"
    assert run_cli("export", "--to", "deepspeed", *BASE, "--zero", "3", "--offload-optimizer", "--offload-params",
                   "--engine", "deepspeed", "--out", out).exit_code == 0
    zero = json.loads(out.read_text())["zero_optimization"]
    assert zero["offload_optimizer"]["device"] == "cpu" and zero["offload_param"]["device"] == "cpu"
