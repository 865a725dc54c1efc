"""Hugging Face Trainer launches (TrainingArguments command lines, accelerate configs) -> layouts, and back.

Upstream fixtures: tests/fixtures/engines/upstream/accelerate/ (repository, path, commit in ../SOURCES.md).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from planner.engines.hf_trainer import import_hf_trainer, parse_command
from planner.errors import PlannerError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ACCELERATE = FIXTURES / "engines" / "upstream" / "accelerate"
SEED = ('torchrun --nproc_per_node=4 train.py --model_name_or_path Qwen/Qwen2.5-7B --fsdp "full_shard auto_wrap" '
        '--bf16 true --gradient_checkpointing true --per_device_train_batch_size 2 --gradient_accumulation_steps 8')


def _check(run_cli, *args: str):
    result = run_cli("check", *args, "--hardware", "h100-sxm", "--format", "json", "--no-suggest")
    return result, (json.loads(result.stdout)[0] if result.exit_code in (0, 1) else None)


def test_seed_command_line_is_fsdp_full_shard_on_the_launchers_gpus(run_cli):
    """torchrun starts 4 processes; --fsdp full_shard is ZeRO 3 over them, --gradient_checkpointing recomputes
    every layer, FSDP keeps fp32 gradients under bf16 autocast; global batch = 2 x 8 x 4 = 64."""
    result, got = _check(run_cli, "--hf-trainer", SEED, "--seq-len", "4096")
    assert result.exit_code in (0, 1), result.output
    c = got["config"]
    assert got["model"] == "qwen2.5-7b" and c["gpus"] == 4
    assert (c["dp"], c["zero"], c["recompute"], c["dtype"], c["grad_dtype"]) == (4, 3, "full", "bf16", "fp32")
    assert (c["micro_batch"], c["global_batch"], c["seq_len"]) == (2, 64, 4096)
    assert got["params"] == 7_615_616_512  # transformers' count for Qwen/Qwen2.5-7B


def test_python_m_torch_distributed_run_and_the_scripts_sequence_flag():
    cmd = parse_command("python -m torch.distributed.run --nproc_per_node 8 --nnodes 2 train.py "
                        "--model_name_or_path x --bf16 --max_seq_length 8192 --per_device_train_batch_size 1", "t")
    assert cmd.launcher == "torchrun" and cmd.gpus == 16
    imp = import_hf_trainer(cmd, None, gpus=16, given={}, source="t")
    assert (imp.fields["seq_len"], imp.fields["zero"], imp.fields["recompute"]) == (8192, 0, "none")  # DDP
    with pytest.raises(PlannerError, match="starts 16 processes"):
        import_hf_trainer(cmd, None, gpus=8, given={}, source="t")


def test_accelerate_fsdp_template(run_cli):
    """accelerate's examples/config_yaml_templates/fsdp.yaml: FULL_SHARD over its 2 processes, bf16, no
    activation checkpointing."""
    result, got = _check(run_cli, "--accelerate-config", ACCELERATE / "config_yaml_templates" / "fsdp.yaml",
                         "--engine-args", "accelerate launch train.py --model_name_or_path meta-llama/Llama-3.1-8B "
                         "--per_device_train_batch_size 1 --gradient_accumulation_steps 4", "--seq-len", "4096")
    assert result.exit_code in (0, 1), result.output
    c = got["config"]
    assert (c["gpus"], c["zero"], c["recompute"], c["dtype"], c["grad_dtype"], c["global_batch"]) == \
        (2, 3, "none", "bf16", "fp32", 8)


def test_accelerate_deepspeed_template_reads_its_json(run_cli):
    """examples/config_yaml_templates/deepspeed.yaml points at ../deepspeed_config_templates/zero_stage1_config.json
    (fp16, ZeRO 1, gradient_accumulation_steps 1, batch sizes "auto")."""
    config = ACCELERATE / "config_yaml_templates" / "deepspeed.yaml"
    cmd = ("accelerate launch train.py --model_name_or_path meta-llama/Llama-3.1-8B --fp16 true "
           "--per_device_train_batch_size 2 --gradient_checkpointing true")
    result, got = _check(run_cli, "--accelerate-config", config, "--engine-args", cmd, "--seq-len", "4096")
    assert result.exit_code in (0, 1), result.output
    c = got["config"]
    assert (c["gpus"], c["zero"], c["dtype"], c["grad_dtype"], c["recompute"], c["global_batch"]) == \
        (2, 1, "fp16", "fp16", "full", 4)
    # the Trainer refuses a DeepSpeed config that disagrees with its flags: fp16.enabled true with --bf16
    bad, _ = _check(run_cli, "--accelerate-config", config, "--engine-args", cmd.replace("--fp16", "--bf16"),
                    "--seq-len", "4096")
    assert bad.exit_code == 2 and "fp16.enabled" in bad.output


def test_fsdp2_reshard_after_forward_false_is_zero2():
    imp = import_hf_trainer(None, {"distributed_type": "FSDP", "mixed_precision": "bf16", "num_processes": 8,
                                   "fsdp_config": {"fsdp_version": 2, "fsdp_reshard_after_forward": False,
                                                   "fsdp_activation_checkpointing": True}},
                            gpus=8, given={"seq_len": 2048, "micro_batch": 1}, source="a.yaml")
    assert (imp.fields["zero"], imp.fields["recompute"]) == (2, "full")


def test_fsdp_offload_option_is_read_as_parameter_and_optimizer_offload(run_cli):
    """--fsdp "full_shard offload auto_wrap": FSDP CPUOffload(offload_params=True) keeps parameter shards, their
    gradients and the optimizer step on the host; the check reports host memory and the CPU step."""
    result, got = _check(run_cli, "--hf-trainer", SEED.replace("full_shard auto_wrap", "full_shard offload auto_wrap"),
                         "--seq-len", "4096")
    assert result.exit_code in (0, 1), result.output
    assert got["config"]["engine"] == "fsdp" and got["config"]["zero"] == 3
    assert got["config"]["offload_params"] is True and got["config"]["offload_optimizer"] is True
    assert got["memory"]["host_bytes_per_node"] > 0 and got["time"]["cpu_optimizer_seconds"] > 0
    on_gpu, _ = _check(run_cli, "--hf-trainer", SEED, "--seq-len", "4096")
    assert json.loads(on_gpu.stdout)[0]["memory"]["total_bytes"] > got["memory"]["total_bytes"]


def test_accelerate_fsdp_offload_params_is_read(run_cli, tmp_path):
    config = tmp_path / "fsdp.yaml"
    config.write_text((ACCELERATE / "config_yaml_templates" / "fsdp.yaml").read_text()
                      .replace("fsdp_offload_params: false", "fsdp_offload_params: true"))
    result, got = _check(run_cli, "--accelerate-config", config, "--engine-args",
                         "accelerate launch train.py --model_name_or_path meta-llama/Llama-3.1-8B", "--seq-len", "4096")
    assert result.exit_code in (0, 1), result.output
    assert got["config"]["offload_params"] is True and got["memory"]["host_bytes_per_node"] > 0


def test_nvme_offload_is_refused_naming_the_setting(run_cli, tmp_path):
    config = tmp_path / "ds.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nmixed_precision: bf16\n"
                      "num_processes: 8\ndeepspeed_config:\n  zero_stage: 3\n  offload_param_device: nvme\n")
    result, _ = _check(run_cli, "--accelerate-config", config, "--engine-args",
                       "accelerate launch train.py --model_name_or_path meta-llama/Llama-3.1-8B", "--seq-len", "4096")
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1
    assert "deepspeed_config.offload_param_device" in result.output


def test_model_from_a_config_json_folder_and_unknown_ids(run_cli, tmp_path):
    folder = tmp_path / "my-qwen"
    folder.mkdir()
    shutil.copy(FIXTURES / "hf" / "qwen3-8b.json", folder / "config.json")
    result, got = _check(run_cli, "--hf-trainer", SEED.replace("Qwen/Qwen2.5-7B", str(folder)), "--seq-len", "4096")
    assert result.exit_code in (0, 1), result.output
    assert got["params"] == 8_190_735_360  # transformers' count for Qwen/Qwen3-8B
    unknown, _ = _check(run_cli, "--hf-trainer", SEED.replace("Qwen/Qwen2.5-7B", "someone/unknown-model"),
                        "--seq-len", "4096")
    assert unknown.exit_code == 2 and "not in planner's catalog" in unknown.output


def test_job_file_with_an_hf_trainer_engine(run_cli, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(f"hardware: h100-sxm\ngpus: 4\ntraining: {{seq_len: 4096}}\nengine:\n  format: hf_trainer\n"
                   f"  args: {json.dumps(SEED)}\n")
    result = run_cli("check", job, "--format", "json", "--no-suggest")
    assert result.exit_code in (0, 1), result.output
    assert json.loads(result.stdout)[0]["config"]["zero"] == 3


def test_export_then_check_gives_the_same_layout(run_cli, tmp_path):
    out = tmp_path / "train_hf.sh"
    exported = run_cli("export", "--to", "hf_trainer", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus",
                       "16", "--zero", "3", "--recompute", "full", "--micro-batch", "2", "--global-batch", "64",
                       "--seq-len", "4096", "--grad-dtype", "fp32", "--out", out)
    assert exported.exit_code == 0, exported.output
    text = out.read_text()
    assert "--fsdp 'full_shard auto_wrap'" in text and "--model_name_or_path meta-llama/Llama-3.1-8B" in text
    result, got = _check(run_cli, "--hf-trainer", out)
    assert result.exit_code == 0, result.output
    c = got["config"]
    assert (c["gpus"], c["zero"], c["recompute"], c["micro_batch"], c["global_batch"], c["seq_len"]) == \
        (16, 3, "full", 2, 64, 4096)


def test_accelerate_config_without_mixed_precision_is_fp32_training_refused(run_cli):
    """accelerate's tests/test_configs/latest_fsdp.yaml has mixed_precision 'no': fp32 training, not modelled."""
    result, _ = _check(run_cli, "--accelerate-config", ACCELERATE / "test_configs" / "latest_fsdp.yaml",
                       "--engine-args", "accelerate launch train.py --model_name_or_path meta-llama/Llama-3.1-8B",
                       "--seq-len", "2048")
    assert result.exit_code == 2 and "fp32" in result.output and len(result.output.splitlines()) == 1


