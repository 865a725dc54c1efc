"""Muon's optimizer step as Megatron-Core runs it (--optimizer muon; NVIDIA-NeMo/Emerging-Optimizers): which weights
it orthogonalises, the Newton-Schulz work of each, and where a TP-split or data-parallel-owned matrix is
orthogonalised.

Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks"; Liu et al. 2025, "Muon is
Scalable for LLM Training", arXiv:2502.16982) keeps one momentum buffer per 2-D hidden weight and replaces its
update by an approximately orthogonal matrix: the quintic Newton-Schulz iteration on X (the normalised momentum,
turned so that it is m x n with m <= n), `steps` times

    A = X X^T            2 m^2 n FLOP
    B = b A + c A A      2 m^3
    X = a X + B X        2 m^2 n

(Emerging-Optimizers muon_utils.py newton_schulz_step @ 0001f6e2: three GEMMs, torch.addmm for the last two), in
bf16 under Megatron's default --muon-fp32-matmul-prec medium (newton_schulz casts X to bf16 when the float32
matmul precision is "medium"). Megatron-Core routes the embedding, the output layer and every parameter that is
not 2-D to Adam (megatron/core/optimizer/emerging_optimizers.py @ d98e8a64, _is_nonlinear_or_embedding); the
router and the experts' weights are 2-D and go to Muon; the fused QKV weight is orthogonalised as its Q, K and V
parts (each over all query groups) unless --muon-no-split-qkv (TensorParallelMuon.orthogonalize).

A TP-split weight (--muon-tp-mode; newton_schulz_tp): duplicated, every TP rank all-gathers the fp32 momentum
and orthogonalises the whole matrix; blockwise, each rank its own shard; distributed, each rank multiplies its
shard and the m x m Gram matrix A is all-reduced every iteration, the dimension left whole being the one
orthogonalised (its cube is computed on every rank). With the distributed optimizer (planner's zero 1) the
matrices are owned whole by the data-parallel ranks (LayerWiseDistributedOptimizer, layer_wise_optimizer.py @
d98e8a64: bin-packed by their Newton-Schulz cost), each rank orthogonalising its own and all-gathering the
updated weights; without it every rank orthogonalises every matrix of its stage.

Pure: shapes from physics.shapes.layer_shape, costs as numpy arrays over the layouts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.physics.comm import all_gather_seconds, all_reduce_seconds, group_link
from planner.physics.kernels import GEMM_FIXED_SECONDS, matmul_plateau, memory_seconds, peak_16bit_flops
from planner.physics.launch import host_launch_seconds
from planner.physics.params import mtp_layer_is_moe
from planner.physics.shapes import WeightMatrix, expert_shard_degree, layer_weight_matrices
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import MUON_TP_MODE_CODES, LayoutArrays, Zero
from planner.specs.model import ModelSpec

NS_GEMMS_PER_STEP = 3
"""GEMMs per Newton-Schulz iteration: X X^T, then B = b A + c A A and X = a X + B X as torch.addmm (Emerging-Optimizers
muon_utils.py newton_schulz_step @ 0001f6e2)."""

MOMENTUM_BYTES = 4
"""The fp32 momentum buffer (state "momentum_buffer", zeros_like the fp32 main gradient), which duplicated TP mode
all-gathers over the TP group (newton_schulz_tp: torch.distributed.all_gather of x, asserted float32)."""

GRAM_BYTES = 2
"""Bytes per element of the Gram matrix that distributed TP mode all-reduces each iteration: bf16, X having been cast
to bf16 under the default "medium" matmul precision."""

LOCAL_STEP_BYTES_PER_ELEMENT = 38.0
"""HBM bytes per element of a rank's own shard of a Muon matrix in the step's eager element-wise ops
(Emerging-Optimizers OrthogonalizedOptimizer.step @ 116b71a4, on Megatron's fp32 main parameters): decoupled weight
decay p.add_(p) (read 4, write 4), the momentum's lerp_ with the fp32 gradient (read 8, write 4), the update
p.add_(grad) (read 8, write 4), and Megatron's copy of the fp32 main parameter into the bf16 weight (read 4, write
2): 8 + 12 + 12 + 6. Megatron's default is no Nesterov term (--muon-nesterov off), which would add a lerp (12)."""

