"""Diagnosis and fixes for layouts that do not fit: every suggestion must fit when estimated on its own."""

from __future__ import annotations

import pytest

from planner.engines.load import load_hardware, load_model
from planner.search.suggest import diagnose, suggest
from planner.training.estimate import estimate
from planner.training.rules import check_layout, resolve_layout

HW = load_hardware("h100-sxm").spec


def _est(model_id: str, gpus: int, **fields):
    model = load_model(model_id).spec
    return model, estimate(model, HW, resolve_layout(model, gpus, **fields))


OOM_CASES = [
    ("llama-3.1-70b", 32, dict(tp=4, pp=2, zero=1, recompute="selective", micro_batch=2, global_batch=256,
                               seq_len=8192)),
    ("llama-3.1-8b", 8, dict(zero=1, recompute="selective", micro_batch=1, global_batch=64, seq_len=8192)),
    ("llama-3.1-8b", 8, dict(zero=0, recompute="none", micro_batch=4, global_batch=64, seq_len=4096)),
]


@pytest.mark.parametrize(("model_id", "gpus", "fields"), OOM_CASES)
def test_every_suggestion_fits_when_estimated_alone(model_id, gpus, fields):
    model, est = _est(model_id, gpus, **fields)
    assert not est.fits
    fixes = suggest(model, HW, est)
    assert fixes, "at least one verified change"
    for fix in fixes:
        check_layout(model, fix.layout, fix.gpus)  # breaks no layout rule
        alone = estimate(model, HW, fix.layout, headroom=est.headroom)
        assert alone.fits, fix.description
        assert alone.stages[alone.peak_stage].total_bytes == pytest.approx(fix.peak_bytes)
        assert fix.saves_bytes == pytest.approx(est.stages[est.peak_stage].total_bytes - fix.peak_bytes)
        assert fix.step_seconds == pytest.approx(alone.scalar("step_seconds"))


def test_single_changes_come_first_and_name_from_and_to():
    model, est = _est(*OOM_CASES[1][:2], **OOM_CASES[1][2])
    fixes = suggest(model, HW, est)
    assert all(" + " not in f.description for f in fixes)
    descriptions = [f.description for f in fixes]
    assert "recompute selective -> full" in descriptions
    recompute = next(f for f in fixes if f.description == "recompute selective -> full")
    assert recompute.changes == {"recompute": ("selective", "full")}
    assert recompute.summary().startswith("recompute selective -> full saves ")
    assert len({f.description.split(" ")[0] for f in fixes}) == len(fixes)  # one per knob


def test_pairs_are_offered_when_no_single_change_fits():
    model, est = _est(*OOM_CASES[0][:2], **OOM_CASES[0][2])
    fixes = suggest(model, HW, est)
    assert fixes and all(" + " in f.description for f in fixes)


def test_diagnosis_names_stage_bytes_over_and_dominant_term():
    model, est = _est(*OOM_CASES[0][:2], **OOM_CASES[0][2])
    d = diagnose(est)
    stage = est.stages[est.peak_stage]
    assert d.stage == est.peak_stage
    assert d.over_bytes == pytest.approx(stage.total_bytes - est.usable_bytes) and d.over_bytes > 0
    parts = {k: getattr(stage, f"{k}_bytes") for k in ("weights", "gradients", "optimizer", "activations", "other")}
    assert d.dominant == max(parts, key=parts.get)


def test_hopeless_layout_gets_no_suggestion():
    model, est = _est("llama-3.1-405b", 8, zero=0, recompute="none", micro_batch=8, global_batch=64, seq_len=8192)
    assert suggest(model, HW, est) == []


@pytest.mark.parametrize("engine", ["torchtitan", "megatron", "deepspeed"])
def test_engine_suggestions_are_layouts_that_engine_runs(engine):
    """With the job's engine, a candidate is mapped onto what that engine runs before it is estimated: each
    suggestion is its own engine_layout (torchtitan: ZeRO 0 or 3 only, SP with TP), and still fits alone."""
    from planner.engines.export import exporter

    mapper = exporter(engine)[0]
    model, est = _est("llama-3.1-8b", 8, zero=0, recompute="full", micro_batch=1, global_batch=64, seq_len=4096,
                      grad_dtype="fp32")
    assert not est.fits
    fixes = suggest(model, HW, est, engine=mapper)
    assert fixes
    for fix in fixes:
        assert mapper(model, fix.layout)[0] == fix.layout, fix.description
        alone = estimate(model, HW, fix.layout, headroom=est.headroom)
        assert alone.fits and alone.stages[alone.peak_stage].total_bytes == pytest.approx(fix.peak_bytes)
    if engine == "torchtitan":
        assert all(f.layout.zero in (0, 3) for f in fixes)
        assert "zero 0 -> 3" in [f.description for f in fixes]
    else:
        assert "zero 0 -> 1" in [f.description for f in suggest(model, HW, est, engine=mapper)]
