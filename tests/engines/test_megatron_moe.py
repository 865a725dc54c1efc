"""Megatron-LM's MoE, CUDA-graph, optimizer-precision and MTP flags read as Megatron-Core reads them, and the
flag combinations it refuses refused (exit 2, naming the flag).

Upstream fixtures: tests/fixtures/engines/upstream/megatron/ (repository, path and commit in ../SOURCES.md).
Megatron's rules quoted here are in NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py,
model_parallel_config.py, megatron/core/optimizer/optimizer_config.py and megatron/training/arguments.py at
c1e938b03902ab688cf4ac1ce1eaebe7a5a17dcf (2026-05-13).
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
import yaml

from planner.engines.load import load_model
from planner.engines.megatron import (
    import_megatron,
    layout_split,
    moe_flags,
    moe_layer_pattern,
    pipeline_layout,
    read_launch_text,
)
from planner.errors import PlannerError
from planner.physics.params import count_params
from planner.training.rules import resolve_layout

UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "upstream" / "megatron"


def _functional_test_flags(name: str) -> list[str]:
    """MODEL_ARGS of a Megatron-LM functional test, as its launcher passes them: `true` is a bare flag, a
    bracketed string is a list of values (tests/functional_tests/shell_test_utils/run_ci_test.sh)."""
    args = yaml.safe_load((UPSTREAM / name).read_text())["MODEL_ARGS"]
    flags: list[str] = []
    for key, value in args.items():
        if value is True:
            flags.append(key)
        elif isinstance(value, str) and value.startswith("["):
            flags += [key, *value.strip("[]").split()]
        else:
            flags += [key, str(value)]
    return flags


TINY_MOE = ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "512",
            "--max-position-embeddings", "512", "--num-experts", "8", "--moe-router-topk", "2",
            "--moe-ffn-hidden-size", "256", "--micro-batch-size", "1", "--global-batch-size", "16", "--bf16",
            "--vocab-size", "32000", "--use-distributed-optimizer", "--moe-shared-expert-intermediate-size", "256"]


def _read(flags: list[str], gpus: int = 8, model=None, given=None):
    imported = import_megatron(flags, gpus=gpus, given=given or {}, model=model, source="args")
    return imported, resolve_layout(model or imported.model, gpus, **imported.fields)


def test_deepseek_v3_megatron_fsdp_script_reads_hybridep_etp1_and_one_mtp_layer():
    """examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh: EP 8 with expert TP 1 (tp is 1 too), the flex
    dispatcher's HybridEP backend, one MTP layer (the catalog's DeepSeek-V3 counts none), fine-grained
    recompute of mlp, moe, mla_up_proj and layernorm, Megatron-FSDP optim_grads_params. The training command
    is a string run by `srun bash -c`, its flags the PRETRAIN_ARGS array."""
    tokens, notes = read_launch_text((UPSTREAM / "sbatch_mfsdp_deepseek_v3.sh").read_text(), "ds.sh")
    model = load_model("deepseek-v3").spec
    imported, layout = _read(tokens, gpus=256, model=model)
    assert (layout.tp, layout.ep, layout.expert_tp, layout.zero) == (1, 8, 1, 3)
    assert layout.moe_dispatcher == "hybridep" and not layout.moe_ep_overlap
    assert model.mtp_layers == 1 and layout.mtp_layers is None  # --mtp-num-layers 1: the catalog model's count
    assert layout.recompute == "selective"
    assert layout.recompute_modules == ("mlp", "moe", "mla_up_proj", "layernorm")
    assert (layout.micro_batch, layout.global_batch, layout.seq_len) == (4, 2048, 4096)
    assert imported.origins["moe_dispatcher"] == "--moe-token-dispatcher-type"


def test_a2a_overlap_functional_test_reads_the_overlap_and_expert_tp_1():
    """gpt3_mcore_te_tp2_pp1_te_a2a_ovlp_8experts_etp1_ep4: tp 2, ep 4 with expert TP 1 (parallel folding:
    the 4 x 1 expert ranks span tp x dp), alltoall, --overlap-moe-expert-parallel-comm."""
    _, layout = _read(_functional_test_flags("a2a_ovlp_8experts_etp1_ep4.model_config.yaml"), gpus=8)
    assert (layout.tp, layout.ep, layout.etp, layout.dp) == (2, 4, 1, 4)
    assert layout.moe_dispatcher == "alltoall" and layout.moe_ep_overlap and not layout.moe_shared_expert_overlap
    assert layout.moe_capacity_factor is None  # dropless: no capacity factor
    assert layout.mtp_layers is None  # no --mtp-num-layers, and the model the flags describe has none
    # no --delay-wgrad-compute: Megatron-Core computes the experts' weight gradients inside mlp.backward there, so
    # the dispatch's gradient waits for them (not planner's default pairing with the overlap)
    assert layout.moe_delay_wgrad is False and not layout.resolved_moe_delay_wgrad


def test_scoped_cudagraph_functional_test_reads_the_scope_and_mtp_of_the_model_it_describes():
    """gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_scoped_cudagraph: Transformer Engine CUDA graphs of attn, mlp (4
    dense layers), moe_router and moe_preprocess; expert TP 2 under tp 4; one MTP layer, which the flags'
    own model holds (so the layout keeps the model's count: null)."""
    imported, layout = _read(_functional_test_flags("tp4_ep2_etp2_pp2_scoped_cudagraph.model_config.yaml"),
                             gpus=16)
    assert layout.cuda_graph_scope == ("attn", "mlp", "moe_router", "moe_preprocess")
    assert (layout.tp, layout.pp, layout.ep, layout.etp) == (4, 2, 2, 2)
    assert imported.model is not None and imported.model.mtp_layers == 1 and layout.mtp_layers is None
    assert layout.recompute_modules == ("moe_act",) and layout.dtype == "fp8"


@pytest.mark.parametrize(("extra", "dispatcher"), [
    ([], "allgather"),  # TransformerConfig.moe_token_dispatcher_type default
    (["--moe-token-dispatcher-type", "alltoall"], "alltoall"),
    (["--moe-token-dispatcher-type", "flex"], "deepep"),  # moe_flex_dispatcher_backend default "deepep"
    (["--moe-token-dispatcher-type", "flex", "--moe-enable-deepep"], "deepep"),  # the older spelling
    (["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep"], "hybridep"),
])
def test_dispatcher_flags(extra, dispatcher):
    _, layout = _read([*TINY_MOE, *extra])
    assert layout.moe_dispatcher == dispatcher


def test_a_dense_model_keeps_the_layout_default_dispatcher():
    dense = ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "512",
             "--max-position-embeddings", "512", "--micro-batch-size", "1", "--global-batch-size", "16", "--bf16",
             "--vocab-size", "32000"]
    imported, layout = _read(dense)
    assert "moe_dispatcher" not in imported.fields and layout.moe_dispatcher == "alltoall"


