"""Upstream Megatron-LM and Megatron-DeepSpeed launch files read as Megatron reads them.

Fixtures: tests/fixtures/engines/upstream/megatron/ (repository, path and commit in ../SOURCES.md).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from planner.engines.export import render_export
from planner.engines.load import load_hardware, load_model
from planner.engines.megatron import import_megatron, read_launch_text, split_launch_text
from planner.errors import PlannerError
from planner.physics.params import count_params
from planner.training.estimate import estimate
from planner.training.rules import resolve_layout

UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "upstream" / "megatron"


def _import(name: str, gpus: int, given: dict | None = None, model=None):
    tokens, notes = read_launch_text((UPSTREAM / name).read_text(), name)
    imp = import_megatron(tokens, gpus=gpus, given=given or {}, model=model, source=name)
    return imp, notes


def _total(model) -> int:
    c = count_params(model)
    return c.embedding + c.head + c.num_dense_layers * c.dense_layer + c.num_moe_layers * c.moe_layer


def test_gpt3_175b_flagship_script_reads_gpt2_bpe_without_tokenizer_type(run_cli):
    """NVIDIA's examples/gpt3 script passes GPT-2's vocab/merge files and no --tokenizer-type: pretrain_gpt.py's
    default GPT2BPETokenizer (50,257 tokens) padded to 128 x tp(8) = 1,024 gives 51,200 rows, the vocabulary of
    the catalog's GPT-3 175B (Brown et al. 2020 architecture), so the parameter counts agree exactly."""
    imp, _ = _import("train_gpt3_175b_distributed.sh", 128)
    assert imp.model.vocab_size == 51200
    assert _total(imp.model) == _total(load_model("gpt3-175b").spec)
    lay = resolve_layout(imp.model, 128, **imp.fields)
    assert (lay.tp, lay.pp, lay.dp, lay.dtype, lay.global_batch, lay.micro_batch) == (8, 16, 1, "fp16", 1536, 1)
    result = run_cli("check", "--megatron-args", UPSTREAM / "train_gpt3_175b_distributed.sh", "--hardware",
                     "h100-sxm", "--gpus", "128")
    assert result.exit_code in (0, 1), result.output


def test_gpt3_script_with_a_word_split_schedule_is_refused_as_megatron_refuses_it(run_cli):
    """Since April 2026 the script writes --step-batch-size-schedule "0:16 2.4B:320 ..." inside an array that it
    expands unquoted, so bash splits the value into six words (argparse: unrecognized arguments), and it also
    keeps --global-batch-size, which validate_args rejects ('Cannot specify both')."""
    result = run_cli("check", "--megatron-args", UPSTREAM / "train_gpt3_175b_distributed_step_schedule.sh",
                     "--hardware", "h100-sxm", "--gpus", "128")
    assert result.exit_code == 2 and "--step-batch-size-schedule takes one value, got 6" in result.output
    with pytest.raises(PlannerError, match="Cannot specify both"):
        import_megatron(["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length",
                         "64", "--bf16", "--step-batch-size-schedule", "0:16 1M:32", "--global-batch-size", "32"],
                        gpus=1, given={}, model=None, source="t")
    # alone, the schedule's last batch size is the one planner checks
    imp = import_megatron(["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length",
                           "64", "--bf16", "--step-batch-size-schedule", "0:16 1M:32"], gpus=1, given={}, model=None,
                          source="t")
    assert imp.fields["global_batch"] == 32


