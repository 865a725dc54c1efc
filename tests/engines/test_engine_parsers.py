"""Every export passes the target engine's own argument/config parsing (where it runs without GPUs).

Skipped unless the engines are there; none of them is a dependency of planner. How to run (docs/check.md):

    .venv/bin/pip install torch==2.13.0 triton tyro tokenizers six regex  # CPU wheels
    DS_BUILD_OPS=0 .venv/bin/pip install deepspeed                           # DeepSpeedConfig
    git -C Megatron-LM archive c1e938b0 megatron | tar -x -C /tmp/mlm          # Python 3.11: before May 2026
    git -C torchtitan archive 238fa995 torchtitan | tar -x -C /tmp/tt          # the last TOML-config commit
    PLANNER_MEGATRON_SRC=/tmp/mlm PLANNER_TORCHTITAN_SRC=/tmp/tt .venv/bin/python -m pytest tests/engines/test_engine_parsers.py

- Megatron-LM: megatron.training.arguments.parse_args (argparse, allow_abbrev=False) and validate_args with
  WORLD_SIZE = the layout's GPUs (its divisibility, pipeline-split, fp8 and batch assertions); the one device
  query it makes (get_device_arch_version) answers 9, an H100.
- DeepSpeed: deepspeed.runtime.config.DeepSpeedConfig (every section's pydantic model and the batch
  assertion train = micro x accumulation x data-parallel world), with an mpu giving the world DeepSpeed
  computes for the run.
- torchtitan: torchtitan.config.manager.ConfigManager.parse_args(["--job.config_file", FILE]) (tyro over
  JobConfig), and the [model] name and flavor looked up in torchtitan's train-spec registry.
- Hugging Face Trainer: transformers' HfArgumentParser(TrainingArguments) over the command's script arguments
  (with --use_cpu true, since TrainingArguments refuses bf16 without a GPU); what it leaves is the script's own.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from planner.engines.export import render_export
from planner.engines.load import load_hardware, load_model
from planner.engines.megatron import split_launch_text
from planner.errors import PlannerError
from planner.training.estimate import estimate
from planner.training.rules import resolve_layout

sys.path.insert(0, str(Path(__file__).parent))
from test_roundtrip import CASES  # noqa: E402  (the same feature combinations as the round trip)
from test_roundtrip_moe import MOE_CASES  # noqa: E402

HW = load_hardware("h100-sxm").spec


def _export(name: str, fmt: str):
    model_id, gpus, fields = CASES[name]
    model = load_model(model_id).spec
    layout = resolve_layout(model, gpus, **fields)
    try:
        return render_export(fmt, model_id, model, HW, layout, estimate(model, HW, layout), hardware_id="h100-sxm")
    except PlannerError:
        return None  # refused by planner (tests/engines/test_roundtrip.py says which and why)


def _source(variable: str, package: str) -> Path:
    folder = os.environ.get(variable)
    if not folder or not (Path(folder) / package).is_dir():
        pytest.skip(f"set {variable} to a folder holding the {package} package (docs/check.md)")
    return Path(folder)


# --- Megatron-LM ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def megatron_arguments():
    folder = _source("PLANNER_MEGATRON_SRC", "megatron")
    pytest.importorskip("torch")
    sys.path.insert(0, str(folder))
    try:
        import megatron.training.arguments as arguments
    except ImportError as err:
        pytest.skip(f"Megatron-LM does not import here: {err}")
    arguments.get_device_arch_version = lambda: 9  # validate_args asks the GPU; answer as an H100
    import torch

    torch.cuda.get_device_capability = lambda *a: (9, 0)  # --moe-grouped-gemm's check, answered as an H100
    return arguments


def _megatron_args(exported, megatron_arguments, monkeypatch, *extra: str):
    gpus = exported.layout.gpus
    flags = split_launch_text(exported.text, "megatron_args.sh")
    monkeypatch.setattr(sys, "argv", ["pretrain_gpt.py", *flags, "--mock-data", "--tokenizer-type", "NullTokenizer",
                                      *extra])
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", str(gpus))):
        monkeypatch.setenv(key, value)
    # Megatron asks for CUDA_DEVICE_MAX_CONNECTIONS=1 with tensor/context parallelism, and unset with its FSDP
    if exported.layout.zero >= 2:
        monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    else:
        monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    args = megatron_arguments.parse_args()
    megatron_arguments.validate_args(args, {})
    return args


@pytest.mark.parametrize("name", list(CASES))
def test_megatron_export_passes_megatrons_argparse_and_validate_args(name, megatron_arguments, monkeypatch):
    exported = _export(name, "megatron")
    if exported is None:
        pytest.skip("planner refuses this layout for Megatron-LM")
    args = _megatron_args(exported, megatron_arguments, monkeypatch)
    lay = exported.layout
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size, args.data_parallel_size) == \
        (lay.tp, lay.pp, lay.dp)
    assert args.global_batch_size == lay.global_batch and args.micro_batch_size == lay.micro_batch


def _moe_export(name: str):
    model_id, gpus, fields, runs = MOE_CASES[name]
    model = load_model(model_id).spec
    layout = resolve_layout(model, gpus, **fields)
    return render_export("megatron", model_id, model, HW, layout, estimate(model, HW, layout), hardware_id="h100-sxm")


@pytest.mark.parametrize("name", [n for n, case in MOE_CASES.items() if "megatron" in case[3]])
def test_megatron_moe_export_passes_megatrons_transformer_config(name, megatron_arguments, monkeypatch):
    """The MoE cases' flags through parse_args, validate_args and core_transformer_config_from_args, whose
    TransformerConfig.__post_init__ holds Megatron-Core's MoE asserts (overlap, dispatcher, capacity padding,
    CUDA-graph scopes, MTP). --no-rope-fusion: the fused RoPE needs Transformer Engine, which a CPU run lacks."""
    exported = _moe_export(name)
    args = _megatron_args(exported, megatron_arguments, monkeypatch, "--no-rope-fusion")
    config = megatron_arguments.core_transformer_config_from_args(args)
    lay = exported.layout
    assert config.expert_tensor_parallel_size == lay.expert_tp
    backend = {"deepep": ("flex", "deepep"), "hybridep": ("flex", "hybridep")}
    kind, flex = backend.get(lay.moe_dispatcher, (lay.moe_dispatcher, None))
    assert config.moe_token_dispatcher_type == kind and (flex is None or config.moe_flex_dispatcher_backend == flex)
    assert config.overlap_moe_expert_parallel_comm == lay.moe_ep_overlap
    assert config.moe_expert_capacity_factor == lay.moe_capacity_factor
    assert (config.cuda_graph_impl != "none") == bool(lay.cuda_graph_scope)
    model_mtp = load_model(MOE_CASES[name][0]).spec.mtp_layers
    assert (config.mtp_num_layers or 0) == (model_mtp if lay.mtp_layers is None else lay.mtp_layers)


# --- DeepSpeed ----------------------------------------------------------------------------------------
class _Mpu:
    """The data-parallel world DeepSpeedConfig's batch check uses for a run."""

    def __init__(self, world: int) -> None:
        self.world = world

    def get_data_parallel_world_size(self) -> int:
        return self.world

    def get_data_parallel_rank(self) -> int:
        return 0


