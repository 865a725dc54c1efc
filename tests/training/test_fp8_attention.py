"""Transformer Engine's FP8 attention (Layout.fp8_attention): the kernel at the hardware profile's measured fp8 /
16-bit speed, the Q/K/V (and under delayed scaling O) casts, the fp8 tensors kept for the backward, and the
settings that cannot run it. Expected values are derived by hand from the tables below, not from the code."""

from __future__ import annotations

import pytest
from round_specs import round_hw, tiny

from planner.engines.load import load_hardware
from planner.errors import PlannerError
from planner.physics.kernels import fp8_attention_speedup
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import Layout
from planner.training.estimate import check_dtype
from planner.training.memory import layer_activation_bytes_per_token
from planner.training.rules import check_layout
from planner.training.time import cp_attention_kernels, layer_time

TABLE = dict(head_dims=[128, 192], block_tokens=[2048, 8192],
             per_tensor=[[1.0, 1.2], [1.5, 1.6]], mxfp8=[[0.9, 1.1], [1.3, 1.4]], note="test table")


def with_table(**table: object) -> HardwareProfile:
    hw = round_hw()
    data = hw.model_dump()
    data["efficiency"]["attention_fp8"] = {**TABLE, **table}
    return HardwareProfile.model_validate(data)


HW = with_table()


@pytest.mark.parametrize(("tokens", "head_dim", "mx", "want"), [
    (2048, 128, False, 1.0), (8192, 128, False, 1.2),
    (4096, 128, False, 1.1),  # halfway between 2K and 8K in log2: halfway between the ratios
    (512, 128, False, 1.0), (65536, 128, False, 1.2),  # held at the ends
    (8192, 192, False, 1.6), (8192, 176, False, 1.6),  # 176 is nearer 192 than 128 in ratio
    (8192, 64, False, 1.2),  # below the table: the smallest head dim's row
    (4096, 192, True, 1.35), (2048, 128, True, 0.9),
])
def test_speedup_interpolates_the_measured_table(tokens: int, head_dim: int, mx: bool, want: float) -> None:
    assert float(fp8_attention_speedup(HW, tokens, head_dim, mx)) == pytest.approx(want)


def test_a_profile_without_a_table_or_a_row_has_no_speedup_and_refuses_the_setting() -> None:
    assert float(fp8_attention_speedup(round_hw(), 8192, 128, False)) == 1.0
    per_tensor_only = with_table(mxfp8=None)
    assert float(fp8_attention_speedup(per_tensor_only, 8192, 128, True)) == 1.0
    check_dtype(per_tensor_only, "fp8", "tensorwise", fp8_attention=True)
    with pytest.raises(PlannerError, match="measures no FP8 attention with per-tensor scales"):
        check_dtype(round_hw(), "fp8", "tensorwise", fp8_attention=True)


def test_table_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="one row per head dimension"):
        with_table(per_tensor=[[1.0, 1.2]])
    with pytest.raises(ValueError, match="block_tokens must increase"):
        with_table(block_tokens=[8192, 2048])


def model_128() -> object:
    return tiny(num_layers=2, hidden_size=512, num_attention_heads=4, ffn_hidden_size=2048, max_seq_len=8192)


def kernels(**fields: object) -> tuple[float, float]:
    fields.setdefault("global_batch", 1)
    fields.setdefault("seq_len", 8192)
    local, step = cp_attention_kernels(model_128(), HW, Layout(**fields).to_arrays())  # type: ignore[arg-type]
    return float(local[0]), float(step[0])


@pytest.mark.parametrize(("recipe", "ratio"), [("tensorwise", 1.2), ("delayed", 1.2), ("mxfp8", 1.1)])
def test_the_attention_kernel_runs_at_the_measured_ratio_of_its_block(recipe: str, ratio: float) -> None:
    bf16, _ = kernels(dtype="fp8", fp8_recipe=recipe)
    fp8, _ = kernels(dtype="fp8", fp8_recipe=recipe, fp8_attention=True)
    assert bf16 / fp8 == pytest.approx(ratio)


def test_context_parallel_steps_take_the_ratio_of_their_own_blocks() -> None:
    # cp 2 on 8192 tokens: the diagonal block is 4096 keys (1.1 per-tensor); the extra step runs half its work on
    # 2048-key blocks (1.0) and half on 4096 (1.1), each at its own 16-bit efficiency
    base = kernels(dtype="fp8", cp=2, dp=1)
    fp8 = kernels(dtype="fp8", cp=2, fp8_attention=True)
    assert base[0] / fp8[0] == pytest.approx(1.1)
    assert 1.0 < base[1] / fp8[1] < 1.1


@pytest.mark.parametrize(("recipe", "cast_bytes", "fwd_widths", "bwd_widths"), [
    # a per-tensor cast on a chip whose fp8 GEMMs take only TN (the round hardware): read 2, amax read 2, write
    # the copy 1 and its transpose 1 = 6 bytes per element; delayed scaling skips the amax read: 4
    ("tensorwise", 6.0, 3, 1),  # Q, K, V before the kernel; dO before the backward kernel
    ("delayed", 4.0, 4, 1),  # and O, which the delayed backward reads in fp8
])
def test_the_casts_are_q_k_v_and_do_and_under_delayed_scaling_o(recipe: str, cast_bytes: float, fwd_widths: int,
                                                                bwd_widths: int) -> None:
    hw = with_table(per_tensor=[[1.0, 1.0], [1.0, 1.0]])  # the kernel at the 16-bit speed: only the casts differ
    model = tiny(dropout=False)  # h 64, 4 heads: Q, K, V and O 64 wide each at tp 1
    tokens, width, bandwidth = 32, 64, 2e12 * 0.9

    def times(**more: object) -> tuple[float, float]:
        layout = Layout(global_batch=1, seq_len=tokens, dtype="fp8", fp8_recipe=recipe, **more).to_arrays()
        t = layer_time(model, hw, layout, moe_layer=False)
        return float(t.forward[0]), float(t.backward[0])

    (f0, b0), (f1, b1) = times(), times(fp8_attention=True)
    assert f1 - f0 == pytest.approx(tokens * fwd_widths * width * cast_bytes / bandwidth)
    assert b1 - b0 == pytest.approx(tokens * bwd_widths * width * cast_bytes / bandwidth)