def test_trainer_with_a_deepspeed_offload_config_is_estimated(run_cli):
    """The Trainer pointed at accelerate's ZeRO-3 CPU-offload template runs under the deepspeed engine, with host
    memory and the CPU optimizer step reported."""
    seed = SEED.replace('--fsdp "full_shard auto_wrap"', "--deepspeed " + str(
        ACCELERATE / "deepspeed_config_templates" / "zero_stage3_offload_config.json")).replace(
        "--bf16", "--fp16").replace("--gradient_accumulation_steps 8", "--gradient_accumulation_steps 1")
    result = run_cli("check", "--hf-trainer", seed, "--hardware", "h100-sxm", "--seq-len", "2048", "--format", "json")
    assert result.exit_code in (0, 1), result.output
    got = json.loads(result.stdout)[0]
    assert got["config"]["engine"] == "deepspeed" and got["config"]["offload_optimizer"] is True
    assert got["memory"]["host_bytes_per_node"] > 0 and got["time"]["cpu_optimizer_seconds"] > 0


HUNYUAN = FIXTURES / "engines" / "upstream" / "hunyuan"


def test_a_launch_piped_to_tee_passes_the_program_nothing_after_the_pipe():
    """Hunyuan-A13B's examples/train_demo.sh ends its deepspeed launch with `--bf16 | tee ${log_file}`: bash gives
    train.py the flags before the pipe."""
    command = parse_command((HUNYUAN / "train_demo.sh").read_text(), "train_demo.sh")
    assert command.launcher == "deepspeed" and command.args["bf16"] is True and "tee" not in command.args
    assert command.deepspeed_path == "ds_zero3_offload_no_auto.json"
    piped = parse_command("torchrun --nproc_per_node 8 train.py --bf16 true 2>&1 | tee log.txt", "cmd")
    assert piped.args == {"bf16": "true"}


