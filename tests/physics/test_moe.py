"""Token dispatch (physics/moe.py) and the exposed expert traffic of a MoE layer (training/time.py), by hand.

Round hardware (tests/round_specs.py): 8 GPUs per node; node fabric 400 GB/s x 0.5 = 200 GB/s, 3 us;
network 50 GB/s x 0.8 = 40 GB/s per GPU, 10 us. Tiny MoE: h 64, 16 experts, top-2, expert width 32.
"""

from __future__ import annotations

import numpy as np
import pytest
from round_specs import round_hw, tiny

from planner.engines.load import load_hardware
from planner.physics.launch import (
    SMALL_KERNEL_SECONDS,
    bookkeeping_seconds,
    expert_quantize_launches,
    host_launch_seconds,
    host_syncs_every_layer,
    layer_host_seconds,
    layer_launches,
)
from planner.physics.moe import (
    NCCL_ALLTOALL_EFFICIENCY,
    dispatch_seconds,
    distinct_remote_domains,
    expert_bias_bytes,
    owned_tokens,
    regroup_bytes,
    remote_domains,
    tokens_per_local_expert,
)
from planner.specs.hardware import X86_HOST_SECONDS_PER_LAUNCH, HostLaunch
from planner.specs.layout import Layout
from planner.specs.model import MoESpec
from planner.training.memory import stage_params
from planner.training.time import (
    EP_OVERLAP_SM_SHARE,
    expert_comm_seconds,
    layer_time,
    one_f_one_b_pair_seconds,
    stage_time,
)

HW = round_hw()
MOE = tiny(moe=MoESpec(num_experts=16, experts_per_token=2, moe_ffn_hidden_size=32))


def arrays(**fields):
    fields.setdefault("global_batch", fields.get("dp", 1) * fields.get("micro_batch", 1))
    fields.setdefault("seq_len", 8192)
    return Layout(**fields).to_arrays()


# A layer of 1 s forward and 2 s backward whose routed experts take half of each (their data and weight
# gradients alike): every compute phase of the 1F1B pair is far longer than the tiny model's transfers.
SPLIT = dict(forward=np.array(1.0), backward=np.array(2.0), expert_forward=np.array(0.5),
             expert_dgrad=np.array(0.5), expert_wgrad=np.array(0.5))


