"""Public runs as calibration runs: planner's own training cases and the project's reference YAMLs.

Pure: parsed data in, `Run`s out (callers read the files through planner.engines.load). Sources:
- planner/validate/training_cases.yaml (already planner inputs): grouped by their `group`.
- published_runs_modern.yaml and published_runs_moe.yaml (the reference data's own fields: an HF config
  or catalog id as `model`, a `layout` in the short names its `about` lists, or Narayanan et al.'s
  `parallel` block): each case becomes a job; its `source` and hardware name the group.
Cases planner cannot turn into a job (a model not in the catalog, a layout the rules refuse) are
returned as skipped, with the reason.
"""

from __future__ import annotations

import re
from typing import Any

from planner.calibrate.runs import GIB, Run
from planner.engines.hf_config import model_from_hf_config
from planner.engines.load import load_hardware, load_model
from planner.errors import PlannerError
from planner.physics.rotary import yarn_attention_factor
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.specs.runs import Measured
from planner.specs.validation import validate_spec
from planner.training.flops import step_flop
from planner.training.rules import resolve_layout

# The systems the reference YAMLs describe in words (hardware_as_published.gpu / hardware.gpu).
HARDWARE_BY_GPU = {
    "H100 SXM HBM2e 96GB (2.4 TB/s), 500 W power limit": "h100-sxm-96gb",
    "H100-SXM5-80GB": "h100-sxm",
    "A100-SXM4-80GB": "a100-80gb",
}
SHORT_LAYOUT = {"mb": "micro_batch", "gbs": "global_batch", "seq": "seq_len", "vp": "interleave",
                "sp": "sequence_parallel", "tp_overlap": "overlap_tp_comm", "dispatcher": "moe_dispatcher",
                "ep_overlap": "moe_ep_overlap"}
IGNORED_LAYOUT = ("gpus",)  # the job's GPU count, not a layout field


# Recipe settings of a row that the reference's layout block does not carry but its notes or recipe file state
# (Megatron-Bridge recipe files the MoE rows' notes name; the NeMo launcher recipe of a NeMo row), as planner
# layout fields; both
# readers of the reference rows apply them (runs_from_reference here, benchmarks/import_published_runs.py).
# Rows not named take the defaults (dropless, eager, fp32 optimizer states, the model's MTP layers).
_DSV3_OPT = {"optimizer_state_dtype": "bf16"}  # notes: precision-aware optimizer, bf16 exp_avg / exp_avg_sq
_DROP = {"moe_capacity_factor": 1.0}  # notes: token drop, capacity factor 1.0, padded to capacity
_DSV3_2509 = {**_DSV3_OPT, **_DROP, "moe_shared_expert_overlap": True, "mtp_layers": 1,
              "recompute_modules": ["mla_up_proj"]}
