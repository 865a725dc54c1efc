"""Alpha-beta costs of collectives on the two tiers a group can span: the node's fabric and the network.

Placement convention (Megatron-LM's rank order, documented in docs/cost-model.md):
ranks are numbered TP fastest, then CP, then DP and PP outward. A group of
`size` ranks whose members are `stride` ranks apart stays inside one node when
size x stride <= gpus_per_node; otherwise it spans N nodes with k members in
each, and collectives run hierarchically: the node's fabric for the k local
members, each GPU's own share of the NICs for the traffic between nodes.

Cost of one collective (Thakur, Rabenseifner & Gropp 2005; the NCCL performance
notes' "bus bandwidth" convention): time = steps x alpha + bytes_on_the_wire / (B x eff),
with B the per-GPU one-direction bandwidth of the tier and eff the profile's
achievable fraction of it. All functions take scalars or numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.specs.hardware import HardwareProfile

ArrayLike = np.ndarray | float | int


# Largest message sent by the one-shot all-reduce inside a node. Engines switch from it to ring or
# two-shot algorithms once bandwidth, not latency, dominates; NCCL's low-latency (LL) protocol is
# likewise used for small messages only. 256 KiB is taken as the switch point (an assumption of this
# order, not a measured threshold); decode all-reduces (batch x hidden x 2 bytes) sit below it.
ONE_SHOT_MAX_BYTES = 256 * 2**10


@dataclass(frozen=True)
class Link:
    """Where a group's members sit and what each tier gives one GPU (bandwidth already x efficiency).

    members_per_node (k) ranks share a node; the group spans `nodes` (N) nodes. N = 1 means the group
    never leaves the node.
    """

    members_per_node: np.ndarray
    nodes: np.ndarray
    intra_bandwidth_bytes_per_s: float
    intra_latency_s: float
    inter_bandwidth_bytes_per_s: float
    inter_latency_s: float


def group_link(hw: HardwareProfile, size: ArrayLike, stride: ArrayLike) -> Link:
    """The placement of a group of `size` ranks spaced `stride` apart (TP innermost: see module doc)."""
    size = np.asarray(size)
    stride = np.maximum(np.asarray(stride), 1)
    per_node = hw.node.gpus_per_node
    inside = size * stride <= per_node
    k = np.where(inside, size, np.clip(per_node // stride, 1, np.maximum(size, 1)))
    eff = hw.efficiency
    return Link(
        members_per_node=k,
        nodes=np.maximum(-(-size // k), 1),
        intra_bandwidth_bytes_per_s=hw.node.bandwidth_bytes_per_s * eff.intra_node_link.fraction,
        intra_latency_s=hw.node.latency_s,
        inter_bandwidth_bytes_per_s=hw.inter_node_bandwidth_bytes_per_s * eff.inter_node_link.fraction,
        inter_latency_s=hw.inter_node_latency_s,
    )


def _intra_ring_pass(nbytes: np.ndarray, link: Link) -> np.ndarray:
    """One ring pass (reduce-scatter or all-gather) among the k members of a node: (k-1)/k S / B + (k-1) alpha."""
    k = link.members_per_node.astype(float)
    return np.asarray((k - 1) / k * nbytes / link.intra_bandwidth_bytes_per_s + (k - 1) * link.intra_latency_s)


def all_reduce_seconds(nbytes: ArrayLike, size: ArrayLike, link: Link) -> np.ndarray:
    """All-reduce of `nbytes` on every rank (nothing to send costs nothing: no collective is issued).

    Inside a node: the faster of a ring, 2(k-1)/k x S / B + 2(k-1) alpha (Thakur et al. 2005), and a
    one-shot all-reduce, alpha + (k-1) S / B, in which every rank reads its k - 1 peers' buffers over the
    node's switched fabric at once and reduces locally (TensorRT-LLM's custom all-reduce, NCCL's
    low-latency protocols), for messages up to ONE_SHOT_MAX_BYTES: latency-bound small messages, as in
    decoding, take that path. Across N nodes:
    hierarchical - reduce-scatter inside the node, all-reduce of the 1/k shard across nodes (the
    faster of ring, 2(N-1)/N x S/k / B + 2(N-1) alpha, and double binary tree,
    2 x S/k / B + 2 log2(N) alpha, as NCCL picks), all-gather inside the node. Each GPU drives its own
    NIC, so k members of a node move their shards in parallel.
    """
    nbytes = np.asarray(nbytes, dtype=float)
    n_nodes = link.nodes.astype(float)
    shard = nbytes / link.members_per_node
    ring = 2 * (n_nodes - 1) / n_nodes * shard / link.inter_bandwidth_bytes_per_s + 2 * (n_nodes - 1) * link.inter_latency_s
    tree = 2 * shard / link.inter_bandwidth_bytes_per_s + 2 * np.log2(n_nodes) * link.inter_latency_s
    inter = np.where(n_nodes > 1, np.minimum(ring, tree), 0.0)
    k = link.members_per_node.astype(float)
    one_shot = link.intra_latency_s + (k - 1) * nbytes / link.intra_bandwidth_bytes_per_s
    intra_ring = 2 * _intra_ring_pass(nbytes, link)
    small = (n_nodes == 1) & (k > 1) & (nbytes <= ONE_SHOT_MAX_BYTES)
    inside = np.where(small, np.minimum(intra_ring, one_shot), intra_ring)
    return np.where(nbytes > 0, inside + inter, 0.0)


def all_gather_seconds(nbytes: ArrayLike, size: ArrayLike, link: Link) -> np.ndarray:
    """All-gather producing `nbytes` (the gathered size) on every rank: across nodes first (each GPU
    gathers the N shards of its local index, (N-1)/N x S/k through its NIC), then inside the node."""
    nbytes = np.asarray(nbytes, dtype=float)
    n_nodes = link.nodes.astype(float)
    inter = (n_nodes - 1) / n_nodes * nbytes / link.members_per_node / link.inter_bandwidth_bytes_per_s + (
        n_nodes - 1
    ) * link.inter_latency_s
    return np.where(nbytes > 0, _intra_ring_pass(nbytes, link) + np.where(n_nodes > 1, inter, 0.0), 0.0)


def reduce_scatter_seconds(nbytes: ArrayLike, size: ArrayLike, link: Link) -> np.ndarray:
    """Reduce-scatter of `nbytes` (the unsharded size): the mirror of an all-gather, same cost."""
    return all_gather_seconds(nbytes, size, link)


def all_to_all_seconds(nbytes: ArrayLike, size: ArrayLike, link: Link) -> np.ndarray:
    """All-to-all where each rank holds `nbytes` and keeps 1/n of it: the (k-1)/n share to node peers goes
    over the node fabric, the (n-k)/n share to other nodes through the GPU's own NIC (no aggregation)."""
    nbytes = np.asarray(nbytes, dtype=float)
    n = np.maximum(np.asarray(size, dtype=float), 1)
    k = link.members_per_node.astype(float)
    intra = (k - 1) / n * nbytes / link.intra_bandwidth_bytes_per_s + (k - 1) * link.intra_latency_s
    inter = (n - k) / n * nbytes / link.inter_bandwidth_bytes_per_s + (n - k) * link.inter_latency_s
    return np.where((n > 1) & (nbytes > 0), intra + inter, 0.0)


