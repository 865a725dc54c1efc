"""Gated DeltaNet layers in training: their placement, parameters per stage, activations, kernels, FLOPs and rules.

Tiny hybrid: the tiny GPT of round_specs (L = 2 unless given, h = 64, 4 heads of 16, GeLU MLP 256, vocab 100,
LayerNorm, dropout) with GDN mixers of 2 key heads and 4 value heads of 16 (key width 32, value width 64, convolved
channels 2 x 32 + 64 = 128), a 4-tap convolution, attention on every 2nd layer. Expected values are worked out by hand
in the comments.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from round_specs import lay, round_hw, tiny  # noqa: E402

from planner.engines.load import load_hardware
from planner.errors import PlannerError
from planner.physics import linear_attention as gdn
from planner.physics.params import attention_params, count_params, linear_attention_params
from planner.specs.layout import Layout
from planner.specs.model import LinearAttentionSpec, ModelSpec
from planner.training.estimate import estimate
from planner.training.flops import attention_core_flop_per_token, linear_mixer_flop_per_token
from planner.training.memory import layer_activation_bytes_per_token, stage_params
from planner.training.rules import check_layout, resolve_layout

LA = dict(num_key_heads=2, num_value_heads=4, key_head_dim=16, value_head_dim=16, conv_kernel=4,
          full_attention_interval=2)


def hybrid(**overrides) -> ModelSpec:
    overrides.setdefault("linear_attention", LA)
    return tiny(**overrides)


def test_every_kth_layer_keeps_attention():
    # interval 4 over 10 layers: attention on layers 3 and 7, GDN on the other 8
    m = hybrid(num_layers=10, linear_attention={**LA, "full_attention_interval": 4})
    assert (m.num_linear_layers, m.num_attention_layers) == (8, 2)
    # layers 2..5 hold attention layer 3: three GDN layers; layers 7..9: attention layer 7, two GDN
    assert gdn.layer_linear_counts(m, np.array([2, 7, 0]), np.array([4, 3, 10])).tolist() == [3, 2, 8]


def test_mixer_parameters_by_hand():
    m = hybrid()
    # in_proj h x (q 32 + k 32 + v 64 + z 64 + b 4 + a 4 = 200) = 12,800; conv 128 x 4 = 512; A_log, dt_bias 8;
    # gated norm 16; out_proj 64 x 64 = 4,096: 17,432
    assert linear_attention_params(m) == 12_800 + 512 + 8 + 16 + 4_096
    # attention: 4 h^2 = 16,384, no biases or norms on the tiny GPT; a layer differs by the mixers alone
    assert attention_params(m) == 16_384
    counts = count_params(m)
    assert counts.total == count_params(tiny()).total + (17_432 - 16_384)  # one of two layers is GDN
    # the gated attention's query projection also computes the gate: + a d h = 4,096
    assert attention_params(hybrid(attention_output_gate=True)) == 16_384 + 4_096


@pytest.mark.parametrize("pp,tp", [(1, 1), (2, 1), (2, 2), (5, 1)])
def test_stage_parameters_add_up_to_the_model(pp, tp):
    m = hybrid(num_layers=10, linear_attention={**LA, "full_attention_interval": 3})
    a = lay(tp=tp, pp=pp, sequence_parallel=tp > 1)
    sp = stage_params(m, a, np.arange(pp))
    # tp 1: every parameter once; tp 2: the matrices and the convolution split, norms and the gated norm replicated
    total = float(np.sum(sp.dense))
    if tp == 1:
        assert total == count_params(m).total
    else:
        assert total < count_params(m).total
    # 10 layers, attention on 2, 5, 8: the GDN layers per stage follow the split (pp 5: two layers a stage)
    if pp == 5:
        assert np.asarray(sp.num_linear_dense).tolist() == [2, 1, 1, 2, 1]


def test_gdn_layer_keeps_its_mixers_tensors_not_the_attentions():
    m = hybrid(dropout=False)
    a = lay(seq_len=32)
    attn = layer_activation_bytes_per_token(m, a, moe_layer=False)
    lin = layer_activation_bytes_per_token(m, a, moe_layer=False, linear=True)
    # attention (flash, bf16): q, k, v 3 x 64 x 2 = 384, output 128, fp32 log-sum-exp 4 heads x 4 = 16, and the
    # projection's input 128 (the kernel's 16-bit output, read by the projection): 528
    # GDN: conv input 128 x 2 = 256; the L2 norm's input, q and k (2 x 32 x 2 = 128), and its reciprocals
    # (2 x 2 key heads x 4 = 16); the kernel's q and k repeated to the 4 value heads (2 x 64 x 2 = 256) and v (128);
    # the decay (4) and the write strength before and after its sigmoid and the decay's input (3 x 2) per value
    # head: 40; A 64 x 2 x 4 heads = 512; the gated norm's inputs 2 x 128 = 256, its output 128: 1,720
    assert np.ravel(lin.stored - attn.stored)[0] == pytest.approx(1_720 - 528)


def test_core_flops_and_the_measured_h200_kernel():
    # per value head: 6 x 128 x 128 + 2 x 64 x (3 x 128 + 2 x 128) + 64^2 / 3
    la = LinearAttentionSpec(num_key_heads=16, num_value_heads=32, key_head_dim=128, value_head_dim=128,
                             conv_kernel=4, full_attention_interval=4)
    assert gdn.core_flop_per_token(la) == pytest.approx(32 * (98_304 + 81_920 + 4096 / 3))
    # QwenLM/FlashQLA's H200 benchmark, fla 0.5.1: 16/32 heads, 32,768 tokens, forward 1.890 ms, backward 5.697 ms
    fwd, bwd = gdn.core_seconds(la, 4.8e12, np.array(32768.0), np.array(1), expanded_qk=False)
    assert float(fwd) == pytest.approx(1.890e-3, rel=0.02) and float(bwd) == pytest.approx(5.697e-3, rel=0.02)
    # split over TP with the heads
    half, _ = gdn.core_seconds(la, 4.8e12, np.array(32768.0), np.array(2), expanded_qk=False)
    assert float(half) == pytest.approx(float(fwd) / 2)
    # the engines repeat q and k to the 32 value heads before the kernel: 2 reads x 2 x (32 - 16) x 128 x 2 bytes more
    expanded = gdn.core_bytes_per_token(la, np.array(1)) - gdn.core_bytes_per_token(la, np.array(1), expanded_qk=False)
    assert float(expanded) == 2 * 2 * 16 * 128 * 2


def test_mfu_counts_attention_on_attention_layers_and_the_gdn_core_on_the_others():
    m = hybrid(num_layers=4)
    s = np.array(32.0)
    # 2 attention layers x 2 s (q + o widths 64 + 64)
    assert float(attention_core_flop_per_token(m, s)) == 2 * 2 * 32 * 128
    per_head = 6 * 16 * 16 + 2 * 64 * (3 * 16 + 2 * 16) + 64 * 64 / 3
    assert linear_mixer_flop_per_token(m) == pytest.approx(2 * 4 * per_head)


@pytest.mark.parametrize("interval,layers,moe,pp,v", [
    (4, 37, False, 16, 2), (4, 37, True, 16, 1), (3, 24, False, 8, 1), (2, 13, True, 12, 1), (4, 64, False, 32, 2),
])
def test_the_heaviest_stage_is_found_among_the_candidates(interval, layers, moe, pp, v):
    """The search costs a few candidate stages; with GDN layers the stages' mixes differ, and the peak must be the
    largest of all stages (without the extra candidates, a middle stage was heavier in these layouts)."""
    spec = dict(name="g", num_layers=layers, hidden_size=1024, num_attention_heads=8, num_kv_heads=2,
                ffn_hidden_size=4096, vocab_size=32000, max_seq_len=8192, mlp_kind="gated",
                linear_attention=dict(num_key_heads=8, num_value_heads=32, key_head_dim=128, value_head_dim=128,
                                      conv_kernel=4, full_attention_interval=interval))
    if moe:
        spec["moe"] = dict(num_experts=8, experts_per_token=2, moe_ffn_hidden_size=1024, num_dense_layers=1)
    m = ModelSpec.model_validate(spec)
    layout = resolve_layout(m, pp * 2, tp=1, pp=pp, dp=2, zero=1, micro_batch=1, global_batch=pp * 4,
                            seq_len=4096, interleave=v)
    result = estimate(m, load_hardware("h100-sxm").spec, layout)
    assert result.scalar("peak_bytes") == pytest.approx(max(s.total_bytes for s in result.stages), rel=1e-12)


def test_rules_refuse_a_tp_x_cp_that_splits_no_head_and_engines_without_gdn_cp():
    m = hybrid(num_layers=4)  # 2 key heads, 4 value heads
    check_layout(m, Layout(tp=1, cp=2, dp=1, global_batch=1, micro_batch=1, seq_len=64), 2)  # Megatron-Core's head split
    with pytest.raises(PlannerError, match=r"tp\(2\) x cp\(2\) does not divide the Gated DeltaNet layers' key heads"):
        check_layout(m, Layout(tp=2, cp=2, dp=1, sequence_parallel=True, global_batch=1, micro_batch=1, seq_len=64), 4)
    with pytest.raises(PlannerError, match="engine torchtitan cannot run cp.2. with Gated DeltaNet layers"):
        check_layout(m, Layout(tp=1, cp=2, dp=1, global_batch=1, micro_batch=1, seq_len=64, engine="torchtitan"), 2)
    with pytest.raises(PlannerError, match="linear key heads"):
        check_layout(m, Layout(tp=4, dp=1, sequence_parallel=True, global_batch=1, micro_batch=1, seq_len=64), 4)


def test_context_parallel_gdn_layers_pay_two_all_to_alls_each_way_and_keep_their_kernels():
    """cp 2 inside one node (round hardware: 8 GPUs per node): the in_proj output (q 32 + k 32 + v 64 + z 64 + b 4 +
    a 4 = 200 channels) and the norm's output (64) of the rank's 32 tokens go through an all-to-all each, forward and
    backward: 4 transfers, each (k - 1)/n of the rank's bytes over the intra-node link plus one latency."""
    from planner.physics.comm import group_link
    from planner.training.time import layer_time, linear_cp_comm_seconds

    hw = round_hw()
    m = hybrid(num_layers=4)
    one, two = lay(tp=1, cp=1, seq_len=64), lay(tp=1, cp=2, seq_len=64)
    link = group_link(hw, two.cp, two.tp)
    tokens = 32
    intra = float(np.asarray(link.intra_bandwidth_bytes_per_s).ravel()[0])
    alpha = float(np.asarray(link.intra_latency_s).ravel()[0])
    per_pass = sum(1 / 2 * tokens * width * 2 / intra + alpha for width in (200, 64))
    got = float(np.asarray(linear_cp_comm_seconds(m, hw, two)).ravel()[0])
    assert got == pytest.approx(2 * per_pass, rel=1e-12)
    assert float(np.asarray(linear_cp_comm_seconds(m, hw, one)).ravel()[0]) == 0.0
    full = lay(tp=1, cp=2, seq_len=64, recompute="full")
    assert float(np.asarray(linear_cp_comm_seconds(m, hw, full)).ravel()[0]) == pytest.approx(3 * per_pass, rel=1e-12)
    # the chunked kernels do the same work per rank: the whole sequence for half the heads, or half for all
    t1 = layer_time(m, hw, one, moe_layer=False, linear=True)
    t2 = layer_time(m, hw, two, moe_layer=False, linear=True)
    assert float(np.asarray(t2.cp_comm).ravel()[0]) == pytest.approx(got, rel=1e-12)
    assert float(np.asarray(t2.forward).ravel()[0]) < float(np.asarray(t1.forward).ravel()[0])  # half the tokens


