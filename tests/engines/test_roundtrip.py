"""Export a layout, import the file back: the same layout and the same estimate, for every engine and feature
combination; a layout the engine cannot run is refused naming the setting.

Which combinations each engine refuses is written out by hand below (REFUSED), from the engines' own rules:
DeepSpeed takes expert parallelism in the model code and has no interleaved or GPipe pipeline schedule and no
ZeRO 2/3 with a pipeline (PipelineEngine asserts), Ulysses splits attention heads; torchtitan trains bf16/fp8
with Adam, and runs MoE models it has no flavor for (Mixtral) through its transformers backend with FSDP only;
Megatron-LM has no GPipe schedule and takes uneven pipeline stages only at the ends.
"""

from __future__ import annotations

import json

import pytest

from planner.engines.automodel import import_automodel
from planner.engines.deepspeed import import_deepspeed
from planner.engines.export import EXPORT_FORMATS, render_export
from planner.engines.hf_trainer import import_hf_trainer, parse_command
from planner.engines.load import load_hardware, load_model, parse_toml, parse_yaml
from planner.engines.megatron import import_megatron, split_launch_text
from planner.engines.megatron_bridge import bridge_tokens, parse_bridge_text, peft_fields
from planner.engines.torchtitan import import_torchtitan
from planner.errors import PlannerError
from planner.training.estimate import estimate
from planner.training.rules import resolve_layout

HW = load_hardware("h100-sxm").spec

