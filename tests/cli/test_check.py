"""`planner check`, `planner export`, `planner schema`: every exit code, every format, one-line errors."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from planner.engines.load import load_hardware, load_model

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "tests" / "fixtures" / "jobs"
ENGINES = REPO / "tests" / "fixtures" / "engines"
ESTIMATE_KEYS = {"config", "memory", "stages", "fits", "time", "throughput"}


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# exit codes ---------------------------------------------------------------------------------------
def test_fitting_job_exits_0(run_cli):
    result = run_cli("check", JOBS / "llama8b_fits.yaml")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("PASS")
    assert "1 of 1 job fit." in result.stdout


def test_job_that_does_not_fit_exits_1_and_says_why_and_how_to_fix(run_cli):
    result = run_cli("check", JOBS / "llama70b_oom.yaml")
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert out.startswith("FAIL")
    assert "stage 0 needs" in out and "over the" in out and "largest term: activations" in out
    assert "changes that fit (each re-estimated)" in out
    assert " saves " in out and "GiB" in out


def test_no_suggest_does_not_claim_that_no_change_fits(run_cli):
    result = run_cli("check", JOBS / "llama70b_oom.yaml", "--no-suggest")
    assert result.exit_code == 1
    assert "FAIL" in result.stdout and "no single or paired change fits" not in result.stdout
    assert "changes that fit" not in result.stdout


def test_any_failing_job_makes_the_run_exit_1(run_cli):
    result = run_cli("check", JOBS / "llama8b_fits.yaml", JOBS / "llama70b_oom.yaml")
    assert result.exit_code == 1
    assert "1 of 2 jobs fit." in result.stdout


@pytest.mark.parametrize(
    ("name", "fragments"),
    [
        ("unknown_key.yaml", ["unknown_key.yaml", "parallel.tensor_parallel", "unknown key"]),
        ("gpus_mismatch.yaml", ["gpus_mismatch.yaml", "tp(8) * pp(4) * cp(1) * dp(3) = 96 != gpus(64)"]),
        ("unknown_model.yaml", ["unknown_model.yaml", "model", "llama-9-8b"]),
        ("missing_seq_len.yaml", ["missing_seq_len.yaml", "training.seq_len is required"]),
        ("malformed.yaml", ["malformed.yaml", "malformed YAML at line 3"]),
    ],
)
def test_bad_job_exits_2_with_one_line(run_cli, name, fragments):
    assert_one_line_error(run_cli("check", JOBS / "bad" / name), *fragments)


def test_inline_model_error_names_the_spec_field(run_cli, tmp_path):
    job = tmp_path / "inline.yaml"
    job.write_text("model: {name: tiny, num_layers: 2, hidden_size: 64}\nhardware: h100-sxm\ngpus: 8\n"
                   "training: {global_batch: 8, seq_len: 128}\n")
    assert_one_line_error(run_cli("check", job), "inline.yaml", "model: inline model spec: num_attention_heads",
                          "missing")


def test_bad_job_among_good_ones_writes_nothing(run_cli):
    result = run_cli("check", JOBS / "llama8b_fits.yaml", JOBS / "bad" / "gpus_mismatch.yaml")
    assert_one_line_error(result, "gpus_mismatch.yaml")


def test_missing_file_and_usage_errors_exit_2(run_cli):
    assert_one_line_error(run_cli("check", JOBS / "nope.yaml"), "nope.yaml", "file not found")
    assert_one_line_error(run_cli("check"), "give job files")
    assert_one_line_error(run_cli("check", JOBS / "llama8b_fits.yaml", "--tp", "2"), "--tp", "job file")
    assert_one_line_error(run_cli("check", "--deepspeed", ENGINES / "deepspeed" / "zero3_bf16.json", "--model",
                                  "llama-3.1-8b", "--gpus", "8"), "--hardware")


# formats ------------------------------------------------------------------------------------------
def test_json_format_has_estimate_keys_and_suggestions(run_cli):
    result = run_cli("check", JOBS / "llama8b_fits.yaml", JOBS / "llama70b_oom.yaml", "--format", "json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert [d["job"] for d in data] == [str(JOBS / "llama8b_fits.yaml"), str(JOBS / "llama70b_oom.yaml")]
    for item in data:
        assert ESTIMATE_KEYS <= set(item)
    assert data[0]["fits"] is True and "suggestions" not in data[0]
    failing = data[1]
    assert failing["fits"] is False
    assert failing["diagnosis"]["over_bytes"] > 0 and failing["diagnosis"]["stage"] == 0
    assert failing["suggestions"], "at least one verified change"
    for s in failing["suggestions"]:
        assert s["verified"] is True and s["peak_bytes"] <= failing["memory"]["usable_bytes"]
        assert s["saves_bytes"] > 0 and s["change"]


def test_github_format_annotations(run_cli):
    result = run_cli("check", JOBS / "llama8b_fits.yaml", JOBS / "llama70b_oom.yaml", "--format", "github")
    assert result.exit_code == 1
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith(f"::notice file={JOBS / 'llama8b_fits.yaml'},title=planner check::")
    assert lines[1].startswith(f"::error file={JOBS / 'llama70b_oom.yaml'},title=planner check%3A out of memory::")
    assert "%0A- " in lines[1]  # suggestions on their own lines inside one annotation
    assert len(lines) == 2


def test_warnings_go_to_stderr_and_into_github_annotations(run_cli):
    # (HSDP and bf16-only training, this test's former examples, are modelled now; never resharding still warns)
    args = ("check", "--torchtitan", ENGINES / "torchtitan" / "hsdp.toml", "--hardware", "h100-sxm", "--gpus", "16",
            "--engine-args", "--parallelism.fsdp_reshard_after_forward never")
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("warning: ") and "fsdp_reshard_after_forward 'never'" in result.stderr
    github = run_cli(*args, "--format", "github")
    assert github.stdout.startswith("::warning file=")


# job files with engine configs, and direct engine checks ------------------------------------------
@pytest.mark.parametrize("name", ["deepspeed_job.yaml", "megatron_job.yaml", "torchtitan_job.yaml",
                                  "inline_model.yaml"])
def test_job_files_with_engine_configs(run_cli, name):
    result = run_cli("check", JOBS / name, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["fits"] is True


def test_torchtitan_job_applies_its_args_over_the_toml(run_cli):
    data = json.loads(run_cli("check", JOBS / "torchtitan_job.yaml", "--format", "json").stdout)[0]
    assert (data["config"]["tp"], data["config"]["micro_batch"], data["config"]["zero"]) == (4, 4, 3)


def test_direct_deepspeed_check_equals_estimate_flags(run_cli):
    ds = run_cli("check", "--deepspeed", ENGINES / "deepspeed" / "zero3_bf16.json", "--model", "llama-3.1-8b",
                 "--hardware", "h100-sxm", "--gpus", "64", "--seq-len", "4096", "--format", "json")
    assert ds.exit_code == 0, ds.output
    data = json.loads(ds.stdout)[0]
    assert data["job"] == str(ENGINES / "deepspeed" / "zero3_bf16.json")
    assert (data["config"]["zero"], data["config"]["micro_batch"], data["config"]["global_batch"]) == (3, 2, 512)


def test_direct_megatron_and_torchtitan_checks(run_cli):
    mg = run_cli("check", "--megatron-args", ENGINES / "megatron" / "gpt3_175b_args.txt", "--hardware", "a100-80gb",
                 "--gpus", "1024", "--format", "json")
    assert mg.exit_code == 0, mg.output
    assert json.loads(mg.stdout)[0]["config"]["interleave"] == 3
    tt = run_cli("check", "--torchtitan", ENGINES / "torchtitan" / "llama3_8b.toml", "--hardware", "h100-sxm",
                 "--gpus", "64", "--engine-args", "--parallelism.tensor_parallel_degree 2")
    assert tt.exit_code == 0, tt.output


def test_megatron_launch_script_in_the_examples_style(run_cli):
    """Variables for the script path, `ARR+=(...)`, if-blocks, `--rampup-batch-size 16 16 N`, `--sequence-parallel`
    at TP 1: read as Megatron-LM reads them, not rejected."""
    result = run_cli("check", "--megatron-args", ENGINES / "megatron" / "llama3_8b_fp8_1node.sh", "--hardware",
                     "h200", "--gpus", "8", "--format", "json")
    assert result.exit_code == 0, result.output
    config = json.loads(result.stdout)[0]["config"]
    assert (config["tp"], config["sequence_parallel"], config["dtype"], config["global_batch"]) == (1, False, "fp8",
                                                                                                     128)


def test_suggestions_for_an_engine_config_are_ones_the_engine_can_run(run_cli):
    """torchtitan replicates (DDP, ZeRO 0) or shards with FSDP (ZeRO 3), and pairs TP with sequence parallelism:
    a 'zero 0 -> 1' or a TP change without SP could not be written back into its config."""
    result = run_cli("check", "--torchtitan", ENGINES / "torchtitan" / "llama3_8b.toml", "--hardware", "h200",
                     "--gpus", "8", "--engine-args", "--activation_checkpoint.mode full "
                     "--parallelism.data_parallel_shard_degree 1 --parallelism.data_parallel_replicate_degree 8",
                     "--format", "json")
    assert result.exit_code == 1, result.output
    suggestions = json.loads(result.stdout)[0]["suggestions"]
    changes = [s["changes"] for s in suggestions]
    assert changes and {"zero": {"from": 0, "to": 3}} in changes
    for change in changes:
        assert change.get("zero", {}).get("to", 3) in (0, 3)
        if "tp" in change:
            assert change["sequence_parallel"] == {"from": False, "to": True}


def test_engine_errors_are_one_line(run_cli):
    assert_one_line_error(run_cli("check", "--deepspeed", ENGINES / "deepspeed" / "offload_cpu.json", "--model",
                                  "llama-3.1-8b", "--hardware", "l40s", "--gpus", "8", "--seq-len", "4096"),
                          "has no 'host' section")
    assert_one_line_error(run_cli("check", "--megatron-args", ENGINES / "megatron" / "unresolved_var.sh",
                                  "--hardware", "h100-sxm", "--gpus", "8"), "unresolved_var.sh", "$TP")
    assert_one_line_error(run_cli("check", "--deepspeed", ENGINES / "deepspeed" / "zero3_bf16.json",
                                  "--hardware", "h100-sxm", "--gpus", "64", "--seq-len", "4096"), "model is required")
    assert_one_line_error(run_cli("check", "--deepspeed", ENGINES / "deepspeed" / "zero3_bf16.json", "--model",
                                  "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "64", "--seq-len", "4096",
                                  "--zero", "1"), "contradicts zero_optimization.stage = 3")


# export -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("fmt", "flag"), [("megatron", "--megatron-args"), ("deepspeed", "--deepspeed"),
                                           ("torchtitan", "--torchtitan")])
def test_export_then_check_gives_the_same_layout_and_estimate(run_cli, tmp_path, fmt, flag):
    job = JOBS / "llama8b_fits.yaml"
    out = tmp_path / f"exported.{fmt}"
    exported = run_cli("export", job, "--to", fmt, "--out", out)
    assert exported.exit_code == 0, exported.output
    assert out.exists() and "Predicted peak memory" in out.read_text()
    back = json.loads(run_cli("check", flag, out, "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "8",
                              "--format", "json").stdout)[0]
    if fmt == "torchtitan":  # torchtitan fixes ZeRO 3 and fp32 gradients; the file's header says so
        assert "Note: zero 1 -> 3" in out.read_text()
        return
    if fmt == "deepspeed":  # AutoTP runs no sequence parallelism: the file holds the layout without it
        assert "Note: sequence_parallel -> false" in " ".join(json.loads(out.read_text())["_planner"]["prediction"])
        assert back["config"]["sequence_parallel"] is False
        job_without_sp = tmp_path / "job.yaml"
        job_without_sp.write_text(job.read_text().replace("sequence_parallel: true", "sequence_parallel: false"))
        job = job_without_sp
    original = json.loads(run_cli("check", job, "--format", "json").stdout)[0]
    assert back["config"]["engine"] == fmt  # the file is run by its engine, whose profile applies
    assert {**back["config"], "engine": None} == {**original["config"], "engine": None}
    if original["config"]["engine"] == fmt:
        assert back["memory"] == original["memory"]
    else:  # the same layout under the file's engine: as estimated with that engine
        from planner.specs.layout import Layout
        from planner.training.estimate import estimate

        layout = Layout(**{k: v for k, v in back["config"].items() if k not in ("gpus", "num_micro_batches")})
        again = estimate(load_model("llama-3.1-8b").spec, load_hardware("h100-sxm").spec, layout).to_json()
        assert back["memory"] == again["memory"]


def test_exported_check_command_runs_as_written_for_a_model_from_megatron_arguments(run_cli, tmp_path):
    """The header's 'planner check' line said --model train_llama3_8b (the script's name), which is no catalog
    id: copied into CI it exited 2. Megatron-LM arguments describe the model, so the line leaves --model out."""
    out = tmp_path / "args.sh"
    assert run_cli("export", JOBS / "megatron_job.yaml", "--to", "megatron", "--out", out).exit_code == 0
    line = next(x for x in out.read_text().splitlines() if "Check it in CI" in x)
    assert "--model" not in line
    command = line.split("planner check ", 1)[1].replace("<this file>", str(out)).split()
    assert run_cli("check", *command).exit_code == 0
    ds = run_cli("export", JOBS / "megatron_job.yaml", "--to", "deepspeed").stdout
    assert "--model <the model" in ds


def test_export_from_estimate_flags_to_stdout(run_cli):
    result = run_cli("export", "--to", "megatron", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "16",
                     "--tp", "2", "--pp", "2", "--zero", "1", "--global-batch", "64", "--seq-len", "4096")
    assert result.exit_code == 0, result.output
    assert "MEGATRON_ARGS=(" in result.stdout and "--pipeline-model-parallel-size 2" in result.stdout


def test_fp8_weight_gathering_is_said_in_a_job_file_and_on_the_export_command_line(run_cli, tmp_path):
    """A job file can ask for fp8 parameter gathering (training.fp8_param_gather), as estimate's flag does; under
    torchtitan it is torchao's float8 all-gather, which the TOML export writes and check reads back."""
    job = tmp_path / "job.yaml"
    job.write_text("model: llama-3.1-8b\nhardware: h100-sxm\ngpus: 64\nparallel: {zero: 3, recompute: op}\n"
                   "training: {global_batch: 128, seq_len: 8192, dtype: fp8, fp8_param_gather: true, engine: torchtitan}\n")
    checked = json.loads(run_cli("check", job, "--format", "json").stdout)[0]
    assert checked["config"]["fp8_param_gather"] is True and checked["config"]["engine"] == "torchtitan"
    out = tmp_path / "t.toml"
    exported = run_cli("export", "--to", "torchtitan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus",
                       "64", "--global-batch", "128", "--seq-len", "8192", "--zero", "3", "--recompute", "op", "--dtype",
                       "fp8", "--fp8-param-gather", "--engine", "torchtitan", "--out", out)
    assert exported.exit_code == 0, exported.output
    assert "enable_fsdp_float8_all_gather = true" in out.read_text()
    back = json.loads(run_cli("check", "--torchtitan", out, "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                              "--gpus", "64", "--format", "json").stdout)[0]
    assert back["config"] == checked["config"] and back["time"] == checked["time"]


def test_export_errors_are_one_line(run_cli):
    assert_one_line_error(run_cli("export", "--to", "megatron"), "give a job file")
    assert_one_line_error(run_cli("export", JOBS / "bad" / "gpus_mismatch.yaml", "--to", "deepspeed"), "96 != gpus(64)")


# schema, speed ------------------------------------------------------------------------------------
def test_schema_job_is_json_schema_with_descriptions(run_cli):
    result = run_cli("schema", "job")
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert {"model", "hardware", "gpus", "nodes", "parallel", "training", "engine", "headroom"} <= set(
        schema["properties"])
    assert schema["additionalProperties"] is False
    for name, prop in schema["$defs"]["ParallelSection"]["properties"].items():
        assert prop.get("description"), name


def test_ten_jobs_check_in_well_under_a_second(run_cli, tmp_path):
    for i in range(10):
        shutil.copy(JOBS / ("llama70b_oom.yaml" if i == 9 else "llama8b_fits.yaml"), tmp_path / f"job{i}.yaml")
    run_cli("check", JOBS / "llama8b_fits.yaml")  # warm the imports
    start = time.perf_counter()
    result = run_cli("check", *sorted(tmp_path.glob("*.yaml")))
    elapsed = time.perf_counter() - start
    assert result.exit_code == 1
    assert elapsed < 1.0, f"{elapsed:.2f} s"


# engine configs vs the equivalent `planner estimate` ------------------------------------------------
def _memory(result) -> dict:
    assert result.exit_code in (0, 1), result.output
    data = json.loads(result.stdout)
    return (data[0] if isinstance(data, list) else data)["memory"]


@pytest.mark.parametrize(
    ("check_args", "estimate_args"),
    [
        (["--deepspeed", ENGINES / "deepspeed" / "zero3_bf16.json", "--model", "llama-3.1-8b", "--seq-len", "4096"],
         ["--model", "llama-3.1-8b", "--zero", "3", "--micro-batch", "2", "--global-batch", "512", "--seq-len", "4096",
          "--recompute", "full", "--engine", "deepspeed"]),
        (["--megatron-args", ENGINES / "megatron" / "train_llama3_8b.sh", "--model", "llama-3.1-8b"],
         ["--model", "llama-3.1-8b", "--tp", "2", "--zero", "1", "--recompute", "selective", "--micro-batch", "1",
          "--global-batch", "128", "--seq-len", "8192", "--grad-dtype", "fp32"]),
        (["--torchtitan", ENGINES / "torchtitan" / "llama3_70b.toml"],
         ["--model", "llama-3.1-70b", "--tp", "8", "--zero", "3", "--recompute", "full", "--micro-batch", "8",
          "--global-batch", "64", "--seq-len", "8192", "--grad-dtype", "fp32", "--tp-comm-overlap",
          "--engine", "torchtitan", "--compile"]),  # [compile] enable, components model and loss
    ],
    ids=["deepspeed", "megatron", "torchtitan"],
)
def test_engine_config_memory_equals_planner_estimate(run_cli, check_args, estimate_args):
    common = ["--hardware", "h100-sxm", "--gpus", "64", "--format", "json"]
    checked = _memory(run_cli("check", *check_args, *common))
    estimated = _memory(run_cli("estimate", *estimate_args, *common))
    assert checked == estimated


def test_docs_schema_copy_is_current(run_cli):
    shipped = json.loads((REPO / "docs" / "planner-job.schema.json").read_text())
    assert shipped == json.loads(run_cli("schema", "job").stdout), "run: planner schema job > docs/planner-job.schema.json"


def test_dtype_the_hardware_lacks_names_the_engine_setting(run_cli, tmp_path):
    toml = tmp_path / "fp8.toml"
    toml.write_text((ENGINES / "torchtitan" / "llama3_8b.toml").read_text().replace(
        'flavor = "8B"', 'flavor = "8B"\nconverters = ["float8"]'))
    assert_one_line_error(run_cli("check", "--torchtitan", toml, "--hardware", "a100-80gb", "--gpus", "64"),
                          "fp8.toml", "has no fp8 peak", "model.converters")


# what check says when nothing on the job's GPUs fits ----------------------------------------------------------
def test_json_carries_the_parameter_count(run_cli):
    """Llama 3.1 70B: 70,553,706,496 parameters, as transformers counts meta-llama/Llama-3.1-70B."""
    got = json.loads(run_cli("check", JOBS / "llama70b_oom.yaml", "--format", "json").stdout)[0]
    assert got["params"] == got["active_params"] == 70_553_706_496


def test_70b_with_adam_on_8_gpus_is_told_the_fewest_gpus_that_fit(run_cli, tmp_path):
    """70B with Adam and bf16 gradients needs about 16 bytes a parameter of model state (1.1 TB): no layout of
    8 x 80 GB holds it, so check names the fewest H100s on which some layout fits, with that layout, re-estimated.
    (The job says bf16: Megatron's own default is fp32 main grads, 18 bytes a parameter.)"""
    from planner.engines.load import load_hardware, load_model
    from planner.search.engine import run_search
    from planner.search.space import Problem
    from planner.specs.layout import Layout
    from planner.training.estimate import estimate

    job = tmp_path / "j.yaml"
    job.write_text("model: llama-3.1-70b\nhardware: h100-sxm\ngpus: 8\nparallel: {tp: 8, zero: 1, recompute: full}\n"
                   "training: {global_batch: 64, seq_len: 4096, grad_dtype: bf16}\n")
    result = run_cli("check", job, "--format", "json")
    assert result.exit_code == 1
    fixes = json.loads(result.stdout)[0]["suggestions"]
    more = [f for f in fixes if "gpus" in f["changes"]]
    assert len(more) == 1 and more[0]["changes"]["gpus"] == {"from": 8, "to": 16}
    hw, model = load_hardware("h100-sxm").spec, load_model("llama-3.1-70b").spec
    # no layout at all fits on the job's 8 GPUs (the next count, one node more, is 16)
    assert run_search(model, hw, Problem(gpus=8, global_batch=64, seq_len=4096)).feasible == 0
    table = run_cli("check", job)
    assert "gpus 8 -> 16" in table.output and "try 'planner search'" not in table.output
    # the suggested layout fits when estimated again
    layout = Layout(**{**{k: v for k, v in json.loads(result.stdout)[0]["config"].items()
                          if k not in ("gpus", "num_micro_batches")},
                       **{k: v["to"] for k, v in more[0]["changes"].items() if k != "gpus"}})
    assert layout.gpus == 16 and estimate(model, hw, layout).fits


def test_a_precision_change_is_offered_when_no_layout_change_fits(run_cli, tmp_path):
    """One GPU leaves no degree or ZeRO stage to change; Llama 3.2 3B at 24,576 tokens with full recompute fits
    with bf16 gradients (16 bytes a parameter of model state) but not with fp32 ones (18)."""
    job = tmp_path / "j.yaml"
    job.write_text("model: llama-3.2-3b\nhardware: h100-sxm\ngpus: 1\nparallel: {recompute: full}\n"
                   "training: {global_batch: 1, seq_len: 24576, grad_dtype: fp32}\n")
    result = run_cli("check", job, "--format", "json")
    fixes = json.loads(result.stdout)[0]["suggestions"]
    assert fixes[0]["changes"] == {"grad_dtype": {"from": "fp32", "to": "bf16"}} and fixes[0]["verified"]


# MoE layout fields ------------------------------------------------------------------------------------------
MOE_JOB = """model: deepseek-v2-lite
hardware: h100-sxm
gpus: 16
parallel: {ep: 8, zero: 1, etp: 1, moe_dispatcher: hybridep, moe_ep_overlap: true, moe_capacity_factor: 1.25,
           cuda_graph_scope: [attn, moe_router], mtp_layers: 1}
training: {global_batch: 64, seq_len: 4096, optimizer_state_dtype: bf16}
"""


def test_job_file_passes_the_moe_fields_through(run_cli, tmp_path):
    job = tmp_path / "moe.yaml"
    job.write_text(MOE_JOB)
    result = run_cli("check", job, "--format", "json", "--no-suggest")
    assert result.exit_code in (0, 1), result.output
    config = json.loads(result.stdout)[0]["config"]
    assert {k: config[k] for k in ("etp", "moe_dispatcher", "moe_ep_overlap", "moe_capacity_factor",
                                   "cuda_graph_scope", "mtp_layers", "optimizer_state_dtype")} == {
        "etp": 1, "moe_dispatcher": "hybridep", "moe_ep_overlap": True, "moe_capacity_factor": 1.25,
        "cuda_graph_scope": ["attn", "moe_router"], "mtp_layers": 1, "optimizer_state_dtype": "bf16"}


def test_job_moe_field_of_the_wrong_type_is_one_line(run_cli, tmp_path):
    job = tmp_path / "bad.yaml"
    job.write_text(MOE_JOB.replace("moe_dispatcher: hybridep", "moe_dispatcher: flex"))
    assert_one_line_error(run_cli("check", job), "moe_dispatcher")


def test_direct_check_flags_give_what_the_megatron_file_lacks(run_cli, tmp_path):
    """The file names no dispatcher: --moe-dispatcher applies (Megatron's default, allgather, only where neither
    says); a flag that contradicts the file is an error naming both."""
    args = tmp_path / "moe.sh"
    args.write_text("--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
                    "--max-position-embeddings 512 --num-experts 8 --moe-router-topk 2 --micro-batch-size 1 "
                    "--global-batch-size 16 --bf16 --vocab-size 32000 --expert-model-parallel-size 4 "
                    "--use-distributed-optimizer --moe-expert-capacity-factor 1.5 --moe-pad-expert-input-to-capacity\n")
    base = ("check", "--megatron-args", args, "--hardware", "h100-sxm", "--gpus", "8", "--format", "json")
    config = json.loads(run_cli(*base).stdout)[0]["config"]
    assert (config["moe_dispatcher"], config["moe_capacity_factor"]) == ("allgather", 1.5)
    given = json.loads(run_cli(*base, "--moe-dispatcher", "alltoall", "--moe-ep-overlap").stdout)[0]["config"]
    assert (given["moe_dispatcher"], given["moe_ep_overlap"]) == ("alltoall", True)
    assert_one_line_error(run_cli(*base, "--moe-capacity-factor", "2"), "moe_capacity_factor",
                          "--moe-expert-capacity-factor")



def test_the_405b_interleaved_layout_exports_to_megatron_and_checks_back(run_cli, tmp_path):
    """Llama 3.1 405B, tp 8 pp 8 cp 2 v 8 (Megatron-Bridge's H100 recipe, and the search's first 405B layouts'
    kind): 126 layers fill the 64 virtual stages only with the embedding and the loss counted, so the export
    writes --account-for-embedding/loss-in-pipeline-split; it used to refuse the layout. The file's own check
    line reads it back to the same interleave and step."""
    out = tmp_path / "args.sh"
    flags = ("--model", "llama-3.1-405b", "--hardware", "h100-sxm", "--gpus", "1024", "--tp", "8", "--pp", "8",
             "--cp", "2", "--interleave", "8", "--zero", "1", "--global-batch", "512", "--seq-len", "8192",
             "--grad-dtype", "bf16")
    result = run_cli("export", "--to", "megatron", *flags, "--out", out)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "--account-for-embedding-in-pipeline-split" in text and "--account-for-loss-in-pipeline-split" in text
    assert "--num-layers-per-virtual-pipeline-stage 2" in text
    line = next(x for x in text.splitlines() if "Check it in CI" in x)
    command = line.split("planner check ", 1)[1].replace("<this file>", str(out)).split()
    checked = run_cli("check", *command, "--format", "json")
    assert checked.exit_code == 0, checked.output
    estimated = run_cli("estimate", *flags, "--format", "json")
    job = json.loads(checked.stdout)[0]
    assert job["config"]["interleave"] == 8
    assert job["time"]["step_seconds"] == pytest.approx(json.loads(estimated.stdout)["time"]["step_seconds"])


def test_an_engine_flag_given_with_a_job_file_is_named_in_one_agreeing_line(run_cli):
    """Flags of a direct engine check beside a job file: one line naming them, its verb agreeing with their count."""
    one = run_cli("check", JOBS / "llama8b_fits.yaml", "--gpus", "8")
    assert one.exit_code == 2 and "--gpus applies to direct engine checks" in one.stderr, one.stderr
    two = run_cli("check", JOBS / "llama8b_fits.yaml", "--gpus", "8", "--engine-args", "--x 1")
    assert two.exit_code == 2, two.stderr
    assert "apply to direct engine checks" in two.stderr and "applies" not in two.stderr, two.stderr


def test_a_megatron_integer_flag_with_a_word_says_it_needs_an_integer(run_cli, tmp_path):
    args = tmp_path / "args.txt"
    args.write_text("--num-layers four --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
                    "--max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --bf16\n")
    result = run_cli("check", "--megatron-args", args, "--hardware", "h100-sxm", "--gpus", "8")
    assert_one_line_error(result, "--num-layers needs an integer, got 'four'")


def test_an_export_whose_write_fails_prints_no_notes_before_its_error(run_cli):
    """The export's notes follow a successful write: a target that passes the early checks but cannot be created
    (a file in /proc) leaves the error as the only line on stderr."""
    if not Path("/proc").is_dir():
        pytest.skip("no /proc on this system")
    result = run_cli("export", "--to", "automodel", "-m", "llama-3.1-8b", "-w", "h100-sxm", "--gpus", "8", "--zero", "1",
                     "--recompute", "selective", "--micro-batch", "1", "--global-batch", "8", "--seq-len", "4096",
                     "--out", "/proc/planner-export-test.yaml")
    assert_one_line_error(result, "/proc/planner-export-test.yaml", "cannot write")
