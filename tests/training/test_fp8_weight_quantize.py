"""Weight quantization as each engine runs it, and torchao's float8 FSDP all-gather (fp8_param_gather under torchtitan).

round_hw: HBM at 2e12 B/s x 0.9 = 1.8e12 B/s, Hopper-like (fp8 GEMMs take the TN layout only). Every expected value
below is the bytes the kernels move, counted by hand, over 1.8e12.
"""

from __future__ import annotations

import numpy as np
import pytest
from round_specs import lay, round_hw, tiny  # noqa: E402

from planner.specs.engine import engine_profile
from planner.training.memory import buffer_bytes, model_state_bytes, stage_params
from planner.training.time import fp8_weight_quantize_seconds

HW = round_hw()
BW = 1.8e12
W = 1.0e9  # weight elements of one layer on the rank


def _seconds(engine: str, **fields) -> tuple[float, float]:
    fwd, bwd = fp8_weight_quantize_seconds(HW, lay(dtype="fp8", **fields), engine_profile(engine), np.asarray(W))
    return float(np.ravel(fwd)[0]), float(np.ravel(bwd)[0])


def test_transformer_engine_casts_a_weight_once_per_step():
    # per-tensor current scaling on a TN-only chip: amax 2 + cast 2 + fp8 copy 1 + transposed copy 1 = 6 bytes, once
    # per step, so a quarter of it per micro-batch at 4 micro-batches; nothing in the backward
    fwd, bwd = _seconds("megatron", fp8_recipe="tensorwise", micro_batch=1, global_batch=4)
    assert fwd == pytest.approx(W * 6 / BW / 4, rel=1e-12) and bwd == 0.0


def test_torchao_casts_in_every_forward_and_again_in_every_backward():
    # torchao's roofline count, tensorwise: amax 2 + forward cast 3 in the forward, the backward's cast 3; per
    # micro-batch, whatever their number
    for global_batch in (1, 4):
        fwd, bwd = _seconds("torchtitan", fp8_recipe="tensorwise", micro_batch=1, global_batch=global_batch)
        assert fwd == pytest.approx(W * 5 / BW, rel=1e-12) and bwd == pytest.approx(W * 3 / BW, rel=1e-12)
    # rowwise: the forward's row-scaled cast 3; the backward's bf16 transpose 4 and column-scaled cast 3
    fwd, bwd = _seconds("torchtitan", fp8_recipe="rowwise")
    assert fwd == pytest.approx(W * 3 / BW, rel=1e-12) and bwd == pytest.approx(W * 7 / BW, rel=1e-12)


def test_the_float8_all_gather_casts_shards_and_transposes_the_gathered_weight():
    # FSDP over 8 ranks, one micro-batch, FSDP2 reshards after the forward: two gathers per micro-batch, each casting
    # the fp32 shard (read 4, write 1: 5 bytes per shard element), one amax pass over the shard per step (4); the
    # backward copies the gathered fp8 weight transposed (read 1, write 1)
    fwd, bwd = _seconds("torchtitan", fp8_recipe="tensorwise", zero=3, dp=8, fp8_param_gather=True, recompute="op")
    assert fwd == pytest.approx(W / 8 * (2 * 5 + 4) / BW, rel=1e-12)
    assert bwd == pytest.approx(W * 2 / BW, rel=1e-12)
    # bf16 shards (torchtitan's training.dtype bfloat16) read 2 bytes, not 4
    fwd16, _ = _seconds("torchtitan", fp8_recipe="tensorwise", zero=3, dp=8, fp8_param_gather=True, recompute="op",
                        master_weights_dtype="bf16", optimizer_state_dtype="bf16")
    assert fwd16 == pytest.approx(W / 8 * (2 * 3 + 2) / BW, rel=1e-12)
    plain = sum(_seconds("torchtitan", fp8_recipe="tensorwise", zero=3, dp=8, recompute="op"))
    assert fwd + bwd < plain


