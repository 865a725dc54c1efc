"""Export a layout, import the file back: the same layout and the same estimate, for every format."""

from __future__ import annotations

import json

import pytest

from planner.engines.deepspeed import import_deepspeed
from planner.engines.export import render_export
from planner.engines.load import load_hardware, load_model, parse_toml
from planner.engines.megatron import import_megatron, split_launch_text
from planner.engines.torchtitan import import_torchtitan
from planner.errors import PlannerError
from planner.training.estimate import estimate
from planner.training.rules import resolve_layout

HW = load_hardware("h100-sxm").spec

# (model id, gpus, layout fields) covering degrees, ZeRO stages, recompute kinds, interleaving, MoE, dtypes.
CASES = [
    ("llama-3.1-8b", 8, dict(tp=2, sequence_parallel=True, zero=1, recompute="selective", micro_batch=1,
                             global_batch=64, seq_len=8192)),
    ("llama-3.1-70b", 64, dict(tp=8, pp=4, interleave=2, sequence_parallel=True, zero=1, recompute="full",
                               micro_batch=1, global_batch=128, seq_len=4096, grad_dtype="fp32",
                               overlap_tp_comm=True)),
    ("llama-3.1-8b", 32, dict(cp=2, zero=3, recompute="none", micro_batch=2, global_batch=64, seq_len=16384,
                              grad_dtype="fp32")),
    ("llama-3.1-70b", 32, dict(tp=4, pp=2, sequence_parallel=True, zero=2, recompute="full",
                               recompute_layers_per_stage=20, micro_batch=1, global_batch=64, seq_len=4096,
                               dtype="fp8")),
    ("mixtral-8x7b", 64, dict(tp=2, pp=2, ep=8, sequence_parallel=True, zero=1, recompute="selective",
                              micro_batch=1, global_batch=256, seq_len=4096)),
    ("gpt3-175b", 64, dict(tp=8, pp=8, zero=0, recompute="full", micro_batch=1, global_batch=64, seq_len=2048,
                           dtype="fp16", grad_dtype="fp32", flash_attention=False, overlap_grad_reduce=False)),
]


def _estimate(model_id: str, gpus: int, fields: dict):
    model = load_model(model_id).spec
    layout = resolve_layout(model, gpus, **fields)
    return model, layout, estimate(model, HW, layout)


def _memory(model, layout):
    return estimate(model, HW, layout).to_json()["memory"]


