"""NeMo AutoModel recipes read as AutoModel reads them (planner/engines/automodel.py), on its own benchmark recipes
(tests/fixtures/engines/upstream/automodel/, repository, path and commit in ../SOURCES.md)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from planner.engines.automodel import import_automodel, model_repo, virtual_stages
from planner.engines.load import load_model, parse_yaml
from planner.errors import PlannerError
from planner.training.rules import resolve_layout

UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "upstream" / "automodel"


def recipe(name: str) -> dict:
    return parse_yaml((UPSTREAM / name).read_text(), name)


def read(name: str, model_id: str, gpus: int, config: dict | None = None):
    model = load_model(model_id).spec
    imported = import_automodel(config or recipe(name), gpus=gpus, given={}, model=model, source=name)
    return imported, resolve_layout(model, gpus, **imported.fields)


def test_qwen3_30b_recipe_fsdp2_with_ep_and_per_block_checkpointing():
    # step_scheduler 512 / local 4 on 8 ranks: 16 accumulation steps of micro-batch 4; ep_size 8, deepep,
    # activation_checkpointing true, TE attention
    imported, lay = read("qwen3_moe_30b_te_deepep.yaml", "qwen3-30b-a3b", 8)
    assert model_repo(recipe("qwen3_moe_30b_te_deepep.yaml")) == "Qwen/Qwen3-30B-A3B"
    assert (lay.dp, lay.ep, lay.zero, lay.micro_batch, lay.global_batch, lay.seq_len) == (8, 8, 3, 4, 512, 4096)
    assert lay.global_batch // (lay.dp * lay.micro_batch) == 16
    assert (lay.recompute, lay.moe_dispatcher, lay.resolved_attention_kernel, lay.engine) == (
        "full", "deepep", "fused", "automodel")
    # torch.optim.Adam on the bf16 model: the profile's bf16 states
    assert (lay.optimizer_state_dtype, lay.master_weights_dtype, lay.grad_dtype) == ("bf16", "bf16", "bf16")
    assert imported.origins["recompute"] == "distributed.activation_checkpointing"


def test_deepseek_v3_recipe_pipeline_virtual_stages_and_zero1():
    # pp_size 4, interleaved1f1b, layers_per_stage 2: ceil(61 / 2) = 31 virtual stages, rounded down to 28, 7 per
    # rank; FSDP2 under PP as ZeRO-1; local_batch_size 4 in micro-batches of 1 (pp_microbatch_size)
    _, lay = read("deepseek_v3_te_deepep.yaml", "deepseek-v3", 256)
    assert (lay.pp, lay.ep, lay.dp, lay.zero, lay.interleave, lay.micro_batch) == (4, 64, 64, 1, 7, 1)
    assert (lay.global_batch, lay.moe_dispatcher, lay.mtp_layers) == (256, "hybridep", 0)


def test_the_2025_recipe_layout_is_read_too():
    # examples/benchmark/configs @ 89e3a9fd: the pipeline in `autopipeline`, the checkpointing under
    # `parallelizer`, the strategy as FSDP2Manager; the performance summary's 256-GPU row (GBS 512, LBS 8)
    imported, lay = read("deepseek_v3_te_deepep_2025-10.yaml", "deepseek-v3", 256)
    assert (lay.pp, lay.interleave, lay.zero, lay.recompute, lay.global_batch) == (4, 7, 1, "full", 512)
    assert lay.global_batch // (lay.dp * lay.micro_batch) == 8
    assert imported.origins["interleave"] == "distributed.pipeline.layers_per_stage"


def test_kimi_and_gpt_oss_recipes():
    # Kimi K2: 61 layers in stages of 2 over pp 8: 31 -> 24, 3 per rank
    _, kimi = read("kimi_k2_te_deepep.yaml", "kimi-k2", 256)
    assert (kimi.pp, kimi.ep, kimi.interleave, kimi.moe_dispatcher) == (8, 32, 3, "deepep")
    # gpt-oss-120b: EP 64, no checkpointing, HybridEP
    _, oss = read("gptoss_120b_te_deepep.yaml", "gpt-oss-120b", 64)
    assert (oss.ep, oss.zero, oss.recompute, oss.moe_dispatcher) == (64, 3, "none", "hybridep")


def test_fine_tuning_recipes_dp_size_none_and_the_sequence_length():
    """AutoModel's loader reads `dp_size: none` as None (config/loader.py translate_value): the data-parallel degree is
    the GPUs left over. The sequence length comes from packing where it is on, else the dataset's seq_length (the
    truncation length: a warning, since a batch may be shorter), else the job must give it. The catalog's
    llama-3.1-8b stands in for each recipe's model: only the layout fields are read here."""
    _, lay = read("gemma_2_9b_it_hellaswag_fp8.yaml", "llama-3.1-8b", 8)
    assert (lay.dp, lay.seq_len) == (8, 4096)  # packed_sequence.packed_sequence_size 4096
    imported, lay = read("qwen3_32b_tulu3.yaml", "llama-3.1-8b", 16)
    assert (lay.dp, lay.seq_len) == (16, 2048)  # dataset.seq_length, padding do_not_pad
    assert imported.origins["seq_len"] == "dataset.seq_length"
    assert any("truncated" in w for w in imported.warnings)
    with pytest.raises(PlannerError, match="fixes no sequence length") as err:
        read("llama3_2_1b_squad.yaml", "llama-3.1-8b", 8)
    assert err.value.field == "dataset"
    model = load_model("llama-3.1-8b").spec
    given = import_automodel(recipe("llama3_2_1b_squad.yaml"), gpus=8, given={"seq_len": 1024}, model=model,
                             source="squad")
    assert given.fields["dp"] == 8 and given.fields["seq_len"] == 1024  # the job gives what the recipe lacks


