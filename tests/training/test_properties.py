"""Property tests (hypothesis) of the training cost model on small random models and valid layouts.

What must hold whatever the shapes: a higher ZeRO stage or more recompute never needs more memory;
no pipeline, no bubble; no TP, no TP traffic; breakdowns add up; the grid evaluation equals the
one-layout estimate; more data-parallel replicas never slow the compute; the step is at least its compute.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from planner.engines.load import load_hardware
from planner.physics.params import count_params
from planner.specs.layout import Layout, LayoutArrays
from planner.specs.model import ModelSpec
from planner.training.estimate import MEMORY_KEYS, TrainingArrays, estimate, evaluate
from planner.training.memory import stage_memory, stage_params
from planner.training.rules import violations
from planner.training.time import one_f_one_b_pair_seconds

HARDWARE = {name: load_hardware(name).spec for name in ("h100-sxm", "a100-80gb")}
FAST = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def divisors(n: int, within: tuple[int, ...]) -> list[int]:
    return [d for d in within if n % d == 0]


@st.composite
def models(draw, moe_layers: bool | None = None) -> ModelSpec:
    """A small random model; `moe_layers` forces MoE on or off (None: a quarter are MoE)."""
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    head_dim = draw(st.sampled_from([8, 16]))
    hidden = heads * head_dim
    layers = draw(st.integers(1, 6))
    moe = None
    if moe_layers or (moe_layers is None and draw(st.booleans()) and draw(st.booleans())):
        experts = draw(st.sampled_from([2, 4]))
        moe = dict(num_experts=experts, experts_per_token=draw(st.integers(1, experts)),
                   moe_ffn_hidden_size=draw(st.sampled_from([16, 32, 64])),
                   num_shared_experts=draw(st.integers(0, 1)), num_dense_layers=draw(st.integers(0, layers)))
    # a quarter of the models attend through MLA, half of those with DeepSeek Sparse Attention over it
    mla = sparse = None
    if draw(st.booleans()) and draw(st.booleans()):
        mla = dict(q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=head_dim, qk_rope_head_dim=4, v_head_dim=head_dim)
        if draw(st.booleans()):
            sparse = dict(index_heads=2, index_head_dim=8, topk=draw(st.sampled_from([8, 32, 256])))
    return ModelSpec.model_validate(dict(
        mla=mla, sparse_attention=sparse,
        name="random", num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        num_kv_heads=draw(st.sampled_from(divisors(heads, (1, 2, 4, 8)))),
        ffn_hidden_size=draw(st.sampled_from([2 * hidden, 4 * hidden, 3 * hidden + 8])),
        mlp_kind=draw(st.sampled_from(["gated", "standard"])), vocab_size=draw(st.integers(16, 300)),
        tied_embeddings=draw(st.booleans()), norm_kind=draw(st.sampled_from(["rmsnorm", "layernorm"])),
        dropout=draw(st.booleans()), max_seq_len=128, moe=moe, qkv_bias=draw(st.booleans()),
        attention_output_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()),
        position_embedding=draw(st.sampled_from(["rotary", "learned"])),
    ))


@st.composite
def cases(draw, moe_layers: bool | None = None) -> tuple[ModelSpec, Layout, str]:
    """A small model, a layout that breaks no rule, and a hardware profile id."""
    model = draw(models(moe_layers))
    return model, draw(layouts_for(model)), draw(st.sampled_from(sorted(HARDWARE)))


@st.composite
def layouts_for(draw, model: ModelSpec) -> Layout:
    """A layout of `model` that breaks no rule."""
    tp = draw(st.sampled_from(divisors(model.num_attention_heads, (1, 2, 4))))
    pp = draw(st.integers(1, min(model.num_layers, 4)))
    cp = draw(st.sampled_from([1, 2]))
    dp = draw(st.sampled_from([1, 2, 4]))
    experts = model.moe.num_experts if model.moe else 1
    ep = draw(st.sampled_from([e for e in (1, 2, 4) if experts % e == 0 and (dp * cp) % e == 0] if model.moe else [1]))
    micro = draw(st.sampled_from([1, 2]))
    m = draw(st.integers(1, 8))
    interleave = 1
    schedule = draw(st.sampled_from(["1f1b", "1f1b", "gpipe"]))
    if pp > 1 and schedule == "1f1b" and model.num_layers // pp >= 2 and draw(st.booleans()):
        interleave = 2
        m = pp * draw(st.integers(1, 3))
    recompute = draw(st.sampled_from(["none", "selective", "full"]))
    layout = Layout(
        tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, zero=draw(st.integers(0, 3)),
        # Megatron-Core runs EP with TP only under sequence parallelism (rule moe_tp_needs_sp)
        sequence_parallel=tp > 1 and (ep > 1 or draw(st.booleans())), recompute=recompute,
        micro_batch=micro, global_batch=dp * micro * m, seq_len=draw(st.sampled_from([16, 32, 64, 128])),
        interleave=interleave, schedule=schedule,
        flash_attention=model.sparse_attention is not None or draw(st.booleans()),  # DSA runs its fused kernels
        grad_dtype=draw(st.sampled_from(["bf16", "fp32"])), optimizer=draw(st.sampled_from(["adam", "sgd"])),
        overlap_grad_reduce=draw(st.booleans()), overlap_tp_comm=draw(st.booleans()),
        dtype=draw(st.sampled_from(["bf16", "fp16"])),
    )
    broken = [code for code, mask in violations(model, layout.to_arrays(), layout.gpus).items() if mask.any()]
    assert not broken, broken  # the strategy only builds valid layouts
    return layout


def per_stage(model: ModelSpec, variants: list[Layout]):
    """Every stage's memory of each variant (same pp) in one vectorised call: arrays of shape (pp, variants)."""
    stages = np.arange(variants[0].pp)[:, None]
    return stage_memory(model, LayoutArrays.from_layouts(variants), stages)


