"""Layout + model -> Megatron-LM arguments, as a bash array to source in a launch script.

The file defines MEGATRON_ARGS=( ... ) with the model and layout flags (the
arrangement of Megatron-LM's own example scripts); data, tokenizer, learning-rate
and checkpoint flags stay the user's. `planner.importers.megatron` reads it back
to the same layout.
"""

from __future__ import annotations

import shlex

from planner.errors import PlannerError
from planner.exporters.common import ExportContext, prediction_lines
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec

ZERO_FLAGS: dict[int, list[str]] = {
    0: [],
    1: ["--use-distributed-optimizer"],
    2: ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads"],
    3: ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"],
}
POSITION = {"rotary": "rope", "learned": "learned_absolute", "none": "none"}


def engine_layout(model: ModelSpec, layout: Layout) -> tuple[Layout, tuple[str, ...]]:
    """Megatron-LM runs every layout field except the GPipe schedule, and keeps gradients in the compute
    precision or fp32: fp16 training has fp16 or fp32 (--accumulate-allreduce-grads-in-fp32) gradients,
    bf16/fp8 training bf16 (--grad-reduce-in-bf16) or fp32 ones."""
    changes: dict[str, object] = {}
    notes: list[str] = []
    if layout.schedule == "gpipe":
        if layout.pp > 1:
            raise PlannerError("Megatron-LM has no GPipe schedule; use schedule 1f1b")
        changes["schedule"] = "1f1b"  # one stage: no pipeline schedule at all
    half = "fp16" if layout.dtype == "fp16" else "bf16"
    if layout.grad_dtype not in (half, "fp32"):
        changes["grad_dtype"] = half
        notes.append(f"grad_dtype {layout.grad_dtype} -> {half}: Megatron-LM keeps {layout.dtype} gradients in "
                     f"{half} or fp32")
    layout = layout.model_copy(update=changes) if changes else layout
    if layout.interleave > 1 and model.num_layers % (layout.pp * layout.interleave):
        raise PlannerError(f"Megatron-LM's --num-layers-per-virtual-pipeline-stage needs num_layers({model.num_layers}) "
                           f"divisible by pp({layout.pp}) * interleave({layout.interleave}); planner does not write "
                           "uneven virtual-stage splits")
    if layout.recompute_layers_per_stage is not None and layout.recompute_layers_per_stage % layout.interleave:
        raise PlannerError(f"recompute_layers_per_stage({layout.recompute_layers_per_stage}) is not a multiple of "
                           f"interleave({layout.interleave}); Megatron-LM recomputes the same number of layers in "
                           "each virtual stage")
    return layout, tuple(notes)


def _vocab_divisor(vocab: int, tp: int) -> int:
    """The largest make-vocab-size-divisible-by (<= Megatron's default 128) that leaves `vocab` unpadded."""
    for d in (128, 64, 32, 16, 8, 4, 2, 1):
        if vocab % (d * tp) == 0:
            return d
    return 1


def model_flags(model: ModelSpec, tp: int) -> tuple[list[list[str]], list[str]]:
    """Megatron flags that describe the architecture, and what they cannot express."""
    flags: list[list[str]] = [
        ["--num-layers", str(model.num_layers)],
        ["--hidden-size", str(model.hidden_size)],
        ["--ffn-hidden-size", str(model.ffn_hidden_size)],
        ["--num-attention-heads", str(model.num_attention_heads)],
    ]
    missing: list[str] = []
    if model.num_kv_heads is not None and model.num_kv_heads != model.num_attention_heads:
        flags += [["--group-query-attention"], ["--num-query-groups", str(model.num_kv_heads)]]
    if model.head_dim is not None and model.head_dim != model.hidden_size // model.num_attention_heads:
        flags.append(["--kv-channels", str(model.head_dim)])
    if model.mlp_kind == "gated":
        flags.append(["--swiglu"])
    if not model.tied_embeddings:
        flags.append(["--untie-embeddings-and-output-weights"])
    flags.append(["--position-embedding-type", POSITION.get(model.position_embedding, "none")])
    if model.position_embedding == "alibi":
        missing.append("ALiBi positions (written as none; they add no weights)")
    flags.append(["--normalization", "RMSNorm" if model.norm_kind == "rmsnorm" else "LayerNorm"])
    if not (model.attention_output_bias or model.mlp_bias):
        flags.append(["--disable-bias-linear"])
        if model.qkv_bias:
            flags.append(["--add-qkv-bias"])
    elif not (model.attention_output_bias and model.mlp_bias and model.qkv_bias):
        missing.append("biases on only some projections")
    if model.qk_norm:
        flags.append(["--qk-layernorm"])
    flags += [["--vocab-size", str(model.vocab_size)],
              ["--make-vocab-size-divisible-by", str(_vocab_divisor(model.vocab_size, tp))],
              ["--max-position-embeddings", str(model.max_seq_len)]]
    if not model.dropout:
        flags += [["--attention-dropout", "0.0"], ["--hidden-dropout", "0.0"]]
    if model.moe is not None:
        moe = model.moe
        flags += [["--num-experts", str(moe.num_experts)], ["--moe-router-topk", str(moe.experts_per_token)],
                  ["--moe-ffn-hidden-size", str(moe.moe_ffn_hidden_size)]]
        if moe.num_shared_experts:
            flags.append(["--moe-shared-expert-intermediate-size",
                          str(moe.num_shared_experts * moe.moe_ffn_hidden_size)])
        if moe.num_dense_layers:
            flags.append(["--moe-layer-freq",
                          f"([0]*{moe.num_dense_layers}+[1]*{model.num_layers - moe.num_dense_layers})"])
        if moe.router_bias:
            flags.append(["--moe-router-enable-expert-bias"])
    if model.mla is not None:
        mla = model.mla
        flags.append(["--multi-latent-attention"])
        if mla.q_lora_rank is not None:
            flags.append(["--q-lora-rank", str(mla.q_lora_rank)])
        flags += [["--kv-lora-rank", str(mla.kv_lora_rank)], ["--qk-head-dim", str(mla.qk_nope_head_dim)],
                  ["--qk-pos-emb-head-dim", str(mla.qk_rope_head_dim)], ["--v-head-dim", str(mla.v_head_dim)]]
    if model.sliding_window_layers:
        missing.append("sliding-window attention")
    if model.norms_per_layer != 2 or model.embedding_norm:
        missing.append("extra norm layers")
    return flags, missing