def test_capacity_factor_with_padding_without_padding_and_negative():
    _, padded = _read([*TINY_MOE, "--moe-token-dispatcher-type", "alltoall", "--moe-expert-capacity-factor", "1.25",
                       "--moe-pad-expert-input-to-capacity"])
    assert padded.moe_capacity_factor == 1.25
    imported, unpadded = _read([*TINY_MOE, "--moe-expert-capacity-factor", "1.0"])
    assert unpadded.moe_capacity_factor is None
    assert any("without --moe-pad-expert-input-to-capacity" in w for w in imported.warnings)
    _, negative = _read([*TINY_MOE, "--moe-expert-capacity-factor", "-1"])  # TransformerConfig: < 0 -> None
    assert negative.moe_capacity_factor is None


def test_precision_aware_optimizer_reads_bf16_moments():
    _, layout = _read([*TINY_MOE, "--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16",
                       "--exp-avg-sq-dtype", "bf16"])
    assert layout.optimizer_state_dtype == "bf16" and layout.master_weights_dtype == "fp32"
    imported, mixed = _read([*TINY_MOE, "--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16"])
    assert mixed.optimizer_state_dtype == "fp32" and any("upper bound" in w for w in imported.warnings)


def test_mtp_absent_is_zero_for_a_model_that_has_mtp():
    """Megatron-LM trains MTP layers only with --mtp-num-layers, whatever the model's config holds."""
    model = load_model("deepseek-v2-lite").spec.model_copy(update={"mtp_layers": 1})
    flags = ["--tensor-model-parallel-size", "1", "--micro-batch-size", "1", "--global-batch-size", "16",
             "--seq-length", "1024", "--bf16", "--moe-token-dispatcher-type", "alltoall"]
    _, layout = _read(flags, model=model)
    assert layout.mtp_layers == 0
    _, same = _read([*flags, "--mtp-num-layers", "1"], model=model)
    assert same.mtp_layers is None  # the model's count