@pytest.mark.parametrize(("word", "value"), [("none", 8), ("None", 8), ("'4'", 4)])
def test_the_loader_words_automodel_translates(word, value):
    config = recipe("llama3_2_1b_squad.yaml")
    config["distributed"]["dp_size"] = word.strip("'") if word == "'4'" else word
    if word == "'4'":  # a quoted number is evaluated as the number; 4 ranks of dp need cp 2 on 8 GPUs
        config["distributed"]["cp_size"] = 2
    model = load_model("llama-3.1-8b").spec
    imported = import_automodel(config, gpus=8, given={"seq_len": 1024}, model=model, source="x")
    assert imported.fields["dp"] == value


def test_the_peft_section_is_lora():
    """llama3_1_8b_peft_benchmark.yaml: `peft:` PeftConfig dim 16 on '*_proj' (every projection); the 70B recipe
    adds TP 2 with activation checkpointing."""
    imported, lay = read("llama3_1_8b_peft_benchmark.yaml", "llama-3.1-8b", 1)
    assert (lay.lora_rank, lay.lora_targets, lay.dp, lay.micro_batch, lay.global_batch) == (16, "all_linear", 1, 2, 32)
    assert imported.origins["lora_rank"] == "peft.dim"
    _, lay = read("custom_llama3_3_70b_instruct_peft_benchmark.yaml", "llama-3.1-70b", 8)
    assert (lay.lora_rank, lay.tp, lay.dp, lay.recompute) == (16, 2, 4, "full")


@pytest.mark.parametrize(("targets", "expected"), [
    (["q_proj", "v_proj"], "qkv"), (["*.self_attn.q_proj", "*.self_attn.o_proj"], "attention"),
    (["linear_qkv"], "qkv"),
    ("*_proj", "all_linear"), (["*"], "all_linear"), (["q_proj", "gate_proj"], "all_linear"),
])
def test_lora_targets_from_the_module_patterns(targets, expected):
    config = recipe("llama3_1_8b_peft_benchmark.yaml")
    config["peft"]["target_modules"] = targets
    model = load_model("llama-3.1-8b").spec
    imported = import_automodel(config, gpus=1, given={}, model=model, source="x")
    assert imported.fields["lora_targets"] == expected


def test_an_unset_rank_is_peft_configs_default_and_match_all_linear_warns():
    config = recipe("llama3_1_8b_peft_benchmark.yaml")
    del config["peft"]["dim"], config["peft"]["target_modules"]
    config["peft"]["match_all_linear"] = True
    model = load_model("llama-3.1-8b").spec
    imported = import_automodel(config, gpus=1, given={}, model=model, source="x")
    assert (imported.fields["lora_rank"], imported.fields["lora_targets"]) == (8, "all_linear")
    assert any("lm_head" in w for w in imported.warnings)


