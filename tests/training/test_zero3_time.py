"""ZeRO-3 / FSDP time with its structure: per-unit gathers, latency growing with the group, network bound."""

from __future__ import annotations

import numpy as np
import pytest

from planner.engines.load import load_hardware
from planner.specs.engine import engine_profile
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.training.estimate import estimate, evaluate
from planner.training.memory import stage_params
from planner.training.time import zero3_seconds


def gpt(layers: int = 96, hidden: int = 12288, heads: int = 96) -> ModelSpec:
    return ModelSpec(name="gpt", num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                     ffn_hidden_size=4 * hidden, mlp_kind="standard", vocab_size=51200, tied_embeddings=True,
                     position_embedding="learned", norm_kind="layernorm", qkv_bias=True, attention_output_bias=True,
                     mlp_bias=True, max_seq_len=2048, dropout=True)


def zero3_layout(gpus: int, engine: str, micro_batch: int = 1) -> Layout:
    return Layout(dp=gpus, zero=3, recompute="full", micro_batch=micro_batch, global_batch=gpus * micro_batch,
                  seq_len=2048, dtype="fp16", grad_dtype="fp16", flash_attention=False, engine=engine)


def with_network(hw, fraction: float):  # type: ignore[no-untyped-def]
    data = hw.model_dump()
    data["network"]["bandwidth_bytes_per_s"] *= fraction
    data["network"]["nic_bits_per_s"] *= fraction
    return type(hw).model_validate(data)


def test_a_comm_bound_zero3_step_grows_when_the_network_shrinks() -> None:
    hw = load_hardware("a100-80gb").spec
    model, layout = gpt(), zero3_layout(1536, "deepspeed")
    full = estimate(model, hw, layout).scalar("step_seconds")
    quarter = estimate(model, with_network(hw, 0.25), layout).scalar("step_seconds")
    assert quarter > 1.2 * full


def test_fsdp_with_long_compute_exposes_about_the_first_gather_only() -> None:
    """torchtitan: prefetch one unit ahead; with a long micro-batch the traffic hides except the first gather
    of each pass and the last reduce-scatter, plus the contention share of the overlapped time."""
    hw = load_hardware("a100-80gb").spec
    model = gpt(layers=32, hidden=4096, heads=32)
    lay = zero3_layout(8, "torchtitan", micro_batch=16).to_arrays()
    titan = engine_profile("torchtitan")  # the collectives alone: without FSDP2's copy-out (the test below)
    engine = titan.model_copy(update={"zero": titan.zero.model_copy(update={"gather_copy_bytes_per_param": 0.0})})
    sp = stage_params(model, lay, np.zeros(1, dtype=np.int64))
    long = zero3_seconds(hw, lay, sp, engine, forward=np.array([10.0]), backward=np.array([20.0]))
    no_contention = engine.model_copy(update={"efficiency": engine.efficiency.model_copy(
        update={"nccl_compute_contention": 0.0})})
    bare = zero3_seconds(hw, lay, sp, no_contention, forward=np.array([10.0]), backward=np.array([20.0]))
    short = zero3_seconds(hw, lay, sp, no_contention, forward=np.array([1e-6]), backward=np.array([2e-6]))
    # bare = first gathers + last scatter: 3 unit collectives out of the 3 x 32 the step moves
    assert 0 < bare[0] < short[0] / 20
    assert long[0] > bare[0]


def test_zero3_latency_grows_with_the_group_at_fixed_work_per_gpu() -> None:
    hw = load_hardware("a100-80gb").spec
    model = gpt()
    times = [float(evaluate(model, hw, zero3_layout(g, "deepspeed").to_arrays(),
                            engine=engine_profile("deepspeed")).dp_comm_seconds[0]) for g in (384, 768, 1536)]
    assert times[0] < times[1] < times[2]