def test_llama3_8b_fp8_recipe_fits_on_8_h100_with_fp8_param_gather(run_cli):
    """NVIDIA's 8 x H100 Llama 3 8B FP8 recipe gives --fp8-param-gather with the distributed optimizer: the
    layers' weights are fp8 (1 byte). Without it the same layout is 56 MB over the usable memory."""
    result = run_cli("check", "--megatron-args", UPSTREAM / "train_llama3_8b_h100_fp8.sh", "--hardware", "h100-sxm",
                     "--gpus", "8")
    assert result.exit_code == 0, result.output
    imp, _ = _import("train_llama3_8b_h100_fp8.sh", 8)
    hw = load_hardware("h100-sxm").spec
    lay = resolve_layout(imp.model, 8, **imp.fields)
    assert lay.fp8_param_gather and lay.zero == 1 and lay.dtype == "fp8"
    with_gather = estimate(imp.model, hw, lay)
    without = estimate(imp.model, hw, lay.model_copy(update={"fp8_param_gather": False}))
    assert with_gather.fits and not without.fits
    # ZeRO 1 keeps every weight on every rank: the saving is one byte per transformer-layer parameter.
    # Per layer (h 4096, 32 heads of 128, 8 KV heads, ffn 14336, two RMSNorms):
    #   q, o 4096 x 4096 each; k, v 4096 x 1024 each; MLP 3 x 4096 x 14336; norms 2 x 4096
    #   = 33,554,432 + 8,388,608 + 176,160,768 + 8,192 = 218,112,000; x 32 layers = 6,979,584,000.
    saved = without.stages[0].weights_bytes - with_gather.stages[0].weights_bytes
    assert saved == 6_979_584_000


def test_fp8_param_gather_needs_fp8_and_a_sharded_optimizer():
    base = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
            "--vocab-size", "128", "--bf16", "--fp8-param-gather"]
    with pytest.raises(PlannerError, match="needs fp8 training"):
        import_megatron(base, gpus=2, given={}, model=None, source="t")
    with pytest.raises(PlannerError, match="--use-distributed-optimizer"):
        import_megatron([*base, "--fp8-format", "hybrid"], gpus=2, given={}, model=None, source="t")
    ok = import_megatron([*base, "--fp8-format", "hybrid", "--use-distributed-optimizer"], gpus=2, given={},
                         model=None, source="t")
    assert ok.fields["fp8_param_gather"] is True


def test_gpt_oss_20b_from_megatron_flags_counts_20_91_billion():
    """examples/post_training/modelopt/conf/openai/gpt-oss-20b.sh: --quick-geglu is a gated MLP (gated_linear_unit
    with quick_gelu in argument_utils.py), biases stay on (no --disable-bias-linear), --enable-gpt-oss sets YaRN
    RoPE (no position table), --softmax-type learnable adds a sink logit per head. Hand count, h 2880, 64 query
    heads and 8 KV heads of 64, 32 experts of 2880:
      embedding and untied head 2 x 201,088 x 2,880 = 1,158,266,880; final norm 2,880
      attention 2 x 2880 x 4096 + 2 x 2880 x 512 = 26,542,080, biases 4096 + 512 + 512 + 2880 = 8,000, sinks 64
      experts 32 x (2880 x 5760 + 5760 + 2880 x 2880 + 2880) = 796,538,880; router 2880 x 32 = 92,160; norms 5,760
      per layer 823,186,944; x 24 = 19,756,486,656; total 20,914,756,416.
    transformers counts 20,914,757,184 for openai/gpt-oss-20b: 768 more, the router's biases (24 x 32), which
    Megatron's router does not have."""
    imp, _ = _import("gpt-oss-20b.sh", 8, {"global_batch": 8})
    model = imp.model
    assert model.mlp_kind == "gated" and model.position_embedding == "rotary" and model.attention_sinks
    assert (model.sliding_window_tokens, model.sliding_window_layers) == (128, 12)  # --window-size 127,0, skip 2
    # --enable-gpt-oss: YaRN at scale 32, mscale 1 over mscale_all_dim 0 (post_training/model_builder.py)
    assert model.rotary_attention_factor == pytest.approx(1 + 0.1 * math.log(32))
    assert _total(model) == 20_914_756_416
    assert round(_total(model) / 1e9, 2) == 20.91
    # written back, the flags describe the same model
    hw = load_hardware("h100-sxm").spec
    lay = resolve_layout(model, 8, **imp.fields)
    exported = render_export("megatron", "gpt-oss", model, hw, lay, estimate(model, hw, lay))
    assert "--window-attn-skip-freq 2" in exported.text and "--softmax-type learnable" in exported.text
    back = import_megatron(split_launch_text(exported.text, "m.sh"), gpus=8, given={}, model=None, source="m")
    assert _total(back.model) == _total(model)
    assert back.model.rotary_attention_factor == pytest.approx(model.rotary_attention_factor, rel=1e-12)


