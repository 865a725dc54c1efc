"""Megatron-LM arguments and launch scripts -> Layout fields and ModelSpec."""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path

import pytest

from planner.engines.load import load_hardware, load_model
from planner.engines.megatron import (
    import_megatron,
    layout_flags,
    model_from_args,
    parse_flags,
    read_launch_text,
    split_launch_text,
)
from planner.errors import PlannerError
from planner.physics.params import count_params
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.training.estimate import estimate
from planner.training.rules import resolve_layout

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "megatron"


def tokens(name: str) -> list[str]:
    return split_launch_text((FIXTURES / name).read_text(), name)


def test_launch_script_arrays_variables_and_comments():
    toks = tokens("train_llama3_8b.sh")
    assert toks[:2] == ["--use-mcore-models", "--num-layers"]
    assert "--nproc_per_node" not in toks  # torchrun's own flags are not Megatron's
    i = toks.index("--tensor-model-parallel-size")
    assert toks[i + 1] == "2"  # TP=2 substituted
    assert toks[toks.index("--seq-length") + 1] == "8192"
    assert "tokenizer" not in toks and "#" not in " ".join(toks)  # the inline comment is dropped


def test_llama3_script_layout_and_model():
    imp = import_megatron(tokens("train_llama3_8b.sh"), gpus=64, given={}, model=None, source="s")
    f = imp.fields
    assert (f["tp"], f["pp"], f["dp"], f["sequence_parallel"], f["zero"]) == (2, 1, 32, True, 1)
    assert (f["micro_batch"], f["global_batch"], f["seq_len"], f["recompute"]) == (1, 128, 8192, "selective")
    assert (f["dtype"], f["grad_dtype"], f["overlap_grad_reduce"]) == ("bf16", "fp32", True)
    m = imp.model
    catalog = load_model("llama-3.1-8b").spec
    assert (m.num_layers, m.hidden_size, m.kv_heads, m.ffn_hidden_size, m.vocab_size) == (32, 4096, 8, 14336, 128256)
    assert (m.mlp_kind, m.norm_kind, m.tied_embeddings, m.qkv_bias, m.dropout) == ("gated", "rmsnorm", False, False, False)
    assert count_params(m).total == count_params(catalog).total
    assert imp.warnings == ()


def test_megatron_args_give_same_memory_as_equivalent_estimate():
    hw = load_hardware("h100-sxm").spec
    imp = import_megatron(tokens("train_llama3_8b.sh"), gpus=64, given={}, model=None, source="s")
    from_args = estimate(imp.model, hw, resolve_layout(imp.model, 64, **imp.fields))
    catalog = load_model("llama-3.1-8b").spec
    direct = estimate(catalog, hw, resolve_layout(
        catalog, 64, tp=2, sequence_parallel=True, zero=1, recompute="selective", micro_batch=1, global_batch=128,
        seq_len=8192, grad_dtype="fp32", overlap_grad_reduce=True))
    assert from_args.to_json()["memory"] == direct.to_json()["memory"]


def test_gpt3_args_file_with_continuations_interleave_and_padding():
    imp = import_megatron(tokens("gpt3_175b_args.txt"), gpus=1024, given={}, model=None, source="a")
    f = imp.fields
    assert (f["tp"], f["pp"], f["interleave"], f["dp"]) == (8, 8, 3, 16)  # 96 / 8 = 12 layers per stage, 4 per chunk
    assert (f["recompute"], f.get("recompute_layers_per_stage"), f["dtype"], f["grad_dtype"]) == ("full", None, "fp16",
                                                                                                   "fp16")
    m = imp.model
    # GPT-2 BPE 50257 padded to a multiple of 128 x tp 8 = 1024 -> 51200 (Megatron's vocab_size_with_padding)
    assert m.vocab_size == 51200
    assert (m.mlp_kind, m.ffn_hidden_size, m.position_embedding, m.tied_embeddings, m.dropout) == (
        "standard", 4 * 12288, "learned", True, True)
    assert (m.qkv_bias, m.mlp_bias, m.norm_kind) == (True, True, "layernorm")


