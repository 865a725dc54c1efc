"""Golden tests: every published training figure in training_cases.yaml and memory_cases.yaml within its
tolerance, the step-time rows together within the issue's bounds, and every published run predicted to fit.

The tolerances themselves are pinned to the issue's bounds below, so that a case cannot pass by a quiet
widening of its tolerance in the YAML.
"""

from __future__ import annotations

import statistics

import pytest

from planner.engines.load import load_hardware
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.training.estimate import estimate
from planner.validate import ValidationRow
from planner.validate.training import memory_cases, published_cases, rows, training_cases, training_rows

ROWS = rows()


@pytest.mark.parametrize("row", ROWS, ids=[r.case_id for r in ROWS])
def test_row_within_its_tolerance(row: ValidationRow) -> None:
    assert abs(row.error) <= row.tolerance, (
        f"{row.case_id} ({row.group}): predicted {row.predicted:.4g} {row.unit}, published {row.published:.4g}, "
        f"error {100 * row.error:+.1f}% beyond +-{100 * row.tolerance:.0f}%"
    )


# What the issue asks of each group; a case's tolerance may be tighter, never looser.
MAX_TOLERANCE = {
    "ZeRO paper Figure 1 (model states per GPU)": 0.01,
    "ZeRO paper Table 1 (model states per GPU)": 0.01,
    "Korthikanti et al. 2022, Table 2 activations (t = 8, s = 2048)": 0.03,
    "Narayanan et al. 2021, Table 1 (A100, Selene)": 0.10,
    "Megatron-LM README 2024, H100 weak scaling": 0.15,
    "NeMo 24.07 DGX-H100 FP8 (modern)": 0.15,  # issue 10: every modern row within 15%
    "NeMo long-sequence table (H100, NeMo 24.03.01)": 0.15,  # issue 10's bound, long-context CP runs
    "NeMo AutoModel performance summary (H100 BF16)": 0.35,  # issue 16's bound for held-out MoE runs (max 35%)
}


# Figures printed more coarsely than the group's bound: the tolerance may cover the printed rounding, no more.
# ZeRO Figure 1 prints 16 x 7.5e9 / 64 = 1.875 GB as "1.9GB": half a unit of the last digit, 0.05/1.9 = 2.6%,
# allowed as the whole percent above it. (The formula itself is held to 1% in test_memory.py.)
ROUNDED_IN_PRINT = {"zero_fig1_7p5B_nd64_pos_g_p": 0.03}


def test_tolerances_are_the_issues_bounds() -> None:
    groups = {row.group for row in ROWS}
    assert set(MAX_TOLERANCE) <= groups, f"missing groups: {set(MAX_TOLERANCE) - groups}"
    for row in ROWS:
        bound = max(MAX_TOLERANCE.get(row.group, 0.25), ROUNDED_IN_PRINT.get(row.case_id, 0.0))
        assert row.tolerance <= bound, f"{row.case_id}: tolerance {row.tolerance}"


def test_every_published_table_row_is_a_case() -> None:
    # Narayanan et al. 2021 Table 1 has 10 rows (1.7B to 1T); the Megatron-LM 2024 H100 table 9 (1.7B to 462B);
    # ZeRO Figure 1 four bars; Korthikanti Table 2 four models x four columns.
    counts: dict[str, int] = {}
    for row in ROWS:
        counts[row.group] = counts.get(row.group, 0) + 1
    assert counts["Narayanan et al. 2021, Table 1 (A100, Selene)"] == 10
    assert counts["Megatron-LM README 2024, H100 weak scaling"] == 9
    assert counts["ZeRO paper Figure 1 (model states per GPU)"] == 4
    assert counts["Korthikanti et al. 2022, Table 2 activations (t = 8, s = 2048)"] == 16
    validated = [c for c in published_cases() if c.get("validated", True)]
    assert counts["NeMo 24.07 DGX-H100 FP8 (modern)"] == 12  # every row gated (docs/validation.md)
    # NeMo's long-sequence table, LLAMA2-7B (FP8) - H100: nine sequence lengths, 4K to 1M, predicted only
    assert counts["NeMo long-sequence table (H100, NeMo 24.03.01)"] == 9
    assert len(ROWS) == len(training_cases()) + len(validated) + sum(len(v) for v in memory_cases().values())
    assert len({row.case_id for row in ROWS}) == len(ROWS)
    assert all(row.source for row in ROWS)