def test_swiglu_and_quick_geglu_together_are_refused():
    with pytest.raises(PlannerError, match="--swiglu and --quick-geglu"):
        import_megatron(["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length",
                         "64", "--vocab-size", "128", "--bf16", "--swiglu", "--quick-geglu"], gpus=1, given={},
                        model=None, source="t")


def test_bloom_176b_megatron_deepspeed_launcher(run_cli):
    """BigScience's tr11-176B-ml.slurm: Megatron-DeepSpeed with --deepspeed --zero-stage 0 and --bf16 (DeepSpeed's
    BF16_Optimizer: optimizer states sharded as ZeRO 1, fp32 gradient buffer), --checkpoint-activations (every
    layer), tp 4 x pp 12 on 48 nodes x 8 A100 80GB (384 GPUs), micro batch 2, global 2048, no flash attention
    (2022), ALiBi, an embedding LayerNorm and --pad-vocab-size-to 250880. The flags describe BLOOM exactly."""
    imp, _ = _import("tr11-176B-ml.slurm", 384)
    lay = resolve_layout(imp.model, 384, **imp.fields)
    assert (lay.tp, lay.pp, lay.dp, lay.zero, lay.grad_dtype, lay.recompute) == (4, 12, 8, 1, "fp32", "full")
    assert (lay.micro_batch, lay.global_batch, lay.seq_len, lay.flash_attention) == (2, 2048, 2048, False)
    model = imp.model
    assert model.position_embedding == "alibi" and model.embedding_norm and model.vocab_size == 250880
    assert _total(model) == _total(load_model("bloom-176b").spec) == 176_247_271_424
    assert any("--deepspeed_config is not read" in w for w in imp.warnings)
    # 70 layers on 12 stages: DeepSpeed's 'type:transformer|embedding' partition counts the embedding and the
    # tied head as layers (72 / 12 = 6 each), so the end stages hold 5, planner's split too: no warning
    assert not any("pipeline" in w for w in imp.warnings)
    result = run_cli("check", "--megatron-args", UPSTREAM / "tr11-176B-ml.slurm", "--hardware", "a100-80gb",
                     "--gpus", "384", "--model", "bloom-176b")
    assert result.exit_code == 0, result.output


def test_megatron_deepspeed_cpu_optimizer_is_refused():
    with pytest.raises(PlannerError, match="--cpu-optimizer"):
        import_megatron(["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length",
                         "64", "--vocab-size", "128", "--bf16", "--deepspeed", "--cpu-optimizer"], gpus=1, given={},
                        model=None, source="t")


LAYERS_61 = ["--num-layers", "61", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
             "--vocab-size", "128", "--bf16", "--pipeline-model-parallel-size", "8"]


def test_layers_that_do_not_divide_by_pp_are_refused_as_megatron_asserts():
    with pytest.raises(PlannerError, match="61 layers do not divide by --pipeline-model-parallel-size 8"):
        import_megatron(LAYERS_61, gpus=8, given={}, model=None, source="t")
    # with the uneven first/last-stage flags Megatron divides the rest evenly: 61 - 5 - 5 = 51 is not 6 x n
    with pytest.raises(PlannerError, match="do not divide them evenly"):
        import_megatron([*LAYERS_61, "--decoder-first-pipeline-num-layers", "5",
                         "--decoder-last-pipeline-num-layers", "5"], gpus=8, given={}, model=None, source="t")
    # 61 = 7 + 6 x 8 + 6: Megatron runs it; planner's own split of 61 on 8 is [7, 8, 8, 8, 8, 8, 7, 7]: a warning
    imp = import_megatron([*LAYERS_61, "--decoder-first-pipeline-num-layers", "7",
                           "--decoder-last-pipeline-num-layers", "6"], gpus=8, given={}, model=None, source="t")
    assert any("[7, 8, 8, 8, 8, 8, 8, 6]" in w and "approximate" in w for w in imp.warnings)