def test_llama3_fp8_script_with_conditionals_appends_and_positional_defaults():
    """Megatron-LM's example-script idioms: the script path in a variable, `ARR+=(...)`, quoted multi-word
    array items, `if [[ ... ]]` picking the flags, `$(( ))`, `${1:-default}`, `--rampup-batch-size` with its
    three values, and `--sequence-parallel` at TP 1 (which Megatron-LM turns off itself)."""
    text = (FIXTURES / "llama3_8b_fp8_1node.sh").read_text()
    flags, warnings = read_launch_text(text, "s.sh")
    assert warnings == []  # the `if [ ! -f ... ]` guard holds no flags, so nothing to warn about
    imp = import_megatron(flags, gpus=8, given={}, model=None, source="s.sh")
    f = imp.fields
    assert (f["tp"], f["cp"], f["dp"], f["sequence_parallel"], f["zero"]) == (1, 1, 8, False, 1)
    assert (f["dtype"], f["grad_dtype"], f["global_batch"], f["micro_batch"], f["seq_len"]) == (
        "fp8", "bf16", 128, 1, 8192)
    assert imp.model.vocab_size == 128256 and imp.model.num_layers == 32
    assert any("--rampup-batch-size" in w for w in imp.warnings)
    assert not any("is not known" in w for w in imp.warnings)  # --decoupled-lr & co. do not change memory


def test_sequence_parallel_given_by_the_job_at_tp_1_is_still_an_error():
    base = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 --bf16 "
    imp = import_megatron(split_launch_text(base, "t"), gpus=2, given={"sequence_parallel": True}, model=None,
                          source="t")
    with pytest.raises(PlannerError, match="sequence_parallel needs tp > 1"):
        resolve_layout(imp.model, 2, **imp.fields)
    imp = import_megatron(split_launch_text(base + "--sequence-parallel", "t"), gpus=2, given={}, model=None,
                          source="t")
    assert imp.fields["sequence_parallel"] is False
    assert resolve_layout(imp.model, 2, **imp.fields).sequence_parallel is False


def test_moe_script_with_string_variable_and_block_recompute():
    imp = import_megatron(tokens("mixtral_8x7b.sh"), gpus=64, given={}, model=None, source="m")
    f = imp.fields
    assert (f["tp"], f["pp"], f["ep"], f["dp"]) == (2, 4, 8, 8)
    assert (f["recompute"], f["recompute_layers_per_stage"]) == ("full", 4)
    moe = imp.model.moe
    assert (moe.num_experts, moe.experts_per_token, moe.moe_ffn_hidden_size) == (8, 2, 14336)


def test_swiglu_ffn_default_and_gqa_without_flag():
    args, _ = parse_flags(["--num-layers", "2", "--hidden-size", "4096", "--num-attention-heads", "32", "--swiglu",
                           "--num-query-groups", "8", "--seq-length", "128", "--vocab-size", "1000"], "x")
    model = model_from_args(args, tp=1, source="x")
    assert model.ffn_hidden_size == int(4 * 4096 * 2 / 3 / 64) * 64  # 10880
    assert model.kv_heads == 32  # --num-query-groups is ignored without --group-query-attention
    assert model.vocab_size == 1024  # padded to a multiple of 128


def test_given_model_must_agree_with_architecture_flags():
    toks = tokens("train_llama3_8b.sh")
    with pytest.raises(PlannerError, match=r"--num-layers 32 disagrees with the model's num_layers \(80\)"):
        import_megatron(toks, gpus=64, given={}, model=load_model("llama-3.1-70b").spec, source="s")
    imp = import_megatron(toks, gpus=64, given={}, model=load_model("llama-3.1-8b").spec, source="s")
    assert imp.model.name == load_model("llama-3.1-8b").spec.name