def p2p_seconds(nbytes: ArrayLike, link: Link) -> np.ndarray:
    """One point-to-point send between neighbours of the group: alpha + bytes / B of the tier crossed."""
    nbytes = np.asarray(nbytes, dtype=float)
    crossing = link.nodes > 1
    seconds = np.where(
        crossing,
        link.inter_latency_s + nbytes / link.inter_bandwidth_bytes_per_s,
        link.intra_latency_s + nbytes / link.intra_bandwidth_bytes_per_s,
    )
    return np.where(nbytes > 0, seconds, 0.0)


def ring_latency_seconds(link: Link) -> np.ndarray:
    """Latency of one ring all-gather or reduce-scatter over the whole group, as NCCL's tuning model counts
    it (NVIDIA/nccl src/graph/tuning.cc, commit 01afd20, ring: (nsteps - nInterSteps) x intraLat +
    nInterSteps x interLat): n - 1 sequential steps, N - 1 of them crossing the network. This grows
    with the group size n, unlike the hierarchical (k - 1) + (N - 1) steps the bandwidth formulas above
    count; a ring over n ranks is what NCCL runs for all-gather and reduce-scatter."""
    n_nodes = link.nodes.astype(float)
    ranks = link.members_per_node.astype(float) * n_nodes
    return np.where(
        ranks > 1, (ranks - n_nodes) * link.intra_latency_s + (n_nodes - 1) * link.inter_latency_s, 0.0
    )


def hierarchical_latency_seconds(link: Link) -> np.ndarray:
    """The latency all_gather_seconds / reduce_scatter_seconds include: (k - 1) node steps + (N - 1) network steps."""
    n_nodes = link.nodes.astype(float)
    k = link.members_per_node.astype(float)
    return (k - 1) * link.intra_latency_s + np.where(n_nodes > 1, (n_nodes - 1) * link.inter_latency_s, 0.0)