NS_WRAPPER_BYTES_PER_ELEMENT = 32.0
"""HBM bytes per element of the matrix Newton-Schulz runs on (the whole matrix under duplicated TP mode, the
shard otherwise), outside the GEMMs: the normalisation (a read for the norm, then read and write: 12), the cast to
bf16 and back (4 + 2, 2 + 4), and the scale factor's multiply (4 + 4) (muon_utils.py newton_schulz; Megatron's
scaled_orthogonalize_fn)."""

GATHER_CAT_BYTES_PER_ELEMENT = 8.0
"""The torch.cat of the gathered fp32 shards under duplicated TP mode (read 4, write 4 per element of the whole
matrix)."""

STEP_OPS_PER_PARAMETER = 3
"""Eager ops the step issues per parameter outside the orthogonalisation (OrthogonalizedOptimizer.step @ 116b71a4:
the weight decay's add_, the momentum's lerp_, the update's add_); Megatron copies the main parameters into the
bf16 weights with one multi-tensor launch for all of them, not counted per parameter."""

NS_WRAPPER_OPS = 7
"""Eager ops around one matrix's Newton-Schulz GEMMs (muon_utils.py newton_schulz and Megatron's
scaled_orthogonalize_fn): F.normalize (the norm, its clamp, the division: 3), the cast to bf16 and back (2), the
spectral scale and the extra scale factor (2)."""

GATHER_OPS = 2
"""Duplicated TP mode's all-gather and the cat of the shards (newton_schulz_tp), per TP-split matrix."""


MuonMatrix = WeightMatrix  # one shape of weight that Muon orthogonalises, in one layer


def layer_matrices(model: ModelSpec, *, moe_layer: bool, linear: bool = False, split_qkv: bool = True
                   ) -> tuple[MuonMatrix, ...]:
    """The weights Muon orthogonalises in one layer: every GEMM weight (physics.shapes.layer_weight_matrices), the
    fused QKV of a plain attention layer as its Q (and output-gate), K and V parts when `split_qkv`."""
    return layer_weight_matrices(model, moe_layer=moe_layer, linear=linear, split_qkv=split_qkv)


def mtp_matrices(model: ModelSpec, *, split_qkv: bool = True) -> tuple[MuonMatrix, ...]:
    """One multi-token-prediction module's matrices (physics.params.mtp_module_params): its transformer layer and
    eh_proj, 2h -> h, column-parallel."""
    h = model.hidden_size
    return layer_matrices(model, moe_layer=mtp_layer_is_moe(model), split_qkv=split_qkv) + (
        MuonMatrix(h, 2 * h, 1, split=True, row_parallel=False, routed=False, name="eh_proj"),)


def newton_schulz_flop(short: np.ndarray | float, long: np.ndarray | float, steps: np.ndarray | float) -> np.ndarray:
    """FLOP of `steps` quintic Newton-Schulz iterations on a short x long matrix: steps x (4 m^2 n + 2 m^3)."""
    m, n = np.asarray(short, dtype=float), np.asarray(long, dtype=float)
    return np.asarray(np.asarray(steps, dtype=float) * (4 * m * m * n + 2 * m ** 3))


@dataclass(frozen=True)
class MatrixCost:
    """What orthogonalising one matrix costs the rank that does it, per layout."""

    flop: np.ndarray  # Newton-Schulz GEMM FLOP
    ns_elements: np.ndarray  # elements of the matrix the iteration runs on (its element-wise wrapper)
    local_elements: np.ndarray  # elements of the rank's own shard (the step's element-wise ops)
    comm_seconds: np.ndarray  # the TP gather or the Gram all-reduces
    gathered: np.ndarray  # duplicated TP mode gathered it (the cat of the shards)


def _tp_ranks(lay: LayoutArrays, mat: MuonMatrix) -> np.ndarray:
    """The ranks a matrix is split over: etp for a routed expert's, tp for the others' TP-split ones, else 1."""
    return np.asarray(np.where(mat.split, lay.etp if mat.routed else lay.tp, 1))


def _gathered(lay: LayoutArrays, t: np.ndarray) -> np.ndarray:
    """Duplicated TP mode on a matrix split over t > 1 ranks: its momentum is all-gathered and orthogonalised whole."""
    return np.asarray((t > 1) & (lay.muon_tp_mode == MUON_TP_MODE_CODES["duplicated"]))