def test_hunyuan_launch_with_a_placeholder_model_path_takes_the_given_model(run_cli, monkeypatch):
    """The script's --model_name_or_path is "your_model_path" (a placeholder): with --model the check runs on that
    model. Its DeepSpeed JSON (ZeRO-3, optimizer on the CPU, micro-batch 1, one accumulation step) and the Trainer's
    --gradient_checkpointing and --max_seq_length 1024 make the layout."""
    monkeypatch.chdir(HUNYUAN)
    result, got = _check(run_cli, "--hf-trainer", "train_demo.sh", "--model",
                         str(FIXTURES / "hf" / "hunyuan-a13b.json"), "--gpus", "8")
    assert result.exit_code in (0, 1), result.output
    c = got["config"]
    assert (c["engine"], c["zero"], c["offload_optimizer"], c["recompute"]) == ("deepspeed", 3, True, "full")
    assert (c["micro_batch"], c["global_batch"], c["seq_len"], c["dtype"]) == (1, 8, 1024, "bf16")
    assert got["params"] == 80_393_183_232


def test_an_unresolvable_model_path_without_model_is_one_error(run_cli, monkeypatch):
    monkeypatch.chdir(HUNYUAN)
    result = run_cli("check", "--hf-trainer", "train_demo.sh", "--hardware", "h100-sxm", "--gpus", "8")
    assert result.exit_code == 2
    assert "your_model_path" in result.stderr and "--model" in result.stderr and "Traceback" not in result.output