def one(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def test_remote_domains_by_hand():
    # 16 experts over 2 domains of 8: a token misses the other domain with C(8,2)/C(16,2) = 28/120.
    assert one(distinct_remote_domains(16, 2, np.array([2]))) == pytest.approx(1 - 28 / 120)
    assert one(distinct_remote_domains(16, 2, np.array([1]))) == 0.0
    # One expert per domain: (N - 1) x k / E of the domains are hit, k (N - 1) / N copies leave the domain.
    assert one(distinct_remote_domains(16, 2, np.array([16]))) == pytest.approx(15 * 2 / 16)


@pytest.mark.parametrize("domains", [2, 4, 8, 16])
def test_remote_domains_never_exceed_the_copies_all_to_all_sends(domains):
    # NCCL all-to-all sends k (N - 1)/N copies off the domain; one copy per domain can only be fewer.
    remote = one(distinct_remote_domains(16, 2, np.array([domains])))
    assert 0 < remote <= 2 * (domains - 1) / domains + 1e-12


def test_tokens_per_local_expert_with_parallel_folding():
    # tp 2 (SP), dp 8, ep 16, etp 1: the 16 ranks of the stage form one EP group. Each TP pair holds 8,192
    # distinct tokens, 8 pairs -> 65,536 tokens x 2 copies over 16 experts = 8,192 rows per expert.
    lay = arrays(tp=2, dp=8, ep=16, etp=1, sequence_parallel=True)
    assert one(owned_tokens(lay)) == 4096
    assert one(tokens_per_local_expert(MOE, lay)) == 8192
    # etp = tp (Megatron's default): ep 8 ranks, each expert split over the 2 TP ranks: 8 x 2 x 4,096 x 2 / 16.
    assert one(tokens_per_local_expert(MOE, arrays(tp=2, dp=8, ep=8, sequence_parallel=True))) == 8192
    # Token drop padded to capacity 1.5: every expert processes 1.5x its balanced share.
    dropped = arrays(tp=2, dp=8, ep=16, etp=1, sequence_parallel=True, moe_capacity_factor=1.5)
    assert one(tokens_per_local_expert(MOE, dropped)) == 1.5 * 8192


def test_the_busiest_rank_sets_the_pace_of_dropless_routing():
    # moe_load_imbalance 1.25: the busiest of the 16 EP ranks receives 1.25x the balanced 8,192 rows per expert,
    # and its all-to-all receives 1.25x the balanced bytes (the exchange ends with its last copy).
    balanced = arrays(tp=2, dp=8, ep=16, etp=1, sequence_parallel=True)
    skewed = arrays(tp=2, dp=8, ep=16, etp=1, sequence_parallel=True, moe_load_imbalance=1.25)
    assert one(tokens_per_local_expert(MOE, skewed)) == 1.25 * 8192
    s = 8192 * 2 * 64 * 2
    expected = max((7 / 16 * 1.25 * s / 200e9 + 3e-6) / NCCL_ALLTOALL_EFFICIENCY, 0.5 * 1.25 * s / 40e9 + 10e-6)
    assert one(dispatch_seconds(MOE, HW, arrays(dp=16, ep=16, moe_load_imbalance=1.25))) == pytest.approx(expected)
    assert one(regroup_bytes(MOE, skewed)) == pytest.approx(1.25 * one(regroup_bytes(MOE, balanced)))
    # a rank cannot receive more than every copy of its group: at most ep; and without expert parallelism one rank
    # runs every expert, so the routing's skew changes nothing
    assert one(tokens_per_local_expert(MOE, arrays(dp=2, ep=2, moe_load_imbalance=3.0))) == pytest.approx(
        2 * one(tokens_per_local_expert(MOE, arrays(dp=2, ep=2))))
    assert one(tokens_per_local_expert(MOE, arrays(dp=2, moe_load_imbalance=3.0))) == one(
        tokens_per_local_expert(MOE, arrays(dp=2)))


def test_a_load_imbalance_with_token_drop_is_refused():
    # padded to capacity, every expert runs its capacity whatever the routing: the two settings exclude each other
    with pytest.raises(ValueError, match="moe_load_imbalance"):
        Layout(dp=16, ep=16, global_batch=16, seq_len=8192, moe_capacity_factor=1.5, moe_load_imbalance=1.2)


def test_all_to_all_runs_both_tiers_at_once():
    # ep 16 over 2 nodes: each rank sends 8,192 tokens x 2 copies x 64 x 2 B = 2,097,152 B; 7/16 of it over the
    # fabric (at NCCL's all-to-all share of the kernels' rate), 8/16 through its NIC at the NIC's collective rate:
    # max((7/16 x S / 200e9 + 3 us) / 0.726, 1/2 x S / 40e9 + 10 us).
    s = 8192 * 2 * 64 * 2
    lay = arrays(dp=16, ep=16)
    expected = max((7 / 16 * s / 200e9 + 3e-6) / NCCL_ALLTOALL_EFFICIENCY, 0.5 * s / 40e9 + 10e-6)
    assert one(dispatch_seconds(MOE, HW, lay)) == pytest.approx(expected)


def test_ep_64_leaves_a_dgx_b200_node_but_not_an_nvl72_rack():
    # gpt-oss-120b's shapes (h 2,880, 128 experts, top-4), 4 x 4,096 tokens per rank, ep 64 x etp 1 at tp 1: the
    # 25.11 Megatron-Bridge B200 recipe. Each rank routes S = 16,384 x 4 x 2,880 x 2 B. On DGX B200 (8 GPUs per node)
    # the group spans 8 nodes, 8 members each: 56/64 of S leaves through the GPU's own NIC at 50 GB/s x 0.85, 7/64
    # crosses NVLink at 900 GB/s x 0.8 (at NCCL's all-to-all share). In the NVL72 rack all 63/64 stay on NVLink.
    gpt_oss = tiny(hidden_size=2880, num_attention_heads=64, moe=MoESpec(num_experts=128, experts_per_token=4,
                                                                           moe_ffn_hidden_size=2880))
    lay = arrays(dp=64, ep=64, micro_batch=4, seq_len=4096)
    s = 16384 * 4 * 2880 * 2
    b200 = max((7 / 64 * s / 720e9 + 3.4e-6) / NCCL_ALLTOALL_EFFICIENCY, 56 / 64 * s / 42.5e9 + 10e-6)
    nvl72 = (63 / 64 * s / 720e9 + 3.4e-6) / NCCL_ALLTOALL_EFFICIENCY
    assert one(dispatch_seconds(gpt_oss, load_hardware("b200").spec, lay)) == pytest.approx(b200)
    assert one(dispatch_seconds(gpt_oss, load_hardware("gb200-nvl72").spec, lay)) == pytest.approx(nvl72)
    assert b200 == pytest.approx(7.78e-3, rel=1e-3)  # 7.8 ms a transfer through the NIC against 0.71 ms on NVLink
    # ep 8 keeps the group inside one B200 node: 7/8 of S on NVLink.
    ep8 = arrays(dp=64, ep=8, micro_batch=4, seq_len=4096)
    inside = (7 / 8 * s / 720e9 + 3.4e-6) / NCCL_ALLTOALL_EFFICIENCY
    assert one(dispatch_seconds(gpt_oss, load_hardware("b200").spec, ep8)) == pytest.approx(inside)


def test_deepep_sends_one_copy_per_remote_node():
    # One copy per remote node over RDMA (0.7667 of the 8,192 tokens' 128 B), every copy once over NVLink.
    lay = arrays(dp=16, ep=16, moe_dispatcher="deepep")
    s = 8192 * 2 * 64 * 2
    rdma = 8192 * 128 * (1 - 28 / 120) / 40e9 + 10e-6
    nvlink = 15 / 16 * s / 200e9 + 3e-6
    assert one(dispatch_seconds(MOE, HW, lay)) == pytest.approx(max(rdma, nvlink))
    assert one(dispatch_seconds(MOE, HW, lay)) < one(dispatch_seconds(MOE, HW, arrays(dp=16, ep=16)))


def test_ep_group_is_kept_adjacent():
    # Parallel folding with tp 2: the EP group of 4 ranks, 1 apart, stays in the node; the strided placement
    # (tp x cp apart) would have been the same here, but an ep 8 x etp 1 group at tp 2 fills exactly one node.
    inside = arrays(tp=2, dp=4, ep=8, etp=1, sequence_parallel=True)
    s = 8192 / 2 * 2 * 64 * 2
    assert one(dispatch_seconds(MOE, HW, inside)) == pytest.approx((7 / 8 * s / 200e9 + 3e-6) / NCCL_ALLTOALL_EFFICIENCY)


def test_expert_tp_adds_a_gather_over_the_etp_ranks():
    # ep 4 both ways: 4 ranks 1 apart, or 2 apart (etp 2) - one node either way, the same all-to-all.
    no_etp = arrays(tp=2, dp=8, ep=4, etp=1, sequence_parallel=True)
    etp = arrays(tp=2, dp=8, ep=4, etp=2, sequence_parallel=True)
    s = 4096 * 2 * 64 * 2  # the rank's routed copies
    gather = 1 / 2 * 2 * s / 200e9 + 3e-6  # all-gather of 2 x S inside the node: (k-1)/k x 2S / B + alpha
    assert one(dispatch_seconds(MOE, HW, etp)) == pytest.approx(one(dispatch_seconds(MOE, HW, no_etp)) + gather)


def test_no_overlap_exposes_four_transfers_per_micro_batch():
    lay = arrays(dp=16, ep=16)
    one_way = one(dispatch_seconds(MOE, HW, lay))
    got, forward_part = expert_comm_seconds(MOE, HW, lay, **SPLIT,
                                            shared_forward=np.array(0.0))
    assert one(got) == pytest.approx(4 * one_way)
    assert one(forward_part) == pytest.approx(2 * one_way)  # dispatch + combine of the forward pass


def test_no_overlap_with_delayed_weight_gradients_hides_the_dispatch_gradient_behind_them():
    # Megatron-Core's --overlap-dispatch-backward-with-experts-wgrad: the experts' weight gradients (0.5 s) run on a
    # side stream beside the dispatch's backward all-to-all (a few microseconds here), which costs only the SM share
    # its kernels hold; the combine's gradient and the forward's two transfers stay exposed.
    lay = arrays(dp=16, ep=16, moe_delay_wgrad=True)
    a = one(dispatch_seconds(MOE, HW, lay))
    got, forward_part = expert_comm_seconds(MOE, HW, lay, **SPLIT, shared_forward=np.array(0.0))
    assert one(got) == pytest.approx(3 * a + EP_OVERLAP_SM_SHARE * a)
    assert one(forward_part) == pytest.approx(2 * a)
    # weight gradients shorter than the transfer: what they do not cover stays
    short = dict(SPLIT, expert_wgrad=np.array(a / 4))
    got, _ = expert_comm_seconds(MOE, HW, lay, **short, shared_forward=np.array(0.0))
    assert one(got) == pytest.approx(4 * a - (1 - EP_OVERLAP_SM_SHARE) * a / 4)


def test_batch_level_overlap_hides_behind_the_other_micro_batch():
    # 64 micro-batches, pp 1: 1/64 of them have no partner. Compute 1 s + 2 s is longer than the traffic, so the
    # paired ones cost only the SM share of their traffic. The unpaired backward (delayed weight gradients, as the
    # overlap runs by default) still hides its dispatch gradient behind the experts' weight gradients.
    lay = arrays(dp=16, ep=16, moe_ep_overlap=True, global_batch=16 * 64)
    a = one(dispatch_seconds(MOE, HW, lay))
    got, _ = expert_comm_seconds(MOE, HW, lay, **SPLIT,
                                 shared_forward=np.array(0.0))
    unpaired = 1 / 64
    alone = 3 * a + EP_OVERLAP_SM_SHARE * a
    assert one(got) == pytest.approx(unpaired * alone + (1 - unpaired) * EP_OVERLAP_SM_SHARE * 4 * a)
    # without --delay-wgrad-compute the unpaired backward runs its four transfers in series
    lay = arrays(dp=16, ep=16, moe_ep_overlap=True, moe_delay_wgrad=False, global_batch=16 * 64)
    got, _ = expert_comm_seconds(MOE, HW, lay, **SPLIT, shared_forward=np.array(0.0))
    assert one(got) == pytest.approx(unpaired * 4 * a + (1 - unpaired) * EP_OVERLAP_SM_SHARE * 4 * a)


def test_the_interleaved_warm_up_leaves_more_chunks_without_a_partner():
    # pp 4, 16 micro-batches. 1F1B: the first stage's 3 warm-up forwards (and 3 cool-down backwards) of 16 have
    # no partner. Interleaved with v 2: Megatron-Core warms up 2(p - 1) + (v - 1)p = 10 chunk-micro-batches of
    # the 32, so 10/32 of the traffic stays exposed.
    for interleave, unpaired in ((1, 3 / 16), (2, 10 / 32)):
        lay = arrays(dp=4, ep=4, pp=4, interleave=interleave, moe_ep_overlap=True, global_batch=4 * 16)
        a = one(dispatch_seconds(MOE, HW, lay))
        got, _ = expert_comm_seconds(MOE, HW, lay, **SPLIT, shared_forward=np.array(0.0))
        alone = 3 * a + EP_OVERLAP_SM_SHARE * a  # the dispatch gradient beside the weight gradients
        assert one(got) == pytest.approx(unpaired * alone + (1 - unpaired) * EP_OVERLAP_SM_SHARE * 4 * a)


def test_a_fully_recomputed_forward_keeps_its_all_to_alls_exposed_under_the_overlap():
    # Megatron-Core replays a fully recomputed forward alone before the backward: its dispatch and combine (2 of the
    # 6 transfers) have no partner, the first forward's and the backward's 4 pair as without recompute.
    lay = arrays(dp=16, ep=16, moe_ep_overlap=True, global_batch=16 * 64, recompute="full")
    one_way = one(dispatch_seconds(MOE, HW, lay))
    got, _ = expert_comm_seconds(MOE, HW, lay, **SPLIT,
                                 shared_forward=np.array(0.0))
    paired = 4 * one_way
    unpaired = 1 / 64
    alone = 3 * one_way + EP_OVERLAP_SM_SHARE * one_way  # the dispatch gradient beside the weight gradients
    assert one(got) == pytest.approx(2 * one_way + unpaired * alone + (1 - unpaired) * EP_OVERLAP_SM_SHARE * paired)
    plain, _ = expert_comm_seconds(MOE, HW, arrays(dp=16, ep=16, global_batch=16 * 64, recompute="full"),
                                   **SPLIT, shared_forward=np.array(0.0))
    assert one(plain) == pytest.approx(6 * one_way) and one(got) < one(plain)


def test_the_1f1b_pair_runs_each_transfer_beside_its_own_compute_phase():
    # Megatron-Core's order (model_chunk_schedule_plan.py @ d98e8a64): combine bwd | pre-dispatch fwd, then dispatch
    # fwd -> dispatch bwd | experts dgrad -> wgrad -> fwd, then combine fwd | pre-dispatch bwd.
    phases = dict(pre_forward=np.array(1.0), expert_forward=np.array(2.0), expert_dgrad=np.array(2.0),
                  expert_wgrad=np.array(1.0), pre_backward=np.array(2.0))
    silent = dict(dispatch_forward=np.array(0.0), combine_forward=np.array(0.0), dispatch_backward=np.array(0.0),
                  combine_backward=np.array(0.0))
    assert one(one_f_one_b_pair_seconds(**phases, **silent)) == pytest.approx(8.0)  # the compute alone
    # A 3 s combine gradient beside a 1 s attention forward: the experts' backward waits for it, 2 s, although
    # they and the expert forward (5 s) would have covered it. The other transfers (1 s each) fit their phases:
    # 3 + (max(2 + 1, 1) + 2) + max(1, 2) = 10.
    comm = dict(dispatch_forward=np.array(1.0), combine_forward=np.array(1.0), dispatch_backward=np.array(1.0),
                combine_backward=np.array(3.0))
    assert one(one_f_one_b_pair_seconds(**phases, **comm)) == pytest.approx(10.0)
    # A 6 s dispatch forward outlasts the experts' backward (3 s): the expert forward, which needs its tokens,
    # starts 3 s late; the dispatch gradient queues behind the dispatch on the one communication stream:
    # 1 + max(max(2 + 1, 6) + 2, max(2, 6) + 1) + max(1, 2) = 11.
    late = dict(comm, dispatch_forward=np.array(6.0), combine_backward=np.array(0.0))
    assert one(one_f_one_b_pair_seconds(**phases, **late)) == pytest.approx(11.0)
    # No compute: the four transfers one after another.
    idle = {k: np.array(0.0) for k in phases}
    assert one(one_f_one_b_pair_seconds(**idle, **comm)) == pytest.approx(6.0)
    # A 4 s dispatch gradient: with --delay-wgrad-compute it starts after the experts' data gradients (2 s), without
    # it after their weight gradients too (mlp.backward runs both): 1 + max(max(3, 1) + 2, max(2, 1) + 4) + 2 = 9
    # against 1 + max(5, max(3, 1) + 4) + 2 = 10.
    long_grad = dict(dispatch_forward=np.array(1.0), combine_forward=np.array(1.0), dispatch_backward=np.array(4.0),
                     combine_backward=np.array(0.0))
    assert one(one_f_one_b_pair_seconds(**phases, **long_grad)) == pytest.approx(9.0)
    assert one(one_f_one_b_pair_seconds(**phases, **long_grad, delay_wgrad=False)) == pytest.approx(10.0)


def test_a_transfer_longer_than_its_partner_phase_stays_exposed_under_the_overlap():
    # The whole forward is the routed experts' (no attention before the dispatch): the backward's combine has
    # nothing beside it and stays exposed, whatever the rest of the layer could cover; the other three transfers
    # hide behind their phases at the SM share.
    lay = arrays(dp=16, ep=16, moe_ep_overlap=True, global_batch=16 * 64)
    a = one(dispatch_seconds(MOE, HW, lay))
    got, _ = expert_comm_seconds(MOE, HW, lay, forward=np.array(0.5), backward=np.array(2.0),
                                 expert_forward=np.array(0.5), expert_dgrad=np.array(0.5),
                                 expert_wgrad=np.array(0.5), shared_forward=np.array(0.0))
    unpaired = 1 / 64
    paired = a + EP_OVERLAP_SM_SHARE * 3 * a
    alone = 3 * a + EP_OVERLAP_SM_SHARE * a  # the unpaired backward's dispatch gradient beside the weight gradients
    assert one(got) == pytest.approx(unpaired * alone + (1 - unpaired) * paired)
    hidden, _ = expert_comm_seconds(MOE, HW, lay, **SPLIT, shared_forward=np.array(0.0))
    assert one(hidden) < one(got)


def test_shared_expert_overlap_hides_up_to_the_shared_experts_time():
    lay = arrays(dp=16, ep=16, moe_shared_expert_overlap=True)
    one_way = one(dispatch_seconds(MOE, HW, lay))
    shared = 0.5 * one_way  # forward shared GEMMs: half a transfer; backward twice that
    got, _ = expert_comm_seconds(MOE, HW, lay, **SPLIT,
                                 shared_forward=np.array(shared))
    assert one(got) == pytest.approx(4 * one_way - shared - 2 * shared)


def test_group_limited_routing_caps_the_remote_nodes():
    # DeepSeek-V3's recipe: 256 experts in 8 groups, 4 groups per token, EP over 8 nodes (one group per node):
    # 7 x (1 - C(7,4)/C(8,4)) = 3.5 remote nodes, not the 7 x (1 - C(224,8)/C(256,8)) = 4.6 of free top-8.
    free = MoESpec(num_experts=256, experts_per_token=8, moe_ffn_hidden_size=32)
    limited = free.model_copy(update={"router_groups": 8, "router_group_topk": 4})
    nodes = np.array([8])
    assert one(remote_domains(tiny(moe=limited), nodes)) == pytest.approx(3.5)
    assert one(remote_domains(tiny(moe=free), nodes)) == pytest.approx(one(distinct_remote_domains(256, 8, nodes)))
    assert one(distinct_remote_domains(256, 8, nodes)) == pytest.approx(4.6, abs=0.05)


def test_all_to_all_regroups_every_received_copy_twice_each_way():
    # dp 8, ep 8: 2 local experts. Each rank owns 8,192 tokens x top-2 = 16,384 copies; balanced, it receives as
    # many. Two read+writes of 64 x 2 bytes each: 2 x 16,384 x 64 x 4 = 8,388,608 bytes.
    lay = arrays(dp=8, ep=8)
    assert one(regroup_bytes(MOE, lay)) == pytest.approx(2 * 16384 * 64 * 4)


def test_other_dispatchers_and_a_single_local_expert_do_not_regroup():
    assert one(regroup_bytes(MOE, arrays(dp=8, ep=8, moe_dispatcher="deepep"))) == 0.0
    assert one(regroup_bytes(MOE, arrays(dp=16, ep=16))) == 0.0  # 16 experts over 16 ranks: one each


def test_expert_bias_costs_traffic_only_with_biased_experts():
    # The same 16,384 received copies, fc2's output 64 wide: 12 bytes forward and 14 backward per element.
    biased = tiny(mlp_bias=True, moe=MoESpec(num_experts=16, experts_per_token=2, moe_ffn_hidden_size=32))
    fwd, bwd = expert_bias_bytes(biased, arrays(dp=8, ep=8))
    assert (one(fwd), one(bwd)) == pytest.approx((12 * 16384 * 64, 14 * 16384 * 64))
    assert one(expert_bias_bytes(MOE, arrays(dp=8, ep=8))[0]) == 0.0


def test_grace_host_issues_kernels_slower_than_an_x86_one():
    # The same layer on a profile with a Grace host_launch: host time scales with the per-op CPU cost.
    base = round_hw()
    efficiency = base.efficiency.model_copy(update={"host_launch": HostLaunch(seconds=37e-6, note="test")})
    grace = base.model_copy(update={"efficiency": efficiency})
    lay = arrays(dp=8, ep=8)
    passes = np.asarray(1.0)
    x86 = one(layer_host_seconds(MOE, round_hw(), lay, moe_layer=True, passes=passes))
    arm = one(layer_host_seconds(MOE, grace, lay, moe_layer=True, passes=passes))
    assert host_launch_seconds(round_hw()) == X86_HOST_SECONDS_PER_LAUNCH
    assert arm / x86 == pytest.approx(37e-6 / X86_HOST_SECONDS_PER_LAUNCH)


def test_fp8_experts_quantize_each_expert_input_with_its_own_kernel():
    # 16 experts over ep 8: 2 local experts x 2 GEMM inputs = 4 quantization kernels forward, none in bf16;
    # each costs the small-kernel latency forward and twice backward.
    fp8, bf16 = arrays(dp=8, ep=8, dtype="fp8"), arrays(dp=8, ep=8)
    assert one(expert_quantize_launches(MOE, fp8)) == 4.0
    assert one(expert_quantize_launches(MOE, bf16)) == 0.0
    extra = one(bookkeeping_seconds(MOE, fp8, moe_layer=True)) - one(bookkeeping_seconds(MOE, bf16, moe_layer=True))
    assert extra == pytest.approx(3 * 4 * SMALL_KERNEL_SECONDS)


def test_layer_launches_split_at_the_dispatcher_sync_by_hand():
    # Before the sync: attention 12, router 72, preprocessing 8 = 92; after it: the rest of the dispatch
    # (24 - 8 = 16) and the experts, 2 GEMMs for each of the 16 / 8 = 2 local experts plus the activation
    # (5) = 21. A dense layer: attention 12 + MLP 8, all before. Graphing the router and the preprocessing
    # moves nothing across the sync: it removes 80 launches from the first segment.
    before, after = layer_launches(MOE, arrays(dp=8, ep=8), moe_layer=True)
    assert (one(before), one(after)) == (92.0, 21.0)
    dense_before, dense_after = layer_launches(MOE, arrays(dp=8, ep=8), moe_layer=False)
    assert (one(dense_before), one(dense_after)) == (20.0, 0.0)
    graphed = arrays(dp=8, ep=8, cuda_graph_scope=["moe_router", "moe_preprocess"])
    g_before, g_after = layer_launches(MOE, graphed, moe_layer=True)
    assert (one(g_before), one(g_after)) == (12.0, 21.0)
    # layer_host_seconds is the same count over forward, backward (x 2) and a recomputed forward
    total = one(layer_host_seconds(MOE, HW, arrays(dp=8, ep=8), moe_layer=True, passes=np.asarray(2.0)))
    assert total == pytest.approx((2 + 2) * 113 * X86_HOST_SECONDS_PER_LAUNCH)


def test_qk_norms_add_two_launches_to_the_attention_block():
    # Megatron-Core's q_layernorm and k_layernorm are a kernel each: a dense layer issues 12 + 2 + 8 = 22
    # forward launches instead of 20, a MoE layer 94 before its dispatcher's sync instead of 92.
    qwen_like = MOE.model_copy(update={"qk_norm": True})
    assert one(layer_launches(qwen_like, arrays(dp=8, ep=8), moe_layer=False)[0]) == 22.0
    assert one(layer_launches(qwen_like, arrays(dp=8, ep=8), moe_layer=True)[0]) == 94.0


def _host_wait(lay) -> float:
    stage = np.array([0])
    return one(stage_time(MOE, HW, lay, stage, stage_params(MOE, lay, stage)).host)


def test_a_host_sync_in_every_moe_layer_keeps_the_host_from_running_ahead():
    # A host at 1 ms per launch (74 times the round one's) makes every segment host-bound: then the synced stage
    # waits all of the host time less all of the device time, for no segment has device work left to hide it.
    slow = round_hw().efficiency.model_copy(update={"host_launch": HostLaunch(seconds=1e-3, note="test")})
    hw_slow = round_hw().model_copy(update={"efficiency": slow})
    stage = np.array([0])
    dropless, padded = arrays(dp=8, ep=8), arrays(dp=8, ep=8, moe_capacity_factor=1.0)
    assert bool(host_syncs_every_layer(dropless)[0]) and not bool(host_syncs_every_layer(padded)[0])

    def wait(hw, lay) -> float:
        t = stage_time(MOE, hw, lay, stage, stage_params(MOE, lay, stage))
        return one(t.host), one(t.forward + t.backward + t.tp_comm + t.ep_comm)

    synced, device = wait(hw_slow, dropless)
    layers = MOE.num_layers
    host_total = layers * (1 + 2) * 113 * 1e-3
    assert synced == pytest.approx(host_total - device, rel=1e-3)
    # On the round host the synced stage never waits less than the unsynced one of the same work, and it
    # waits at least the post-sync segment's excess once per layer forward (h_b - d_b with d_b < h_b).
    layer = layer_time(MOE, HW, dropless, moe_layer=True)
    h_b = 21 * X86_HOST_SECONDS_PER_LAUNCH
    d_b = one(layer.after_sync_forward + layer.after_sync_comm)
    assert d_b < h_b
    assert _host_wait(dropless) >= layers * (h_b - d_b) - 1e-12
    assert _host_wait(dropless) >= _host_wait(padded) * (1 - 1e-12)  # equal work: equal up to rounding
