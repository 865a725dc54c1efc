"""Training-log readers on real log lines (tests/fixtures/logs, sources in its SOURCES.md).

Expected figures are read off the fixture lines by hand: the first logged step and steps <= 3 are
warm-up; what is left is summarised by its median.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.engines import megatron
from planner.engines.logs import (
    GIB,
    detect_format,
    hf_training_arguments_fields,
    megatron_flags,
    read_log,
)
from planner.errors import PlannerError

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def _read(name: str, fmt: str | None = None):
    return read_log((LOGS / name).read_text(encoding="utf-8"), name, fmt)


def test_megatron_iterations_arguments_and_world_size():
    r = _read("megatron_mixtral_16xh100.log")
    assert r.format == "megatron"
    assert r.steps_logged == 3 and r.steps_used == (44, 45)  # iteration 43 is the first logged one
    assert r.step_seconds == pytest.approx((5.5338 + 5.7186) / 2)  # median of two: their mean
    assert r.tflops_per_gpu == pytest.approx((236.0 + 228.4) / 2)
    assert r.world_size == 16
    assert r.arguments["expert_model_parallel_size"] == "8"
    assert r.arguments["global_batch_size"] == "128"
    assert r.arguments["fp16"] == "False"


def test_megatron_arguments_become_the_flags_the_importer_reads():
    r = _read("megatron_mixtral_16xh100.log")
    flags = megatron_flags(r.arguments, megatron.READ_FLAGS)
    text = " ".join(flags)
    assert "--expert-model-parallel-size 8" in text
    assert "--global-batch-size 128" in text
    assert "--hidden-size 4096" in text and "--ffn-hidden-size 14336" in text
    assert "--group-query-attention" in flags
    assert "--fp16" not in flags  # printed False
    assert "--recompute-granularity" not in flags  # printed None


def test_megatron_without_throughput_field():
    r = _read("megatron_llama2_7b_tp2.log")
    assert r.steps_used == (10,)
    assert r.step_seconds == pytest.approx(14.6427)
    assert r.tflops_per_gpu is None


def test_megatron_log_without_iterations_is_refused():
    with pytest.raises(PlannerError, match="no usable step"):
        _read("megatron_no_steps.log")


def test_torchtitan_steps_after_warmup():
    r = _read("torchtitan_llama3_8b.log")
    assert r.format == "torchtitan"
    assert r.steps_used == (210, 220, 230, 240, 250)
    assert r.tokens_per_second_per_gpu == 5864  # median of 5593, 5868, 5869, 5864, 5862
    assert r.tflops_per_gpu == pytest.approx(339.59)
    assert r.peak_memory_bytes == pytest.approx(49.66 * GIB)


def test_torchtitan_only_warmup_is_refused():
    with pytest.raises(PlannerError, match="no usable step.*4"):
        _read("torchtitan_moe_warmup.log")


def test_deepspeed_current_samples_per_second():
    r = _read("deepspeed_timer.log")
    assert r.format == "deepspeed"
    assert r.steps_used == (18, 19, 20, 21, 22)
    assert r.samples_per_second == pytest.approx(155.10475468488542)
    assert r.peak_memory_bytes == pytest.approx(2.62 * GIB)


def test_deepspeed_older_format():
    r = _read("deepspeed_timer_2022.log")
    assert r.steps_used == (50,)
    assert r.samples_per_second == pytest.approx(83.73838805358588)


def test_hf_trainer_final_metrics():
    r = _read("hf_trainer_gaudi.log")
    assert r.format == "hf_trainer"
    assert r.step_seconds == pytest.approx(1 / 2.169)
    assert r.samples_per_second == pytest.approx(69.181)
    assert any("warm-up" in w for w in r.warnings)


def test_hf_trainer_before_steps_per_second_warns():
    r = _read("hf_trainer_ddp_gpt2.log")
    assert r.step_seconds is None and r.samples_per_second == pytest.approx(1.963)
    assert any("11818" in w for w in r.warnings)


@pytest.mark.parametrize(("name", "fmt"), [
    ("megatron_mixtral_16xh100.log", "megatron"), ("torchtitan_llama3_8b.log", "torchtitan"),
    ("deepspeed_timer.log", "deepspeed"), ("hf_trainer_gaudi.log", "hf_trainer"),
])
def test_format_is_detected(name, fmt):
    assert detect_format((LOGS / name).read_text(encoding="utf-8"), name) == fmt


def test_unknown_text_is_refused():
    with pytest.raises(PlannerError, match="not a log planner can read"):
        read_log("hello\n", "x.log")


def test_hf_training_arguments():
    fields = hf_training_arguments_fields({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 8,
                                           "bf16": True, "gradient_checkpointing": True, "fsdp": "full_shard auto_wrap"},
                                          gpus=16)
    assert fields == {"micro_batch": 4, "global_batch": 4 * 8 * 16, "dtype": "bf16", "recompute": "full", "zero": 3}
