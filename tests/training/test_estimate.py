"""estimate(): one layout's every stage, the peak, fits against capacity and headroom, JSON, input checks."""

from __future__ import annotations

import pytest

from planner.engines.load import load_hardware, load_model
from planner.errors import PlannerError
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.training.estimate import DEFAULT_HEADROOM, MEMORY_KEYS, estimate, estimate_many

H100 = load_hardware("h100-sxm").spec
A100 = load_hardware("a100-80gb").spec


def tiny(**overrides) -> ModelSpec:
    fields = dict(name="tiny GPT", num_layers=10, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256,
                  mlp_kind="standard", vocab_size=100, max_seq_len=256, norm_kind="layernorm", dropout=True)
    fields.update(overrides)
    return ModelSpec(**fields)


def test_llama3_405b_stages_follow_the_published_split():
    # Llama 3 405B: 126 layers on 16 stages, one fewer on the first and the last (Dubey et al. 2024):
    # 7 + 14 x 8 + 7 = 126.
    layout = Layout(tp=8, pp=16, dp=1, micro_batch=1, global_batch=16, seq_len=8192, sequence_parallel=True)
    result = estimate(load_model("llama-3.1-405b").spec, H100, layout)
    assert [s.layers for s in result.stages] == [7] + [8] * 14 + [7]
    assert [s.stage for s in result.stages] == list(range(16))


def test_every_stage_is_reported_and_the_heaviest_governs():
    # 10 layers on 4 stages: [2, 3, 3, 2].
    result = estimate(tiny(), H100, Layout(pp=4, global_batch=8, seq_len=64))
    assert [s.layers for s in result.stages] == [2, 3, 3, 2]
    totals = [s.total_bytes for s in result.stages]
    assert result.peak_stage == totals.index(max(totals))
    assert result.scalar("peak_bytes") == pytest.approx(max(totals), rel=1e-12)
    memory = result.to_json()["memory"]
    for key in MEMORY_KEYS:
        assert memory[key] == getattr(result.stages[result.peak_stage], key)


def test_deepseek_v3_peak_is_its_heaviest_stage():
    # DeepSeek-V3: 61 layers, the first 3 dense. pp = 32: 61 = 32 x 1 + 29, so stages 1..29 get 2 layers and
    # stages 0, 30, 31 one: [1, 2 x 29, 1, 1]. Stage 0 = layer 0 (dense), stage 1 = layers 1-2 (dense),
    # stage 2 = layers 3-4, the first two MoE layers (256 routed experts each, ep 1), with 30 micro-batches in
    # flight against stage 31's one MoE layer and one micro-batch. Stage 2 is the heaviest; the estimate's peak
    # and verdict must be stage 2's.
    layout = Layout(tp=8, pp=32, dp=1, global_batch=64, seq_len=4096, sequence_parallel=True, recompute="full",
                    mtp_layers=0)  # without the MTP module, which would make the last stage the heaviest
    result = estimate(load_model("deepseek-v3").spec, load_hardware("h200").spec, layout)
    totals = [s.total_bytes for s in result.stages]
    assert [s.layers for s in result.stages] == [1] + [2] * 29 + [1, 1]
    assert totals.index(max(totals)) == 2
    assert result.peak_stage == 2
    assert result.scalar("peak_bytes") == pytest.approx(max(totals))


def test_fits_is_peak_within_capacity_less_headroom():
    result = estimate(tiny(), H100, Layout(global_batch=8, seq_len=64))
    peak, capacity = result.scalar("peak_bytes"), H100.accelerator.memory_bytes
    assert result.capacity_bytes == capacity
    assert result.usable_bytes == pytest.approx(capacity * (1 - DEFAULT_HEADROOM))
    assert result.fits
    # A headroom that leaves just less than the peak usable makes it not fit; just more, fit.
    tight = 1 - peak / capacity
    assert not estimate(tiny(), H100, Layout(global_batch=8, seq_len=64), headroom=tight + 1e-9).fits
    assert estimate(tiny(), H100, Layout(global_batch=8, seq_len=64), headroom=tight - 1e-9).fits


def test_a_layout_that_does_not_fit_is_still_estimated():
    # GPT-3 175B on 8 A100s without pipelining: ~2.8 TB of model states; estimated, fits = False.
    result = estimate(load_model("gpt3-175b").spec, A100, Layout(tp=8, global_batch=8, seq_len=2048))
    assert not result.fits
    assert result.scalar("peak_bytes") > A100.accelerator.memory_bytes
    assert result.scalar("step_seconds") > 0


