"""torchtitan's expert-parallel settings and pure-bf16 training read as torchtitan's JobConfig reads them
(pytorch/torchtitan torchtitan/config/job_config.py at 238fa9953e4aec2a62582121564273d7cbb1e9f1, the last
commit with TOML configs):

- [parallelism] expert_tensor_parallel_degree: default 1, "we only support either etp = tp or etp = 1", no
  effect when expert_parallel_degree is 1;
- expert_parallel_comm_backend: standard (PyTorch all-to-all, the default) or deepep;
- pipeline_parallel_expert_parallel_overlap (default true): effective with the DualPipeV schedule, pp > 1 and
  ep > 1;
- [training] dtype bfloat16: "all parameters, gradients, and optimizer states in bfloat16, without an extra copy
  of fp32 weights".

Fixture: tests/fixtures/engines/upstream/torchtitan/deepseek_v3_16b.toml (SOURCES.md), with `--section.option`
overrides as torchtitan's command line gives them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.engines.load import load_model, parse_toml
from planner.engines.torchtitan import import_torchtitan
from planner.errors import PlannerError
from planner.training.rules import resolve_layout

UPSTREAM = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "upstream" / "torchtitan"
MODEL = load_model("deepseek-v2-lite").spec  # the 16B flavor's architecture


def _read(*overrides: str, gpus: int = 16):
    config = parse_toml((UPSTREAM / "deepseek_v3_16b.toml").read_text(), "deepseek_v3_16b.toml")
    imported = import_torchtitan(config, list(overrides), gpus=gpus, given={}, model=MODEL, source="dsv3.toml")
    return imported, resolve_layout(MODEL, gpus, **imported.fields)


def test_the_16b_config_runs_ep8_with_expert_tp_1_and_the_standard_all_to_all():
    imported, layout = _read()
    assert (layout.ep, layout.tp, layout.expert_tp, layout.moe_dispatcher) == (8, 1, 1, "alltoall")
    assert layout.etp is None  # 1 is tp here
    assert not layout.moe_ep_overlap and layout.optimizer_state_dtype == "fp32"


def test_expert_tp_defaults_to_1_not_tp():
    """With tp 2 and no expert_tensor_parallel_degree written torchtitan runs expert TP 1 (its default), which
    planner spells etp 1 (its own default is tp)."""
    config = parse_toml((UPSTREAM / "deepseek_v3_16b.toml").read_text(), "t.toml")
    del config["parallelism"]["expert_tensor_parallel_degree"]
    imported = import_torchtitan(config, ["--parallelism.tensor_parallel_degree", "2"], gpus=16, given={},
                                 model=MODEL, source="t.toml")
    layout = resolve_layout(MODEL, 16, **imported.fields)
    assert (layout.tp, layout.etp) == (2, 1)
    _, same = _read("--parallelism.tensor_parallel_degree", "2", "--parallelism.expert_tensor_parallel_degree", "2")
    assert same.etp is None and same.expert_tp == 2


def test_deepep_backend_and_dualpipev_overlap():
    _, deepep = _read("--parallelism.expert_parallel_comm_backend", "deepep")
    assert deepep.moe_dispatcher == "deepep"
    _, dual = _read("--parallelism.pipeline_parallel_degree", "2", "--parallelism.pipeline_parallel_schedule",
                    "DualPipeV", "--activation_checkpoint.mode", "none")
    assert dual.moe_ep_overlap and (dual.pp, dual.interleave) == (2, 2)
    _, off = _read("--parallelism.pipeline_parallel_degree", "2", "--parallelism.pipeline_parallel_schedule",
                   "DualPipeV", "--parallelism.no-pipeline_parallel_expert_parallel_overlap")
    assert not off.moe_ep_overlap


def test_training_dtype_bfloat16_is_bf16_master_weights_moments_and_gradients():
    imported, layout = _read("--training.dtype", "bfloat16")
    assert (layout.master_weights_dtype, layout.optimizer_state_dtype, layout.grad_dtype) == ("bf16", "bf16", "bf16")
    assert not any("training.dtype" in w for w in imported.warnings)


@pytest.mark.parametrize(("overrides", "field"), [
    (["--parallelism.tensor_parallel_degree", "2", "--parallelism.expert_tensor_parallel_degree", "4"],
     "parallelism.expert_tensor_parallel_degree"),
    (["--parallelism.expert_parallel_comm_backend", "nccl"], "parallelism.expert_parallel_comm_backend"),
    (["--training.dtype", "float16"], "training.dtype"),
])
def test_values_torchtitan_rejects_are_errors_naming_the_setting(overrides, field):
    with pytest.raises(PlannerError) as err:
        _read(*overrides)
    assert err.value.field == field