# name -> (model id, gpus, layout fields): degrees, ZeRO stages, recompute kinds, interleaving, MoE, dtypes,
# uneven pipeline splits, fp8 weights, Ulysses-incompatible cp, optimizers, schedules.
CASES: dict[str, tuple[str, int, dict]] = {
    "tp2-sp-zero1-selective": ("llama-3.1-8b", 8, dict(tp=2, sequence_parallel=True, zero=1, recompute="selective",
                                                       micro_batch=1, global_batch=64, seq_len=8192)),
    "tp8-pp4-vpp2-fp32grads-tpoverlap": ("llama-3.1-70b", 64, dict(
        tp=8, pp=4, interleave=2, sequence_parallel=True, zero=1, recompute="full", micro_batch=1, global_batch=128,
        seq_len=4096, grad_dtype="fp32", overlap_tp_comm=True)),
    "cp2-zero3": ("llama-3.1-8b", 32, dict(cp=2, zero=3, recompute="none", micro_batch=2, global_batch=64,
                                           seq_len=16384, grad_dtype="fp32")),
    "tp4-pp2-zero2-block-fp8": ("llama-3.1-70b", 32, dict(
        tp=4, pp=2, sequence_parallel=True, zero=2, recompute="full", recompute_layers_per_stage=20, micro_batch=1,
        global_batch=64, seq_len=4096, dtype="fp8")),
    "moe-tp2-pp2-ep8": ("mixtral-8x7b", 64, dict(tp=2, pp=2, ep=8, sequence_parallel=True, zero=1,
                                                 recompute="selective", micro_batch=1, global_batch=256, seq_len=4096)),
    "moe-fsdp": ("mixtral-8x7b", 64, dict(zero=3, recompute="full", micro_batch=1, global_batch=64, seq_len=4096,
                                          grad_dtype="fp32")),
    "fp16-tp8-pp8-noflash": ("gpt3-175b", 64, dict(
        tp=8, pp=8, zero=0, recompute="full", micro_batch=1, global_batch=64, seq_len=2048, dtype="fp16",
        grad_dtype="fp32", flash_attention=False, overlap_grad_reduce=False)),
    "uneven-126-on-pp16": ("llama-3.1-405b", 1024, dict(tp=8, pp=16, zero=1, sequence_parallel=True,
                                                        recompute="full", global_batch=512, seq_len=8192)),
    "uneven-61-on-pp8": ("deepseek-v3", 512, dict(tp=8, pp=8, ep=8, zero=1, sequence_parallel=True,
                                                  recompute="full", global_batch=512, seq_len=4096, mtp_layers=0)),
    "fp8-param-gather": ("llama-3.1-8b", 8, dict(zero=1, dtype="fp8", fp8_param_gather=True, recompute="selective",
                                                 global_batch=64, seq_len=8192)),
    "cp3-of-32-heads": ("llama-3.1-8b", 24, dict(cp=3, zero=1, global_batch=48, seq_len=12288)),
    "sgd": ("llama-3.1-8b", 8, dict(optimizer="sgd", zero=1, global_batch=64, seq_len=4096)),
    # bitsandbytes' 8-bit AdamW under the Hugging Face Trainer's FSDP (its engine: fsdp)
    "adam-8bit-fsdp": ("llama-3.1-8b", 8, dict(engine="fsdp", zero=3, optimizer_state_dtype="int8", recompute="full",
                                               grad_dtype="fp32", global_batch=16, seq_len=4096)),
    # Muon under the layer-wise distributed optimizer with its settings off their defaults (Megatron engines only)
    "muon-tp2-blockwise": ("llama-3.1-8b", 8, dict(optimizer="muon", tp=2, sequence_parallel=True, zero=1,
                                                   muon_tp_mode="blockwise", muon_ns_steps=6, muon_split_qkv=False,
                                                   global_batch=64, seq_len=4096)),
    # LoRA on the attention: an AutoModel recipe's or a Megatron-Bridge override's peft section says it; Megatron-LM's
    # arguments have no flag for it
    "lora-attention": ("llama-3.1-8b", 8, dict(zero=3, recompute="full", lora_rank=16, lora_targets="attention",
                                               global_batch=16, seq_len=4096, grad_dtype="fp32")),
    "gpipe-pp2": ("llama-3.1-8b", 8, dict(pp=2, schedule="gpipe", global_batch=16, seq_len=1024, zero=1)),
    # 5 micro-batches on pp 4: interleaved only in one group of 5 (--microbatch-group-size-per-virtual-pipeline-stage)
    "vpp2-microbatch-group5": ("llama-3.1-8b", 8, dict(pp=4, interleave=2, microbatch_group_size=5, micro_batch=4,
                                                       global_batch=40, seq_len=1024, zero=1)),
    "fsdp-full-shard": ("llama-3.1-8b", 16, dict(zero=3, recompute="full", micro_batch=2, global_batch=64,
                                                 seq_len=4096, grad_dtype="fp32")),
    "zero2-fp16-ddp-overlap-off": ("llama-3.2-3b", 8, dict(zero=2, dtype="fp16", grad_dtype="fp32", global_batch=32,
                                                           seq_len=2048, overlap_grad_reduce=False)),
    # the fused attention's kernel: Megatron writes --attention-backend; the other formats run their engine's own
    "attention-fused": ("llama-3.1-8b", 8, dict(zero=3, recompute="full", global_batch=8, seq_len=16384,
                                                grad_dtype="fp32", attention_kernel="fused")),
    "attention-flash2": ("llama-3.1-8b", 8, dict(zero=3, recompute="full", global_batch=8, seq_len=16384,
                                                 grad_dtype="fp32", attention_kernel="flash2")),
    # the SwiGLU input kept in fp8: a Megatron flag the other formats have no spelling for
    "activation-input-fp8": ("llama-3.1-8b", 8, dict(zero=3, recompute="full", global_batch=8, seq_len=8192,
                                                     grad_dtype="fp32", activation_input_fp8=True)),
    # Transformer Engine's FP8 attention: Megatron's --fp8-dot-product-attention; no other format runs it
    "fp8-attention": ("llama-3.1-8b", 8, dict(zero=1, dtype="fp8", fp8_attention=True, global_batch=64,
                                              seq_len=8192)),
    # torch.compile of the loss alone (torchtitan [compile] components ["loss"]); compiled model and eager loss
    "compile-loss-only": ("llama-3.1-8b", 8, dict(zero=3, engine="torchtitan", compile_loss=True, recompute="full",
                                                  global_batch=8, seq_len=8192, grad_dtype="fp32")),
    "compile-model-only": ("llama-3.1-8b", 8, dict(zero=3, engine="torchtitan", compile=True, compile_loss=False,
                                                   recompute="full", global_batch=8, seq_len=8192, grad_dtype="fp32")),
    # torchao's rowwise float8: torchtitan's recipe_name; no other engine runs it
    "fp8-rowwise": ("llama-3.1-8b", 8, dict(zero=3, dtype="fp8", fp8_recipe="rowwise", engine="torchtitan",
                                            recompute="full", global_batch=8, seq_len=8192, grad_dtype="fp32")),
}

