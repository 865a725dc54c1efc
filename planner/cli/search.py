"""`planner search`: every layout of a model on a cluster, costed at once, ranked, explained.

Thin: the space, the cost model and the ranking live in planner.search; the output in planner.report.
rich and matplotlib are imported only when a table or a plot is drawn.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from planner.cli import cli
from planner.cli.options import (
    HEADROOM,
    MOMENTS_DTYPES,
    Finite,
    Outputs,
    count,
    fp8_attention_option,
    fp8_param_gather_option,
    hardware_option,
    model_option,
    profile_option,
    training_precision_options,
    with_profile,
)
from planner.errors import PlannerError
from planner.specs.bounds import maximum, over_limit
from planner.specs.layout import MAX_MOE_LOAD_IMBALANCE
from planner.training.estimate import DEFAULT_HEADROOM

if TYPE_CHECKING:
    from planner.specs.engine import AttentionKernel

# planner.engines.export.EXPORT_FORMATS, without its imports
EXPORT_FORMATS = ("megatron", "megatron_bridge", "deepspeed", "torchtitan", "torchtitan_registry", "hf_trainer",
                  "automodel")
# Search options that keep a field as an engine would set it, for when the engine changes the best layout.
ENGINE_HINTS = {"grad_dtype": "--grad-dtype fp32", "zero": "--zero 0,3", "overlap_grad_reduce": "--overlap-grad-reduce",
                "flash_attention": "--flash-attention"}
GIB = float(1 << 30)

_SUFFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


class CommaList(click.ParamType):  # type: ignore[type-arg]  # click 8.2+ is generic, older click is not
    """One value or a comma-separated list: '8' or '4,8'; each item converted by `item`."""

    name = "LIST"

    def __init__(self, item: click.ParamType[Any], metavar: str) -> None:
        self.item = item
        self.metavar = metavar

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return self.metavar

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[Any, ...]:
        if isinstance(value, tuple):
            return value
        parts = [p.strip() for p in str(value).split(",")]
        if not all(parts):
            self.fail(f"'{value}' has an empty item; give values like 4,8", param, ctx)
        return tuple(dict.fromkeys(self.item.convert(p, param, ctx) for p in parts))


class OnOff(click.ParamType):  # type: ignore[type-arg]  # click 8.2+ is generic, older click is not
    name = "on|off"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> bool:
        text = str(value).strip().lower()
        if text in ("on", "true", "yes", "1"):
            return True
        if text in ("off", "false", "no", "0"):
            return False
        self.fail(f"'{value}' is not on or off", param, ctx)


class TokenCount(click.ParamType):  # type: ignore[type-arg]  # click 8.2+ is generic, older click is not
    """A token count: 15e12, 15T, 300B, 2.5M."""

    name = "TOKENS"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        match = re.fullmatch(r"\s*([0-9.]+(?:[eE][+]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*", str(value))
        if match:
            try:
                number = float(match.group(1)) * _SUFFIXES[match.group(2).lower()]
            except ValueError:
                number = -1.0
            problem = over_limit("tokens", number)
            if problem:
                self.fail(f"'{value}': {problem}", param, ctx)
            if number > 0:
                return number
            if number == 0:
                self.fail(f"'{value}' must be above zero", param, ctx)
        self.fail(f"'{value}' is not a token count (e.g. 15T, 300B, 15e12)", param, ctx)


def _int_list(flag: str) -> CommaList:
    return CommaList(count(flag), "N[,N...]")


FILTERS = ("tp", "pp", "cp", "dp", "ep", "etp", "zero", "recompute", "micro_batch", "interleave", "sequence_parallel")
# planner.specs.layout.DISPATCHER_CODES, without its imports (tests/cli/test_search.py checks they agree)
MOE_DISPATCHERS = ("alltoall", "allgather", "deepep", "hybridep")


def _moe_options(f: Any) -> Any:
    """The MoE settings of a search (constants of every candidate) and the optimizer-state precision."""
    options = [
        click.option("--moe-dispatcher", type=click.Choice(list(MOE_DISPATCHERS)), default=None,
                     help="MoE token dispatcher: alltoall (NCCL), allgather, deepep or hybridep (Megatron's flex "
                     "dispatcher backends)  [default on a MoE model: the engine's two-tier one - hybridep on NVL72, "
                     "deepep elsewhere - else its default]"),
        click.option("--moe-ep-overlap/--no-moe-ep-overlap", default=None,
                     help="Expert all-to-all hidden behind another micro-batch's compute (Megatron "
                     "--overlap-moe-expert-parallel-comm)  [default: the engine's; megatron: off]"),
        click.option("--moe-load-imbalance", type=Finite(1, MAX_MOE_LOAD_IMBALANCE), default=1.0, show_default=True,
                     help="Every candidate's dropless routing load on the busiest expert-parallel rank over the "
                     "balanced share (max/mean routed copies received; 1 = balanced, as the benchmark recipes force "
                     "it)"),
        click.option("--moe-delay-wgrad/--no-moe-delay-wgrad", default=None,
                     help="Every candidate's experts' weight gradients beside the dispatch's backward all-to-all "
                     "(Megatron --delay-wgrad-compute with the overlap, --overlap-dispatch-backward-with-experts-wgrad "
                     "without it: megatron and nemo)  [default: on with the overlap or dualpipe, off without]"),
        click.option("--optimizer-state-dtype", type=click.Choice(MOMENTS_DTYPES), default=None,
                     help="Adam moments' dtype (Megatron --use-precision-aware-optimizer with --exp-avg-dtype and "
                     "--exp-avg-sq-dtype bf16, as DeepSeek-V3's recipe; int8: bitsandbytes' 8-bit optimizers, fsdp "
                     "engine)  [default: the engine's: bf16 for automodel, else fp32]"),
        click.option("--schedule", type=click.Choice(["1f1b", "gpipe", "dualpipe"]), default="1f1b",
                     show_default=True, help="Pipeline schedule of every candidate: 1f1b, gpipe, or dualpipe "
                     "(DeepSeek-V3's bidirectional pipeline, the expert all-to-all overlapped; even pp only)."),
        click.option("--master-weights-dtype", type=click.Choice(["fp32", "bf16"]), default=None,
                     help="Master weights' dtype (bf16: the 16-bit weights are the master; Megatron --main-params-dtype)  "
                     "[default: the engine's: bf16 for automodel, else fp32]"),
        click.option("--moe-fused-mlp/--no-moe-fused-mlp", default=False, show_default=True,
                     help="Every candidate's routed experts in Transformer Engine's fused grouped MLP (Megatron "
                     "--use-transformer-engine-op-fuser with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1); needs --dtype fp8 "
                     "--fp8-recipe mxfp8 on B200/GB200/B300/GB300, megatron and nemo engines."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _filter_options(f: Any) -> Any:
    specs = [
        ("--tp", _int_list("tp"), "Tensor-parallel degrees to try (default: divisors of the head count)."),
        ("--pp", _int_list("pp"), "Pipeline stages to try (default: divisors of --gpus up to the layer count)."),
        ("--cp", _int_list("cp"), "Context-parallel degrees (default: 1, 2, 4, 8, 16 for seq_len >= 8192, else 1)."),
        ("--dp", _int_list("dp"), "Data-parallel degrees (default: whatever --gpus / (tp * pp * cp) gives)."),
        ("--ep", _int_list("ep"), "Expert-parallel degrees, MoE models (default: divisors of the expert count "
         "with ep * etp dividing tp * dp * cp)."),
        ("--etp", _int_list("ep"),  # a degree, bounded like ep (specs.bounds.FIELD_KINDS has no etp)
 "Expert tensor-parallel degrees, MoE models (default: tp, and 1 where tp > 1: "
         "parallel folding, the experts without TP and EP spanning tp x dp)."),
        ("--zero", CommaList(click.IntRange(0, 3), "0-3[,...]"), "ZeRO stages (default: 0,1,2,3)."),
        ("--recompute", CommaList(click.Choice(["none", "selective", "full"]), "none|selective|full[,...]"),
         "Activation recompute settings (default: all three)."),
        ("--micro-batch", _int_list("micro_batch"), "Micro-batch sizes (default: divisors of --global-batch up to 16)."),
        ("--interleave", _int_list("interleave"), "Virtual stages per rank (default: every value the layer split allows)."),
        ("--sequence-parallel", CommaList(OnOff(), "on|off[,...]"), "Sequence parallelism (default: on,off; on needs tp > 1)."),
    ]
    for name, kind, text in reversed(specs):
        f = click.option(name, type=kind, default=None, help=text)(f)
    return f


@cli.command("search")
@model_option()
@hardware_option()
@profile_option()
@click.option("--gpus", type=count("gpus"), required=True, help="GPUs in the job.")
@click.option("--global-batch", type=count("global_batch"), required=True, help="Sequences per optimizer step.")
@click.option("--seq-len", type=count("seq_len"), required=True, help="Tokens per sequence.")
@_filter_options
@training_precision_options
@fp8_param_gather_option()
@fp8_attention_option()
@_moe_options
@click.option("--headroom", type=HEADROOM, default=DEFAULT_HEADROOM, show_default=True,
              help="Share of GPU memory kept free on top of the modelled reserve.")
@click.option("--objective", type=click.Choice(["throughput", "memory", "cost"]), default="throughput",
              show_default=True, help="throughput: shortest step; memory: lowest peak per GPU; cost: hours and "
              "dollars to train --tokens (the same order as throughput, since the GPU count is fixed).")
@click.option("--tokens", type=TokenCount(), default=None, help="Tokens to train, for hours and dollars (e.g. 15T).")
@click.option("--price-per-gpu-hour", "price", type=Finite(min=0, min_open=True, max=maximum("price_usd")), default=None,
              help="USD per GPU-hour (default: the hardware profile's price, when it has one).")
@click.option("--top", type=count("top"), default=None, help="Layouts to show  [default: 10; all of the front with --pareto]")
@click.option("--pareto", is_flag=True, help="Show only the layouts on the front of step time against peak memory.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True,
              help="table: the top layouts; json: them with estimate's keys; csv: every feasible layout.")
@click.option("--plot", "plot_path", default=None, metavar="FILE",
              help="Also write FILE (.png or .svg): throughput against peak memory, front drawn, best marked. "
              "Needs matplotlib (pip install 'planner[plot]').")
@click.option("--export", "export", nargs=2, default=None, metavar="FORMAT DIR",
              type=(click.Choice(list(EXPORT_FORMATS)), click.Path(file_okay=False, path_type=Path)),
              help="Also write the best layout's launch configuration for FORMAT (megatron, deepspeed, torchtitan (TOML), "
              "torchtitan_registry (torchtitan main's Python config), hf_trainer or automodel) "
              "into DIR (created if missing), headed by what planner predicts for it; the path goes to stderr. "
              "Exit 2 when no layout fits or FORMAT cannot run the layout.")
def search_cmd(model_ref: str, hardware_ref: str, profile_path: Path | None, gpus: int, global_batch: int, seq_len: int, dtype: str,
               grad_dtype: str, optimizer: str, muon_ns_steps: int, muon_tp_mode: str, muon_split_qkv: bool,
               lora_rank: int | None, lora_targets: str, flash_attention: bool, attention_kernel: AttentionKernel | None,
               overlap_grad_reduce: bool, tp_comm_overlap: bool | None, engine: str, compile_: bool, moe_dispatcher: str | None,
               moe_ep_overlap: bool | None, moe_delay_wgrad: bool | None, moe_load_imbalance: float,
               optimizer_state_dtype: str | None, master_weights_dtype: str | None, schedule: str,
               fp8_param_gather: bool, fp8_attention: bool, fp8_recipe: str | None, moe_fused_mlp: bool, headroom: float,
               objective: str, tokens: float | None, price: float | None,
               top: int | None, pareto: bool, fmt: str, plot_path: str | None, export: tuple[str, Path] | None,
               **filter_values: Any) -> None:
    """Search every layout (tp x pp x cp x dp x ZeRO x SP x recompute x micro-batch x interleave, and etp
    and ep for MoE) for the fastest that fits, with why the others were rejected.

    Every filter takes one value or a comma list (--tp 4,8). Exit 0 whether or not a layout fits (the
    output says what to change when none does); 2 on bad input, and with --export when no layout fits
    or the engine cannot run the best one.

    \b
    Example:
      planner search --model llama-3.1-70b --hardware h100-sxm --gpus 256 \\
          --global-batch 512 --seq-len 8192 --zero 1,3 --top 5
      planner search -m llama-3.1-8b -w h100-sxm --gpus 64 --global-batch 256 \\
          --seq-len 8192 --export megatron launch/
      planner search -m deepseek-v3 -w h800 --gpus 2048 --global-batch 15360 \\
          --seq-len 4096 --dtype fp8 --moe-dispatcher deepep --moe-ep-overlap
    """
    started = time.perf_counter()
    from planner.engines.load import load_hardware, load_model
    from planner.report.search import SearchView, cost_over
    from planner.search.engine import run_search
    from planner.search.rank import select
    from planner.search.space import Filters, Problem

    if plot_path is not None:
        from planner.report.plots import check_plot_path

        check_plot_path(plot_path)
    model_entry = load_model(model_ref)
    hw_entry, _overlay = with_profile(load_hardware(hardware_ref), profile_path)
    if price is None:
        price = hw_entry.spec.price_per_gpu_hour_usd
    if objective == "cost":
        if tokens is None:
            raise PlannerError("--objective cost needs --tokens (how many tokens to train, e.g. 15T)")
        if price is None:
            raise PlannerError(f"--objective cost needs --price-per-gpu-hour ({hw_entry.id} has no price)")
    filters = Filters(**{name: filter_values[name] for name in FILTERS})
    problem = Problem(gpus=gpus, global_batch=global_batch, seq_len=seq_len, dtype=dtype, grad_dtype=grad_dtype,
                      optimizer=optimizer, muon_ns_steps=muon_ns_steps, muon_tp_mode=muon_tp_mode,
                      muon_split_qkv=muon_split_qkv, lora_rank=lora_rank, lora_targets=lora_targets,
                      flash_attention=flash_attention,
                      overlap_grad_reduce=overlap_grad_reduce,
                      overlap_tp_comm=tp_comm_overlap, engine=engine, compile=compile_,
                      optimizer_state_dtype=optimizer_state_dtype, master_weights_dtype=master_weights_dtype,
                      moe_dispatcher=moe_dispatcher, moe_ep_overlap=moe_ep_overlap, schedule=schedule,
                      moe_delay_wgrad=moe_delay_wgrad, moe_load_imbalance=moe_load_imbalance,
                      fp8_param_gather=fp8_param_gather, attention_kernel=attention_kernel,
                      fp8_recipe=fp8_recipe or "tensorwise", fp8_attention=fp8_attention, moe_fused_mlp=moe_fused_mlp)
    result = run_search(model_entry.spec, hw_entry.spec, problem, filters, headroom=headroom)
    selection = select(result.layouts, result.results, result.fits, objective, top=top, pareto=pareto)
    view = SearchView(result=result, objective=objective, selection=selection, pareto=pareto,
                      cost=cost_over(result, tokens, price), seconds=time.perf_counter() - started)
    misses, more_gpus, shorter = _when_nothing_fits(view, filters) if result.feasible == 0 and fmt != "csv" else ([], None, None)
    out = Outputs()  # nothing is printed or written unless every step below succeeds
    try:
        exported = _export_file(view, export[0], model_entry.id, hw_entry.id) if export is not None else None
        if plot_path is not None:
            if result.feasible:
                try:
                    _plot(view, str(out.temp(plot_path)), model_entry.id, hw_entry.id)
                except PlannerError as err:  # named by the scratch file it was written to: name the target
                    raise PlannerError(err.message, source=plot_path) from None
            else:
                out.echo(f"note: {plot_path} not written, since no layout fits", err=True)
        _emit(view, fmt, model_entry.id, hw_entry.id, misses, more_gpus, shorter, out.echo)
        if export is not None and exported is not None:
            _write_export(exported, export[1], out)
    except BaseException:
        out.discard()
        raise
    out.commit()


def _export_file(view: Any, fmt: str, model_id: str, hardware_id: str) -> Any:
    """The winner's launch configuration for `fmt` (not yet written); PlannerError (exit 2) when no layout
    fits, when the engine cannot run the winner, or when what the engine would run does not fit."""
    from planner.engines.export import render_export
    from planner.training.estimate import estimate

    r = view.result
    if view.winner is None:
        raise PlannerError(f"nothing to export to {fmt}: no layout fits; run without --export to see what to change")
    layout = r.layout(view.winner)
    est = estimate(r.model, r.hardware, layout, headroom=r.headroom)
    try:
        exported = render_export(fmt, model_id, r.model, r.hardware, layout, est, hardware_id=hardware_id)
    except PlannerError as err:
        raise PlannerError(f"cannot export the best layout to {fmt}: {err.message}") from None
    if exported.layout != layout:
        mapped = estimate(r.model, r.hardware, exported.layout, headroom=r.headroom)
        if not mapped.fits:
            peak = mapped.stages[mapped.peak_stage].total_bytes
            hints = [hint for field, hint in ENGINE_HINTS.items()
                     if getattr(exported.layout, field) != getattr(layout, field)]
            raise PlannerError(
                f"cannot export the best layout to {fmt}: {fmt} would run it changed ({'; '.join(exported.notes)}), "
                f"and then it needs {peak / GIB:.1f} GiB per GPU, over the {mapped.usable_bytes / GIB:.1f} GiB usable; "
                f"search only layouts {fmt} runs as they are" + (f" ({' '.join(hints)})" if hints else ""))
    return exported


def _write_export(exported: Any, directory: Path, out: Any) -> None:
    """Write the export into `directory` as a scratch file that `out.commit()` renames into place."""
    from planner.engines.export import write_export

    for note in exported.notes:
        out.echo(f"note: {note}", err=True)
    target = directory / exported.name
    try:
        write_export(exported, out.temp(target))  # the file _export_file rendered, not rendered again
    except PlannerError as err:
        raise PlannerError(err.message, source=str(target)) from None
    out.echo(f"wrote {target}", err=True)


def _when_nothing_fits(view: Any, filters: Any) -> tuple[list[Any], Any, Any]:
    from planner.search.engine import fewest_gpus, longest_sequence, near_misses

    r = view.result
    more_gpus = fewest_gpus(r.model, r.hardware, r.problem, filters, headroom=r.headroom)
    shorter = longest_sequence(r.model, r.hardware, r.problem, filters, headroom=r.headroom)
    return near_misses(r), more_gpus, shorter


def _plot(view: Any, path: str, model_id: str, hardware_id: str) -> None:
    import numpy as np

    from planner.report.plots import plot_throughput_vs_memory
    from planner.search.rank import pareto_front

    r = view.result
    feasible = r.fits
    res = r.results
    front = pareto_front(res.step_seconds[feasible], res.peak_bytes[feasible])
    winner = int(np.flatnonzero(feasible == view.winner)[0]) if view.winner is not None else None
    plot_throughput_vs_memory(
        path, peak_bytes=res.peak_bytes[feasible], tokens_per_second=res.tokens_per_second[feasible], front=front,
        winner=winner, capacity_bytes=res.capacity_bytes, usable_bytes=res.usable_bytes,
        title=f"{model_id} on {r.problem.gpus:,} x {hardware_id}, batch {r.problem.global_batch:,} x "
        f"{r.problem.seq_len:,}: {feasible.size:,} feasible layouts",
    )


def _emit(view: Any, fmt: str, model_id: str, hardware_id: str, misses: list[Any], more_gpus: Any,
          shorter: Any, echo: Any) -> None:
    from planner.report import search as out

    if fmt == "json":
        echo(json.dumps(out.to_json(view, misses=misses, more_gpus=more_gpus, shorter_seq=shorter), indent=2))
        return
    if fmt == "csv":
        from planner.report.csv import to_csv

        rows = view.shown if view.pareto else view.order
        echo(to_csv(out.csv_columns(view, rows)), nl=False)
        if not view.result.feasible:
            echo("note: no layout fits, so the CSV has no rows; run without --format csv to see what to "
                 "change", err=True)
        return
    from planner.report.tables import render

    if view.result.feasible:
        echo(render(out.candidates_table(view, model_id, hardware_id)), nl=False)
    else:
        echo("\n".join(out.nothing_fits_lines(view, misses, more_gpus, shorter)))
    echo("\n".join(out.summary_lines(view)))
