"""`planner calibrate` and `--profile FILE` through every command: the overlay written by calibrate is
read back by estimate, search, check (and a job's `profile:`), export and infer, and changes their
figures as the fitted factor says; wrong inputs are one-line errors with exit code 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from planner.engines.load import load_hardware, load_model, load_overlay
from planner.specs.overlay import apply_overlay, with_factors
from planner.training.estimate import estimate
from planner.training.rules import resolve_layout

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
# a made-up step time on the torchtitan 8B job (the real log of that job fits nothing since the profile's power limit)
RUNS = FIXTURES / "calibrate" / "overlay_plumbing_runs.yaml"
HW = "h100-sxm-96gb"
LAYOUT = ["--gpus", "8", "--zero", "3", "--global-batch", "8", "--seq-len", "8192"]


@pytest.fixture(scope="module")
def overlay_file(tmp_path_factory):
    from click.testing import CliRunner

    from planner.cli import cli

    out = tmp_path_factory.mktemp("cal") / "overlay.yaml"
    result = CliRunner().invoke(cli, ["calibrate", str(RUNS), "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


def _json(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_calibrate_prints_errors_and_writes_the_overlay(run_cli, overlay_file):
    result = run_cli("calibrate", RUNS, "--format", "json")
    data = _json(result)
    run = data["runs"][0]
    assert abs(run["error_after"]) < abs(run["error_before"])
    fitted = data["factors"]["gemm_plateau"]
    assert fitted["fitted"] < fitted["shipped"] == pytest.approx(0.688)  # the run's steps are slower than predicted
    assert set(data["factors"]) == {"gemm_plateau"}  # one run: one factor
    assert data["fit"]["mean_abs_error_leave_one_out"] is None  # one run: nothing to leave out
    table = run_cli("calibrate", RUNS)
    assert table.exit_code == 0 and "left out" in table.stdout and "not fitted: attention" in table.stdout
    saved = yaml.safe_load(overlay_file.read_text(encoding="utf-8"))
    assert saved["hardware"] == HW and saved["runs"][0]["source"].startswith("made up for tests/cli/test_calibrate.py")


def test_the_real_torchtitan_log_fits_nothing(run_cli):
    """The log of pytorch/torchtitan#1287 on the 96 GB H100 (tests/fixtures/calibrate/torchtitan_8b_runs.yaml):
    with the profile's 500 W power limit the shipped prediction is close enough that no factor is fitted."""
    data = _json(run_cli("calibrate", FIXTURES / "calibrate" / "torchtitan_8b_runs.yaml", "--format", "json"))
    assert data["factors"] == {}
    assert abs(data["runs"][0]["error_before"]) < 0.2


def _step(run_cli, *extra):
    data = _json(run_cli("estimate", "-m", "llama-3.1-8b", "-w", HW, *LAYOUT, "--format", "json", *extra))
    return data["time"]["step_seconds"]


def test_estimate_uses_the_fitted_profile(run_cli, overlay_file):
    plain, calibrated = _step(run_cli), _step(run_cli, "--profile", overlay_file)
    overlay = load_overlay(overlay_file)
    hw = load_hardware(HW).spec
    model = load_model("llama-3.1-8b").spec
    layout = resolve_layout(model, 8, zero=3, global_batch=8, seq_len=8192)
    by_hand = with_factors(hw, {"gemm_plateau": overlay.factors["gemm_plateau"].fitted})
    assert calibrated == pytest.approx(estimate(model, by_hand, layout).scalar("step_seconds"))
    assert calibrated > plain
    assert apply_overlay(hw, overlay).efficiency.matmul.peak_fraction == overlay.factors["gemm_plateau"].fitted