# (case, engine) -> what the refusal names
REFUSED: dict[tuple[str, str], str] = {
    **{("fp8-rowwise", fmt): "fp8_recipe rowwise" for fmt in ("megatron", "deepspeed", "automodel")},
    ("compile-loss-only", "megatron"): "compile_loss", ("compile-model-only", "megatron"): "compile",
    ("fp8-rowwise", "hf_trainer"): "dtype(fp8)",
    ("tp8-pp4-vpp2-fp32grads-tpoverlap", "deepspeed"): "interleave(2)",
    ("tp4-pp2-zero2-block-fp8", "deepspeed"): "zero(2) with pp(2)",
    ("moe-tp2-pp2-ep8", "deepspeed"): "ep(8)",
    ("moe-tp2-pp2-ep8", "torchtitan"): "FSDP only",
    # torchtitan main's registries build torchtitan's own models; Mixtral has none (the TOML names the HF backend)
    ("moe-tp2-pp2-ep8", "torchtitan_registry"): "no torchtitan flavor",
    ("moe-fsdp", "torchtitan_registry"): "no torchtitan flavor",
    ("fp16-tp8-pp8-noflash", "torchtitan"): "fp16",
    ("uneven-61-on-pp8", "megatron"): "num_layers(61)",
    ("uneven-61-on-pp8", "deepspeed"): "ep(8)",
    ("fp8-param-gather", "deepspeed"): "fp8_param_gather",
    ("cp3-of-32-heads", "deepspeed"): "cp(3)",
    ("sgd", "torchtitan"): "Adam",
    ("muon-tp2-blockwise", "torchtitan"): "Adam",
    # bitsandbytes' 8-bit moments: the Hugging Face Trainer's alone
    **{("adam-8bit-fsdp", fmt): "cannot run optimizer_state_dtype int8" for fmt in ("megatron", "deepspeed",
                                                                                 "automodel")},
    ("adam-8bit-fsdp", "torchtitan"): "optimizer_state_dtype int8 with master_weights_dtype fp32",
    ("muon-tp2-blockwise", "deepspeed"): "cannot run optimizer muon",
    ("muon-tp2-blockwise", "automodel"): "cannot run optimizer muon",
    ("muon-tp2-blockwise", "hf_trainer"): "tp(2)",
    ("gpipe-pp2", "megatron"): "GPipe",
    **{("lora-attention", fmt): "no LoRA setting planner writes" for fmt in ("megatron", "deepspeed", "torchtitan",
                                                                             "torchtitan_registry", "hf_trainer")},
    **{("vpp2-microbatch-group5", fmt): "microbatch_group_size(5)" for fmt in ("torchtitan", "torchtitan_registry",
                                                                             "automodel")},
    ("vpp2-microbatch-group5", "deepspeed"): "interleave(2)",
    ("vpp2-microbatch-group5", "hf_trainer"): "pp(4)",
    ("gpipe-pp2", "deepspeed"): "gpipe",
    ("zero2-fp16-ddp-overlap-off", "torchtitan"): "fp16",
    **{("activation-input-fp8", fmt): "activation_input_fp8" for fmt in ("deepspeed", "torchtitan", "hf_trainer",
                                                                        "automodel")},
    **{("fp8-attention", fmt): "fp8_attention" for fmt in ("deepspeed", "torchtitan", "automodel")},
    ("fp8-attention", "hf_trainer"): "zero(1)",
    # NeMo AutoModel builds its models in bf16 and gathers bf16 parameters
    ("fp16-tp8-pp8-noflash", "automodel"): "fp16",
    ("zero2-fp16-ddp-overlap-off", "automodel"): "fp16",
    ("fp8-param-gather", "automodel"): "fp8_param_gather",
    # the Hugging Face Trainer runs data parallelism only (DDP, FSDP), whole-layer checkpointing, bf16/fp16
    **{(name, "hf_trainer"): why for name, why in (
        ("tp2-sp-zero1-selective", "tp(2)"), ("tp8-pp4-vpp2-fp32grads-tpoverlap", "tp(8)"), ("cp2-zero3", "cp(2)"),
        ("tp4-pp2-zero2-block-fp8", "tp(4)"), ("moe-tp2-pp2-ep8", "tp(2)"), ("fp16-tp8-pp8-noflash", "tp(8)"),
        ("uneven-126-on-pp16", "tp(8)"), ("uneven-61-on-pp8", "tp(8)"), ("fp8-param-gather", "zero(1)"),
        ("cp3-of-32-heads", "cp(3)"), ("sgd", "zero(1)"), ("gpipe-pp2", "pp(2)"))},
}

