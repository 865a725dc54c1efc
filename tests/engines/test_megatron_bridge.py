"""Megatron-Bridge's ConfigContainer YAML (run_config.yaml, the printed Task Configuration, override files) ->
Megatron-LM arguments -> Layout fields and ModelSpec, through the Megatron reader. The override file is Megatron-Bridge's
own tutorial config (tests/fixtures/engines/upstream/SOURCES.md); the dumps are hand-written in the shape
`ConfigContainer.to_yaml` writes (`_target_` keys, torch dtypes and Megatron-Core enums as `_target_` / `_args_`)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml

from planner.engines.common import EngineImport
from planner.engines.load import load_model
from planner.engines.megatron import import_megatron
from planner.engines.megatron_bridge import (
    PRECISION_RECIPES,
    UNMODELLED_RECIPES,
    bridge_tokens,
    engine_layout,
    override,
    parse_bridge_text,
    peft_fields,
    task_configuration,
)
from planner.errors import PlannerError
from planner.training.rules import resolve_layout
from tests.engines.test_roundtrip import CASES as ROUNDTRIP_CASES
from tests.engines.test_roundtrip_moe import MOE_CASES

UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "upstream" / "megatron_bridge"

# A DeepSeek-V3-shaped run as ConfigContainer.to_yaml writes it (fields of Megatron-Bridge v0.6.0's dataclasses;
# the values are a 16-layer cut of the DeepSeek-V3 recipe, not a published run)
DUMP = """
_target_: megatron.bridge.training.config.ConfigContainer
comm_overlap:
  _target_: megatron.bridge.training.comm_overlap.CommOverlapConfig
  tp_comm_overlap: false
dataset:
  _target_: megatron.bridge.training.config.GPTDatasetConfig
  sequence_length: 4096
ddp:
  _target_: megatron.bridge.training.config.DistributedDataParallelConfig
  grad_reduce_in_fp32: false
  overlap_grad_reduce: true
  use_distributed_optimizer: true
  use_megatron_fsdp: false