def test_json_has_the_documented_keys():
    data = estimate(tiny(), H100, Layout(tp=2, pp=2, dp=2, global_batch=8, seq_len=64)).to_json()
    assert {"config", "memory", "stages", "fits", "time", "throughput"} <= set(data)
    assert set(MEMORY_KEYS) | {"capacity_bytes"} <= set(data["memory"])
    assert {"step_seconds", "compute_seconds", "communication_seconds", "bubble_seconds"} <= set(data["time"])
    assert {"tokens_per_second", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu"} <= set(data["throughput"])
    assert len(data["stages"]) == 2
    for stage in data["stages"]:
        assert set(MEMORY_KEYS) <= set(stage)
    # The resolved layout: 8 GPUs, 8 / (dp 2 x micro 1) = 4 micro-batches.
    assert data["config"]["gpus"] == 8
    assert data["config"]["num_micro_batches"] == 4
    assert data["config"]["tp"] == 2 and data["config"]["dp"] == 2
    assert isinstance(data["fits"], bool)


@pytest.mark.parametrize("headroom", [-0.1, 1.0, 1.5])
def test_headroom_outside_0_1_is_an_error(headroom):
    with pytest.raises(PlannerError, match="headroom"):
        estimate(tiny(), H100, Layout(global_batch=8, seq_len=64), headroom=headroom)


def test_fp8_on_a_chip_without_fp8_is_an_error():
    with pytest.raises(PlannerError, match="no fp8 peak"):
        estimate(tiny(), A100, Layout(global_batch=8, seq_len=64, dtype="fp8"))


def test_fp8_on_h100_runs():
    assert estimate(tiny(), H100, Layout(global_batch=8, seq_len=64, dtype="fp8")).scalar("step_seconds") > 0


def test_rule_violations_raise_with_the_arithmetic():
    with pytest.raises(PlannerError, match=r"num_attention_heads\(4\) is not divisible by tp\(8\)"):
        estimate(tiny(), H100, Layout(tp=8, global_batch=8, seq_len=64))


def _many_layouts() -> list[Layout]:
    # Mixed depths (stage rows of different lengths in one grid), two engines (costed as separate grids),
    # DualPipe beside 1F1B (its paired rows only where it is on), recompute and ZeRO variety.
    return [
        Layout(tp=2, pp=4, dp=2, micro_batch=1, global_batch=16, seq_len=1024, sequence_parallel=True,
               schedule="dualpipe", mtp_layers=0),
        Layout(tp=1, pp=1, dp=16, zero=3, global_batch=32, seq_len=2048, engine="torchtitan"),
        Layout(tp=4, pp=2, dp=2, zero=1, global_batch=16, seq_len=4096, sequence_parallel=True, recompute="full",
               mtp_layers=0),
        Layout(tp=2, pp=8, dp=1, interleave=1, global_batch=32, seq_len=1024, sequence_parallel=True, mtp_layers=0),
        Layout(tp=1, pp=2, dp=8, zero=1, global_batch=64, seq_len=512, recompute="op", engine="torchtitan"),
    ]


def test_estimate_many_gives_each_layout_what_estimate_gives_it_alone():
    # One grid over layouts of different depths, schedules and engines: every number of every layout's JSON
    # (its result and each stage row) is the one estimate() computes for that layout by itself.
    model = load_model("deepseek-v2-lite").spec
    layouts = _many_layouts()
    together = estimate_many(model, H100, layouts)
    assert [est.layout for est in together] == layouts
    for est, layout in zip(together, layouts, strict=True):
        alone = estimate(model, H100, layout).to_json()
        assert _close(est.to_json(), alone)


def _close(a, b) -> bool:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert len(a) == len(b)
        return all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-12, abs=0.0)
        return True
    assert a == b
    return True


def test_estimate_many_checks_one_layout_alone_only_where_it_breaks_a_rule(monkeypatch):
    # One check_layout per layout cost `search --format json --top 30000` twenty seconds: the rules run over one grid
    # per (engine, gpus), and the one-layout check, for its message, only on a layout that breaks one; the error is
    # still the first bad layout's.
    import planner.training.estimate as module

    checked = []
    real = module.check_layout
    monkeypatch.setattr(module, "check_layout", lambda m, lay, g: (checked.append(lay), real(m, lay, g)))
    model = tiny()
    good = [Layout(global_batch=8, seq_len=64), Layout(pp=2, global_batch=8, seq_len=64),
            Layout(dp=2, global_batch=8, seq_len=64, engine="torchtitan")]
    assert len(estimate_many(model, H100, good)) == 3 and checked == []
    first, second = Layout(tp=3, global_batch=8, seq_len=64), Layout(pp=20, global_batch=20, seq_len=64)
    with pytest.raises(PlannerError, match=r"tp\(3\)"):
        estimate_many(model, H100, [*good, first, second])
    assert checked == [first]


def test_estimate_many_checks_every_layout_and_takes_none():
    model = tiny()
    assert estimate_many(model, H100, []) == []
    bad = Layout(tp=3, global_batch=8, seq_len=64)  # 4 heads over tp 3
    with pytest.raises(PlannerError):
        estimate_many(model, H100, [Layout(global_batch=8, seq_len=64), bad])


def test_estimate_many_gives_the_first_bad_layouts_error_whichever_check_it_fails():
    # A layout with a dtype the chip lacks, then one that breaks a rule: the first one's error, as estimate() of each
    # in turn gives it (the rules over the grid must not run ahead of the dtype check).
    model = tiny()
    no_fp8, bad_tp = Layout(global_batch=8, seq_len=64, dtype="fp8"), Layout(tp=3, global_batch=8, seq_len=64)
    with pytest.raises(PlannerError, match="fp8"):
        estimate_many(model, A100, [no_fp8, bad_tp])
    with pytest.raises(PlannerError, match=r"tp\(3\)"):
        estimate_many(model, A100, [bad_tp, no_fp8])