def test_deepspeed_search_on_gpt3_175b_does_not_put_zero3_first() -> None:
    """The issue's done-when: 1,536 A100-80GB, global batch 1,536, seq 2,048, DeepSpeed engine."""
    from planner.search.engine import run_search
    from planner.search.rank import select
    from planner.search.space import Problem

    hw = load_hardware("a100-80gb").spec
    model = gpt()
    result = run_search(model, hw, Problem(gpus=1536, global_batch=1536, seq_len=2048, engine="deepspeed"))
    best = select(result.layouts, result.results, result.fits, "throughput", top=1, pareto=False)
    layout = result.layout(int(best.order[0]))
    assert layout.zero != 3
    assert layout.engine == "deepspeed"
    assert not (layout.pp > 1 and layout.zero > 1) and layout.interleave == 1


def test_hsdp_shards_inside_the_group_and_replicates_across() -> None:
    """16 GPUs on two nodes of 8: FSDP over all 16 gathers across the network every unit; HSDP (shard group 8)
    gathers inside the node and all-reduces each node's shard once per step. Model states shard over 8, not 16."""
    from planner.training.memory import model_state_bytes

    hw = load_hardware("h100-sxm").spec
    model = gpt(layers=32, hidden=4096, heads=32)
    full = Layout(dp=16, zero=3, micro_batch=1, global_batch=64, seq_len=2048, engine="torchtitan")
    hsdp = full.model_copy(update={"shard_group": 8})
    a_full, a_hsdp = full.to_arrays(), hsdp.to_arrays()
    sp = stage_params(model, a_full, np.zeros(1, dtype=np.int64))
    w_full, _, o_full = model_state_bytes(a_full, sp)
    w_hsdp, _, o_hsdp = model_state_bytes(a_hsdp, sp)
    assert w_hsdp[0] == pytest.approx(2 * w_full[0]) and o_hsdp[0] == pytest.approx(2 * o_full[0])
    engine = engine_profile("torchtitan")
    tiny = np.array([1e-6])  # no compute to hide behind: the bare traffic
    g_full = zero3_seconds(hw, a_full, sp, engine, forward=tiny, backward=tiny)
    g_hsdp = zero3_seconds(hw, a_hsdp, sp, engine, forward=tiny, backward=tiny)
    assert g_hsdp[0] < g_full[0]
    from planner.training.time import data_parallel_seconds

    replica = data_parallel_seconds(hw, a_hsdp, sp, tiny, tiny, engine)
    assert replica[0] > 0 and data_parallel_seconds(hw, a_full, sp, tiny, tiny, engine)[0] == 0


def test_shard_group_must_divide_the_data_parallel_ranks() -> None:
    with pytest.raises(ValueError, match="shard_group"):
        Layout(dp=12, zero=3, shard_group=8, global_batch=12, seq_len=128)


def test_fsdp2_copy_out_adds_four_bytes_per_gathered_parameter() -> None:
    """torchtitan (FSDP2): after each gather the compute stream copies the bf16 flat buffer into the parameters
    (read 2 + write 2 bytes each). Forward gather + backward regather (reshard after forward; op-level AC does
    not gather again): 2 x params x 4 bytes at the profile's streaming rate, on top of the collectives."""
    hw = load_hardware("h100-sxm").spec
    model = gpt(layers=32, hidden=4096, heads=32)
    lay = Layout(dp=8, zero=3, recompute="op", micro_batch=2, global_batch=16, seq_len=2048,
                 engine="torchtitan").to_arrays()
    sp = stage_params(model, lay, np.zeros(1, dtype=np.int64))
    engine = engine_profile("torchtitan")
    assert engine.zero.gather_copy_bytes_per_param == 4.0
    without = engine.model_copy(update={"zero": engine.zero.model_copy(update={"gather_copy_bytes_per_param": 0.0})})
    f, b = np.array([1.0]), np.array([2.0])
    added = zero3_seconds(hw, lay, sp, engine, forward=f, backward=b) - zero3_seconds(hw, lay, sp, without,
                                                                                  forward=f, backward=b)
    params = float(sp.dense[0] + sp.expert[0])
    # 3.35 TB/s x 0.7 streaming efficiency (h100-sxm)
    assert added[0] == pytest.approx(2 * params * 4 / (3.35e12 * 0.7), rel=1e-9)
    assert engine_profile("megatron").zero.gather_copy_bytes_per_param == 0.0
    assert engine_profile("fsdp").zero.gather_copy_bytes_per_param == 4.0  # plain FSDP2 (derived from torchtitan)
