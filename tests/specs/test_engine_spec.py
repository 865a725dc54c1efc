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