def test_search_export_and_infer_take_the_profile(run_cli, overlay_file):
    args = ["-m", "llama-3.1-8b", "-w", HW, "--gpus", "8", "--global-batch", "8", "--seq-len", "8192", "--top", "1",
            "--format", "json"]
    plain = _json(run_cli("search", *args))["candidates"][0]["time"]["step_seconds"]
    calibrated = _json(run_cli("search", *args, "--profile", overlay_file))["candidates"][0]["time"]["step_seconds"]
    assert calibrated > plain
    export = ["export", "--to", "megatron", "-m", "llama-3.1-8b", "-w", HW, *LAYOUT]
    a, b = run_cli(*export), run_cli(*export, "--profile", overlay_file)
    assert a.exit_code == 0 and b.exit_code == 0 and a.stdout != b.stdout  # the header's prediction moves
    infer = ["infer", "estimate", "-m", "llama-3.1-8b", "-w", HW, "--input-len", "2048", "--output-len", "128",
             "--concurrency", "8", "--format", "json"]
    ttft = _json(run_cli(*infer))["latency"]["ttft_seconds"]
    ttft_cal = _json(run_cli(*infer, "--profile", overlay_file))["latency"]["ttft_seconds"]
    assert ttft_cal > ttft  # prefill is GEMM-bound: a lower plateau makes it slower
    search = run_cli("infer", "search", "-m", "llama-3.1-8b", "-w", HW, "--gpus", "8", "--input-len", "2048",
                     "--output-len", "128", "--profile", overlay_file)
    assert search.exit_code == 0, search.output


def test_a_job_names_its_profile(run_cli, overlay_file, tmp_path):
    job = {"model": "llama-3.1-8b", "hardware": HW, "gpus": 8, "parallel": {"zero": 3},
           "training": {"global_batch": 8, "seq_len": 8192}}
    plain_path, cal_path = tmp_path / "plain.yaml", tmp_path / "cal.yaml"
    plain_path.write_text(yaml.safe_dump(job), encoding="utf-8")
    cal_path.write_text(yaml.safe_dump({**job, "profile": str(overlay_file)}), encoding="utf-8")
    plain = _json(run_cli("check", plain_path, "--format", "json"))[0]
    cal = _json(run_cli("check", cal_path, "--format", "json"))[0]
    overridden = _json(run_cli("check", plain_path, "--profile", overlay_file, "--format", "json"))[0]
    assert cal["time"]["step_seconds"] > plain["time"]["step_seconds"]
    assert overridden["time"]["step_seconds"] == cal["time"]["step_seconds"]
    exported = run_cli("export", cal_path, "--to", "torchtitan")
    assert exported.exit_code == 0, exported.output


def test_a_layout_far_from_the_calibration_runs_warns(run_cli, overlay_file):
    near = run_cli("estimate", "-m", "llama-3.1-8b", "-w", HW, *LAYOUT, "--profile", overlay_file)
    assert near.exit_code == 0 and "warning" not in near.stderr
    far = run_cli("estimate", "-m", "llama-3.1-70b", "-w", HW, "--gpus", "256", "--tp", "8", "--zero", "1",
                  "--global-batch", "256", "--seq-len", "8192", "--profile", overlay_file)
    assert far.exit_code == 0 and "doublings from the nearest calibration run" in far.stderr


def _one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_an_overlay_of_another_system_is_refused(run_cli, overlay_file):
    result = run_cli("estimate", "-m", "llama-3.1-8b", "-w", "h100-sxm", *LAYOUT, "--profile", overlay_file)
    _one_line_error(result, str(overlay_file), "was fitted on", "h100-sxm-96gb")


def test_a_tampered_overlay_is_refused(run_cli, overlay_file, tmp_path):
    data = yaml.safe_load(overlay_file.read_text(encoding="utf-8"))
    data["factors"]["gemm_plateau"]["fitted"] = 1.5
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data), encoding="utf-8")
    _one_line_error(run_cli("estimate", "-m", "llama-3.1-8b", "-w", HW, *LAYOUT, "--profile", bad),
                    "factors.gemm_plateau.fitted", "outside")


def test_a_log_without_a_usable_step_is_exit_2(run_cli):
    result = run_cli("calibrate", "--log", FIXTURES / "logs" / "torchtitan_moe_warmup.log", "--job",
                     FIXTURES / "jobs" / "llama8b_fits.yaml")
    _one_line_error(result, "no usable step")


def test_runs_on_two_systems_are_refused(run_cli, tmp_path):
    runs = {"runs": [
        {"job": {"model": "llama-3.1-8b", "hardware": h, "gpus": 8, "training": {"global_batch": 8, "seq_len": 4096}},
         "measured": {"step_seconds": 1.0}} for h in ("h100-sxm", "a100-80gb")]}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(runs), encoding="utf-8")
    _one_line_error(run_cli("calibrate", path), "2 systems")


