"""ZeRO-2 keeps only its gradient shard, so gradient accumulation reduce-scatters after every micro-batch."""

from __future__ import annotations

import numpy as np

from planner.engines.load import load_hardware
from planner.physics.comm import group_link, reduce_scatter_seconds
from planner.specs.engine import engine_profile
from planner.specs.layout import Layout
from planner.training.memory import stage_params
from planner.training.time import data_parallel_seconds
from tests.training.test_zero3_time import gpt

HW = load_hardware("a100-80gb").spec
MODEL = gpt(layers=24, hidden=4096, heads=32)


def dp_seconds(zero: int, micro_batches: int, engine: str, *, overlap: bool, backward: float,
               forward: float = 1e-9) -> float:
    layout = Layout(dp=64, zero=zero, micro_batch=1, global_batch=64 * micro_batches, seq_len=2048,
                    overlap_grad_reduce=overlap, engine=engine).to_arrays()
    sp = stage_params(MODEL, layout, np.zeros(1, dtype=np.int64))
    return float(data_parallel_seconds(HW, layout, sp, np.array([backward]), np.array([forward]),
                                       engine_profile(engine))[0])


def test_without_overlap_zero2_pays_one_reduce_scatter_per_micro_batch() -> None:
    layout = Layout(dp=64, zero=2, micro_batch=1, global_batch=256, seq_len=2048).to_arrays()
    sp = stage_params(MODEL, layout, np.zeros(1, dtype=np.int64))
    one_reduce = float(reduce_scatter_seconds(sp.dense * layout.grad_bytes, 64, group_link(HW, 64, 1))[0])
    zero1 = dp_seconds(1, 4, "megatron", overlap=False, backward=1.0)
    zero2 = dp_seconds(2, 4, "megatron", overlap=False, backward=1.0)
    # the same all-gather of the updated weights, and 4 reduce-scatters instead of 1
    assert np.isclose(zero2 - zero1, 3 * one_reduce, rtol=1e-9)
    # one micro-batch: one reduce-scatter either way
    assert np.isclose(dp_seconds(2, 1, "megatron", overlap=False, backward=1.0),
                      dp_seconds(1, 1, "megatron", overlap=False, backward=1.0), rtol=1e-12)


def test_with_overlap_each_reduce_hides_behind_its_own_backward() -> None:
    long = dp_seconds(2, 8, "megatron", overlap=True, backward=100.0, forward=100.0)
    assert long == 0.0
    # nothing to hide behind: 8 reduce-scatters and one all-gather against ZeRO-1's one and one (equal volumes)
    short = dp_seconds(2, 8, "megatron", overlap=True, backward=1e-9)
    zero1_short = dp_seconds(1, 8, "megatron", overlap=True, backward=1e-9)
    assert np.isclose(short, zero1_short * 9 / 2, rtol=0.05)


def test_nemo_accumulates_in_a_full_buffer_and_reduces_once() -> None:
    """NeMo runs distributed Adam under the schedule's no_sync: one reduce-scatter per step, as ZeRO-1."""
    for m in (1, 4, 16):
        assert np.isclose(dp_seconds(2, m, "nemo", overlap=False, backward=1.0),
                          dp_seconds(1, m, "nemo", overlap=False, backward=1.0), rtol=1e-12)
    assert dp_seconds(2, 16, "megatron", overlap=False, backward=1.0) > 5 * dp_seconds(2, 16, "nemo", overlap=False,
                                                                                       backward=1.0)