@pytest.fixture(scope="module")
def deepspeed_config():
    pytest.importorskip("torch")
    deepspeed = pytest.importorskip("deepspeed")
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29541")
    deepspeed.init_distributed(dist_backend="gloo")
    from deepspeed.runtime.config import DeepSpeedConfig

    return DeepSpeedConfig


@pytest.mark.parametrize("name", list(CASES))
def test_deepspeed_export_passes_deepspeedconfig(name, deepspeed_config):
    exported = _export(name, "deepspeed")
    if exported is None:
        pytest.skip("planner refuses this layout for DeepSpeed")
    config = json.loads(exported.text)
    lay = exported.layout
    # PipelineModule's mpu counts data-parallel ranks; without one DeepSpeed divides the world by Ulysses' degree
    world = lay.dp if lay.pp > 1 else lay.gpus // lay.cp
    parsed = deepspeed_config(config, mpu=_Mpu(world))
    assert parsed.train_micro_batch_size_per_gpu == lay.micro_batch
    assert parsed.gradient_accumulation_steps == lay.global_batch // (lay.micro_batch * lay.dp)
    assert parsed.zero_optimization_stage == lay.zero
    with pytest.raises(AssertionError, match="Check batch related parameters"):  # the check is live
        deepspeed_config({**config, "train_batch_size": parsed.train_batch_size + 1,
                          "train_micro_batch_size_per_gpu": lay.micro_batch,
                          "gradient_accumulation_steps": parsed.gradient_accumulation_steps}, mpu=_Mpu(world))


