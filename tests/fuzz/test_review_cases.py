"""Inputs an independent fuzz run found breaking the contract (exit 3, or silently accepted), kept as cases."""

from __future__ import annotations

import ast

import pytest
from fuzz.contract import assert_rejected

from planner.engines.shell import _arith

INFER = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "1", "--input-len", "100",
         "--output-len", "10"]
TRAIN = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "8", "--global-batch", "8",
         "--seq-len", "4096"]


@pytest.mark.parametrize("command", ["estimate", "search"])
def test_batched_token_budget_above_the_limit(command):
    """A 71-bit --max-batched-tokens reached numpy as an int it cannot hold (OverflowError, exit 3)."""
    assert_rejected(["infer", command, *INFER, "--max-batched-tokens", str(2**70)], "'--max-batched-tokens'",
                    "limit of")


@pytest.mark.parametrize("command", ["estimate", "search"])
@pytest.mark.parametrize("rate", ["inf", "nan", "1e400", "-1", "0"])
def test_request_rate_is_finite_and_positive(command, rate):
    assert_rejected(["infer", command, *INFER, "--request-rate", rate], "'--request-rate'")


def test_activation_offload_beyond_the_stage_is_refused():
    """32 layers on one stage: offloading 33 layers' activations is as impossible as recomputing 33."""
    assert_rejected(["estimate", *TRAIN, "--offload-activation-layers", "33"], "offload_activation_layers(33)",
                    "layers per stage (32)")


def test_job_file_activation_offload_beyond_the_stage(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: llama-3.1-8b\nhardware: h100-sxm\ngpus: 8\nparallel: {offload_activation_layers: 99}\n"
                   "training: {global_batch: 8, seq_len: 4096}\n")
    assert_rejected(["check", job], "offload_activation_layers(99)", folder=tmp_path)


@pytest.mark.parametrize("reserve", ["-1.0e+9", "1.0e+30"])
def test_overlay_reserve_out_of_range(tmp_path, reserve):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(f"kind: planner-profile-overlay\nhardware: h100-sxm\nhardware_name: 'DGX H100 (H100 SXM5 80GB)'\n"
                       f"factors: {{}}\nmemory_reserve: {{fitted_bytes: {reserve}, sigma_bytes: 0.0}}\n")
    assert_rejected(["estimate", *TRAIN, "--profile", overlay], "fitted_bytes", folder=tmp_path)