def test_undefined_variable_is_named():
    with pytest.raises(PlannerError, match=r"\$TP is not defined in the file"):
        import_megatron(tokens("unresolved_var.sh"), gpus=8, given={}, model=None, source="u")


def test_undefined_variable_in_an_ignored_flag_is_fine():
    text = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 512 --bf16 " \
           "--data-path $DATA --save ${CKPT}/run"
    imp = import_megatron(split_launch_text(text, "t"), gpus=1, given={}, model=None, source="t")
    assert imp.fields["seq_len"] == 128


def test_optimizer_cpu_offload_is_read():
    imp = import_megatron(tokens("cpu_offload.txt"), gpus=8, given={}, model=None, source="c")
    assert imp.fields["offload_optimizer"] is True and imp.fields["engine"] == "megatron"


BASE_ARGS = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 512 --bf16 "
             "--micro-batch-size 1 --global-batch-size 8 ")


def test_recompute_modules_and_activation_offload_are_read():
    text = BASE_ARGS + ("--recompute-granularity selective --recompute-modules core_attn mlp layernorm "
                        "--cpu-offloading --cpu-offloading-num-layers 1")
    f = import_megatron(split_launch_text(text, "t"), gpus=8, given={}, model=None, source="t").fields
    assert f["recompute"] == "selective" and f["recompute_modules"] == ("core_attn", "mlp", "layernorm")
    assert f["offload_activation_layers"] == 1


def test_unknown_recompute_module_names_itself():
    text = BASE_ARGS + "--recompute-granularity selective --recompute-modules attention_core"
    with pytest.raises(PlannerError, match="--recompute-modules attention_core is not known"):
        import_megatron(split_launch_text(text, "t"), gpus=8, given={}, model=None, source="t")


def test_fp32_and_full_recompute_without_method_are_rejected():
    base = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 512"
    with pytest.raises(PlannerError, match="fp32"):
        import_megatron(split_launch_text(base, "t"), gpus=1, given={}, model=None, source="t")
    with pytest.raises(PlannerError, match="--recompute-method uniform or block"):
        import_megatron(split_launch_text(base + " --bf16 --recompute-granularity full", "t"), gpus=1, given={},
                        model=None, source="t")


def test_unknown_flags_warn_and_known_harmless_ones_do_not():
    base = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 512 --bf16 "
    imp = import_megatron(split_launch_text(base + "--lr 1e-4 --frobnicate 3", "t"), gpus=1, given={}, model=None,
                          source="t")
    assert len(imp.warnings) == 1 and "--frobnicate is not known" in imp.warnings[0]


def test_missing_vocab_from_a_tokenizer_file_is_an_error():
    text = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --bf16 " \
           "--tokenizer-type HuggingFaceTokenizer --tokenizer-model x"
    with pytest.raises(PlannerError, match="--vocab-size"):
        import_megatron(split_launch_text(text, "t"), gpus=1, given={}, model=None, source="t")


def test_no_tokenizer_type_is_pretrain_gpts_gpt2_bpe():
    """Megatron-LM's GPT-3 example passes GPT-2's vocab and merge files without --tokenizer-type:
    pretrain_gpt.py's args_defaults make that GPT2BPETokenizer (50,257 tokens, Radford et al. 2019), padded
    to a multiple of 128 x tp (50,304 at tp 1, 51,200 at tp 8 as GPT-3 175B's 51,200-row embedding)."""
    text = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --bf16 "
            "--vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt")
    imp = import_megatron(split_launch_text(text, "t"), gpus=1, given={}, model=None, source="t")
    assert imp.model.vocab_size == 50304
    imp = import_megatron(split_launch_text(text + " --tensor-model-parallel-size 8", "t"), gpus=8, given={},
                          model=None, source="t")
    assert imp.model.vocab_size == 51200


