"""Properties of the engine-aware parts, on random small models (tests/training/test_properties.models)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from training.test_properties import models  # noqa: E402

from planner.engines.load import load_hardware
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.training.estimate import estimate
from planner.training.memory import layer_activation_bytes_per_token

MODULES = ("core_attn", "mlp", "moe_act", "layernorm", "moe", "shared_experts")
HW = load_hardware("h100-sxm").spec


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=models(), flash=st.booleans(), modules=st.lists(st.sampled_from(MODULES), min_size=1, unique=True),
       moe_layer=st.booleans(), tp=st.sampled_from([1, 2]))
def test_every_recompute_mode_keeps_no_more_than_no_recompute(model: ModelSpec, flash: bool, modules: list[str],
                                                              moe_layer: bool, tp: int) -> None:
    if model.num_attention_heads % tp:
        tp = 1
    base = dict(tp=tp, global_batch=1, seq_len=64, flash_attention=flash)
    full = layer_activation_bytes_per_token(model, Layout(**base).to_arrays(), moe_layer=moe_layer).stored
    for extra in (dict(recompute="op", engine="torchtitan", compile=True), dict(recompute="full"),
                  dict(recompute="selective", recompute_modules=tuple(modules))):
        acts = layer_activation_bytes_per_token(model, Layout(**base, **extra).to_arrays(), moe_layer=moe_layer)
        assert np.all(acts.stored <= full + 1e-9) and np.all(acts.stored > 0) and np.all(acts.working >= 0)
        # what is dropped is what the backward materialises again (up to the scores' log-sum-exp)
        assert np.all(acts.stored + acts.working <= acts.full + 1e-9)
    # Eager op-level AC keeps besides the gated MLP's w2 output, which no backward reads (2h bytes per token).
    eager = layer_activation_bytes_per_token(model, Layout(**base, recompute="op", engine="torchtitan").to_arrays(),
                                             moe_layer=moe_layer)
    unread = 2 * model.hidden_size if model.mlp_kind == "gated" else 0
    assert np.all(eager.stored + eager.working <= eager.full + unread + 1e-9)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=models(moe_layers=False), engine=st.sampled_from(["megatron", "torchtitan", "deepspeed", "fsdp"]),
       dp=st.sampled_from([16, 32]), fraction=st.sampled_from([0.5, 0.25]))
def test_zero3_step_never_gets_faster_when_the_network_shrinks(model: ModelSpec, engine: str, dp: int,
                                                               fraction: float) -> None:
    data = HW.model_dump()
    data["network"]["bandwidth_bytes_per_s"] *= fraction
    data["network"]["nic_bits_per_s"] *= fraction
    slower = type(HW).model_validate(data)
    if model.sparse_attention is not None and engine not in ("megatron", "nemo"):
        engine = "megatron"  # only Megatron-Core's engines run DeepSeek Sparse Attention
    layout = Layout(dp=dp, zero=3, global_batch=dp, seq_len=64, engine=engine)
    assert estimate(model, slower, layout).scalar("step_seconds") >= estimate(model, HW, layout).scalar(
        "step_seconds") - 1e-12
