"""The clamp of a clamped gated activation (gpt-oss's swiglu_limit): its traffic, where it is fused, its memory.

Hand-derived on the tiny specs of round_specs: bytes per element of fc1's output 8 forward (two clamps and the
concatenation, each a read and a write of 2 bytes over the halves or the whole) and 10 backward."""

from __future__ import annotations

import numpy as np
import pytest
from round_specs import lay, round_hw, tiny

from planner.physics.elementwise import activation_clamp_bytes_per_token
from planner.physics.kernels import memory_seconds
from planner.specs.model import MoESpec
from planner.training.memory import layer_activation_bytes_per_token
from planner.training.time import layer_time

GATED = dict(mlp_kind="gated", ffn_hidden_size=96)
MOE = MoESpec(num_experts=8, experts_per_token=2, moe_ffn_hidden_size=32)


def one(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def test_bytes_per_token_by_hand():
    clamped = tiny(activation_clamp=7.0, **GATED)
    # dense: fc1's output is 2 x 96 wide, split by tp 2: 96 elements per token
    fwd, bwd = activation_clamp_bytes_per_token(clamped, np.asarray(2), moe_layer=False)
    assert (one(fwd), one(bwd)) == (8 * 96, 10 * 96)
    # MoE layer: 2 copies of a 32-wide expert, fc1's output 2 x 64 per token
    moe = tiny(activation_clamp=7.0, mlp_kind="gated", moe=MOE)
    fwd, bwd = activation_clamp_bytes_per_token(moe, np.asarray(1), moe_layer=True)
    assert (one(fwd), one(bwd)) == (8 * 128, 10 * 128)
    # no clamp, no traffic
    assert one(activation_clamp_bytes_per_token(tiny(**GATED), np.asarray(1), moe_layer=False)[0]) == 0.0


def test_the_clamp_adds_its_traffic_to_the_layer_unless_a_kernel_fuses_it():
    hw = round_hw()
    plain, clamped = tiny(**GATED), tiny(activation_clamp=7.0, **GATED)
    layout = lay(micro_batch=2)  # 2 x 32 tokens
    tokens = 64
    base, with_clamp = (layer_time(m, hw, layout, moe_layer=False) for m in (plain, clamped))
    assert one(with_clamp.forward - base.forward) == pytest.approx(one(memory_seconds(hw, tokens * 8 * 192)))
    assert one(with_clamp.backward - base.backward) == pytest.approx(one(memory_seconds(hw, tokens * 10 * 192)))
    # torch.compile fuses it into the activation; so does AutoModel's compiled quick_geglu_deepep
    for fused in (lay(micro_batch=2, engine="torchtitan", compile=True), lay(micro_batch=2, engine="automodel")):
        a, b = (layer_time(m, hw, fused, moe_layer=False) for m in (plain, clamped))
        assert one(b.forward) == pytest.approx(one(a.forward)) and one(b.backward) == pytest.approx(one(a.backward))


def test_the_clamp_keeps_a_second_copy_of_fc1s_output_unless_recomputed():
    plain = tiny(mlp_kind="gated", moe=MOE)
    clamped = tiny(activation_clamp=7.0, mlp_kind="gated", moe=MOE)
    layout = lay(dp=8, ep=8)
    extra = layer_activation_bytes_per_token(clamped, layout, moe_layer=True).stored - \
        layer_activation_bytes_per_token(plain, layout, moe_layer=True).stored
    # the clamped concatenation, 2 bytes x 2 x 64 per token (the clamps save fc1's output, already counted)
    assert one(extra) == pytest.approx(2 * 2 * 64)
    # recomputing the experts' activation (Megatron's moe_act) keeps neither
    recomputed = lay(dp=8, ep=8, recompute="selective", recompute_modules=("moe_act",))
    assert one(layer_activation_bytes_per_token(clamped, recomputed, moe_layer=True).stored) == pytest.approx(
        one(layer_activation_bytes_per_token(plain, recomputed, moe_layer=True).stored))


def test_a_clamp_needs_a_gated_activation():
    with pytest.raises(ValueError, match="activation_clamp bounds a gated activation"):
        tiny(activation_clamp=7.0)