def test_q_k_v_are_kept_in_one_byte_and_o_too_under_delayed_scaling() -> None:
    model = tiny(num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256, dropout=False)
    q = k = v = o = 64  # widths per token, tp 1, no GQA

    def stored(**fields: object) -> float:
        layout = Layout(global_batch=1, seq_len=32, dtype="fp8", **fields).to_arrays()
        return float(layer_activation_bytes_per_token(model, layout, moe_layer=False).stored[0])

    assert stored() - stored(fp8_attention=True) == pytest.approx((2 - 1) * (q + k + v))
    assert stored(fp8_recipe="delayed") - stored(fp8_recipe="delayed", fp8_attention=True) == pytest.approx(
        (2 - 1) * (q + k + v + o))


@pytest.mark.parametrize(("fields", "match"), [
    (dict(dtype="bf16"), "needs dtype fp8"),
    (dict(dtype="fp8", flash_attention=False), "needs dtype fp8 and flash_attention"),
    (dict(dtype="fp8", fp8_recipe="blockwise"), "no fused fp8 attention for block scaling"),
])
def test_layouts_that_cannot_run_it_are_refused(fields: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Layout(global_batch=1, seq_len=32, fp8_attention=True, **fields)


def test_engines_without_it_and_the_flash2_kernel_are_refused() -> None:
    model = tiny()
    with pytest.raises(PlannerError, match="engine torchtitan cannot run fp8_attention"):
        check_layout(model, Layout(global_batch=1, seq_len=32, dtype="fp8", fp8_attention=True,
                                   engine="torchtitan"), 1)
    with pytest.raises(PlannerError, match="attention_kernel flash2 runs FlashAttention-2 in 16 bits"):
        check_layout(model, Layout(global_batch=1, seq_len=32, dtype="fp8", fp8_attention=True,
                                   attention_kernel="flash2"), 1)


def test_shipped_tables_hold_the_cudnn_benchmark_ratios() -> None:
    # NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results @ 3929da2, causal, non-deterministic backward.
    # dsv3/gb300/dsv3_20260424_101002.csv, 4,096 tokens: bf16 fwd 0.864 + bwd 3.127 ms, MXFP8 0.546 + 2.348 ms
    gb300 = load_hardware("gb300-nvl72").spec
    assert float(fp8_attention_speedup(gb300, 4096, 192, True)) == pytest.approx((0.864 + 3.127) / (0.546 + 2.348),
                                                                                 abs=0.005)
    # h200_919_only_cudnn/llama3.1_20260227_034703.csv, 16,384 tokens: bf16 6.531 + 19.002 ms, fp8 4.357 + 29.422 ms
    h100 = load_hardware("h100-sxm").spec  # the same SM90 kernels
    assert float(fp8_attention_speedup(h100, 16384, 128, False)) == pytest.approx((6.531 + 19.002) / (4.357 + 29.422),
                                                                                  abs=0.005)


DENSE_FLAGS = ["--num-layers", "2", "--hidden-size", "512", "--num-attention-heads", "4", "--seq-length", "4096",
               "--max-position-embeddings", "4096", "--micro-batch-size", "1", "--global-batch-size", "8",
               "--vocab-size", "1000", "--bf16", "--use-distributed-optimizer"]


def _megatron(*flags: str) -> tuple[object, Layout]:
    from planner.engines.megatron import import_megatron
    from planner.training.rules import resolve_layout

    imported = import_megatron([*DENSE_FLAGS, *flags], gpus=8, given={}, model=None, source="args")
    return imported, resolve_layout(imported.model, 8, **imported.fields)


def test_megatron_reads_fp8_dot_product_attention_where_megatron_core_hands_it_on() -> None:
    fp8 = ("--fp8-format", "hybrid", "--fp8-recipe", "tensorwise")
    assert _megatron(*fp8, "--fp8-dot-product-attention")[1].fp8_attention
    assert not _megatron(*fp8)[1].fp8_attention
    # fp8_mha runs the same kernel (and hands its output on in fp8, not modelled): read as FP8 attention
    imported, layout = _megatron(*fp8, "--fp8-multi-head-attention")
    assert layout.fp8_attention and any("fp8-multi-head-attention" in w for w in imported.warnings)  # type: ignore[attr-defined]
    # Float8BlockScaling takes no fp8_dpa (megatron/core/fp8_utils.py): the attention stays 16-bit
    imported, layout = _megatron("--fp8-format", "hybrid", "--fp8-recipe", "blockwise", "--fp8-dot-product-attention")
    assert not layout.fp8_attention and any("read as off" in w for w in imported.warnings)  # type: ignore[attr-defined]
    with pytest.raises(PlannerError, match="--fp8-dot-product-attention runs the attention in fp8"):
        _megatron("--fp8-dot-product-attention")