def test_distributed_optimizer_and_fsdp_map_to_zero_stages():
    base = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 512 --bf16 "
    for flags, zero in (("", 0), ("--use-distributed-optimizer", 1), ("--use-torch-fsdp2", 3),
                        ("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", 2)):
        imp = import_megatron(split_launch_text(base + flags, "t"), gpus=4, given={}, model=None, source="t")
        assert imp.fields["zero"] == zero, flags


def test_encoder_seq_length_and_num_layers_stand_for_the_gpt_ones():
    """Older GPT scripts write --encoder-seq-length / --encoder-num-layers; Megatron-LM's validate_args copies
    them to seq_length / num_layers (and asserts that only one of each pair is given)."""
    base = "--hidden-size 64 --num-attention-heads 4 --vocab-size 1000 --bf16 --max-position-embeddings 256 "
    imp = import_megatron(split_launch_text(base + "--encoder-num-layers 6 --encoder-seq-length 256", "t"), gpus=1,
                          given={}, model=None, source="t")
    assert (imp.fields["seq_len"], imp.model.num_layers) == (256, 6)
    with pytest.raises(PlannerError, match="--encoder-seq-length and --seq-length are both set"):
        import_megatron(split_launch_text(base + "--num-layers 6 --encoder-seq-length 256 --seq-length 128", "t"),
                        gpus=1, given={}, model=None, source="t")


@pytest.mark.parametrize(("flags", "fragment"), [
    ("--num-attention-heads 0", "--num-attention-heads must be positive, got 0"),
    ("--pipeline-model-parallel-size 0", "--pipeline-model-parallel-size must be positive"),
    ("--make-vocab-size-divisible-by 0", "--make-vocab-size-divisible-by must be positive"),
    ("--num-experts -1", "--num-experts must be positive"),
    ("--num-experts 4 --moe-router-topk 8", "invalid model"),
])
def test_impossible_sizes_are_one_line_errors_not_crashes(flags, fragment):
    """Found by mutating real scripts: these raised ZeroDivisionError or a raw pydantic ValidationError (a
    traceback, exit 1 -- the code CI reads as 'does not fit')."""
    base = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 --bf16 "
            "--micro-batch-size 1 ")
    with pytest.raises(PlannerError, match=re.escape(fragment)):
        import_megatron(split_launch_text(base + flags, "t"), gpus=1, given={}, model=None, source="t")
    assert import_megatron(split_launch_text(base + "--recompute-granularity full --recompute-method uniform "
                                             "--recompute-num-layers 1", "t"), gpus=1, given={}, model=None,
                           source="t").fields["recompute"] == "full"


def test_shared_expert_size_not_a_multiple_of_the_expert_size_is_one_shared_expert():
    args, _ = parse_flags(["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--swiglu",
                           "--seq-length", "128", "--vocab-size", "128", "--num-experts", "4", "--moe-ffn-hidden-size",
                           "48", "--moe-shared-expert-intermediate-size", "80", "--moe-shared-expert-gate"], "x")
    moe = model_from_args(args, tp=1, source="x").moe
    assert moe is not None
    assert (moe.num_shared_experts, moe.shared_expert_ffn_hidden_size, moe.shared_expert_gate) == (1, 80, True)


def test_recompute_modules_and_offload_survive_export_and_import():
    from planner.engines.export import render_export
    from planner.specs.layout import Layout

    model, hw = load_model("llama-3.1-8b").spec, load_hardware("h100-sxm").spec
    layout = Layout(dp=8, zero=1, recompute="selective", recompute_modules=("core_attn", "mlp"), global_batch=8,
                    seq_len=4096, offload_activation_layers=2, offload_optimizer=True)
    exported = render_export("megatron", "llama-3.1-8b", model, hw, layout, estimate(model, hw, layout))
    back = import_megatron(split_launch_text(exported.text, "m.sh"), gpus=8, given={}, model=model, source="m.sh")
    assert resolve_layout(model, 8, **back.fields) == exported.layout == layout