_QWEN_2509 = {**_DROP, "grad_dtype": "bf16"}  # notes: grad_reduce_in_fp32 off
_GRAPHS_2511 = {"cuda_graph_scope": ["moe_router", "moe_preprocess"]}
# Megatron-Bridge v0.2.1 scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py (set_gpt_oss_common_configs):
# grad_reduce_in_fp32 False; the notes' recompute modules.
_GPT_OSS = {"recompute_modules": ["layernorm", "moe_act"], "grad_dtype": "bf16"}
# NeMo 24.07's Nemotron-4 340B recipe (NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/nemotron/
# nemotron_340b.yaml @ tag 24.07, optim: distributed_fused_adam with dtype bf16, grad_sync_dtype bf16): Apex
# DistributedFusedAdam keeps its Adam state in `dtype` (bf16 moments), and NeMo stores no master copy when that
# dtype is the model's (NVIDIA/NeMo megatron_base_model.py @ 4c73f77670, setup_optimization: store_params False
# when optim_dtype == model_dtype), so the bf16 weights are the master; gradients are synchronised in bf16.
_NEMOTRON_340B = {"optimizer_state_dtype": "bf16", "master_weights_dtype": "bf16", "grad_dtype": "bf16"}
RECIPES: dict[str, dict[str, Any]] = {
    "mb2509_gb200_dsv3_fp8cs": _DSV3_2509,
    "mb2509_gb200_dsv3_mxfp8_pp8": _DSV3_2509,
    "mb2509_b200_dsv3_fp8cs": _DSV3_2509,
    "mb2509_h100_dsv3_fp8": {**_DSV3_OPT, "mtp_layers": 1, "recompute_modules": ["mla_up_proj", "mlp"],
                             "overlap_grad_reduce": False},
    "mb2509_gb200_qwen3_30b_fp8cs": {**_QWEN_2509, "cuda_graph_scope": ["full"]},
    "mb2509_b200_qwen3_30b_fp8cs": {**_QWEN_2509, "cuda_graph_scope": ["full"]},
    "mb2509_gb200_qwen3_235b_fp8cs": {**_QWEN_2509, "cuda_graph_scope": ["full"]},
    "mb2509_b200_qwen3_235b_fp8cs": _QWEN_2509,
    "mb2509_h100_qwen3_30b_fp8cs": _QWEN_2509,
    "mb2509_h100_qwen3_235b_fp8cs": _QWEN_2509,
    "mb2511_gb200_dsv3_bf16": {**_DSV3_OPT, **_GRAPHS_2511, "mtp_layers": 0, "recompute_modules": ["mla_up_proj"],
                               "grad_dtype": "bf16"},
    "mb2511_gb200_dsv3_mxfp8": {**_DSV3_OPT, **_GRAPHS_2511, "mtp_layers": 0, "recompute_modules": ["mla_up_proj"]},
    "mb2511_gb300_dsv3_bf16": {**_DSV3_OPT, "cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"],
                               "mtp_layers": 0, "recompute_modules": ["moe_act"]},
    "mb2511_b200_dsv3_mxfp8_mtp": {**_DSV3_OPT, "mtp_layers": 1, "recompute_modules": ["mla_up_proj"]},
    "mb2511_gb200_qwen3_30b_mxfp8": _GRAPHS_2511,
    "mb2511_b200_qwen3_30b_mxfp8": _GRAPHS_2511,
    "mb2511_gb200_qwen3_235b_bf16": {"cuda_graph_scope": ["attn", "moe_router", "moe_preprocess"]},
    "mb2511_gb200_gptoss120b_bf16": _GPT_OSS,
    # The table prints EP 8, but the v0.2.1 preset it ran (GPT_OSS_120B_B200_BF16_BASE_CONFIG, whose MBS 4 and GBS 512
    # the row matches) sets EP 64, across the 8 nodes, and the row's throughput is that of EP 64: see RECIPE_NOTES.
    "mb2511_b200_gptoss120b_bf16": {**_GPT_OSS, "ep": 64},
    # The table's MBS 4 contradicts its own GA 2 and PP 4 (512 / (16 x 4) = 8 micro-batches), and 4 sequences of
    # 4,096 tokens in flight on 9 layers cannot be held in 80 GB; the v0.2.1 H100 preset runs MBS 1.
    "mb2511_h100_gptoss120b_bf16": {**_GPT_OSS, "micro_batch": 1},
    "nemo2407_nemotron_340b_128gpus": _NEMOTRON_340B,
    # torchtitan @ 9dec370 (the benchmark's commit), torchtitan/parallelisms/pipelining_utils.py
    # build_pipeline_schedule: n_microbatches = pipeline_parallel_microbatches, else pipeline_parallel_degree (8),
    # for the looped schedules too (the option's help says "the number of pipeline stages"; the code uses the pp
    # degree), and generate_split_points gives Interleaved1F1B 2 stages per rank: 8 micro-batches of 32 / 8 = 4.
    "tt24_t5_405b_interleaved": {"micro_batch": 4},
}


