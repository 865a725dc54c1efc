"""Offload: optimizer states / parameters / activations on the host, host memory, copies and the CPU step.

Tiny GPT (tests/round_specs.tiny): 111,744 parameters (test_memory.py's hand count); on a DGX H100 profile
(8 GPUs a node, host memory bandwidth 614.4 GB/s, GPU-host link 32 GB/s).
"""

from __future__ import annotations

import numpy as np
import pytest
from round_specs import lay, tiny  # noqa: E402

from planner.engines.load import load_hardware
from planner.errors import PlannerError
from planner.specs.layout import Layout
from planner.training.estimate import estimate
from planner.training.memory import host_state_bytes, model_state_bytes, stage_params
from planner.training.time import CPU_ADAM_BYTES_PER_PARAM, CPU_ADAM_MEMORY_EFFICIENCY, TORCH_CPU_ADAM_SLOWDOWN

PSI = 111_744
ZERO = np.zeros(1, dtype=np.int64)


def test_optimizer_offload_moves_the_states_and_an_fp32_gradient_copy_to_the_host() -> None:
    a = lay(dp=8, zero=2, offload_optimizer=True)
    sp = stage_params(tiny(), a, ZERO)
    weights, grads, optim = model_state_bytes(a, sp)
    assert optim.tolist() == [0.0]
    assert weights.tolist() == [2 * PSI] and grads.tolist() == [2 * PSI / 8]  # ZeRO-2 keeps its gradient shard
    # host per rank: the shard's 12 bytes of Adam states + 4 bytes of fp32 gradient
    assert host_state_bytes(a, sp).tolist() == [PSI / 8 * 16]


def test_param_offload_needs_zero3_and_moves_the_parameter_shard() -> None:
    with pytest.raises(ValueError, match="offload_params needs zero 3"):
        Layout(global_batch=8, seq_len=32, zero=2, offload_params=True)
    a = lay(dp=8, zero=3, offload_params=True, offload_optimizer=True)
    sp = stage_params(tiny(), a, ZERO)
    weights, grads, optim = model_state_bytes(a, sp)
    assert weights.tolist() == grads.tolist() == optim.tolist() == [0.0]
    assert host_state_bytes(a, sp).tolist() == [PSI / 8 * (16 + 2)]


def test_cpu_step_and_host_memory_by_hand() -> None:
    hw = load_hardware("h100-sxm").spec
    layout = Layout(dp=8, zero=3, offload_optimizer=True, offload_params=True, global_batch=8, seq_len=32,
                    engine="deepspeed")
    est = estimate(tiny(), hw, layout)
    rate = 614.4e9 * CPU_ADAM_MEMORY_EFFICIENCY / CPU_ADAM_BYTES_PER_PARAM  # parameters per second per node
    assert est.scalar("cpu_optimizer_seconds") == pytest.approx(8 * (PSI / 8) / rate)
    assert est.scalar("host_bytes") == pytest.approx(8 * PSI / 8 * 18)
    torch = estimate(tiny(), hw, layout.model_copy(update={"cpu_optimizer": "torch"}))
    assert torch.scalar("cpu_optimizer_seconds") == pytest.approx(TORCH_CPU_ADAM_SLOWDOWN * est.scalar("cpu_optimizer_seconds"))


def test_activation_offload_frees_gpu_memory_and_fills_the_host() -> None:
    hw = load_hardware("h100-sxm").spec
    base = Layout(global_batch=1, seq_len=256, engine="megatron")
    off = base.model_copy(update={"offload_activation_layers": 1})
    a, b = estimate(tiny(), hw, base), estimate(tiny(), hw, off)
    moved = a.stages[0].activations_bytes - b.stages[0].activations_bytes
    assert moved > 0
    assert b.scalar("host_bytes") == pytest.approx(moved)  # one GPU on the node


def test_offload_without_a_host_section_is_a_planner_error() -> None:
    with pytest.raises(PlannerError, match="has no 'host' section"):
        estimate(tiny(), load_hardware("l40s").spec,
                 Layout(dp=8, zero=1, offload_optimizer=True, global_batch=8, seq_len=32, engine="deepspeed"))


def test_engines_refuse_offload_they_lack() -> None:
    with pytest.raises(PlannerError, match="engine megatron cannot run offload_params"):
        estimate(tiny(), load_hardware("h100-sxm").spec,
                 Layout(dp=8, zero=3, offload_params=True, global_batch=8, seq_len=32))


def test_gb200_rack_offloads_over_its_grace_hosts() -> None:
    """Megatron-Bridge's GB200 recipes offload activations (cpu_offloading_num_layers): the rack's profile has a
    host, and its NVLink-C2C link moves a layer's activations faster than a DGX H100's shared PCIe Gen5 link."""
    lay = Layout(global_batch=1, seq_len=256, engine="megatron", offload_activation_layers=1)
    gb200, h100 = load_hardware("gb200-nvl72").spec, load_hardware("h100-sxm").spec
    assert gb200.host is not None and h100.host is not None
    assert gb200.host.link_bandwidth_bytes_per_s > h100.host.link_bandwidth_bytes_per_s
    result = estimate(tiny(), gb200, lay)
    assert 0 < result.scalar("host_bytes") <= gb200.host.memory_bytes
