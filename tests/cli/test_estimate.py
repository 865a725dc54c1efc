"""`planner estimate`: exit codes, the JSON contract, the table, one-line errors; and every command's help
ends in an example."""

from __future__ import annotations

import json

import click
import pytest

from planner.cli import cli

BASE = ("estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--global-batch", "32", "--seq-len", "4096")

MEMORY_KEYS = {"weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "other_bytes", "total_bytes"}
TIME_KEYS = {"step_seconds", "compute_seconds", "communication_seconds", "bubble_seconds"}
THROUGHPUT_KEYS = {"tokens_per_second", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu"}


def estimate_json(run_cli, *args: str) -> dict:
    result = run_cli(*BASE, *args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_one_line_error(result, *words: str) -> str:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error:")
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr, result.stderr
    return result.stderr


# JSON contract ----------------------------------------------------------------------------------
def test_json_has_every_required_key(run_cli):
    data = estimate_json(run_cli, "--gpus", "16", "--tp", "2", "--pp", "2")
    assert {"config", "memory", "stages", "fits", "time", "throughput"} <= set(data)
    assert MEMORY_KEYS | {"capacity_bytes"} <= set(data["memory"])
    assert TIME_KEYS <= set(data["time"])
    assert THROUGHPUT_KEYS <= set(data["throughput"])
    assert isinstance(data["fits"], bool)
    assert len(data["stages"]) == 2
    for stage in data["stages"]:
        assert MEMORY_KEYS <= set(stage)
        # The breakdown adds up to the total on every stage.
        parts = sum(stage[k] for k in MEMORY_KEYS - {"total_bytes"})
        assert parts == pytest.approx(stage["total_bytes"], rel=1e-12)
    # The memory block is the most loaded stage.
    assert data["memory"]["total_bytes"] == max(stage["total_bytes"] for stage in data["stages"])


def test_json_config_is_the_resolved_layout(run_cli):
    # 16 GPUs / (tp 2 x pp 2) = dp 4 when --dp is left out; sequence parallelism defaults on with tp > 1;
    # 32 sequences / (dp 4 x micro-batch 1) = 8 micro-batches.
    config = estimate_json(run_cli, "--gpus", "16", "--tp", "2", "--pp", "2")["config"]
    assert (config["tp"], config["pp"], config["cp"], config["dp"]) == (2, 2, 1, 4)
    assert config["gpus"] == 16
    assert config["sequence_parallel"] is True
    assert config["num_micro_batches"] == 8
    assert config["flash_attention"] is True
    config = estimate_json(run_cli, "--gpus", "8", "--no-flash-attention", "--recompute", "selective",
                           "--zero", "1", "--grad-dtype", "fp32", "--dtype", "fp8")["config"]
    assert (config["tp"], config["dp"], config["sequence_parallel"]) == (1, 8, False)
    assert (config["flash_attention"], config["recompute"], config["zero"]) == (False, "selective", 1)
    assert (config["grad_dtype"], config["dtype"]) == ("fp32", "fp8")


def test_time_parts_are_consistent(run_cli):
    data = estimate_json(run_cli, "--gpus", "16", "--tp", "2", "--pp", "2")
    t = data["time"]
    assert t["step_seconds"] >= t["compute_seconds"] + t["communication_seconds"] + t["bubble_seconds"]
    assert t["bubble_seconds"] > 0  # pp 2
    tokens = 32 * 4096
    assert data["throughput"]["tokens_per_second"] == pytest.approx(tokens / t["step_seconds"])
    assert 0 < data["throughput"]["mfu"] < 1


def test_exit_0_when_it_does_not_fit(run_cli):
    result = run_cli("estimate", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--gpus", "8",
                     "--global-batch", "8", "--seq-len", "8192", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["fits"] is False
    assert data["memory"]["total_bytes"] > data["memory"]["capacity_bytes"]


def test_headroom_moves_the_verdict(run_cli):
    data = estimate_json(run_cli, "--gpus", "8", "--zero", "3")
    ratio = data["memory"]["total_bytes"] / data["memory"]["capacity_bytes"]
    assert 0.02 < ratio < 0.98
    tight = estimate_json(run_cli, "--gpus", "8", "--zero", "3", "--headroom", f"{1 - ratio + 0.01:.6f}")
    loose = estimate_json(run_cli, "--gpus", "8", "--zero", "3", "--headroom", f"{1 - ratio - 0.01:.6f}")
    assert tight["fits"] is False and loose["fits"] is True


# Table ------------------------------------------------------------------------------------------
def test_table_shows_memory_per_stage_and_time(run_cli):
    result = run_cli(*BASE, "--gpus", "16", "--tp", "2", "--pp", "2")
    assert result.exit_code == 0, result.output
    for text in ("Memory per GPU", "weights", "optimizer", "activations", "Time per step", "bubble", "MFU", "fits"):
        assert text in result.stdout, text


# Bad input: exit 2, one line --------------------------------------------------------------------
def test_degrees_that_do_not_multiply_to_the_gpus(run_cli):
    result = run_cli(*BASE, "--gpus", "64", "--tp", "8", "--pp", "4", "--dp", "3")
    assert_one_line_error(result, "tp(8) * pp(4) * cp(1) * dp(3) = 96 != gpus(64)")


def test_gpus_not_divisible_by_the_model_parallel_degrees(run_cli):
    assert_one_line_error(run_cli(*BASE, "--gpus", "12", "--tp", "8"), "gpus(12) is not divisible by tp(8)")


def test_batch_not_divisible(run_cli):
    result = run_cli("estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "8",
                     "--global-batch", "12", "--seq-len", "4096")
    assert_one_line_error(result, "global_batch(12) is not divisible by dp(8) * micro_batch(1) = 8")


def test_sequence_parallel_without_tp(run_cli):
    assert_one_line_error(run_cli(*BASE, "--gpus", "8", "--sequence-parallel"), "sequence_parallel needs tp > 1")


def test_unknown_model(run_cli):
    result = run_cli("estimate", "--model", "no-such-model", "--hardware", "h100-sxm", "--gpus", "8",
                     "--global-batch", "8", "--seq-len", "4096")
    assert_one_line_error(result, "unknown model id 'no-such-model'")


def test_unknown_hardware(run_cli):
    result = run_cli("estimate", "--model", "llama-3.1-8b", "--hardware", "no-such-gpu", "--gpus", "8",
                     "--global-batch", "8", "--seq-len", "4096")
    assert_one_line_error(result, "no-such-gpu")


def test_fp8_on_a100(run_cli):
    result = run_cli("estimate", "--model", "llama-3.1-8b", "--hardware", "a100-80gb", "--gpus", "8",
                     "--global-batch", "8", "--seq-len", "4096", "--dtype", "fp8")
    assert_one_line_error(result, "no fp8 peak")


def test_mxfp8_on_hopper_is_one_line_and_runs_on_blackwell(run_cli):
    args = ("--model", "llama-3.1-8b", "--gpus", "8", "--global-batch", "8", "--seq-len", "4096", "--dtype", "fp8",
            "--fp8-recipe", "mxfp8")
    assert_one_line_error(run_cli("estimate", "--hardware", "h100-sxm", *args), "take no MX block scales")
    assert_one_line_error(run_cli("search", "--hardware", "h100-sxm", *args), "take no MX block scales")
    ok = run_cli("estimate", "--hardware", "b200", *args, "--format", "json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["config"]["fp8_recipe"] == "mxfp8"


def test_fp8_recipe_without_fp8_is_one_line(run_cli):
    result = run_cli("estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "8",
                     "--global-batch", "8", "--seq-len", "4096", "--fp8-recipe", "delayed")
    assert_one_line_error(result, "fp8_recipe delayed applies only with dtype fp8")


@pytest.mark.parametrize(
    "flag, value",
    [("--gpus", "-8"), ("--tp", "-2"), ("--pp", "0"), ("--micro-batch", "-1"), ("--global-batch", "0"),
     ("--seq-len", "-4096"), ("--zero", "4"), ("--headroom", "-0.1"), ("--headroom", "1")],
)
def test_negative_or_out_of_range_values(run_cli, flag, value):
    args = dict(zip(BASE[1::2], BASE[2::2]))
    args.setdefault("--gpus", "8")
    args[flag] = value
    flat = ["estimate"] + [item for pair in args.items() for item in pair]
    assert_one_line_error(run_cli(*flat), flag)


def test_missing_required_option(run_cli):
    assert_one_line_error(run_cli("estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "8",
                                  "--seq-len", "4096"), "--global-batch")


# Every command documents itself with an example ----------------------------------------------
def _commands(group: click.Group, path: tuple[str, ...] = ()):
    yield path
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name)


COMMANDS = list(_commands(cli))


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(("planner", *p)) for p in COMMANDS])
def test_help_ends_with_an_example(run_cli, path):
    result = run_cli(*path, "--help")
    assert result.exit_code == 0, result.output
    text = result.stdout
    # click prints usage, the docstring, then Options/Commands; the docstring's last paragraph is the example.
    cut = min(i for i in (text.find("\nOptions:"), text.find("\nCommands:"), len(text)) if i >= 0)
    paragraphs = [p for p in text[:cut].strip().split("\n\n") if p.strip()]
    last = paragraphs[-1].strip().splitlines()
    assert last[0].startswith("Example"), f"planner {' '.join(path)}: help does not end in an example"
    assert any(line.strip().startswith("planner") for line in last[1:]), last


def test_estimate_is_listed_in_the_top_level_help(run_cli):
    assert "estimate" in run_cli("--help").stdout


def test_an_internal_error_exits_3_with_one_line(run_cli, monkeypatch):
    # A bug inside the library must not exit 1 (CI reads 1 as "does not fit") nor print a traceback.
    import planner.cli.estimate as estimate_cli

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(estimate_cli, "estimate", broken)
    monkeypatch.delenv("PLANNER_DEBUG", raising=False)
    result = run_cli("estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "8",
                     "--global-batch", "8", "--seq-len", "2048")
    assert result.exit_code == 3
    assert result.stderr.startswith("error: internal error (ZeroDivisionError: boom)")
    assert result.stderr.count("\n") == 1


def test_estimate_table_shows_the_moe_settings(run_cli):
    result = run_cli("estimate", "-m", "mixtral-8x7b", "-w", "h100-sxm", "--gpus", "64", "--tp", "2", "--ep", "8",
                     "--global-batch", "64", "--seq-len", "4096", "--zero", "1", "--moe-dispatcher", "deepep")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the header line wraps at the terminal width
    assert "etp 2, dispatcher deepep, ep-overlap off, dropless" in text
    delayed = run_cli("estimate", "-m", "mixtral-8x7b", "-w", "h100-sxm", "--gpus", "64", "--tp", "2", "--ep", "8",
                      "--global-batch", "64", "--seq-len", "4096", "--zero", "1", "--moe-dispatcher", "deepep",
                      "--moe-delay-wgrad", "--format", "json")
    assert delayed.exit_code == 0, delayed.output
    assert json.loads(delayed.stdout)["config"]["moe_delay_wgrad"] is True
    skewed = run_cli("estimate", "-m", "mixtral-8x7b", "-w", "h100-sxm", "--gpus", "64", "--tp", "2", "--ep", "8",
                     "--global-batch", "64", "--seq-len", "4096", "--zero", "1", "--moe-dispatcher", "deepep",
                     "--moe-load-imbalance", "1.5")
    assert skewed.exit_code == 0, skewed.output
    assert "dropless, load imbalance 1.5" in " ".join(skewed.output.split())
    bad = run_cli("estimate", "-m", "mixtral-8x7b", "-w", "h100-sxm", "--gpus", "64", "--tp", "2", "--ep", "8",
                  "--global-batch", "64", "--seq-len", "4096", "--moe-load-imbalance", "1.5", "--moe-capacity-factor",
                  "1.25")
    assert bad.exit_code == 2 and "moe_load_imbalance" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert "ep-overlap off, delayed expert wgrad, dropless" in " ".join(run_cli(
        "estimate", "-m", "mixtral-8x7b", "-w", "h100-sxm", "--gpus", "64", "--tp", "2", "--ep", "8", "--global-batch",
        "64", "--seq-len", "4096", "--zero", "1", "--moe-dispatcher", "deepep", "--moe-delay-wgrad").output.split())
    dense = run_cli("estimate", "-m", "llama-3.1-8b", "-w", "h100-sxm", "--gpus", "8", "--global-batch", "64",
                    "--seq-len", "4096")
    assert "dispatcher" not in dense.output


def test_fp8_param_gather_halves_the_layer_weights(run_cli):
    """--fp8-param-gather keeps the transformer layers' weights in fp8 (1 byte, Megatron --fp8-param-gather); the
    embedding and LM head stay 16-bit, so the weights fall by a little less than half."""
    args = ("--gpus", "8", "--tp", "2", "--zero", "1", "--dtype", "fp8")
    plain = estimate_json(run_cli, *args)["memory"]["weights_bytes"]
    fp8 = estimate_json(run_cli, *args, "--fp8-param-gather")["memory"]["weights_bytes"]
    assert 0.5 * plain < fp8 < 0.6 * plain
    assert estimate_json(run_cli, *args, "--fp8-param-gather")["config"]["fp8_param_gather"] is True
    # an engine that gathers 16-bit weights refuses it, as the search does (engine rule engine_no_fp8_params)
    assert_one_line_error(run_cli(*BASE, *args, "--fp8-param-gather", "--engine", "deepspeed"), "fp8_param_gather",
                          "deepspeed")


def test_torchtitan_fp8_param_gather_is_the_float8_all_gather(run_cli):
    """Under torchtitan --fp8-param-gather is torchao's float8 FSDP all-gather: the held weights keep their bytes
    (fp32 shards, counted as before), the gathered layers are fp8, and only the per-tensor recipe runs it."""
    args = ("--gpus", "8", "--zero", "3", "--dtype", "fp8", "--engine", "torchtitan", "--recompute", "op")
    plain = estimate_json(run_cli, *args)
    fp8 = estimate_json(run_cli, *args, "--fp8-param-gather")
    assert fp8["memory"]["weights_bytes"] == plain["memory"]["weights_bytes"]
    assert fp8["memory"]["total_bytes"] < plain["memory"]["total_bytes"]
    assert fp8["time"]["step_seconds"] < plain["time"]["step_seconds"]
    table = run_cli(*BASE, *args, "--fp8-param-gather")
    assert table.exit_code == 0 and "fp8 (tensorwise), fp8 param gather" in table.stdout.splitlines()[0]
    assert_one_line_error(run_cli(*BASE, *args, "--fp8-param-gather", "--fp8-recipe", "rowwise"),
                          "fp8_param_gather with fp8_recipe rowwise", "torchtitan")


def test_fp8_param_gather_needs_fp8_and_a_sharded_optimizer(run_cli):
    assert_one_line_error(run_cli(*BASE, "--gpus", "8", "--fp8-param-gather"), "fp8_param_gather", "zero")


def test_attention_kernel_option_sets_the_layouts_kernel(run_cli, tmp_path):
    fused = estimate_json(run_cli, "--gpus", "8", "--seq-len", "16384")
    flash2 = estimate_json(run_cli, "--gpus", "8", "--seq-len", "16384", "--attention-kernel", "flash2")
    assert fused["config"]["attention_kernel"] is None and flash2["config"]["attention_kernel"] == "flash2"
    assert flash2["time"]["step_seconds"] > fused["time"]["step_seconds"]  # FlashAttention-2 below cuDNN on H100
    assert_one_line_error(run_cli(*BASE, "--gpus", "8", "--no-flash-attention", "--attention-kernel", "flash2"),
                          "attention_kernel")
    # the same field in a job file, read by check
    job = tmp_path / "job.yaml"
    job.write_text("model: llama-3.1-8b\nhardware: h100-sxm\ngpus: 8\nparallel: {zero: 1, attention_kernel: flash2}\n"
                   "training: {global_batch: 32, seq_len: 16384}\n")
    data = json.loads(run_cli("check", str(job), "--format", "json").stdout)
    assert data[0]["config"]["attention_kernel"] == "flash2"


def test_fp8_attention_is_a_flag_and_a_chip_without_its_measurement_is_one_line(run_cli):
    on = estimate_json(run_cli, "--gpus", "8", "--zero", "1", "--dtype", "fp8", "--fp8-attention")
    assert on["config"]["fp8_attention"] is True
    off = estimate_json(run_cli, "--gpus", "8", "--zero", "1", "--dtype", "fp8")
    assert on["memory"]["activations_bytes"] < off["memory"]["activations_bytes"]  # Q, K, V kept in one byte
    h20 = ("estimate", "--model", "llama-3.1-8b", "--hardware", "h20", "--global-batch", "32", "--seq-len", "4096",
           "--gpus", "8", "--dtype", "fp8", "--fp8-attention")
    assert_one_line_error(run_cli(*h20), "measures no FP8 attention")
    assert_one_line_error(run_cli(*BASE, "--gpus", "8", "--fp8-attention"), "needs dtype fp8")


def test_moe_fused_mlp_is_a_flag_with_one_line_refusals(run_cli):
    qwen = ("estimate", "--model", "qwen3-30b-a3b", "--hardware", "gb300-nvl72", "--gpus", "8", "--ep", "8",
            "--micro-batch", "8", "--global-batch", "512", "--seq-len", "4096", "--zero", "1", "--dtype", "fp8",
            "--fp8-recipe", "mxfp8", "--format", "json")
    on, off = (run_cli(*qwen, *extra) for extra in (("--moe-fused-mlp",), ()))
    assert on.exit_code == 0 and off.exit_code == 0, on.output + off.output
    on_doc, off_doc = json.loads(on.stdout), json.loads(off.stdout)
    assert on_doc["config"]["moe_fused_mlp"] is True and off_doc["config"]["moe_fused_mlp"] is False
    assert on_doc["time"]["step_seconds"] < off_doc["time"]["step_seconds"]
    table = run_cli(*qwen[:-2], "--moe-fused-mlp")
    assert "fused grouped MLP" in " ".join(table.stdout.split())
    assert_one_line_error(run_cli(*qwen[:-4], "--moe-fused-mlp"), "fp8_recipe mxfp8")  # fp8 per tensor
    h100 = tuple("h100-sxm" if part == "gb300-nvl72" else part for part in qwen[:-2])
    assert_one_line_error(run_cli(*h100, "--moe-fused-mlp"), "mxfp8")  # H100: no MX block scales
    b200 = ("estimate", "--model", "llama-3.1-8b", "--hardware", "b200", "--global-batch", "32", "--seq-len", "4096",
            "--gpus", "8", "--dtype", "fp8", "--fp8-recipe", "mxfp8", "--moe-fused-mlp")
    assert_one_line_error(run_cli(*b200), "MoE model")


def test_muon_options_reach_the_layout_and_its_bad_uses_are_one_line_errors(run_cli):
    args = ("--gpus", "8", "--tp", "2", "--zero", "1", "--optimizer", "muon", "--muon-tp-mode", "blockwise",
            "--muon-ns-steps", "6", "--no-muon-split-qkv")
    config = estimate_json(run_cli, *args)["config"]
    assert (config["optimizer"], config["muon_tp_mode"], config["muon_ns_steps"], config["muon_split_qkv"]) == (
        "muon", "blockwise", 6, False)
    # Muon keeps 8 bytes of state for each matrix weight, Adam 12: less optimizer memory on the same layout
    adam = estimate_json(run_cli, "--gpus", "8", "--tp", "2", "--zero", "1")["memory"]["optimizer_bytes"]
    assert estimate_json(run_cli, *args)["memory"]["optimizer_bytes"] < adam
    table = run_cli(*BASE, *args)
    assert table.exit_code == 0 and "muon (6 Newton-Schulz steps, tp blockwise, qkv whole)" in " ".join(
        table.stdout.split())
    assert_one_line_error(run_cli(*BASE, "--gpus", "8", "--muon-tp-mode", "blockwise"), "apply only with optimizer muon")
    assert_one_line_error(run_cli(*BASE, "--gpus", "8", "--optimizer", "muon", "--zero", "3"), "use zero 0 or 1")
    assert_one_line_error(run_cli(*BASE, "--gpus", "8", "--optimizer", "muon", "--engine", "deepspeed"),
                          "engine deepspeed cannot run optimizer muon")
    assert_one_line_error(run_cli(*BASE, "--gpus", "8", "--optimizer", "muon", "--muon-ns-steps", "2000"),
                          "1,024 Newton-Schulz iterations")


def test_lora_options_reach_the_layout_and_its_bad_uses_are_one_line_errors(run_cli):
    args = ("--gpus", "8", "--zero", "3", "--engine", "automodel", "--lora-rank", "16", "--lora-targets", "attention")
    doc = estimate_json(run_cli, *args)
    assert (doc["config"]["lora_rank"], doc["config"]["lora_targets"]) == (16, "attention")
    full = estimate_json(run_cli, "--gpus", "8", "--zero", "3", "--engine", "automodel")
    # the frozen weights keep no gradient or optimizer state: only the adapters' (32 x 16 x 26,624 attention
    # parameters, bf16 gradients and 4 bytes of optimizer state in the automodel profile, over 8 shards)
    assert doc["memory"]["gradients_bytes"] == 32 * 16 * 26_624 * 2 / 8
    assert doc["memory"]["optimizer_bytes"] == 32 * 16 * 26_624 * 4 / 8
    assert doc["memory"]["optimizer_bytes"] < full["memory"]["optimizer_bytes"] / 100
    assert doc["time"]["step_seconds"] < full["time"]["step_seconds"]
    table = run_cli(*BASE, *args)
    assert table.exit_code == 0 and "LoRA rank 16 on attention (base weights frozen)" in " ".join(table.stdout.split())
    assert_one_line_error(run_cli(*BASE, "--gpus", "8", "--lora-targets", "attention"), "applies only with lora_rank")
    assert_one_line_error(run_cli(*BASE, "--gpus", "8", "--zero", "3", "--engine", "torchtitan", "--lora-rank", "8"),
                          "lora_rank(8)")
    assert_one_line_error(run_cli(*BASE, "--gpus", "8", "--lora-rank", "0"), "lora-rank")