def stage_totals(model: ModelSpec, variants: list[Layout]) -> list[np.ndarray]:
    totals = np.broadcast_to(per_stage(model, variants).total_bytes, (variants[0].pp, len(variants)))
    return [totals[:, i] for i in range(len(variants))]


def stage_states(model: ModelSpec, variants: list[Layout]) -> list[np.ndarray]:
    mem = per_stage(model, variants)
    states = np.broadcast_to(mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes,
                             (variants[0].pp, len(variants)))
    return [states[:, i] for i in range(len(variants))]


def at_most(smaller: np.ndarray, larger: np.ndarray) -> bool:
    return bool(np.all(smaller <= larger * (1 + 1e-12) + 1e-6))


# ZeRO ------------------------------------------------------------------------------------------
@FAST
@given(cases())
def test_model_states_never_grow_with_a_higher_zero_stage(case):
    model, layout, hw = case
    states = stage_states(model, [layout.model_copy(update={"zero": z}) for z in range(4)])
    for lower, higher in zip(states, states[1:]):
        assert at_most(higher, lower)


@FAST
@given(cases())
def test_zero_1_never_needs_more_memory_than_zero_0(case):
    # ZeRO-1 only shards the optimizer states; it adds no buffer.
    model, layout, hw = case
    zero0, zero1 = stage_totals(model, [layout.model_copy(update={"zero": z}) for z in (0, 1)])
    assert at_most(zero1, zero0)


ONE_RANK_ZERO = (
    ModelSpec(name="one rank", num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256,
              vocab_size=100, max_seq_len=128),
    Layout(dp=1, global_batch=1, seq_len=32),
    "h100-sxm",
)


@FAST
@given(cases())
@example(ONE_RANK_ZERO)
def test_total_memory_never_grows_with_a_higher_zero_stage(case):
    model, layout, hw = case
    totals = stage_totals(model, [layout.model_copy(update={"zero": z}) for z in range(4)])
    for lower, higher in zip(totals, totals[1:]):
        assert at_most(higher, lower)