# (case, format): what this format writes and its engine's other format does not (Megatron-Bridge's peft section)
SAYS_MORE = {("lora-attention", "megatron_bridge")}

MATRIX = [pytest.param(name, fmt, id=f"{fmt}-{name}") for name in CASES for fmt in EXPORT_FORMATS]
# formats another format's engine runs: torchtitan main's registries, Megatron-Bridge's overrides (Megatron-Core)
SAME_ENGINE = {"torchtitan_registry": "torchtitan", "megatron_bridge": "megatron"}


def _estimate(model_id: str, gpus: int, fields: dict):
    model = load_model(model_id).spec
    layout = resolve_layout(model, gpus, **fields)
    return model, layout, estimate(model, HW, layout)


def _read_back(fmt: str, text: str, model, gpus: int):
    """The exported file read by planner's importer for `fmt` (with only the file and the GPU count)."""
    if fmt == "megatron":
        imported = import_megatron(split_launch_text(text, "m.sh"), gpus=gpus, given={}, model=model, source="m.sh")
    elif fmt == "megatron_bridge":
        data = parse_bridge_text(text, "override.yaml")
        assert data is not None
        tokens, warnings = bridge_tokens(data, "override.yaml")
        assert warnings == []  # the export says all it needs: nothing taken from a recipe's base
        # its LoRA, which no Megatron-LM flag says, as planner's job reader adds it
        imported = import_megatron(tokens, gpus=gpus, given=peft_fields(data, "override.yaml"), model=model,
                                   source="override.yaml")
    elif fmt == "deepspeed":
        imported = import_deepspeed(json.loads(text), gpus=gpus, given={}, source="ds.json")
    elif fmt == "automodel":
        imported = import_automodel(parse_yaml(text, "r.yaml"), gpus=gpus, given={}, model=model, source="r.yaml")
    elif fmt == "hf_trainer":
        imported = import_hf_trainer(parse_command(text, "train.sh"), None, gpus=gpus, given={}, source="train.sh")
    elif fmt == "torchtitan_registry":
        from planner.engines.torchtitan_registry import function_name, read_registry

        registry = read_registry(text, function_name(model_id_of(model)), source="config_registry.py")
        imported = import_torchtitan(registry.config, [], gpus=gpus, given={}, model=model,
                                     source="config_registry.py")
    else:
        imported = import_torchtitan(parse_toml(text, "t.toml"), [], gpus=gpus, given={}, model=model,
                                     source="t.toml")
    return resolve_layout(model, gpus, **imported.fields)