def test_modulo_by_zero_in_a_launch_script(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("TP=$(( 1 % 0 ))\npython pretrain_gpt.py --tensor-model-parallel-size $TP\n")
    assert_rejected(["check", "--megatron-args", script, "--hardware", "h100-sxm", "--gpus", "8"], "division by 0")


@pytest.mark.parametrize(("expr", "bash"), [("7 % 3", 1), ("-7 % 3", -1), ("7 % -3", 1), ("-7 / 2", -3)])
def test_remainder_and_quotient_truncate_toward_zero_as_in_bash(expr, bash):
    """bash: $(( -7 % 3 )) is -1 and $(( -7 / 2 )) is -3 (C semantics), where Python gives 2 and -4."""
    assert _arith(ast.parse(expr, mode="eval")) == bash


# Found by the fuzz run of 2026-12-07 ---------------------------------------------------------------------------
FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("fmt,log,pattern,replacement,needle", [
    ("deepspeed", "deepspeed_timer_2022.log", r"MaxMemAllocated=[0-9.]*GB", "MaxMemAllocated=0GB", "MaxMemAllocated"),
    ("deepspeed", "deepspeed_timer_2022.log", r"SamplesPerSec=[0-9.]+", "SamplesPerSec=0.0", "SamplesPerSec"),
    ("torchtitan", "torchtitan_llama3_8b.log", r"tps: [0-9,]+", "tps: 0", "tps"),
    ("megatron", "megatron_gpt345m_4xa800_tp2pp2.log", r"elapsed time per iteration \(ms\): [0-9.]+",
     "elapsed time per iteration (ms): 0.0", "elapsed time per iteration"),
])
def test_a_zero_figure_in_a_training_log_is_one_error(tmp_path, fmt, log, pattern, replacement, needle):
    """A zero or negative figure reached the Measured spec and escaped as a ValidationError (exit 3), or was read
    as 'no figure'; it is the log's own error, naming the line."""
    import re

    text = re.sub(pattern, replacement, (FIXTURES / "logs" / log).read_text())
    path = tmp_path / log
    path.write_text(text)
    job = FIXTURES / "jobs" / ("deepspeed_job.yaml" if fmt == "deepspeed" else "llama8b_fits.yaml")
    extra = ["--job", job] if fmt != "megatron" else ["--hardware", "a100-80gb"]
    assert_rejected(["calibrate", "--log", path, "--log-format", fmt, *extra], str(path), needle, "positive")


def test_a_torchtitan_section_given_as_a_plain_value(tmp_path):
    """`model = "llama3"` instead of a [model] table crashed on .get (exit 3)."""
    path = tmp_path / "tt.toml"
    path.write_text('model = "llama3"\n[training]\nlocal_batch_size = 1\nseq_len = 8192\n')
    assert_rejected(["check", "--torchtitan", path, "--hardware", "h100-sxm", "--gpus", "8"], str(path),
                    "model", "[model] table")


def _export(out: object) -> list[object]:
    return ["export", FIXTURES / "jobs" / "llama8b_fits.yaml", "--to", "megatron", "--out", out]


def test_export_does_not_replace_a_fifo_or_write_a_file_named_nothing(tmp_path, monkeypatch):
    """--out FIFO replaced the FIFO (as root, --out /dev/full replaced the device node); --out '' wrote
    ./megatron_args.sh."""
    import os
    import stat

    monkeypatch.chdir(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert_rejected(_export(fifo), "not a regular file", folder=tmp_path)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    (tmp_path / "dir").mkdir()
    assert_rejected(_export(tmp_path / "dir"), "is a directory", folder=tmp_path)
    assert_rejected(_export(""), "not a file name", folder=tmp_path)


def test_export_writes_through_a_symbolic_link(tmp_path):
    from fuzz.contract import invoke

    target = tmp_path / "args.sh"
    target.write_text("old")
    link = tmp_path / "link.sh"
    link.symlink_to(target)
    result, _ = invoke(_export(link))
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and target.read_text().startswith("# Megatron-LM arguments")


def test_calibrate_out_to_a_fifo_is_refused_at_once(tmp_path):
    """open() on a FIFO blocks until a reader comes: `calibrate --out FIFO` hung."""
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert_rejected(["calibrate", FIXTURES / "calibrate" / "nemo_runs.yaml", "--out", fifo], "not a regular file")


def test_search_plot_and_export_are_written_together_or_not_at_all(tmp_path):
    """The plot was renamed into place before the export's target turned out to be a directory."""
    (tmp_path / "ex" / "megatron_args.sh").mkdir(parents=True)
    assert_rejected(["search", "-m", "llama-3.1-8b", "-w", "h100-sxm", "--gpus", "8", "--global-batch", "64",
                     "--seq-len", "4096", "--plot", tmp_path / "p.png", "--export", "megatron", tmp_path / "ex"],
                    "is a directory", folder=tmp_path)


def test_nodes_times_gpus_per_node_is_held_to_the_gpu_limit(tmp_path):
    path = tmp_path / "n.yaml"
    path.write_text("model: llama-3.1-8b\nhardware: gb200-nvl72\nnodes: 20000\nparallel: {tp: 2}\n"
                    "training: {global_batch: 720000, seq_len: 4096}\n")
    assert_rejected(["check", path], "nodes", "1,440,000 GPUs", "limit")


@pytest.mark.parametrize("field,line", [("engine.path", "engine: {format: deepspeed, path: missing.json}"),
                                        ("profile", "profile: missing.yaml")])
def test_a_missing_file_a_job_names_is_reported_with_the_job(tmp_path, field, line):
    path = tmp_path / "job.yaml"
    path.write_text(f"model: llama-3.1-8b\nhardware: h100-sxm\ngpus: 8\n{line}\n"
                    "training: {global_batch: 64, seq_len: 4096}\n")
    assert_rejected(["check", path], f"{path}: {field}", "not found")


@pytest.mark.parametrize("value,needle", [("1:00", "gpus"), ("1_024", "gpus")])
def test_yaml_numbers_are_read_as_yaml_1_2_reads_them(tmp_path, value, needle):
    """YAML 1.1's base-60 `1:00` was 60 GPUs and `010` was 8; YAML 1.2 reads neither as those numbers."""
    path = tmp_path / "job.yaml"
    path.write_text(f"model: llama-3.1-8b\nhardware: h100-sxm\ngpus: {value}\ntraining: {{global_batch: 64, seq_len: 4096}}\n")
    assert_rejected(["check", path], needle)


def test_yaml_leading_zero_is_decimal():
    from planner.engines.load import parse_yaml

    assert parse_yaml("a: 010\nb: 0o10\nc: 0x8\nd: 1e-5\n", "x") == {"a": 10, "b": 8, "c": 8, "d": 1e-5}


def test_expert_tp_on_a_dense_model_names_expert_tp():
    """A dense model with --etp 2 was refused by the ep rule, naming an ep the user never set."""
    assert_rejected(["estimate", *TRAIN[:5], "1", *TRAIN[6:], "--etp", "2"], "etp(2)", "MoE")


def test_one_output_token_under_an_unbounded_load_warns_nothing():
    """(o - 1) x inf made numpy print 'invalid value encountered in multiply' on stderr."""
    import warnings

    from fuzz.contract import invoke

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        result, _ = invoke(["infer", "estimate", "-m", "llama-3.1-8b", "-w", "h100-sxm", "--input-len", "1",
                            "--output-len", "1", "--request-rate", "1e9"])
    assert result.exit_code == 0 and "RuntimeWarning" not in result.stderr, result.output


@pytest.mark.parametrize("line,needles", [
    ("model: [1]", ("model: expected a string or a mapping of ModelSpec's fields", "got list")),
    ("parallel: 3", ("parallel: expected a mapping of fields", "got int 3")),
])
def test_union_and_section_errors_speak_the_files_words(tmp_path, line, needles):
    """pydantic's own words ('model.str: Input should be a valid string', 'instance of ParallelSection') named the
    union member and the class, not what the field takes."""
    path = tmp_path / "job.yaml"
    base = {"model": "model: llama-3.1-8b", "parallel": ""}
    key = line.split(":")[0]
    lines = [line if key == "model" else base["model"], "hardware: h100-sxm", "gpus: 8",
             "training: {global_batch: 64, seq_len: 4096}"] + ([line] if key == "parallel" else [])
    path.write_text("\n".join(lines) + "\n")
    message = assert_rejected(["check", path], *needles)
    assert ".str" not in message and "instance of" not in message


# Found by the fuzz run of the new readers and writers (2026-12-07) ----------------------------------------------
def _qwen35(tmp_path, **text_changes):
    import json

    data = json.loads((FIXTURES / "hf" / "qwen3.5-35b-a3b.json").read_text())
    data["text_config"].update(text_changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("changes,needles", [
    ({"mamba_ssm_dtype": []}, ("mamba_ssm_dtype", "expected one of")),
    ({"mamba_ssm_dtype": {"a": 1}}, ("mamba_ssm_dtype",)),
    ({"num_hidden_layers": 10**30}, ("num_hidden_layers",)),
    ({"mlp_only_layers": 3}, ("mlp_only_layers", "list of layer indices")),
    ({"linear_key_head_dim": 10**30}, ("linear_key_head_dim",)),
    ({"linear_conv_kernel_dim": 10**30}, ("linear_conv_kernel_dim",)),
    ({"moe_intermediate_size": "abc"}, ("moe_intermediate_size",)),
    ({"shared_expert_intermediate_size": 10**30}, ("shared_expert_intermediate_size",)),
    ({"rope_parameters": {"rope_type": "default", "partial_rotary_factor": "abc"}},
     ("rope_parameters.partial_rotary_factor",)),
])
def test_qwen3_5_config_errors_name_the_key(tmp_path, changes, needles):
    """Crashes (unhashable dtype, a non-list mlp_only_layers), a hang (a list of 10^30 layer kinds built before the
    length check) and errors naming another key than the broken one."""
    assert_rejected(["models", "show", _qwen35(tmp_path, **changes)], *needles)


@pytest.mark.parametrize("freq,needle", [("²", "positive integer"), ("0", "positive integer"),
                                         ("abc", "positive integer"), ("([1]*3+[0])*6", "list pattern")])
def test_linear_attention_freq_that_is_not_a_count(tmp_path, freq, needle):
    path = tmp_path / "args.txt"
    path.write_text("--num-layers 24 --hidden-size 1024 --num-attention-heads 8 --seq-length 4096 "
                    f"--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 8 "
                    f"--experimental-attention-variant gdn --linear-attention-freq '{freq}'")
    assert_rejected(["check", "--megatron-args", path, "--hardware", "h100-sxm", "--gpus", "8"], needle)


def test_out_as_a_loop_of_links_or_a_long_name(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    assert_rejected(_export(loop), "loop of symbolic links", folder=tmp_path)
    from fuzz.contract import invoke

    long_name = tmp_path / ("x" * 250)  # legal, but a scratch name built from it went over NAME_MAX
    result, _ = invoke(_export(long_name))
    assert result.exit_code == 0, result.output
    assert long_name.read_text().startswith("# Megatron-LM arguments")


def test_a_plot_into_a_loop_of_links_leaves_no_scratch_file(tmp_path):
    (tmp_path / "p.png").symlink_to("p.png")
    assert_rejected(["search", "-m", "llama-3.1-8b", "-w", "h100-sxm", "--gpus", "8", "--global-batch", "64",
                     "--seq-len", "4096", "--plot", tmp_path / "p.png"], "loop of symbolic links", folder=tmp_path)


def test_export_keeps_an_existing_files_permissions(tmp_path):
    import os

    from fuzz.contract import invoke

    target = tmp_path / "args.sh"
    target.write_text("old")
    os.chmod(target, 0o750)
    result, _ = invoke(_export(target))
    assert result.exit_code == 0, result.output
    assert target.stat().st_mode & 0o777 == 0o750


def test_engine_yaml_is_read_as_its_engine_reads_it():
    """Megatron-Bridge and AutoModel load their YAML with PyYAML / OmegaConf (YAML 1.1): there `1_000` is a thousand
    and `1:00` sixty, as the engine will run it; planner's own files read YAML 1.2."""
    from planner.engines.load import parse_yaml

    text = "a: 1_000\nb: 1:00\nc: 010\n"
    assert parse_yaml(text, "run_config.yaml", engine=True) == {"a": 1000, "b": 60, "c": 8}
    assert parse_yaml(text, "job.yaml") == {"a": "1_000", "b": "1:00", "c": 10}


def test_a_bad_out_is_the_only_line_even_when_the_export_has_notes(tmp_path):
    """The export's notes (engine megatron -> torchtitan here) were printed before --out was found unwritable: two
    lines on stderr instead of one."""
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert_rejected(["export", "--to", "torchtitan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--gpus", "8",
                     "--global-batch", "64", "--seq-len", "4096", "--zero", "3", "--out", fifo], "not a regular file",
                    folder=tmp_path)


# Found by the fuzz run of the command-line options (2026-12-07) ------------------------------------------------
@pytest.mark.parametrize("model,etp,needle", [("llama-3.1-8b", "3", "etp(3) needs a MoE model"),
                                              ("mixtral-8x7b", "3", "ep * etp (1 * 3)"),
                                              ("mixtral-8x7b", "16", "ep * etp (1 * 16)")])
def test_search_etp_that_no_layout_spans_is_a_rule_error(model, etp, needle):
    """`search --etp 3` on 8 GPUs: the default ep pruning (ep x etp dividing tp x dp x cp) left no candidate, and the
    all-rejected message indexed the empty grid (ValueError: cannot reshape array of size 0, exit 3)."""
    assert_rejected(["search", "-m", model, "-w", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq-len",
                     "4096", "--etp", etp], "no candidate passes the layout rules", needle)


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def test_infer_search_under_an_overload_prints_no_infinite_latency():
    """--request-rate 1e9 overloads every layout: the JSON's `closest` carried `Infinity` (not JSON), and the table
    said 'No layout meets the limits ()', 'lowest TTFT inf' and 'relax ;' with no limit given."""
    import json

    from fuzz.contract import invoke

    args = ["infer", "search", *INFER[:4], "--gpus", "8", *INFER[6:], "--request-rate", "1e9"]
    result, _ = invoke([*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout, parse_constant=_reject_constant)
    assert doc["results"] == [] and doc["rejected"]["overload"] > 0
    assert doc["closest"] == {"lowest_ttft": None, "lowest_tpot": None}
    result, _ = invoke(args)
    assert result.exit_code == 0, result.output
    assert "No layout keeps up with --request-rate 1e+09/s" in result.stdout and "lower --request-rate" in result.stdout
    assert "()" not in result.stdout and "relax ;" not in result.stdout and " inf" not in result.stdout


def test_a_limit_still_shows_the_closest_layout_that_keeps_up():
    """Some layouts overloaded, the rest over --ttft-max: the closest are those that keep up, with finite times."""
    import json

    from fuzz.contract import invoke

    result, _ = invoke(["infer", "search", *INFER[:4], "--gpus", "8", *INFER[6:], "--request-rate", "10",
                        "--ttft-max", "1ms", "--format", "json"])
    assert result.exit_code == 0, result.output
    closest = json.loads(result.stdout, parse_constant=_reject_constant)["closest"]
    assert closest["lowest_ttft"]["ttft_seconds"] > 0.001


def test_a_nul_byte_in_a_job_files_path_is_one_error(tmp_path):
    """os.open raised ValueError ('embedded null byte'), exit 3."""
    job = tmp_path / "job.yaml"
    job.write_text('model: "llama\\0x.yaml"\nhardware: h100-sxm\ngpus: 8\ntraining: {global_batch: 8, seq_len: 4096}\n')
    assert_rejected(["check", job], f"{job}: model", "NUL byte", folder=tmp_path)


@pytest.mark.parametrize("args,needle", [
    (["export", "--to", "megatron", *TRAIN, "--out", "a\0b.sh"], "value of --out"),
    (["estimate", *TRAIN, "--profile", "\0"], "value of --profile"),
    (["check", "job\0.yaml"], "argument 2"),
    (["calibrate", "--log", "x\0", "--hardware", "h100-sxm"], "value of --log"),
])
def test_a_nul_byte_in_an_argument_is_one_error(tmp_path, monkeypatch, args, needle):
    """A shell cannot pass a NUL byte, an in-process caller can: every os call on such a path raised ValueError."""
    monkeypatch.chdir(tmp_path)
    assert_rejected(args, needle, "NUL byte", folder=tmp_path)


SEARCH = ["search", "-m", "llama-3.1-8b", "-w", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq-len", "4096"]


@pytest.mark.parametrize("command", [SEARCH, ["infer", "search", *INFER]])
@pytest.mark.parametrize("folder,needle", [("missing", "does not exist"), ("file", "is not a folder"),
                                           ("d" * 300, "cannot be read (File name too long)")])
def test_a_plot_into_a_missing_folder_is_refused_before_the_search(tmp_path, command, folder, needle):
    """The search ran in full, then the write failed naming planner's scratch file
    ('.planner-123-456.partial.png: cannot write plot: [Errno 2] ...')."""
    (tmp_path / "file").write_text("")
    target = tmp_path / folder / "plot.png"
    line = assert_rejected([*command, "--plot", target], f"--plot {target}", needle, folder=tmp_path)
    assert ".partial" not in line


def test_a_plot_that_cannot_be_written_is_named_by_its_path(tmp_path, monkeypatch):
    import errno

    from matplotlib.figure import Figure

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full)
    target = tmp_path / "plot.png"
    line = assert_rejected([*SEARCH, "--plot", target], f"{target}: cannot write plot: No space left on device",
                           folder=tmp_path)
    assert ".partial" not in line
