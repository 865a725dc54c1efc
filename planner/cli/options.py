"""Options shared by several commands, and small helpers for thin commands."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import click

from planner.errors import PlannerError
from planner.specs.bounds import FIELD_KINDS, describe, over_limit
from planner.specs.layout import (
    FP8_RECIPE_CODES,
    LORA_TARGETS,
    MAX_MOE_LOAD_IMBALANCE,
    MUON_NS_STEPS_DEFAULT,
    MUON_TP_MODE_CODES,
    OPTIMIZER_CODES,
    ComputeDtype,
    MomentsDtype,
)
from planner.writing import keep_mode, remove_quietly, scratch_path, writable_target

COMPUTE_DTYPES: tuple[str, ...] = get_args(ComputeDtype)  # --dtype of estimate, search and check
MOMENTS_DTYPES: tuple[str, ...] = get_args(MomentsDtype)  # --optimizer-state-dtype

FORMAT_TABLE_JSON = click.Choice(["table", "json"])


def format_option(choices: tuple[str, ...] = ("table", "json"), default: str = "table") -> Callable[..., Any]:
    return click.option(
        "--format", "fmt", type=click.Choice(list(choices)), default=default, show_default=True,
        help="Output format.",
    )


def model_option(required: bool = True) -> Callable[..., Any]:
    return click.option(
        "--model", "-m", "model_ref", required=required, metavar="MODEL",
        help="Catalog id (see 'planner models'), our YAML spec, or a HuggingFace config.json.",
    )


def hardware_option(required: bool = True) -> Callable[..., Any]:
    return click.option(
        "--hardware", "-w", "hardware_ref", required=required, metavar="HW",
        help="Catalog id (see 'planner hardware') or a YAML hardware profile.",
    )


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


class Count(click.ParamType):  # type: ignore[type-arg]  # click 8.2+ is generic, older click is not
    """A whole number from `minimum` up to planner's limit for its kind (planner.specs.bounds.LIMITS)."""

    name = "integer"

    def __init__(self, kind: str, minimum: int = 1) -> None:
        self.kind = kind
        self.minimum = minimum

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "INTEGER"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            if not re.fullmatch(r"[+-]?[0-9]+", text):
                self.fail(f"{value!r} is not a whole number", param, ctx)
            if len(text) > 30:
                self.fail(f"{text[:12]}... ({len(text)} digits) is above planner's limit of {describe(self.kind)}; "
                          "see docs/errors.md", param, ctx)
            number = int(text)
        if number < self.minimum:
            self.fail(f"must be at least {self.minimum}, got {number}", param, ctx)
        problem = over_limit(self.kind, number)
        if problem:
            self.fail(problem, param, ctx)
        return number


class Finite(click.FloatRange):
    """A float range that also rejects nan and inf (click's FloatRange lets nan through every bound)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


POSITIVE = Count("gpus")
HEADROOM = Finite(0, 1, max_open=True)
REQUEST_RATE = Finite(0, 1e9, min_open=True)  # requests/s: above zero, finite; a billion per second is no deployment


def count(flag: str) -> Count:
    """The option type of a count flag (`gpus`, `tp`, `seq_len`, ...), bounded by its kind's limit."""
    return Count(FIELD_KINDS[flag])


ENGINES = ("megatron", "nemo", "torchtitan", "fsdp", "deepspeed", "automodel")  # planner.specs.engine.ENGINE_NAMES


def engine_option(default: str | None = "megatron") -> Callable[..., Any]:
    return click.option(
        "--engine", type=click.Choice(list(ENGINES)), default=default, show_default=default is not None,
        help="Training engine whose profile (kernels, ZeRO implementation, what it can run) applies; "
        "see docs/engines.md.",
    )


def attention_kernel_option() -> Callable[..., Any]:
    """--attention-kernel (Layout.attention_kernel; the search's Problem field)."""
    return click.option(
        "--attention-kernel", type=click.Choice(["fused", "flash2"]), default=None,
        help="The fused attention's kernel: fused (Transformer Engine's cuDNN attention on Hopper) or flash2 "
        "(FlashAttention-2: Megatron --attention-backend flash, NVTE_FUSED_ATTN=0, PyTorch SDPA)  [default: the "
        "engine's: fused for megatron and nemo, flash2 for torchtitan, fsdp and deepspeed]",
    )