@pytest.mark.parametrize(("model_id", "gpus", "fields"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_megatron_roundtrip(model_id, gpus, fields):
    model, layout, est = _estimate(model_id, gpus, fields)
    exported = render_export("megatron", model_id, model, HW, layout, est, hardware_id="h100-sxm")
    assert exported.layout == layout  # Megatron-LM runs every field as is
    tokens = split_launch_text(exported.text, "megatron_args.sh")
    with_model = import_megatron(tokens, gpus=gpus, given={}, model=model, source="x")
    assert resolve_layout(model, gpus, **with_model.fields) == layout
    # and the architecture written in the file reads back to the same parameter shapes
    from_args = import_megatron(tokens, gpus=gpus, given={}, model=None, source="x")
    assert resolve_layout(from_args.model, gpus, **from_args.fields) == layout
    if model.sliding_window_layers == 0 and model.norms_per_layer == 2:
        assert _memory(from_args.model, layout) == _memory(model, layout)


@pytest.mark.parametrize(("model_id", "gpus", "fields"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_deepspeed_roundtrip(model_id, gpus, fields):
    model, layout, est = _estimate(model_id, gpus, fields)
    exported = render_export("deepspeed", model_id, model, HW, layout, est, hardware_id="h100-sxm")
    config = json.loads(exported.text)
    assert "Predicted peak memory" in " ".join(config["_planner"]["prediction"])
    imported = import_deepspeed(config, gpus=gpus, given={}, source="ds_config.json")
    assert resolve_layout(model, gpus, **imported.fields) == exported.layout
    # the layout as DeepSpeed runs it: unchanged, or changed with a note (fp16 without ZeRO keeps fp16 gradients)
    assert exported.layout == layout or exported.notes


def _torchtitan_native(model_id: str, gpus: int, fields: dict) -> bool:
    return fields.get("dtype", "bf16") != "fp16"


@pytest.mark.parametrize(("model_id", "gpus", "fields"), [c for c in CASES if _torchtitan_native(*c)],
                         ids=[f"{c[0]}-{c[1]}" for c in CASES if _torchtitan_native(*c)])
def test_torchtitan_roundtrip(model_id, gpus, fields):
    model, layout, est = _estimate(model_id, gpus, fields)
    exported = render_export("torchtitan", model_id, model, HW, layout, est, hardware_id="h100-sxm")
    # the exported layout is what torchtitan runs; importing the file gives exactly it
    imported = import_torchtitan(parse_toml(exported.text, "t.toml"), [], gpus=gpus, given={}, model=model,
                                 source="t.toml")
    assert resolve_layout(model, gpus, **imported.fields) == exported.layout
    assert exported.layout.grad_dtype == "fp32" and exported.layout.sequence_parallel == (layout.tp > 1)
    if exported.layout != layout:
        assert exported.notes and "Note:" in exported.text


def test_torchtitan_native_layout_is_unchanged():
    model, layout, est = _estimate("llama-3.1-8b", 32, CASES[2][2])
    exported = render_export("torchtitan", "llama-3.1-8b", model, HW, layout, est)
    assert exported.layout == layout and exported.notes == ()


def test_header_reports_the_prediction_of_the_written_layout():
    model, layout, est = _estimate(*CASES[0])
    exported = render_export("torchtitan", "llama-3.1-8b", model, HW, layout, est, hardware_id="h100-sxm")
    mapped = estimate(model, HW, exported.layout)
    peak = mapped.stages[mapped.peak_stage].total_bytes / 2**30
    assert f"Predicted peak memory: {peak:.1f} GiB" in exported.text
    assert "MFU" in exported.text and "Predicted step time" in exported.text


def test_unexportable_layouts_are_errors():
    model, layout, est = _estimate("llama-3.1-8b", 8, dict(pp=2, schedule="gpipe", global_batch=16, seq_len=1024))
    with pytest.raises(PlannerError, match="GPipe"):
        render_export("megatron", "llama-3.1-8b", model, HW, layout, est)
    model, layout, est = _estimate("llama-3.1-8b", 8, dict(dtype="fp16", global_batch=16, seq_len=1024))
    with pytest.raises(PlannerError, match="fp16"):
        render_export("torchtitan", "llama-3.1-8b", model, HW, layout, est)


@pytest.mark.parametrize(("dtype", "grad_dtype", "written"), [("fp16", "bf16", "fp16"), ("bf16", "fp16", "bf16"),
                                                            ("fp8", "fp16", "bf16")])
def test_megatron_maps_gradient_precisions_it_cannot_keep(dtype, grad_dtype, written):
    """Megatron-LM keeps fp16 gradients in fp16 or fp32 and bf16/fp8 ones in bf16 or fp32; the exporter wrote
    '--fp16' for fp16 + bf16 gradients, which read back as fp16 gradients (a different layout than the header
    described). The mapped layout is written, noted, and reads back unchanged."""
    model, layout, est = _estimate("llama-3.1-8b", 8, dict(dtype=dtype, grad_dtype=grad_dtype, global_batch=16,
                                                           seq_len=1024))
    exported = render_export("megatron", "llama-3.1-8b", model, HW, layout, est, hardware_id="h100-sxm")
    assert exported.layout.grad_dtype == written and exported.notes
    back = import_megatron(split_launch_text(exported.text, "m.sh"), gpus=8, given={}, model=model, source="m.sh")
    assert resolve_layout(model, 8, **back.fields) == exported.layout


@pytest.mark.parametrize("fmt", ["megatron", "torchtitan"])
def test_gpipe_without_pipeline_is_exported_as_no_schedule(fmt):
    """With one pipeline stage the schedule means nothing: Megatron-LM rejected it and torchtitan read it back as
    1f1b (a different layout than exported)."""
    model, layout, est = _estimate("llama-3.1-8b", 8, dict(schedule="gpipe", global_batch=16, seq_len=1024, zero=3,
                                                           grad_dtype="fp32"))
    exported = render_export(fmt, "llama-3.1-8b", model, HW, layout, est, hardware_id="h100-sxm")
    assert exported.layout == layout.model_copy(update={"schedule": "1f1b"})
    assert _memory(model, exported.layout) == _memory(model, layout)


@pytest.mark.parametrize(("fields", "zero", "grad_dtype"), [
    (dict(zero=0, grad_dtype="fp32"), 1, "fp32"),  # BF16_Optimizer: optimizer states sharded as ZeRO 1
    (dict(zero=0, grad_dtype="bf16", pp=2), 1, "bf16"),  # a pipeline takes BF16_Optimizer too
    (dict(zero=0, grad_dtype="bf16"), 0, "bf16"),  # the unsharded FP16_Optimizer in bf16 mode
    (dict(zero=0, grad_dtype="fp32", dtype="fp16"), 0, "fp16"),  # fp16 without ZeRO keeps fp16 gradients
])
def test_deepspeed_without_zero_is_written_as_deepspeed_runs_it(fields, zero, grad_dtype):
    model, layout, est = _estimate("llama-3.1-8b", 8, dict(global_batch=16, seq_len=1024, **fields))
    exported = render_export("deepspeed", "llama-3.1-8b", model, HW, layout, est, hardware_id="h100-sxm")
    assert (exported.layout.zero, exported.layout.grad_dtype) == (zero, grad_dtype)
    assert bool(exported.notes) == (exported.layout != layout)
    back = import_deepspeed(json.loads(exported.text), gpus=8, given={}, source="ds.json")
    assert resolve_layout(model, 8, **back.fields) == exported.layout


def test_megatron_roundtrip_keeps_a_gated_shared_expert_of_its_own_width():
    # Qwen1.5-MoE-A2.7B (HF fixture): one shared expert of 5,632 (four experts' worth of 1,408) behind a gate.
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "qwen1.5-moe-a2.7b.json"
    model = load_model(str(path)).spec
    layout = resolve_layout(model, 8, tp=2, ep=4, zero=1, micro_batch=1, global_batch=64, seq_len=4096)
    exported = render_export("megatron", "qwen1.5-moe-a2.7b", model, HW, layout, estimate(model, HW, layout),
                             hardware_id="h100-sxm")
    assert "--moe-shared-expert-gate" in exported.text and "--moe-shared-expert-intermediate-size 5632" in exported.text
    back = import_megatron(split_launch_text(exported.text, "m.sh"), gpus=8, given={}, model=None, source="m").model
    assert back.moe is not None and back.moe.shared_expert_gate
    assert back.moe.shared_ffn_width == model.moe.shared_ffn_width == 5632
