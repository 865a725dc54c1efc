"""Malformed values of the MoE, CUDA-graph, optimizer-precision and MTP layout flags of estimate, check and export:
each is exit 2 with one `error:` line naming the flag (docs/errors.md), and a setting the chosen engine cannot
run is one line naming the setting, the engine and its source."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz.contract import assert_rejected, invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.specs.bounds import maximum

REPO = Path(__file__).resolve().parents[2]
MEGATRON = REPO / "tests/fixtures/engines/megatron/train_llama3_8b.sh"
TRAIN = ["-m", "mixtral-8x7b", "-w", "h100-sxm", "--gpus", "64", "--global-batch", "64", "--seq-len", "4096",
         "--tp", "2", "--ep", "8"]
COMMANDS: dict[str, list[str]] = {
    "estimate": ["estimate", *TRAIN],
    "export": ["export", "--to", "megatron", *TRAIN],
    "check": ["check", "--megatron-args", str(MEGATRON), "--hardware", "h100-sxm", "--gpus", "8"],
}
FUZZ = settings(max_examples=5, deadline=None, derandomize=True)
DEGREE_LIMIT = int(maximum("degree"))
LAYER_LIMIT = int(maximum("layers"))

BAD: dict[str, st.SearchStrategy[str]] = {
    "--etp": st.one_of(st.integers(max_value=0).map(str), st.integers(DEGREE_LIMIT + 1, 2 * DEGREE_LIMIT).map(str),
                       st.sampled_from(["1.5", "two", "", "nan"])),
    "--mtp-layers": st.one_of(st.integers(max_value=-1).map(str), st.integers(LAYER_LIMIT + 1).map(str),
                              st.sampled_from(["0.5", "one", ""])),
    "--moe-capacity-factor": st.one_of(st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e999", "", "abc"]),
                                       st.floats(64.001, 1e6).map(str)),
    "--cuda-graph-scope": st.sampled_from(["attn,bogus", "full_iteration", "mamba", "attn;mlp", "ATTN"]),
    "--moe-dispatcher": st.sampled_from(["flex", "nccl", "DeepEP", ""]),
    "--optimizer-state-dtype": st.sampled_from(["fp16", "fp8", "bfloat16", ""]),
    "--master-weights-dtype": st.sampled_from(["fp16", "fp8", "float32", ""]),
}
CASES = [(command, flag) for command in COMMANDS for flag in BAD]


@pytest.mark.parametrize(("command", "flag"), CASES, ids=[f"{c}{f}" for c, f in CASES])
@FUZZ
@given(data=st.data())
def test_malformed_moe_flag_is_one_error_line(command: str, flag: str, data: st.DataObject) -> None:
    value = data.draw(BAD[flag])
    assert_rejected([*COMMANDS[command], flag, value], f"'{flag}'")


@pytest.mark.parametrize(("args", "needle"), [
    (["--engine", "deepspeed", "--moe-dispatcher", "deepep"], "engine deepspeed cannot run moe_dispatcher deepep"),
    (["--engine", "torchtitan", "--zero", "3", "--moe-shared-expert-overlap"], "moe_shared_expert_overlap"),
    (["--engine", "torchtitan", "--zero", "3", "--etp", "4", "--tp", "2"], "etp(4) with tp(2)"),
    (["--engine", "megatron", "--master-weights-dtype", "bf16"], "master_weights_dtype bf16"),
    (["--engine", "fsdp", "--tp", "1", "--ep", "1", "--zero", "3", "--cuda-graph-scope", "attn"], "cuda_graph_scope attn"),
    (["--engine", "deepspeed", "--zero", "1", "--ep", "1", "--tp", "1", "--mtp-layers", "1"], "mtp_layers(1)"),
])
def test_a_setting_the_engine_cannot_run_is_one_line_naming_it(args: list[str], needle: str) -> None:
    line = assert_rejected([*COMMANDS["estimate"], *args], needle)
    assert "change it or choose another --engine" in line


def test_megatron_export_refusing_a_conflict_is_one_line() -> None:
    """--overlap-moe-expert-parallel-comm with full recompute: Megatron-Core asserts against it, and so does the
    megatron engine's rule before the exporter is reached (estimate and search refuse it alike)."""
    assert_rejected([*COMMANDS["export"], "--moe-ep-overlap", "--moe-dispatcher", "alltoall", "--recompute", "full"],
                    "engine megatron cannot run moe_ep_overlap with full_recompute", "asserts against each")


def test_overlap_with_a_dispatcher_it_does_not_run_with_is_an_engine_rule() -> None:
    assert_rejected([*COMMANDS["estimate"], "--moe-ep-overlap", "--moe-dispatcher", "allgather"],
                    "engine megatron cannot run moe_ep_overlap with moe_dispatcher allgather")


def test_valid_moe_flags_pass() -> None:
    args = [*COMMANDS["estimate"], "--etp", "1", "--moe-dispatcher", "hybridep", "--moe-ep-overlap",
            "--moe-capacity-factor", "1.25", "--cuda-graph-scope", "attn,moe_router", "--optimizer-state-dtype",
            "bf16", "--mtp-layers", "0", "--zero", "1", "--format", "json"]
    result, _ = invoke(args)
    assert result.exit_code in (0, 1), result.output


TEXT = st.text(alphabet="Etm L|()*,0123456789[]+ '\"x_", max_size=40)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=TEXT, pp=st.integers(1, 8), layers=st.integers(1, 64))
def test_pipeline_layout_text_is_read_or_refused_with_one_error(text: str, pp: int, layers: int) -> None:
    """Any --pipeline-model-parallel-layout text is parsed into stages that satisfy Megatron's checks, or refused
    with a PlannerError naming the flag; nothing else escapes."""
    from planner.engines.megatron import pipeline_layout
    from planner.errors import PlannerError

    try:
        stages = pipeline_layout(text, pp, layers, "t")
    except PlannerError as error:
        assert "--pipeline-model-parallel-layout" in str(error)
        return
    letters = [c for stage in stages for c in stage]
    assert len(stages) % pp == 0 and letters.count("t") == layers and letters[0] == "E" and letters[-1] == "L"


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.one_of(TEXT, st.integers(-3, 70).map(str)), layers=st.integers(1, 64))
def test_moe_layer_freq_text_is_read_or_refused_with_one_error(text: str, layers: int) -> None:
    """Any --moe-layer-freq text gives one 0/1 entry per layer or a PlannerError naming the flag."""
    from planner.engines.megatron import moe_layer_pattern
    from planner.errors import PlannerError

    try:
        pattern = moe_layer_pattern(text, layers, "t")
    except PlannerError as error:
        assert "--moe-layer-freq" in str(error)
        return
    assert len(pattern) == layers and set(pattern) <= {0, 1}