# Why a row's recipe setting overrides what its table prints (appended to the case's notes by
# benchmarks/import_published_runs.py).
RECIPE_NOTES: dict[str, str] = {
    "mb2511_b200_gptoss120b_bf16": (
        "Run with EP 64 (its recipe), not the table's EP 8: Megatron-Bridge v0.2.1 (1c43b39285) "
        "scripts/performance/configs/gpt_oss/workload_base_configs.py GPT_OSS_120B_B200_BF16_BASE_CONFIG sets "
        "expert_model_parallel_size=64 with the row's MBS 4 and GBS 512; the B200 preset kept EP 64 through v0.3.1 "
        "and PR #2906 (7260d621, in v0.4.0) set EP 8 and HybridEP. Throughput says which ran "
        "(docs/performance-summary-archive.md @067f987df0): the 26.02 B200 row, printed with EP 64, makes 8,047 "
        "tokens/s/GPU at GBS 1280, as this row's 8,213; the 26.02.01 row, printed with EP 8, makes 13,722, while "
        "GB200, whose EP 64 stays inside the NVL72 rack, went 15,784 -> 15,754 between the same releases. On DGX "
        "B200 an EP 64 group spans 8 nodes: 7/8 of every all-to-all goes through the GPU's own 400 Gb/s NIC."
    ),
    "tt24_t5_405b_interleaved": (
        "Run with 8 micro-batches of 4 (the reference reads 16 of 2 from the option's help text): torchtitan "
        "9dec370 torchtitan/parallelisms/pipelining_utils.py build_pipeline_schedule takes n_microbatches = "
        "pipeline_parallel_microbatches or pipeline_parallel_degree, and generate_split_points gives the looped "
        "schedule 2 stages per rank (126 layers as 7, 14 x 8, 7)."
    ),
}


def catalog_hardware(case: dict[str, Any]) -> str | None:
    """The catalog id of a reference row's system: its `hardware` id (the GB300 rows name gb200-nvl72 for want
    of a GB300 profile, which exists now), or the system the modern file describes in words."""
    if "_gb300_" in case["id"]:
        return "gb300-nvl72"
    if isinstance(case.get("hardware"), str):
        return str(case["hardware"])
    described = (case.get("hardware_as_published") or case.get("hardware") or {}).get("gpu", "")
    return HARDWARE_BY_GPU.get(described)


def _measured_seconds(model: ModelSpec, layout: Layout, quantity: str, value: float) -> float:
    flop = step_flop(model, layout.to_arrays())
    if quantity == "hardware_tflops_per_gpu":
        return float(flop.hardware_flop[0]) / (value * 1e12 * layout.gpus)
    if quantity == "model_tflops_per_gpu":
        return float(flop.model_flop[0]) / (value * 1e12 * layout.gpus)
    raise ValueError(quantity)


def runs_from_training_cases(cases: list[dict[str, Any]]) -> list[Run]:
    """planner's validation cases (planner.validate.training_cases) as runs, one group per `group`."""
    runs = []
    for case in cases:
        source = f"planner.validate/training_cases.yaml:{case['id']}"
        model = validate_spec(ModelSpec, case["model"], source)
        layout = validate_spec(Layout, case["layout"], source)
        hw = load_hardware(case["hardware"])
        published = case["published"]
        if published["quantity"] == "peak_bytes":
            continue  # memory rows (torchtitan peak memory) are not step-time runs
        value = float(published["value"])
        if published["quantity"] == "layer_forward_backward_seconds":
            seconds = value / 1e3 if published["unit"] == "ms" else value
            quantity = "layer_forward_backward_seconds"
        elif published["quantity"] == "step_seconds":
            seconds, quantity = value, "step_seconds"
        else:
            seconds = _measured_seconds(model, layout, published["quantity"], value)
            quantity = "step_seconds"
        runs.append(Run(name=case["id"], model_id=model.name, model=model, hardware_id=hw.id, hardware=hw.spec,
                        layout=layout, measured_seconds=seconds, quantity=quantity, source=case["source"],
                        group=case["group"]))
    return runs