mixed_precision: bf16_with_mxfp8_mixed
model:
  _target_: megatron.bridge.models.deepseek.deepseek_provider.DeepSeekV3ModelProvider
  activation_func:
    _call_: false
    _target_: torch.nn.functional.silu
  add_bias_linear: false
  attention_backend:
    _args_: [2]
    _call_: true
    _target_: megatron.core.transformer.enums.AttnBackend
  context_parallel_size: 1
  cuda_graph_impl: transformer_engine
  cuda_graph_scope:
  - _args_: [1]
    _call_: true
    _target_: megatron.core.transformer.enums.CudaGraphModule
  - moe_router
  - moe_preprocess
  expert_model_parallel_size: 8
  expert_tensor_parallel_size: 1
  ffn_hidden_size: 18432
  gated_linear_unit: true
  hidden_size: 7168
  kv_channels: 128
  kv_lora_rank: 512
  moe_ffn_hidden_size: 2048
  moe_flex_dispatcher_backend: hybridep
  moe_layer_freq: [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
  moe_router_topk: 8
  moe_shared_expert_intermediate_size: 2048
  moe_token_dispatcher_type: flex
  mtp_num_layers: 1
  multi_latent_attention: true
  normalization: RMSNorm
  num_attention_heads: 128
  num_layers: 16
  num_moe_experts: 256
  num_query_groups: 128
  pipeline_model_parallel_size: 2
  position_embedding_type: rope
  q_lora_rank: 1536
  qk_head_dim: 128
  qk_pos_emb_head_dim: 64
  recompute_granularity: selective
  recompute_modules: [mla_up_proj, moe_act]
  seq_length: 4096
  sequence_parallel: false
  share_embeddings_and_output_weights: false
  should_pad_vocab: false
  tensor_model_parallel_size: 1
  v_head_dim: 128
  virtual_pipeline_model_parallel_size: null
  vocab_size: 129280
optimizer:
  _target_: megatron.bridge.training.config.OptimizerConfig
  exp_avg_dtype: {_call_: false, _target_: torch.bfloat16}
  exp_avg_sq_dtype: {_call_: false, _target_: torch.bfloat16}
  main_grads_dtype: {_call_: false, _target_: torch.float32}
  main_params_dtype: {_call_: false, _target_: torch.float32}
  optimizer: adam
  use_distributed_optimizer: true
  use_precision_aware_optimizer: true
train:
  _target_: megatron.bridge.training.config.TrainingConfig
  global_batch_size: 1024
  micro_batch_size: 1
"""


def read(text: str, gpus: int, model_id: str | None = None, source: str = "run_config.yaml"
         ) -> tuple[dict, EngineImport, list[str]]:
    data = parse_bridge_text(text, source)
    assert data is not None
    tokens, warnings = bridge_tokens(data, source)
    model = load_model(model_id).spec if model_id else None
    imported = import_megatron(tokens, gpus=gpus, given={}, model=model, source=source)
    return dict(imported.fields), imported, warnings


def test_a_full_dump_gives_the_layout_the_model_and_the_precision_recipe() -> None:
    f, imported, warnings = read(DUMP, gpus=128)
    assert warnings == []  # a full dump: nothing taken from a recipe
    # degrees, batch, the dataset's sequences; pp 2 x ep 8 of 128 GPUs: dp 64
    assert (f["tp"], f["pp"], f["ep"], f["dp"]) == (1, 2, 8, 64)
    assert (f["micro_batch"], f["global_batch"], f["seq_len"]) == (1, 1024, 4096)
    # mixed_precision named by its recipe: MXFP8 with fp8 parameter gathering, and the recipe's fp32 gradient
    # reduction over the ddp section's false (MixedPrecisionConfig.setup writes its fields onto the ddp config)
    assert (f["dtype"], f["fp8_recipe"], f["fp8_param_gather"], f["grad_dtype"]) == ("fp8", "mxfp8", True, "fp32")
    # the precision-aware optimizer's bf16 moments (torch dtypes dumped as _target_), the flex dispatcher's backend
    assert f["optimizer_state_dtype"] == "bf16"
    assert f["moe_dispatcher"] == "hybridep"
    # CudaGraphModule.attn (an enum dumped with its value) beside the names, the recompute modules, MTP
    assert f["cuda_graph_scope"] == ("attn", "moe_router", "moe_preprocess")
    assert (f["recompute"], set(f["recompute_modules"])) == ("selective", {"mla_up_proj", "moe_act"})
    assert f["attention_kernel"] == "fused"  # AttnBackend(2)
    model = imported.model
    assert model is not None and model.moe is not None and model.mla is not None
    assert (model.num_layers, model.moe.num_experts, model.moe.num_dense_layers) == (16, 256, 3)
    assert (model.vocab_size, model.mla.kv_lora_rank, model.mtp_layers) == (129280, 512, 1)


def test_the_tutorial_override_reads_with_the_model_named() -> None:
    # Megatron-Bridge tutorials/recipes/llama/conf/llama32_1b_pretrain.yaml @ v0.6.0: degrees, batch, sequence only
    text = (UPSTREAM / "llama32_1b_pretrain.yaml").read_text()
    f, _, warnings = read(text, gpus=8, model_id="llama-3.2-1b", source="llama32_1b_pretrain.yaml")
    assert (f["tp"], f["pp"], f["cp"], f["dp"]) == (1, 1, 1, 8)
    # what it leaves to its recipe comes from the recipes' common base, and the warning says which
    assert (f["dtype"], f["grad_dtype"], f["zero"], f["overlap_grad_reduce"]) == ("bf16", "fp32", 1, True)
    assert len(warnings) == 1 and "mixed_precision bf16_mixed" in warnings[0] and "recipes/common.py" in warnings[0]
    assert (f["micro_batch"], f["global_batch"], f["seq_len"]) == (1, 8, 4096)


def test_a_dense_model_does_not_take_the_providers_expert_defaults() -> None:
    # GPTModelProvider dumps moe_router_topk 2 and moe_token_dispatcher_type allgather for every model; a dense
    # model must not become an MoE layout from them, and no flag is left unread
    text = """
model:
  num_layers: 16
  hidden_size: 2048
  ffn_hidden_size: 8192
  num_attention_heads: 32
  num_query_groups: 8
  kv_channels: 64
  vocab_size: 128256
  gated_linear_unit: true
  seq_length: 1024
  num_moe_experts: null
  moe_router_topk: 2
  moe_token_dispatcher_type: allgather
  moe_shared_expert_overlap: false
  tensor_model_parallel_size: 2
train: {global_batch_size: 64, micro_batch_size: 2}
"""
    f, imported, _ = read(text, gpus=8)
    assert imported.model is not None and imported.model.moe is None
    assert (f["tp"], f["dp"], f["micro_batch"]) == (2, 4, 2)
    assert not [w for w in imported.warnings if "not known" in w]


def test_a_gpt_model_config_nests_the_transformer_config() -> None:
    # Megatron-Bridge's GPTModelConfig (Megatron-LM megatron/training/models/gpt.py): `transformer:` holds the
    # TransformerConfig, the GPT fields sit beside it; read as the flat provider is
    text = """
_target_: megatron.bridge.training.config.ConfigContainer
model:
  _target_: megatron.training.models.gpt.GPTModelConfig
  seq_length: 8192
  vocab_size: 128256
  share_embeddings_and_output_weights: false
  position_embedding_type: rope
  transformer:
    _target_: megatron.core.transformer.transformer_config.TransformerConfig
    num_layers: 32
    hidden_size: 4096
    ffn_hidden_size: 14336
    num_attention_heads: 32
    num_query_groups: 8
    gated_linear_unit: true
    normalization: RMSNorm
    add_bias_linear: false
    tensor_model_parallel_size: 2
    pipeline_model_parallel_size: 2
    sequence_parallel: true
mixed_precision: bf16_mixed
train: {global_batch_size: 128, micro_batch_size: 1}
"""
    f, imported, _ = read(text, gpus=16)
    assert (f["tp"], f["pp"], f["dp"], f["sequence_parallel"], f["seq_len"]) == (2, 2, 4, True, 8192)
    model = imported.model
    assert model is not None and (model.num_layers, model.hidden_size, model.num_kv_heads) == (32, 4096, 8)
    assert not model.tied_embeddings


def test_the_printed_task_configuration_is_cut_out_of_a_log() -> None:
    log = ("[after dataloaders are built] datetime: 2025-10-06 03:26:20\n------- Task Configuration -------\n"
           + DUMP.strip() + "\n\n----------------------------------\nTraining ...\n iteration 10/10 |\n")
    block = task_configuration(log)
    assert block is not None and yaml.safe_load(block)["train"]["global_batch_size"] == 1024
    assert parse_bridge_text(log, "log") is not None
    assert task_configuration("no configuration here") is None


@pytest.mark.parametrize(("text", "why"), [
    ("model: {num_layers: 2, is_hybrid_model: true}\ntrain: {global_batch_size: 8}", "hybrid (Mamba)"),
    ("model: {num_layers: 2}\nmixed_precision: bf16_with_fancy_mixed", "'bf16_with_fancy_mixed' is not a recipe"),
    ("model: {num_layers: 2}\nmixed_precision: nemotron_3_super_bf16_with_nvfp4_mixed", "keeps its last 14 layers"),
    ("model: {tensor_model_parallel_size: abc}\ntrain: {}", "expected an integer, got 'abc'"),
    ("model: {sequence_parallel: 'yes'}\ntrain: {}", "expected true or false"),
    ("model: {window_size: [4, 5, 6]}\ntrain: {}", "expected [left, right]"),
    ("model: {transformer: 5}\ntrain: {}", "mapping of TransformerConfig fields"),
    ("model: {}\ntrain: {}\noptimizer: {optimizer_cpu_offload: true, optimizer_offload_fraction: lots}",
     "expected a number, got 'lots'"),
    ("model: {attention_backend: {_target_: megatron.core.transformer.enums.AttnBackend, _args_: [99]}}\ntrain: {}",
     "AttnBackend members"),
    ("mixed_precision: 5\nmodel: {}\ntrain: {}", "a recipe name or a mapping"),
    ("train: {global_batch_size: true}\nmodel: {}", "expected an integer, got True"),
    ("model: [1, 2]\ntrain: {global_batch_size: 8}", None),
])
def test_what_it_cannot_read_is_one_error(text: str, why: str | None) -> None:
    data = parse_bridge_text(text, "x.yaml")
    if why is None:  # not a ConfigContainer at all: left to the argument reader
        assert data is None
        return
    assert data is not None
    with pytest.raises(PlannerError, match=re.escape(why)) as info:
        bridge_tokens(data, "x.yaml")
    assert info.value.field is not None  # names the field


def test_planner_check_takes_a_bridge_config_as_megatron_args(run_cli, tmp_path) -> None:
    path = tmp_path / "run_config.yaml"
    path.write_text(DUMP)
    result = run_cli("check", "--megatron-args", str(path), "--hardware", "gb200-nvl72", "--gpus", "128",
                     "--format", "json")
    assert result.exit_code in (0, 1), result.output
    job = json.loads(result.output)[0]
    assert (job["config"]["ep"], job["config"]["pp"], job["config"]["fp8_recipe"]) == (8, 2, "mxfp8")


# Megatron-Bridge v0.4+ logs a summary instead of the whole YAML (ConfigContainer.log_non_default_values,
# megatron/bridge/training/config.py @ v0.6.0). Hand-written in that format: the figures are made up, not a run.
SUMMARY_LOG = """time to initialize megatron (seconds): 12.345

======================================================================
Configuration Summary (Non-Default Values vs Megatron Core)
======================================================================

[optimizer] Non-default values (vs Mcore OptimizerConfig):
  adam_beta2: 0.95  (Mcore default: 0.999)
  bf16: True  (Mcore default: False)
  lr: 0.0003  (Mcore default: None)
  use_distributed_optimizer: True  (Mcore default: False)

[ddp] Non-default values (vs Mcore DistributedDataParallelConfig):
  average_in_collective: True  (Mcore default: False)
  grad_reduce_in_fp32: True  (Mcore default: False)
  overlap_grad_reduce: True  (Mcore default: False)
  overlap_param_gather: True  (Mcore default: False)
  use_distributed_optimizer: True  (Mcore default: False)

[model] Non-default values (vs Mcore TransformerConfig):
  add_bias_linear: False  (Mcore default: True)
  attention_backend: <AttnBackend.auto: 5>  (Mcore default: <AttnBackend.auto: 5>)
  bf16: True  (Mcore default: False)
  cuda_graph_impl: 'transformer_engine'  (Mcore default: 'none')
  cuda_graph_scope: [<CudaGraphModule.attn: 1>, <CudaGraphModule.mlp: 2>]  (Mcore default: [])
  ffn_hidden_size: 14336  (Mcore default: None)
  gated_linear_unit: True  (Mcore default: False)
  hidden_size: 4096  (Mcore default: 0)
  kv_channels: 128  (Mcore default: None)
  normalization: 'RMSNorm'  (Mcore default: 'LayerNorm')
  num_attention_heads: 32  (Mcore default: 0)
  num_layers: 32  (Mcore default: 0)
  num_query_groups: 8  (Mcore default: None)
  params_dtype: torch.bfloat16  (Mcore default: torch.float32)
  pipeline_dtype: torch.bfloat16  (Mcore default: None)
  tensor_model_parallel_size: 2  (Mcore default: 1)

----------------------------------------------------------------------
Other Configuration Values:
----------------------------------------------------------------------

[train]:
  global_batch_size: 128
  micro_batch_size: 1
  train_iters: 50

[dataset]:
  seq_length: 8192
  sequence_length: 8192

[tokenizer]:
  tokenizer_type: 'NullTokenizer'
  vocab_size: 128256

======================================================================
 [2026-08-20 10:00:01] iteration        5/      50 | elapsed time per iteration (ms): 9100.0 | global batch size:   128 |
 [2026-08-20 10:00:46] iteration       10/      50 | elapsed time per iteration (ms): 9000.0 | global batch size:   128 |
 [2026-08-20 10:01:31] iteration       15/      50 | elapsed time per iteration (ms): 9020.0 | global batch size:   128 |
 [2026-08-20 10:02:16] iteration       20/      50 | elapsed time per iteration (ms): 8980.0 | global batch size:   128 |
[Rank 0] (after 20 iterations) memory (MB) | allocated: 30000.0 | max allocated: 52000.0 | reserved: 54000.0 | max reserved: 54000.0
"""


def test_the_logged_configuration_summary_is_read_as_the_whole_config() -> None:
    data = parse_bridge_text(SUMMARY_LOG, "train.log")
    assert data is not None
    # repr-printed values: strings unquoted, enum members by name (also in lists), torch dtypes as planner names
    assert data["model"]["cuda_graph_scope"] == ["attn", "mlp"]
    assert data["model"]["attention_backend"] == "auto"
    assert data["model"]["params_dtype"] == "bf16"
    assert data["tokenizer"]["vocab_size"] == 128256
    f, imported, warnings = read(SUMMARY_LOG, gpus=16, source="train.log")
    # a summary is the whole config (nothing is taken from a recipe), less the GPT fields it does not print
    assert len(warnings) == 1 and "tied" in warnings[0]
    assert (f["tp"], f["dp"], f["seq_len"], f["global_batch"]) == (2, 8, 8192, 128)
    assert (f["dtype"], f["grad_dtype"], f["zero"], f["cuda_graph_scope"]) == ("bf16", "fp32", 1, ("attn", "mlp"))
    model = imported.model
    assert model is not None and (model.num_layers, model.num_kv_heads) == (32, 8)
    assert model.vocab_size == 128256  # the tokenizer's, a multiple of 128 x tp already


def test_a_summary_without_grad_reduce_in_fp32_reduces_in_bf16() -> None:
    # a field the summary leaves out has Megatron-Core's default: DistributedDataParallelConfig.grad_reduce_in_fp32
    # is False, so gradients are reduced in bf16 (Megatron-LM's own bf16 rule would say fp32)
    text = SUMMARY_LOG.replace("  grad_reduce_in_fp32: True  (Mcore default: False)\n", "")
    f, _, _ = read(text, gpus=16, source="train.log")
    assert f["grad_dtype"] == "bf16"


def test_calibrate_builds_the_run_of_a_bridge_log(run_cli, tmp_path) -> None:
    log = tmp_path / "train.log"
    log.write_text(SUMMARY_LOG)
    job = tmp_path / "job.yaml"
    job.write_text("hardware: h100-sxm\ngpus: 16\n")
    result = run_cli("calibrate", "--log", str(log), "--job", str(job), "--format", "json")
    assert result.exit_code == 0, result.output
    run = json.loads(result.output)["runs"][0]
    # the steps after the first logged interval: 9000, 9020, 8980 ms -> the median; the max reserved memory
    assert (run["quantity"], run["measured_seconds"]) == ("step_seconds", pytest.approx(9.0))
    assert run["measured_peak_gib"] == pytest.approx(54000 / 1024)
    assert run["layout"]["tp"] == 2 and run["layout"]["seq_len"] == 8192
    no_gpus = run_cli("calibrate", "--log", str(log), "--hardware", "h100-sxm")
    assert no_gpus.exit_code == 2 and "does not print the GPU count" in no_gpus.output


FIELDS = json.loads((UPSTREAM / "config_fields.json").read_text())


def test_the_precision_recipes_are_megatron_bridges_own() -> None:
    # every recipe Megatron-Bridge v0.6.0 registers is read (or refused for the layers it keeps in 16 bits), and
    # no other
    assert sorted([*PRECISION_RECIPES, *UNMODELLED_RECIPES]) == FIELDS["mixed_precision_recipes"]


WRITER_CASES = {**{k: v for k, v in ROUNDTRIP_CASES.items()}, **{k: v[:3] for k, v in MOE_CASES.items()}}


@pytest.mark.parametrize("name", list(WRITER_CASES))
def test_every_field_the_writer_writes_is_one_of_megatron_bridges(name: str) -> None:
    # the dataclass fields of Megatron-Core / Megatron-Bridge (config_fields.json, read from their sources): an
    # override with a name they do not have fails OmegaConf's merge onto the recipe
    model_id, gpus, fields = WRITER_CASES[name]
    model = load_model(model_id).spec
    layout = resolve_layout(model, gpus, **fields)
    try:
        mapped, _ = engine_layout(model, layout)
    except PlannerError:
        return  # a layout Megatron-LM cannot run (test_roundtrip says which)
    written = override(model, mapped)
    assert written["mixed_precision"] in FIELDS["mixed_precision_recipes"]
    for section, values in written.items():
        if section == "mixed_precision":
            continue
        unknown = set(values) - set(FIELDS["fields"][section]) - {"_target_"}  # the class a section instantiates
        assert not unknown, (section, unknown)


@pytest.mark.parametrize(("fraction", "offloaded", "said"), [(None, True, None), (1.0, True, None),
                                                             (0.5, True, "read as all of it"),
                                                             (0.0, False, "nothing is offloaded")])
def test_optimizer_offload_follows_its_fraction(fraction, offloaded: bool, said: str | None) -> None:
    # OptimizerConfig.optimizer_offload_fraction defaults to 0.0 in Megatron-Core: offload on with it at 0 moves
    # nothing; planner offloads all of the optimizer state or none
    optimizer = {"use_distributed_optimizer": True, "optimizer_cpu_offload": True, "use_precision_aware_optimizer": True}
    if fraction is not None:
        optimizer["optimizer_offload_fraction"] = fraction
    text = yaml.safe_dump({"model": {"tensor_model_parallel_size": 1}, "optimizer": optimizer,
                           "train": {"global_batch_size": 16, "micro_batch_size": 1}, "dataset": {"seq_length": 4096},
                           "mixed_precision": "bf16_mixed"})
    f, _, warnings = read(text, gpus=8, model_id="llama-3.1-8b")
    assert f.get("offload_optimizer", False) is offloaded
    assert any(said in w for w in warnings) if said else not [w for w in warnings if "offload" in w]


def test_a_layout_given_as_lists_of_layer_names_is_megatrons_layout_string() -> None:
    # Megatron-Bridge's DeepSeek-V3 recipes set pipeline_model_parallel_layout as one list of names per virtual
    # stage (recipes/deepseek/h100/deepseek_v3.py @ v0.6.0, (pp 8, vp 1)): embedding + 8, six stages of 8, 5 + mtp +
    # loss over the 61 layers; a run_config.yaml dumps it so
    layout = [["embedding"] + ["decoder"] * 8] + [["decoder"] * 8] * 6 + [["decoder"] * 5 + ["mtp", "loss"]]
    text = DUMP.replace("  pipeline_model_parallel_size: 2\n", "  pipeline_model_parallel_size: 8\n").replace(
        "  num_layers: 16\n", "  num_layers: 61\n").replace(
        "  moe_layer_freq: [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n", "  moe_layer_freq: ([0]*3+[1]*58)\n")
    data = yaml.safe_load(text)
    data["model"]["pipeline_model_parallel_layout"] = layout
    tokens, _ = bridge_tokens(data, "run_config.yaml")
    flag = tokens.index("--pipeline-model-parallel-layout")
    assert tokens[flag + 1] == "E" + "t" * 8 + ("|" + "t" * 8) * 6 + "|" + "t" * 5 + "mL"
    imported = import_megatron(tokens, gpus=512, given={}, model=None, source="run_config.yaml")
    assert dict(imported.fields)["pp"] == 8
    bad = {**data, "model": {**data["model"], "pipeline_model_parallel_layout": [["decoder", "attention"]]}}
    with pytest.raises(PlannerError, match="unknown layer name 'attention'"):
        bridge_tokens(bad, "run_config.yaml")


def test_an_attention_variant_planner_does_not_model_is_refused_by_its_field(run_cli, tmp_path) -> None:
    """A provider with experimental_attention_variant gdn (Gated DeltaNet layers) is not read as softmax attention:
    one error naming the field; dsa with the indexer's fields (Megatron-Bridge's GLM-5 bridge sets them) reads as
    DeepSeek Sparse Attention; the provider default null reads as before."""
    path = tmp_path / "run_config.yaml"
    path.write_text(DUMP.replace("model:\n", "model:\n  experimental_attention_variant: gdn\n", 1))
    result = run_cli("check", "--megatron-args", str(path), "--hardware", "gb200-nvl72", "--gpus", "128")
    assert result.exit_code == 2
    assert "model.experimental_attention_variant: --experimental-attention-variant gdn" in result.stderr
    dsa = ("model:\n  experimental_attention_variant: dsa\n  dsa_indexer_n_heads: 32\n  dsa_indexer_head_dim: 128\n"
           "  dsa_indexer_topk: 2048\n  dsa_kernel_backend: cudnn\n  dsa_indexer_use_sparse_loss: true\n")
    path.write_text(DUMP.replace("model:\n", dsa, 1))
    tokens, _ = bridge_tokens(parse_bridge_text(path.read_text(), "run_config.yaml"), "run_config.yaml")
    imported = import_megatron(tokens, gpus=128, given={}, model=None, source="run_config.yaml")
    assert not any("sparse-loss" in w or "kernel-backend" in w for w in imported.warnings)
    model = imported.model
    assert model is not None and model.sparse_attention is not None
    assert (model.sparse_attention.index_heads, model.sparse_attention.topk) == (32, 2048)
    path.write_text(DUMP.replace("model:\n", "model:\n  experimental_attention_variant: null\n", 1))
    assert run_cli("check", "--megatron-args", str(path), "--hardware", "gb200-nvl72", "--gpus", "128").exit_code in (0, 1)


def test_a_gated_deltanet_provider_reads_as_linear_attention(tmp_path) -> None:
    """Megatron-Bridge's Qwen3-Next/Qwen3.5 bridges set experimental_attention_variant gated_delta_net, the
    linear_* sizes, linear_attention_freq and attention_output_gate (TransformerConfig fields @ d98e8a64): they read
    as the model's Gated DeltaNet layers."""
    gdn = ("model:\n  experimental_attention_variant: gated_delta_net\n  linear_attention_freq: 4\n"
           "  linear_num_key_heads: 16\n  linear_num_value_heads: 32\n  linear_key_head_dim: 128\n"
           "  linear_value_head_dim: 128\n  linear_conv_kernel_dim: 4\n  attention_output_gate: true\n")
    path = tmp_path / "run_config.yaml"
    # the DeepSeek-V3-shaped dump above without its MLA (GDN with MLA is refused)
    path.write_text(DUMP.replace("model:\n", gdn, 1).replace("multi_latent_attention: true", "multi_latent_attention: false"))
    tokens, _ = bridge_tokens(parse_bridge_text(path.read_text(), "run_config.yaml"), "run_config.yaml")
    model = import_megatron(tokens, gpus=128, given={}, model=None, source="run_config.yaml").model
    assert model is not None and model.linear_attention is not None and model.attention_output_gate
    la = model.linear_attention
    assert (la.num_key_heads, la.num_value_heads, la.full_attention_interval) == (16, 32, 4)
    assert model.num_attention_layers == model.num_layers // 4