# Whole-step quantities (step time, or per-GPU TFLOP/s at fixed FLOPs, which is step time inverted).
STEP_QUANTITIES = {"step seconds", "tokens per second", "model tflops per gpu", "hardware tflops per gpu"}


def step_rows() -> list[ValidationRow]:
    """The dense-era step rows issue 10's held-out bounds (median 10%, max 25%) apply to; a group held to a
    looser bound of its own issue (MAX_TOLERANCE above 0.25: the MoE runs of issue 16) is checked by it."""
    return [row for row in training_rows()
            if row.quantity in STEP_QUANTITIES and MAX_TOLERANCE.get(row.group, 0.25) <= 0.25]


def test_step_time_rows_median_within_10_percent_none_beyond_25() -> None:
    errors = [abs(row.error) for row in step_rows()]
    assert len(errors) >= 19
    assert statistics.median(errors) <= 0.10, f"median |error| {100 * statistics.median(errors):.1f}%"
    worst = max(step_rows(), key=lambda r: abs(r.error))
    assert abs(worst.error) <= 0.25, f"{worst.case_id}: {100 * worst.error:+.1f}%"


# Published runs ran, so they must be predicted to fit. Korthikanti et al.'s Table 4 cases are one-layer
# timings, not runs of the whole 22B model in that layout (the paper's Figure 1 shows the model without
# recomputation needing more than the 80 GB), so they are not held to this.
# The NeMo 24.07 runs too (all ran on 80 GB H100). A run predicted not to fit at the default headroom is an open
# defect of the memory model, kept visible as a strict xfail. (Nemotron-4 340B was one at 77.6 GiB while its
# Adam state was taken as fp32 with an fp32 master copy; its recipe keeps bf16 state and no master copy.)
OPEN_MEMORY_DEFECTS: dict[str, str] = {
    # none open. DeepSeek's own run (dsv3_report_h800_2048) was one at 81.5 GiB against 70.8 usable while its
    # SwiGLU inputs were kept in 16 bits and the H800 was given its decimal datasheet 80 GB: the run caches those
    # inputs in FP8 (DeepSeek-V3 technical report Sec. 3.3.3, activation_input_fp8) and the board holds the
    # H100's 81,090 MiB (hardware_profiles/h800.yaml); it is now 71.4 GiB against 75.2.
}
# Narayanan et al.'s 530B ZeRO-3 row at micro-batch 4 on 640 GPUs ran at the edge of memory (it did not fit on 560);
# the paper does not print DeepSpeed's activation-checkpointing options (cpu_checkpointing moves the 105 layer
# checkpoints, about 35 GB at this micro-batch, to host memory), so its fit is not decidable here: planner predicts
# about 96 GiB with the checkpoints on the GPU. Its throughput row is still checked.
FIT_UNDECIDABLE = {"ptdp_table2_zero3_529.6B_640gpus"}
RUNS = [case for case in training_cases()
        if case["published"]["quantity"] != "layer_forward_backward_seconds" and case["id"] not in FIT_UNDECIDABLE] + [
    # NeMo 24.07 (80 GB H100), the Megatron-Bridge MoE rows (no notes mention CPU offload) and
    # torchtitan's (96 GB H100)
    case for case in published_cases() if case["id"].startswith(("nemo2407", "mb25", "tt24"))
]


def cases_with_open(cases: list[dict], open_cases: dict[str, str]) -> list:
    """The cases as pytest parameters, those in `open_cases` a strict expected failure with its reason."""
    return [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=open_cases[c["id"]]), id=c["id"])
            if c["id"] in open_cases else pytest.param(c, id=c["id"]) for c in cases]


@pytest.mark.parametrize("case", cases_with_open(RUNS, OPEN_MEMORY_DEFECTS))
def test_published_run_is_predicted_to_fit(case: dict) -> None:
    model = ModelSpec.model_validate(case["model"])
    layout = Layout.model_validate(case["layout"])
    assert layout.gpus == case["gpus"]
    result = estimate(model, load_hardware(case["hardware"]).spec, layout)
    assert result.fits, (
        f"{case['id']}: predicted peak {result.scalar('peak_bytes') / 1e9:.1f} GB on stage {result.peak_stage} "
        f"> usable {result.usable_bytes / 1e9:.1f} GB"
    )