def test_a_model_with_mtp_layers_trains_none_under_the_trainer(run_cli, tmp_path):
    """Qwen3.5's config counts one MTP layer, which transformers never builds: the Trainer export maps it to 0 with
    a note, and reading the launch back gives the same prediction (it gave 111.7 GiB for a file whose header said
    100.0)."""
    model = FIXTURES / "hf" / "qwen3.5-27b.json"
    out = tmp_path / "train.sh"
    layout = ["--hardware", "h100-sxm", "--gpus", "16", "--global-batch", "64", "--seq-len", "4096", "--zero", "3",
              "--recompute", "full"]
    exported = run_cli("export", "--model", str(model), *layout, "--to", "hf_trainer", "--out", str(out))
    assert exported.exit_code == 0, exported.output
    assert "mtp_layers 1 -> 0" in exported.stderr
    header = re.search(r"Predicted peak memory: ([\d.]+) GiB", out.read_text())
    result, got = _check(run_cli, "--hf-trainer", str(out), "--model", str(model), "--gpus", "16", "--seq-len", "4096")
    assert result.exit_code in (0, 1), result.output
    assert header is not None and f"{got['memory']['total_bytes'] / 2**30:.1f}" == header.group(1)
    assert got["config"]["mtp_layers"] == 0


@pytest.mark.parametrize("launch,started", [("python train.py --bf16", "1 process but"),
                                            ("torchrun --nproc_per_node 4 train.py --bf16", "4 processes but")])
def test_a_launcher_gpu_count_that_disagrees_with_the_job_is_named_in_the_error(launch, started):
    command = parse_command(launch, "launch.sh")
    if command.gpus is None:
        pytest.skip("this launcher gives no process count")
    with pytest.raises(PlannerError, match=f"the launcher starts {started}"):
        import_hf_trainer(command, None, gpus=8, given={}, source="launch.sh")


@pytest.mark.parametrize(("optim", "moments"), [("adamw_bnb_8bit", "int8"), ("adamw_8bit", "int8"),
                                               ("paged_adamw_8bit", "int8"), ("paged_adamw_32bit", None),
                                               ("adamw_torch_fused", None)])