def _yarn_config(**yarn) -> str:
    model = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "ffn_hidden_size": 128,
             "vocab_size": 1024, "position_embedding_type": "yarn", "tensor_model_parallel_size": 1, **yarn}
    return yaml.safe_dump({"model": model, "train": {"global_batch_size": 8, "micro_batch_size": 1},
                           "dataset": {"seq_length": 128}, "mixed_precision": "bf16_mixed"})


@pytest.mark.parametrize(("yarn", "factor"), [
    # GPTModelProvider's yarn_* fields as the gpt-oss bridge sets them (scale 32, both mscales None): 0.1 ln 32 + 1
    ({"yarn_rotary_scaling_factor": 32.0, "yarn_mscale": None, "yarn_mscale_all_dim": None}, 1 + 0.1 * math.log(32)),
    # one mscale without the other: Megatron-Core's _yarn_get_concentration_factor ignores both
    ({"yarn_rotary_scaling_factor": 32.0, "yarn_mscale": 0.5}, 1 + 0.1 * math.log(32)),
    ({"yarn_rotary_scaling_factor": 32.0, "yarn_mscale": 1.0, "yarn_mscale_all_dim": 1.0}, 1.0),
    ({}, 1.0),
])
def test_yarn_fields_give_megatrons_concentration_factor(yarn: dict, factor: float) -> None:
    _, imported, _ = read(_yarn_config(**yarn), gpus=1)
    assert imported.model.rotary_attention_factor == pytest.approx(factor)