def model_id_of(model) -> str:
    """The catalog id of a case's model (the exported function is named after it)."""
    return next(model_id for model_id, _, _ in CASES.values() if load_model(model_id).spec == model)


@pytest.mark.parametrize(("name", "fmt"), MATRIX)
def test_export_reads_back_to_the_same_estimate_or_is_refused(name, fmt):
    model_id, gpus, fields = CASES[name]
    model, layout, est = _estimate(model_id, gpus, fields)
    refused = REFUSED.get((name, fmt))
    # an engine refuses the same layouts in either of its formats, but for what one format can say and the other not
    if refused is None and fmt in SAME_ENGINE and (name, fmt) not in SAYS_MORE:
        refused = REFUSED.get((name, SAME_ENGINE[fmt]))
    if refused is not None:
        with pytest.raises(PlannerError, match=refused.replace("(", r"\(").replace(")", r"\)")):
            render_export(fmt, model_id, model, HW, layout, est, hardware_id="h100-sxm")
        return
    exported = render_export(fmt, model_id, model, HW, layout, est, hardware_id="h100-sxm")
    back = _read_back(fmt, exported.text, model, gpus)
    assert back == exported.layout
    again, written = estimate(model, HW, back), estimate(model, HW, exported.layout)
    assert again.to_json() == written.to_json()
    peak = written.stages[written.peak_stage].total_bytes / 2**30
    assert f"Predicted peak memory: {peak:.1f} GiB" in exported.text  # the header describes the file
    if exported.layout != layout:  # the engine runs it changed: every change is said, in the file too
        assert exported.notes and all(f"Note: {note}" in exported.text.replace('\\"', '"')
                                      for note in exported.notes)


@pytest.mark.parametrize("name", [n for n in CASES if ("megatron" not in [e for (c, e) in REFUSED if c == n])])
def test_megatron_export_describes_the_model_itself(name):
    """The architecture written in a Megatron-LM file reads back to the same per-GPU memory as the catalog
    spec (sliding windows and extra norms aside, which Megatron flags cannot express)."""
    model_id, gpus, fields = CASES[name]
    model, layout, est = _estimate(model_id, gpus, fields)
    exported = render_export("megatron", model_id, model, HW, layout, est, hardware_id="h100-sxm")
    from_args = import_megatron(split_launch_text(exported.text, "m.sh"), gpus=gpus, given={}, model=None,
                                source="m.sh")
    assert resolve_layout(from_args.model, gpus, **from_args.fields) == exported.layout
    if model.sliding_window_layers == 0 and model.norms_per_layer == 2 and not model.embedding_norm:
        assert estimate(from_args.model, HW, exported.layout).to_json()["memory"] == \
            estimate(model, HW, exported.layout).to_json()["memory"]


def test_megatron_runs_every_case_it_accepts_unchanged():
    for name, (model_id, gpus, fields) in CASES.items():
        if ("megatron" in [e for (c, e) in REFUSED if c == name]):
            continue
        model, layout, est = _estimate(model_id, gpus, fields)
        mapped = render_export("megatron", model_id, model, HW, layout, est).layout
        # fp16 with fp32 gradients and bf16/fp8 with fp32 or bf16 ones are all Megatron-LM settings
        assert mapped == layout, name