def test_bitsandbytes_8bit_adamw_keeps_uint8_moments(optim, moments):
    cmd = parse_command("torchrun --nproc_per_node 8 train.py --model_name_or_path x --bf16 --max_seq_length 4096 "
                        f"--per_device_train_batch_size 1 --optim {optim}", "t")
    fields = import_hf_trainer(cmd, None, gpus=8, given={}, source="t").fields
    assert fields["optimizer"] == "adam" and fields.get("optimizer_state_dtype") == moments
    with pytest.raises(PlannerError, match="--optim adafactor is not modelled"):
        import_hf_trainer(parse_command("torchrun --nproc_per_node 8 train.py --model_name_or_path x --bf16 "
                                        "--optim adafactor", "t"), None, gpus=8, given={}, source="t")


TRL = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "upstream" / "trl"


def _trl(name: str, gpus: int = 1, **given):
    text = (TRL / name).read_text(encoding="utf-8")
    return import_hf_trainer(parse_command(text, name), None, gpus=gpus, given=given, source=name)


def test_trls_sft_lora_example_is_lora_with_trls_defaults():
    # trl/scripts/sft.py's own LoRA example: --use_peft --lora_r 32, no target modules (PEFT's default for the model
    # type: q_proj, v_proj), no --bf16 (TRL's default is bf16), no --max_length (SFTConfig's 1024, packed)
    imported = _trl("sft_lora.sh")
    fields = imported.fields
    assert (fields["lora_rank"], fields["lora_targets"], fields["dtype"], fields["seq_len"]) == (32, "qkv", "bf16",
                                                                                                1024)
    assert (fields["micro_batch"], fields["global_batch"]) == (2, 2 * 8)
    assert any("q_proj and v_proj" in w for w in imported.warnings)
    assert not any("--eos_token" in w or "--use_peft" in w and "not a setting" in w for w in imported.warnings)


def test_trls_all_linear_lora_with_a_high_rank():
    fields = _trl("lora_without_regret_local.sh").fields  # docs/source/lora_without_regret.md, the local command
    assert (fields["lora_rank"], fields["lora_targets"]) == (256, "all_linear")


@pytest.mark.parametrize(("flags", "expected"), [
    ("--lora_target_modules q_proj k_proj v_proj o_proj", "attention"),
    ("--lora_target_modules q_proj v_proj", "qkv"),
    ("--lora_target_modules q_proj v_proj gate_proj", "all_linear"),
    ("--lora_target_modules all-linear", "all_linear"),
])
def test_trl_target_modules_take_several_words(flags, expected):
    command = parse_command(f"python trl/scripts/sft.py --model_name_or_path x --max_length 2048 --use_peft {flags} "
                            "--report_to wandb tensorboard", "c.sh")
    fields = import_hf_trainer(command, None, gpus=1, given={}, source="c.sh").fields
    assert (fields["lora_targets"], fields["lora_rank"], fields["seq_len"]) == (expected, 16, 2048)


@pytest.mark.parametrize(("flag", "needle"), [("--use_dora", "DoRA"), ("--load_in_4bit", "QLoRA")])
def test_trl_dora_and_qlora_are_refused(flag, needle):
    command = parse_command(f"python trl/scripts/sft.py --use_peft {flag} --max_length 1024", "c.sh")
    with pytest.raises(PlannerError, match=needle):
        import_hf_trainer(command, None, gpus=1, given={}, source="c.sh")


def test_lora_flags_without_use_peft_train_every_weight():
    command = parse_command("python trl/scripts/sft.py --lora_r 8 --max_length 1024", "c.sh")
    imported = import_hf_trainer(command, None, gpus=1, given={}, source="c.sh")
    assert imported.fields.get("lora_rank") is None and any("without --use_peft" in w for w in imported.warnings)


def test_torch_compile_compiles_the_model_and_its_loss():
    # TrainingArguments --torch_compile: the model (and the loss its forward computes) under torch.compile
    from planner.engines.hf_trainer import import_hf_trainer, parse_command

    text = ("accelerate launch train.py --model_name_or_path meta-llama/Llama-3.1-8B --bf16 true "
            "--per_device_train_batch_size 1 --max_seq_length 4096 --torch_compile true")
    imported = import_hf_trainer(parse_command(text, "train.sh"), None, gpus=8, given={}, source="train.sh")
    assert imported.fields["compile"] is True and "compile_loss" not in imported.fields
    assert not any("torch_compile" in w for w in imported.warnings)