@pytest.mark.parametrize(("fields", "field"), [
    ({"yarn_rotary_scaling_factor": "32"}, "model.yarn_rotary_scaling_factor"),
    ({"yarn_rotary_scaling_factor": -40.0}, "model.yarn_rotary_scaling_factor"),
    ({"yarn_rotary_scaling_factor": 40.0, "yarn_mscale": 1e308, "yarn_mscale_all_dim": 0.0},
     "model.yarn_rotary_scaling_factor"),
    # MLA providers keep the unprefixed names
    ({"multi_latent_attention": True, "rotary_scaling_factor": -40.0}, "model.rotary_scaling_factor"),
])
def test_a_yarn_field_that_gives_no_usable_factor_names_itself(fields: dict, field: str) -> None:
    with pytest.raises(PlannerError) as info:
        read(_yarn_config(**fields), gpus=1)
    assert info.value.field == field


def test_an_uneven_interleaved_split_is_written_as_a_layout_string_and_read_back() -> None:
    # DeepSeek-V3's 61 layers on pp 8 x v 4 (the search offers it; Megatron-Bridge's recipes run such splits): no
    # even virtual split exists, so the override carries planner's split as pipeline_model_parallel_layout
    model = load_model("deepseek-v3").spec
    layout = resolve_layout(model, 2048, tp=2, pp=8, interleave=4, ep=64, zero=1, sequence_parallel=True,
                            global_batch=15360, seq_len=4096, moe_ep_overlap=True, moe_dispatcher="deepep")
    mapped, _ = engine_layout(model, layout)
    written = override(model, mapped)
    text = written["model"]["pipeline_model_parallel_layout"]
    assert text.startswith("E") and text.endswith("mL") and text.count("|") == 8 * 4 - 1
    assert "virtual_pipeline_model_parallel_size" not in written["model"]
    body = {k: v for k, v in written.items() if k != "mixed_precision"}
    f, imported, warnings = read(yaml.safe_dump({**body, "mixed_precision": written["mixed_precision"]}),
                                 gpus=2048, model_id="deepseek-v3")
    back = resolve_layout(model, 2048, **f)
    assert (back.pp, back.interleave, back.moe_ep_overlap) == (8, 4, True)
    assert not [w for w in imported.warnings if "pipeline" in w]  # the layout places planner's own split