def test_a_nemo_log_with_a_job(run_cli):
    result = run_cli("calibrate", "--log", FIXTURES / "logs" / "nemo2_esm2_2x8xh100.log", "--job",
                     FIXTURES / "jobs" / "llama8b_fits.yaml", "--format", "json")
    data = _json(result)
    # NeMo's own seconds per step, median of global steps 29-34 (28, the first logged, is warm-up)
    assert data["runs"][0]["measured_seconds"] == pytest.approx((0.1902 + 0.1903) / 2)


def test_calibrate_from_logs_with_a_job(run_cli):
    result = run_cli("calibrate", "--log", FIXTURES / "logs" / "deepspeed_timer.log", "--job",
                     FIXTURES / "jobs" / "llama8b_fits.yaml", "--format", "json")
    data = _json(result)
    # step = global batch / samples per second: 64 / 155.10475468488542
    assert data["runs"][0]["measured_seconds"] == pytest.approx(64 / 155.10475468488542)


def test_automodel_logs_with_a_job(run_cli):
    """NeMo AutoModel's whole-job tps over the job's GPUs; its older per-rank tps times dp x cp; training.jsonl's
    own step time (num_tokens_per_step / tps)."""
    job = FIXTURES / "jobs" / "llama8b_fits.yaml"  # 8 GPUs at tp 2: 4 data-parallel ranks
    tokens = 64 * 8192  # the job's global batch x seq_len
    result = run_cli("calibrate", "--log", FIXTURES / "logs" / "automodel_sft_8gpu.log", "--job", job,
                     "--format", "json")
    assert _json(result)["runs"][0]["measured_seconds"] == pytest.approx(tokens / ((9885.22 + 10558.09) / 2))
    assert "tail padding" in result.stderr
    older = _json(run_cli("calibrate", "--log", FIXTURES / "logs" / "automodel_finetune_guide.log", "--job", job,
                          "--format", "json"))
    # a data-parallel rank's 9,172.6 tokens/s (median of steps 8-20) x 4 ranks is the job's rate
    assert older["runs"][0]["measured_seconds"] == pytest.approx(tokens / (4 * (9148.28 + 9196.97) / 2))
    records = _json(run_cli("calibrate", "--log", FIXTURES / "logs" / "automodel_gpt_oss_20b_h100_training.jsonl",
                            "--job", job, "--format", "json"))
    assert records["runs"][0]["measured_seconds"] == pytest.approx(1.100, abs=0.002)


def test_a_megatron_log_gives_its_own_layout(run_cli, tmp_path):
    """The log's world size (16, tp 4, dp 4) and printed arguments (ep 8, global batch 128, bf16) become the
    layout, the job adding only the model and sequence length the stored log lacks; planner's rules then
    refuse it, since they need ep to divide dp x cp (Megatron-Core lets the expert group span TP ranks),
    which shows the degrees were read from the log."""
    log = FIXTURES / "logs" / "megatron_mixtral_16xh100.log"
    alone = run_cli("calibrate", "--log", log, "--hardware", "h100-sxm")
    # the stored block is cut (no 'end of arguments'): the error names every argument it lacks and the job fields
    _one_line_error(alone, "cut short", "lacks num_layers, num_attention_heads, seq_length (or training.seq_len), "
                    "micro_batch_size (or parallel.micro_batch)", "--job")
    job = tmp_path / "job.yaml"
    # micro_batch 1 is this test's stand-in (the stored thread does not say); the refusal below does not depend on it
    job.write_text(yaml.safe_dump({"model": "mixtral-8x7b", "hardware": "h100-sxm", "training": {"seq_len": 4096},
                                   "parallel": {"micro_batch": 1}}), encoding="utf-8")
    _one_line_error(run_cli("calibrate", "--log", log, "--job", job), "ep(8)", "dp(4)")


