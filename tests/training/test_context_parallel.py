"""Context-parallel attention by engine: Transformer Engine's P2P ring (Megatron) and torch's all-gather
context_parallel (torchtitan), their merge traffic counted by hand, their exposed exchange, and the torch
loss's memory.

Round-number profile (tests/round_specs.py): HBM 2 TB/s at 90% = 1.8e12 B/s, fixed kernel cost 7.5 us, 8 GPUs
per node. Model: h 4096, 32 query heads of 128, 8 KV heads (GQA), seq 8192, cp 4: a rank holds 2,048 tokens,
q = 2,048 x 4,096 = 8,388,608 query elements; K plus V are 2,048 x 2,048 = q/2 at the KV heads' width and
2 q at the query width (torchtitan's repeat_kv).
"""

from __future__ import annotations

import pytest
from round_specs import lay, round_hw, tiny  # noqa: E402

from planner.calibrate.published import engine_fields
from planner.specs.engine import engine_profile
from planner.training.memory import stage_memory
from planner.training.time import attention_core_seconds, cp_comm_seconds, layer_time

HW = round_hw()
MODEL = tiny(hidden_size=4096, num_attention_heads=32, num_kv_heads=8, ffn_hidden_size=16384)
Q = 2048 * 4096
BW = 1.8e12
KERNEL = 7.5e-6
MEGATRON = engine_profile("megatron")
TORCHTITAN = engine_profile("torchtitan")


def _core(engine_name: str, **fields: object) -> tuple[float, float]:
    fields.setdefault("seq_len", 8192)
    fields.setdefault("global_batch", 1)
    fwd, bwd = attention_core_seconds(MODEL, HW, lay(**fields), 0.5, engine_profile(engine_name).context_parallel)
    return float(fwd[0]), float(bwd[0])


def test_without_context_parallelism_both_engines_run_the_same_kernel():
    assert _core("megatron") == _core("torchtitan")


def test_torch_merges_cost_what_their_eager_kernels_move():
    # The flash kernels are the same under both engines (same plateau), so the difference is the merge work.
    # torch, forward: 3 extra steps x (11 launches + 38 B per query element + 4 B per K/V element at 2q) plus once
    # (6 B per query element + 4 B per K/V element): 3 x 46q + 14q = 152q bytes; Megatron: 3 x (4 launches + 10q).
    # Backward: torch 3 x (11 launches + 10q + 25 x 2q) + (20q + 36 x 2q) = 272q; Megatron 3 x (4 launches +
    # 10 x (q + q/2)) = 45q.
    meg_fwd, meg_bwd = _core("megatron", cp=4)
    tt_fwd, tt_bwd = _core("torchtitan", cp=4)
    assert tt_fwd - meg_fwd == pytest.approx(3 * 7 * KERNEL + (152 - 30) * Q / BW, rel=1e-9)
    assert tt_bwd - meg_bwd == pytest.approx(3 * 7 * KERNEL + (272 - 45) * Q / BW, rel=1e-9)


def _cp_comm(engine_name: str, hw=HW, **fields: object) -> float:
    fields.setdefault("global_batch", 1)
    layout = lay(**fields)
    engine = engine_profile(engine_name)
    plateau = 0.5
    fwd, bwd = attention_core_seconds(MODEL, hw, layout, plateau, engine.context_parallel)
    return float(cp_comm_seconds(MODEL, hw, layout, engine, core_fwd=fwd, core_bwd=bwd, plateau=plateau)[0])


def test_the_all_gather_hides_only_behind_the_local_step_across_nodes():
    # cp 4 with tp 8: each CP rank in another node. Long sequences hide the P2P ring behind its steps; the
    # all-gather of all four K/V chunks waits behind the local causal step alone and stays partly exposed, more
    # so on a slower network.
    fields = dict(seq_len=65536, tp=8, cp=4)
    assert _cp_comm("megatron", **fields) == 0.0
    exposed = _cp_comm("torchtitan", **fields)
    assert exposed > 0.0
    slow = HW.model_copy(update={"network": HW.network.model_copy(update={"bandwidth_bytes_per_s": 25e9})})
    assert _cp_comm("torchtitan", hw=slow, **fields) > exposed