# What EP 64 across 8 DGX B200 nodes costs against EP 8 inside one, gpt-oss-120b bf16 on 64 B200, GBS 1,280, MBS 4,
# seq 4,096: Megatron-Bridge docs/performance-summary-archive.md @067f987df0, 26.02 container EP 64 8,047
# tokens/s/GPU, 26.02.01 container EP 8 13,722 (GB200, whose EP 64 stays in the NVL72 rack, 15,784 -> 15,754 between
# the same two releases). Step = 1,280 x 4,096 / (tokens/s/GPU x 64). The difference isolates the all-to-all's
# network tier (7/8 of each transfer through the GPU's own NIC at EP 64); the device-side time the model misses on
# gpt-oss (docs/cost-model.md 12.8) is common to both and cancels. 15%: the bound of the published MoE rows.
B200_GPT_OSS_EP64_STEP_S = 1280 * 4096 / (8047 * 64)
B200_GPT_OSS_EP8_STEP_S = 1280 * 4096 / (13722 * 64)


def test_ep_leaving_the_b200_node_costs_what_the_published_tables_show() -> None:
    case = next(c for c in published_cases() if c["id"] == "mb2511_b200_gptoss120b_bf16")
    model = ModelSpec.model_validate(case["model"])
    hw = load_hardware(case["hardware"]).spec

    def step(ep: int) -> float:
        layout = Layout.model_validate({**case["layout"], "ep": ep, "global_batch": 1280, "micro_batch": 4})
        return estimate(model, hw, layout).scalar("step_seconds")

    published = B200_GPT_OSS_EP64_STEP_S - B200_GPT_OSS_EP8_STEP_S
    assert step(64) - step(8) == pytest.approx(published, rel=0.15)


# Issue 16: every Megatron-Bridge 25.09/25.11 MoE row (shared/reference/published_runs_moe.yaml) within 20%. The rows
# outside are open, each a strict xfail with what the maintainers or the tables say about it (docs/validation.md).
MOE_BOUND = 0.20
OPEN_MOE_ROWS = {
    "mb2511_b200_qwen3_30b_mxfp8": "25.11 dropless at MBS 1 runs 2x slower than its token-drop twin "
    "(NVIDIA-NeMo/Megatron-Bridge issue #1998); the 25.09 FP8-CS row of the model is within 18%",
    "mb2511_h100_qwen3_30b_fp8cs": "25.11 dropless at MBS 1 runs 2x slower than 25.09's 12.5 s on the same layout "
    "(NVIDIA-NeMo/Megatron-Bridge issue #1998)",
    "mb2511_b200_qwen3_235b_mxfp8": "the all-to-all overlap of 25.11, turned off afterwards 'due to CPU overhead' "
    "(NVIDIA-NeMo/Megatron-Bridge PR #1760); its host cost is not a term",
    "mb2509_b200_qwen3_235b_fp8cs": "Qwen3-235B-A22B on B200 runs eager on an x86 host at 21-28% fast in every "
    "release without the overlap (docs/validation.md); no mechanism found",
}
MOE_ROWS = [c for c in published_cases() if c["id"].startswith("mb25")]


@pytest.mark.parametrize("case", cases_with_open(MOE_ROWS, OPEN_MOE_ROWS))
def test_published_moe_row_within_20_percent(case: dict) -> None:
    model = ModelSpec.model_validate(case["model"])
    layout = Layout.model_validate(case["layout"])
    predicted = estimate(model, load_hardware(case["hardware"]).spec, layout).scalar("step_seconds")
    assert case["published"]["quantity"] == "step_seconds"
    error = predicted / case["published"]["value"] - 1
    assert abs(error) <= MOE_BOUND, f"{case['id']}: {100 * error:+.1f}%"


def test_the_moe_bound_covers_every_row_of_the_reference_file() -> None:
    # 23 rows: 25.09 and 25.11 on H100, B200, GB200 and the one GB300 row (published_runs_moe.yaml)
    assert len(MOE_ROWS) == 23 and set(OPEN_MOE_ROWS) <= {c["id"] for c in MOE_ROWS}