def test_the_comm_overlap_sections_moe_pair_is_what_runs() -> None:
    # CommOverlapConfig.setup writes its overlap_moe_expert_parallel_comm and delay_wgrad_compute onto the model, its
    # value where the section sets one (comm_overlap.py _get_model_comm_overlap_cfgs @ 067f987df); the recipes set
    # them there (perf_recipes/gpt_oss/common.py: cfg.comm_overlap.overlap_moe_expert_parallel_comm = True)
    text = DUMP.replace("  tp_comm_overlap: false\n", "  tp_comm_overlap: false\n  overlap_moe_expert_parallel_comm: true\n"
                        "  delay_wgrad_compute: true\n").replace("  pipeline_model_parallel_size: 2\n",
                                                             "  pipeline_model_parallel_size: 2\n"
                                                             "  virtual_pipeline_model_parallel_size: 2\n", 1)
    text = text.replace("  virtual_pipeline_model_parallel_size: null\n", "")
    text = text.replace("  cuda_graph_scope:\n  - _args_: [1]\n    _call_: true\n"
                        "    _target_: megatron.core.transformer.enums.CudaGraphModule\n  - moe_router\n"
                        "  - moe_preprocess\n", "  cuda_graph_scope: [moe_router, moe_preprocess]\n")
    f, _, _ = read(text, gpus=128)
    assert f["moe_ep_overlap"] is True and "moe_delay_wgrad" not in f  # delayed: the overlap's default pairing
    f, _, _ = read(text.replace("  delay_wgrad_compute: true\n", ""), gpus=128)
    assert f["moe_ep_overlap"] is True and f["moe_delay_wgrad"] is False
    # a model-level value under a section that says otherwise: the section's wins, as at run time
    f, _, _ = read(text.replace("  overlap_moe_expert_parallel_comm: true\n  delay_wgrad_compute: true\n",
                                "  overlap_moe_expert_parallel_comm: false\n").replace(
        "  moe_token_dispatcher_type: flex\n", "  moe_token_dispatcher_type: flex\n  overlap_moe_expert_parallel_comm: "
        "true\n"), gpus=128)
    assert f["moe_ep_overlap"] is False


