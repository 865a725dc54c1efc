"""Layout rules: one message with the arithmetic per broken rule; resolve_layout derives dp.

Each message is checked word for word where it carries numbers, since the numbers are the point:
they tell the user what to change.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.errors import PlannerError
from planner.specs.engine import engine_profile
from planner.specs.layout import Layout, LayoutArrays
from planner.specs.model import ModelSpec
from planner.training.rules import RULE_CODES, check_layout, resolve_layout, violations


def model(**overrides) -> ModelSpec:
    # 8 layers, 8 heads (2 KV heads), h 64; short context to test the length rule.
    fields = dict(name="rules", num_layers=8, hidden_size=64, num_attention_heads=8, num_kv_heads=2,
                  ffn_hidden_size=256, vocab_size=100, max_seq_len=4096)
    fields.update(overrides)
    return ModelSpec(**fields)


def message(layout: Layout, gpus: int, spec: ModelSpec | None = None) -> str:
    with pytest.raises(PlannerError) as err:
        check_layout(spec or model(), layout, gpus)
    return str(err.value)


def test_gpu_count_mismatch_prints_the_product():
    # 8 x 4 x 1 x 3 = 96, not 64.
    text = message(Layout(tp=8, pp=4, dp=3, global_batch=96, seq_len=1024), 64)
    assert text.startswith("tp(8) * pp(4) * cp(1) * dp(3) = 96 != gpus(64)")


def test_heads_not_divisible_by_tp():
    text = message(Layout(tp=3, global_batch=8, seq_len=1024), 3)
    assert text.startswith("num_attention_heads(8) is not divisible by tp(3)")


def test_kv_heads_fewer_than_tp_are_allowed():
    # 2 KV heads, tp 8: KV heads are replicated (Megatron), not a rule violation.
    check_layout(model(), Layout(tp=8, global_batch=8, seq_len=1024), 8)


def test_batch_not_divisible_by_dp_times_micro_batch():
    # 10 sequences on dp 4 x micro 1 = 4.
    text = message(Layout(dp=4, global_batch=10, seq_len=1024), 4)
    assert text.startswith("global_batch(10) is not divisible by dp(4) * micro_batch(1) = 4")


def test_too_many_stages():
    assert message(Layout(pp=16, global_batch=16, seq_len=1024), 16).startswith("pp(16) exceeds num_layers(8)")


def test_pipeline_need_not_divide_the_layers():
    # 8 layers on 3 stages (2, 3, 3 by the split rule) is allowed, as Llama 3 405B's 126 on 16.
    check_layout(model(), Layout(pp=3, global_batch=3, seq_len=1024), 3)


def test_sequence_parallel_needs_tp():
    assert message(Layout(sequence_parallel=True, global_batch=1, seq_len=1024), 1).startswith(
        "sequence_parallel needs tp > 1"
    )


def test_context_parallel_needs_2cp_chunks():
    # seq 1,020 with cp 4: not divisible by 2 x 4 = 8 (1,020 = 8 x 127 + 4).
    text = message(Layout(cp=4, global_batch=1, seq_len=1020), 4)
    assert text.startswith("seq_len(1020) is not divisible by 2 * cp(4) = 8")


def test_sequence_longer_than_the_model_supports():
    text = message(Layout(global_batch=1, seq_len=8192), 1)
    assert text.startswith("seq_len(8192) exceeds the model's max_seq_len(4096)")


def test_interleave_needs_pipeline_and_micro_batches_divisible_by_pp():
    assert message(Layout(interleave=2, global_batch=4, seq_len=1024), 1).startswith("interleave(2) needs pp > 1")
    # pp 2 with m = 3 micro-batches: 3 is not divisible by 2.
    text = message(Layout(pp=2, interleave=2, global_batch=3, seq_len=1024), 2)
    assert "micro-batch count (3) divisible by pp" in text
    # 8 layers on pp 4 leave 2 per rank: at most 2 virtual stages.
    assert "interleave" in message(Layout(pp=4, interleave=4, global_batch=8, seq_len=1024), 4)
    check_layout(model(), Layout(pp=4, interleave=2, global_batch=8, seq_len=1024), 4)


@pytest.mark.parametrize(("batch", "group", "ok"), [
    (5, None, False),  # m = 5 with the default group of pp = 4: not a multiple of pp
    (5, 5, True),      # one group of 5 in [pp, m], no remainder (Megatron-LM's tunable_overlap functional tests)
    (5, 4, False),     # groups of 4 leave a last group of 1 < pp
    (5, 6, False),     # a group larger than the m micro-batches
    (9, 5, True),      # groups of 5 leave a last group of 4 >= pp
    (8, 3, False),     # a group smaller than pp
])
def test_interleave_with_a_micro_batch_group(batch, group, ok):
    layout = Layout(pp=4, interleave=2, global_batch=batch, seq_len=1024, microbatch_group_size=group)
    if ok:
        check_layout(model(), layout, 4)
    else:
        text = message(layout, 4)
        assert ("divisible by pp" if group is None else f"microbatch_group_size({group}) between pp(4)") in text


def test_only_megatron_core_takes_a_micro_batch_group():
    layout = Layout(pp=4, interleave=2, global_batch=5, seq_len=1024, microbatch_group_size=5, engine="torchtitan")
    assert "engine torchtitan cannot run microbatch_group_size(5)" in message(layout, 4)
    # a group of pp is every engine's schedule
    check_layout(model(), layout.model_copy(update={"global_batch": 8, "microbatch_group_size": 4}), 4)


def test_interleave_counts_the_embedding_and_the_loss_as_pipeline_units():
    # Megatron-Bridge's Llama 3.1 405B GB200 recipe: 126 layers on pp 16 x v 8. The layers alone give 126 // 16 = 7
    # per rank, too few for 8 virtual stages; with the embedding and the loss counted (Megatron-Core
    # --account-for-embedding/loss-in-pipeline-split) 128 units fill the 128 virtual stages one each.
    deep = model(num_layers=126)
    check_layout(deep, Layout(pp=16, interleave=8, global_batch=16, seq_len=1024), 16)
    # 9 virtual stages per rank would need 144 units: refused, with the count that says so.
    text = message(Layout(pp=16, interleave=9, global_batch=16, seq_len=1024), 16, deep)
    assert "((num_layers(126) + 2) // pp(16) = 8 >= interleave)" in text


def test_expert_parallel_needs_a_moe_model():
    text = message(Layout(dp=2, ep=2, global_batch=2, seq_len=1024), 2)
    assert text.startswith("ep(2) needs a MoE model")


MOE = dict(moe=dict(num_experts=8, experts_per_token=2, moe_ffn_hidden_size=32))


def broken_codes(layout: Layout, gpus: int, spec: ModelSpec) -> set[str]:
    return {code for code, mask in violations(spec, layout.to_arrays(), gpus, engine_profile(layout.engine)).items()
            if mask.any()}


def test_the_all_to_all_overlap_needs_expert_parallelism_on_a_moe_model():
    moe = model(**MOE)
    assert "ep_overlap_needs_ep" in broken_codes(Layout(dp=2, moe_ep_overlap=True, global_batch=2, seq_len=1024), 2, moe)
    assert "ep_overlap_needs_ep" not in broken_codes(
        Layout(dp=2, ep=2, moe_ep_overlap=True, global_batch=2, seq_len=1024), 2, moe)
    # a dense model's MoE settings change nothing: neither this rule nor the engine's overlap rules apply
    assert not broken_codes(Layout(pp=2, moe_ep_overlap=True, moe_shared_expert_overlap=True, global_batch=2,
                                   seq_len=1024), 2, model())


def test_megatron_runs_the_overlap_with_a_pipeline_only_on_virtual_stages():
    # transformer_config.py @ d98e8a64: virtual stages must be set whenever pp > 1 (8 layers: pp 2 x v 2 is even)
    moe = model(**MOE)
    base = dict(dp=2, ep=2, moe_ep_overlap=True, global_batch=8, seq_len=1024)
    assert "engine_ep_overlap_pipeline" not in broken_codes(Layout(**base), 2, moe)
    assert "engine_ep_overlap_pipeline" in broken_codes(Layout(pp=2, **base), 4, moe)
    assert "engine_ep_overlap_pipeline" not in broken_codes(Layout(pp=2, interleave=2, **base), 4, moe)
    text = message(Layout(pp=2, **base), 4, moe)
    assert text.startswith("engine megatron cannot run moe_ep_overlap with pp(2) and interleave(1)")
    # DualPipe pairs its chunks itself
    assert "engine_ep_overlap_pipeline" not in broken_codes(Layout(pp=2, schedule="dualpipe", **base), 4, moe)
    # torchtitan's overlap is DualPipeV's: it needs a pipeline
    titan = dict(base, engine="torchtitan")
    assert "engine_ep_overlap_pipeline" in broken_codes(Layout(**titan), 2, moe)


def test_megatron_refuses_the_overlap_beside_the_settings_its_config_asserts_against():
    moe = model(**MOE, mtp_layers=2)
    base = dict(dp=2, ep=2, moe_ep_overlap=True, global_batch=8, seq_len=1024, mtp_layers=0)
    assert "engine_ep_overlap_conflict" not in broken_codes(Layout(**base), 2, moe)
    for extra, name in ((dict(moe_shared_expert_overlap=True), "shared_expert_overlap"),
                        (dict(cuda_graph_scope=("attn", "mlp")), "moe_graphs"),
                        (dict(mtp_layers=None), "mtp_over_one"),  # the model's 2 MTP layers
                        (dict(recompute="full"), "full_recompute"),
                        (dict(recompute="selective", recompute_modules=("moe",)), "moe_recompute")):
        layout = Layout(**{**base, **extra})
        assert "engine_ep_overlap_conflict" in broken_codes(layout, 2, moe), name
        assert message(layout, 2, moe).startswith(f"engine megatron cannot run moe_ep_overlap with {name} ")
    # a whole-iteration graph, one MTP layer and selective recompute of other modules are fine
    for extra in (dict(cuda_graph_scope=("full",)), dict(mtp_layers=1),
                  dict(recompute="selective", recompute_modules=("moe_act", "layernorm"))):
        assert "engine_ep_overlap_conflict" not in broken_codes(Layout(**{**base, **extra}), 2, moe), extra
    # torchtitan's DualPipeV overlap runs without activation checkpointing
    titan = dict(base, engine="torchtitan", pp=2)
    assert "engine_ep_overlap_conflict" in broken_codes(Layout(**titan, recompute="full"), 4, moe)
    assert "engine_ep_overlap_conflict" not in broken_codes(Layout(**titan), 4, moe)


def test_delayed_expert_weight_gradients_without_the_overlap_need_an_engine_with_the_side_stream():
    # Megatron-Core's overlap_dispatch_backward_with_experts_wgrad; the torch engines run autograd's order
    moe = model(**MOE)
    base = dict(dp=2, ep=2, global_batch=8, seq_len=1024, moe_delay_wgrad=True)
    assert "engine_no_dispatch_wgrad_overlap" not in broken_codes(Layout(**base), 2, moe)
    for engine, dispatcher in (("torchtitan", "alltoall"), ("deepspeed", "alltoall"), ("automodel", "deepep")):
        layout = Layout(**base, engine=engine, moe_dispatcher=dispatcher)
        assert "engine_no_dispatch_wgrad_overlap" in broken_codes(layout, 2, moe), engine
        assert message(layout, 2, moe).startswith(f"engine {engine} cannot run moe_delay_wgrad without moe_ep_overlap")
    # with the overlap it only orders the pair (every engine with an overlap runs it); a dense model has no experts
    assert "engine_no_dispatch_wgrad_overlap" not in broken_codes(Layout(**base, engine="torchtitan", pp=2,
                                                                         moe_ep_overlap=True), 4, moe)
    assert "engine_no_dispatch_wgrad_overlap" not in broken_codes(Layout(**base, engine="torchtitan"), 2, model())


def test_recompute_layers_within_the_stage():
    # 8 layers on pp 2: 4 per stage; 5 is too many.
    text = message(Layout(pp=2, recompute="full", recompute_layers_per_stage=5, global_batch=2, seq_len=1024), 2)
    assert text.startswith("recompute_layers_per_stage(5) exceeds the layers per stage (4)")


def test_first_broken_rule_is_reported_and_valid_layouts_pass():
    check_layout(model(), Layout(tp=2, pp=2, dp=2, global_batch=8, seq_len=1024), 8)
    # gpus and batch both broken: the gpus rule comes first.
    assert message(Layout(dp=4, global_batch=10, seq_len=1024), 8).startswith("tp(1) * pp(1)")


def test_violations_is_a_mask_per_rule_on_a_grid():
    grid = LayoutArrays.from_layouts([
        Layout(tp=8, pp=4, dp=2, global_batch=64, seq_len=1024),  # valid on 64 GPUs
        Layout(tp=8, pp=4, dp=3, global_batch=96, seq_len=1024),  # 96 GPUs
        Layout(tp=3, pp=4, dp=2, global_batch=64, seq_len=1024),  # 24 GPUs and 8 heads / 3
    ])
    broken = violations(model(), grid, 64)
    assert set(broken) == set(RULE_CODES)
    assert broken["gpus_mismatch"].tolist() == [False, True, True]
    assert broken["heads_not_divisible"].tolist() == [False, False, True]
    assert not np.any(broken["batch_not_divisible"])


# resolve_layout ---------------------------------------------------------------------------------
def test_resolve_layout_derives_dp():
    # 64 GPUs / (tp 8 x pp 4 x cp 1) = 2.
    layout = resolve_layout(model(), 64, tp=8, pp=4, global_batch=64, seq_len=1024)
    assert layout.dp == 2
    assert layout.gpus == 64


def test_resolve_layout_keeps_a_given_dp_and_checks_it():
    with pytest.raises(PlannerError, match=r"tp\(8\) \* pp\(4\) \* cp\(1\) \* dp\(3\) = 96 != gpus\(64\)"):
        resolve_layout(model(), 64, tp=8, pp=4, dp=3, global_batch=96, seq_len=1024)


def test_resolve_layout_gpus_not_divisible():
    with pytest.raises(PlannerError, match=r"gpus\(64\) is not divisible by tp\(3\) \* pp\(1\) \* cp\(1\) = 3"):
        resolve_layout(model(), 64, tp=3, global_batch=64, seq_len=1024)


def test_resolve_layout_rejects_bad_values_with_the_field_name():
    with pytest.raises(PlannerError, match="gpus"):
        resolve_layout(model(), 0, global_batch=1, seq_len=1024)
    with pytest.raises(PlannerError, match="zero"):
        resolve_layout(model(), 8, zero=5, global_batch=8, seq_len=1024)
    with pytest.raises(PlannerError, match="micro_batch"):
        resolve_layout(model(), 8, micro_batch=-1, global_batch=8, seq_len=1024)


def test_resolve_layout_ignores_none_fields():
    # None means "not given": defaults apply (cp 1), and dp is derived.
    layout = resolve_layout(model(), 8, tp=2, cp=None, dp=None, global_batch=8, seq_len=1024)
    assert (layout.cp, layout.dp) == (1, 4)


def test_a_gradient_dtype_not_given_is_the_engines() -> None:
    """Megatron-LM turns on fp32 main grads with --bf16 (arguments.py); DeepSpeed keeps the model dtype unless
    data_types.grad_accum_dtype says otherwise; a dtype given always wins; the search's Problem follows the same."""
    from planner.engines.load import load_model
    from planner.search.space import Problem
    from planner.training.rules import resolve_layout

    model = load_model("llama-3.1-8b").spec
    common = {"global_batch": 8, "seq_len": 2048}
    assert resolve_layout(model, 8, **common).grad_dtype == "fp32"
    assert resolve_layout(model, 8, engine="deepspeed", **common).grad_dtype == "bf16"
    assert resolve_layout(model, 8, grad_dtype="bf16", **common).grad_dtype == "bf16"
    assert Problem(gpus=8, global_batch=8, seq_len=2048).grad_dtype == "fp32"
    assert Problem(gpus=8, global_batch=8, seq_len=2048, engine="deepspeed").grad_dtype == "bf16"
    assert Problem(gpus=8, global_batch=8, seq_len=2048, grad_dtype="bf16").grad_dtype == "bf16"


