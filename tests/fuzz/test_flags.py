"""Malformed values for every numeric flag of every command: each is exit 2 with one `error:` line that
names the flag, before any work is done (docs/errors.md). Hypothesis draws the values: integers above the
flag's limit (planner.specs.bounds), zero and negatives, and text that is not a whole or finite number."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz.contract import assert_rejected, invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.specs.bounds import FIELD_KINDS, maximum

REPO = Path(__file__).resolve().parents[2]
MEGATRON = REPO / "tests/fixtures/engines/megatron/train_llama3_8b.sh"

TRAIN = ["-m", "llama-3.1-8b", "-w", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq-len", "4096"]
SERVE = ["-m", "llama-3.1-8b", "-w", "h100-sxm", "--input-len", "100", "--output-len", "100"]
COMMANDS: dict[str, list[str]] = {
    "estimate": ["estimate", *TRAIN],
    "search": ["search", *TRAIN],
    "infer estimate": ["infer", "estimate", *SERVE],
    "infer search": ["infer", "search", *SERVE, "--gpus", "8"],
    "export": ["export", "--to", "megatron", *TRAIN],
    "check": ["check", "--megatron-args", str(MEGATRON), "--hardware", "h100-sxm", "--gpus", "8"],
}
TRAINING_FLAGS = ["--gpus", "--tp", "--pp", "--cp", "--dp", "--ep", "--micro-batch", "--global-batch", "--seq-len",
                  "--interleave", "--recompute-layers"]
COUNT_FLAGS: dict[str, list[str]] = {
    "estimate": TRAINING_FLAGS,
    "search": ["--gpus", "--global-batch", "--seq-len", "--tp", "--pp", "--cp", "--dp", "--ep", "--micro-batch",
               "--interleave", "--top"],
    "infer estimate": ["--tp", "--pp", "--gpus", "--concurrency", "--input-len", "--output-len"],
    "infer search": ["--gpus", "--input-len", "--output-len", "--max-pp", "--top"],
    "export": TRAINING_FLAGS,
    "check": TRAINING_FLAGS,
}
REAL_FLAGS: dict[str, list[str]] = {
    "estimate": ["--headroom"],
    "search": ["--headroom", "--price-per-gpu-hour", "--tokens"],
    "infer estimate": ["--headroom"],
    "infer search": ["--headroom", "--ttft-max", "--tpot-max"],
    "export": ["--headroom"],
    "check": ["--headroom"],
}
CASES = [(cmd, flag) for cmd, flags in COUNT_FLAGS.items() for flag in flags]
REAL_CASES = [(cmd, flag) for cmd, flags in REAL_FLAGS.items() for flag in flags]
FUZZ = settings(max_examples=5, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])


def with_flag(command: str, flag: str, value: str) -> list[str]:
    args = list(COMMANDS[command])
    if flag in args:
        args[args.index(flag) + 1] = value
        return args
    return [*args, flag, value]


def kind(flag: str) -> str:
    return FIELD_KINDS[flag.lstrip("-").replace("-", "_")]


NOT_WHOLE = st.sampled_from(["1.5", "2.0", "1e30", "1e3", "nan", "inf", "-inf", "", " ", "two", "0x10", "1_000",
                             "true", "8,", "--", "99999999999999999999999.0"])


def malformed_count(flag: str) -> st.SearchStrategy[str]:
    limit = int(maximum(kind(flag)))
    too_big = st.one_of(st.integers(limit + 1, 2 * limit), st.integers(2**63 - 1, 10**40)).map(str)
    return st.one_of(too_big, st.integers(max_value=0).map(str), NOT_WHOLE)


@pytest.mark.parametrize(("command", "flag"), CASES, ids=[f"{c}{f}" for c, f in CASES])
@FUZZ
@given(data=st.data())
def test_malformed_count_is_one_error_line(command: str, flag: str, data: st.DataObject) -> None:
    value = data.draw(malformed_count(flag))
    assert_rejected(with_flag(command, flag, value), f"'{flag}'")


@pytest.mark.parametrize(("command", "flag"), CASES, ids=[f"{c}{f}" for c, f in CASES])
def test_count_above_the_limit_gives_the_limit(command: str, flag: str) -> None:
    limit = int(maximum(kind(flag)))
    assert_rejected(with_flag(command, flag, str(limit + 1)), f"'{flag}'", f"limit of {limit:,}")


@pytest.mark.parametrize("flag", ["--tp", "--pp", "--cp", "--dp", "--ep", "--micro-batch", "--interleave"])
def test_search_list_item_above_the_limit(flag: str) -> None:
    assert_rejected(with_flag("search", flag, f"1,{10**30}"), f"'{flag}'", "limit of")


MALFORMED_REAL = st.sampled_from(["nan", "NaN", "inf", "-inf", "1e999", "1e400", "-1", "", "abc", "1e999T", "1e999ms"])


@pytest.mark.parametrize(("command", "flag"), REAL_CASES, ids=[f"{c}{f}" for c, f in REAL_CASES])
@FUZZ
@given(value=MALFORMED_REAL)
def test_malformed_real_is_one_error_line(command: str, flag: str, value: str) -> None:
    assert_rejected(with_flag(command, flag, value), f"'{flag}'")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_valid_controls_still_pass(command: str) -> None:
    result, _ = invoke(COMMANDS[command])
    assert result.exit_code in (0, 1), result.output
    assert result.stdout


@pytest.mark.parametrize("gpus", ["1048576", "720720"])
@pytest.mark.parametrize("command", ["search", "infer search"])
def test_search_time_does_not_grow_with_the_gpu_count(command: str, gpus: str) -> None:
    # divisors are enumerated up to sqrt(gpus); 720720 has 240 of them, the most of any count below the limit
    args = with_flag(command, "--gpus", gpus)
    if command == "search":
        args[args.index("--global-batch") + 1] = gpus  # one sequence per data-parallel rank at most
    result, seconds = invoke([*args, "--format", "json", "--top", "1"])
    assert result.exit_code == 0, result.output
    assert seconds < 2.0


@pytest.mark.parametrize("command", ["search", "infer search"])
def test_a_billion_gpus_is_refused_at_once(command: str) -> None:
    assert_rejected(with_flag(command, "--gpus", "1000000000"), "'--gpus'", "limit of 1,048,576 GPUs")


USAGE_ERRORS = [
    (["estimate", "--nope"], "--nope"),
    (["search", "-m", "llama-3.1-8b"], "--hardware"),
    (["schema", "nope"], "nope"),
    (["models", "show", "no-such-model"], "no-such-model"),
    (["hardware", "show", "no-such-gpu"], "no-such-gpu"),
    (["check"], "job files"),
    (["check", "--megatron-args", MEGATRON, "--gpus", "8"], "--megatron-args needs --hardware"),
    (["check", "--deepspeed", REPO / "tests/fixtures/engines/deepspeed/zero3_bf16.json", "--hardware", "h100-sxm"],
     "--deepspeed needs --gpus"),
    (["export", "--to", "megatron"], "give a job file"),
    (["infer", "search", *SERVE], "--gpus"),
    (["validate", "--nope"], "--nope"),
]


@pytest.mark.parametrize(("args", "needle"), USAGE_ERRORS, ids=[" ".join(map(str, a[:2])) for a, _ in USAGE_ERRORS])
def test_usage_error_is_one_line_naming_the_flag(args: list[object], needle: str) -> None:
    assert_rejected(args, needle)


@pytest.mark.parametrize("length", [81, 10_000])
def test_a_long_bad_value_is_echoed_by_its_start_end_and_length(tmp_path, length: int) -> None:
    """A long bad value is named by its first 40 and last 20 characters and its length, in an option (click's
    message) and in a job file (planner's own), so the one error line stays short."""
    value = "a" * (length - 4) + ".bad"
    line = assert_rejected(["estimate", "-m", "llama-3.1-8b", "-w", "h100-sxm", "--gpus", "8", "--global-batch", "8",
                            "--recompute", value], "--recompute", f"({length:,} characters)", "...aaaaaaaaaaaaaaaa.bad'")
    assert len(line) < 300
    job = tmp_path / "job.yaml"
    job.write_text(f"model: llama-3.1-8b\nhardware: h100-sxm\ngpus: 8\ntraining: {{seq_len: '{value}'}}\n",
                   encoding="utf-8")
    line = assert_rejected(["check", job], "training.seq_len", f"({length:,} characters)", folder=tmp_path)
    assert len(line) < 300 + len(str(job))


def test_a_short_bad_value_is_echoed_whole() -> None:
    value = "b" * 79
    assert_rejected(["estimate", "-m", "llama-3.1-8b", "-w", "h100-sxm", "--gpus", "8", "--global-batch", "8",
                     "--recompute", value], f"'{value}'")
