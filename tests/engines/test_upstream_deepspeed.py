"""Upstream DeepSpeed configs (DeepSpeedExamples, accelerate's templates) read as DeepSpeed reads them.

Fixtures: tests/fixtures/engines/upstream/{deepspeed,accelerate}/ (repository, path and commit in SOURCES.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.engines.deepspeed import import_deepspeed
from planner.errors import PlannerError

UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "upstream"


def _config(name: str) -> dict:
    return json.loads((UPSTREAM / name).read_text())


def test_ulysses_sequence_parallel_size_splits_the_sequence():
    """DeepSpeedExamples' AutoSP benchmark: sequence_parallel_size 2 on 2 GPUs, train batch 1 = micro 1 x
    accumulation 1 x (world 2 / sp 2), DeepSpeedConfig's batch check. Read without it, dp was 2 and the valid
    batch was refused."""
    imp = import_deepspeed(_config("deepspeed/autosp_config.json"), gpus=2, given={"seq_len": 8192},
                           source="autosp_config.json")
    f = imp.fields
    assert (f["cp"], f["dp"], f["global_batch"], f["micro_batch"], f["zero"], f["grad_dtype"]) == (2, 1, 1, 1, 0,
                                                                                                   "bf16")
    assert any("Ulysses" in w for w in imp.warnings)


def test_bf16_zero0_with_fp32_accumulation_is_refused_as_deepspeed_refuses_it():
    """deepspeedai/DeepSpeed tests/unit/runtime/test_ds_initialize.py (commit edaa7221) lists (no ZeRO, bf16,
    fp32) among the combinations deepspeed.initialize refuses with NotImplementedError since 0.18.5. Here the
    AutoSP config with data_types.grad_accum_dtype fp32 added."""
    config = {**_config("deepspeed/autosp_config.json"), "data_types": {"grad_accum_dtype": "fp32"}}
    with pytest.raises(PlannerError, match="DeepSpeed >= 0.18.5 refuses it") as err:
        import_deepspeed(config, gpus=2, given={"seq_len": 8192}, source="autosp_config.json")
    assert err.value.field == "data_types.grad_accum_dtype"


@pytest.mark.parametrize("name", ["zero_stage1_config.json", "zero_stage2_config.json", "zero_stage3_config.json"])
def test_accelerate_templates_read_with_the_trainers_auto_batch(name):
    """accelerate's templates leave the batch "auto" (the Trainer fills it): the job's micro batch applies."""
    imp = import_deepspeed(_config(f"accelerate/deepspeed_config_templates/{name}"), gpus=8, given={"seq_len": 4096, "micro_batch": 2},
                           source=name)
    stage = int(name[len("zero_stage")])
    assert (imp.fields["zero"], imp.fields["micro_batch"], imp.fields["global_batch"]) == (stage, 2, 16)
    assert imp.fields["overlap_grad_reduce"] is True  # the templates set overlap_comm true


@pytest.mark.parametrize(("name", "field"), [
    ("zero_stage2_offload_config.json", "zero_optimization.offload_optimizer.device"),
    ("zero_stage3_offload_config.json", "zero_optimization.offload_optimizer.device"),
])
def test_accelerate_offload_templates_are_read_and_estimated(run_cli, name, field):
    """CPU offload is in the cost model (issue 11): the templates are estimated with host memory and the CPU step."""
    result = run_cli("check", "--deepspeed", UPSTREAM / "accelerate" / "deepspeed_config_templates" / name, "--model",
                     "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "8", "--seq-len", "4096", "--micro-batch", "1")
    assert result.exit_code in (0, 1), result.output
    assert "GiB per node" in result.stdout and "CPU optimizer step" in result.stdout
