"""YaRN's attention factor and the unfused rotary it sends Megatron-Core down (physics.rotary).

Hand-derived on round_specs' tiny GPT with 2 KV heads: h 64, 4 query heads of 16, so Q is 64 and K 32 elements
per token. Bytes per element beyond what the layer charges for the fused kernel (4 forward, 8 backward): forward
20 on the rotated share, plus 44 per rotated channel per call for the angles (2 calls), per position of the
sequence (shared by the micro-batch's sequences); backward 20 on the rotated share (28 in all: the products', the
negation's, the join's and the branches' gradients 20, the empty pass-through slice's zero fill and its add 8,
less 8), or 20 on the rotated share plus 6 where only part of each head rotates (the rotated slice's gradient is a
zero fill and a copy too: 14 less 8)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from round_specs import lay, round_hw, tiny

from planner.physics.kernels import memory_seconds
from planner.physics.launch import backward_launches, layer_host_seconds, layer_launches
from planner.physics.rotary import rotary_runs_unfused, unfused_rotary_bytes_per_token, yarn_attention_factor
from planner.specs.engine import engine_profile
from planner.specs.model import MLASpec
from planner.training.time import layer_time

YARN = dict(num_kv_heads=2, rotary_attention_factor=1.25)


def one(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def test_yarn_attention_factor_by_hand():
    # YaRN Sec. 3.4: 0.1 ln(s) + 1; gpt-oss's s = 32 gives 1.3466
    assert yarn_attention_factor(32.0) == pytest.approx(1.0 + 0.1 * 3.4657359, abs=1e-7)
    assert yarn_attention_factor(1.0) == 1.0 and yarn_attention_factor(0.5) == 1.0  # nothing stretched
    assert yarn_attention_factor(40.0, 0.0) == 1.0  # mscale_all_dim 0: no logarithm
    assert yarn_attention_factor(40.0, 0.707) == pytest.approx(1.0 + 0.0707 * math.log(40.0))


def test_unfused_bytes_per_token_by_hand():
    model = tiny(**YARN)
    fwd, bwd = unfused_rotary_bytes_per_token(model, np.asarray(1))
    assert (one(fwd), one(bwd)) == (20 * 96 + 2 * 44 * 16, 20 * 96)
    # four sequences share one angle table: a quarter of it per token
    fwd, _ = unfused_rotary_bytes_per_token(model, np.asarray(1), np.asarray(4))
    assert one(fwd) == 20 * 96 + 2 * 44 * 16 / 4
    # tp 2: half the query heads and one of the two KV heads on the rank; the angles stay whole
    fwd, bwd = unfused_rotary_bytes_per_token(model, np.asarray(2))
    assert (one(fwd), one(bwd)) == (20 * 48 + 2 * 44 * 16, 20 * 48)
    # half of each head rotated: the rotated share's ops over half, both slices' gradients over the whole
    half = tiny(rotary_fraction=0.5, **YARN)
    fwd, bwd = unfused_rotary_bytes_per_token(half, np.asarray(1))
    assert (one(fwd), one(bwd)) == (20 * 48 + 2 * 44 * 8, 20 * 48 + 6 * 96)


def test_only_a_scaled_rotary_on_standard_attention_runs_unfused_and_only_where_the_engine_cannot_fuse_it():
    assert rotary_runs_unfused(tiny(**YARN), True)
    assert not rotary_runs_unfused(tiny(**YARN), False)  # the engine fuses it (or runs every rotary eagerly)
    assert not rotary_runs_unfused(tiny(num_kv_heads=2), True)  # plain RoPE: the fused kernel
    assert not rotary_runs_unfused(tiny(**YARN), True, linear=True)  # a Gated DeltaNet layer has no rotary
    mla = tiny(rotary_attention_factor=1.25, mla=MLASpec(q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16,
                                                         qk_rope_head_dim=8, v_head_dim=16))
    assert not rotary_runs_unfused(mla, True)  # MLA's rotary has fused kernels of its own


def test_a_scaled_rotary_is_refused_without_rotary_positions():
    with pytest.raises(ValueError, match="rotary_attention_factor .* scales a rotary embedding"):
        tiny(position_embedding="learned", rotary_attention_factor=1.3)


def test_megatron_pays_the_unfused_traffic_and_torch_engines_do_not():
    hw = round_hw()
    plain, scaled = tiny(num_kv_heads=2), tiny(**YARN)
    layout = lay(micro_batch=2)  # 2 x 32 tokens, the angles over 32 positions
    a, b = (layer_time(m, hw, layout, moe_layer=False) for m in (plain, scaled))
    assert one(b.forward - a.forward) == pytest.approx(one(memory_seconds(hw, 64 * 20 * 96 + 32 * 2 * 44 * 16)))
    assert one(b.backward - a.backward) == pytest.approx(one(memory_seconds(hw, 64 * 20 * 96)))
    # full recompute runs the forward again, the unfused rotary with it
    full = lay(micro_batch=2, recompute="full")
    a, b = (layer_time(m, hw, full, moe_layer=False) for m in (plain, scaled))
    assert one(b.recompute - a.recompute) == pytest.approx(one(b.forward - a.forward))
    # NeMo 24.07's Megatron-Core predates the fallback: its profile runs the scaled rotary fused
    nemo = lay(micro_batch=2, engine="nemo")
    a, b = (layer_time(m, hw, nemo, moe_layer=False, engine=engine_profile("nemo")) for m in (plain, scaled))
    assert one(b.forward) == pytest.approx(one(a.forward))
    torch = lay(micro_batch=2, engine="torchtitan")
    a, b = (layer_time(m, hw, torch, moe_layer=False, engine=engine_profile("torchtitan")) for m in (plain, scaled))
    assert one(b.forward) == pytest.approx(one(a.forward)) and one(b.backward) == pytest.approx(one(a.backward))


def test_the_unfused_rotary_adds_its_kernels_to_the_host_unless_the_attention_is_graphed():
    model, layout = tiny(**YARN), lay()
    before, after = layer_launches(model, layout, moe_layer=False)
    u_before, u_after = layer_launches(model, layout, moe_layer=False, unfused_rotary=True)
    assert one(u_before - before) == 22 and one(u_after - after) == 0
    # the backward: twice each other forward kernel (the fused rotary's 2 among them), and 10 more (7 per call less
    # the 2 counted for the fused kernel)
    assert one(backward_launches(model, layout, u_before, u_after, unfused_rotary=True)) == 2 * one(before + after) + 10
    # where part of each head rotates, each call's backward also fills and copies the rotated slice's gradient and
    # copies the pass-through part (10 per call less 2)
    partial = tiny(rotary_fraction=0.5, **YARN)
    p_before, p_after = layer_launches(partial, layout, moe_layer=False, unfused_rotary=True)
    assert one(backward_launches(partial, layout, p_before, p_after, unfused_rotary=True)) == \
        2 * one(before + after) + 16
    hw = round_hw()
    extra = layer_host_seconds(model, hw, layout, moe_layer=False, passes=np.asarray(1.0), unfused_rotary=True) \
        - layer_host_seconds(model, hw, layout, moe_layer=False, passes=np.asarray(1.0))
    assert one(extra) == pytest.approx((22 + 10) * 13.5e-6)
    graphed = lay(cuda_graph_scope=("attn",))
    g_before, _ = layer_launches(model, graphed, moe_layer=False, unfused_rotary=True)
    assert one(g_before) == one(layer_launches(model, graphed, moe_layer=False)[0])
