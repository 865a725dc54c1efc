"""Mixture-of-experts token dispatch as the dispatchers implement it: how many routed tokens each expert
receives, and what moving them costs on each tier.

Placement (Megatron-Core's expert rank order, ETP innermost, then EP, then expert data parallelism; torch
device meshes likewise keep EP ranks adjacent): the ep ranks of an expert-parallel group are etp ranks apart,
so an EP group of ep x etp <= G ranks stays inside one NVLink domain whatever tp, cp and dp are.

Token counts: a rank owns T / r distinct tokens of a micro-batch (T = b s / c tokens per rank, r = t with
sequence parallelism: Megatron-Core's dispatcher works on the sequence-parallel shard). Each token goes to k
of the E routed experts. With forced balancing (the benchmark recipes' moe_router_force_load_balancing) or
token drop padded to capacity every expert receives its balanced share times the capacity factor c (1 when
dropless: Megatron-Core pads nothing then).

Dispatchers (Megatron-Core --moe-token-dispatcher-type; the flex dispatcher's backends):
- alltoall: NCCL all-to-all over the EP group; every routed copy of a token travels to its expert's rank,
  the (k_n - 1)/n share over the node's fabric and the (n - k_n)/n share through the sender's own NIC
  (one copy per expert, no aggregation per node), both at once.
- allgather: every rank gathers the EP group's tokens (all-gather) and reduce-scatters the outputs.
- deepep / hybridep: one copy of a token per remote NVLink domain that holds at least one of its experts,
  over RDMA, then fanned out to the target GPUs over NVLink inside that domain (DeepSeek-V3 technical report,
  Sec. 3.2.2; deepseek-ai/DeepEP README "normal kernels"); HybridEP does the same with the NVL72 rack as the
  domain. The expected number of distinct remote domains per token is distinct_remote_domains().
- With expert tensor parallelism (etp > 1) the received tokens are all-gathered over the etp ranks that
  split each expert, and the outputs reduce-scattered (Megatron-Core MoEAlltoAllTokenDispatcher).
Every function broadcasts over numpy arrays.
"""

from __future__ import annotations

import numpy as np

from planner.physics.comm import Link, all_gather_seconds, group_link
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import DispatcherCode, LayoutArrays
from planner.specs.model import ModelSpec

DISPATCH_BYTES_PER_ELEMENT = 2.0
"""Dispatched and combined activations travel in bf16 (Megatron-Core's dispatchers permute the bf16 hidden
states; the fp8 quantization of the experts' inputs happens after dispatch, in the expert GEMMs)."""


NCCL_ALLTOALL_EFFICIENCY = 675.0 / 930.0
"""NCCL's all-to-all of the dispatch against a dispatch kernel on the same links: on GB200 NVL72 at EP 64
(DeepSeek-V3 shapes, hidden 7,168, 4,096 tokens, 256 experts) HybridEP dispatches in 675 us and NCCL's
all-to-all in 930 us (arXiv:2603.07685, Sec. 4, as quoted in Megatron-LM docs and its summaries; combine 744
vs 827 us): 0.73. The profiles' link efficiencies are those of the dispatch kernels (DeepEP's normal kernels
reach 153-158 of ~160 GB/s on H800 NVLink and 43-58 GB/s of RDMA on a 50 GB/s NIC, deepseek-ai/DeepEP
README @ 3b1045db). Taken for every chip, on the NVLink tier only; not fitted."""

NCCL_NIC_ALLTOALL_NOTE = (
    "NCCL's all-to-all between nodes runs at the NIC's rate: 'CX-7 NICs at NDR rate (400Gbps) should achieve up "
    "to 48-49GB/s per NIC' and an all-to-all 'cannot aggregate the bandwidth of multiple NICs' (NCCL maintainers, "
    "NVIDIA/nccl-tests issue #267), the same share of the NIC as the profiles' other collectives across nodes, so "
    "the remote tier takes the profile's inter-node efficiency with no further all-to-all factor."
)


def owned_tokens(lay: LayoutArrays) -> np.ndarray:
    """Distinct tokens of one micro-batch that one rank routes: b s / c, split over tp with sequence
    parallelism."""
    tokens = lay.micro_batch * lay.seq_len / lay.cp
    return np.asarray(tokens / np.where(lay.sequence_parallel, lay.tp, 1))


def capacity_factor(lay: LayoutArrays) -> np.ndarray:
    """Routed copies the busiest expert-parallel rank processes and receives relative to its balanced share: the
    capacity factor under token drop (every expert padded to capacity); dropless, the layout's load imbalance
    (Layout.moe_load_imbalance; 1 balanced), at most ep (a rank cannot receive more than every copy of its group)
    and none without expert parallelism (one rank holds every expert, whatever the routing). The all-to-all
    ends when its busiest receiver has its copies, and every rank waits for the busiest rank's experts at the next
    collective, so the step runs at that rank's pace."""
    dropless = np.where(lay.ep > 1, np.minimum(lay.moe_load_imbalance, lay.ep), 1.0)
    return np.asarray(np.where(lay.moe_capacity_factor > 0, lay.moe_capacity_factor, dropless))


