"""DeepSpeed JSON -> Layout fields: ZeRO, batch rules (incl. "auto"), precision, checkpointing, offload refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.engines.deepspeed import import_deepspeed
from planner.engines.load import load_hardware, load_model
from planner.errors import PlannerError
from planner.training.estimate import estimate
from planner.training.rules import resolve_layout

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "deepspeed"


def read(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def test_zero3_config_reads_stage_batch_precision_and_checkpointing():
    imp = import_deepspeed(read("zero3_bf16.json"), gpus=64, given={"seq_len": 4096}, source="ds.json")
    f = imp.fields
    assert (f["zero"], f["dtype"], f["recompute"], f["dp"]) == (3, "bf16", "full", 64)
    # train_batch 512 = micro 2 x accum 4 x dp 64
    assert (f["global_batch"], f["micro_batch"]) == (512, 2)
    # DeepSpeed accumulates bf16 gradients in bf16 under ZeRO (engine.get_data_types)
    assert f["grad_dtype"] == "bf16"
    # the section configures DeepSpeed's checkpointing API; whether the model checkpoints is the model's business
    assert len(imp.warnings) == 1 and "--gradient_checkpointing" in imp.warnings[0]
    assert import_deepspeed(read("zero3_bf16.json"), gpus=64, given={"seq_len": 4096, "recompute": "full"},
                            source="ds.json").warnings == ()


def test_activation_checkpointing_section_is_overridable_by_the_job():
    """A job whose model does not checkpoint (HF Trainer without --gradient_checkpointing) says so: the
    section alone does not checkpoint anything, so it is a default, not a contradiction."""
    given = {"seq_len": 4096, "recompute": "none"}
    imp = import_deepspeed(read("zero3_bf16.json"), gpus=64, given=given, source="ds.json")
    assert imp.fields["recompute"] == "none" and imp.warnings == ()
    # a pipeline's activation_checkpoint_interval does checkpoint (PipelineModule): a job contradicting it is an error
    config = {**read("zero3_bf16.json"), "pipeline": {"activation_checkpoint_interval": 1}}
    with pytest.raises(PlannerError, match="contradicts pipeline.activation_checkpoint_interval"):
        import_deepspeed(config, gpus=64, given=given, source="ds.json")


def test_zero3_json_gives_same_memory_as_equivalent_estimate():
    model, hw = load_model("llama-3.1-8b").spec, load_hardware("h100-sxm").spec
    imp = import_deepspeed(read("zero3_bf16.json"), gpus=64, given={"seq_len": 4096}, source="ds.json")
    from_json = estimate(model, hw, resolve_layout(model, 64, **imp.fields))
    direct = estimate(model, hw, resolve_layout(model, 64, zero=3, micro_batch=2, global_batch=512, seq_len=4096,
                                                recompute="full", dtype="bf16", grad_dtype="bf16", engine="deepspeed"))
    assert from_json.to_json()["memory"] == direct.to_json()["memory"]
    assert from_json.layout == direct.layout


def test_bf16_without_zero_is_read_as_deepspeed_picks_its_optimizer_wrapper():
    """DeepSpeed >= 0.18.5 (engine.get_data_types / _do_optimizer_sanity_check): bf16 without ZeRO accumulates in
    bf16, unsharded (ZeRO 0); with a pipeline it takes BF16_Optimizer, which shards the fp32 master weights and
    optimizer states over data parallelism (ZeRO 1); fp32 accumulation without ZeRO raises NotImplementedError
    ('unsupported mix of model_dtype and grad_accum_dtype'), since commit 09885efe (#7790) removed the
    BF16_Optimizer branch earlier versions took."""
    config = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True}}
    imp = import_deepspeed(config, gpus=8, given={"seq_len": 2048}, source="ds.json")
    assert (imp.fields.get("zero", 0), imp.fields["grad_dtype"]) == (0, "bf16")
    with pytest.raises(PlannerError, match="unsupported mix") as err:
        import_deepspeed({**config, "data_types": {"grad_accum_dtype": "fp32"}}, gpus=8, given={"seq_len": 2048},
                         source="ds.json")
    assert err.value.field == "data_types.grad_accum_dtype"
    with pytest.raises(PlannerError, match="unsupported mix"):  # also when the job asks for fp32 gradients
        import_deepspeed(config, gpus=8, given={"seq_len": 2048, "grad_dtype": "fp32"}, source="ds.json")
    zero1 = import_deepspeed({**config, "data_types": {"grad_accum_dtype": "fp32"}, "zero_optimization":
                              {"stage": 1}}, gpus=8, given={"seq_len": 2048}, source="ds.json")
    assert (zero1.fields["zero"], zero1.fields["grad_dtype"]) == (1, "fp32")
    pipe = import_deepspeed({**config, "pipeline": {"stages": 2}}, gpus=8, given={"seq_len": 2048}, source="ds.json")
    assert (pipe.fields["zero"], pipe.fields["grad_dtype"], pipe.fields["pp"]) == (1, "bf16", 2)
    fp16 = import_deepspeed({**config, "bf16": {"enabled": False}, "fp16": {"enabled": True}}, gpus=8,
                            given={"seq_len": 2048}, source="ds.json")
    assert (fp16.fields.get("zero", 0), fp16.fields["grad_dtype"]) == (0, "fp16")


def test_zero2_with_a_pipeline_is_refused_as_deepspeed_asserts():
    config = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "pipeline": {"stages": 2},
              "zero_optimization": {"stage": 2}}
    with pytest.raises(PlannerError, match="incompatible with pipeline parallelism"):
        import_deepspeed(config, gpus=8, given={"seq_len": 2048}, source="ds.json")


def test_fp16_zero1_derives_train_batch_and_warns_about_buckets():
    imp = import_deepspeed(read("zero1_fp16.json"), gpus=16, given={"seq_len": 2048, "tp": 2}, source="ds.json")
    f = imp.fields
    # no train_batch_size: micro 4 x accum 8 x dp (16 / tp 2 = 8) = 256
    assert (f["global_batch"], f["micro_batch"], f["dp"], f["tp"]) == (256, 4, 8, 2)
    assert (f["dtype"], f["grad_dtype"], f["zero"], f["optimizer"]) == ("fp16", "fp16", 1, "adam")
    assert any("reduce_bucket_size=500000000" in w for w in imp.warnings)


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        ({"train_batch_size": 64}, (64, 8)),  # accum 1, micro = 64 / dp
        ({"train_micro_batch_size_per_gpu": 2}, (16, 2)),  # accum 1, train = micro x dp
        ({"train_batch_size": 64, "gradient_accumulation_steps": 4}, (64, 2)),
        ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2}, (64, 2)),  # accum derived = 4
    ],
)
def test_batch_derivation_follows_deepspeed_rules(batch, expected):
    config = {**batch, "bf16": {"enabled": True}}
    f = import_deepspeed(config, gpus=8, given={"seq_len": 1024}, source="ds.json").fields
    assert (f["global_batch"], f["micro_batch"]) == expected


def test_hf_auto_values_come_from_the_job():
    given = {"micro_batch": 2, "global_batch": 64, "seq_len": 4096, "dtype": "bf16", "recompute": "full"}
    f = import_deepspeed(read("zero3_hf_auto.json"), gpus=16, given=given, source="ds.json").fields
    assert (f["zero"], f["micro_batch"], f["global_batch"], f["dtype"], f["recompute"]) == (3, 2, 64, "bf16", "full")


def test_auto_micro_batch_without_job_value_is_an_error():
    given = {"seq_len": 4096, "dtype": "bf16"}
    with pytest.raises(PlannerError, match=r"train_micro_batch_size_per_gpu is \"auto\".*--micro-batch"):
        import_deepspeed(read("zero3_hf_auto.json"), gpus=16, given=given, source="ds.json")


def test_auto_precision_without_job_dtype_is_an_error():
    with pytest.raises(PlannerError, match=r"\"auto\".*--dtype"):
        import_deepspeed(read("zero3_hf_auto.json"), gpus=16, given={"seq_len": 4096, "micro_batch": 1},
                         source="ds.json")


def test_cpu_offload_sections_are_read():
    fields = import_deepspeed(read("offload_cpu.json"), gpus=8, given={"seq_len": 4096}, source="ds.json").fields
    assert fields["offload_optimizer"] is True and fields["offload_params"] is True
    assert "cpu_optimizer" not in fields  # DeepSpeedCPUAdam, the deepspeed engine's default


def test_accelerate_zero2_offload_template_runs_torch_adam_on_the_cpu():
    fields = import_deepspeed(read("../upstream/accelerate/deepspeed_config_templates/zero_stage2_offload_config.json"), gpus=8,
                              given={"seq_len": 4096, "global_batch": 8, "micro_batch": 1}, source="ds.json").fields
    assert fields["zero"] == 2 and fields["offload_optimizer"] is True and "offload_params" not in fields
    assert fields["cpu_optimizer"] == "torch"  # "torch_adam": true in the template


def test_nvme_param_offload_is_rejected():
    config = {"train_batch_size": 8, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/local"}}}
    with pytest.raises(PlannerError, match="NVME offload is not modelled"):
        import_deepspeed(config, gpus=8, given={"seq_len": 4096}, source="ds.json")


def test_inconsistent_batch_sizes_show_the_arithmetic():
    with pytest.raises(PlannerError, match=r"train_batch_size\(100\) != .*\(2\) \* .*\(4\) \* dp\(8\) = 64"):
        import_deepspeed(read("batch_mismatch.json"), gpus=8, given={"seq_len": 4096}, source="ds.json")


def test_fp32_training_is_rejected():
    config = {"train_batch_size": 8, "bf16": {"enabled": False}}
    with pytest.raises(PlannerError, match="fp32"):
        import_deepspeed(config, gpus=8, given={"seq_len": 4096}, source="ds.json")


def test_job_contradicting_the_file_is_an_error():
    with pytest.raises(PlannerError, match=r"parallel.zero = 1 contradicts zero_optimization.stage = 3"):
        import_deepspeed(read("zero3_bf16.json"), gpus=64, given={"seq_len": 4096, "zero": 1}, source="ds.json")


def test_missing_seq_len_names_the_field():
    with pytest.raises(PlannerError, match=r"training.seq_len is required.*--seq-len"):
        import_deepspeed(read("zero3_bf16.json"), gpus=64, given={}, source="ds.json")


def test_autotp_pipeline_stages_and_unknown_keys():
    config = {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
              "tensor_parallel": {"autotp_size": 4}, "pipeline": {"stages": 2, "activation_checkpoint_interval": 1},
              "mystery_feature": {"enabled": True}, "curriculum_learning": {"enabled": True}}
    imp = import_deepspeed(config, gpus=64, given={"seq_len": 2048}, source="ds.json")
    assert (imp.fields["tp"], imp.fields["pp"], imp.fields["dp"], imp.fields["recompute"]) == (4, 2, 8, "full")
    assert any("mystery_feature is not known" in w for w in imp.warnings)
    assert any("curriculum_learning" in w for w in imp.warnings)


def test_one_state_optimizers_map_with_a_warning_and_others_are_rejected():
    base = {"train_batch_size": 8, "bf16": {"enabled": True}}
    imp = import_deepspeed({**base, "optimizer": {"type": "Lion"}}, gpus=8, given={"seq_len": 512}, source="d")
    assert imp.fields["optimizer"] == "sgd" and any("Lion" in w for w in imp.warnings)
    with pytest.raises(PlannerError, match="not modelled"):
        import_deepspeed({**base, "optimizer": {"type": "Shampoo"}}, gpus=8, given={"seq_len": 512}, source="d")


def test_batch_arithmetic_names_where_each_value_came_from():
    """train_batch_size "auto" filled by the job's global_batch: the message names the job field, not the key."""
    config = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,
              "bf16": {"enabled": True}}
    with pytest.raises(PlannerError, match=r"training.global_batch\(128\) != train_micro_batch_size_per_gpu\(2\)"):
        import_deepspeed(config, gpus=16, given={"seq_len": 4096, "global_batch": 128}, source="ds.json")