@pytest.mark.parametrize(("flag", "kernel"), [("flash", "flash2"), ("fused", "fused"), ("auto", None), (None, None)])
def test_attention_backend_picks_the_fused_attentions_kernel(flag, kernel):
    # Megatron-Core's AttnBackend: flash = Transformer Engine's flash-attn backend (NVTE_FUSED_ATTN=0), fused = cuDNN,
    # auto = Transformer Engine's own choice, which the engine profile holds
    text = BASE_ARGS + ("" if flag is None else f"--attention-backend {flag}")
    f = import_megatron(split_launch_text(text, "t"), gpus=8, given={}, model=None, source="t").fields
    assert f.get("attention_kernel") == kernel and f["flash_attention"] is True
    unfused = import_megatron(split_launch_text(BASE_ARGS + "--attention-backend unfused", "t"), gpus=8, given={},
                              model=None, source="t").fields
    assert unfused["flash_attention"] is False and "attention_kernel" not in unfused


@pytest.mark.parametrize("kernel", ["flash2", "fused"])
def test_an_attention_kernel_is_exported_and_read_back(kernel):
    model = load_model("llama-3.1-8b").spec
    layout = resolve_layout(model, 8, zero=1, global_batch=64, seq_len=8192, attention_kernel=kernel)
    flags = layout_flags(model, layout)
    assert ["--attention-backend", "flash" if kernel == "flash2" else "fused"] in flags
    text = " ".join(token for group in flags for token in group) + " --vocab-size 128256"
    back = import_megatron(split_launch_text(text, "t"), gpus=8, given={}, model=model, source="t").fields
    assert back["attention_kernel"] == kernel
    # the engine's own kernel written nowhere: a layout without the field exports no backend flag
    plain = resolve_layout(model, 8, zero=1, global_batch=64, seq_len=8192)
    assert not any(group[0] == "--attention-backend" for group in layout_flags(model, plain))


def test_legacy_use_flash_attn_leaves_the_engines_kernel():
    # --use-flash-attn is parsed but unread by Megatron-Core (d98e8a64); under Transformer Engine its own choice runs
    text = BASE_ARGS + "--use-flash-attn --transformer-impl transformer_engine"
    f = import_megatron(split_launch_text(text, "t"), gpus=8, given={}, model=None, source="t").fields
    assert f["flash_attention"] is True and "attention_kernel" not in f


@pytest.mark.parametrize(("env", "kernel", "flash"), [
    ("export NVTE_FUSED_ATTN=0\n", "flash2", True),  # NeMo-Framework-Launcher 24.03-24.07's setting
    ("NVTE_FLASH_ATTN=0\n", "fused", True),
    ("export NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=0\n", None, False),  # neither fused backend: TE's unfused attention
    ("", None, True),
])
def test_transformer_engines_backend_variables_in_a_launch_script(env, kernel, flash):
    script = env + "torchrun --nproc-per-node 8 pretrain_gpt.py " + BASE_ARGS
    flags, warnings = read_launch_text(script, "run.sh")
    f = import_megatron(flags, gpus=8, given={}, model=None, source="run.sh").fields
    assert f.get("attention_kernel") == kernel and f["flash_attention"] is flash
    assert any("NVTE_" in w for w in warnings) == bool(env)


def test_a_backend_variable_on_the_launch_command_and_an_explicit_flag():
    prefixed = "NVTE_FUSED_ATTN=0 torchrun pretrain_gpt.py " + BASE_ARGS
    f = import_megatron(read_launch_text(prefixed, "run.sh")[0], gpus=8, given={}, model=None, source="run.sh").fields
    assert f["attention_kernel"] == "flash2"
    # --attention-backend names the backend itself (Megatron-Core then asserts the variables agree): the flag wins
    explicit = "export NVTE_FUSED_ATTN=0\ntorchrun pretrain_gpt.py " + BASE_ARGS + "--attention-backend fused"
    flags, warnings = read_launch_text(explicit, "run.sh")
    assert import_megatron(flags, gpus=8, given={}, model=None, source="run.sh").fields["attention_kernel"] == "fused"
    assert not any("NVTE_" in w for w in warnings)


