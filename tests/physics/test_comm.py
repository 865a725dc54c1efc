"""Alpha-beta collective costs and the tier a group uses.

A round-number profile makes the arithmetic checkable by hand: 8 GPUs per node, NVLink 400 GB/s per GPU
one way at 50% achievable = 200 GB/s with alpha 3 us; the network 50 GB/s per GPU at 80% = 40 GB/s with
alpha 10 us.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.physics.comm import (
    all_gather_seconds,
    all_reduce_seconds,
    all_to_all_seconds,
    group_link,
    p2p_seconds,
    reduce_scatter_seconds,
)
from planner.physics.kernels import GEMM_FIXED_SECONDS, matmul_plateau
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.training.time import layer_time

INTRA_BW, INTRA_LAT = 200e9, 3e-6
INTER_BW, INTER_LAT = 40e9, 10e-6


from round_specs import round_hw  # noqa: E402

HW = round_hw(peaks={"bf16": 1e15})


def seconds(collective, nbytes: float, size: int, stride: int) -> float:
    return float(collective(nbytes, size, group_link(HW, size, stride)))


# Where a group sits: k members per node, N nodes (TP innermost) ----------------------------------
@pytest.mark.parametrize(
    "size, stride, members_per_node, nodes",
    [
        (8, 1, 8, 1),  # TP 8 inside a node: 8 x 1 <= 8
        (2, 4, 2, 1),  # 2 members 4 ranks apart: span 8, one node
        (16, 1, 8, 2),  # 16 consecutive ranks: 8 in each of 2 nodes
        (4, 4, 2, 2),  # span 16 > 8: 8 // 4 = 2 members per node, 2 nodes
        (4, 8, 1, 4),  # DP behind TP 8: one member per node, 4 nodes
        (32, 2, 4, 8),  # stride 2: 4 members per node, 8 nodes
    ],
)
def test_group_placement(size, stride, members_per_node, nodes):
    link = group_link(HW, size, stride)
    assert int(link.members_per_node) == members_per_node
    assert int(link.nodes) == nodes


def test_group_link_tiers_carry_the_efficiencies():
    link = group_link(HW, 8, 1)
    assert link.intra_bandwidth_bytes_per_s == pytest.approx(INTRA_BW)  # 400 GB/s x 0.5
    assert link.inter_bandwidth_bytes_per_s == pytest.approx(INTER_BW)  # 50 GB/s x 0.8
    assert (link.intra_latency_s, link.inter_latency_s) == (INTRA_LAT, INTER_LAT)


def test_group_link_on_arrays():
    link = group_link(HW, np.array([8, 4, 4]), np.array([1, 8, 4]))
    assert link.members_per_node.tolist() == [8, 1, 2]
    assert link.nodes.tolist() == [1, 4, 2]


# All-reduce -------------------------------------------------------------------------------------
def test_ring_all_reduce_inside_a_node():
    # 1 GB over 8 ranks on NVLink: 2(n-1)/n S/B + 2(n-1) alpha = 1.75e9/200e9 + 14 x 3e-6 = 0.00875 + 4.2e-5.
    assert seconds(all_reduce_seconds, 1e9, 8, 1) == pytest.approx(0.008792)


def test_all_reduce_of_a_small_message_inside_a_node_is_latency_bound():
    # 1 kB, 8 ranks in one node. Ring: 1.75e3/200e9 + 14 x 3e-6 = 4.200875e-5. One-shot (every rank reads
    # its 7 peers at once): 3e-6 + 7 x 1e3/200e9 = 3.035e-6, the faster, and the message is under 256 KiB.
    assert seconds(all_reduce_seconds, 1e3, 8, 1) == pytest.approx(3.035e-6)


def test_large_all_reduce_inside_a_node_stays_a_ring():
    # 1 MiB is above the one-shot limit: ring 2 x 7/8 x 1,048,576/200e9 + 14 x 3e-6 = 9.175e-6 + 4.2e-5.
    assert seconds(all_reduce_seconds, 2**20, 8, 1) == pytest.approx(2 * 7 / 8 * 2**20 / 200e9 + 14 * 3e-6)


def test_all_reduce_of_one_rank_is_free():
    assert seconds(all_reduce_seconds, 1e9, 1, 1) == 0.0
    assert seconds(all_gather_seconds, 1e9, 1, 1) == 0.0
    assert seconds(all_to_all_seconds, 1e9, 1, 1) == 0.0


def test_all_reduce_across_two_nodes_spreads_over_the_nics():
    # 16 ranks, 8 per node, 1 GB. Inside each node a reduce-scatter and an all-gather:
    #   2 x (7/8 x 1e9/200e9 + 7 x 3e-6) = 2 x 0.004396 = 0.008792.
    # Across the 2 nodes each GPU all-reduces its 1/8 shard (1.25e8 bytes) through its own NIC:
    #   ring 2 x 1/2 x 1.25e8/40e9 + 2 x 1e-5 = 0.003145; tree 2 x 1.25e8/40e9 + 2 x 1 x 1e-5 = 0.00627 -> ring.
    # Total 0.011937 s (without the 8 NICs working at once the network part alone would be 8 x longer).
    assert seconds(all_reduce_seconds, 1e9, 16, 1) == pytest.approx(0.011937)


def test_all_reduce_one_member_per_node_uses_one_nic():
    # DP 4 behind TP 8: k = 1, N = 4, all of the 1 GB crosses the network.
    #   ring 2 x 3/4 x 1e9/40e9 + 2 x 3 x 1e-5 = 0.0375 + 6e-5 = 0.03756; tree 0.05 + 4e-5 -> ring.
    assert seconds(all_reduce_seconds, 1e9, 4, 8) == pytest.approx(0.03756)


def test_tree_all_reduce_across_many_nodes_for_a_small_message():
    # 64 nodes, one member each, 1 kB: ring 2 x 63/64 x 1e3/40e9 + 2 x 63 x 1e-5 = 1.26005e-3;
    # tree 2 x 1e3/40e9 + 2 log2(64) x 1e-5 = 5e-8 + 1.2e-4 = 1.2005e-4 -> tree.
    assert seconds(all_reduce_seconds, 1e3, 64, 8) == pytest.approx(1.2005e-4)


# All-gather, reduce-scatter, all-to-all, point-to-point ----------------------------------------
def test_all_gather_and_reduce_scatter_inside_a_node():
    # (n-1)/n S/B + (n-1) alpha: 0.875e9/200e9 + 7 x 3e-6 = 0.004375 + 2.1e-5 = 0.004396 s.
    assert seconds(all_gather_seconds, 1e9, 8, 1) == pytest.approx(0.004396)
    assert seconds(reduce_scatter_seconds, 1e9, 8, 1) == pytest.approx(0.004396)


def test_all_gather_across_two_nodes():
    # Node part as above, 0.004396; network part: each GPU gathers the other node's 1/8 shard:
    # (N-1)/N x S/k / B + (N-1) alpha = 1/2 x 1.25e8/40e9 + 1e-5 = 0.0015725. Total 0.0059685.
    assert seconds(all_gather_seconds, 1e9, 16, 1) == pytest.approx(0.0059685)
    assert seconds(reduce_scatter_seconds, 1e9, 16, 1) == pytest.approx(0.0059685)


def test_all_to_all_is_not_spread_over_the_nics():
    # Inside a node (n = k = 8): 7/8 x 1e9/200e9 + 7 x 3e-6 = 0.004396.
    assert seconds(all_to_all_seconds, 1e9, 8, 1) == pytest.approx(0.004396)
    # 16 ranks on 2 nodes: 7/16 of the bytes to node peers, 7/16 x 1e9/200e9 + 7 x 3e-6 = 0.0022085;
    # 8/16 to the other node through the GPU's own NIC, 8/16 x 1e9/40e9 + 8 x 1e-5 = 0.01258. Total 0.0147885.
    assert seconds(all_to_all_seconds, 1e9, 16, 1) == pytest.approx(0.0147885)


def test_point_to_point_uses_the_tier_it_crosses():
    # Neighbours 8 ranks apart are on different nodes: 1e-5 + 1e9/40e9 = 0.02501 s.
    assert float(p2p_seconds(1e9, group_link(HW, 2, 8))) == pytest.approx(0.02501)
    # 4 apart, same node: 3e-6 + 1e9/200e9 = 0.005003 s.
    assert float(p2p_seconds(1e9, group_link(HW, 2, 4))) == pytest.approx(0.005003)


def test_collectives_broadcast_over_arrays():
    # n = 2 and n = 4 inside a node: 2 x (1/2 x 1e9/200e9 + 3e-6) = 0.005006; 2 x (3/4 x 1e9/200e9 + 9e-6) = 0.007518.
    sizes = np.array([2, 4])
    got = all_reduce_seconds(np.array([1e9, 1e9]), sizes, group_link(HW, sizes, 1))
    assert got.tolist() == pytest.approx([0.005006, 0.007518])


# Tensor-parallel traffic of one layer -----------------------------------------------------------
def tiny() -> ModelSpec:
    return ModelSpec(name="tiny", num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256,
                     mlp_kind="standard", vocab_size=100, max_seq_len=256)


def test_tp_comm_of_one_layer():
    # tp = 2, b = 1, s = 32: each all-reduce moves b s h x 2 bytes = 4,096 bytes over NVLink (n = 2):
    # ring 2 x 1/2 x 4,096/200e9 + 2 x 3e-6 = 6.02048e-6; one-shot 3e-6 + 4,096/200e9 = 3.02048e-6, faster.
    # Two all-reduces forward and two backward (Shoeybi et al. 2019): 4 x 3.02048e-6 = 1.208192e-5.
    t = layer_time(tiny(), HW, Layout(tp=2, global_batch=1, seq_len=32).to_arrays(), moe_layer=False)
    assert float(t.tp_comm[0]) == pytest.approx(1.208192e-5)


def test_tp_comm_repeats_for_the_recomputed_forward_and_hides_with_overlap():
    # Full recompute runs the forward twice: 6 one-shot all-reduces = 6 x 3.02048e-6 = 1.812288e-5.
    hw = HW
    full = layer_time(tiny(), hw, Layout(tp=2, global_batch=1, seq_len=32, recompute="full").to_arrays(), moe_layer=False)
    assert float(full.tp_comm[0]) == pytest.approx(1.812288e-5)
    # With --tp-comm-overlap (and the sequence parallelism it needs) what stays exposed is the last chunk of the
    # two forward reduce-scatters (Transformer Engine's pipeline method, 4 chunks for megatron): a reduce-scatter
    # of 4,096 / 4 = 1,024 bytes among 2 ranks, 1/2 x 1,024 / 200e9 + 3e-6 = 3.00256e-6, twice: 6.00512e-6.
    over = layer_time(tiny(), hw, Layout(tp=2, global_batch=1, seq_len=32, overlap_tp_comm=True,
                                         sequence_parallel=True).to_arrays(), moe_layer=False)
    assert float(over.tp_comm[0]) == pytest.approx(6.00512e-6)
    # under full recompute the recomputed forward's reduce-scatters leave their last chunks too: twice that
    over_full = layer_time(tiny(), hw, Layout(tp=2, global_batch=1, seq_len=32, overlap_tp_comm=True,
                                              sequence_parallel=True, recompute="full").to_arrays(), moe_layer=False)
    assert float(over_full.tp_comm[0]) == pytest.approx(2 * 6.00512e-6)


def test_tp_overlap_needs_sp_an_nvlink_group_and_gemms_to_hide_behind():
    plain = float(layer_time(tiny(), HW, Layout(tp=2, global_batch=1, seq_len=32).to_arrays(), moe_layer=False).tp_comm[0])
    # Megatron-Core asserts --tp-comm-overlap needs --sequence-parallel: without it nothing is hidden
    no_sp = layer_time(tiny(), HW, Layout(tp=2, global_batch=1, seq_len=32, overlap_tp_comm=True).to_arrays(),
                       moe_layer=False)
    assert float(no_sp.tp_comm[0]) == pytest.approx(plain)
    # a TP group wider than the node's NVLink domain: userbuffers cannot map the peers, nothing is hidden
    narrow = HW.model_copy(update={"node": HW.node.model_copy(update={"gpus_per_node": 1})})
    lay = Layout(tp=2, global_batch=1, seq_len=32, overlap_tp_comm=True, sequence_parallel=True).to_arrays()
    wide = layer_time(tiny(), narrow, lay, moe_layer=False)
    flat = layer_time(tiny(), narrow, Layout(tp=2, global_batch=1, seq_len=32, sequence_parallel=True).to_arrays(),
                      moe_layer=False)
    assert float(wide.tp_comm[0]) == pytest.approx(float(flat.tp_comm[0]))
    # traffic longer than the GEMMs it runs beside: what they cannot cover stays exposed
    slow = HW.model_copy(update={"node": HW.node.model_copy(update={"bandwidth_bytes_per_s": 1e6})})
    covered = layer_time(tiny(), slow, lay, moe_layer=False)
    bare = layer_time(tiny(), slow, Layout(tp=2, global_batch=1, seq_len=32, sequence_parallel=True).to_arrays(),
                      moe_layer=False)
    traffic = float(bare.tp_comm[0])
    assert float(covered.tp_comm[0]) < traffic
    assert float(covered.tp_comm[0]) > float(layer_time(tiny(), HW, lay, moe_layer=False).tp_comm[0])


def test_no_tp_no_tp_comm():
    t = layer_time(tiny(), HW, Layout(tp=1, global_batch=1, seq_len=32).to_arrays(), moe_layer=False)
    assert float(t.tp_comm[0]) == 0.0


def test_an_engines_tp_overlap_hides_its_share_of_what_te_hides():
    """hidden = share x (traffic - TE's exposed part): share 0 hides nothing, share 1 is TE; torchtitan's async TP
    (copy-engine chunks) takes no SM margin from the row-parallel GEMMs."""
    from planner.specs.engine import engine_profile

    lay = Layout(tp=2, global_batch=1, seq_len=32, overlap_tp_comm=True, sequence_parallel=True).to_arrays()
    bare = Layout(tp=2, global_batch=1, seq_len=32, sequence_parallel=True).to_arrays()
    mega = engine_profile("megatron")

    def with_share(share: float):  # type: ignore[no-untyped-def]
        return mega.model_copy(update={"efficiency": mega.efficiency.model_copy(update={"tp_overlap_hidden_share": share})})

    traffic = float(layer_time(tiny(), HW, bare, moe_layer=False, engine=mega).tp_comm[0])
    te = float(layer_time(tiny(), HW, lay, moe_layer=False, engine=mega).tp_comm[0])
    none = float(layer_time(tiny(), HW, lay, moe_layer=False, engine=with_share(0.0)).tp_comm[0])
    half = float(layer_time(tiny(), HW, lay, moe_layer=False, engine=with_share(0.5)).tp_comm[0])
    assert none == pytest.approx(traffic) and te == pytest.approx(6.00512e-6)  # the last chunks (test above)
    assert half == pytest.approx(traffic - 0.5 * (traffic - te))
    titan = engine_profile("torchtitan")
    assert titan.efficiency.tp_overlap_sm_share == 0.0 and 0.0 < titan.efficiency.tp_overlap_hidden_share < 1.0
    # the SM margin: megatron's row-parallel forward GEMMs run 132/116 as long, torchtitan's do not
    f_mega = float(layer_time(tiny(), HW, lay, moe_layer=False, engine=mega).forward[0])
    f_bare = float(layer_time(tiny(), HW, bare, moe_layer=False, engine=mega).forward[0])
    f_titan = float(layer_time(tiny(), HW, lay, moe_layer=False, engine=titan).forward[0])
    f_titan_bare = float(layer_time(tiny(), HW, bare, moe_layer=False, engine=titan).forward[0])
    assert f_mega > f_bare
    # torchtitan pays only the split GEMMs' fixed cost: tp = 2 chunks of qkv, fc1 (all-gather side) and of the
    # attention output, fc2 (reduce-scatter side: torch decomposes per rank), one extra call each
    chunk = GEMM_FIXED_SECONDS / matmul_plateau(HW)
    assert f_titan - f_titan_bare == pytest.approx(4 * chunk)


def test_tp_overlap_pays_the_fixed_gemm_cost_once_per_chunk():
    """Transformer Engine's default userbuffer methods: qkv_fprop and fc1_fprop ring exchanges of tp chunks,
    proj_fprop and fc2_fprop pipelines of 4 splits; in backward proj_dgrad and fc2_dgrad ring exchanges of tp
    chunks. At tp 4 that is 2 x 3 + 2 x 3 = 12 further GEMM calls forward and 2 x 3 = 6 backward, beyond the SM
    margin of the row-parallel forward GEMMs."""
    from planner.specs.engine import engine_profile

    mega = engine_profile("megatron")
    no_margin = mega.model_copy(update={"efficiency": mega.efficiency.model_copy(update={"tp_overlap_sm_share": 0.0})})
    on = Layout(tp=4, global_batch=1, seq_len=64, overlap_tp_comm=True, sequence_parallel=True).to_arrays()
    off = Layout(tp=4, global_batch=1, seq_len=64, sequence_parallel=True).to_arrays()
    model = tiny()  # 4 heads, so tp 4 splits them
    with_overlap = layer_time(model, HW, on, moe_layer=False, engine=no_margin)
    without = layer_time(model, HW, off, moe_layer=False, engine=no_margin)
    chunk = GEMM_FIXED_SECONDS / matmul_plateau(HW)
    assert float(with_overlap.forward[0] - without.forward[0]) == pytest.approx(12 * chunk)
    assert float(with_overlap.backward[0] - without.backward[0]) == pytest.approx(6 * chunk)


def test_tp_overlap_chunks_of_a_moe_layer_and_of_a_recomputed_forward():
    """In a MoE layer without shared experts only the attention's pair is split (userbuffers are off for the routed
    experts, is_expert in TELinear; the model here has no shared expert): at tp 4 one ring exchange of 4
    chunks (qkv) and one pipeline of 4 splits (proj) forward, 3 + 3 further calls, and proj_dgrad's 3 in
    backward. Full recompute runs the forward again, chunks included."""
    from planner.specs.engine import engine_profile

    mega = engine_profile("megatron")
    no_margin = mega.model_copy(update={"efficiency": mega.efficiency.model_copy(update={"tp_overlap_sm_share": 0.0})})
    model = ModelSpec.model_validate({**tiny().model_dump(), "moe": {"num_experts": 4, "experts_per_token": 2,
                                                                     "moe_ffn_hidden_size": 64}})
    chunk = GEMM_FIXED_SECONDS / matmul_plateau(HW)
    base = dict(tp=4, global_batch=1, seq_len=64, sequence_parallel=True)
    on, off = (Layout(**base, overlap_tp_comm=flag).to_arrays() for flag in (True, False))
    with_overlap = layer_time(model, HW, on, moe_layer=True, engine=no_margin)
    without = layer_time(model, HW, off, moe_layer=True, engine=no_margin)
    assert float(with_overlap.forward[0] - without.forward[0]) == pytest.approx(6 * chunk)
    assert float(with_overlap.backward[0] - without.backward[0]) == pytest.approx(3 * chunk)
    full_on, full_off = (Layout(**base, overlap_tp_comm=flag, recompute="full").to_arrays() for flag in (True, False))
    dense_on = layer_time(tiny(), HW, full_on, moe_layer=False, engine=no_margin)
    dense_off = layer_time(tiny(), HW, full_off, moe_layer=False, engine=no_margin)
    assert float(dense_on.recompute[0] - dense_off.recompute[0]) == pytest.approx(12 * chunk)
    # with a shared expert (Megatron-Core's SharedExpertMLP: an MLP built with the fc1/fc2 userbuffer names) its
    # fc1 and fc2 split as the dense MLP's do: twice the attention's count
    shared = ModelSpec.model_validate({**tiny().model_dump(), "moe": {"num_experts": 4, "experts_per_token": 2,
                                                                      "moe_ffn_hidden_size": 64, "num_shared_experts": 1}})
    shared_on = layer_time(shared, HW, on, moe_layer=True, engine=no_margin)
    shared_off = layer_time(shared, HW, off, moe_layer=True, engine=no_margin)
    assert float(shared_on.forward[0] - shared_off.forward[0]) == pytest.approx(12 * chunk)
    assert float(shared_on.backward[0] - shared_off.backward[0]) == pytest.approx(6 * chunk)


def test_shared_expert_overlap_takes_the_shared_experts_off_the_userbuffers():
    """Under --moe-shared-expert-overlap Megatron-Core's SharedExpertMLP sets ub_overlap_ag/rs of its fc1 and fc2
    to False (megatron/core/transformer/moe/shared_experts.py @ d98e8a64): they are not split and take no SM
    margin, so only the attention's pair is (6 further calls forward and 3 backward at tp 4, as without shared
    experts), and with the margin on the overlapped layout runs the attention output projection only slower."""
    from planner.specs.engine import engine_profile

    mega = engine_profile("megatron")
    no_margin = mega.model_copy(update={"efficiency": mega.efficiency.model_copy(update={"tp_overlap_sm_share": 0.0})})
    shared = ModelSpec.model_validate({**tiny().model_dump(), "moe": {"num_experts": 4, "experts_per_token": 2,
                                                                      "moe_ffn_hidden_size": 64, "num_shared_experts": 1}})
    chunk = GEMM_FIXED_SECONDS / matmul_plateau(HW)
    base = dict(tp=4, global_batch=1, seq_len=64, sequence_parallel=True, moe_shared_expert_overlap=True)
    on, off = (Layout(**base, overlap_tp_comm=flag).to_arrays() for flag in (True, False))
    t_on, t_off = (layer_time(shared, HW, lay, moe_layer=True, engine=no_margin) for lay in (on, off))
    assert float(t_on.forward[0] - t_off.forward[0]) == pytest.approx(6 * chunk)
    assert float(t_on.backward[0] - t_off.backward[0]) == pytest.approx(3 * chunk)
    # the SM margin: with shared-expert overlap it falls on attn_out alone, without it on shared_down too
    margin = mega.model_copy(update={"efficiency": mega.efficiency.model_copy(update={"tp_overlap_sm_share": 0.5})})
    plain = dict(base, moe_shared_expert_overlap=False)
    p_on = Layout(**plain, overlap_tp_comm=True).to_arrays()
    extra_so = float(layer_time(shared, HW, on, moe_layer=True, engine=margin).forward[0]
                     - layer_time(shared, HW, on, moe_layer=True, engine=no_margin).forward[0])
    extra_plain = float(layer_time(shared, HW, p_on, moe_layer=True, engine=margin).forward[0]
                        - layer_time(shared, HW, p_on, moe_layer=True, engine=no_margin).forward[0])
    assert 0.0 < extra_so < extra_plain


def test_megatron_runs_no_tp_overlap_in_a_model_with_mla():
    """Megatron-Core's TELinear turns config.tp_comm_overlap off when a layer's userbuffer name is not qkv, proj,
    fc1 or fc2 (megatron/core/extensions/transformer_engine.py @ d98e8a64), which MLA's down/up projections are:
    with MLA the overlapped layout costs what the plain one does. torch's async TP fuses any projection."""
    from planner.specs.engine import engine_profile
    from planner.specs.model import MLASpec

    mla = tiny().model_copy(update={"mla": MLASpec(q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16,
                                                   qk_rope_head_dim=8, v_head_dim=16)})
    on = Layout(tp=2, global_batch=1, seq_len=32, overlap_tp_comm=True, sequence_parallel=True).to_arrays()
    off = Layout(tp=2, global_batch=1, seq_len=32, sequence_parallel=True).to_arrays()
    mega, titan = engine_profile("megatron"), engine_profile("torchtitan")
    assert mega.kernels.tp_overlap_with_mla is False and titan.kernels.tp_overlap_with_mla is True
    with_mla_on, with_mla_off = (layer_time(mla, HW, lay, moe_layer=False, engine=mega) for lay in (on, off))
    assert float(with_mla_on.tp_comm[0]) == pytest.approx(float(with_mla_off.tp_comm[0]))
    assert float(with_mla_on.forward[0]) == pytest.approx(float(with_mla_off.forward[0]))
    titan_on, titan_off = (layer_time(mla, HW, lay, moe_layer=False, engine=titan) for lay in (on, off))
    assert float(titan_on.tp_comm[0]) < float(titan_off.tp_comm[0])
    plain_on = layer_time(tiny(), HW, on, moe_layer=False, engine=mega)
    plain_off = layer_time(tiny(), HW, off, moe_layer=False, engine=mega)
    assert float(plain_on.tp_comm[0]) < float(plain_off.tp_comm[0])
