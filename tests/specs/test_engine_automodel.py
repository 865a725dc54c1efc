"""The NeMo AutoModel profile: FSDP2 with Transformer Engine kernels and a bf16 model stepped by torch.optim.Adam,
whose states take the parameters' dtype (NVIDIA-NeMo/Automodel @ 36044ad3: NeMoAutoModelForCausalLM.from_config
builds in bf16; torch/optim/adam.py creates exp_avg and exp_avg_sq with zeros_like(param))."""

from __future__ import annotations

import numpy as np
import pytest
from round_specs import tiny

from planner.calibrate.published import engine_fields
from planner.errors import PlannerError
from planner.search.space import Problem
from planner.specs.engine import engine_profile
from planner.training.memory import model_state_bytes, stage_params
from planner.training.rules import resolve_layout

MODEL = tiny(mlp_kind="gated")


def test_automodel_defaults_to_bf16_weights_gradients_and_moments() -> None:
    lay = resolve_layout(MODEL, 8, zero=3, engine="automodel", global_batch=8, seq_len=128)
    assert (lay.grad_dtype, lay.master_weights_dtype, lay.optimizer_state_dtype) == ("bf16", "bf16", "bf16")
    # Megatron keeps fp32 main gradients, an fp32 master copy and fp32 moments unless told otherwise
    meg = resolve_layout(MODEL, 8, zero=1, global_batch=8, seq_len=128)
    assert (meg.grad_dtype, meg.master_weights_dtype, meg.optimizer_state_dtype) == ("fp32", "fp32", "fp32")
    # a layout's own choice wins; SGD has no moments, so nothing is defaulted for it
    own = resolve_layout(MODEL, 8, zero=3, engine="automodel", optimizer_state_dtype="fp32", global_batch=8, seq_len=128)
    assert own.optimizer_state_dtype == "fp32" and own.master_weights_dtype == "bf16"
    sgd = resolve_layout(MODEL, 8, zero=3, engine="automodel", optimizer="sgd", global_batch=8, seq_len=128)
    assert sgd.optimizer_state_dtype == "fp32"


def test_automodel_model_state_is_8_bytes_a_parameter() -> None:
    # one GPU, no sharding: bf16 weight 2 + bf16 gradient 2 + two bf16 moments 4 = 8 bytes per parameter, against
    # 2 + 4 + 12 = 18 for Megatron's fp32 main gradients, fp32 master copy and fp32 moments
    def per_param(engine: str | None) -> float:
        fields = {"engine": engine} if engine else {}
        lay = resolve_layout(MODEL, 1, global_batch=1, seq_len=128, **fields).to_arrays()
        sp = stage_params(MODEL, lay, np.zeros(1, dtype=np.int64))
        weights, grads, optim = model_state_bytes(lay, sp)
        return float((weights + grads + optim)[0] / (sp.dense + sp.expert)[0])

    assert per_param("automodel") == pytest.approx(8.0)
    assert per_param(None) == pytest.approx(18.0)


def test_search_problem_takes_the_engines_state_dtypes() -> None:
    p = Problem(gpus=8, global_batch=8, seq_len=128, engine="automodel")
    assert (p.grad_dtype, p.optimizer_state_dtype, p.master_weights_dtype) == ("bf16", "bf16", "bf16")
    assert Problem(gpus=8, global_batch=8, seq_len=128).optimizer_state_dtype == "fp32"
    assert Problem(gpus=8, global_batch=8, seq_len=128, engine="automodel", optimizer="sgd").optimizer_state_dtype == "fp32"


def test_automodel_runs_te_kernels_and_its_recompute_is_per_block() -> None:
    profile = engine_profile("automodel")
    assert profile.kernels.fused_elementwise and profile.kernels.attention_kernel == "fused"
    assert profile.context_parallel.exchange == "p2p_ring"
    with pytest.raises(PlannerError, match="selective"):
        resolve_layout(MODEL, 8, zero=3, engine="automodel", recompute="selective", global_batch=8, seq_len=128)


def test_published_rows_of_automodel_run_under_its_profile() -> None:
    assert engine_fields("am_x", "NVIDIA-NeMo/Automodel docs/performance-summary.md @ 89e3a9fd", "full") == {
        "engine": "automodel"}
    assert engine_fields("x", "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md", "full") == {}


def test_search_trains_no_mtp_under_an_engine_that_builds_none() -> None:
    # DeepSeek-V3 has one MTP layer: Megatron trains the model's (-1: its count), AutoModel's Hugging Face modeling
    # code builds none, so its candidates carry 0, as its reader reads a recipe
    from planner.engines.load import load_model
    from planner.search.space import build_space

    model = load_model("deepseek-v3").spec
    for engine, expected in (("megatron", -1), ("automodel", 0)):
        space = build_space(model, Problem(gpus=256, global_batch=512, seq_len=4096, engine=engine))
        assert set(np.unique(space.grid.mtp_layers).tolist()) == {expected}