@pytest.mark.parametrize("name", [n for n, case in MOE_CASES.items() if "deepspeed" in case[3]])
def test_deepspeed_bf16_state_export_passes_deepspeedconfig(name, deepspeed_config):
    """bf16_master_weights_and_grads and bf16_optimizer_states where DeepSpeedConfig reads them (its ZeRO-stage
    asserts included)."""
    model_id, gpus, fields, _ = MOE_CASES[name]
    model = load_model(model_id).spec
    layout = resolve_layout(model, gpus, **fields)
    exported = render_export("deepspeed", model_id, model, HW, layout, estimate(model, HW, layout))
    lay = exported.layout
    parsed = deepspeed_config(json.loads(exported.text), mpu=_Mpu(lay.gpus // lay.cp))
    assert parsed.bfloat16_config.bf16_master_weights_and_grads == (lay.master_weights_dtype == "bf16")
    assert parsed.bfloat16_config.bf16_optimizer_states == (lay.optimizer_state_dtype == "bf16")


# --- torchtitan -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torchtitan_manager():
    folder = _source("PLANNER_TORCHTITAN_SRC", "torchtitan")
    pytest.importorskip("torch")
    sys.path.insert(0, str(folder))
    try:
        from torchtitan.config.manager import ConfigManager
        from torchtitan.protocols.train_spec import get_train_spec
    except ImportError as err:
        pytest.skip(f"torchtitan does not import here: {err}")
    return ConfigManager, get_train_spec


@pytest.mark.parametrize("name", list(CASES))
def test_torchtitan_export_passes_configmanager(name, torchtitan_manager, tmp_path):
    exported = _export(name, "torchtitan")
    if exported is None:
        pytest.skip("planner refuses this layout for torchtitan")
    manager, get_train_spec = torchtitan_manager
    path = tmp_path / "torchtitan.toml"
    path.write_text(exported.text)
    extra = []
    if "transformers_modeling_backend" in exported.text:
        extra = ["--job.custom_config_module=torchtitan.experiments.transformers_modeling_backend.job_config"]
    try:
        config = manager().parse_args(["--job.config_file", str(path), *extra])
        spec = get_train_spec(config.model.name)
    except ImportError as err:  # the transformers backend needs transformers and datasets
        pytest.skip(f"torchtitan's {extra and 'transformers backend' or 'model'} does not import here: {err}")
    assert config.model.flavor in spec.model_args
    lay = exported.layout
    assert (config.parallelism.tensor_parallel_degree, config.parallelism.pipeline_parallel_degree,
            config.parallelism.context_parallel_degree) == (lay.tp, lay.pp, lay.cp)
    assert config.training.seq_len == lay.seq_len and config.training.global_batch_size == lay.global_batch


@pytest.mark.parametrize("name", [n for n, case in MOE_CASES.items() if "torchtitan" in case[3]])
def test_torchtitan_moe_export_passes_configmanager(name, torchtitan_manager, tmp_path):
    """expert_tensor_parallel_degree, expert_parallel_comm_backend, the DualPipeV schedule and training.dtype
    as JobConfig types them."""
    model_id, gpus, fields, _ = MOE_CASES[name]
    model = load_model(model_id).spec
    layout = resolve_layout(model, gpus, **fields)
    exported = render_export("torchtitan", model_id, model, HW, layout, estimate(model, HW, layout))
    manager, _ = torchtitan_manager
    path = tmp_path / "torchtitan.toml"
    path.write_text(exported.text)
    config = manager().parse_args(["--job.config_file", str(path)])
    lay, par = exported.layout, config.parallelism
    assert (par.expert_parallel_degree, par.expert_tensor_parallel_degree) == (lay.ep, lay.expert_tp if lay.ep > 1
                                                                                else 1)
    assert par.expert_parallel_comm_backend == ("deepep" if lay.moe_dispatcher == "deepep" else "standard")
    assert (par.pipeline_parallel_schedule == "DualPipeV") == lay.moe_ep_overlap
    assert config.training.dtype == ("bfloat16" if lay.master_weights_dtype == "bf16" else "float32")


# --- Hugging Face Trainer ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
def test_hf_trainer_export_passes_trainingarguments(name):
    pytest.importorskip("torch")
    pytest.importorskip("accelerate")
    transformers = pytest.importorskip("transformers")
    exported = _export(name, "hf_trainer")
    if exported is None:
        pytest.skip("planner refuses this layout for the Hugging Face Trainer")
    command = next(line for line in exported.text.splitlines() if line.startswith("torchrun"))
    words = shlex.split(command)
    args = [*words[words.index("train.py") + 1:], "--use_cpu", "true"]
    parser = transformers.HfArgumentParser((transformers.TrainingArguments,))
    parsed, rest = parser.parse_args_into_dataclasses(args, return_remaining_strings=True)
    lay = exported.layout
    assert parsed.per_device_train_batch_size == lay.micro_batch
    assert parsed.gradient_accumulation_steps == lay.global_batch // (lay.micro_batch * lay.dp)
    assert parsed.gradient_checkpointing == (lay.recompute == "full")
    assert bool(parsed.fsdp) == (lay.zero >= 2)
    assert rest[::2] == ["--model_name_or_path", "--max_seq_length"]  # the script's own arguments