def _gpt(m: dict[str, Any]) -> ModelSpec:
    """Narayanan et al.'s GPT shapes (GeLU MLP, learned positions, LayerNorm, biases, tied embeddings)."""
    return ModelSpec(
        name=m["name"], num_layers=m["layers"], hidden_size=m["hidden"], num_attention_heads=m["heads"],
        ffn_hidden_size=m["ffn"], mlp_kind="standard", vocab_size=m["vocab"], tied_embeddings=True,
        position_embedding="learned", norm_kind="layernorm", qkv_bias=True, attention_output_bias=True,
        mlp_bias=True, max_seq_len=m["seq_len"], dropout=True,
    )


# What the reference rows' inline planner specs leave out of the configs they cite, by the spec's name: gpt-oss's
# rows cite HF openai/gpt-oss-120b config.json, whose swiglu_limit 7.0 clamps the activation's inputs (the catalog's
# gpt-oss-120b and planner's HF reader carry it as activation_clamp) and whose rope_scaling (yarn, factor 32, no
# attention_factor or mscale) gives YaRN's attention factor 0.1 ln 32 + 1 (rotary_attention_factor).
INLINE_MODEL_SUPPLEMENTS: dict[str, dict[str, Any]] = {
    "gpt-oss-120b": {"activation_clamp": 7.0, "rotary_attention_factor": yarn_attention_factor(32.0)}}


def inline_model(fields: dict[str, Any], source: str) -> ModelSpec:
    """A reference row's inline planner spec, with what INLINE_MODEL_SUPPLEMENTS adds for its name."""
    spec = {k: v for k, v in fields.items() if k != "source"}
    spec = {**INLINE_MODEL_SUPPLEMENTS.get(str(spec.get("name")), {}), **spec}
    return validate_spec(ModelSpec, spec, source)


def _model(case: dict[str, Any], source: str) -> ModelSpec:
    m = case["model"]
    if isinstance(m, str):
        return load_model(m).spec  # type: ignore[no-any-return]
    if "model_type" in m:
        return model_from_hf_config(dict(m), source=source)
    if "num_layers" in m:  # planner's own spec fields
        return inline_model(m, source)
    return _gpt(m)


def _group(case: dict[str, Any], hardware_id: str) -> str:
    source = case["source"]
    if source.startswith("pytorch/torchtitan"):
        name = "torchtitan 2024-12 benchmarks"
    elif source.startswith("NVIDIA/NeMo"):
        name = "NeMo 24.07 performance summary"
    elif source.startswith("NVIDIA-NeMo/Megatron-Bridge"):
        name = "Megatron-Bridge MoE performance summaries"
    elif "Narayanan" in source:
        name = "Narayanan et al. 2021, Table 2"
    else:
        name = source.split(" ")[0]
    return f"{name} ({hardware_id})"


# The tables of pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md whose every row ran torch.compile,
# as their captions say ("Table 2 FSDP + CP + torch.compile + Float8", "Table 4 2D parallelism (FSDP + TP) +
# torch.compile + Float8", "Table 5 3D parallelism (FSDP + TP + PP) + torch.compile + Float8 + AsyncTP",
# "Table 6 4D parallelism (FSDP + TP + PP + CP) + torch.compile + Float8 + AsyncTP + 1F1B"); the reference rows'
# ids (tt24_t<table>_...) name the table. Tables 1 and 3 compare eager and compiled rows, which say so in the id.
TORCHTITAN_COMPILED_TABLES = frozenset({"t2", "t4", "t5", "t6"})


def _torchtitan_compiled(case_id: str) -> bool:
    parts = case_id.split("_")
    return "compile" in parts or (len(parts) > 1 and parts[1] in TORCHTITAN_COMPILED_TABLES)


# NeMo-Framework-Launcher releases whose launcher_scripts/conf/config.yaml sets NVTE_FUSED_ATTN: 0 for every
# training job ("Disable cudnn FA until we've tested it more"; added by 562dcb45 on 2024-02-13, removed by 04b8d098
# on 2024-08-29; present at tags 24.03, 24.03.01, 24.05 and 24.07): Transformer Engine then runs its flash-attn
# backend, FlashAttention-2, where it would pick cuDNN attention on Hopper.
NEMO_LAUNCHER_FLASH_ATTENTION = frozenset({"24.03", "24.05", "24.07"})