# Recompute -------------------------------------------------------------------------------------
@FAST
@given(cases())
def test_memory_never_grows_with_more_recompute(case):
    # none >= selective >= full, on every stage and at the peak, for the same layout.
    model, layout, hw = case
    variants = [layout.model_copy(update={"recompute": r}) for r in ("none", "selective", "full")]
    totals = stage_totals(model, variants)
    for more, less in zip(totals, totals[1:]):
        assert at_most(less, more)
    peaks = evaluate(model, HARDWARE[hw], LayoutArrays.from_layouts(variants)).peak_bytes
    assert peaks[1] <= peaks[0] * (1 + 1e-12) and peaks[2] <= peaks[1] * (1 + 1e-12)


# Pipeline and tensor parallelism ----------------------------------------------------------------
@FAST
@given(cases())
def test_no_pipeline_no_bubble(case):
    model, layout, hw = case
    layout = layout.model_copy(update={"pp": 1, "interleave": 1})
    result = evaluate(model, HARDWARE[hw], layout.to_arrays())
    assert result.bubble_seconds.tolist() == [0.0]
    assert result.pp_comm_seconds.tolist() == [0.0]


@FAST
@given(cases())
def test_no_tensor_parallelism_no_tp_traffic(case):
    model, layout, hw = case
    layout = layout.model_copy(update={"tp": 1, "sequence_parallel": False})
    assert evaluate(model, HARDWARE[hw], layout.to_arrays()).tp_comm_seconds.tolist() == [0.0]


# Breakdowns --------------------------------------------------------------------------------------
@FAST
@given(cases())
def test_breakdown_sums_to_the_total(case):
    model, layout, hw = case
    est = estimate(model, HARDWARE[hw], layout)
    parts = [k for k in MEMORY_KEYS if k != "total_bytes"]
    for stage in est.stages:
        assert sum(getattr(stage, k) for k in parts) == pytest.approx(stage.total_bytes, rel=1e-12)
        assert all(getattr(stage, k) >= 0 for k in parts)
    data = est.to_json()
    assert sum(data["memory"][k] for k in parts) == pytest.approx(data["memory"]["total_bytes"], rel=1e-12)
    assert [s["total_bytes"] for s in data["stages"]] == [s.total_bytes for s in est.stages]
    assert sum(s.layers for s in est.stages) == model.num_layers


def assert_peak_is_the_heaviest_stage(case) -> None:
    model, layout, hw = case
    est = estimate(model, HARDWARE[hw], layout)
    heaviest = max(s.total_bytes for s in est.stages)
    assert est.scalar("peak_bytes") == pytest.approx(heaviest, rel=1e-12)
    assert est.to_json()["memory"]["total_bytes"] == pytest.approx(heaviest, rel=1e-12)
    assert est.stages[est.peak_stage].total_bytes == pytest.approx(heaviest, rel=1e-12)
    assert est.fits == (heaviest <= est.usable_bytes)


@FAST
@given(cases(moe_layers=False))
def test_peak_is_the_heaviest_stage_dense(case):
    assert_peak_is_the_heaviest_stage(case)


# Found by hypothesis: 6 layers on 4 stages [1, 2, 2, 1], the first 2 dense. Stage 2 holds two MoE layers,
# stage 1 one dense and one MoE, so stage 2 is heavier than stage 1 and than the last stage (one MoE layer).
MOE_DENSE_FIRST = (
    ModelSpec.model_validate(dict(
        name="dense first", num_layers=6, hidden_size=8, num_attention_heads=1, ffn_hidden_size=16, vocab_size=16,
        max_seq_len=128, moe=dict(num_experts=2, experts_per_token=1, moe_ffn_hidden_size=16, num_dense_layers=2),
    )),
    Layout(pp=4, global_batch=1, seq_len=16, flash_attention=False),
    "a100-80gb",
)


@FAST
@given(cases(moe_layers=True))
@example(MOE_DENSE_FIRST)
def test_peak_is_the_heaviest_stage_moe(case):
    assert_peak_is_the_heaviest_stage(case)