def test_muon_runs_on_megatron_only_and_shards_as_the_layer_wise_optimizer():
    layout = Layout(dp=8, zero=1, optimizer="muon", global_batch=8, seq_len=1024)
    check_layout(model(), layout, 8)  # Megatron-Core's layer-wise distributed Muon
    text = message(layout.model_copy(update={"engine": "torchtitan"}), 8)
    assert text.startswith("engine torchtitan cannot run optimizer muon (torchtitan's optimizers are Adam and AdamW")
    # a grid (the search) offers ZeRO 2 and 3 beside Muon: the rule rejects them with the reason
    grid = LayoutArrays.from_layouts([layout, Layout(dp=8, zero=1, global_batch=8, seq_len=1024)])
    grid = LayoutArrays(**{**{f: getattr(grid, f) for f in grid.__dataclass_fields__}, "zero": np.array([2, 2])})
    codes = violations(model(), grid, 8)
    assert codes["muon_zero"].tolist() == [True, False]


@pytest.mark.parametrize(("fields", "why"), [
    (dict(zero=2), "Muon orthogonalises whole matrices"),
    (dict(zero=1, dtype="fp16"), "refuse fp16"),
    (dict(zero=1, offload_optimizer=True), "CPU optimizers"),
])
def test_muon_layouts_the_engines_refuse(fields, why):
    with pytest.raises(ValueError, match=why):
        Layout(dp=8, optimizer="muon", global_batch=8, seq_len=1024, **fields)


def test_muon_settings_need_muon():
    with pytest.raises(ValueError, match="apply only with optimizer muon"):
        Layout(dp=8, muon_tp_mode="blockwise", global_batch=8, seq_len=1024)
    back = Layout(dp=8, zero=1, optimizer="muon", muon_ns_steps=7, global_batch=8, seq_len=1024)
    assert back.to_arrays().to_layout(0) == back  # not taken for SGD, whose states have Muon's 8 bytes


def test_8bit_moments_are_the_hugging_face_trainer_s():
    layout = Layout(dp=8, zero=3, engine="fsdp", optimizer_state_dtype="int8", global_batch=8, seq_len=1024)
    check_layout(model(), layout, 8)
    text = message(layout.model_copy(update={"engine": "megatron"}), 8)
    assert text.startswith("engine megatron cannot run optimizer_state_dtype int8 (Megatron's precision-aware optimizer")
