"""Alpha-beta costs of collectives over the slowest tier a group spans.

Placement convention (Megatron-LM's rank order, documented in docs/cost-model.md):
ranks are numbered TP fastest, then CP, then DP and PP outward. A group of
`size` ranks whose members are `stride` ranks apart stays inside one node when
size x stride <= gpus_per_node; otherwise it crosses the network, and each GPU
sends through its own share of the node's NICs.

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


@dataclass(frozen=True)
class Link:
    """Effective bandwidth (bytes/s, one direction, already times efficiency) and latency (s) of a group."""

    bandwidth_bytes_per_s: np.ndarray
    latency_s: np.ndarray


def group_link(hw: HardwareProfile, size: ArrayLike, stride: ArrayLike, *, spread_over_nics: bool = True) -> Link:
    """The tier a group of `size` ranks spaced `stride` apart uses: intra-node fabric or the network.

    A group that crosses nodes with k members in each node moves its inter-node share through k NICs
    at once: a bandwidth-optimal (hierarchical, or NCCL multi-ring) reduction sends only 1/k of the data
    per GPU across the network, so the effective per-GPU bandwidth is k x the NIC share, never more
    than the intra-node link. All-to-all and point-to-point traffic go through each GPU's own NIC
    (`spread_over_nics=False`).
    """
    size = np.asarray(size)
    stride = np.asarray(stride)
    per_node = hw.node.gpus_per_node
    intra = size * stride <= per_node
    eff = hw.efficiency
    intra_bw = hw.node.bandwidth_bytes_per_s * eff.intra_node_link.fraction
    inter_bw = hw.inter_node_bandwidth_bytes_per_s * eff.inter_node_link.fraction
    if spread_over_nics:
        members_per_node = np.clip(per_node // np.maximum(stride, 1), 1, np.maximum(size, 1))
        inter_bw = np.minimum(intra_bw, inter_bw * members_per_node)
    return Link(
        bandwidth_bytes_per_s=np.where(intra, intra_bw, inter_bw),
        latency_s=np.where(intra, hw.node.latency_s, hw.inter_node_latency_s),
    )


def all_reduce_seconds(nbytes: ArrayLike, size: ArrayLike, link: Link) -> np.ndarray:
    """All-reduce of `nbytes` per rank: the faster of ring and double binary tree, as NCCL picks.

    Ring: 2(n-1)/n x bytes / B + 2(n-1) alpha. Tree: 2 x bytes / B + 2 log2(n) alpha
    (pipelined double binary tree; Sanders et al. 2009, as in NCCL 2.4).
    """
    n = np.asarray(size, dtype=float)
    nbytes = np.asarray(nbytes, dtype=float)
    ring = 2 * (n - 1) / n * nbytes / link.bandwidth_bytes_per_s + 2 * (n - 1) * link.latency_s
    tree = 2 * nbytes / link.bandwidth_bytes_per_s + 2 * np.log2(np.maximum(n, 1)) * link.latency_s
    return np.where(n > 1, np.minimum(ring, tree), 0.0)


def all_gather_seconds(nbytes: ArrayLike, size: ArrayLike, link: Link) -> np.ndarray:
    """Ring all-gather producing `nbytes` (the gathered size) on every rank: (n-1)/n x bytes / B + (n-1) alpha."""
    n = np.asarray(size, dtype=float)
    nbytes = np.asarray(nbytes, dtype=float)
    t = (n - 1) / n * nbytes / link.bandwidth_bytes_per_s + (n - 1) * link.latency_s
    return np.where(n > 1, t, 0.0)


def reduce_scatter_seconds(nbytes: ArrayLike, size: ArrayLike, link: Link) -> np.ndarray:
    """Ring reduce-scatter of `nbytes` (the unsharded size): the same cost as an all-gather of it."""
    return all_gather_seconds(nbytes, size, link)


def all_to_all_seconds(nbytes: ArrayLike, size: ArrayLike, link: Link) -> np.ndarray:
    """All-to-all where each rank holds `nbytes` and keeps 1/n of it: (n-1)/n x bytes / B + (n-1) alpha."""
    return all_gather_seconds(nbytes, size, link)


def p2p_seconds(nbytes: ArrayLike, link: Link) -> np.ndarray:
    """One point-to-point send: alpha + bytes / B."""
    return link.latency_s + np.asarray(nbytes, dtype=float) / link.bandwidth_bytes_per_s