def test_the_writer_puts_the_moe_overlap_pair_where_the_recipes_do() -> None:
    # under comm_overlap, which CommOverlapConfig.setup applies onto the model; a model-level value would be
    # overwritten by a recipe's CommOverlapConfig (False where it leaves the field unset)
    model = load_model("deepseek-v2-lite").spec
    layout = resolve_layout(model, 16, ep=8, dp=16, micro_batch=1, global_batch=64, seq_len=4096,
                            moe_dispatcher="alltoall", moe_ep_overlap=True)
    mapped, _ = engine_layout(model, layout)
    written = override(model, mapped)
    assert written["comm_overlap"]["overlap_moe_expert_parallel_comm"] is True
    assert written["comm_overlap"]["delay_wgrad_compute"] is True
    assert "overlap_moe_expert_parallel_comm" not in written["model"]
    side = resolve_layout(model, 16, ep=8, dp=16, micro_batch=1, global_batch=64, seq_len=4096,
                          moe_dispatcher="alltoall", moe_delay_wgrad=True)
    written = override(model, engine_layout(model, side)[0])
    assert written["model"]["overlap_dispatch_backward_with_experts_wgrad"] is True
    assert "delay_wgrad_compute" not in written.get("comm_overlap", {})


def test_latent_moe_and_unmodelled_moe_run_settings_in_a_bridge_config(run_cli, tmp_path) -> None:
    # the provider's moe_latent_size refused by its field; a per-rank capacity and paged stashes named in warnings
    path = tmp_path / "run_config.yaml"
    path.write_text(DUMP.replace("model:\n", "model:\n  moe_latent_size: 1024\n", 1))
    result = run_cli("check", "--megatron-args", str(path), "--hardware", "gb200-nvl72", "--gpus", "128")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "model.moe_latent_size" in result.stderr and "latent" in result.stderr
    text = DUMP.replace("model:\n", "model:\n  moe_expert_rank_capacity_factor: 1.5\n  moe_paged_stash: true\n"
                        "  fine_grained_activation_offloading: false\n", 1)
    _, imported, _ = read(text, gpus=128)
    said = " ".join(imported.warnings)
    assert "--moe-expert-rank-capacity-factor" in said and "--moe-paged-stash" in said
    assert "fine-grained" not in said  # false is Megatron-Core's default: nothing left out


