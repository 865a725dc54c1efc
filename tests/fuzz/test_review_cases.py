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