def test_torchtitan_holds_its_weights_as_they_are_and_gathers_them_in_fp8():
    model = tiny()
    gather, plain = (lay(dtype="fp8", zero=3, dp=8, fp8_param_gather=on) for on in (True, False))
    stage = np.zeros(1, dtype=np.int64)
    held = [model_state_bytes(a, stage_params(model, a, stage), fp8_params_held=False)[0] for a in (gather, plain)]
    assert float(held[0][0]) == float(held[1][0])  # the shards keep their bytes
    megatron = model_state_bytes(gather, stage_params(model, gather, stage))[0]
    assert float(megatron[0]) < float(held[0][0])  # Transformer Engine's fp8 parameters hold 1 byte
    # the gathered layers (two: the one computing and the prefetched one) at 1 byte, not 2
    sp = stage_params(model, gather, stage)
    diff = float(buffer_bytes(plain, sp)[0] - buffer_bytes(gather, sp)[0])
    per_layer = float(sp.largest_layer_dense[0])
    assert diff == pytest.approx(2 * per_layer * (1 - 1 / 8) * (2 - 1), rel=1e-12)


def test_fsdp2_holds_a_units_unsharded_gradients_beside_its_reduce_scatter_input():
    # foreach_reduce allocates the fp32 reduce-scatter input, copies the bf16 unsharded gradients in, then frees them:
    # 2 bytes per parameter of the unit beyond the 4 of the reduce-scatter input, under FSDP2 only
    model = tiny()
    a = lay(zero=3, dp=8, grad_dtype="fp32")
    sp = stage_params(model, a, np.zeros(1, dtype=np.int64))
    extra = float(buffer_bytes(a, sp, engine_profile("torchtitan").zero.unsharded_grad_bytes_per_param)[0]
                  - buffer_bytes(a, sp)[0])
    assert extra == pytest.approx(2 * float(sp.largest_layer_dense[0]) * (1 - 1 / 8), rel=1e-12)
    assert engine_profile("fsdp").zero.unsharded_grad_bytes_per_param == 0.0  # FSDP1 reduces the gradient itself
    assert engine_profile("megatron").zero.unsharded_grad_bytes_per_param == 0.0


def test_torchaos_mx_recipe_casts_the_weight_once_each_way():
    # torchtitan's MX converter (torchao mxfp8): read 2, write 1 along each axis, the forward's and the backward's
    fwd, bwd = _seconds("torchtitan", fp8_recipe="mxfp8")
    assert fwd == pytest.approx(W * 3 / BW, rel=1e-12) and bwd == pytest.approx(W * 3 / BW, rel=1e-12)


def test_the_float8_all_gather_leaves_a_moes_routed_experts_in_bf16():
    # torchao converts Float8Linear modules only: a MoE's grouped experts gather 16-bit under torchtitan's float8
    # all-gather (their buffers 2 bytes), where Transformer Engine's fp8 parameters gather them in fp8 (1 byte)
    model = tiny(moe=dict(num_experts=4, experts_per_token=2, moe_ffn_hidden_size=32))
    a = lay(dtype="fp8", zero=3, dp=8, ep=2, fp8_param_gather=True)
    sp = stage_params(model, a, np.zeros(1, dtype=np.int64))
    torchao, te = (float(buffer_bytes(a, sp, fp8_params_held=held)[0]) for held in (False, True))
    gathered_expert = float(np.minimum(2 * sp.largest_layer_expert, sp.expert)[0])
    beyond_expert = 1 - 1 / 4  # experts shard over tp x dp / ep = 4 ranks
    assert gathered_expert > 0 and torchao - te == pytest.approx(gathered_expert * beyond_expert, rel=1e-12)
    # and their casts stay per micro-batch (8 bytes), while the dense weights' move to the shard and the transposed copy
    routed = 2.0e8
    fwd, bwd = fp8_weight_quantize_seconds(HW, lay(dtype="fp8", fp8_recipe="tensorwise", zero=3, dp=8,
                                                   fp8_param_gather=True, recompute="op"),
                                           engine_profile("torchtitan"), np.asarray(W), np.asarray(routed))
    assert float(np.ravel(fwd)[0]) == pytest.approx((W / 8 * (2 * 5 + 4) + routed * 5) / BW, rel=1e-12)
    assert float(np.ravel(bwd)[0]) == pytest.approx((W * 2 + routed * 3) / BW, rel=1e-12)
