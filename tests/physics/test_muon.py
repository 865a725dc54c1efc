"""Muon's optimizer step (physics/muon.py, training.time.muon_optimizer_seconds, training.memory), by hand.

Round hardware (tests/round_specs.py): 1 PFLOP/s bf16 at a 0.8 plateau, each GEMM paying 7.5 us of peak work;
HBM 2 TB/s x 0.9; node fabric 400 GB/s x 0.5 = 200 GB/s, 3 us.
"""

from __future__ import annotations

import numpy as np
import pytest
from round_specs import lay, round_hw, tiny

from planner.engines.load import load_model
from planner.physics.kernels import GEMM_FIXED_SECONDS
from planner.physics.muon import (
    LOCAL_STEP_BYTES_PER_ELEMENT,
    NS_WRAPPER_BYTES_PER_ELEMENT,
    MuonMatrix,
    layer_matrices,
    matrix_cost,
    matrix_host_seconds,
    matrix_seconds,
    mtp_matrices,
    newton_schulz_flop,
    stage_seconds,
)
from planner.physics.shapes import layer_shape
from planner.specs.hardware import X86_HOST_SECONDS_PER_LAUNCH
from planner.specs.layout import Layout
from planner.specs.model import MoESpec
from planner.training.estimate import estimate
from planner.training.memory import model_state_bytes, stage_params

HW = round_hw()
GQA = tiny(num_kv_heads=2, mlp_kind="gated", ffn_hidden_size=128)  # h 64, 4 heads of 16, 2 K/V heads
MOE = tiny(mlp_kind="gated", ffn_hidden_size=128,
           moe=MoESpec(num_experts=4, experts_per_token=2, moe_ffn_hidden_size=32, num_shared_experts=1))