def assert_stages_hold_every_parameter_once(case) -> None:
    # tp = 1, ep = 1: the stages' parameters add up to the model's count, plus the last stage's copy of a
    # tied word table when pp > 1.
    model, layout, _ = case
    layout = layout.model_copy(update={"tp": 1, "ep": 1, "sequence_parallel": False})
    sp = stage_params(model, layout.to_arrays(), np.arange(layout.pp)[:, None])
    held = float(np.sum(sp.dense + sp.expert))
    copy = model.vocab_size * model.hidden_size if model.tied_embeddings and layout.pp > 1 else 0
    assert held == pytest.approx(count_params(model).total + copy, rel=1e-12)


@FAST
@given(cases(moe_layers=False))
def test_stages_hold_every_parameter_once_dense(case):
    assert_stages_hold_every_parameter_once(case)


MOE_WITH_BIASES = (
    ModelSpec.model_validate(dict(
        name="moe with biases", num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256,
        vocab_size=100, max_seq_len=128, mlp_bias=True,
        moe=dict(num_experts=4, experts_per_token=2, moe_ffn_hidden_size=32, num_shared_experts=1),
    )),
    Layout(global_batch=1, seq_len=32),
    "h100-sxm",
)


@FAST
@given(cases(moe_layers=True))
@example(MOE_WITH_BIASES)
def test_stages_hold_every_parameter_once_moe(case):
    assert_stages_hold_every_parameter_once(case)


# Expert all-to-all overlap ---------------------------------------------------------------------
seconds = st.floats(0.0, 10.0, allow_nan=False, allow_infinity=False)


@FAST
@given(st.lists(seconds, min_size=9, max_size=9))
def test_a_1f1b_pair_takes_at_least_its_longer_stream_and_at_most_both_in_series(values):
    # Two streams with dependencies between them: never shorter than either stream alone, never longer than
    # running everything one after another.
    compute = dict(zip(("pre_forward", "expert_forward", "expert_dgrad", "expert_wgrad", "pre_backward"), values[:5]))
    comm = dict(zip(("dispatch_forward", "combine_forward", "dispatch_backward", "combine_backward"), values[5:]))
    pair = float(one_f_one_b_pair_seconds(**{k: np.array(v) for k, v in {**compute, **comm}.items()}))
    c, t = sum(compute.values()), sum(comm.values())
    assert max(c, t) <= pair * (1 + 1e-12) + 1e-12
    assert pair <= (c + t) * (1 + 1e-12) + 1e-12


@FAST
@given(cases(moe_layers=True))
def test_the_all_to_all_overlap_never_exposes_more_expert_traffic(case):
    # Overlapped or not, a layer moves the same bytes; the overlap can only hide some of them (whatever an engine's
    # rules allow: evaluate applies none, and the physics must hold for every layout).
    model, layout, hw = case
    plain = layout.model_copy(update={"moe_ep_overlap": False})
    overlapped = layout.model_copy(update={"moe_ep_overlap": True})
    result = evaluate(model, HARDWARE[hw], LayoutArrays.from_layouts([plain, overlapped]))
    assert result.ep_comm_seconds[1] <= result.ep_comm_seconds[0] * (1 + 1e-12) + 1e-15


@FAST
@given(cases(moe_layers=True), st.booleans())
def test_delaying_the_experts_weight_gradients_never_exposes_more_expert_traffic(case, overlap):
    # moe_delay_wgrad only lets the dispatch's gradient start before the experts' weight gradients: with the
    # overlap or without it, the same bytes move and no transfer waits longer.
    model, layout, hw = case
    base = layout.model_copy(update={"moe_ep_overlap": overlap})
    now, later = (base.model_copy(update={"moe_delay_wgrad": d}) for d in (False, True))
    result = evaluate(model, HARDWARE[hw], LayoutArrays.from_layouts([now, later]))
    assert result.ep_comm_seconds[1] <= result.ep_comm_seconds[0] * (1 + 1e-12) + 1e-15
    assert result.step_seconds[1] <= result.step_seconds[0] * (1 + 1e-12) + 1e-15