@pytest.mark.parametrize(("extra", "needle"), [
    (["--moe-enable-deepep"], "--moe-enable-deepep needs --moe-token-dispatcher-type flex"),
    (["--moe-token-dispatcher-type", "flex", "--moe-enable-deepep", "--moe-flex-dispatcher-backend", "hybridep"],
     "Only one backend"),
    (["--moe-token-dispatcher-type", "ring"], "--moe-token-dispatcher-type must be"),
    (["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "nvshmem"],
     "--moe-flex-dispatcher-backend must be"),
    (["--moe-expert-capacity-factor", "0"], "--moe-expert-capacity-factor must be above 0"),
    (["--moe-pad-expert-input-to-capacity"], "--moe-pad-expert-input-to-capacity needs"),
    (["--moe-token-dispatcher-type", "flex", "--moe-expert-capacity-factor", "1",
      "--moe-pad-expert-input-to-capacity"], "DeepEP"),
    (["--delay-wgrad-compute"], "--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm"),
    (["--overlap-moe-expert-parallel-comm", "--overlap-dispatch-backward-with-experts-wgrad",
      "--expert-model-parallel-size", "2", "--moe-token-dispatcher-type", "alltoall"],
     "Megatron-Core asserts the overlap off with it"),
    (["--overlap-moe-expert-parallel-comm", "--expert-model-parallel-size", "2"], "moe_ep_overlap with moe_dispatcher allgather"),
    (["--overlap-moe-expert-parallel-comm", "--moe-token-dispatcher-type", "alltoall"], "ep > 1"),
    (["--exp-avg-dtype", "bf16"], "needs --use-precision-aware-optimizer"),
    (["--use-precision-aware-optimizer", "--exp-avg-dtype", "int8"], "--exp-avg-dtype must be"),
    (["--enable-cuda-graph", "--cuda-graph-impl", "local"], "--enable-cuda-graph with --cuda-graph-impl"),
    (["--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "full", "attn"], "full with other scopes"),
    (["--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "moe", "moe_router"], "must not contain both"),
    (["--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "moe_preprocess"], "needs moe_router"),
    (["--cuda-graph-impl", "transformer_engine", "--cuda-graph-scope", "moe"], "drop-padding"),
    (["--cuda-graph-impl", "eager"], "--cuda-graph-impl must be"),
])
def test_combinations_megatron_refuses_are_errors_naming_the_flag(extra, needle):
    with pytest.raises(PlannerError, match=None) as err:
        _read([*TINY_MOE, *extra])
    assert needle in str(err.value)


def test_precision_aware_optimizer_needs_the_distributed_optimizer():
    flags = [f for f in TINY_MOE if f != "--use-distributed-optimizer"]
    with pytest.raises(PlannerError, match="--use-precision-aware-optimizer needs --use-distributed-optimizer"):
        _read([*flags, "--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"])


def test_a_bad_moe_flag_is_a_one_line_error_on_the_command_line(run_cli, tmp_path):
    path = tmp_path / "args.sh"
    path.write_text(" ".join([*TINY_MOE, "--moe-token-dispatcher-type", "flex", "--moe-enable-deepep",
                              "--moe-flex-dispatcher-backend", "hybridep"]) + "\n")
    result = run_cli("check", "--megatron-args", path, "--hardware", "h100-sxm", "--gpus", "8")
    assert result.exit_code == 2 and result.output.startswith("error: ") and len(result.output.splitlines()) == 1
    assert "--moe-enable-deepep" in result.output


def test_pipeline_layout_gives_the_virtual_stages_and_the_split():
    """gpt3_mcore_te_tp2_pp2_ep4_etp1_selective_recompute_experimental: --pipeline-model-parallel-layout
    'Et*3|(tt|)*6tmL' is 8 stages over pp 2, so v = 4 (Megatron-LM's validate_args: stages // pp), which
    --overlap-moe-expert-parallel-comm needs with pp > 1. Unrolled: Ettt | tt x 6 | tmL; stage i on rank i % 2,
    so rank 0 holds 3 + 2 + 2 + 2 = 9 transformer layers and rank 1 holds 2 + 2 + 2 + 1 = 7 (16 in all)."""
    imported, layout = _read(_functional_test_flags("tp2_pp2_ep4_etp1_selective_recompute.model_config.yaml"),
                             gpus=8)
    assert (layout.tp, layout.pp, layout.ep, layout.etp, layout.interleave) == (2, 2, 4, 1, 4)
    assert layout.moe_ep_overlap
    stages = pipeline_layout("Et*3|(tt|)*6tmL", 2, 16, "t", mtp_layers=1)  # the file sets --mtp-num-layers 1
    assert ["".join(s) for s in stages] == ["Ettt", "tt", "tt", "tt", "tt", "tt", "tt", "tmL"]
    assert layout_split(stages, 2) == [9, 7]
    assert any("places [9, 7] transformer layers" in w for w in imported.warnings)


@pytest.mark.parametrize(("text", "why"), [
    ("Et|tt|tL", "do not divide by"),  # 3 stages over pp 2
    ("tt|ttL", "start with the embedding"),
    ("Ett|tttL", "places 5 transformer layers"),  # the model has 4
    ("Ett|txL", "is not a layer letter"),
    ("Et*999999999999|tL", "a repeat longer than"),
    ("(Et|)*99999|tL", "a repeat longer than"),
])
def test_pipeline_layouts_megatron_refuses_are_refused(text, why):
    with pytest.raises(PlannerError, match=why):
        pipeline_layout(text, 2, 4, "t")


@pytest.mark.parametrize(("text", "mtp", "why"), [
    ("Ett|ttmL", None, "places 1 MTP layers"),  # an MTP layer without --mtp-num-layers
    ("Ett|ttL", 1, "places 0 MTP layers"),  # --mtp-num-layers 1 and no m in the layout
    ("Ett|tmtL", 1, "after an MTP layer"),  # a decoder layer after the MTP layer
])
def test_pipeline_layout_mtp_layers_as_megatron_checks_them(text, mtp, why):
    """PipelineParallelLayerLayout.validate_layer_layout (megatron/core/transformer/pipeline_parallel_layer_layout.py
    @ d98e8a64): the m count equals --mtp-num-layers (none without the flag) and no decoder layer follows an
    MTP layer; planner accepted all three."""
    with pytest.raises(PlannerError, match=why):
        pipeline_layout(text, 2, 4, "t", mtp_layers=mtp)
    assert [len(s) for s in pipeline_layout("Ett|ttmL", 2, 4, "t", mtp_layers=1)] == [3, 4]


@pytest.mark.parametrize(("parse", "text"), [
    # 200 copies of 't*99999' after the first pass, each within the bound: 20 million letters in the second
    (lambda t: pipeline_layout(t, 2, 4, "t"), "E(t*99999)*200L"),
    (lambda t: pipeline_layout(t, 2, 4, "t"), "E" + "(t)*99999" * 100 + "L"),  # many repeats, each within it
    # a sum of lists each within the bound: 3 million entries, copied again at every '+'
    (lambda t: moe_layer_pattern(t, 4, "t"), "+".join(["[0]*99999"] * 30)),
], ids=["repeat-of-repeats", "many-repeats", "sum-of-lists"])
def test_layout_and_freq_bound_all_their_repeats_together_before_building_them(parse, text):
    """The bound of MAX_PATTERN_LAYERS holds for what the whole text unrolls to, not only for each repeat: a
    15-character layout unrolled to 1.4e9 letters (2.8 GB, 9 s) before the length check refused it, and a
    sum of 300 lists took 25 s. Refused now before it is built: a few MB at most."""
    tracemalloc.start()
    try:
        with pytest.raises(PlannerError, match="--pipeline-model-parallel-layout|--moe-layer-freq"):
            parse(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8e6, peak


def test_expert_tp_on_a_dense_model_is_ignored_as_megatron_ignores_it():
    """gpt3_mcore_te_tp2_pp2_cp2_etp4_dp_last trains a dense GPT with --expert-tensor-parallel-size 4: Megatron
    builds the expert groups and no layer uses them; planner drops it with a warning (it refused the file)."""
    imported, layout = _read(_functional_test_flags("tp2_pp2_cp2_etp4_dp_last.model_config.yaml"), gpus=8)
    assert (layout.tp, layout.pp, layout.cp) == (2, 2, 2) and layout.etp is None
    assert any("--expert-tensor-parallel-size 4 is ignored" in w for w in imported.warnings)


@pytest.mark.parametrize(("freq", "layers", "pattern"), [
    (None, 4, [1, 1, 1, 1]),
    (1, 4, [1, 1, 1, 1]),
    (2, 5, [1, 0, 1, 0, 1]),  # layer i is MoE when i % 2 == 0 (Megatron-Core's int form)
    ("([0]+[1]*3)", 4, [0, 1, 1, 1]),  # DeepSeek-V2-Lite's spelling, 1 dense layer
    ("([0]*2+[1]*2)", 4, [0, 0, 1, 1]),
    ("([0,1]*2)", 4, [0, 1, 0, 1]),  # Llama 4 Maverick's alternation
    ("[1,1,0,1]", 4, [1, 1, 0, 1]),
])
def test_moe_layer_freq_forms(freq, layers, pattern):
    assert moe_layer_pattern(freq, layers, "t") == pattern


@pytest.mark.parametrize("freq", ["([0]*2+[1]*3)", "__import__('os').getcwd()", "([2]*4)", "0", "([0]*(10**9))",
                                  "([1]*100000)*100000", "([0] * 2 + [1] * 2)", "((0,1)*2)", "[(0,1),(1,1)]",
                                  "(" * 500 + "[1]" + ")" * 500, "+".join(["[1]"] * 3000)])
def test_moe_layer_freq_that_is_not_a_layer_list_is_refused(freq):
    with pytest.raises(PlannerError, match="--moe-layer-freq"):
        moe_layer_pattern(freq, 4, "t")


def test_modelopt_scripts_with_moe_layer_freq_expressions_are_read():
    """NVIDIA/Megatron-LM examples/post_training/modelopt/conf: DeepSeek-V2-Lite's '([0]+[1]*26)' (one dense
    layer, 15.7B in all: DeepSeek-AI 2024, arXiv:2405.04434, App. B) and Llama 4 Maverick's '([0,1]*24)' (24
    dense layers between 24 MoE layers; 400B in all, Meta's Llama 4 model card), with its deprecated
    --moe-layer-recompute read as selective recompute of 'moe' appended to the default 'core_attn'."""
    lite_tokens, _ = read_launch_text((UPSTREAM / "modelopt_DeepSeek-V2-Lite.sh").read_text(), "lite.sh")
    lite, _ = _read([*lite_tokens, "--padded-vocab-size", "102400", "--global-batch-size", "8"])
    assert lite.model.moe.num_dense_layers == 1 and round(count_params(lite.model).total / 1e9, 1) == 15.7
    mav_tokens, _ = read_launch_text((UPSTREAM / "modelopt_Llama-4-Maverick-17B-128E-Instruct.sh").read_text(), "m.sh")
    maverick, layout = _read([*mav_tokens, "--global-batch-size", "8"])
    assert maverick.model.moe.num_dense_layers == 24 and abs(count_params(maverick.model).total / 400e9 - 1) < 0.005
    assert any("mixes dense and MoE layers" in w for w in maverick.warnings)
    assert layout.recompute == "selective" and layout.recompute_modules == ("core_attn", "moe")
    with pytest.raises(PlannerError, match="Do not set --moe-layer-recompute"):
        _read([*TINY_MOE, "--moe-layer-recompute", "--recompute-granularity", "full", "--recompute-method", "uniform",
               "--recompute-num-layers", "1"])


@pytest.mark.parametrize("extra", [["--pipeline-model-parallel-layout", "Ett|tt|tt|ttL"],
                                   ["--num-virtual-stages-per-pipeline-rank", "2"],
                                   ["--num-layers-per-virtual-pipeline-stage", "2"]])
def test_a_job_interleave_that_contradicts_the_file_names_the_flag_that_set_it(extra):
    flags = ["--num-layers", "8", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64", "--bf16",
             "--global-batch-size", "16", "--pipeline-model-parallel-size", "2", *extra]
    with pytest.raises(PlannerError, match=f"virtual stages per rank that {extra[0]} gives = 2"):
        import_megatron(flags, gpus=2, given={"interleave": 4}, model=None, source="t")


def test_activation_fp8_input_store_is_read_where_megatron_applies_it():
    """The fused SwiGLU saves its input in fp8 (megatron/core/fusions/fused_bias_swiglu.py); a recomputed expert
    activation is saved by its checkpoint instead, in 16 bits (moe/experts.py, CheckpointWithoutOutput)."""
    gated = [*TINY_MOE, "--swiglu"]
    _, layout = _read([*gated, "--activation-func-fp8-input-store"])
    assert layout.activation_input_fp8
    imported, recomputed = _read([*gated, "--activation-func-fp8-input-store", "--recompute-granularity", "selective",
                                  "--recompute-modules", "moe_act"])
    assert not recomputed.activation_input_fp8
    assert any("moe_act" in w and "read as off" in w for w in imported.warnings)
    _, plain = _read(gated)
    assert not plain.activation_input_fp8


def test_a_dense_models_moe_settings_write_no_moe_flags():
    """Layout accepts the MoE settings on a dense model (they change nothing in its cost); the exporter leaves them
    out, so a dense model's command line carries no --moe-* or expert-overlap flag. On a MoE model they are written."""
    fields = dict(micro_batch=1, global_batch=8, seq_len=512, moe_capacity_factor=1.0, moe_ep_overlap=True,
                  moe_shared_expert_overlap=True)
    dense = load_model("llama-3.1-8b").spec
    written = [flag for group in moe_flags(dense, resolve_layout(dense, 8, **fields)) for flag in group]
    assert not [f for f in written if "moe" in f or "expert" in f], written
    moe = load_model("deepseek-v2-lite").spec
    # Megatron-Core refuses the two overlaps together (transformer_config.py): one layout each
    for overlap, flag in (("moe_ep_overlap", "--overlap-moe-expert-parallel-comm"),
                          ("moe_shared_expert_overlap", "--moe-shared-expert-overlap")):
        one = {**fields, "moe_ep_overlap": False, "moe_shared_expert_overlap": False, overlap: True}
        written = [f for group in moe_flags(moe, resolve_layout(moe, 8, ep=8, **one)) for f in group]
        assert flag in written and "--moe-expert-capacity-factor" in written


@pytest.mark.parametrize(("extra", "delay", "flag"), [
    # the overlap with --delay-wgrad-compute: planner's pairing (null, resolved on), written back as the flag
    (["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"], None, "--delay-wgrad-compute"),
    # the overlap alone: Megatron-Core's default delay_wgrad_compute False
    (["--overlap-moe-expert-parallel-comm"], False, None),
    # without the overlap: the weight gradients on a side stream beside the dispatch's backward (Megatron-LM PR #3795)
    (["--overlap-dispatch-backward-with-experts-wgrad"], True, "--overlap-dispatch-backward-with-experts-wgrad"),
    ([], None, None),
])
def test_delayed_expert_weight_gradients_read_and_written_as_megatron_runs_them(extra, delay, flag):
    flags = [*TINY_MOE, "--expert-model-parallel-size", "8", "--moe-token-dispatcher-type", "alltoall", *extra]
    imported, layout = _read(flags)
    assert layout.moe_delay_wgrad is delay
    written = [f for group in moe_flags(imported.model, layout) for f in group]
    wgrad_flags = {"--delay-wgrad-compute", "--overlap-dispatch-backward-with-experts-wgrad"}
    assert [f for f in written if f in wgrad_flags] == ([flag] if flag else [])
    _, back = _read([*[f for f in flags if f not in wgrad_flags], *([flag] if flag else [])], model=imported.model)
    assert back.moe_delay_wgrad is layout.moe_delay_wgrad


def test_moe_run_settings_planner_has_no_term_for_are_named_in_a_warning():
    # TransformerConfig @ d98e8a64: a per-rank token budget, paged stashes of the experts' activations, module-level
    # activation offload; each changes the run's time or memory, none is a term of the model
    imported, _ = _read([*TINY_MOE, "--moe-expert-rank-capacity-factor", "1.5", "--moe-paged-stash",
                         "--fine-grained-activation-offloading", "--offload-modules", "expert_fc1", "moe_act"])
    said = " ".join(imported.warnings)
    for flag in ("--moe-expert-rank-capacity-factor", "--moe-paged-stash", "--fine-grained-activation-offloading"):
        assert f"{flag}: " in said and "not modelled" in said, flag
    assert not [w for w in imported.warnings if "is not known to planner" in w]
    plain, _ = _read(TINY_MOE)
    assert not [w for w in plain.warnings if "not modelled" in w]


def test_latent_moe_is_refused_naming_the_flag():
    # Megatron-Core's moe_latent_size (Nemotron-3's latent MoE): the experts run on a down-projected hidden state,
    # another model than the one the rest of the flags describe
    with pytest.raises(PlannerError, match="--moe-latent-size 1024: MoE latent projections"):
        _read([*TINY_MOE, "--moe-latent-size", "1024"])