@pytest.mark.parametrize(("extra", "recipe"), [("", "delayed"), ("--fp8-recipe tensorwise", "tensorwise"),
                                               ("--fp8-recipe mxfp8", "mxfp8"), ("--fp8-recipe blockwise", "blockwise")])
def test_fp8_recipe_is_read_with_megatrons_default(extra, recipe):
    # Megatron-LM's --fp8-recipe defaults to delayed (megatron/training/arguments.py, _add_transformer_engine_args)
    base = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 --bf16 "
            "--fp8-format hybrid " + extra)
    imp = import_megatron(split_launch_text(base, "t"), gpus=1, given={}, model=None, source="t")
    assert (imp.fields["dtype"], imp.fields["fp8_recipe"]) == ("fp8", recipe)


def test_an_unknown_fp8_recipe_is_one_error_naming_the_choices():
    base = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 --bf16 "
            "--fp8-format hybrid --fp8-recipe nvfp4")
    with pytest.raises(PlannerError, match="--fp8-recipe nvfp4: Megatron-LM takes tensorwise, delayed, mxfp8, blockwise"):
        import_megatron(split_launch_text(base, "t"), gpus=1, given={}, model=None, source="t")


@pytest.mark.parametrize(("pp", "interleave", "per_virtual"), [(8, 8, 2), (16, 8, 1)])
def test_an_interleaved_split_of_126_layers_counts_the_embedding_and_the_loss(pp, interleave, per_virtual):
    # Llama 3.1 405B (126 layers) as Megatron-Bridge runs it: pp 8 x v 8 (its H100 recipe) and pp 16 x v 8 (its
    # GB200 recipe). 126 does not divide into the virtual stages, 126 + 2 does: planner's split (one layer fewer on
    # the first and the last rank) is Megatron's with --account-for-embedding/loss-in-pipeline-split, whose
    # validate_args then divides (126 + 2) / pp by the layers per virtual stage.
    model = load_model("llama-3.1-405b").spec
    gpus = 8 * pp * 2
    layout = resolve_layout(model, gpus, tp=8, pp=pp, interleave=interleave, zero=1, global_batch=2 * pp,
                            seq_len=8192)
    flags = layout_flags(model, layout)
    assert ["--account-for-embedding-in-pipeline-split"] in flags
    assert ["--account-for-loss-in-pipeline-split"] in flags
    assert ["--num-layers-per-virtual-pipeline-stage", str(per_virtual)] in flags
    assert not any(group[0].startswith("--decoder-") for group in flags)
    text = " ".join(token for group in flags for token in group) + " --vocab-size 128256"
    back = import_megatron(split_launch_text(text, "t"), gpus=gpus, given={}, model=model, source="t")
    assert resolve_layout(model, gpus, **back.fields).interleave == interleave
    assert not back.warnings  # Megatron's split is planner's: nothing approximate to say


def test_virtual_stages_per_rank_with_the_edge_units_are_read():
    # the GB200 recipe's flags as Megatron-Bridge passes them: 8 virtual stages per rank of 16
    model = load_model("llama-3.1-405b").spec
    text = ("--tensor-model-parallel-size 4 --pipeline-model-parallel-size 16 --sequence-parallel "
            "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
            "--num-virtual-stages-per-pipeline-rank 8 --micro-batch-size 1 --global-batch-size 1536 "
            "--seq-length 8192 --bf16 --use-distributed-optimizer --vocab-size 128256")
    back = import_megatron(split_launch_text(text, "t"), gpus=256, given={}, model=model, source="t")
    assert resolve_layout(model, 256, **back.fields).interleave == 8
    # one layer per virtual stage needs the two edge units: without them 126 / 16 is not whole
    with pytest.raises(PlannerError, match="does not divide the 126 / 16 layers"):
        import_megatron(split_launch_text(text.replace("--num-virtual-stages-per-pipeline-rank 8",
                                                       "--num-layers-per-virtual-pipeline-stage 1")
                                          .replace("--account-for-embedding-in-pipeline-split ", "")
                                          .replace("--account-for-loss-in-pipeline-split ", ""), "t"),
                        gpus=256, given={}, model=model, source="t")


