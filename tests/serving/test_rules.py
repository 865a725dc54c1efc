"""The serving rules, written once: the grid masks and the single-layout messages agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.engines.load import load_model
from planner.errors import PlannerError
from planner.serving.inputs import InferenceArrays
from planner.serving.rules import RULES, check_layout, resolve_layout, violations
from planner.specs.serving import ServingLayout

MODEL = load_model("llama-3.1-70b").spec  # 64 heads, 8 KV heads, 80 layers, max_seq_len 131072


@settings(max_examples=80, deadline=None)
@given(tp=st.integers(1, 16), pp=st.integers(1, 100), s=st.integers(1, 140_000), o=st.integers(1, 5000))
def test_grid_mask_and_single_message_agree(tp: int, pp: int, s: int, o: int) -> None:
    layout = ServingLayout(tp=tp, pp=pp, input_len=s, output_len=o)
    broken = violations(MODEL, InferenceArrays.from_layout(layout))
    first = next((r for r in RULES if bool(broken[r.code])), None)
    if first is None:
        check_layout(MODEL, layout)
    else:
        with pytest.raises(PlannerError) as err:
            check_layout(MODEL, layout)
        assert str(err.value) == first.message(MODEL, layout)


def test_grid_of_layouts_one_mask_each() -> None:
    x = InferenceArrays.build(tp=np.array([1, 3, 16, 2]), pp=np.array([1, 1, 1, 81]), input_len=100, output_len=10)
    broken = violations(MODEL, x)
    assert broken["tp_heads"].tolist() == [False, True, False, False]
    assert broken["tp_kv_heads"].tolist() == [False, True, False, False]  # 16 replicates the 8 KV heads
    assert broken["pp_layers"].tolist() == [False, False, False, True]


def test_spec_errors_are_one_line() -> None:
    with pytest.raises(PlannerError, match=r"^--input-len must be at least 1, got 0$"):
        resolve_layout(MODEL, input_len=0, output_len=10)
    with pytest.raises(PlannerError, match="request_rate needs batching 'continuous'"):
        resolve_layout(MODEL, input_len=10, output_len=10, request_rate=2.0, batching="static")
    with pytest.raises(PlannerError, match="not a multiple of tp"):
        resolve_layout(MODEL, input_len=10, output_len=10, tp=4, gpus=6)
    assert resolve_layout(MODEL, input_len=10, output_len=10, tp=4, gpus=8).replicas == 2