def test_the_last_dk_dv_shift_is_never_hidden():
    # Inside a node, at long sequences, everything but the last fp32 dK/dV shift of the backward hides (less the
    # NCCL contention): that shift alone is 2q x 4 bytes over NVLink at 200 GB/s plus 3 us at seq 65,536 on cp 4
    # (q = 16,384 tokens x 4,096).
    q = 16384 * 4096
    last_shift = 3e-6 + 2 * q * 4 / 200e9
    assert _cp_comm("torchtitan", seq_len=65536, cp=4) >= last_shift
    assert _cp_comm("torchtitan", seq_len=65536, cp=1) == 0.0


def test_full_recompute_runs_the_forward_exchange_again():
    once = _cp_comm("torchtitan", seq_len=65536, tp=8, cp=4)
    again = _cp_comm("torchtitan", seq_len=65536, tp=8, cp=4, recompute="full")
    assert again > once


def test_layer_time_takes_the_engines_context_parallelism():
    layout = lay(seq_len=65536, global_batch=1, tp=8, cp=4)
    meg = layer_time(MODEL, HW, layout, moe_layer=False, attention_plateau=0.5)
    tt = layer_time(MODEL, HW, layout, moe_layer=False, attention_plateau=0.5, engine=TORCHTITAN)
    assert float(tt.cp_comm[0]) > float(meg.cp_comm[0])
    assert float(tt.forward[0]) > float(meg.forward[0])  # the eager merges


def test_torch_loss_holds_twelve_bytes_per_logit_where_megatron_holds_six():
    # benchmarks/torch_loss_peak.py: at log_softmax's backward the saved fp32 output, nll_loss's fp32 gradient
    # and the new fp32 gradient are live at once. One stage, micro-batch 1 of 32 tokens, vocab 100: the loss's
    # share differs by (12 - 6) x 32 x 100 bytes.
    model = tiny()
    layout = lay(seq_len=32)
    stage = layout.tp * 0
    megatron = stage_memory(model, layout, stage, engine=MEGATRON)
    torchtitan = stage_memory(model, layout, stage, engine=TORCHTITAN)
    assert float((torchtitan.activations_bytes - megatron.activations_bytes)[0]) == pytest.approx(6 * 32 * 100)


@pytest.mark.parametrize(("mlp_kind", "unread"), [("gated", 2 * 64), ("standard", 0)])
def test_eager_op_ac_keeps_the_unread_w2_output_compile_does_not(mlp_kind: str, unread: int):
    # Eager SAC stores every MUST_SAVE output; w2 is a saved matmul only in the gated MLP (wq, wk, wv, wo, w1,
    # w3, w2: the odd ones are saved), and no backward reads it. Compiled, the partitioner drops it: 2h bytes
    # per token and layer (h = 64); the recompute working set is the same either way.
    from planner.training.memory import layer_activation_bytes_per_token
    model = tiny(mlp_kind=mlp_kind)
    eager = layer_activation_bytes_per_token(model, lay(recompute="op", engine="torchtitan"), moe_layer=False)
    compiled = layer_activation_bytes_per_token(model, lay(recompute="op", engine="torchtitan", compile=True),
                                                moe_layer=False)
    assert float((eager.stored - compiled.stored)[0]) == unread
    assert float(eager.working[0]) == float(compiled.working[0])


@pytest.mark.parametrize(("case_id", "compiled"), [
    ("tt24_t1_8b_fsdp", False), ("tt24_t1_8b_fsdp_compile", True), ("tt24_t3_8b_fsdp_compile_fp8", True),
    ("tt24_t2_8b_fsdp2_cp4", True), ("tt24_t4_70b_2d", True), ("tt24_t5_405b_1f1b", True),
    ("tt24_t6_405b_fsdp1_cp8", True),
])
def test_torchtitan_rows_compile_as_their_tables_caption_says(case_id: str, compiled: bool):
    # benchmarks/llama3_h100_202412_torchtitan.md: Tables 2, 4, 5 and 6 all say "+ torch.compile"; Tables 1 and 3
    # compare eager with compiled rows.
    fields = engine_fields(case_id, "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md", "full")
    assert fields["compile"] is compiled