def matrix_cost(hw: HardwareProfile, lay: LayoutArrays, mat: MuonMatrix) -> MatrixCost:
    """One matrix on the rank that orthogonalises it, by the layout's --muon-tp-mode (module doc)."""
    t = _tp_ranks(lay, mat).astype(float)
    link = group_link(hw, t, 1)
    whole = float(mat.rows) * mat.cols
    steps = lay.muon_ns_steps.astype(float)
    split_len = float(mat.cols if mat.row_parallel else mat.rows)  # the dimension TP cuts
    kept_len = float(mat.rows if mat.row_parallel else mat.cols)  # the one every rank holds whole
    sharded = t > 1
    mode = lay.muon_tp_mode
    duplicated = _gathered(lay, t)
    blockwise = sharded & (mode == MUON_TP_MODE_CODES["blockwise"])
    distributed = sharded & (mode == MUON_TP_MODE_CODES["distributed"])
    full_flop = newton_schulz_flop(min(mat.rows, mat.cols), max(mat.rows, mat.cols), steps)
    shard = split_len / t
    block_flop = newton_schulz_flop(np.minimum(shard, kept_len), np.maximum(shard, kept_len), steps)
    # distributed: X^T turned so the kept dimension u is orthogonalised; the two m^2 n GEMMs run on the shard
    u = kept_len
    dist_flop = steps * (4 * u * u * shard + 2 * u ** 3)
    flop = np.where(blockwise, block_flop, np.where(distributed, dist_flop, full_flop))
    ns_elements = np.where(blockwise | distributed, whole / t, whole)
    gather = np.where(duplicated, all_gather_seconds(whole * MOMENTUM_BYTES, t, link), 0.0)
    gram = np.where(distributed, steps * all_reduce_seconds(u * u * GRAM_BYTES, t, link), 0.0)
    local = np.broadcast_to(whole / t, np.broadcast_shapes(np.shape(t), np.shape(steps)))
    return MatrixCost(flop=np.asarray(flop), ns_elements=np.asarray(ns_elements), local_elements=np.asarray(local),
                      comm_seconds=np.asarray(gather + gram), gathered=duplicated)


def matrix_seconds(hw: HardwareProfile, lay: LayoutArrays, mat: MuonMatrix) -> np.ndarray:
    """Seconds one matrix's step takes the rank that owns it: its Newton-Schulz GEMMs (each at the 16-bit plateau
    with the fixed cost of a GEMM, physics.kernels.matmul_seconds), the element-wise ops of the iteration's wrapper
    and of the step on the rank's shard (memory-bound), and the TP communication of its mode."""
    cost = matrix_cost(hw, lay, mat)
    launches = NS_GEMMS_PER_STEP * lay.muon_ns_steps.astype(float)
    gemms = (cost.flop / peak_16bit_flops(hw) + launches * GEMM_FIXED_SECONDS) / matmul_plateau(hw)
    traffic = (cost.ns_elements * (NS_WRAPPER_BYTES_PER_ELEMENT
                                   + np.where(cost.gathered, GATHER_CAT_BYTES_PER_ELEMENT, 0.0))
               + cost.local_elements * LOCAL_STEP_BYTES_PER_ELEMENT)
    return np.asarray(gemms + memory_seconds(hw, traffic) + cost.comm_seconds)


def matrix_host_seconds(hw: HardwareProfile, lay: LayoutArrays, mat: MuonMatrix) -> np.ndarray:
    """CPU time the step's eager loop spends issuing one matrix's ops (physics.launch.host_launch_seconds each): the
    GEMMs and the wrapper of its iterations, the gather under duplicated TP mode, and its parameter's step ops (a
    split QKV's shared by its parts, with the cat that joins them)."""
    gathered = _gathered(lay, _tp_ranks(lay, mat))
    per_parameter = (STEP_OPS_PER_PARAMETER + (1 if mat.parts > 1 else 0)) / mat.parts
    ops = (NS_GEMMS_PER_STEP * lay.muon_ns_steps + NS_WRAPPER_OPS + np.where(gathered, GATHER_OPS, 0)
           + per_parameter)
    return np.asarray(ops * host_launch_seconds(hw))


@dataclass(frozen=True)
class LayerWork:
    """One layer's Muon step on the ranks that own its matrices, on the device and on the host: the dense matrices'
    and the rank's routed experts' (count / ep of each), with the largest single matrix of each."""

    dense: np.ndarray
    dense_host: np.ndarray
    dense_largest: np.ndarray
    routed: np.ndarray
    routed_host: np.ndarray
    routed_largest: np.ndarray