def test_deepspeed_export_holds_its_degrees_in_deepspeed_keys():
    """Ulysses' sequence_parallel_size carries cp; nothing DeepSpeed runs is only in the '_planner' block."""
    model, layout, est = _estimate(*CASES["cp2-zero3"])
    config = json.loads(render_export("deepspeed", "llama-3.1-8b", model, HW, layout, est).text)
    assert config["sequence_parallel_size"] == 2
    assert set(config["_planner"]["model_code"]) == {"seq_len", "recompute", "recompute_layers_per_stage",
                                                     "flash_attention", "dtype", "fp8_recipe", "optimizer"}
    # DeepSpeedConfig._batch_assertion: train = micro x accum x (world / sequence_parallel_size) = 2 x 2 x 16
    assert config["train_batch_size"] == config["train_micro_batch_size_per_gpu"] * \
        config["gradient_accumulation_steps"] * (32 // 2) == 64


def test_deepspeed_autotp_leaves_the_train_batch_to_deepspeed():
    """AutoTP's groups come after DeepSpeedConfig's batch check, whose world then counts the tensor-parallel
    ranks too: the export gives micro batch and accumulation and lets DeepSpeed derive the rest."""
    model, layout, est = _estimate(*CASES["tp2-sp-zero1-selective"])
    config = json.loads(render_export("deepspeed", "llama-3.1-8b", model, HW, layout, est).text)
    assert "train_batch_size" not in config and config["tensor_parallel"] == {"autotp_size": 2}
    # a config the HF Trainer filled ("auto": world_size x per-device batch x accumulation) reads the same
    filled = {**config, "train_batch_size": 8 * 1 * config["gradient_accumulation_steps"]}
    assert _read_back("deepspeed", json.dumps(filled), model, 8).global_batch == layout.global_batch


def test_torchtitan_export_of_a_model_without_a_flavor_names_the_hf_model(run_cli, tmp_path):
    """Mixtral has no torchtitan flavor: an empty [model] would make torchtitan train its llama3 debugmodel.
    The export names torchtitan's transformers backend and the Hugging Face id; 'planner check' reads the
    file back without --model."""
    model, layout, est = _estimate(*CASES["moe-fsdp"])
    exported = render_export("torchtitan", "mixtral-8x7b", model, HW, layout, est, hardware_id="h100-sxm")
    config = parse_toml(exported.text, "t.toml")
    assert config["model"]["name"] == "transformers_modeling_backend" and config["model"]["flavor"] == "full"
    assert config["hf_transformers"]["model"] == "mistralai/Mixtral-8x7B-v0.1"
    path = tmp_path / "mixtral.toml"
    path.write_text(exported.text)
    result = run_cli("check", "--torchtitan", path, "--hardware", "h100-sxm", "--gpus", "64", "--format", "json")
    assert result.exit_code in (0, 1), result.output
    got = json.loads(result.stdout)[0]
    assert got["model"] == "mixtral-8x7b" and got["config"]["zero"] == 3


@pytest.mark.parametrize(("name", "fmt"), [("uneven-61-on-pp8", "megatron"), ("cp3-of-32-heads", "deepspeed"),
                                           ("sgd", "torchtitan"), ("gpipe-pp2", "megatron")])
def test_refused_exports_are_one_line_errors_on_the_command_line(run_cli, name, fmt):
    model_id, gpus, fields = CASES[name]
    args = ["export", "--to", fmt, "--model", model_id, "--hardware", "h100-sxm", "--gpus", str(gpus)]
    for key, value in fields.items():
        flag = {"recompute_layers_per_stage": "--recompute-layers"}.get(key, "--" + key.replace("_", "-"))
        args += [flag] if value is True else ([f"--no-{key.replace('_', '-')}"] if value is False else [flag, str(value)])
    result = run_cli(*args)
    assert result.exit_code == 2 and result.output.startswith("error: ") and len(result.output.splitlines()) == 1
    assert REFUSED[(name, fmt)] in result.output


def test_header_reports_the_prediction_of_the_written_layout():
    model, layout, est = _estimate(*CASES["tp2-sp-zero1-selective"])
    exported = render_export("torchtitan", "llama-3.1-8b", model, HW, layout, est, hardware_id="h100-sxm")
    mapped = estimate(model, HW, exported.layout)
    peak = mapped.stages[mapped.peak_stage].total_bytes / 2**30
    assert f"Predicted peak memory: {peak:.1f} GiB" in exported.text
    assert "MFU" in exported.text and "Predicted step time" in exported.text


@pytest.mark.parametrize(("dtype", "grad_dtype", "written"), [("fp16", "bf16", "fp16"), ("bf16", "fp16", "bf16"),
                                                            ("fp8", "fp16", "bf16")])
def test_megatron_maps_gradient_precisions_it_cannot_keep(dtype, grad_dtype, written):
    """Megatron-LM keeps fp16 gradients in fp16 or fp32 and bf16/fp8 ones in bf16 or fp32; the mapped layout is
    written, noted, and reads back unchanged."""
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
                                                           grad_dtype="fp32", engine=fmt))
    exported = render_export(fmt, "llama-3.1-8b", model, HW, layout, est, hardware_id="h100-sxm")
    assert exported.layout == layout.model_copy(update={"schedule": "1f1b"})
    assert estimate(model, HW, exported.layout).to_json()["memory"] == estimate(model, HW, layout).to_json()["memory"]


