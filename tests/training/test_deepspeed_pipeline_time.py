"""DeepSpeed's pipeline engine: whole-tensor sends from every TP rank, and the gradient all-reduce after the
schedule's last step (deepspeed/runtime/pipe/engine.py, schedule.py)."""

from __future__ import annotations

import numpy as np

from planner.engines.load import load_hardware
from planner.physics.comm import (
    all_gather_seconds,
    all_reduce_seconds,
    group_link,
    p2p_seconds,
    reduce_scatter_seconds,
)
from planner.specs.engine import engine_profile
from planner.specs.layout import Layout
from planner.training.memory import stage_params
from planner.training.time import data_parallel_seconds, stage_time
from tests.training.test_zero3_time import gpt

HW = load_hardware("a100-80gb").spec
MODEL = gpt(layers=24, hidden=4096, heads=32)
STAGE = np.zeros(1, dtype=np.int64)


def layout(engine: str, *, pp: int = 4, tp: int = 4, sp: bool = False, zero: int = 1, grad: str = "fp32") -> Layout:
    return Layout(tp=tp, pp=pp, dp=8, zero=zero, sequence_parallel=sp, micro_batch=1, global_batch=64,
                  seq_len=2048, grad_dtype=grad, engine=engine)


def dp_seconds(lay: Layout, engine: str, backward: float = 1e3, forward: float = 1e3) -> float:
    arrays = lay.to_arrays()
    sp = stage_params(MODEL, arrays, STAGE)
    return float(data_parallel_seconds(HW, arrays, sp, np.array([backward]), np.array([forward]),
                                       engine_profile(engine))[0])


def test_pipeline_gradients_are_reduced_after_the_last_step_and_all_reduced_whole() -> None:
    lay = layout("deepspeed")
    arrays = lay.to_arrays()
    sp = stage_params(MODEL, arrays, STAGE)
    link = group_link(HW, 8, 4)
    grads = float(sp.dense[0]) * 4  # fp32 gradient accumulation (DeepSpeed's BF16_Optimizer) of this rank's stage
    weights = float(sp.dense[0]) * 2
    # hand-derived: all-reduce of the whole gradients, then the all-gather of the updated bf16 shards, nothing
    # hidden however long the backward (TrainSchedule: ReduceGrads after the last BackwardPass)
    expected = float(all_reduce_seconds(grads, 8, link)) + float(all_gather_seconds(weights, 8, link))
    assert np.isclose(dp_seconds(lay, "deepspeed"), expected, rtol=1e-9)
    # Megatron hides both behind a long enough backward / forward
    assert dp_seconds(layout("megatron"), "megatron") == 0.0
    # and with nothing to hide behind it pays one reduce-scatter (half an all-reduce's bytes) and the gather
    megatron_bare = dp_seconds(layout("megatron"), "megatron", backward=1e-12, forward=1e-12)
    rs = float(reduce_scatter_seconds(grads, 8, link))
    assert np.isclose(megatron_bare, rs + float(all_gather_seconds(weights, 8, link)), rtol=1e-6)
    assert dp_seconds(lay, "deepspeed") > megatron_bare
    # with 16-bit gradients DeepSpeed's ZeRO optimizer reduces into partitions: a reduce-scatter, still exposed
    bf16 = layout("deepspeed", grad="bf16")
    rs16 = float(reduce_scatter_seconds(float(sp.dense[0]) * 2, 8, link))
    assert np.isclose(dp_seconds(bf16, "deepspeed"), rs16 + float(all_gather_seconds(weights, 8, link)), rtol=1e-9)


def test_without_pipeline_deepspeed_overlaps_as_before() -> None:
    """The pipeline engine's rules apply with pp > 1 only; the ZeRO engine's overlap_comm hides the reduction."""
    assert dp_seconds(layout("deepspeed", pp=1), "deepspeed") == 0.0


def p2p_seconds_of(engine: str, *, sp: bool) -> float:
    lay = layout(engine, sp=sp).to_arrays()
    params = stage_params(MODEL, lay, np.array([1]))
    return float(stage_time(MODEL, HW, lay, np.array([1]), params, engine_profile(engine)).pp_comm[0])


def test_pipeline_sends_are_split_over_tp_as_megatron_splits_them() -> None:
    """DeepSpeed's pipe_partitioned (on by default) sends a PartitionedTensor: 1/tp of the output per rank."""
    link = group_link(HW, 2, 4 * 8)  # the next stage is tp x dp = 32 ranks on: another node
    slice_bytes = 2048 * 4096 * 2 / 4  # one micro-batch's stage output over tp = 4
    # plain 1F1B waits for its two sends (activation forward, gradient back)
    for engine in ("deepspeed", "megatron"):
        assert np.isclose(p2p_seconds_of(engine, sp=False), 2 * float(p2p_seconds(slice_bytes, link)), rtol=1e-12)