def fp8_recipe_option() -> Callable[..., Any]:
    """--fp8-recipe (Layout.fp8_recipe; the search's Problem field)."""
    return click.option(
        "--fp8-recipe", type=click.Choice(list(FP8_RECIPE_CODES)), default=None,
        help="With --dtype fp8, how the casts are scaled: tensorwise (per-tensor current scaling, FP8-CS), delayed "
        "(amax history: Megatron-LM's --fp8-recipe default), mxfp8 (32-element blocks, Blackwell) or blockwise "
        "(1x128 / 128x128 blocks)  [default: tensorwise]",
    )


def training_precision_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Layout-independent training options shared by estimate and search (precision, kernels, overlap)."""
    options = [
        click.option("--dtype", type=click.Choice(COMPUTE_DTYPES), default="bf16", show_default=True,
                     help="Compute precision of the matrix multiplies (fp4: NVFP4, Transformer Engine's "
                     "NVFP4BlockScaling on Blackwell; megatron engine)."),
        fp8_recipe_option(),
        click.option("--grad-dtype", type=click.Choice(["bf16", "fp16", "fp32"]), default=None,
                     help="Gradient precision (fp32 = Megatron's main grads)  [default: the engine's: fp32 for "
                     "megatron, nemo, torchtitan and fsdp, bf16 for deepspeed and automodel]"),
        click.option("--optimizer", type=click.Choice(list(OPTIMIZER_CODES)), default="adam", show_default=True,
                     help="Optimizer: adam, sgd (momentum) or muon (Megatron --optimizer muon: Newton-Schulz on the "
                     "hidden matrices, Adam on the embedding and output layer; megatron engine, zero 0 or 1)."),
        click.option("--muon-ns-steps", type=Count("ns_steps"), default=MUON_NS_STEPS_DEFAULT, show_default=True,
                     help="With --optimizer muon: Newton-Schulz iterations per step (Megatron --muon-num-ns-steps)."),
        click.option("--muon-tp-mode", type=click.Choice(list(MUON_TP_MODE_CODES)), default="duplicated",
                     show_default=True,
                     help="With --optimizer muon: a TP-split matrix orthogonalised whole on every TP rank "
                     "(duplicated), shard by shard (blockwise) or with its Gram matrix all-reduced (distributed); "
                     "Megatron --muon-tp-mode."),
        click.option("--muon-split-qkv/--no-muon-split-qkv", default=True, show_default=True,
                     help="With --optimizer muon: the fused QKV weight orthogonalised as its Q, K and V parts "
                     "(Megatron's default; --muon-no-split-qkv)."),
        click.option("--lora-rank", type=Count("width"), default=None,
                     help="LoRA fine-tuning: the base weights frozen, rank-r adapters trained beside the targeted "
                     "linear layers (Hu et al. 2021; engines automodel, fsdp, deepspeed, megatron, nemo)."),
        click.option("--lora-targets", type=click.Choice(list(LORA_TARGETS)), default="all_linear", show_default=True,
                     help="With --lora-rank: adapters on every linear layer of the blocks, on the attention's, or on "
                     "its query, key and value projections."),
        click.option("--flash-attention/--no-flash-attention", default=True, show_default=True,
                     help="Fused attention (no s x s score matrix stored)."),
        attention_kernel_option(),
        click.option("--overlap-grad-reduce/--no-overlap-grad-reduce", default=True, show_default=True,
                     help="Data-parallel gradient reduction overlaps the backward pass."),
        click.option("--tp-comm-overlap/--no-tp-comm-overlap", default=None,
                     help="Tensor-parallel collectives overlap the GEMMs (Megatron --tp-comm-overlap, torch async "
                     "TP; needs sequence parallelism)  [default: estimate off, as the engines; search on where the "
                     "engine has it]"),
        engine_option(),
        click.option("--compile/--no-compile", "compile_", default=False, show_default=True,
                     help="torch.compile on (torch engines: torchtitan, fsdp, deepspeed): element-wise kernels fused."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def fp8_param_gather_option() -> Callable[..., Any]:
    """--fp8-param-gather for estimate and search (Layout.fp8_param_gather; the search's Problem field)."""
    return click.option(
        "--fp8-param-gather/--no-fp8-param-gather", default=False, show_default=True,
        help="With --dtype fp8 (fp4): the layers' weights kept and all-gathered in fp8 (NVFP4) where ZeRO >= 1 "
        "(estimate: needs --zero 1 or more; search: every layout with ZeRO >= 1). Megatron --fp8-param-gather "
        "(--fp4-param-gather), which the Megatron-Bridge fp8 and NVFP4 recipes set (megatron and nemo engines); "
        "under torchtitan, torchao's float8 FSDP all-gather (enable_fsdp_float8_all_gather): the weights stay as "
        "they are and only the gathered copy is fp8, with the tensorwise recipe.",
    )


def fp8_attention_option() -> Callable[..., Any]:
    """--fp8-attention for estimate and search (Layout.fp8_attention; the search's Problem field)."""
    return click.option(
        "--fp8-attention/--no-fp8-attention", default=False, show_default=True,
        help="With --dtype fp8: Transformer Engine's FP8 attention (Megatron --fp8-dot-product-attention), at the "
        "speed the hardware profile measures for it (efficiency.attention_fp8); megatron and nemo engines, per-tensor "
        "or MXFP8 recipes.",
    )


CUDA_GRAPH_SCOPES = ("full", "attn", "mlp", "moe", "moe_router", "moe_preprocess")  # specs.layout.CUDA_GRAPH_BITS
MOE_DISPATCHERS = ("alltoall", "allgather", "deepep", "hybridep")  # specs.layout.DISPATCHER_CODES


def _scope_list(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    """--cuda-graph-scope a,b,...: known names only; 'none' (or an empty list) for no CUDA graphs."""
    if value is None:
        return None
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    if names in ((), ("none",)):
        return ()
    unknown = [n for n in names if n not in CUDA_GRAPH_SCOPES]
    if unknown:
        raise click.BadParameter(f"{', '.join(map(repr, unknown))} is not a scope; use a comma list of "
                                 f"{', '.join(CUDA_GRAPH_SCOPES)} (or none)")
    return names


def moe_layout_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The MoE, CUDA-graph and optimizer-precision layout fields, shared by estimate, check and export. Every
    default is None: what is not given takes the Layout's default (or the engine file's)."""
    options = [
        click.option("--etp", type=Count("degree"), default=None,
                     help="Expert tensor-parallel degree (Megatron --expert-tensor-parallel-size)  [default: tp]"),
        click.option("--moe-dispatcher", type=click.Choice(list(MOE_DISPATCHERS)), default=None,
                     help="MoE token dispatcher: alltoall (NCCL), allgather, deepep or hybridep  [default: alltoall]"),
        click.option("--moe-ep-overlap/--no-moe-ep-overlap", default=None,
                     help="Expert all-to-all overlapped with another micro-batch's compute (Megatron "
                     "--overlap-moe-expert-parallel-comm)  [default: off]"),
        click.option("--moe-delay-wgrad/--no-moe-delay-wgrad", default=None,
                     help="The experts' weight gradients run beside the dispatch's backward all-to-all (Megatron "
                     "--delay-wgrad-compute with the overlap, --overlap-dispatch-backward-with-experts-wgrad without "
                     "it)  [default: on with --moe-ep-overlap, off without]"),
        click.option("--moe-shared-expert-overlap/--no-moe-shared-expert-overlap", default=None,
                     help="Shared experts computed beside the dispatch (Megatron --moe-shared-expert-overlap)  "
                     "[default: off]"),
        click.option("--moe-load-imbalance", type=Finite(1, MAX_MOE_LOAD_IMBALANCE), default=None,
                     help="Dropless routing's load on the busiest expert-parallel rank over the balanced share "
                     "(max/mean routed copies received; measure it from the router's token counts)  [default: 1, "
                     "balanced, as the benchmark recipes force it]"),
        click.option("--moe-capacity-factor", type=Finite(0, 64, min_open=True), default=None,
                     help="Token drop: each expert takes at most this times its balanced share, padded  "
                     "[default: dropless]"),
        click.option("--cuda-graph-scope", callback=_scope_list, default=None, metavar="LIST",
                     help=f"Parts of each layer in CUDA graphs, comma list of {', '.join(CUDA_GRAPH_SCOPES)}  "
                     "[default: none]"),
        click.option("--optimizer-state-dtype", type=click.Choice(MOMENTS_DTYPES), default=None,
                     help="Adam moments' dtype (Megatron precision-aware optimizer, DeepSpeed bf16_optimizer_states; "
                     "int8: bitsandbytes' 8-bit optimizers, the Hugging Face Trainer's --optim adamw_bnb_8bit)  "
                     "[default: the engine's: bf16 for automodel, else fp32]"),
        click.option("--master-weights-dtype", type=click.Choice(["fp32", "bf16"]), default=None,
                     help="Master weights: fp32 copy, or bf16 = the 16-bit weights are the master (DeepSpeed "
                     "bf16_master_weights_and_grads)  [default: the engine's: bf16 for automodel, else fp32]"),
        click.option("--moe-fused-mlp/--no-moe-fused-mlp", default=None,
                     help="Routed experts in Transformer Engine's fused grouped MLP (Megatron "
                     "--use-transformer-engine-op-fuser with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1; MXFP8, B200/GB200/"
                     "B300/GB300)  [default: off]"),
        click.option("--mtp-layers", type=Count("layers", minimum=0), default=None,
                     help="Multi-token-prediction layers trained (Megatron --mtp-num-layers)  [default: the model's]"),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def profile_option() -> Callable[..., Any]:
    return click.option(
        "--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE",
        help="A profile overlay from 'planner calibrate', applied to the hardware profile.",
    )


def with_profile(hardware: Any, profile_path: Path | None) -> tuple[Any, Any]:
    """The loaded hardware entry with the overlay at `profile_path` applied (and the overlay, or None)."""
    if profile_path is None:
        return hardware, None
    from dataclasses import replace

    from planner.engines.job import overlaid

    spec, overlay = overlaid(hardware.spec, profile_path)
    return replace(hardware, spec=spec), overlay


def warn_if_far(overlay: Any, model: Any, layout: Any) -> None:
    """A warning on stderr when the layout is far from every run the overlay was calibrated on."""
    if overlay is None:
        return
    from planner.calibrate.distance import far_warning

    message = far_warning(overlay.runs, model, layout)
    if message:
        click.echo(f"warning: {message}", err=True)


class Outputs:
    """What a command writes and prints, held back until the whole command has succeeded.

    `temp(path)` names a scratch file next to `path` (same suffix, so matplotlib picks the format); `echo`
    keeps a line for stdout or stderr. `commit()` moves every scratch file onto its target and prints what
    was kept; when the command fails first, `discard()` removes the scratch files and nothing is printed,
    so an error leaves no file and no partial table behind (docs/errors.md).
    """

    def __init__(self) -> None:
        self.moves: list[tuple[Path, Path]] = []
        self.lines: list[tuple[str, bool, bool]] = []

    def temp(self, target: str | Path) -> Path:
        target = Path(target)
        scratch = scratch_path(target)
        self.moves.append((scratch, target))
        return scratch

    def echo(self, text: str = "", *, nl: bool = True, err: bool = False) -> None:
        self.lines.append((text, nl, err))

    def commit(self) -> None:
        try:  # every target a regular file before any is replaced: all the files or none
            targets = [writable_target(target) for _, target in self.moves]
        except BaseException:
            self.discard()
            raise
        for (scratch, target), resolved in zip(self.moves, targets):
            try:
                keep_mode(resolved, scratch)
                os.replace(scratch, resolved)
            except OSError as error:
                self.discard()
                raise PlannerError(f"cannot write: {error.strerror or error}", source=str(target)) from None
        self.moves.clear()
        for text, nl, err in self.lines:
            click.echo(text, nl=nl, err=err)
        self.lines.clear()

    def discard(self) -> None:
        for scratch, _ in self.moves:
            remove_quietly(scratch)
        self.moves.clear()
        self.lines.clear()