def test_exports_write_uneven_splits_megatron_can_run_and_refuse_the_others():
    hw = load_hardware("h100-sxm").spec
    # Llama 3.1 405B: 126 layers on 16 stages, one fewer on the first and the last (Dubey et al. 2024)
    model = load_model("llama-3.1-405b").spec
    lay = resolve_layout(model, 1024, tp=8, pp=16, zero=1, sequence_parallel=True, recompute="full",
                         global_batch=512, seq_len=8192)
    exported = render_export("megatron", "llama-3.1-405b", model, hw, lay, estimate(model, hw, lay))
    assert "--decoder-first-pipeline-num-layers 7" in exported.text
    assert "--decoder-last-pipeline-num-layers 7" in exported.text
    back = import_megatron(split_launch_text(exported.text, "m.sh"), gpus=1024, given={}, model=model, source="m")
    assert resolve_layout(model, 1024, **back.fields) == lay and not back.warnings
    # DeepSeek-V3: 61 layers on 8 stages, planner's split [7, 8, 8, 8, 8, 8, 7, 7] has no Megatron-LM spelling
    model = load_model("deepseek-v3").spec
    lay = resolve_layout(model, 512, tp=8, pp=8, ep=8, zero=1, sequence_parallel=True, recompute="full",
                         global_batch=512, seq_len=4096)
    with pytest.raises(PlannerError, match=r"pp\(8\) with num_layers\(61\)"):
        render_export("megatron", "deepseek-v3", model, hw, lay, estimate(model, hw, lay))


def test_uneven_export_is_refused_on_the_command_line(run_cli):
    result = run_cli("export", "--to", "megatron", "--model", "deepseek-v3", "--hardware", "h100-sxm", "--gpus",
                     "512", "--tp", "8", "--pp", "8", "--ep", "8", "--zero", "1", "--recompute", "full",
                     "--global-batch", "512", "--seq-len", "4096")
    assert result.exit_code == 2 and "num_layers(61)" in result.output and "Traceback" not in result.output


def test_megatron_deepspeed_moe_example_is_the_52b_deepspeed_moe_model(run_cli):
    """microsoft/Megatron-DeepSpeed's examples_deepspeed/MoE/ds_pretrain_gpt_1.3B_MoE128.sh: GPT 1.3B (24 layers,
    h 2048) with 128 top-1 experts on every second layer (--expert-interval default 2), expert parallelism
    min(128, 64 GPUs) = 64, fp16, ZeRO from --zero-stage. Rajbhandari et al. 2022 (DeepSpeed-MoE, Table 1) give
    this '1.3B+MoE-128' model 52 B parameters. The launch ends in '&> ${LOG}', which bash does not pass on."""
    imp, _ = _import("ds_pretrain_gpt_1.3B_MoE128.sh", 64)
    model = imp.model
    assert (model.moe.num_experts, model.moe.experts_per_token, model.num_moe_layers) == (128, 1, 12)
    assert round(_total(model) / 1e9) == 52
    lay = resolve_layout(model, 64, **imp.fields)
    assert (lay.ep, lay.dp, lay.dtype, lay.micro_batch, lay.global_batch) == (64, 64, "fp16", 8, 512)
    assert not [w for w in imp.warnings if "is not known" in w]
    result = run_cli("check", "--megatron-args", UPSTREAM / "ds_pretrain_gpt_1.3B_MoE128.sh", "--hardware",
                     "a100-80gb", "--gpus", "64")
    assert result.exit_code in (0, 1), result.output