def layout_flags(model: ModelSpec, lay: Layout) -> list[list[str]]:
    flags: list[list[str]] = [
        ["--tensor-model-parallel-size", str(lay.tp)],
        ["--pipeline-model-parallel-size", str(lay.pp)],
        ["--context-parallel-size", str(lay.cp)],
    ]
    if lay.ep > 1:
        flags.append(["--expert-model-parallel-size", str(lay.ep)])
    if lay.interleave > 1:
        flags.append(["--num-layers-per-virtual-pipeline-stage", str(model.num_layers // (lay.pp * lay.interleave))])
    if lay.sequence_parallel:
        flags.append(["--sequence-parallel"])
    if lay.recompute == "selective":
        flags.append(["--recompute-granularity", "selective"])
    elif lay.recompute == "full":
        flags.append(["--recompute-granularity", "full"])
        if lay.recompute_layers_per_stage is None:
            flags += [["--recompute-method", "uniform"], ["--recompute-num-layers", "1"]]
        else:
            flags += [["--recompute-method", "block"],
                      ["--recompute-num-layers", str(lay.recompute_layers_per_stage // lay.interleave)]]
    flags += [["--micro-batch-size", str(lay.micro_batch)], ["--global-batch-size", str(lay.global_batch)],
              ["--seq-length", str(lay.seq_len)]]
    if lay.dtype == "fp16":
        flags.append(["--fp16"])
        if lay.grad_dtype == "fp32":
            flags.append(["--accumulate-allreduce-grads-in-fp32"])
    else:
        flags.append(["--bf16"])
        if lay.dtype == "fp8":
            flags.append(["--fp8-format", "hybrid"])
        if lay.grad_dtype != "fp32":
            flags.append(["--grad-reduce-in-bf16"])
    if ZERO_FLAGS[lay.zero]:
        flags.append(ZERO_FLAGS[lay.zero])
    if lay.optimizer != "adam":
        flags.append(["--optimizer", lay.optimizer])
    if not lay.flash_attention:
        flags.append(["--attention-backend", "unfused"])
    if lay.overlap_grad_reduce:
        flags.append(["--overlap-grad-reduce"])
    if lay.overlap_tp_comm:
        flags.append(["--tp-comm-overlap"])
    return flags


def render(ctx: ExportContext) -> str:
    model_part, missing = model_flags(ctx.model, ctx.layout.tp)
    notes = list(prediction_lines(ctx))
    if missing:
        notes.append(f"Note: Megatron-LM arguments cannot express this model's {', '.join(missing)}; check with "
                     f"--model {ctx.model_id}.")
    lay = ctx.layout
    nodes = -(-lay.gpus // ctx.hardware.node.gpus_per_node)
    per_node = min(lay.gpus, ctx.hardware.node.gpus_per_node)
    out = ["# Megatron-LM arguments (bash). Source this file and pass \"${MEGATRON_ARGS[@]}\" to pretrain_gpt.py."]
    out += [f"# {line}" for line in notes]
    out += ["", "MEGATRON_ARGS=(", "    # model"]
    out += [f"    {' '.join(shlex.quote(part) for part in flag)}" for flag in model_part]
    out += ["    # layout"]
    out += [f"    {' '.join(shlex.quote(part) for part in flag)}" for flag in layout_flags(ctx.model, lay)]
    out += [")", "",
            f"# torchrun --nnodes {nodes} --nproc-per-node {per_node} pretrain_gpt.py \"${{MEGATRON_ARGS[@]}}\" \\",
            "#     <data, tokenizer, learning-rate and checkpoint flags>", ""]
    return "\n".join(out)