def one(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def shapes(matrices) -> list[tuple[int, int, int, bool, bool, bool]]:
    return [(m.rows, m.cols, m.count, m.split, m.row_parallel, m.routed) for m in matrices]


def test_a_dense_layers_matrices_with_qkv_split_into_its_parts():
    # q 4 x 16 = 64 rows, k and v 2 x 16 = 32 rows, all of the 64 input features; the output projection
    # 64 x 64 (TP cuts its inputs); fc1 gate and up fused 2 x 128 = 256 rows; fc2 64 x 128
    assert shapes(layer_matrices(GQA, moe_layer=False)) == [
        (64, 64, 1, True, False, False), (32, 64, 1, True, False, False), (32, 64, 1, True, False, False),
        (64, 64, 1, True, True, False), (256, 64, 1, True, False, False), (64, 128, 1, True, True, False)]
    # --muon-no-split-qkv: the fused 64 + 2 x 32 = 128 rows as one matrix
    assert shapes(layer_matrices(GQA, moe_layer=False, split_qkv=False))[0] == (128, 64, 1, True, False, False)


def test_a_moe_layers_router_experts_and_shared_expert():
    # router 4 x 64 (replicated); each of the 4 routed experts fc1 64 x 64, fc2 64 x 32; the shared expert fc1 64 x 64,
    # fc2 64 x 32 (one of width 32)
    got = shapes(layer_matrices(MOE, moe_layer=True))
    assert got[4:] == [(4, 64, 1, False, False, False), (64, 64, 4, True, False, True), (64, 32, 4, True, True, True),
                       (64, 64, 1, True, False, False), (64, 32, 1, True, True, False)]


@pytest.mark.parametrize("name", ["llama-3.1-8b", "deepseek-v3", "qwen3.5-35b-a3b", "gpt-oss-20b", "glm-5"])
@pytest.mark.parametrize("moe_layer", [False, True])
def test_the_matrices_hold_every_gemm_weight_of_the_layer(name, moe_layer):
    model = load_model(name).spec
    linear = model.linear_attention is not None
    for mixer in ([False, True] if linear else [False]):
        gemms = layer_shape(model, moe_layer=moe_layer and model.moe is not None, linear=mixer).gemms
        weights = sum(g.tp_elements + g.kv_elements_per_head * model.kv_heads + g.replicated_elements for g in gemms)
        matrices = layer_matrices(model, moe_layer=moe_layer, linear=mixer)
        assert sum(m.rows * m.cols * m.count for m in matrices) == weights


def test_the_mtp_module_adds_its_eh_projection():
    model = load_model("deepseek-v3").spec
    h = model.hidden_size
    assert mtp_matrices(model)[-1] == MuonMatrix(h, 2 * h, 1, split=True, row_parallel=False, routed=False,
                                                   name="eh_proj")
    assert mtp_matrices(model)[:-1] == layer_matrices(model, moe_layer=True)


def test_newton_schulz_flop_by_hand():
    # one iteration on 2 x 3: X X^T 2 x 2 x 2 x 3 = 24, A A 2 x 8 = 16, B X 24: 64
    assert one(newton_schulz_flop(2, 3, 1)) == 64
    assert one(newton_schulz_flop(64, 128, 5)) == 5 * (4 * 64 * 64 * 128 + 2 * 64 ** 3)


COLUMN = MuonMatrix(128, 64, 1, split=True, row_parallel=False, routed=False)  # TP cuts its 128 rows


def test_duplicated_mode_gathers_the_fp32_momentum_and_orthogonalises_the_whole_matrix():
    cost = matrix_cost(HW, lay(tp=2), COLUMN)
    assert one(cost.flop) == 5 * (4 * 64 * 64 * 128 + 2 * 64 ** 3)
    # all-gather of 128 x 64 x 4 bytes between 2 ranks of a node: (k-1)/k S / B + (k-1) alpha
    assert one(cost.comm_seconds) == pytest.approx(0.5 * 32768 / 200e9 + 3e-6)
    assert (one(cost.ns_elements), one(cost.local_elements)) == (8192, 4096)


def test_blockwise_mode_orthogonalises_the_shard_alone():
    cost = matrix_cost(HW, lay(tp=2, optimizer="muon", muon_tp_mode="blockwise"), COLUMN)
    assert one(cost.flop) == 5 * (4 * 64 * 64 * 64 + 2 * 64 ** 3)  # the 64 x 64 shard
    assert one(cost.comm_seconds) == 0 and one(cost.ns_elements) == 4096


def test_distributed_mode_all_reduces_the_gram_matrix_of_the_whole_dimension():
    # the 64 columns every rank holds are orthogonalised: per iteration 2 x 64^2 x 64 twice on the 64-row shard,
    # 2 x 64^3 for A A; the 64 x 64 bf16 Gram matrix (8,192 bytes) all-reduced, one-shot: alpha + (k-1) S / B
    cost = matrix_cost(HW, lay(tp=2, optimizer="muon", muon_tp_mode="distributed"), COLUMN)
    assert one(cost.flop) == 5 * (4 * 64 * 64 * 64 + 2 * 64 ** 3)
    assert one(cost.comm_seconds) == pytest.approx(5 * (3e-6 + 8192 / 200e9))


def test_one_matrix_step_by_hand():
    # duplicated, tp 2: 15 GEMMs, (flop / 1 PF + 15 x 7.5 us) / 0.8; element-wise: the gathered 8,192 elements
    # through the wrapper and the cat (32 + 8 bytes), the own 4,096 through the step (38); the gather
    flop = 5 * (4 * 64 * 64 * 128 + 2 * 64 ** 3)
    gemms = (flop / 1e15 + 15 * GEMM_FIXED_SECONDS) / 0.8
    traffic = (8192 * (NS_WRAPPER_BYTES_PER_ELEMENT + 8) + 4096 * LOCAL_STEP_BYTES_PER_ELEMENT) / (2e12 * 0.9)
    gather = 0.5 * 32768 / 200e9 + 3e-6
    assert one(matrix_seconds(HW, lay(tp=2, optimizer="muon"), COLUMN)) == pytest.approx(gemms + traffic + gather)


def test_the_host_issues_each_matrix_s_ops_one_by_one():
    # 5 iterations of 3 GEMMs, the wrapper's 7 ops and the parameter's 3 step ops: 25; a split QKV part carries a third
    # of its parameter's 3 ops and of the cat that joins the parts; duplicated TP adds the gather and its cat
    host = X86_HOST_SECONDS_PER_LAUNCH
    assert one(matrix_host_seconds(HW, lay(optimizer="muon"), COLUMN)) == pytest.approx(25 * host)
    assert one(matrix_host_seconds(HW, lay(tp=2, optimizer="muon"), COLUMN)) == pytest.approx(27 * host)
    q = layer_matrices(GQA, moe_layer=False)[0]
    assert one(matrix_host_seconds(HW, lay(optimizer="muon"), q)) == pytest.approx((22 + 4 / 3) * host)


def device_and_host(layout, matrices):
    device = sum(one(matrix_seconds(HW, layout, m)) * m.count for m in matrices)
    host = sum(one(matrix_host_seconds(HW, layout, m)) * m.count for m in matrices)
    return device, host


def test_the_distributed_optimizer_spreads_the_matrices_over_the_data_parallel_ranks():
    # two layers of six matrices: the tiny model's step is host-bound (each of its GEMMs a few microseconds);
    # dp 4 with zero 1 owns a quarter of the work, at least the largest matrix
    stage = dict(num_dense=np.array(2), num_moe=np.array(0), num_linear_dense=0, num_linear_moe=0, num_mtp=0)
    matrices = layer_matrices(GQA, moe_layer=False)
    device, host = device_and_host(lay(dp=4, optimizer="muon"), matrices)
    assert host > device
    assert one(stage_seconds(GQA, HW, lay(dp=4, optimizer="muon"), **stage)) == pytest.approx(2 * host)
    largest = max(max(one(matrix_seconds(HW, lay(dp=4, optimizer="muon"), m)),
                      one(matrix_host_seconds(HW, lay(dp=4, optimizer="muon"), m))) for m in matrices)
    owned = stage_seconds(GQA, HW, lay(dp=4, zero=1, optimizer="muon"), **stage)
    assert one(owned) == pytest.approx(max(2 * host / 4, largest))
    # 64 ranks: 12 matrices cannot be spread thinner than the largest one
    wide = stage_seconds(GQA, HW, lay(dp=64, zero=1, optimizer="muon"), **stage)
    assert one(wide) == pytest.approx(largest)


def test_routed_experts_are_the_ranks_own_and_owned_over_the_expert_data_parallel_group():
    # ep 2: each rank holds 2 of the 4 experts, so 2 x (fc1, fc2); the dense matrices and the experts each take the
    # longer of their device and host time
    moe_only = dict(num_dense=np.array(0), num_moe=np.array(1), num_linear_dense=0, num_linear_moe=0, num_mtp=0)
    ep2 = lay(dp=4, ep=2, optimizer="muon")
    matrices = layer_matrices(MOE, moe_layer=True)
    dense = max(device_and_host(ep2, [m for m in matrices if not m.routed]))
    experts = [MuonMatrix(m.rows, m.cols, 2, m.split, m.row_parallel, m.routed) for m in matrices if m.routed]
    routed = max(device_and_host(ep2, experts))
    assert one(stage_seconds(MOE, HW, ep2, **moe_only)) == pytest.approx(dense + routed)


def test_muon_keeps_one_moment_and_leaves_the_embedding_and_head_to_adam():
    # zero 1 over dp 4: every parameter's master and momentum (8 bytes) over 4, and Adam's second moment (4 bytes)
    # for the embedding and the output layer over 4
    layout = lay(dp=4, zero=1, optimizer="muon")
    sp = stage_params(GQA, layout, np.array([0]))
    params = one(sp.dense)
    _, _, optim = model_state_bytes(layout, sp)
    assert one(optim) == pytest.approx(8 * params / 4 + 4 * one(sp.ends) / 4)
    _, _, adam = model_state_bytes(lay(dp=4, zero=1), sp)
    assert one(adam) == pytest.approx(12 * params / 4)


@pytest.mark.parametrize("zero", [0, 1])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_muon_never_needs_more_optimizer_memory_than_adam(zero, tp):
    model = load_model("qwen3-30b-a3b").spec
    fields = dict(tp=tp, dp=8 // tp * 2, ep=2, zero=zero, global_batch=16, seq_len=4096, sequence_parallel=tp > 1)
    muon = estimate(model, round_hw(memory_bytes=10**13), Layout(optimizer="muon", **fields))
    adam = estimate(model, round_hw(memory_bytes=10**13), Layout(**fields))
    assert muon.scalar("optimizer_bytes") < adam.scalar("optimizer_bytes")


def test_more_iterations_and_duplicated_tp_take_longer():
    model = load_model("llama-3.1-8b").spec
    base = dict(tp=4, dp=2, zero=1, global_batch=16, seq_len=4096, sequence_parallel=True, optimizer="muon")
    steps = [estimate(model, HW, Layout(muon_ns_steps=n, **base)).scalar("optimizer_seconds") for n in (5, 10)]
    assert steps[1] > steps[0]
    modes = {m: estimate(model, HW, Layout(muon_tp_mode=m, **base)).scalar("optimizer_seconds")
             for m in ("duplicated", "blockwise", "distributed")}
    assert modes["blockwise"] < modes["distributed"] < modes["duplicated"]