def tokens_per_local_expert(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """Rows M of each local expert's GEMMs for one micro-batch: the ep x etp ranks of an expert group route
    ep x etp x T / t distinct tokens (a TP group holds T distinct tokens, T = b s / c), k copies each, spread
    over E experts; each of an expert's etp ranks sees all of its tokens."""
    assert model.moe is not None
    tokens = lay.micro_batch * lay.seq_len / lay.cp
    distinct = lay.ep * lay.etp * tokens / lay.tp
    return np.asarray(distinct * model.moe.experts_per_token / model.moe.num_experts * capacity_factor(lay))


def distinct_remote_domains(num_experts: int, top_k: int, domains: np.ndarray) -> np.ndarray:
    """Expected number of NVLink domains other than the sender's that hold at least one of a token's k experts,
    when the E experts are spread evenly over N domains and the k are k distinct experts drawn uniformly (the
    balanced routing the benchmarks force): (N - 1) x (1 - C(E - E/N, k) / C(E, k))."""
    n = np.maximum(np.asarray(domains, dtype=float), 1.0)
    per_domain = num_experts / n
    miss = np.ones_like(n)
    for i in range(top_k):  # C(E - E/N, k) / C(E, k) as a product of k ratios
        miss = miss * np.clip((num_experts - per_domain - i) / (num_experts - i), 0.0, 1.0)
    return np.asarray((n - 1) * (1 - miss))


def remote_domains(model: ModelSpec, domains: np.ndarray) -> np.ndarray:
    """distinct_remote_domains under the model's routing: with group-limited routing whose groups each sit
    inside one domain (router_groups a multiple of the domains), the token's router_group_topk groups decide the
    domains it reaches: distinct_remote_domains over groups instead of experts (each chosen group taken to get at
    least one of the k experts). The DeepSeek-V3 recipe (8 groups, 4 per token) over 8 nodes sends a token to
    at most 4 nodes, 3.5 of them remote on average (DeepSeek-V3 technical report, Sec. 2.1.2 and 4.2)."""
    assert model.moe is not None
    moe = model.moe
    free = distinct_remote_domains(moe.num_experts, moe.experts_per_token, domains)
    if not (moe.router_groups and moe.router_group_topk):
        return free
    # Whole groups per domain: the token's topk groups are drawn among the G groups as its experts would be.
    n = np.maximum(np.asarray(domains, dtype=float), 1.0)
    aligned = moe.router_groups % n == 0
    grouped = distinct_remote_domains(moe.router_groups, min(moe.router_group_topk, moe.experts_per_token), n)
    return np.asarray(np.where(aligned, np.minimum(free, grouped), free))


def ep_link(hw: HardwareProfile, lay: LayoutArrays) -> Link:
    """The EP group's placement: ep ranks, etp apart (see the module notes)."""
    return group_link(hw, lay.ep, lay.etp)


def dispatch_seconds(model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays) -> np.ndarray:
    """One dispatch (or one combine: the same bytes back) of one micro-batch on one rank, one pass, by the
    layout's dispatcher, including the expert-TP gather (or scatter); 0 without EP and ETP."""
    assert model.moe is not None
    k = model.moe.experts_per_token
    c = capacity_factor(lay)
    token_bytes = model.hidden_size * DISPATCH_BYTES_PER_ELEMENT
    own = owned_tokens(lay)
    copies_bytes = own * k * c * token_bytes  # every routed copy, padded to capacity
    link = ep_link(hw, lay)
    n = lay.ep.astype(float)
    local = link.members_per_node.astype(float)
    b_intra, b_inter = link.intra_bandwidth_bytes_per_s, link.inter_bandwidth_bytes_per_s
    crosses = link.nodes > 1
    lat_intra = np.where(local > 1, link.intra_latency_s, 0.0)
    lat_inter = np.where(crosses, link.inter_latency_s, 0.0)

    # NCCL all-to-all: both tiers at once, each at its own rate; over NVLink at NCCL_ALLTOALL_EFFICIENCY of what
    # the dispatch kernels reach on the same links, through the NICs at the NIC's collective rate (the profile's
    # inter-node efficiency: NCCL_NIC_ALLTOALL_NOTE).
    a2a = np.maximum(((local - 1) / n * copies_bytes / b_intra + lat_intra) / NCCL_ALLTOALL_EFFICIENCY,
                     (n - local) / n * copies_bytes / b_inter + lat_inter)
    # All-gather dispatcher: one all-gather of the tokens over the etp x ep ranks of the expert group (Megatron-Core
    # MoEAllGatherTokenDispatcher gathers over tp_ep_group; no separate expert-TP gather), reduce-scattered back.
    group = lay.ep * lay.etp
    gathered = all_gather_seconds(group * own * token_bytes, group, group_link(hw, group, 1))
    # DeepEP / HybridEP: one copy per remote domain over RDMA; every copy once over NVLink (fan-out inside
    # the destination domain, or straight to a peer of the sender's own domain).
    remote = remote_domains(model, link.nodes)
    rdma = own * c * token_bytes * remote / b_inter + lat_inter
    nvlink = (1 - 1 / n) * copies_bytes / b_intra + lat_intra
    two_tier = np.maximum(np.where(crosses, rdma, 0.0), nvlink)

    code = lay.moe_dispatcher
    by_dispatcher = np.where(
        code == DispatcherCode.ALLGATHER, gathered,
        np.where((code == DispatcherCode.DEEPEP) | (code == DispatcherCode.HYBRIDEP), two_tier, a2a),
    )
    allgather = code == DispatcherCode.ALLGATHER
    ep_part = np.where(allgather, np.where(group > 1, gathered, 0.0), np.where(lay.ep > 1, by_dispatcher, 0.0))
    # Expert TP (all-to-all and two-tier dispatchers): the tokens an expert's ranks received, gathered over the
    # etp ranks (the combine scatters).
    etp_link = group_link(hw, lay.etp, 1)
    etp_part = np.where((lay.etp > 1) & ~allgather, all_gather_seconds(lay.etp * copies_bytes, lay.etp, etp_link), 0.0)
    return np.asarray(ep_part + etp_part)


REGROUP_PASSES = 2
"""Read-and-write passes over the received copies that Megatron-Core's all-to-all dispatcher makes to regroup
them by local expert, each way: the all-to-all delivers a rank's tokens ordered by source rank, so with more
than one local expert dispatch_postprocess sorts them by expert (sort_chunks_by_idxs; the transpose-contiguous
of drop-and-pad) and combine_preprocess restores the order before the combine (NVIDIA/Megatron-LM
core_v0.15.0 and 0d8e0714 - the commit Megatron-Bridge v0.2.1 pins, whose recipes ran the 25.11 rows -
megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher). The backward regroups the
gradients the same way. The flex (DeepEP, HybridEP) and all-gather dispatchers permute once on the receiving
side, the pair that elementwise_bytes_per_token counts for every dispatcher."""


def routed_rows(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """Rows the rank's local experts process per micro-batch: E/ep experts of tokens_per_local_expert rows."""
    assert model.moe is not None
    return np.asarray(tokens_per_local_expert(model, lay) * model.moe.num_experts / lay.ep)


def regroup_bytes(model: ModelSpec, lay: LayoutArrays) -> np.ndarray:
    """HBM bytes of the all-to-all dispatcher's regrouping by local expert, one micro-batch, one pass (forward,
    or its gradient in the backward): REGROUP_PASSES read-and-writes of every received copy (16-bit); 0 for the
    other dispatchers and with one local expert."""
    assert model.moe is not None
    local = model.moe.num_experts / lay.ep
    moved = REGROUP_PASSES * routed_rows(model, lay) * model.hidden_size * 2 * DISPATCH_BYTES_PER_ELEMENT
    return np.asarray(np.where((lay.moe_dispatcher == DispatcherCode.ALLTOALL) & (local > 1), moved, 0.0))


EXPERT_BIAS_FORWARD_BYTES = 12.0
EXPERT_BIAS_BACKWARD_BYTES = 14.0
"""HBM bytes per element of the second expert projection's output that applying its bias costs, when the
routed experts have biases (gpt-oss): Megatron-Core's TEGroupedMLP adds fc2's bias outside the grouped GEMM,
one local expert at a time in Python - split the output by expert, t + b x p for each (the bias scaled by the
token's routing probability), then concatenate (TEGroupedMLP._apply_bias, NVIDIA/Megatron-LM core_v0.15.0
and 0d8e0714, megatron/core/transformer/moe/experts.py). Forward, 16-bit: b x p written (2), the add reads 2 + 2 and writes 2,
the concatenation reads and writes (2 + 2): 12. Backward: the gradients of b and p are reductions of
grad x p and grad x b, each materialized (read 2, write 2) and summed (read 2), plus the read of grad for the
sum over rows: about 14. Counted, not fitted; fc1's bias is fused into the activation kernel there
(weighted_bias_quick_geglu_impl / weighted_bias_swiglu_impl)."""


FUSED_EXPERT_BIAS_BACKWARD_BYTES = 2.0
"""The same under Transformer Engine's fused grouped MLP (Layout.moe_fused_mlp): fc2's GEMM adds the bias, scaled by
the routing probability, in its epilogue (nothing in the forward), and the backward's bias and probability
gradients come from one grouped kernel that reads fc2's output gradient once (transformer_engine/pytorch/triton/
grouped_dbias_dscales.py compute_grouped_dbias_dscales, called from ops/fused/grouped_mlp.py @ d0067d0): 2 bytes
per element, 16-bit. Counted, not fitted."""


def expert_bias_bytes(model: ModelSpec, lay: LayoutArrays) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) HBM bytes of the routed experts' second bias, one micro-batch; 0 without biases."""
    assert model.moe is not None
    elements = routed_rows(model, lay) * model.hidden_size * (1.0 if model.mlp_bias else 0.0)
    fused = lay.moe_fused_mlp
    return (np.asarray(np.where(fused, 0.0, EXPERT_BIAS_FORWARD_BYTES) * elements),
            np.asarray(np.where(fused, FUSED_EXPERT_BIAS_BACKWARD_BYTES, EXPERT_BIAS_BACKWARD_BYTES) * elements))