def test_hf_trainer_log_with_training_arguments(run_cli, tmp_path):
    args = tmp_path / "training_args.json"
    args.write_text(json.dumps({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "bf16": True}),
                    encoding="utf-8")
    runs = {"runs": [{"log": {"path": str(FIXTURES / "logs" / "hf_trainer_gaudi.log"), "training_args": str(args)},
                      "job": {"model": "llama-3.1-8b", "hardware": "h100-sxm", "gpus": 8,
                              "training": {"seq_len": 2048}}}]}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(runs), encoding="utf-8")
    data = _json(run_cli("calibrate", path, "--format", "json"))
    run = data["runs"][0]
    assert run["measured_seconds"] == pytest.approx(1 / 2.169)  # train_steps_per_second
    assert run["layout"]["global_batch"] == 4 * 2 * 8 and run["layout"]["micro_batch"] == 4


def test_a_complete_megatron_log_is_a_run_on_its_own(run_cli, tmp_path):
    """The 2023 Megatron-LM log of GPT-2 345M on 4 A800 80GB PCIe (tests/fixtures/logs/SOURCES.md), read with
    the catalog's A100 80GB PCIe profile (same chip, clocks and memory; the A800 caps NVLink, which these
    PCIe cards do not use): the model, layout and GPU count all come from the log, and the overlay it
    writes is one estimate takes."""
    log = FIXTURES / "logs" / "megatron_gpt345m_4xa800_dp4.log"
    out = tmp_path / "a800.yaml"
    data = _json(run_cli("calibrate", "--log", log, "--hardware", "a100-pcie-80gb", "--out", out, "--format", "json"))
    run = data["runs"][0]
    assert run["gpus"] == 4
    assert run["layout"] == {"tp": 1, "pp": 1, "cp": 1, "dp": 4, "ep": 1, "zero": 0, "recompute": "none",
                             "micro_batch": 1, "global_batch": 8, "seq_len": 1024, "interleave": 1, "dtype": "fp16"}
    # the log's own count: `number of parameters on (tensor, pipeline) model parallel rank (0, 0): 354871296`
    assert run["features"]["params"] == 354871296
    assert run["measured_seconds"] == pytest.approx(0.2909)  # median of iterations 1000-5000 (ms / 1e3)
    assert run["measured_peak_gib"] == pytest.approx(8786.0 / 1024)  # max reserved (MB) after 100 iterations
    assert data["hardware"] == "a100-pcie-80gb" and out.exists()
    assert data["factors"] == {}  # one run the shipped profile predicts within noise (+10%): nothing fitted
    layout = ["estimate", "-m", "gpt2-xl", "-w", "a100-pcie-80gb", "--gpus", "4", "--global-batch", "8", "--seq-len",
              "1024", "--format", "json"]
    plain, calibrated = _json(run_cli(*layout)), _json(run_cli(*layout, "--profile", out))
    assert calibrated["time"]["step_seconds"] == plain["time"]["step_seconds"]  # the overlay leaves it as shipped


def test_four_megatron_logs_are_four_runs(run_cli):
    """The four runs of one document (dp 4, tp 2 x pp 2, tp 4, pp 4) as four --log files: each run's layout is
    its own log's, the hardware the one given."""
    names = ("dp4", "tp2pp2", "tp4", "pp4")
    args = ["calibrate", "--hardware", "a100-pcie-80gb", "--format", "json"]
    for name in names:
        args += ["--log", FIXTURES / "logs" / f"megatron_gpt345m_4xa800_{name}.log"]
    runs = {r["name"]: r for r in _json(run_cli(*args))["runs"]}
    degrees = {name: (runs[f"megatron_gpt345m_4xa800_{name}"]["layout"]["tp"],
                      runs[f"megatron_gpt345m_4xa800_{name}"]["layout"]["pp"],
                      runs[f"megatron_gpt345m_4xa800_{name}"]["layout"]["dp"]) for name in names}
    assert degrees == {"dp4": (1, 1, 4), "tp2pp2": (2, 2, 1), "tp4": (4, 1, 1), "pp4": (1, 4, 1)}
    # micro x global batch as printed: 1 x 8, 4 x 16, 2 x 8, 2 x 8
    batches = {n: (runs[f"megatron_gpt345m_4xa800_{n}"]["layout"]["micro_batch"],
                   runs[f"megatron_gpt345m_4xa800_{n}"]["layout"]["global_batch"]) for n in names}
    assert batches == {"dp4": (1, 8), "tp2pp2": (4, 16), "tp4": (2, 8), "pp4": (2, 8)}
    # one model, its vocabulary padded to a multiple of 128 x tp as each log prints (`new size: 50304`, 50432 at
    # tp 2, 50688 at tp 4): 354,871,296 parameters at tp 1 (the dp4 log's count), plus 1024 per padding row
    params = {n: runs[f"megatron_gpt345m_4xa800_{n}"]["features"]["params"] for n in names}
    assert params == {"dp4": 354871296, "pp4": 354871296, "tp2pp2": 354871296 + (50432 - 50304) * 1024,
                      "tp4": 354871296 + (50688 - 50304) * 1024}
    # the pp4 log's per-stage counts add up to the same model plus the last stage's copy of the tied embedding
    assert 128137216 + 75577344 + 75577344 + 127090688 - 50304 * 1024 == params["pp4"]