@pytest.mark.parametrize(("path", "value", "needle"), [
    (("peft", "use_dora"), True, "DoRA"),
    (("quantization",), {"load_in_4bit": True}, "QLoRA"),
    (("peft", "dim"), 0, "positive whole number"),
    (("peft", "target_modules"), [["q_proj"]], "module-name patterns"),
])
def test_lora_settings_planner_cannot_model_are_refused(path, value, needle):
    config = recipe("llama3_1_8b_peft_benchmark.yaml")
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    model = load_model("llama-3.1-8b").spec
    with pytest.raises(PlannerError, match=needle):
        import_automodel(config, gpus=1, given={}, model=model, source="x")


def test_virtual_stage_rules_as_automodel_raises_them():
    assert virtual_stages(61, 2, 4, "interleaved1f1b", "up", "r") == 8  # 31 -> 32
    assert virtual_stages(61, None, 4, "interleaved1f1b", None, "r") == 2
    assert virtual_stages(61, None, 4, "1f1b", None, "r") == 1
    with pytest.raises(PlannerError, match="round_virtual_stages_to_pp_multiple"):
        virtual_stages(61, 2, 4, "interleaved1f1b", None, "r")
    with pytest.raises(PlannerError, match="at least 2 stages per rank"):
        virtual_stages(16, 4, 4, "interleaved1f1b", None, "r")


@pytest.mark.parametrize(("path", "value", "needle"), [
    ("distributed", 5, "distributed must be a mapping"),
    ("distributed.pipeline", [1, 2], "distributed.pipeline must be a mapping"),
    ("distributed.activation_checkpointing", "selective", "selective"),
    ("distributed.strategy", "colossal", "strategy colossal"),
    ("step_scheduler.global_batch_size", 500, "not a multiple"),
    ("distributed.tp_size", 0, "positive whole number"),
    ("distributed.pipeline.pp_schedule", "zbvzerobubble", "not modelled"),
])
def test_settings_planner_cannot_model_are_one_line_errors(path, value, needle):
    config = copy.deepcopy(recipe("deepseek_v3_te_deepep.yaml"))
    node = config
    *parents, leaf = path.split(".")
    for key in parents:
        node = node.setdefault(key, {}) if isinstance(node.get(key, {}), dict) else node
    node[leaf] = value
    with pytest.raises(PlannerError, match=needle):
        read("deepseek_v3_te_deepep.yaml", "deepseek-v3", 256, config)


def test_check_reads_an_automodel_recipe_from_the_command_line(run_cli):
    result = run_cli("check", "--automodel", str(UPSTREAM / "qwen3_moe_30b_te_deepep.yaml"), "--hardware", "h100-sxm",
                     "--gpus", "8")
    assert result.exit_code == 0, result.output
    assert "qwen3-30b-a3b on 8 x h100-sxm: fits" in result.output


def test_a_recipe_that_is_not_a_mapping_is_a_one_line_error(run_cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- not\n- a recipe\n")
    result = run_cli("check", "--automodel", str(bad), "--hardware", "h100-sxm", "--gpus", "8")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"error: {bad}: an AutoModel recipe is a YAML mapping"]


def test_the_torchao_fp8_section_says_what_the_automodel_profile_leaves_out():
    # Gemma 2 9B's hellaswag fp8 recipe (NVIDIA-NeMo/Automodel, tests/fixtures/engines/upstream/SOURCES.md): fp8 through
    # torchao, tensorwise with the float8 all-gather; read as fp8 under the automodel profile, with a warning naming
    # what that profile does not model
    imported, lay = read("gemma_2_9b_it_hellaswag_fp8.yaml", "llama-3.1-8b", 8)
    assert lay.dtype == "fp8" and lay.fp8_recipe == "tensorwise" and not lay.fp8_param_gather
    (warning,) = [w for w in imported.warnings if "torchao" in w]
    assert "enable_fsdp_float8_all_gather" in warning and "every micro-batch" in warning
    rowwise = recipe("gemma_2_9b_it_hellaswag_fp8.yaml")
    rowwise["fp8"] = {**rowwise["fp8"], "recipe_name": "rowwise"}
    imported, _ = read("", "llama-3.1-8b", 8, config=rowwise)
    assert any("recipe_name rowwise" in w for w in imported.warnings)