def test_an_interleaved_split_the_layers_do_not_fill_evenly_is_written_as_a_pipeline_layout():
    # 126 layers on pp 4 x v 3: neither 126 nor 128 fills 12 virtual stages evenly. planner's split puts 31, 32, 32
    # and 31 layers on the ranks (layers_on_stage: the remainder on the middle ranks); with the embedding on the
    # first and the loss on the last each rank holds 32 pipeline units, 11, 11 and 10 per chunk; the stages go round
    # the ranks, chunk by chunk.
    model = load_model("llama-3.1-405b").spec
    layout = resolve_layout(model, 4 * 8, tp=8, pp=4, interleave=3, zero=1, global_batch=8, seq_len=8192)
    flags = layout_flags(model, layout)
    text = "Et*10|t*11|t*11|t*11|t*11|t*11|t*11|t*11|t*10|t*10|t*10|t*9L"
    assert ["--pipeline-model-parallel-layout", text] in flags
    assert not any(g[0] in ("--num-layers-per-virtual-pipeline-stage", "--decoder-first-pipeline-num-layers")
                   for g in flags)
    line = " ".join(shlex.quote(token) for group in flags for token in group) + " --vocab-size 128256"
    back = import_megatron(split_launch_text(line, "t"), gpus=32, given={}, model=model, source="t")
    assert resolve_layout(model, 32, **back.fields).interleave == 3
    assert not back.warnings  # the layout places planner's own split


def test_a_pipeline_layout_keeps_the_mtp_layers_before_the_loss_and_refuses_an_empty_stage():
    # 5 layers on pp 2 (2 and 3: planner's split) x v 2 with one MTP layer: units E t t | t t t mL -> 2, 1 / 2, 2
    model = ModelSpec(name="five", num_layers=5, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256,
                      vocab_size=1000, max_seq_len=1024, mtp_layers=1)
    flags = layout_flags(model, Layout(pp=2, interleave=2, global_batch=4, seq_len=128))
    assert ["--pipeline-model-parallel-layout", "Et|t*2|t|tmL"] in flags
    # 3 units on the first rank cannot fill 4 virtual stages
    with pytest.raises(PlannerError, match=r"leaves rank 0 3 pipeline units"):
        layout_flags(model, Layout(pp=2, interleave=4, global_batch=4, seq_len=128))


YARN_BASE = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 --bf16 "
             "--micro-batch-size 1 --position-embedding-type yarn ")


@pytest.mark.parametrize(("flags", "factor"), [
    ("--rotary-scaling-factor 8", 1 + 0.1 * math.log(8)),  # --mscale 1 over --mscale-all-dim 0 (Megatron's defaults)
    ("--rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0", 1.0),  # DeepSeek's recipes: the two agree
    ("--rotary-scaling-factor 40 --mscale 0.5", 1 + 0.05 * math.log(40)),
    ("", 1.0),  # yarn at scale 1 stretches nothing
])
def test_yarn_flags_give_megatrons_concentration_factor(flags, factor):
    """yarn_rotary_pos_embedding._yarn_get_concentration_factor @ d98e8a64: get_mscale(s, --mscale) /
    get_mscale(s, --mscale-all-dim), s = --rotary-scaling-factor."""
    model = import_megatron(split_launch_text(YARN_BASE + flags, "t"), gpus=1, given={}, model=None, source="t").model
    assert model.rotary_attention_factor == pytest.approx(factor)


def test_a_yarn_flag_that_is_not_a_number_is_one_error_naming_it():
    def read(flags: str):
        return import_megatron(split_launch_text(YARN_BASE + flags, "t"), gpus=1, given={}, model=None, source="t")

    with pytest.raises(PlannerError, match=r"--rotary-scaling-factor needs a number, got 'x'"):
        read("--rotary-scaling-factor x")
    with pytest.raises(PlannerError, match=r"--mscale -1 is negative; give a non-negative number"):
        read("--mscale -1 --rotary-scaling-factor 4")


