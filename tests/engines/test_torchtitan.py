"""torchtitan TOML job configs and --section.option overrides -> Layout fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.engines.load import load_hardware, load_model, parse_toml
from planner.engines.torchtitan import (
    apply_overrides,
    catalog_id,
    import_torchtitan,
    model_name,
)
from planner.errors import PlannerError
from planner.training.estimate import estimate
from planner.training.rules import resolve_layout

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "torchtitan"
UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "upstream" / "torchtitan"
LLAMA8B = load_model("llama-3.1-8b").spec


def read(name: str) -> dict:
    return parse_toml((FIXTURES / name).read_text(), name)


def test_model_flavor_maps_to_catalog():
    assert model_name(read("llama3_8b.toml")) == ("llama3", "8B")
    assert catalog_id("llama3", "8B") == "llama-3.1-8b"
    assert catalog_id("llama3", "8B_flex") == "llama-3.1-8b"
    assert catalog_id("llama3", "debugmodel") is None


def test_fsdp_with_shard_minus_one():
    imp = import_torchtitan(read("llama3_8b.toml"), [], gpus=64, given={}, model=LLAMA8B, source="t")
    f = imp.fields
    assert (f["dp"], f["zero"], f["tp"], f["pp"], f["sequence_parallel"]) == (64, 3, 1, 1, False)
    assert (f["micro_batch"], f["global_batch"], f["seq_len"]) == (1, 64, 8192)  # global defaults to local x dp
    assert (f["dtype"], f["grad_dtype"], f["recompute"]) == ("bf16", "fp32", "op")  # op-level selective AC
    assert f["engine"] == "torchtitan"


def test_torchtitan_config_gives_same_memory_as_equivalent_estimate():
    hw = load_hardware("h100-sxm").spec
    model = load_model("llama-3.1-70b").spec
    imp = import_torchtitan(read("llama3_70b.toml"), [], gpus=64, given={}, model=model, source="t")
    from_toml = estimate(model, hw, resolve_layout(model, 64, **imp.fields))
    direct = estimate(model, hw, resolve_layout(model, 64, tp=8, sequence_parallel=True, zero=3, recompute="full",
                                                micro_batch=8, global_batch=64, seq_len=8192, grad_dtype="fp32",
                                                overlap_tp_comm=True, engine="torchtitan",
                                                compile=bool(imp.fields.get("compile"))))
    assert from_toml.to_json()["memory"] == direct.to_json()["memory"]


def test_overrides_win_over_the_file():
    over = ["--parallelism.tensor_parallel_degree", "4", "--training.local_batch_size=2",
            "--activation_checkpoint.mode", "none", "--compile.enable"]
    config = apply_overrides(read("llama3_70b.toml"), over, "t")
    assert config["parallelism"]["tensor_parallel_degree"] == 4
    assert config["training"]["local_batch_size"] == 2
    assert config["compile"]["enable"] is True
    f = import_torchtitan(read("llama3_70b.toml"), over, gpus=64, given={}, model=load_model("llama-3.1-70b").spec,
                          source="t").fields
    assert (f["tp"], f["dp"], f["micro_batch"], f["recompute"]) == (4, 16, 2, "none")


def test_pipeline_micro_batches_and_uneven_layers():
    model = load_model("llama-3.1-405b").spec
    f = import_torchtitan(read("llama3_405b_pp.toml"), [], gpus=512, given={}, model=model, source="t").fields
    # FSDP under PP: torch pipelining keeps the stage gathered and its gradients unsharded for the step (ZeRO-1)
    assert (f["tp"], f["pp"], f["dp"], f["zero"]) == (8, 8, 8, 1)
    assert (f["micro_batch"], f["global_batch"], f["interleave"], f["schedule"]) == (1, 512, 1, "1f1b")


def test_interleaved_schedule_defaults_to_two_stages_per_rank():
    over = ["--parallelism.pipeline_parallel_schedule", "Interleaved1F1B", "--parallelism.pipeline_parallel_degree",
            "4", "--training.local_batch_size", "8", "--parallelism.pipeline_parallel_microbatch_size", "1"]
    f = import_torchtitan(read("llama3_8b.toml"), over, gpus=64, given={}, model=LLAMA8B, source="t").fields
    assert (f["pp"], f["interleave"], f["micro_batch"], f["dp"], f["global_batch"]) == (4, 2, 1, 16, 128)


def test_legacy_2024_layout_and_every_nth_layer_checkpointing():
    imp = import_torchtitan(read("legacy_2024.toml"), [], gpus=16, given={}, model=LLAMA8B, source="t")
    f = imp.fields
    assert (f["tp"], f["dp"], f["micro_batch"], f["sequence_parallel"]) == (2, 8, 2, True)
    assert (f["recompute"], f["recompute_layers_per_stage"]) == ("full", 16)  # one layer in 2 of 32


def test_hsdp_shards_over_the_shard_group():
    imp = import_torchtitan(read("hsdp.toml"), [], gpus=16, given={}, model=LLAMA8B, source="t")
    assert (imp.fields["dp"], imp.fields["zero"], imp.fields["shard_group"]) == (16, 3, 8)


def test_ddp_is_zero_0():
    over = ["--parallelism.data_parallel_replicate_degree", "8", "--parallelism.data_parallel_shard_degree", "1"]
    f = import_torchtitan(read("llama3_8b.toml"), over, gpus=8, given={}, model=LLAMA8B, source="t").fields
    assert (f["dp"], f["zero"]) == (8, 0)


def test_world_size_mismatch_shows_the_arithmetic():
    over = ["--parallelism.data_parallel_shard_degree", "4", "--parallelism.tensor_parallel_degree", "8"]
    with pytest.raises(PlannerError, match=r"dp_replicate\(1\) \* dp_shard\(4\) \* cp\(1\) \* tp\(8\) \* pp\(1\) = 32 "
                                           r"!= gpus\(64\)"):
        import_torchtitan(read("llama3_8b.toml"), over, gpus=64, given={}, model=LLAMA8B, source="t")


def test_cpu_offload_is_read_and_memory_budget_rejected():
    f = import_torchtitan(read("cpu_offload.toml"), [], gpus=8, given={}, model=LLAMA8B, source="t").fields
    assert f["offload_params"] is True and f["offload_optimizer"] is True  # FSDP2 CPUOffloadPolicy
    with pytest.raises(PlannerError, match="memory_budget"):
        import_torchtitan(read("llama3_8b.toml"), ["--activation_checkpoint.mode", "memory_budget"], gpus=8,
                          given={}, model=LLAMA8B, source="t")


def test_job_fills_what_the_file_lacks_and_may_not_contradict_it():
    config = {"model": {"name": "llama3", "flavor": "8B"}, "parallelism": {"tensor_parallel_degree": 2}}
    f = import_torchtitan(config, [], gpus=16, given={"seq_len": 4096, "micro_batch": 2, "recompute": "full"},
                          model=LLAMA8B, source="t").fields
    assert (f["seq_len"], f["micro_batch"], f["recompute"], f["tp"]) == (4096, 2, "full", 2)
    with pytest.raises(PlannerError, match="contradicts parallelism.tensor_parallel_degree = 2"):
        import_torchtitan(config, [], gpus=16, given={"tp": 4}, model=LLAMA8B, source="t")


def test_float8_converter_sets_fp8_and_unknown_keys_warn():
    config = {"model": {"name": "llama3", "flavor": "8B", "converters": ["quantize.linear.float8"]},
              "parallelism": {"warp_drive_degree": 2}}
    imp = import_torchtitan(config, [], gpus=8, given={}, model=LLAMA8B, source="t")
    assert imp.fields["dtype"] == "fp8"
    assert any("parallelism.warp_drive_degree is not known" in w for w in imp.warnings)


@pytest.mark.parametrize(("converter", "recipe"), [("quantize.linear.float8", "tensorwise"), ("quantize.linear.mx", "mxfp8"),
                                                 ("mx", "mxfp8")])
def test_float8_and_mx_converters_name_their_fp8_recipe(converter, recipe):
    # torchao's float8 scales each tensor from its own amax (tensorwise); its MX converter per 32 elements (mxfp8)
    config = {"model": {"name": "llama3", "flavor": "8B", "converters": [converter]}}
    imp = import_torchtitan(config, [], gpus=8, given={}, model=LLAMA8B, source="t")
    assert (imp.fields["dtype"], imp.fields["fp8_recipe"]) == ("fp8", recipe)


@pytest.mark.parametrize("config", [
    # torchtitan 820504e (2025-06): [float8] recipe_name, as its async-TP benchmark ran it from the command line
    {"model": {"name": "llama3", "flavor": "8B", "converters": ["float8"]}, "float8": {"recipe_name": "rowwise"}},
    # torchtitan v0.2 (238fa995): [quantize.linear.float8] recipe_name
    {"model": {"name": "llama3", "flavor": "8B", "converters": ["quantize.linear.float8"]},
     "quantize": {"linear": {"float8": {"recipe_name": "rowwise"}}}},
])
def test_float8_recipe_name_rowwise_is_torchaos_rowwise_recipe(config):
    imp = import_torchtitan(config, [], gpus=8, given={}, model=LLAMA8B, source="t")
    assert (imp.fields["dtype"], imp.fields["fp8_recipe"]) == ("fp8", "rowwise")


def test_the_async_tp_benchmarks_rowwise_command_line_is_read_from_the_file_of_its_commit():
    # pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md: llama3_70b.toml of 820504e with
    # --training.local_batch_size 16 --training.compile --model.converters float8 --float8.recipe_name rowwise
    toml = parse_toml((UPSTREAM / "llama3_70b_820504e.toml").read_text(), "llama3_70b_820504e.toml")
    args = ["--training.local_batch_size", "16", "--training.compile", "--model.converters", "float8",
            "--float8.recipe_name", "rowwise"]
    imp = import_torchtitan(toml, args, gpus=256, given={}, model=load_model("llama-3.1-70b").spec, source="t")
    f = imp.fields
    assert (f["tp"], f["dp"], f["micro_batch"], f["recompute"]) == (8, 32, 16, "full")
    assert (f["dtype"], f["fp8_recipe"], f["compile"]) == ("fp8", "rowwise", True)


@pytest.mark.parametrize(("name", "message"), [
    ("rowwise_with_gw_hp", "rowwise_with_gw_hp .*is not modelled"),
    ("columnwise", "must be tensorwise, rowwise or rowwise_with_gw_hp"),
])
def test_float8_recipes_planner_does_not_model_are_refused_by_name(name, message):
    config = {"model": {"name": "llama3", "flavor": "8B", "converters": ["float8"]}, "float8": {"recipe_name": name}}
    with pytest.raises(PlannerError, match=message) as err:
        import_torchtitan(config, [], gpus=8, given={}, model=LLAMA8B, source="t")
    assert err.value.field == "float8.recipe_name"


@pytest.mark.parametrize(("compile_table", "compile_", "compile_loss"), [
    ({"enable": True}, True, None),  # CompileConfig's default components: the model and the loss
    ({"enable": True, "components": ["model", "loss"]}, True, None),
    ({"enable": True, "components": ["model"]}, True, False),
    ({"enable": True, "components": ["loss"]}, None, True),
    ({"enable": False, "components": ["model", "loss"]}, None, None),
])
def test_compile_components_say_whether_the_model_and_the_loss_compile(compile_table, compile_, compile_loss):
    config = {"model": {"name": "llama3", "flavor": "8B"}, "compile": compile_table}
    f = import_torchtitan(config, [], gpus=8, given={}, model=LLAMA8B, source="t").fields
    assert (f.get("compile"), f.get("compile_loss")) == (compile_, compile_loss)


def test_compile_components_other_than_model_and_loss_are_refused():
    config = {"model": {"name": "llama3", "flavor": "8B"}, "compile": {"enable": True, "components": ["optimizer"]}}
    with pytest.raises(PlannerError, match="list of 'model' and 'loss'") as err:
        import_torchtitan(config, [], gpus=8, given={}, model=LLAMA8B, source="t")
    assert err.value.field == "compile.components"


def test_2024_releases_pp_and_float8_under_training_are_read():
    """April-July 2024 torchtitan kept pipeline_parallel_degree and fp8_linear / enable_float8_linear under
    [training]; ignoring them read a pp=2 fp8 job as pp=1 bf16 (wrong dp, wrong memory) with only a warning."""
    from planner.engines.load import load_model
    from planner.engines.torchtitan import import_torchtitan

    model = load_model("llama-3.1-70b").spec
    config = {"model": {"name": "llama3", "flavor": "70B"},
              "training": {"batch_size": 16, "seq_len": 8192, "data_parallel_degree": -1, "tensor_parallel_degree": 8,
                           "pipeline_parallel_degree": 2, "fp8_linear": "dynamic"}}
    imp = import_torchtitan(config, [], gpus=64, given={}, model=model, source="t.toml")
    assert (imp.fields["pp"], imp.fields["dp"], imp.fields["dtype"]) == (2, 4, "fp8")
    assert not any("is not known" in w for w in imp.warnings)
    config["training"].update(fp8_linear="", enable_float8_linear=True)
    assert import_torchtitan(config, [], gpus=64, given={}, model=model, source="t.toml").fields["dtype"] == "fp8"
    config["training"].update(enable_float8_linear=False)
    assert import_torchtitan(config, [], gpus=64, given={}, model=model, source="t.toml").fields["dtype"] == "bf16"


@pytest.mark.parametrize(("section", "key", "value", "field"), [
    ("model", "converters", 8, "model.converters"),
    ("training", "local_batch_size", 0, "training.local_batch_size"),
    ("experimental", "pipeline_parallel_microbatches", "four", "experimental.pipeline_parallel_microbatches"),
])
def test_mistyped_values_are_one_line_errors_not_crashes(section, key, value, field):
    from planner.engines.load import load_model
    from planner.engines.torchtitan import import_torchtitan

    config = {"model": {"name": "llama3", "flavor": "8B"}, "training": {"local_batch_size": 2, "seq_len": 2048},
              "parallelism": {"pipeline_parallel_degree": 2}}
    config.setdefault(section, {})[key] = value
    with pytest.raises(PlannerError) as err:
        import_torchtitan(config, [], gpus=8, given={}, model=load_model("llama-3.1-8b").spec, source="t.toml")
    assert err.value.field == field


@pytest.mark.parametrize("config", [
    # torchtitan 2025 TOMLs: [float8] (as Trainy's and torchao's command lines set it)
    {"model": {"name": "llama3", "flavor": "8B", "converters": ["float8"]},
     "float8": {"enable_fsdp_float8_all_gather": True, "precompute_float8_dynamic_scale_for_fsdp": True}},
    # 2024 releases: under [training]
    {"model": {"name": "llama3", "flavor": "8B"},
     "training": {"enable_float8_linear": True, "enable_fsdp_float8_all_gather": True,
                  "precompute_float8_dynamic_scale_for_fsdp": True}},
    # v0.2: [quantize.linear.float8]
    {"model": {"name": "llama3", "flavor": "8B", "converters": ["quantize.linear.float8"]},
     "quantize": {"linear": {"float8": {"enable_fsdp_float8_all_gather": True,
                                        "precompute_float8_dynamic_scale_for_fsdp": True}}}},
])
def test_float8_fsdp_all_gather_is_read_as_fp8_param_gather(config):
    imp = import_torchtitan(config, [], gpus=8, given={}, model=LLAMA8B, source="t")
    f = imp.fields
    assert (f["dtype"], f["fp8_recipe"], f["zero"], f["fp8_param_gather"]) == ("fp8", "tensorwise", 3, True)
    assert not any("float8" in w for w in imp.warnings)
    layout = resolve_layout(LLAMA8B, 8, **f)
    assert layout.fp8_param_gather


def test_float8_all_gather_needs_fsdp_shards_and_says_what_precompute_leaves_out():
    base = {"model": {"name": "llama3", "flavor": "8B", "converters": ["float8"]},
            "float8": {"enable_fsdp_float8_all_gather": True}}
    # no precompute: each weight's amax is all-reduced on its own, which planner does not count
    imp = import_torchtitan(base, [], gpus=8, given={}, model=LLAMA8B, source="t")
    assert imp.fields["fp8_param_gather"] and any("precompute_float8_dynamic_scale_for_fsdp" in w for w in imp.warnings)
    # FSDP does not shard over data_parallel_shard_degree 1 (pure TP): torchtitan gathers nothing in fp8
    tp_only = {**base, "parallelism": {"tensor_parallel_degree": 8}}
    imp = import_torchtitan(tp_only, [], gpus=8, given={}, model=LLAMA8B, source="t")
    assert "fp8_param_gather" not in imp.fields and any("does not shard" in w for w in imp.warnings)
    # torchtitan asserts against the all-gather beside a recipe_name
    with pytest.raises(PlannerError, match="together with a float8 recipe_name") as err:
        import_torchtitan({**base, "float8": {"enable_fsdp_float8_all_gather": True, "recipe_name": "rowwise"}}, [],
                          gpus=8, given={}, model=LLAMA8B, source="t")
    assert err.value.field == "float8.enable_fsdp_float8_all_gather"


def test_trainys_command_line_gathers_in_fp8_and_runs_faster_than_without():
    # Trainy's H200 runs (benchmarks/data/torchtitan_2025.yaml): llama3_8b.toml of e7c0cae with
    # --float8.enable_fsdp_float8_all_gather --float8.precompute_float8_dynamic_scale_for_fsdp
    toml = parse_toml((UPSTREAM / "llama3_8b_e7c0cae.toml").read_text(), "llama3_8b_e7c0cae.toml")
    common = ["--training.local_batch_size=2", "--training.compile", "--model.converters=float8"]
    gather = ["--float8.enable_fsdp_float8_all_gather", "--float8.precompute_float8_dynamic_scale_for_fsdp"]
    hw = load_hardware("h200").spec
    steps = []
    for args in (common + gather, common):
        f = import_torchtitan(toml, args, gpus=64, given={}, model=LLAMA8B, source="t").fields
        assert f.get("fp8_param_gather", False) == (args != common)
        steps.append(estimate(LLAMA8B, hw, resolve_layout(LLAMA8B, 64, **f)).scalar("step_seconds"))
    assert steps[0] < steps[1]