def engine_fields(case_id: str, source: str, recompute: object) -> dict[str, Any]:
    """The engine that ran a published row of the reference files, as layout fields: torchtitan's rows under
    the torchtitan profile (FSDP2, eager or compiled as the id or its table's caption says, SDPA attention), the
    files' 'selective' standing for torchtitan's op-level selective AC (their notes); NeMo's under nemo; NeMo
    AutoModel's under automodel; others the default."""
    if source.startswith("pytorch/torchtitan"):
        compiled = _torchtitan_compiled(case_id)
        # the 2024-12 benchmark's torchtitan (9dec370) ran the loss eager under --training.compile ('compiling loss
        # function causes CUDA errors, turning off for now', train.py): compile_loss false where the blocks compile
        eager_loss = {"compile_loss": False} if compiled and "9dec370" in source else {}
        return {"engine": "torchtitan", "compile": compiled, **eager_loss,
                "recompute": "op" if recompute == "selective" else recompute}
    if source.startswith(("NVIDIA-NeMo/Automodel", "NVIDIA-NeMo/AutoModel", "NVIDIA/NeMo-Automodel")):
        return {"engine": "automodel"}  # FSDP2 + Transformer Engine + DeepEP, bf16 states (its profile)
    if source.startswith("NVIDIA/NeMo"):
        launcher = re.search(r"\(NeMo (\d\d\.\d\d)", source)
        if launcher is not None and launcher.group(1) in NEMO_LAUNCHER_FLASH_ATTENTION:
            return {"engine": "nemo", "attention_kernel": "flash2"}
        return {"engine": "nemo"}
    return {}


# Megatron-Bridge's fp8 mixed-precision configs (src/megatron/bridge/training/mixed_precision.py @ 183aad1d, the
# 25.09 era, and @ 067f987d: bf16_with_fp8_delayed_scaling_mixed, bf16_with_fp8_current_scaling_mixed,
# bf16_with_mxfp8_mixed) set fp8_param_gather = True, which its performance scripts take as they are
# (scripts/performance/utils/helpers.py get_precision_config); only the subchannel (128 x 128 blockwise) config
# sets it False, which the DeepSeek-V3 H100 row ran (its notes).
MEGATRON_BRIDGE_SOURCE = "NVIDIA-NeMo/Megatron-Bridge"
MEGATRON_BRIDGE_BLOCKWISE_FP8 = frozenset({"mb2509_h100_dsv3_fp8"})


def megatron_bridge_fp8_params(case_id: str, source: str, fields: dict[str, Any]) -> dict[str, Any]:
    """fp8_param_gather for a Megatron-Bridge fp8 row with the distributed optimizer, as its precision config sets."""
    if (source.startswith(MEGATRON_BRIDGE_SOURCE) and fields.get("dtype") == "fp8" and int(fields.get("zero", 0)) >= 1
            and case_id not in MEGATRON_BRIDGE_BLOCKWISE_FP8):
        return {"fp8_param_gather": True}
    return {}


