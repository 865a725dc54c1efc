"""Engine profiles: every field sourced, the built-in profiles valid, unknown names refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from planner.errors import PlannerError
from planner.specs.engine import ENGINE_NAMES, ENGINE_PROFILES, EngineProfile, engine_profile
from planner.specs.layout import Layout


def test_the_five_engines_the_issue_names_are_built_in() -> None:
    assert set(ENGINE_NAMES) >= {"megatron", "nemo", "torchtitan", "fsdp", "deepspeed"}
    assert Layout(global_batch=8, seq_len=128).engine == "megatron"


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_every_field_of_every_section_has_a_source(name: str) -> None:
    profile = ENGINE_PROFILES[name]
    for section in ("kernels", "zero", "schedules", "optimizer", "context_parallel", "efficiency"):
        part = getattr(profile, section)
        fields = set(type(part).model_fields) - {"sources"}
        assert fields <= set(part.sources), (name, section, fields - set(part.sources))
        assert all(part.sources[f].strip() for f in fields)


def test_a_field_without_a_source_is_refused() -> None:
    data = engine_profile("torchtitan").model_dump()
    del data["zero"]["sources"]["prefetch_units"]
    with pytest.raises(ValidationError, match="prefetch_units"):
        EngineProfile.model_validate(data)


def test_unknown_engine_names_the_known_ones() -> None:
    with pytest.raises(PlannerError, match="megatron, nemo, torchtitan, fsdp, deepspeed"):
        engine_profile("colossal")


def test_deepspeed_pipeline_limits_are_data() -> None:
    ds = engine_profile("deepspeed").schedules
    assert not ds.interleaved and ds.max_zero_with_pp == 1


def test_nemo_runs_bf16_adam_state_without_a_master_copy_megatron_keeps_fp32_main_params() -> None:
    # Apex DistributedFusedAdam under NeMo 24.07 (optim.dtype bf16 -> store_params False): the bf16 weights are
    # the master, 2 + 2 bytes of moments per parameter; Megatron-Core's distributed optimizer keeps fp32 main params.
    from planner.engines.load import load_model
    from planner.training.rules import check_layout

    model = load_model("llama-3.1-8b").spec
    fields = dict(tp=8, global_batch=8, seq_len=128, optimizer_state_dtype="bf16", master_weights_dtype="bf16")
    nemo = Layout(engine="nemo", **fields)
    check_layout(model, nemo, 8)
    assert int(nemo.to_arrays().optimizer_bytes[0]) == 4
    with pytest.raises(PlannerError, match="master_weights_dtype bf16"):
        check_layout(model, Layout(engine="megatron", **fields), 8)