def test_calibrate_says_which_factors_the_leave_one_out_held(run_cli, tmp_path):
    """The four runs of one PCIe server disagree far beyond their noise (tp 4 is 7x slower than the model says,
    dp 4 within 10%): the selection finds factors that lower the objective on all four, but each run predicted
    from a fit on the other three is no better, so the leave-one-out inside the runs keeps none of the step.
    The report names each factor it held and why; the overlay carries the leave-one-out's scores."""
    out = tmp_path / "a800.yaml"
    args = ["calibrate", "--hardware", "a100-pcie-80gb", "--out", out]
    for name in ("dp4", "tp2pp2", "tp4", "pp4"):
        args += ["--log", FIXTURES / "logs" / f"megatron_gpt345m_4xa800_{name}.log"]
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # the report wraps long lines
    held = [part.split(":")[0] for part in text.split("not fitted: ")[1:]
            if "when fitted, but held at the shipped value by the leave-one-out" in part]
    # factors the selection chose on all four runs, each named with the reason it was held
    assert held and set(held) <= {"gemm_plateau", "gemm_fp8_plateau", "attention", "attention_flash2", "memory_bound",
                                  "intra_node_link", "inter_node_link", "step_overhead"}, held
    assert "leave-one-out inside the runs: 0 of the fitted step kept" in text
    data = yaml.safe_load(out.read_text())
    assert data["factors"] == {}
    shrink = data["fit"]["shrinkage"]
    assert shrink["factor"] == 0.0 and [s[0] for s in shrink["scores"]] == [0.0, 0.25, 0.5, 0.75, 1.0]
    # lambda 0 is the shipped profile: its left-out error is the shipped mean |log error| of the four runs
    shipped = [r["predicted_before_seconds"] / r["measured_seconds"] for r in data["runs"]]
    assert shrink["scores"][0][1] == pytest.approx(sum(abs(math.log(x)) for x in shipped) / 4, rel=1e-6)


def test_a_fitted_host_launch_builds_the_block_an_x86_profile_lacks(run_cli, overlay_file, tmp_path):
    """The host's time per eager op has no field on x86 profiles (they take the x86 DGX figure): an overlay with it
    builds efficiency.host_launch, and an eager MoE step, host-bound in part, gets slower by the fitted value."""
    data = yaml.safe_load(overlay_file.read_text(encoding="utf-8"))
    data["factors"] = {"host_launch": {"path": "efficiency.host_launch.seconds", "shipped": 13.5e-6,
                                       "fitted": 40e-6, "sigma": 5e-6}}
    data["memory_reserve"] = None
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    moe = ["estimate", "-m", "qwen3-30b-a3b", "-w", HW, "--gpus", "8", "--ep", "8", "--global-batch", "64",
           "--seq-len", "4096", "--format", "json"]
    plain = _json(run_cli(*moe))["time"]["step_seconds"]
    slower = _json(run_cli(*moe, "--profile", path))["time"]["step_seconds"]
    assert slower > 1.05 * plain
    hw = apply_overlay(load_hardware(HW).spec, load_overlay(path), source=str(path))
    assert hw.efficiency.host_launch is not None and hw.efficiency.host_launch.seconds == 40e-6