def layer_work(hw: HardwareProfile, lay: LayoutArrays, matrices: tuple[MuonMatrix, ...]) -> LayerWork:
    zero = np.zeros(lay.shape)
    dense = dense_host = dense_max = routed = routed_host = routed_max = zero
    for mat in matrices:
        device, host = matrix_seconds(hw, lay, mat), matrix_host_seconds(hw, lay, mat)
        if mat.routed:
            routed, routed_host = routed + device * mat.count / lay.ep, routed_host + host * mat.count / lay.ep
            routed_max = np.maximum(routed_max, np.maximum(device, host))
        else:
            dense, dense_host = dense + device * mat.count, dense_host + host * mat.count
            dense_max = np.maximum(dense_max, np.maximum(device, host))
    return LayerWork(dense, dense_host, dense_max, routed, routed_host, routed_max)


def stage_seconds(model: ModelSpec, hw: HardwareProfile, lay: LayoutArrays, *, num_dense: np.ndarray,
                  num_moe: np.ndarray, num_linear_dense: np.ndarray | int, num_linear_moe: np.ndarray | int,
                  num_mtp: np.ndarray | int) -> np.ndarray:
    """Seconds of the Muon matrices' step on one rank of a stage holding `num_dense` dense and `num_moe` MoE layers
    (of which num_linear_* have the Gated DeltaNet mixer) and `num_mtp` MTP modules. Without the distributed
    optimizer every rank orthogonalises all of them; with it (zero 1) the dense ones are owned across the dp x cp
    ranks and the routed ones across the expert-data-parallel ranks, bin-packed by cost: a rank's share is the
    total over the group, but never less than the largest single matrix."""
    def kinds(split: bool) -> list[tuple[np.ndarray | int, tuple[MuonMatrix, ...]]]:
        out: list[tuple[np.ndarray | int, tuple[MuonMatrix, ...]]] = [
            (np.asarray(num_dense) - num_linear_dense, layer_matrices(model, moe_layer=False, split_qkv=split)),
            (np.asarray(num_moe) - num_linear_moe, layer_matrices(model, moe_layer=True, split_qkv=split)),
            (num_mtp, mtp_matrices(model, split_qkv=split)),
        ]
        if model.linear_attention is not None:
            out += [(num_linear_dense, layer_matrices(model, moe_layer=False, linear=True)),
                    (num_linear_moe, layer_matrices(model, moe_layer=True, linear=True))]
        return out

    def totals(split: bool) -> tuple[np.ndarray, ...]:
        # (dense, dense host, dense largest, routed, routed host, routed largest) over the stage's layers
        out = [np.zeros(lay.shape) for _ in range(6)]
        for count, matrices in kinds(split):
            n = np.asarray(count)
            work = layer_work(hw, lay, matrices)
            out[0], out[1], out[3], out[4] = (out[0] + n * work.dense, out[1] + n * work.dense_host,
                                              out[3] + n * work.routed, out[4] + n * work.routed_host)
            out[2] = np.maximum(out[2], np.where(n > 0, work.dense_largest, 0.0))
            out[5] = np.maximum(out[5], np.where(n > 0, work.routed_largest, 0.0))
        return tuple(out)

    split_qkv = lay.muon_split_qkv
    if bool(np.all(split_qkv)) or not bool(np.any(split_qkv)):
        sums = totals(bool(np.all(split_qkv)))
    else:  # a grid of both settings
        sums = tuple(np.where(split_qkv, a, b) for a, b in zip(totals(True), totals(False), strict=True))
    dense, dense_host, dense_max, routed, routed_host, routed_max = sums
    owned = lay.zero >= Zero.OPTIMIZER

    def share(device: np.ndarray, host: np.ndarray, largest: np.ndarray, group: np.ndarray) -> np.ndarray:
        # the eager loop's host runs ahead of the device: a group's matrices take the longer of the two; owned over
        # `group` ranks, at least the largest matrix
        return np.asarray(np.where(owned, np.maximum(np.maximum(device, host) / group, largest),
                                   np.maximum(device, host)))

    return np.asarray(share(dense, dense_host, dense_max, lay.shard_degree)
                      + share(routed, routed_host, routed_max, expert_shard_degree(lay)))
