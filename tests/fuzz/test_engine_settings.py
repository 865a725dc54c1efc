"""Malformed engine settings an independent fuzz found slipping past the readers: an accelerate config's counts
and booleans, a garbled figure in a training log, DeepSpeed sections and sizes of the wrong type or beyond 2^53,
torchtitan booleans written as strings and an unbounded selective_ac_option. Each must meet the bad-input
contract of docs/errors.md (exit 2, one `error:` line naming the file and the setting, nothing written).

The valid files these cases are cut from are the repository's fixtures (tests/fixtures/logs/SOURCES.md,
tests/fixtures/engines/upstream for the accelerate templates); each case changes one value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fuzz.contract import assert_rejected, invoke

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests/fixtures"
HUGE = 2**70
ACCELERATE_FSDP = (FIX / "engines/upstream/accelerate/config_yaml_templates/fsdp.yaml").read_text()
TRAINER = "accelerate launch train.py --model_name_or_path meta-llama/Llama-3.1-8B"
DEEPSPEED = json.loads((FIX / "engines/deepspeed/zero3_bf16.json").read_text())
TORCHTITAN = (FIX / "engines/torchtitan/llama3_8b.toml").read_text()
LOGS = FIX / "logs"


def accelerate_check(path: Path, *extra: object) -> list[object]:
    """`planner check` of an accelerate config with no --gpus: the GPU count comes from the config."""
    return ["check", "--accelerate-config", path, "--engine-args", TRAINER, "--hardware", "h100-sxm",
            "--seq-len", "4096", *extra]


def replace(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


# --- accelerate config: num_processes / num_machines -------------------------------------------------------------
@pytest.mark.parametrize("value", ["two", str(HUGE), "0", "-2", "'8'", "8.0", "true", "[8]"])
def test_accelerate_num_processes(tmp_path: Path, value: str) -> None:
    path = tmp_path / "accelerate.yaml"
    path.write_text(replace(ACCELERATE_FSDP, "num_processes: 2", f"num_processes: {value}"))
    assert_rejected(accelerate_check(path), str(path), "num_processes", folder=tmp_path)


@pytest.mark.parametrize("value", ["0", "-1", str(HUGE), "two", "1.5", "false"])
def test_accelerate_num_machines(tmp_path: Path, value: str) -> None:
    path = tmp_path / "accelerate.yaml"
    path.write_text(ACCELERATE_FSDP + f"num_machines: {value}\n")
    assert_rejected(accelerate_check(path), str(path), "num_machines", folder=tmp_path)


def test_accelerate_num_processes_must_split_over_the_machines(tmp_path: Path) -> None:
    path = tmp_path / "accelerate.yaml"
    path.write_text(replace(ACCELERATE_FSDP, "num_processes: 2", "num_processes: 12") + "num_machines: 8\n")
    assert_rejected(accelerate_check(path), str(path), "num_processes", "num_machines(8)", folder=tmp_path)


@pytest.mark.parametrize("value", ["1.0e+308", "[ds.json]", "true", "{a: 1}"])
def test_accelerate_deepspeed_config_file_must_be_a_path(tmp_path: Path, value: str) -> None:
    # a number or a list was handed to Path() unchecked: an internal error, exit 3
    path = tmp_path / "accelerate.yaml"
    path.write_text("distributed_type: DEEPSPEED\nnum_processes: 8\nmixed_precision: bf16\n"
                    f"deepspeed_config:\n  deepspeed_config_file: {value}\n")
    assert_rejected(accelerate_check(path), str(path), "deepspeed_config.deepspeed_config_file",
                    "expected the path of a DeepSpeed JSON config", folder=tmp_path)


@pytest.mark.parametrize("text", ["", "\n", "- 8\n", "8\n"])
def test_accelerate_config_not_a_mapping(tmp_path: Path, text: str) -> None:
    # with no --gpus, the GPU count was looked for first and the error named a flag that does not exist
    # (`--accelerate needs --gpus`) instead of the file
    path = tmp_path / "accelerate.yaml"
    path.write_text(text)
    assert_rejected(accelerate_check(path), str(path), "an accelerate config is a YAML mapping", folder=tmp_path)


def test_accelerate_config_without_gpus_names_the_option(tmp_path: Path) -> None:
    path = tmp_path / "accelerate.yaml"
    path.write_text(replace(ACCELERATE_FSDP, "num_processes: 2\n", ""))
    assert_rejected(accelerate_check(path), "--accelerate-config needs --gpus", folder=tmp_path)


def test_config_file_of_an_accelerate_command_not_a_mapping(tmp_path: Path) -> None:
    # `accelerate launch --config_file F`: F read as a mapping unchecked (AttributeError on a list)
    path = tmp_path / "accelerate.yaml"
    path.write_text("- DEEPSPEED\n")
    command = f"accelerate launch --config_file {path} train.py --model_name_or_path meta-llama/Llama-3.1-8B"
    assert_rejected(["check", "--hf-trainer", command, "--hardware", "h100-sxm", "--gpus", "8"], str(path),
                    "an accelerate config is a YAML mapping", folder=tmp_path)


@pytest.mark.parametrize(("flags", "needle"), [
    ("--per_device_train_batch_size x", "--per_device_train_batch_size needs an integer, got 'x'"),
    ("--per_device_train_batch_size 1 --gradient_accumulation_steps 1.5", "--gradient_accumulation_steps"),
    ("--per_device_train_batch_size 1 --max_seq_length 4k", "--max_seq_length needs an integer, got '4k'"),
    ("--per_device_train_batch_size 0", "--per_device_train_batch_size must be positive"),
])
def test_trainer_counts_with_a_deepspeed_config(tmp_path: Path, flags: str, needle: str) -> None:
    # with --deepspeed, these flags went through int() unchecked: ValueError, an internal error (exit 3)
    ds = tmp_path / "ds.json"
    ds.write_text((FIX / "engines/deepspeed/zero3_hf_auto.json").read_text())
    command = (f"torchrun --nproc_per_node 8 train.py --model_name_or_path meta-llama/Llama-3.1-8B --deepspeed {ds} "
               f"{flags} --bf16")
    assert_rejected(["check", "--hf-trainer", command, "--hardware", "h100-sxm"], "command line", needle,
                    folder=tmp_path)


@pytest.mark.parametrize("key", ["fsdp_offload_params", "fsdp_activation_checkpointing"])
@pytest.mark.parametrize("value", ["[true]", "'none'", "2", "'maybe'"])
def test_accelerate_fsdp_boolean(tmp_path: Path, key: str, value: str) -> None:
    path = tmp_path / "accelerate.yaml"
    path.write_text(replace(ACCELERATE_FSDP, f"{key}: false", f"{key}: {value}"))
    assert_rejected(accelerate_check(path), str(path), f"fsdp_config.{key}", folder=tmp_path)


@pytest.mark.parametrize("value", ["two", "3", "true"])
def test_accelerate_fsdp_version(tmp_path: Path, value: str) -> None:
    path = tmp_path / "accelerate.yaml"
    path.write_text(replace(ACCELERATE_FSDP, "fsdp_config:\n", f"fsdp_config:\n  fsdp_version: {value}\n"))
    assert_rejected(accelerate_check(path), str(path), "fsdp_config.fsdp_version", folder=tmp_path)


def _accelerate_config(run_cli: Any, tmp_path: Path, changes: dict[str, str]) -> dict[str, Any]:
    text = ACCELERATE_FSDP
    for old, new in changes.items():
        text = replace(text, old, new)
    path = tmp_path / "accelerate.yaml"
    path.write_text(text)
    result = run_cli(*map(str, accelerate_check(path, "--format", "json", "--no-suggest")))
    assert result.exit_code in (0, 1), result.output
    return dict(json.loads(result.stdout)[0]["config"])


@pytest.mark.parametrize("value", ["true", "'true'", "'True'", '"yes"', "'on'", "1"])
def test_accelerate_fsdp_booleans_that_mean_true_are_read(run_cli: Any, tmp_path: Path, value: str) -> None:
    """YAML true, and the strings accelerate's str_to_bool takes for true (the launcher passes config values on as
    environment variables), turn the setting on."""
    config = _accelerate_config(run_cli, tmp_path, {"fsdp_offload_params: false": f"fsdp_offload_params: {value}",
                                                    "fsdp_activation_checkpointing: false":
                                                    f"fsdp_activation_checkpointing: {value}"})
    assert config["offload_params"] is True and config["recompute"] == "full"


def test_accelerate_num_processes_is_the_gpu_count(run_cli: Any, tmp_path: Path) -> None:
    config = _accelerate_config(run_cli, tmp_path, {"num_processes: 2": "num_processes: 16\nnum_machines: 2"})
    assert config["gpus"] == 16 and config["offload_params"] is False and config["recompute"] == "none"


# --- training logs: a garbled figure -----------------------------------------------------------------------------
LOG_CASES = [
    # (id, fixture, the figure as printed, its garbled form, line it is on)
    ("megatron-nan-prefix", "megatron_llama2_7b_tp2.log", "(ms): 11075.6", "(ms): nan11075.6", 1),
    ("megatron-nan", "megatron_llama2_7b_tp2.log", "(ms): 14642.7", "(ms): nan", 2),
    ("megatron-inf", "megatron_llama2_7b_tp2.log", "(ms): 14642.7", "(ms): inf", 2),
    ("torchtitan-memory-two-dots", "torchtitan_llama3_8b.log", "memory: 49.66GiB(52.28%)  tps: 5,593",
     "memory: 49.6.6GiB(52.28%)  tps: 5,593", 5),
    ("deepspeed-exponent", "deepspeed_timer.log", "CurrSamplesPerSec=145.0889530760849",
     "CurrSamplesPerSec=145e-", 2),
    ("automodel-tps-two-dots", "automodel_sft_8gpu.log", "tps 9885.22(1235.65/gpu)", "tps 98.85.22(1235.65/gpu)", 5),
    ("automodel-mem-two-dots", "automodel_finetune_guide.log", "mem: 15.48 GiB", "mem: 15.4.8 GiB", 9),
    ("automodel-jsonl-tps-text", "automodel_gpt_oss_20b_h100_training.jsonl", '"tps": 31612.3775910932',
     '"tps": "31612.37x"', 4),
]


@pytest.mark.parametrize(("fixture", "good", "bad", "line"), [c[1:] for c in LOG_CASES], ids=[c[0] for c in LOG_CASES])
def test_garbled_log_figure(tmp_path: Path, fixture: str, good: str, bad: str, line: int) -> None:
    path = tmp_path / "train.log"
    text = (LOGS / fixture).read_text()
    assert good in text.splitlines()[line - 1], (fixture, line)
    path.write_text(text.replace(good, bad, 1))
    assert_rejected(["calibrate", "--log", path, "--hardware", "h100-sxm"], str(path), f"line {line}",
                    folder=tmp_path)


@pytest.mark.parametrize("value", ["'nan'", "'1.9x'", "'inf'"])
def test_hf_trainer_metric_not_a_number(tmp_path: Path, value: str) -> None:
    path = tmp_path / "train.log"
    path.write_text((LOGS / "hf_trainer_ddp_gpt2.log").read_text().replace("1.963", value, 1))
    assert_rejected(["calibrate", "--log", path, "--hardware", "h100-sxm"], str(path), "train_samples_per_second",
                    folder=tmp_path)


# --- DeepSpeed JSON ----------------------------------------------------------------------------------------------
def deepspeed_check(path: Path) -> list[object]:
    return ["check", "--deepspeed", path, "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "64",
            "--seq-len", "4096"]


@pytest.mark.parametrize("value", [[1], True, 1, "full"])
def test_deepspeed_activation_checkpointing_must_be_a_mapping(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**DEEPSPEED, "activation_checkpointing": value}))
    assert_rejected(deepspeed_check(path), str(path), "activation_checkpointing", "expected a mapping",
                    folder=tmp_path)


@pytest.mark.parametrize("key", ["stage3_param_persistence_threshold", "stage3_max_live_parameters",
                                 "reduce_bucket_size", "sub_group_size"])
@pytest.mark.parametrize("value", [HUGE, -HUGE, 1e30, float("inf"), "1e6", True, [1], 0.5])
def test_deepspeed_zero_size_setting(tmp_path: Path, key: str, value: Any) -> None:
    path = tmp_path / "ds.json"
    zero = {**DEEPSPEED["zero_optimization"], key: value}
    path.write_text(json.dumps({**DEEPSPEED, "zero_optimization": zero}).replace("Infinity", "1e400"))
    assert_rejected(deepspeed_check(path), str(path), f"zero_optimization.{key}", folder=tmp_path)


@pytest.mark.parametrize("value", [5e8, 500000000, "auto", 2**53])
def test_deepspeed_zero_size_setting_accepted(tmp_path: Path, value: Any) -> None:
    """DeepSpeed configs write sizes as 5e8 (DeepSpeedZeroConfig's own defaults are 5e8 and 1e5); those stay valid."""
    path = tmp_path / "ds.json"
    zero = {**DEEPSPEED["zero_optimization"], "stage3_param_persistence_threshold": value, "reduce_bucket_size": value}
    path.write_text(json.dumps({**DEEPSPEED, "zero_optimization": zero}))
    result, _ = invoke(deepspeed_check(path))
    assert result.exit_code in (0, 1), result.output


# --- torchtitan TOML ---------------------------------------------------------------------------------------------
def torchtitan_check(path: Path) -> list[object]:
    return ["check", "--torchtitan", path, "--hardware", "h100-sxm", "--gpus", "64"]


@pytest.mark.parametrize("value", ['"no"', '"false"', "0", "1", "[true]"])
def test_torchtitan_compile_enable_must_be_a_boolean(tmp_path: Path, value: str) -> None:
    path = tmp_path / "tt.toml"
    text = TORCHTITAN.split("[compile]", 1)
    assert len(text) == 2 and text[1].lstrip().startswith("enable")
    rest = text[1].lstrip().split("\n", 1)
    path.write_text(f"{text[0]}[compile]\nenable = {value}\n{rest[1]}")
    assert_rejected(torchtitan_check(path), str(path), "compile.enable", folder=tmp_path)


def test_torchtitan_cpu_offload_must_be_a_boolean(tmp_path: Path) -> None:
    path = tmp_path / "tt.toml"
    path.write_text(replace(TORCHTITAN, "[training]\n", '[training]\nenable_cpu_offload = "no"\n'))
    assert_rejected(torchtitan_check(path), str(path), "training.enable_cpu_offload", folder=tmp_path)


@pytest.mark.parametrize("value", [str(HUGE), "16385", "0"])
def test_torchtitan_selective_ac_option_is_bounded(tmp_path: Path, value: str) -> None:
    path = tmp_path / "tt.toml"
    body = TORCHTITAN.replace('selective_ac_option = "op"', f'selective_ac_option = "{value}"')
    assert body != TORCHTITAN
    path.write_text(body)
    assert_rejected(torchtitan_check(path), str(path), "activation_checkpoint.selective_ac_option", folder=tmp_path)


@pytest.mark.parametrize(("setting", "value", "field"), [
    ("enable_fsdp_float8_all_gather", '"yes"', "float8.enable_fsdp_float8_all_gather"),
    ("enable_fsdp_float8_all_gather", "1", "float8.enable_fsdp_float8_all_gather"),
    ("precompute_float8_dynamic_scale_for_fsdp", '"true"', "float8.precompute_float8_dynamic_scale_for_fsdp"),
])
def test_torchtitan_float8_all_gather_settings_must_be_booleans(tmp_path: Path, setting: str, value: str,
                                                                field: str) -> None:
    path = tmp_path / "tt.toml"
    gather = "true" if setting != "enable_fsdp_float8_all_gather" else value
    extra = f"\n[float8]\nenable_fsdp_float8_all_gather = {gather}\n"
    if setting != "enable_fsdp_float8_all_gather":
        extra += f"{setting} = {value}\n"
    body = TORCHTITAN.replace("[model]\n", '[model]\nconverters = ["float8"]\n', 1) + extra
    assert '"float8"' in body
    path.write_text(body)
    assert_rejected(torchtitan_check(path), str(path), field, folder=tmp_path)