def test_gdn_layers_change_the_step_by_their_mixers():
    """On the round hardware a GDN model and its all-attention twin differ only in the mixers: more layers of the
    cheaper mixer move the step one way, and the time of each layer kind stays positive."""
    hw = round_hw()
    layout = Layout(tp=1, dp=1, global_batch=2, micro_batch=1, seq_len=256)
    times = []
    for interval in (2, 4):
        m = tiny(num_layers=8, linear_attention={**LA, "full_attention_interval": interval})
        times.append(estimate(m, hw, layout).scalar("step_seconds"))
    plain = estimate(tiny(num_layers=8), hw, layout).scalar("step_seconds")
    assert all(t > 0 for t in times) and times[0] != plain
    # interval 4 has 6 GDN layers to interval 2's 4: the step moves from the all-attention one by 6/4 as much
    assert times[1] - plain == pytest.approx(1.5 * (times[0] - plain), rel=1e-9)


def test_models_show_reports_the_hybrid(run_cli):
    result = run_cli("models", "show", "tests/fixtures/hf/qwen3.5-27b.json")
    assert result.exit_code == 0, result.output
    assert "Gated DeltaNet" in result.stdout and "48 of 64" in result.stdout


def test_grid_and_scalar_agree_for_a_real_hybrid():
    import json
    from pathlib import Path

    from planner.engines.hf_config import model_from_hf_config
    data = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "qwen3.5-35b-a3b.json").read_text())
    m = model_from_hf_config(data, source="q")
    hw = load_hardware("h100-sxm").spec
    for tp, pp, ep in itertools.product((1, 2), (1, 4), (1, 8)):
        layout = resolve_layout(m, 64, tp=tp, pp=pp, ep=ep, zero=1, micro_batch=1, global_batch=128, seq_len=4096,
                                sequence_parallel=tp > 1)
        r = estimate(m, hw, layout)
        assert r.scalar("step_seconds") > 0 and r.scalar("peak_bytes") > 0