@pytest.mark.parametrize(("fields", "zero", "grad_dtype"), [
    (dict(zero=0, grad_dtype="fp32"), 0, "bf16"),  # DeepSpeed >= 0.18.5 refuses fp32 accumulation without ZeRO
    (dict(zero=0, grad_dtype="bf16", pp=2), 1, "bf16"),  # a pipeline takes BF16_Optimizer: ZeRO 1
    (dict(zero=0, grad_dtype="bf16"), 0, "bf16"),  # the unsharded bf16 path
    (dict(zero=0, grad_dtype="fp32", dtype="fp16"), 0, "fp16"),  # fp16 without ZeRO keeps fp16 gradients
    (dict(zero=1, grad_dtype="fp32"), 1, "fp32"),  # BF16_Optimizer with fp32 accumulation
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
    layout = resolve_layout(model, 8, tp=2, ep=4, zero=1, sequence_parallel=True, micro_batch=1, global_batch=64, seq_len=4096)
    exported = render_export("megatron", "qwen1.5-moe-a2.7b", model, HW, layout, estimate(model, HW, layout),
                             hardware_id="h100-sxm")
    assert "--moe-shared-expert-gate" in exported.text and "--moe-shared-expert-intermediate-size 5632" in exported.text
    back = import_megatron(split_launch_text(exported.text, "m.sh"), gpus=8, given={}, model=None, source="m").model
    assert back.moe is not None and back.moe.shared_expert_gate
    assert back.moe.shared_ffn_width == model.moe.shared_ffn_width == 5632


@pytest.mark.parametrize(("fmt", "note"), [("megatron", None), ("torchtitan", "attention_kernel fused -> flash2"),
                                           ("deepspeed", "attention_kernel fused -> flash2"),
                                           ("hf_trainer", "attention_kernel fused -> flash2")])
def test_an_attention_kernel_a_format_cannot_write_is_said(fmt, note):
    model, layout, est = _estimate(*CASES["attention-fused"])
    out = render_export(fmt, "llama-3.1-8b", model, HW, layout, est)
    said = [n for n in out.notes if n.startswith("attention_kernel")]
    if note is None:
        assert out.layout.attention_kernel == "fused" and said == []
    else:
        assert out.layout.attention_kernel is None and said and said[0].startswith(note)
    # the kernel the engine runs anyway is dropped without a note
    _, same, same_est = _estimate(*CASES["attention-flash2"])
    if fmt != "megatron":
        quiet = render_export(fmt, "llama-3.1-8b", model, HW, same, same_est)
        assert quiet.layout.attention_kernel is None and not any(n.startswith("attention_kernel") for n in quiet.notes)


def test_megatron_export_refuses_fp8_activation_input_under_moe_act_recompute():
    # Megatron-LM would run the flag and still keep the checkpointed expert activation input in 16 bits.
    model = load_model("mixtral-8x7b").spec
    layout = resolve_layout(model, 64, tp=2, pp=2, ep=8, sequence_parallel=True, zero=1, recompute="selective",
                            recompute_modules=("moe_act",), activation_input_fp8=True, global_batch=256,
                            seq_len=4096)
    with pytest.raises(PlannerError, match="moe_act"):
        render_export("megatron", "mixtral-8x7b", model, HW, layout, estimate(model, HW, layout), hardware_id="h100-sxm")
