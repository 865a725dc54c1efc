"""torchtitan's Python config registries (torchtitan main since 2026-02), read without running them: the real
registries of pytorch/torchtitan b5bcd76c (tests/fixtures/engines/upstream/SOURCES.md) give the layouts their
functions describe; hand-written registries pin the language planner evaluates and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.engines.load import load_model
from planner.engines.torchtitan import import_torchtitan
from planner.engines.torchtitan_registry import read_registry, split_registry_args
from planner.errors import PlannerError

UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "upstream" / "torchtitan" / "registry"


def fields(model_dir: str, function: str, gpus: int = 64, overrides: list[str] | None = None,
           model_id: str = "llama-3.1-8b") -> tuple[dict, tuple[str, ...]]:
    path = UPSTREAM / model_dir / "config_registry.py"
    registry = read_registry(path.read_text(), function, source=str(path), overrides=overrides)
    imported = import_torchtitan(registry.config, [], gpus=gpus, given={}, model=load_model(model_id).spec,
                                 source=str(path))
    return dict(imported.fields), registry.warnings


def test_llama3_8b_is_fsdp_over_every_rank_with_per_op_checkpointing() -> None:
    # num_tokens_per_microbatch_per_dp_rank 1 x 8192 over max_context_length 8192: one sequence per micro-batch;
    # no parallelism section: FSDP over all 64 ranks; SelectiveAC is torchtitan's per-op SAC; AdamW; bf16
    f, warnings = fields("llama3", "llama3_8b")
    assert (f["tp"], f["pp"], f["dp"], f["zero"]) == (1, 1, 64, 3)
    assert (f["seq_len"], f["micro_batch"], f["global_batch"]) == (8192, 1, 64)
    assert (f["recompute"], f["dtype"], f.get("compile", False)) == ("op", "bf16", False)
    assert warnings == ()


def test_llama3_405b_reads_tp_float8_compile_async_tp_and_full_checkpointing() -> None:
    # tensor_parallel_degree 8; Float8LinearConverter.Config() without a recipe_name: torchtitan main's default,
    # torchao's rowwise recipe (torchtitan/components/quantization/float8.py @ b5bcd76c: recipe_name
    # Literal["rowwise", "rowwise_with_gw_hp"] = "rowwise"); CompileConfig(enable=True,
    # enable_async_tensor_parallel=True) with the default components (model, loss); FullAC; 2 x 8192 tokens
    f, _ = fields("llama3", "llama3_405b", gpus=256, model_id="llama-3.1-405b")
    assert (f["tp"], f["dp"], f["sequence_parallel"], f["overlap_tp_comm"]) == (8, 32, True, True)
    assert (f["dtype"], f["fp8_recipe"], f["compile"], f["recompute"]) == ("fp8", "rowwise", True, "full")
    assert (f["seq_len"], f["micro_batch"]) == (8192, 2)


def test_a_function_built_on_another_takes_its_config_and_its_changes() -> None:
    # llama3_8b_mxfp8: config = llama3_8b(); config.compile = CompileConfig(enable=True, components=["model"]);
    # config.model_spec = model_registry("8B", converters=[MXFP8LinearConverter.Config(...)])
    f, _ = fields("llama3", "llama3_8b_mxfp8")
    assert (f["dtype"], f["fp8_recipe"], f["compile"], f["seq_len"]) == ("fp8", "mxfp8", True, 8192)


def test_deepseek_v3_671b_compiles_only_its_loss_and_reads_expert_parallelism() -> None:
    # CompileConfig(enable=True, components=["loss"]): the model itself runs eager; expert_parallel_degree 2;
    # 4 x 4096 tokens per micro-batch; Interleaved1F1B named but pipeline_parallel_degree left at 1
    f, _ = fields("deepseek_v3", "deepseek_v3_671b", gpus=256, model_id="deepseek-v3")
    assert (f["ep"], f["pp"], f["seq_len"], f["micro_batch"]) == (2, 1, 4096, 4)
    assert not f.get("compile", False)
    assert f["compile_loss"] is True  # the loss alone compiled


def test_the_model_registry_names_the_expert_all_to_all() -> None:
    # deepseek_v3_debugmodel_hybridep: model_registry("debugmodel", moe_comm_backend="hybridep")
    path = UPSTREAM / "deepseek_v3" / "config_registry.py"
    registry = read_registry(path.read_text(), "deepseek_v3_debugmodel_hybridep", source=str(path))
    assert registry.config["parallelism"]["expert_parallel_comm_backend"] == "hybridep"
    f, _ = fields("deepseek_v3", "deepseek_v3_16b", gpus=64, model_id="deepseek-v2-lite",
                  overrides=["--parallelism.expert_parallel_degree", "8"])
    assert (f["ep"], f["moe_dispatcher"]) == (8, "alltoall")


def test_gpt_oss_120b_full_checkpointing() -> None:
    f, _ = fields("gpt_oss", "gpt_oss_120b", model_id="gpt-oss-120b")
    assert (f["recompute"], f["ep"], f["seq_len"], f["micro_batch"]) == ("full", 1, 8192, 1)


def test_command_line_overrides_win_over_the_function() -> None:
    f, _ = fields("llama3", "llama3_70b", overrides=[
        "--parallelism.tensor_parallel_degree", "8", "--training.max_context_length", "16384",
        "--training.num_tokens_per_microbatch_per_dp_rank", "32768"], model_id="llama-3.1-70b")
    assert (f["tp"], f["dp"], f["seq_len"], f["micro_batch"]) == (8, 8, 16384, 2)


def test_module_and_config_come_off_the_command_line() -> None:
    assert split_registry_args(["--module", "llama3", "--config=llama3_8b", "--training.steps", "5"]) == (
        "llama3", "llama3_8b", ["--training.steps", "5"])


HAND = '''
STEP_TOKENS = 64 * 4096

def base():
    return Trainer.Config(
        model_spec=model_registry("8B"),
        training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=2 * 4096, max_context_length=4096,
                                num_tokens_per_train_step=STEP_TOKENS),
        parallelism=ParallelismConfig(pipeline_parallel_degree=2, num_pp_microbatches=4,
                                      pipeline_parallel_schedule="1F1B"),
        activation_checkpoint=None,
    )

def derived():
    config = base()
    config.parallelism.tensor_parallel_degree = 2
    for x in range(3):
        pass
    return config

def opaque():
    config = base()
    config.training.max_context_length = helper()
    return config

def nvfp4():
    return Trainer.Config(model_spec=model_registry("8B", converters=[NVFP4LinearConverter.Config()]))

def gathered():
    return Trainer.Config(model_spec=model_registry("8B", converters=[Float8LinearConverter.Config(
        enable_fsdp_float8_all_gather=True, precompute_float8_dynamic_scale_for_fsdp=True)]))

def budget():
    return Trainer.Config(model_spec=model_registry("8B"), activation_checkpoint=MemoryBudgetAC.Config())

def sized(tokens=4096, tp=1):
    return Trainer.Config(model_spec=model_registry("8B"),
                          training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=tokens, max_context_length=4096),
                          parallelism=ParallelismConfig(tensor_parallel_degree=tp))

def big():
    return sized(3 * 4096, tp=4)
'''


def hand(function: str, gpus: int = 16) -> tuple[dict, tuple[str, ...]]:
    registry = read_registry(HAND, function, source="hand.py")
    imported = import_torchtitan(registry.config, [], gpus=gpus, given={}, model=load_model("llama-3.1-8b").spec,
                                 source="hand.py")
    return dict(imported.fields), registry.warnings


def test_pipeline_micro_batches_and_the_step_in_tokens() -> None:
    # pp 2 with 4 micro-batches of 2 sequences (8,192 tokens / 4,096); 64 x 4096 tokens a step = 64 sequences;
    # 16 GPUs / pp 2 = 8 DP ranks of 8 sequences a round: one round, no accumulation; no checkpointing
    f, warnings = hand("base")
    assert (f["pp"], f["dp"], f["micro_batch"], f["global_batch"], f["recompute"]) == (2, 8, 2, 64, "none")
    assert warnings == ()


def test_statements_planner_does_not_evaluate_are_named_with_their_line() -> None:
    f, warnings = hand("derived")
    assert (f["tp"], f["pp"], f["dp"]) == (2, 2, 4)
    assert len(warnings) == 1 and "hand.py:17" in warnings[0] and "for x in range(3)" in warnings[0]


@pytest.mark.parametrize(("function", "why"), [
    ("opaque", "max_context_length is set by 'helper()' (line 23)"),
    ("nvfp4", "NVFP4 training is not modelled"),
    ("budget", "MemoryBudgetAC"),
    ("missing", "no function 'missing' in the file (it has base, big, budget, derived, gathered, nvfp4, opaque, "
     "sized)"),
])
def test_what_it_cannot_read_is_an_error_that_says_where(function: str, why: str) -> None:
    with pytest.raises(PlannerError, match=why.replace("(", r"\(").replace(")", r"\)")):
        hand(function)


def test_a_float8_converter_with_the_fsdp_all_gather_is_of_the_registrys_first_releases() -> None:
    # Float8LinearConverter.Config(enable_fsdp_float8_all_gather=True, ...) without a recipe_name: the registry
    # before 6348d93d1, whose default was the tensorwise recipe; FSDP over 16 ranks gathers in fp8
    f, _ = hand("gathered")
    assert (f["dtype"], f["fp8_recipe"], f["zero"], f["fp8_param_gather"]) == ("fp8", "tensorwise", 3, True)


def test_a_registry_function_called_with_arguments_binds_them_as_python_does() -> None:
    # big() = sized(3 * 4096, tp=4): three sequences of 4,096 per micro-batch, tp 4 (defaults where not given)
    f, _ = hand("big")
    assert (f["tp"], f["micro_batch"], f["seq_len"]) == (4, 3, 4096)


def test_no_function_named_lists_the_functions() -> None:
    with pytest.raises(PlannerError, match="--config NAME"):
        read_registry(HAND, None, source="hand.py")


def test_planner_check_reads_a_registry_from_the_command_line(run_cli) -> None:
    path = UPSTREAM / "llama3" / "config_registry.py"
    out = run_cli("check", "--torchtitan", str(path), "--engine-args", "--config llama3_8b", "--hardware", "h100-sxm",
                  "--gpus", "64", "--format", "json")
    assert out.exit_code == 0, out.output
    job = json.loads(out.stdout)[0]
    assert job["model"] == "llama-3.1-8b" and job["config"]["recompute"] == "op" and job["fits"]
    missing = run_cli("check", "--torchtitan", str(path), "--hardware", "h100-sxm", "--gpus", "64")
    assert missing.exit_code == 2 and missing.stderr.startswith("error:") and "--config NAME" in missing.stderr


# writer ----------------------------------------------------------------------------------------
def _export(model_id: str, gpus: int, **layout_fields):  # type: ignore[no-untyped-def]
    from planner.engines.export import render_export
    from planner.engines.load import load_hardware
    from planner.training.estimate import estimate
    from planner.training.rules import resolve_layout

    hw = load_hardware("h100-sxm").spec
    model = load_model(model_id).spec
    layout = resolve_layout(model, gpus, engine="torchtitan", **layout_fields)
    exported = render_export("torchtitan_registry", model_id, model, hw, layout, estimate(model, hw, layout),
                             hardware_id="h100-sxm")
    return model, exported


def test_the_exported_function_reads_back_with_hybridep_and_the_notes_for_what_main_cannot_say() -> None:
    # Qwen3 30B-A3B with tp 2 and ep 8 over HybridEP; etp 2 and full recompute of 12 of 24 layers per stage,
    # which torchtitan main cannot say: etp 1 and every layer, each noted in the file
    from planner.training.rules import resolve_layout

    model, exported = _export("qwen3-30b-a3b", 32, tp=2, pp=2, ep=8, etp=2, zero=1, recompute="full", sequence_parallel=True,
                              recompute_layers_per_stage=12, moe_dispatcher="hybridep", global_batch=64, seq_len=4096)
    text = exported.text
    assert 'model_registry("30B-A3B", moe_comm_backend="hybridep")' in text
    assert "num_pp_microbatches=" in text and "activation_checkpoint=FullAC.Config()" in text
    assert "Note: etp 2 -> 1" in text and "Note: recompute of 12 layers per stage -> all layers" in text
    registry = read_registry(text, "planner_qwen3_30b_a3b", source="config_registry.py")
    back = import_torchtitan(registry.config, [], gpus=32, given={}, model=model, source="config_registry.py")
    assert resolve_layout(model, 32, **back.fields) == exported.layout
    assert (exported.layout.etp, exported.layout.recompute_layers_per_stage, exported.layout.moe_dispatcher) == (
        1, None, "hybridep")


def test_a_model_without_a_torchtitan_flavor_is_refused_for_the_registry() -> None:
    with pytest.raises(PlannerError, match="no torchtitan flavor"):
        _export("mixtral-8x7b", 8, zero=3, global_batch=8, seq_len=4096)


SEVERAL = '''
from torchtitan.models.gpt_oss import model_registry as gpt_oss_model_registry
from torchtitan.models.qwen3 import model_registry

def _qwen(flavor, *, converters=None):
    converters = list(converters or [])
    return model_registry(flavor, converters=converters)

def _training(context=None):
    return TrainingConfig(max_context_length=context or 4096, num_tokens_per_microbatch_per_dp_rank=4096 and 8192)

def qwen():
    return Trainer.Config(model_spec=_qwen("30B-A3B"), training=_training())

def qwen_mxfp8():
    return Trainer.Config(model_spec=_qwen("30B-A3B", converters=[MXFP8LinearConverter.Config()]),
                          training=_training(8192))

def oss():
    return Trainer.Config(model_spec=gpt_oss_model_registry("120b"), training=_training())
'''


@pytest.mark.parametrize(("function", "model", "flavor", "converters", "context"), [
    ("qwen", "qwen3", "30B-A3B", [], 4096),
    ("qwen_mxfp8", "qwen3", "30B-A3B", ["quantize.linear.mx"], 8192),
    ("oss", "gpt_oss", "120b", [], 4096),
])
def test_the_model_is_the_registry_the_function_calls_under_the_name_it_was_imported_as(
        function: str, model: str, flavor: str, converters: list[str], context: int) -> None:
    # two registries imported, one under another name: each function's model is the one it calls (the file's
    # first import was taken for all of them before); `converters or []`, `list(...)`, `context or 4096` and
    # `4096 and 8192` evaluate as Python does
    registry = read_registry(SEVERAL, function, source="several.py")
    assert (registry.model_name, registry.flavor) == (model, flavor)
    assert registry.config["model"]["converters"] == converters
    assert registry.config["training"]["seq_len"] == context
    assert registry.config["training"]["local_batch_size"] == 8192 // context


def test_an_rl_controller_config_is_refused_not_read_as_a_trainer() -> None:
    # torchtitan/experiments/rl: Controller.Config(model_spec=..., trainer=PolicyTrainer.Config(...), generator=...)
    # was read as if it were a Trainer.Config, with the defaults of every section and gpt_oss as its model
    path = UPSTREAM / "rl_alphabet_sort" / "config_registry.py"
    for function in ("rl_grpo_qwen3_moe_debug_varlen", "rl_grpo_gpt_oss_20b_varlen"):
        with pytest.raises(PlannerError, match="reinforcement-learning controller"):
            read_registry(path.read_text(), function, source=str(path))


def test_a_graph_trainer_config_names_the_eager_config_it_wraps() -> None:
    path = UPSTREAM / "graph_trainer_llama3" / "config_registry.py"
    with pytest.raises(PlannerError, match=r"read the eager config it wraps \(llama3_70b\(\)\) with --config"):
        read_registry(path.read_text(), "graph_trainer_llama3_70b", source=str(path))


def test_torchtitan_main_gathers_in_bf16_so_the_export_says_so() -> None:
    # fp8_param_gather under torchtitan is torchao's float8 all-gather, gone from main with the tensorwise recipe
    _, exported = _export("llama-3.1-8b", 16, zero=3, dtype="fp8", fp8_recipe="tensorwise", fp8_param_gather=True,
                          recompute="op", global_batch=16, seq_len=8192)
    assert not exported.layout.fp8_param_gather and exported.layout.fp8_recipe == "rowwise"
    assert "Note: fp8_param_gather -> false" in exported.text and "enable_fsdp_float8_all_gather" not in exported.text