def fp8_recipe_fields(case_id: str, source: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The fp8 recipe an fp8 row ran (Layout.fp8_recipe): Megatron-Bridge's FP8-CS rows per-tensor current scaling
    (tensorwise), its MXFP8 rows mxfp8 (the row id says which), its subchannel row blockwise (MEGATRON_BRIDGE_BLOCKWISE_FP8);
    NeMo 24.03-24.07's launcher recipes delayed scaling (NVIDIA/NeMo-Framework-Launcher conf/training/*: fp8_hybrid
    with fp8_amax_history_len 1024 and amax_compute_algo max, Transformer Engine's DelayedScaling); torchtitan's
    float8 tensorwise (torchao's dynamic scaling, the Layout default)."""
    if fields.get("dtype") != "fp8":
        return {}
    if source.startswith(MEGATRON_BRIDGE_SOURCE):
        if case_id in MEGATRON_BRIDGE_BLOCKWISE_FP8:
            return {"fp8_recipe": "blockwise"}
        return {"fp8_recipe": "mxfp8" if "mxfp8" in case_id else "tensorwise"}
    if source.startswith("NVIDIA/NeMo") and engine_fields(case_id, source, None).get("engine") == "nemo":
        return {"fp8_recipe": "delayed"}
    return {}


def published_overrides(case_id: str, source: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A published row's layout fields with what its engine and recipe add, in one order for every reader (the
    calibration runs here, the validation cases of benchmarks/import_published_runs.py): the engine that ran it,
    Megatron-Bridge's fp8 parameters, the fp8 recipe, then the row's own recipe settings (RECIPES), which win."""
    out = dict(fields)
    out.update(engine_fields(case_id, source, out.get("recompute")))
    out.update(megatron_bridge_fp8_params(case_id, source, out))
    out.update(fp8_recipe_fields(case_id, source, out))
    out.update(RECIPES.get(case_id, {}))
    return out


def _layout_fields(case: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    if "layout" in case:
        raw = dict(case["layout"])
        gpus = int(raw["gpus"])
        fields: dict[str, Any] = {SHORT_LAYOUT.get(str(k), str(k)): v for k, v in raw.items() if k not in IGNORED_LAYOUT}
        torchtitan = case["source"].startswith("pytorch/torchtitan")
        fields.setdefault("grad_dtype", "bf16" if torchtitan else "fp32")  # Megatron: fp32 main gradients
        return gpus, published_overrides(case["id"], case["source"], fields)
    p = case["parallel"]  # Narayanan et al. 2021 Table 2: fp16, fp32 main grads, full recompute, no flash;
    # its ZeRO-3 rows ran DeepSpeed, its PTD-P rows Megatron-LM
    return int(p["gpus"]), {
        "engine": "deepspeed" if "DeepSpeed" in str(p.get("scheme", "")) else "megatron",
        "tp": p["TP"], "pp": p["PP"], "dp": p["DP"], "zero": p["zero_stage"], "micro_batch": p["micro_batch"],
        "global_batch": p["global_batch"], "seq_len": case["model"]["seq_len"], "dtype": "fp16",
        "grad_dtype": "fp32", "recompute": "full", "flash_attention": False, "sequence_parallel": False,
    }


def runs_from_reference(cases: list[dict[str, Any]], origin: str) -> tuple[list[Run], dict[str, str]]:
    """Throughput cases of a reference YAML (modern or MoE) as runs; the others skipped with the reason."""
    runs: list[Run] = []
    skipped: dict[str, str] = {}
    for case in cases:
        if case.get("kind") != "throughput":
            continue
        source = f"{origin}:{case['id']}"
        hw_ref = catalog_hardware(case)
        if hw_ref is None:
            skipped[case["id"]] = "no catalog profile for its hardware"
            continue
        try:
            hw = load_hardware(hw_ref)
            model = _model(case, source)
            gpus, fields = _layout_fields(case)
            layout = resolve_layout(model, gpus, **fields)
        except PlannerError as err:
            skipped[case["id"]] = err.message
            continue
        measured = case["measured"]
        tps = measured.get("tokens_per_sec_per_gpu") or measured.get("tokens_per_s_per_gpu")
        if tps:
            m = Measured(tokens_per_second_per_gpu=float(tps), peak_memory_gib=measured.get("peak_memory_GiB"))
            seconds = layout.global_batch * layout.seq_len / (m.tokens_per_second_per_gpu * gpus)  # type: ignore[operator]
        else:
            seconds = _measured_seconds(model, layout, "hardware_tflops_per_gpu", float(measured["tflops_per_gpu"]))
            m = Measured(step_seconds=seconds)
        peak = m.peak_memory_gib * GIB if m.peak_memory_gib else None
        runs.append(Run(name=case["id"], model_id=model.name, model=model, hardware_id=hw.id, hardware=hw.spec,
                        layout=layout, measured_seconds=seconds, measured_peak_bytes=peak, source=case["source"],
                        group=_group(case, hw.id)))
    return runs, skipped


def by_group(runs: list[Run]) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    for run in runs:
        out.setdefault(run.group, []).append(run)
    return out
