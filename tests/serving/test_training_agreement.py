"""Training and serving, one cost model: the same weights per rank, layers per stage and GEMM time for the
same shape and dtype (issue 9). Training runs here in bf16 with its 16-bit weight copy; serving in bf16."""

from __future__ import annotations

import numpy as np
import pytest

from planner.engines.load import load_hardware, load_model
from planner.physics.kernels import matmul_seconds, peak_16bit_flops
from planner.physics.shapes import gemm_elements_per_rank
from planner.serving.inputs import InferenceArrays, model_shapes
from planner.serving.memory import stage_memory
from planner.serving.time import _gemm_seconds, rates
from planner.specs.layout import Layout
from planner.training.estimate import estimate

H100 = load_hardware("h100-sxm").spec
LAYOUTS = [(1, 1), (2, 1), (4, 2), (8, 3)]


@pytest.mark.parametrize("model_id", ["llama-3.1-70b", "llama-2-7b", "gemma-2-2b", "deepseek-v3"])
@pytest.mark.parametrize(("tp", "pp"), LAYOUTS)
def test_weights_and_layers_per_stage_agree(model_id: str, tp: int, pp: int) -> None:
    model = load_model(model_id).spec
    # mtp_layers 0: training keeps the MTP modules on the last stage, serving does not serve them
    trained = estimate(model, H100, Layout(tp=tp, pp=pp, dp=1, global_batch=2 * pp, seq_len=1024, mtp_layers=0))
    x = InferenceArrays.build(tp=tp, pp=pp, input_len=100, output_len=10)
    served = stage_memory(model_shapes(model), x, np.arange(pp))
    assert [s.layers for s in trained.stages] == served.layers.tolist()
    np.testing.assert_allclose([s.weights_bytes for s in trained.stages], served.weights_bytes, rtol=1e-4)


@pytest.mark.parametrize("model_id", ["llama-3.1-70b", "deepseek-v3"])
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_gemm_time_agrees_where_compute_bound(model_id: str, tp: int) -> None:
    # Training's GEMM time is the matmul curve, (F + x0) / plateau; serving's adds the weight stream under the
    # roofline. With many tokens the stream is hidden and the two agree; with few, serving is never faster.
    model = load_model(model_id).spec
    shapes = model_shapes(model)
    x = InferenceArrays.build(tp=tp, input_len=100, output_len=10)
    r = rates(H100, x)
    layer = shapes.dense
    for tokens, rel in ((65536.0, 0.01), (16.0, None)):
        served, _, _ = _gemm_seconds(shapes, layer, x, r, np.array(tokens))
        trained = 0.0
        for g in layer.gemms:
            elements = gemm_elements_per_rank(g, shapes.kv_heads, np.array(tp))
            flop = 2 * tokens * elements * (shapes.experts_per_token / shapes.experts if g.routed else 1.0)
            trained += float(matmul_seconds(H100, flop, peak_16bit_flops(H100)))
        if rel is None:
            assert float(served) >= trained
        else:
            assert float(served) == pytest.approx(trained, rel=rel)
