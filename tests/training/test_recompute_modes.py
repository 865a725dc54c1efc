"""Recompute as users say it: torchtitan op-level selective AC, Megatron --recompute-modules.

Tiny GPT (tests/round_specs.tiny): h 64, 4 heads of 16 (MHA), standard GeLU MLP f 256, LayerNorm (2 per
layer), dropout, flash attention, tp 1. Per token, by hand (16-bit activations e = 2):
  no recompute: norm inputs 2 x 2h = 256, post-norm GEMM inputs 2 x 2h = 256, dropout masks 2 x h = 128,
  Q, K, V 3 x 2h = 384, attention output 2h = 128, fc1 output 2f = 512, GeLU output 2f = 512,
  log-sum-exp 4 heads x 4 = 16                                            = 2,192
  op-level AC keeps the block input 2h = 128, wq and wv outputs 2 x 2h = 256, the attention output
  2h = 128 and its log-sum-exp 16, fc1's output 2f = 512 (fc2, the 6th matmul, is recomputed)   = 1,040
"""

from __future__ import annotations

import numpy as np
import pytest
from round_specs import lay, round_hw, tiny  # noqa: E402

from planner.errors import PlannerError
from planner.specs.layout import Layout
from planner.training.memory import layer_activation_bytes_per_token, stage_params
from planner.training.rules import check_layout
from planner.training.time import stage_time

FULL = 2192


def per_token(**fields):  # type: ignore[no-untyped-def]
    return layer_activation_bytes_per_token(tiny(), lay(**fields), moe_layer=False)


def test_no_recompute_baseline_by_hand() -> None:
    assert per_token().stored.tolist() == [FULL]


def test_op_level_ac_keeps_every_second_matmul_output() -> None:
    acts = per_token(recompute="op")
    assert acts.stored.tolist() == [1040]
    assert acts.working.tolist() == [FULL - 1040]


@pytest.mark.parametrize(
    ("modules", "dropped"),
    [
        (("core_attn",), 0),  # flash attention keeps no scores: nothing to drop
        (("layernorm",), 256),  # the two norm outputs
        (("mlp",), 1024),  # fc1 and GeLU outputs
        (("layernorm", "mlp"), 1280),
    ],
)
def test_megatron_recompute_modules_drop_their_tensors(modules: tuple[str, ...], dropped: int) -> None:
    acts = per_token(recompute="selective", recompute_modules=modules)
    assert acts.stored.tolist() == [FULL - dropped]
    assert acts.working.tolist() == [dropped]


def test_modules_need_selective() -> None:
    with pytest.raises(ValueError, match="recompute_modules applies only"):
        Layout(global_batch=8, seq_len=128, recompute="full", recompute_modules=("mlp",))


def _recompute_seconds(**fields) -> float:  # type: ignore[no-untyped-def]
    arrays = lay(**fields)
    zero = np.zeros(1, dtype=np.int64)
    return float(stage_time(tiny(), round_hw(), arrays, zero, stage_params(tiny(), arrays, zero)).recompute[0])


def test_recompute_time_follows_what_is_recomputed() -> None:
    none = _recompute_seconds()
    core = _recompute_seconds(recompute="selective")
    norm = _recompute_seconds(recompute="selective", recompute_modules=("layernorm",))
    mlp = _recompute_seconds(recompute="selective", recompute_modules=("mlp",))
    both = _recompute_seconds(recompute="selective", recompute_modules=("layernorm", "mlp"))
    op = _recompute_seconds(recompute="op")
    full = _recompute_seconds(recompute="full")
    assert none == core == 0.0  # flash attention: the core is not recomputed
    assert 0.0 < norm < mlp < both < full
    assert both == pytest.approx(norm + mlp)
    assert 0.0 < op < full


def test_engines_refuse_modes_they_do_not_run() -> None:
    model = tiny()
    check_layout(model, Layout(global_batch=8, seq_len=128, recompute="op", engine="torchtitan"), 1)
    with pytest.raises(PlannerError, match="engine megatron cannot run recompute op"):
        check_layout(model, Layout(global_batch=8, seq_len=128, recompute="op"), 1)
    with pytest.raises(PlannerError, match="engine fsdp cannot run recompute selective"):
        check_layout(model, Layout(global_batch=8, seq_len=128, recompute="selective", engine="fsdp"), 1)