def test_a_peft_section_is_lora_with_bridges_defaults() -> None:
    # Megatron-Bridge's LoRA (megatron/bridge/peft/lora.py @ 067f987d): dim 32 on linear_qkv, linear_proj,
    # linear_fc1 and linear_fc2 unless set; its performance recipes adapt linear_qkv alone at dim 16
    assert peft_fields({"model": {}}, "x.yaml") == {}
    assert peft_fields({"peft": {"_target_": "megatron.bridge.peft.lora.LoRA"}}, "x.yaml") == {
        "lora_rank": 32, "lora_targets": "all_linear"}
    assert peft_fields({"peft": {"_target_": "megatron.bridge.peft.lora.LoRA", "dim": 16,
                                 "target_modules": ["linear_qkv"]}}, "x.yaml") == {"lora_rank": 16, "lora_targets": "qkv"}
    assert peft_fields({"peft": "lora"}, "x.yaml")["lora_rank"] == 32
    with pytest.raises(PlannerError, match="DoRA"):
        peft_fields({"peft": {"_target_": "megatron.bridge.peft.dora.DoRA"}}, "x.yaml")
    with pytest.raises(PlannerError, match="peft.dim"):
        peft_fields({"peft": {"_target_": "megatron.bridge.peft.lora.LoRA", "dim": 0}}, "x.yaml")


def test_a_bridge_lora_config_in_a_job_plans_lora(tmp_path) -> None:
    from planner.engines.job import resolve_job
    from planner.specs.job import Job

    config = tmp_path / "lora.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_query_groups": 8,
                  "ffn_hidden_size": 14336, "seq_length": 4096, "tensor_model_parallel_size": 1},
        "train": {"global_batch_size": 8, "micro_batch_size": 1},
        "peft": {"_target_": "megatron.bridge.peft.lora.LoRA", "dim": 16, "target_modules": ["linear_qkv"]}}),
        encoding="utf-8")
    job = Job.model_validate({"model": "llama-3.1-8b", "hardware": "h100-sxm", "gpus": 8,
                              "engine": {"format": "megatron", "path": str(config)}})
    layout = resolve_job(job, base=tmp_path, source="job").layout
    assert (layout.lora_rank, layout.lora_targets) == (16, "qkv")
