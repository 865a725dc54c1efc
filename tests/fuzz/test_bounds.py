"""At every limit of planner.specs.bounds at once, the cost model's arithmetic stays exact: no 64-bit integer
wraps (a wrapped product turns negative or small), nothing is nan or inf. Each limit is also enforced."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.engines.load import load_hardware
from planner.serving.estimate import estimate_inference
from planner.serving.inputs import InferenceArrays
from planner.specs.bounds import LIMITS
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.training.estimate import estimate

L, W, H, V, S = (int(LIMITS[k].maximum) for k in ("layers", "width", "heads", "vocab", "seq_len"))
LARGEST = ModelSpec(name="largest", num_layers=L, hidden_size=W, num_attention_heads=H, ffn_hidden_size=W,
                    vocab_size=V, max_seq_len=S)


def _numbers(tree: object) -> list[float]:
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _numbers(v)]
    if isinstance(tree, list):
        return [x for v in tree for x in _numbers(v)]
    return [float(tree)] if isinstance(tree, (int, float)) and not isinstance(tree, bool) else []


def test_training_estimate_at_the_limits_is_finite_and_grows() -> None:
    hw = load_hardware("h100-sxm").spec
    mb = int(LIMITS["micro_batch"].maximum)
    peaks = []
    for seq in (S // 2, S):
        lay = Layout(micro_batch=mb, global_batch=mb, seq_len=seq)
        result = estimate(LARGEST, hw, lay)
        values = _numbers(result.to_json())
        assert values and all(math.isfinite(v) and v >= 0 for v in values)
        peaks.append(result.stages[result.peak_stage].total_bytes)
    assert peaks[1] > peaks[0]  # activations grow with the sequence: a wrapped product would not


@pytest.mark.parametrize("tp", [1, H])
def test_serving_estimate_at_the_limits_is_exact(tp: int) -> None:
    hw = load_hardware("h100-sxm").spec
    x = InferenceArrays.build(tp=tp, pp=1, concurrency=int(LIMITS["concurrency"].maximum), input_len=S // 2,
                              output_len=S // 2)
    est = estimate_inference(LARGEST, hw, x)
    # K and V, L layers, h = a x d = 2**20 wide (a = 2**16 heads of d = 16), 2 bytes: 2 * 2**14 * 2**20 * 2 = 2**36
    assert float(est.memory.kv_cache_bytes_per_token) == 2.0**36
    for value in (est.memory.weights_bytes, est.memory.total_bytes, est.serving("continuous").tpot_seconds):
        assert np.all(np.isfinite(value)) and np.all(np.asarray(value) > 0)