def test_weight_flops_count_each_layer_kinds_own_projections():
    """Model FLOPs: 2 per active weight of every layer, a GDN layer's in_proj/out_proj included (they were counted
    as the attention block's): 2 x (active - embedding - head) for the four Qwen3.5 configs."""
    import json
    from pathlib import Path

    from planner.engines.hf_config import model_from_hf_config
    from planner.training.flops import layer_weight_flop_per_token

    hf = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
    for name in ("qwen3.5-27b.json", "qwen3.5-35b-a3b.json", "qwen3.5-122b-a10b.json", "qwen3.5-397b-a17b.json"):
        m = model_from_hf_config(json.loads((hf / name).read_text()), source=name)
        c = count_params(m)
        assert layer_weight_flop_per_token(m) == 2 * (c.active - c.embedding - c.head)


def test_the_slowest_stage_after_a_moe_boundary_is_a_candidate():
    """37 layers on pp 16 with 3 leading dense layers and attention every 2nd layer: the run of all-MoE stages
    starts after the boundary stage; its k-th stage was missing from the candidates (1.8% of the step)."""
    from planner.physics.stages import candidate_stages
    from planner.training.time import stage_time

    m = ModelSpec.model_validate(dict(
        name="g", num_layers=37, hidden_size=1024, num_attention_heads=8, num_kv_heads=2, ffn_hidden_size=4096,
        vocab_size=32000, max_seq_len=8192, mlp_kind="gated",
        moe=dict(num_experts=8, experts_per_token=2, moe_ffn_hidden_size=1024, num_dense_layers=3),
        linear_attention=dict(num_key_heads=8, num_value_heads=32, key_head_dim=128, value_head_dim=128,
                              conv_kernel=4, full_attention_interval=2)))
    hw = load_hardware("h100-sxm").spec
    a = resolve_layout(m, 32, tp=1, pp=16, dp=2, zero=1, micro_batch=1, global_batch=64, seq_len=4096).to_arrays()
    every = np.arange(16)
    slowest = float(np.max(stage_time(m, hw, a, every, stage_params(m, a, every)).total))
    picked = np.unique(candidate_stages(37, 3, a.pp, 2))
    assert float(np.max(stage_time(m, hw, a, picked, stage_params(m, a, picked)).total)) == pytest.approx(slowest)