def test_a_yarn_scaled_model_is_exported_as_yarn_and_read_back():
    from planner.engines.export import render_export
    from planner.specs.layout import Layout

    model, hw = load_model("gpt-oss-120b").spec, load_hardware("h100-sxm").spec
    layout = Layout(dp=8, ep=8, global_batch=8, seq_len=4096)
    exported = render_export("megatron", "gpt-oss-120b", model, hw, layout, estimate(model, hw, layout))
    words = split_launch_text(exported.text, "m.sh")
    assert words[words.index("--position-embedding-type") + 1] == "yarn"
    assert words[words.index("--rotary-scaling-factor") + 1] == "32"
    # the activation clamp travels too (TransformerConfig.activation_func_clamp_value)
    assert words[words.index("--activation-func-clamp-value") + 1] == "7"
    back = import_megatron(words, gpus=8, given={}, model=None, source="m.sh")
    assert back.model.rotary_attention_factor == pytest.approx(model.rotary_attention_factor, rel=1e-12)
    assert back.model.activation_clamp == 7.0


def test_a_yarn_factor_with_no_context_scale_a_float_holds_is_exported_as_plain_rope_and_said():
    from planner.engines.export import render_export
    from planner.specs.layout import Layout

    model = load_model("gpt-oss-120b").spec.model_copy(update={"rotary_attention_factor": 80.0})
    hw, layout = load_hardware("h100-sxm").spec, Layout(dp=8, ep=8, global_batch=8, seq_len=4096)
    exported = render_export("megatron", "m", model, hw, layout, estimate(model, hw, layout))
    words = split_launch_text(exported.text, "m.sh")
    assert words[words.index("--position-embedding-type") + 1] == "rope" and "--rotary-scaling-factor" not in words
    assert "YaRN's attention factor 80 (written as plain RoPE)" in exported.text


def test_enable_gpt_oss_leaves_an_explicit_position_type_as_it_is():
    """Only ModelOpt's builder (post_training/model_builder.py) turns --enable-gpt-oss into YaRN; a run that names
    its position type runs that one (examples/gptoss/02_train.sh: rope)."""
    base = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 --bf16 "
            "--micro-batch-size 1 --enable-gpt-oss ")
    plain = import_megatron(split_launch_text(base + "--position-embedding-type rope", "t"), gpus=1, given={},
                            model=None, source="t").model
    assert plain.position_embedding == "rotary" and plain.rotary_attention_factor == 1.0
    gpt_oss = import_megatron(split_launch_text(base, "t"), gpus=1, given={}, model=None, source="t").model
    assert gpt_oss.rotary_attention_factor == pytest.approx(1 + 0.1 * math.log(32))


@pytest.mark.parametrize(("flags", "message"), [
    ("--rotary-scaling-factor 1e308 --mscale 1e308", "give YaRN an attention factor of inf; planner takes (0, 100]"),
    ("--rotary-scaling-factor -2", "--rotary-scaling-factor -2 is negative"),
])
def test_yarn_flags_that_give_no_usable_factor_are_one_error_naming_them(flags, message):
    with pytest.raises(PlannerError, match=re.escape(message)):
        import_megatron(split_launch_text(YARN_BASE + flags, "t"), gpus=1, given={}, model=None, source="t")


def test_a_deprecated_variant_flag_outside_megatrons_choices_is_named():
    base = ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --vocab-size 128 --bf16 "
            "--linear-attention-type foo")
    with pytest.raises(PlannerError, match=r"--linear-attention-type 'foo' is not one of Megatron-LM's choices "
                                           r"\(gated_delta_net\)"):
        import_megatron(base.split(), gpus=1, given={}, model=None, source="t")
