"""Hostile and malformed files of every kind planner reads: job YAML, model YAML, HuggingFace config.json,
hardware YAML, DeepSpeed JSON, Megatron-LM launch scripts and torchtitan TOML. Each is exit 2 with one
`error:` line naming the file and the field, no traceback, nothing written, in bounded time (docs/errors.md).

A table of hand-written hostile files (a FIFO, /dev/zero, nesting 100,000 deep, duplicate keys, expansion
bombs, numbers beyond 64 bits, NaN), then Hypothesis drawing malformed values for every field of each format.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from fuzz.contract import assert_rejected, invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.specs.bounds import LIMITS, MAX_FILE_BYTES

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests/fixtures"
HUGE = 99999999999999999999999  # beyond 64 bits
MEGATRON = (FIX / "engines/megatron/train_llama3_8b.sh").read_text()
GPT3_ARGS = (FIX / "engines/megatron/gpt3_175b_args.txt").read_text()
TORCHTITAN = (FIX / "engines/torchtitan/llama3_8b.toml").read_text()
AUTOMODEL = (FIX / "engines/upstream/automodel/qwen3_moe_30b_te_deepep.yaml").read_text()
DEEPSPEED = json.loads((FIX / "engines/deepspeed/zero3_bf16.json").read_text())
HF_LLAMA = json.loads((FIX / "hf/llama-3.1-8b.json").read_text())
HARDWARE = (REPO / "hardware_profiles/h100-sxm.yaml").read_text()
JOB = "model: llama-3.1-8b\nhardware: h100-sxm\ngpus: 8\nparallel:\n  tp: 2\ntraining:\n  global_batch: 64\n  seq_len: 4096\n"
MODEL = ("name: tiny\nnum_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nffn_hidden_size: 128\nvocab_size: 100\n"
         "max_seq_len: 1024\n")
FUZZ = settings(max_examples=12, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def command(kind: str, path: Path) -> list[object]:
    """The command that reads a file of `kind`."""
    return {
        "job": ["check", path],
        "model": ["models", "show", path],
        "hf": ["models", "show", path],
        "hardware": ["hardware", "show", path],
        "deepspeed": ["check", "--deepspeed", path, "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "64",
                      "--seq-len", "4096"],
        "megatron": ["check", "--megatron-args", path, "--hardware", "h100-sxm", "--gpus", "8"],
        "megatron_args": ["check", "--megatron-args", path, "--hardware", "a100-80gb", "--gpus", "1024"],
        "torchtitan": ["check", "--torchtitan", path, "--hardware", "h100-sxm", "--gpus", "64"],
        "automodel": ["check", "--automodel", path, "--hardware", "h100-sxm", "--gpus", "8"],
        "estimate_model": ["estimate", "--model", path, "--hardware", "h100-sxm", "--gpus", "8", "--global-batch", "8",
                           "--seq-len", "128"],
        "estimate_hardware": ["estimate", "--model", "llama-3.1-8b", "--hardware", path, "--gpus", "8",
                              "--global-batch", "8", "--seq-len", "128"],
        "runs": ["calibrate", path],
        "log": ["calibrate", "--log", path, "--hardware", "h100-sxm"],
        "profile": ["estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--profile", path, "--gpus", "8",
                    "--global-batch", "8", "--seq-len", "128"],
    }[kind]


SUFFIX = {"job": ".yaml", "model": ".yaml", "hf": ".json", "hardware": ".yaml", "deepspeed": ".json", "megatron": ".sh",
          "megatron_args": ".txt", "torchtitan": ".toml", "automodel": ".yaml", "estimate_model": ".yaml", "estimate_hardware": ".yaml",
          "runs": ".yaml", "log": ".log", "profile": ".yaml"}


def hf(**changes: Any) -> str:
    return json.dumps({**HF_LLAMA, **changes})


def ds(**changes: Any) -> str:
    return json.dumps({**DEEPSPEED, **changes})


def replace_line(text: str, key: str, value: str, sep: str = ":") -> str:
    out, n = re.subn(rf"(?m)^(\s*){re.escape(key)}\s*{sep}.*$", lambda m: f"{m.group(1)}{key}{' ' if sep == '=' else ''}{sep} {value}",
                     text, count=1)
    assert n == 1, key
    return out


RUNS = ("runs:\n  - job: {model: llama-3.1-8b, hardware: h100-sxm, gpus: 8, training: {global_batch: 64, seq_len: 4096}}\n"
        "    measured: {step_seconds: 1.5}\n")
DEEP = "[" * 100_000 + "]" * 100_000
BOMB = "A=xxxxxxxxxx\n" + "".join(f"{b}=${a}${a}${a}${a}${a}${a}${a}${a}${a}${a}\n" for a, b in zip("ABCDEFG", "BCDEFGH"))
HOSTILE: list[tuple[str, str, str, tuple[str, ...]]] = [
    # (id, kind, text, needles)
    ("job-duplicate-key", "job", JOB + "gpus: 16\n", ("duplicate key 'gpus' at lines 3 and 9",)),
    ("job-gpus-true", "job", JOB.replace("gpus: 8", "gpus: true"), ("gpus", "expected an integer, got true")),
    ("job-tp-string", "job", JOB.replace("tp: 2", "tp: '2'"), ("parallel.tp", "expected an integer, got '2'")),
    ("job-tp-float", "job", JOB.replace("tp: 2", "tp: 2.0"), ("parallel.tp", "expected an integer, got 2.0")),
    ("job-gpus-huge", "job", JOB.replace("gpus: 8", f"gpus: {HUGE}"), ("gpus", "limit of 1,048,576 GPUs")),
    ("job-seq-huge", "job", JOB.replace("seq_len: 4096", f"seq_len: {HUGE}"), ("training.seq_len", "limit of")),
    ("job-batch-1e30", "job", JOB.replace("global_batch: 64", "global_batch: 1.0e+30"), ("training.global_batch",)),
    ("job-headroom-nan", "job", JOB + "headroom: .nan\n", ("headroom", "finite")),
    ("job-sp-yes", "job", JOB.replace("tp: 2", "tp: 2\n  sequence_parallel: 'yes'"), ("parallel.sequence_parallel",)),
    ("job-deep", "job", "model: " + DEEP, ("nest",)),
    ("job-python-tag", "job", "!!python/object/apply:os.system ['echo hacked']\n", ("malformed YAML",)),
    ("job-list", "job", "- 1\n- 2\n", ("expected a mapping",)),
    ("job-binary", "job", "\x00\x01\x02", ("malformed YAML",)),
    ("job-inline-model-huge", "job", JOB.replace("model: llama-3.1-8b", "model: {" + MODEL.strip().replace("\n", ", ")
                                                 .replace("hidden_size: 64", f"hidden_size: {HUGE}") + "}"), ("hidden_size",)),
    ("model-hidden-huge", "model", MODEL.replace("hidden_size: 64", f"hidden_size: {HUGE}"), ("hidden_size", "limit of")),
    ("model-hidden-string", "model", MODEL.replace("hidden_size: 64", "hidden_size: '64'"), ("hidden_size",)),
    ("model-layers-float", "model", MODEL.replace("num_layers: 2", "num_layers: 2.0"), ("num_layers",)),
    ("model-vocab-inf", "model", MODEL.replace("vocab_size: 100", "vocab_size: .inf"), ("vocab_size", "finite")),
    ("model-duplicate", "model", MODEL + "num_layers: 4\n", ("duplicate key 'num_layers' at lines 2 and 8",)),
    ("hf-hidden-1e20", "hf", hf(hidden_size=1e20), ("hidden_size",)),
    ("hf-layers-huge", "hf", hf(num_hidden_layers=10**30), ("num_hidden_layers", "limit of")),
    ("hf-heads-true", "hf", hf(num_attention_heads=True), ("num_attention_heads",)),
    ("hf-deep", "hf", DEEP, ("nest",)),
    ("hf-duplicate", "hf", '{"model_type": "llama",\n "hidden_size": 4096,\n "hidden_size": 8192}',
     ("duplicate key 'hidden_size' at lines 2 and 3",)),
    ("hf-nan", "hf", json.dumps(HF_LLAMA)[:-1] + ', "x_fuzz_value": NaN}', ("x_fuzz_value", "not a finite number")),
    ("hf-1e400", "hf", json.dumps(HF_LLAMA)[:-1] + ', "x_fuzz_value": 1e400}', ("x_fuzz_value", "not a finite number")),
    ("hardware-memory-huge", "hardware", replace_line(HARDWARE, "memory_bytes", str(HUGE)), ("memory_bytes", "limit of")),
    ("hardware-memory-true", "hardware", replace_line(HARDWARE, "memory_bytes", "true"), ("memory_bytes",)),
    ("hardware-gpus-float", "hardware", replace_line(HARDWARE, "gpus_per_node", "8.0"), ("gpus_per_node",)),
    ("hardware-gpus-string", "hardware", replace_line(HARDWARE, "gpus_per_node", "'8'"), ("gpus_per_node",)),
    ("hardware-latency-nan", "hardware", replace_line(HARDWARE, "latency_s", ".nan"), ("latency_s",)),
    ("deepspeed-batch-1e30", "deepspeed", ds(train_batch_size=1e30), ("train_batch_size",)),
    ("deepspeed-batch-huge", "deepspeed", ds(train_batch_size=HUGE), ("train_batch_size",)),
    ("deepspeed-batch-true", "deepspeed", ds(train_batch_size=True), ("train_batch_size",)),
    ("deepspeed-batch-string", "deepspeed", ds(train_batch_size="512"), ("train_batch_size",)),
    ("deepspeed-micro-huge", "deepspeed", ds(train_micro_batch_size_per_gpu=HUGE), ("train_micro_batch_size_per_gpu",)),
    ("deepspeed-stage-7", "deepspeed", ds(zero_optimization={"stage": 7}), ("stage",)),
    ("deepspeed-planner-seq-string", "deepspeed", ds(_planner={"model_code": {"seq_len": "x"}}),
     ("_planner.model_code.seq_len",)),
    ("deepspeed-planner-seq-huge", "deepspeed", ds(_planner={"model_code": {"seq_len": HUGE}}),
     ("_planner.model_code.seq_len", "limit of")),
    ("deepspeed-planner-flash-int", "deepspeed", ds(_planner={"model_code": {"flash_attention": 1}}),
     ("_planner.model_code.flash_attention",)),
    ("deepspeed-deep", "deepspeed", DEEP, ("nest",)),
    ("deepspeed-duplicate", "deepspeed", '{"train_batch_size": 64,\n"train_batch_size": 128}',
     ("duplicate key 'train_batch_size' at lines 1 and 2",)),
    ("megatron-unterminated-quote", "megatron", MEGATRON.replace("--tensor-model-parallel-size", "'--tensor-model-parallel-size", 1),
     ("unexpected EOF while looking for matching `''",)),
    ("megatron-expansion-bomb", "megatron", BOMB + MEGATRON, ("expands to more than",)),
    ("megatron-array-bomb", "megatron", "A=(x x x x x x x x)\n" + "A+=(${A[@]})\n" * 30 + MEGATRON, ("more than 65,536 words",)),
    ("megatron-power", "megatron_args", GPT3_ARGS + "\n--seq-length $(( (9**64)**64 ))\n", ("--seq-length",)),
    ("megatron-seq-huge", "megatron_args", GPT3_ARGS + f"\n--seq-length {HUGE}\n", ("seq",)),
    ("megatron-hidden-huge", "megatron_args", GPT3_ARGS + f"\n--hidden-size {HUGE}\n", ("hidden",)),
    ("megatron-layers-1e30", "megatron_args", GPT3_ARGS + "\n--num-layers 1e30\n", ("--num-layers",)),
    ("torchtitan-batch-huge", "torchtitan", replace_line(TORCHTITAN, "local_batch_size", str(HUGE), "="), ("local_batch_size",)),
    ("torchtitan-seq-huge", "torchtitan", replace_line(TORCHTITAN, "seq_len", str(HUGE), "="), ("seq_len",)),
    ("torchtitan-tp-true", "torchtitan", replace_line(TORCHTITAN, "tensor_parallel_degree", "true", "="),
     ("tensor_parallel_degree",)),
    ("torchtitan-tp-string", "torchtitan", replace_line(TORCHTITAN, "tensor_parallel_degree", '"2"', "="),
     ("tensor_parallel_degree",)),
    ("torchtitan-seq-nan", "torchtitan", replace_line(TORCHTITAN, "seq_len", "nan", "="), ("seq_len",)),
    ("torchtitan-deep", "torchtitan", "x = " + "[" * 5000 + "]" * 5000 + "\n", ("nest",)),
    ("torchtitan-duplicate-table", "torchtitan", TORCHTITAN + "\n[training]\nseq_len = 5\n", ("malformed TOML",)),
    ("automodel-batch-huge", "automodel", replace_line(AUTOMODEL, "global_batch_size", str(HUGE)),
     ("global_batch",)),
    ("automodel-seq-huge", "automodel", replace_line(AUTOMODEL, "seq_len", str(HUGE)), ("seq_len",)),
    ("automodel-tp-true", "automodel", replace_line(AUTOMODEL, "tp_size", "true"), ("distributed.tp_size",)),
    ("automodel-tp-string", "automodel", replace_line(AUTOMODEL, "tp_size", "'two'"), ("distributed.tp_size",)),
    ("automodel-seq-nan", "automodel", replace_line(AUTOMODEL, "seq_len", ".nan"), ("dataset.seq_len",)),
    ("automodel-duplicate", "automodel", AUTOMODEL + "distributed: {}\n", ("duplicate key 'distributed'",)),
    ("automodel-python-tag", "automodel", "!!python/object/apply:os.system ['echo hacked']\n", ("malformed YAML",)),
    ("automodel-distributed-scalar", "automodel", AUTOMODEL.replace("\ndistributed:\n", "\ndistributed: 5\nunused:\n", 1),
     ("distributed must be a mapping",)),
    ("runs-step-nan", "runs", RUNS.replace("1.5", ".nan"), ("step_seconds", "finite")),
    ("runs-step-string", "runs", RUNS.replace("1.5", "'1.5'"), ("step_seconds",)),
    ("runs-step-huge", "runs", RUNS.replace("1.5", "1.0e+30"), ("step_seconds", "limit of")),
    # a denormal step time was taken: the error against the prediction printed as +inf%, and the fit ran
    ("runs-step-denormal", "runs", RUNS.replace("1.5", "5.0e-324"), ("step_seconds", "greater than or equal to")),
    ("runs-step-tiny", "runs", RUNS.replace("1.5", "1.0e-300"), ("step_seconds", "greater than or equal to")),
    ("runs-tokens-tiny", "runs", RUNS.replace("step_seconds: 1.5", "tokens_per_second_per_gpu: 1.0e-300"),
     ("tokens_per_second_per_gpu", "greater than or equal to")),
    ("runs-tflops-tiny", "runs", RUNS.replace("step_seconds: 1.5", "model_tflops_per_gpu: 1.0e-300"),
     ("model_tflops_per_gpu", "greater than or equal to")),
    ("runs-peak-tiny", "runs", RUNS.replace("step_seconds: 1.5", "step_seconds: 1.5, peak_memory_gib: 1.0e-300"),
     ("peak_memory_gib", "greater than or equal to")),
    ("runs-duplicate", "runs", RUNS.replace("step_seconds: 1.5", "step_seconds: 1.5, step_seconds: 2.0"),
     ("duplicate key 'step_seconds'",)),
    ("runs-gpus-true", "runs", RUNS.replace("gpus: 8", "gpus: true"), ("gpus",)),
    ("profile-deep", "profile", "factors: " + DEEP, ("nest",)),
    ("profile-nan", "profile", "kind: x\nfactors: {a: {fitted: .nan}}\n", ("factors.a.fitted", "finite")),
    ("estimate-model-huge", "estimate_model", MODEL.replace("hidden_size: 64", f"hidden_size: {HUGE}"), ("hidden_size",)),
    ("estimate-hardware-huge", "estimate_hardware", replace_line(HARDWARE, "memory_bytes", str(HUGE)), ("memory_bytes",)),
]


@pytest.mark.parametrize(("kind", "text", "needles"), [case[1:] for case in HOSTILE], ids=[case[0] for case in HOSTILE])
def test_hostile_file(tmp_path: Path, kind: str, text: str, needles: tuple[str, ...]) -> None:
    path = tmp_path / f"input{SUFFIX[kind]}"
    path.write_text(text, encoding="utf-8")
    assert_rejected(command(kind, path), str(path), *needles, folder=tmp_path)


SPECIAL_KINDS = ["job", "hf", "hardware", "deepspeed", "megatron", "torchtitan", "estimate_model", "runs", "log",
                 "profile"]


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
def test_fifo_is_refused_without_blocking(tmp_path: Path, kind: str) -> None:
    fifo = tmp_path / f"input{SUFFIX[kind]}"
    os.mkfifo(fifo)
    assert_rejected(command(kind, fifo), str(fifo), "not a regular file", folder=tmp_path)


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
def test_device_is_refused(kind: str) -> None:
    assert_rejected(command(kind, Path("/dev/zero")), "/dev/zero", "not a regular file")


@pytest.mark.parametrize("kind", ["job", "hf", "megatron"])
def test_file_above_the_size_limit_is_refused(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"big{SUFFIX[kind]}"
    path.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    assert_rejected(command(kind, path), str(path), f"limit of {MAX_FILE_BYTES:,}")


def test_directory_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "job.yaml"
    folder.mkdir()
    assert_rejected(["models", "show", folder], str(folder), "directory")


@pytest.mark.parametrize("field", ["model", "hardware"])
def test_path_with_a_nul_byte_in_a_job(tmp_path: Path, field: str) -> None:
    # os.open raises ValueError (not OSError) on a NUL byte: it escaped the reader as an internal error
    job = yaml.safe_load(JOB)
    job[field] = "spec\0.yaml"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert_rejected(["check", path], str(path), f"{field}: ", "spec\\0.yaml", "NUL byte", folder=tmp_path)


def test_path_with_a_nul_byte_in_a_runs_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.yaml"
    path.write_text('runs:\n  - job: "job\\0.yaml"\n    measured: {step_seconds: 1.5}\n')
    assert_rejected(["calibrate", path], "job\\0.yaml", "NUL byte", folder=tmp_path)


LONG_NAME = "x" * 300  # above the 255 bytes a file name may have: os.stat raises ENAMETOOLONG


@pytest.mark.parametrize("option", ["--deepspeed", "--torchtitan", "--megatron-args", "--accelerate-config"])
def test_engine_file_name_too_long(tmp_path: Path, option: str) -> None:
    # Path.is_file() raises OSError for ENAMETOOLONG (it swallows only ENOENT and the like): exit 3
    path = tmp_path / LONG_NAME
    assert_rejected(["check", option, path, "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "8"],
                    str(path), "File name too long", folder=tmp_path)


@pytest.mark.parametrize("field", ["profile", "engine"])
def test_job_path_too_long(tmp_path: Path, field: str) -> None:
    job = yaml.safe_load(JOB)
    job[field] = {"format": "megatron", "path": LONG_NAME} if field == "engine" else LONG_NAME
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert_rejected(["check", path], str(path), field, "File name too long", folder=tmp_path)


def test_long_trainer_command_line_is_not_taken_for_a_path(tmp_path: Path) -> None:
    # `--hf-trainer "torchrun ..."` with more than 255 bytes before its first '/': is_file() raised ENAMETOOLONG on
    # it, an internal error, before the text was read as the command line it is
    command = ("torchrun --nproc_per_node 8 train.py --model_name_or_path llama-3.1-8b --bf16 "
               "--per_device_train_batch_size 1 --max_seq_length 1024" + " --report_to none" * 20)
    assert "/" not in command and len(command) > 255
    result, _ = invoke(["check", "--hf-trainer", command, "--hardware", "h100-sxm", "--no-suggest"])
    assert result.exit_code in (0, 1), result.output
    assert_rejected(["check", "--hf-trainer", f"{command} --deepspeed {LONG_NAME}", "--hardware", "h100-sxm"],
                    LONG_NAME, "File name too long", folder=tmp_path)


@pytest.mark.parametrize(("text", "needle"), [
    # one pattern with .*? between the fields backtracked cubically: a 22 KB line took 70 s
    ("step: 1  loss: 2 memory: 1 GiB " + "step: 1 memory: 1 GiB " * 20_000 + "tps: x\n", "no torchtitan step line"),
    # (\d+)/ tried at every digit of a long number: quadratic, 20,000 digits took 7 s
    ("SamplesPerSec=1\n" + "1" * 200_000 + "\n", "no DeepSpeed timer line"),
])
def test_log_line_that_made_a_pattern_backtrack(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "train.log"
    path.write_text(text)
    assert_rejected(["calibrate", "--log", path, "--job", FIX / "jobs/llama8b_fits.yaml"], str(path), needle,
                    folder=tmp_path)


def test_unterminated_quote_in_engine_args_of_a_job(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("hardware: h100-sxm\ngpus: 8\nengine:\n  format: megatron\n  path: train.sh\n  args: \"--seq-length '8\"\n")
    (tmp_path / "train.sh").write_text(MEGATRON)
    assert_rejected(["check", job], "engine.args", "unexpected EOF")


# --- Hypothesis: malformed values for every field ------------------------------------------------------------------
def over(kind: str) -> st.SearchStrategy[int]:
    limit = int(LIMITS[kind].maximum)
    return st.one_of(st.integers(limit + 1, 4 * limit), st.integers(2**63, 10**30))


NOT_AN_INTEGER = st.one_of(
    st.booleans(), st.sampled_from(["2", "8", "1e3", "", "two"]), st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(1, 4), max_size=2), st.just({"a": 1}),
)


def bad_count(kind: str, minimum: int = 1) -> st.SearchStrategy[Any]:
    return st.one_of(NOT_AN_INTEGER, over(kind), st.integers(max_value=minimum - 1))


NOT_A_BOOL = st.one_of(st.integers(), st.sampled_from(["yes", "true", "on", "1", ""]), st.floats(), st.just([True]))
NOT_A_CHOICE = st.one_of(st.integers(), st.booleans(), st.sampled_from(["BF16", "fp64", "", "1F1B", "zero", "all"]))

JOB_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "gpus": bad_count("gpus"),
    **{f"parallel.{f}": bad_count("degree") for f in ("tp", "pp", "cp", "dp", "ep")},
    "parallel.zero": st.one_of(NOT_AN_INTEGER, st.integers(4, 10**30), st.integers(max_value=-1)),
    "parallel.micro_batch": bad_count("micro_batch"),
    "parallel.interleave": bad_count("interleave"),
    "parallel.recompute_layers_per_stage": bad_count("layers"),
    **{f"parallel.{f}": NOT_A_BOOL for f in ("sequence_parallel", "flash_attention", "overlap_grad_reduce",
                                              "overlap_tp_comm")},
    "parallel.recompute": NOT_A_CHOICE,
    "parallel.schedule": NOT_A_CHOICE,
    "training.global_batch": bad_count("global_batch"),
    "training.seq_len": bad_count("seq_len"),
    "training.dtype": NOT_A_CHOICE,
    "training.grad_dtype": NOT_A_CHOICE,
    "training.optimizer": NOT_A_CHOICE,
    "headroom": st.one_of(st.booleans(), st.just("0.1"), st.floats(min_value=1.0), st.floats(max_value=-1e-9),
                          st.just(float("nan")), st.just(float("inf"))),
}


def _set(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    *parents, leaf = dotted.split(".")
    node = data
    for name in parents:
        node = node.setdefault(name, {})
    node[leaf] = value
    return data


@pytest.mark.parametrize("field", sorted(JOB_FIELDS))
@FUZZ
@given(data=st.data())
def test_malformed_job_field(tmp_path: Path, field: str, data: st.DataObject) -> None:
    value = data.draw(JOB_FIELDS[field])
    job = _set(yaml.safe_load(JOB), field, value)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert_rejected(["check", path], str(path), field, folder=tmp_path)


MODEL_FIELDS = {
    "num_layers": "layers", "hidden_size": "width", "num_attention_heads": "heads", "ffn_hidden_size": "width",
    "vocab_size": "vocab", "max_seq_len": "seq_len", "num_kv_heads": "heads", "head_dim": "width",
}


@pytest.mark.parametrize("field", sorted(MODEL_FIELDS))
@FUZZ
@given(data=st.data())
def test_malformed_model_field(tmp_path: Path, field: str, data: st.DataObject) -> None:
    value = data.draw(bad_count(MODEL_FIELDS[field]))
    spec = {**yaml.safe_load(MODEL), field: value}
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert_rejected(["models", "show", path], str(path), field, folder=tmp_path)


HF_FIELDS = {"num_hidden_layers": "layers", "hidden_size": "width", "num_attention_heads": "heads",
             "num_key_value_heads": "heads", "intermediate_size": "width", "vocab_size": "vocab",
             "max_position_embeddings": "seq_len"}


@pytest.mark.parametrize("key", sorted(HF_FIELDS))
@FUZZ
@given(data=st.data())
def test_malformed_hf_config_key(tmp_path: Path, key: str, data: st.DataObject) -> None:
    value = data.draw(bad_count(HF_FIELDS[key]).filter(lambda v: v is not None))
    path = tmp_path / "config.json"
    path.write_text(hf(**{key: value}))  # json.dumps writes nan/inf as NaN/Infinity, as a hostile file would
    assert_rejected(["models", "show", path], str(path), key, folder=tmp_path)


HARDWARE_FIELDS = ["memory_bytes", "memory_bandwidth_bytes_per_s", "gpus_per_node", "bandwidth_bytes_per_s", "latency_s"]
NOT_A_NUMBER = st.one_of(st.booleans(), st.sampled_from(["8", "80e9", "", "fast"]), st.just(float("nan")),
                         st.just(float("inf")), st.just(-1), st.just(0), st.integers(10**20, 10**30))


@pytest.mark.parametrize("field", HARDWARE_FIELDS)
@FUZZ
@given(value=NOT_A_NUMBER)
def test_malformed_hardware_field(tmp_path: Path, field: str, value: Any) -> None:
    path = tmp_path / "hw.yaml"
    text = json.dumps(value) if isinstance(value, str) else yaml.safe_dump(value).removesuffix("\n...\n").strip()
    path.write_text(replace_line(HARDWARE, field, text))  # a string quoted, as a hostile file would write it
    assert_rejected(["hardware", "show", path], str(path), field, folder=tmp_path)


DEEPSPEED_KEYS = {"train_batch_size": "global_batch", "train_micro_batch_size_per_gpu": "micro_batch",
                  "gradient_accumulation_steps": "grad_accum"}


@pytest.mark.parametrize("key", sorted(DEEPSPEED_KEYS))
@FUZZ
@given(data=st.data())
def test_malformed_deepspeed_setting(tmp_path: Path, key: str, data: st.DataObject) -> None:
    value = data.draw(bad_count(DEEPSPEED_KEYS[key]).filter(lambda v: v is not None))
    path = tmp_path / "ds.json"
    path.write_text(ds(**{key: value}))
    assert_rejected(command("deepspeed", path), str(path), key, folder=tmp_path)


MEGATRON_FLAGS = {"--tensor-model-parallel-size": "degree", "--pipeline-model-parallel-size": "degree",
                  "--micro-batch-size": "micro_batch", "--global-batch-size": "global_batch", "--seq-length": "seq_len",
                  "--num-layers": "layers", "--hidden-size": "width", "--num-attention-heads": "heads"}


@pytest.mark.parametrize("flag", sorted(MEGATRON_FLAGS))
@FUZZ
@given(data=st.data())
def test_malformed_megatron_flag(tmp_path: Path, flag: str, data: st.DataObject) -> None:
    value = data.draw(st.one_of(over(MEGATRON_FLAGS[flag]), st.integers(max_value=0),
                                st.sampled_from(["1.5", "1e30", "nan", "inf", "two", "0x10"])))
    path = tmp_path / "args.txt"
    path.write_text(f"{GPT3_ARGS}\n{flag} {value}\n")
    assert_rejected(command("megatron_args", path), str(path), flag, folder=tmp_path)


# Megatron-Bridge's ConfigContainer YAML (planner.engines.megatron_bridge): each field read, by section
BRIDGE = {"model": {"num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 512, "num_attention_heads": 4,
                    "vocab_size": 1024, "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1},
          "train": {"global_batch_size": 32, "micro_batch_size": 1}, "dataset": {"sequence_length": 1024},
          "mixed_precision": "bf16_mixed"}
BRIDGE_FIELDS = {"model.tensor_model_parallel_size": "degree", "model.pipeline_model_parallel_size": "degree",
                 "model.num_layers": "layers", "model.hidden_size": "width", "model.num_attention_heads": "heads",
                 "train.global_batch_size": "global_batch", "train.micro_batch_size": "micro_batch",
                 "dataset.sequence_length": "seq_len"}


@pytest.mark.parametrize("field", sorted(BRIDGE_FIELDS))
@FUZZ
@given(data=st.data())
def test_malformed_megatron_bridge_field(tmp_path: Path, field: str, data: st.DataObject) -> None:
    value = data.draw(bad_count(BRIDGE_FIELDS[field]).filter(lambda v: v is not None))
    section, key = field.split(".")
    config = {name: (dict(values) if isinstance(values, dict) else values) for name, values in BRIDGE.items()}
    config[section][key] = value
    path = tmp_path / "run_config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert_rejected(command("megatron", path), str(path), field, folder=tmp_path)


TORCHTITAN_KEYS = {"local_batch_size": "micro_batch", "seq_len": "seq_len", "tensor_parallel_degree": "degree",
                   "pipeline_parallel_degree": "degree", "context_parallel_degree": "degree"}


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float):
        return "nan" if value != value else ("inf" if value > 0 else "-inf") if abs(value) == float("inf") else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return str(value)


@pytest.mark.parametrize("key", sorted(TORCHTITAN_KEYS))
@FUZZ
@given(data=st.data())
def test_malformed_torchtitan_setting(tmp_path: Path, key: str, data: st.DataObject) -> None:
    value = data.draw(bad_count(TORCHTITAN_KEYS[key]))
    path = tmp_path / "tt.toml"
    path.write_text(replace_line(TORCHTITAN, key, _toml(value), "="))
    assert_rejected(command("torchtitan", path), str(path), key, folder=tmp_path)


def test_valid_files_still_pass() -> None:
    for args in (["check", FIX / "jobs/llama8b_fits.yaml"], ["models", "show", FIX / "hf/llama-3.1-8b.json"],
                 command("deepspeed", FIX / "engines/deepspeed/zero3_bf16.json"),
                 command("torchtitan", FIX / "engines/torchtitan/llama3_8b.toml"),
                 command("megatron", FIX / "engines/megatron/train_llama3_8b.sh")):
        result, _ = invoke(args)
        assert result.exit_code in (0, 1), result.output


REGISTRY = '''from torchtitan.models.llama3 import model_registry

def hostile():
    return Trainer.Config(model_spec=model_registry("8B"),
                          training=TrainingConfig(max_context_length={value}, num_tokens_per_microbatch_per_dp_rank=8192))
'''


@pytest.mark.parametrize(("value", "needle"), [
    ("10 ** 10 ** 7", "beyond"),  # a hundred-million-digit power: refused before it is computed
    ("9999999999999999999999 * 1", "beyond"),
    ("1e308 * 1e308", "beyond"),
    ("(-8) ** 0.5", "beyond"),  # a complex number
    ("2 ** 0.5 * 4096", "expected a whole number"),
    ("'8192'", "expected a whole number"),
    ("True", "expected a whole number"),
    ("(" * 400 + "1" + ")" * 400, "not Python"),
    ("1+" * 3000 + "1", "nested too deep"),
])
def test_hostile_torchtitan_registry(tmp_path: Path, value: str, needle: str) -> None:
    path = tmp_path / "config_registry.py"
    path.write_text(REGISTRY.format(value=value))
    args = ["check", "--torchtitan", path, "--engine-args", "--config hostile", "--hardware", "h100-sxm", "--gpus", "8"]
    assert_rejected(args, str(path), needle, folder=tmp_path)


def _alias_bomb(field: str, extra: str = "") -> str:
    """A Megatron-Bridge file whose `field` is nine levels of YAML aliases, each nine copies of the one below
    (9^9 items if walked): read in bounded time or refused."""
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    lines += [f"model: {{{field}: *i{extra}}}", "train: {global_batch_size: 8}"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("field", "extra", "needle"), [
    ("cuda_graph_scope", ", cuda_graph_impl: local", "list of names"),
    ("moe_layer_freq", ", num_moe_experts: 8", "list of 0 (dense) and 1"),
    ("pipeline_model_parallel_layout", "", "list of layer names"),
    ("tensor_model_parallel_size", "", "expected an integer"),
])
def test_megatron_bridge_alias_bomb(tmp_path: Path, field: str, extra: str, needle: str) -> None:
    path = tmp_path / "run_config.yaml"
    path.write_text(_alias_bomb(field, extra))
    assert_rejected(command("megatron", path), str(path), f"model.{field}", needle, folder=tmp_path)


def _bomb_at(text: str, dotted: str) -> str:
    """`text` (YAML) with the field at `dotted` set to the 9^9 alias bomb of _alias_bomb."""
    head = _alias_bomb("x").split("model:")[0]
    data = _set(yaml.safe_load(text), dotted, "BOMB")
    return head + yaml.safe_dump(data, sort_keys=False).replace("BOMB", "*i")


@pytest.mark.parametrize(("kind", "text", "key"), [
    # a pydantic error's input was shown with repr(), which walked the whole bomb before cutting it to 60 chars
    ("hardware", HARDWARE, "efficiency.attention"),
    # str() of distributed.strategy, repr() of a count: each walked the whole bomb
    ("automodel", AUTOMODEL, "distributed.strategy"),
    # str() of the names AutoModel reads (a class path, a kernel, a dtype): 33-50 s and 2.3 GB each before
    ("automodel", AUTOMODEL, "optimizer._target_"),
    ("automodel", AUTOMODEL, "model.backend.attn"),
    ("automodel", AUTOMODEL, "model.torch_dtype"),
    ("automodel", AUTOMODEL.replace("  strategy: fsdp2\n", ""), "distributed._target_"),
])
def test_alias_bomb_in_a_field_is_shown_short(tmp_path: Path, kind: str, text: str, key: str) -> None:
    path = tmp_path / f"input{SUFFIX[kind]}"
    path.write_text(_bomb_at(text, key))
    assert_rejected(command(kind, path), str(path), key, "[[[[", folder=tmp_path)


def test_runs_job_parallel_not_a_mapping(tmp_path: Path) -> None:
    # `(raw.get("parallel") or {}).get("tp")` on a number: AttributeError, an internal error
    path = tmp_path / "runs.yaml"
    path.write_text(RUNS.replace("gpus: 8,", "gpus: 8, parallel: 1.0e-5,"))
    assert_rejected(["calibrate", path], str(path), "parallel", "expected a mapping of fields", folder=tmp_path)


# Megatron-LM's MODEL_ARGS YAML (functional tests, the MoE model zoo): each flag planner reads, as a YAML value
MODEL_ARGS_TEXT = (FIX / "engines/upstream/megatron/model_args/gpt3_mcore_te_tp2_pp2_cp2.yaml").read_text()


@pytest.mark.parametrize("flag", sorted(MEGATRON_FLAGS))
@FUZZ
@given(data=st.data())
def test_malformed_model_args_flag(tmp_path: Path, flag: str, data: st.DataObject) -> None:
    # (false is not malformed: the MoE model zoo's launcher leaves out every flag set to false, and planner reads it
    # so: tests/engines/test_megatron_model_args.py)
    value = data.draw(st.one_of(over(MEGATRON_FLAGS[flag]), st.integers(max_value=0), st.just(True),
                                st.just(None), st.just([2, 2]), st.just({"a": 1}),
                                st.sampled_from(["1.5", "1e30", "nan", "two", "0x10", 1.5, float("inf")])))
    config = yaml.safe_load(MODEL_ARGS_TEXT)
    config["MODEL_ARGS"][flag] = value
    path = tmp_path / "model_config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert_rejected(command("megatron", path), str(path), flag, folder=tmp_path)


@pytest.mark.parametrize(("text", "args", "needle"), [
    ("MODEL_ARGS:\n  --num-layers: [\n", "", "malformed YAML"),
    ("MODEL_ARGS:\n  --save: " + "${X}" * 20_000 + "\n", "X=" + "a" * 1_000, "would exceed"),
    ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "MODEL_ARGS:\n  --recompute-modules: *b\n", "", "MODEL_ARGS.--recompute-modules"),
    ("MODEL_ARGS:\n  --num-layers: ${L}\n", "L='4\n  --bf16: [x'", "malformed YAML"),
])
def test_hostile_model_args(tmp_path: Path, text: str, args: str, needle: str) -> None:
    path = tmp_path / "model_config.yaml"
    path.write_text(text)
    extra = ["--engine-args", args] if args else []
    assert_rejected([*command("megatron", path), *extra], str(path), needle, folder=tmp_path)


# DeepSeek Sparse Attention: each size of the indexer in a model YAML and an HF config
DSA_MODEL = (REPO / "model_specs/deepseek-v3.2.yaml").read_text()
DSA_FIELDS = {"index_heads": "heads", "index_head_dim": "width", "topk": "seq_len"}
DSA_HF = json.loads((FIX / "hf/deepseek-v3.2.json").read_text())
DSA_HF_KEYS = {"index_n_heads": "heads", "index_head_dim": "width", "index_topk": "seq_len"}


@pytest.mark.parametrize("field", sorted(DSA_FIELDS))
@FUZZ
@given(data=st.data())
def test_malformed_sparse_attention_field(tmp_path: Path, field: str, data: st.DataObject) -> None:
    value = data.draw(bad_count(DSA_FIELDS[field]))
    spec = yaml.safe_load(DSA_MODEL)
    spec["sparse_attention"][field] = value
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert_rejected(["models", "show", path], str(path), field, folder=tmp_path)


@pytest.mark.parametrize("key", sorted(DSA_HF_KEYS))
@FUZZ
@given(data=st.data())
def test_malformed_dsa_hf_key(tmp_path: Path, key: str, data: st.DataObject) -> None:
    value = data.draw(bad_count(DSA_HF_KEYS[key]).filter(lambda v: v is not None))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**DSA_HF, key: value}))
    assert_rejected(["models", "show", path], str(path), key, folder=tmp_path)