def test_gated_attention_keeps_its_gate_and_the_gated_output():
    # tiny GPT (flash, bf16, tp 1): the gate (a d = 64 elements, 2 bytes) for the sigmoid's backward, and the gated
    # output (64 x 2), the output projection's input, a tensor apart from the kernel's output: 256 bytes per token
    a = lay(seq_len=32)
    plain = layer_activation_bytes_per_token(tiny(dropout=False), a, moe_layer=False)
    gated = layer_activation_bytes_per_token(tiny(dropout=False, attention_output_gate=True), a, moe_layer=False)
    assert np.ravel(gated.stored - plain.stored)[0] == pytest.approx(256)


def test_offloaded_gdn_layers_move_their_own_tensors():
    m = hybrid(num_layers=4, dropout=False)
    a = lay(seq_len=32)
    off = lay(seq_len=32, offload_activation_layers=2)
    from planner.training.memory import offloaded_activation_bytes

    sp = stage_params(m, off, np.array(0))
    moved = float(np.ravel(offloaded_activation_bytes(m, off, np.array(0), sp))[0])
    # the first two layers: GDN (layer 0) and attention (layer 1), 32 tokens each
    gdn = np.ravel(layer_activation_bytes_per_token(m, a, moe_layer=False, linear=True).stored)[0]
    attn = np.ravel(layer_activation_bytes_per_token(m, a, moe_layer=False).stored)[0]
    assert moved == pytest.approx(32 * (gdn + attn))


def test_interleaved_ranks_count_the_gdn_layers_of_their_chunks():
    """48 layers on pp 4 with 2 virtual stages: rank r holds chunks r and r + 4 of 6 layers. Attention on layers
    3, 7, 11, ...: rank 0 (layers 0-5, 24-29) holds 2 attention and 10 GDN layers, rank 1 (6-11, 30-35) 4 and 8."""
    m = hybrid(num_layers=48, linear_attention={**LA, "full_attention_interval": 4})
    a = lay(pp=4, interleave=2, global_batch=8, micro_batch=1, seq_len=32)
    sp = stage_params(m, a, np.arange(4))
    assert np.asarray(sp.num_linear_dense).ravel().tolist() == [10, 8, 10, 8]
    plain = stage_params(m, lay(pp=4, global_batch=8, micro_batch=1, seq_len=32), np.arange(4))
    assert np.asarray(plain.num_linear_dense).ravel().tolist() == [9, 9, 9, 9]  # 12 contiguous layers, 3 attention