@FAST
@given(cases(moe_layers=True), st.floats(1.0, 4.0, allow_nan=False))
def test_a_skewed_routing_never_speeds_a_step_nor_frees_memory(case, skew):
    # The busiest expert-parallel rank's extra copies only add rows, bytes and kernels' traffic.
    model, layout, hw = case
    assume(layout.moe_capacity_factor is None)
    skewed = layout.model_copy(update={"moe_load_imbalance": skew})
    result = evaluate(model, HARDWARE[hw], LayoutArrays.from_layouts([layout, skewed]))
    assert result.step_seconds[1] >= result.step_seconds[0] * (1 - 1e-12)
    assert result.peak_bytes[1] >= result.peak_bytes[0] * (1 - 1e-12)


# Grid = scalar ---------------------------------------------------------------------------------
@SLOW
@given(st.data())
def test_evaluate_on_a_grid_equals_estimate_per_layout(data):
    # One evaluate() over several independent layouts of one model gives, field by field, what estimate()
    # gives for each (the vectorised path equals the scalar one to 1e-9 relative).
    model = data.draw(models())
    hw = data.draw(st.sampled_from(sorted(HARDWARE)))
    layouts = data.draw(st.lists(layouts_for(model), min_size=2, max_size=6))
    grid = evaluate(model, HARDWARE[hw], LayoutArrays.from_layouts(layouts))
    for i, layout in enumerate(layouts):
        one = estimate(model, HARDWARE[hw], layout).result
        for f in fields(TrainingArrays):
            got, want = getattr(grid, f.name), getattr(one, f.name)
            if isinstance(want, np.ndarray):
                assert np.asarray(got)[i] == pytest.approx(float(want[0]), rel=1e-9, abs=1e-300), f.name
            else:
                assert got == want, f.name


@FAST
@given(cases())
def test_evaluate_on_a_grid_of_variants_equals_estimate(case):
    # Variants of one layout side by side: each row of the grid is its own estimate.
    model, layout, hw = case
    variants = [layout, layout.model_copy(update={"zero": (layout.zero + 1) % 4}),
                layout.model_copy(update={"recompute": "full"})]
    if model.sparse_attention is None:  # sparse attention runs only its fused kernels
        variants.append(layout.model_copy(update={"flash_attention": not layout.flash_attention}))
    grid = evaluate(model, HARDWARE[hw], LayoutArrays.from_layouts(variants))
    for i, variant in enumerate(variants):
        one = estimate(model, HARDWARE[hw], variant).result
        assert grid.step_seconds[i] == pytest.approx(float(one.step_seconds[0]), rel=1e-9)
        assert grid.peak_bytes[i] == pytest.approx(float(one.peak_bytes[0]), rel=1e-9)


# Time --------------------------------------------------------------------------------------------
@FAST
@given(cases())
def test_more_data_parallel_replicas_never_slow_the_compute(case):
    # Doubling dp and the global batch keeps each replica's work (same micro-batches, same size).
    model, layout, hw = case
    wider = layout.model_copy(update={"dp": 2 * layout.dp, "global_batch": 2 * layout.global_batch})
    assert not any(mask.any() for mask in violations(model, wider.to_arrays(), wider.gpus).values())
    both = evaluate(model, HARDWARE[hw], LayoutArrays.from_layouts([layout, wider]))
    assert both.compute_seconds[1] <= both.compute_seconds[0] * (1 + 1e-12)


@FAST
@given(cases())
def test_step_time_is_at_least_the_compute_and_every_part_is_non_negative(case):
    model, layout, hw = case
    r = evaluate(model, HARDWARE[hw], layout.to_arrays())
    assert r.step_seconds[0] >= r.compute_seconds[0] > 0
    for name in ("communication_seconds", "bubble_seconds", "optimizer_seconds", "tp_comm_seconds", "cp_comm_seconds",
                 "ep_comm_seconds", "pp_comm_seconds", "dp_comm_seconds", "recompute_seconds"):
        assert getattr(r, name)[0] >= 0, name
    assert r.hardware_flop[0] >= r.model_flop[0] > 0
    assert 0 < r.mfu[0] <= r.hfu[0] < 1
