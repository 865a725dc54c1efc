"""`planner infer estimate` (one serving layout) and `planner infer search` (every layout on N GPUs).

Thin: the formulas live in planner.serving, the search in planner.search.serving, the tables, JSON
documents and plot in planner.report.serving; this module parses options, calls them and prints.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from planner.cli import cli
from planner.cli.options import (
    HEADROOM,
    REQUEST_RATE,
    count,
    echo_json,
    hardware_option,
    model_option,
    profile_option,
    with_profile,
)
from planner.engines.load import load_hardware, load_model
from planner.errors import PlannerError
from planner.report.serving import (
    ROW_KEYS,
    closest_rows,
    estimate_notes,
    estimate_report,
    estimate_tables,
    plot_search,
    result_rows,
    search_tables,
)
from planner.search.serving import SearchSpace, search_inference
from planner.serving.estimate import BATCHING, estimate_inference
from planner.serving.inputs import KV_DTYPES, PREFILL_CHUNK_TOKENS, WEIGHT_DTYPES, InferenceArrays
from planner.serving.memory import SERVING_FREE_MEMORY_FRACTION
from planner.serving.rules import resolve_layout
from planner.specs.bounds import over_limit

DECODE_ATTENTION = ("grouped", "per-head")


# --- Option types --------------------------------------------------------------------------------


class Seconds(click.ParamType):  # type: ignore[type-arg]  # click 8.2+ is generic, older click is not
    """A duration: '0.05', '50ms', '2s', '1.5 s'."""

    name = "SECONDS"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s)?\s*", str(value))
        if not match:
            self.fail(f"'{value}' is not a duration; give seconds (0.05) or milliseconds (50ms)", param, ctx)
        seconds = float(match.group(1)) / (1000.0 if match.group(2) == "ms" else 1.0)
        problem = over_limit("seconds", seconds)
        if problem:
            self.fail(f"'{value}': {problem}", param, ctx)
        if seconds <= 0:
            self.fail(f"'{value}' must be above zero", param, ctx)
        return seconds


class Choices(click.ParamType):  # type: ignore[type-arg]  # click 8.2+ is generic, older click is not
    """One choice or a comma-separated list of them: 'bf16' or 'bf16,fp8'."""

    name = "LIST"

    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = choices

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[" + "|".join(self.choices) + "][,...]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, ...]:
        if isinstance(value, tuple):
            return value
        items = tuple(dict.fromkeys(part.strip().lower() for part in str(value).split(",")))
        bad = [item for item in items if item not in self.choices]
        if bad or not items:
            self.fail(f"'{value}': use one or more of {', '.join(self.choices)}, comma-separated", param, ctx)
        return items


def _serving_options(f: Any) -> Any:
    """Options `estimate` and `search` share."""
    for option in reversed(
        [
            model_option(),
            hardware_option(),
            profile_option(),
            click.option("--input-len", type=count("input_len"), required=True, help="Prompt tokens per request."),
            click.option("--output-len", type=count("output_len"), required=True, help="Generated tokens per request (the first included)."),
            click.option("--batching", type=click.Choice(BATCHING), default="continuous", show_default=True,
                         help="static: one batch prefilled then decoded together; continuous: steady state of "
                         "in-flight batching."),
            click.option("--headroom", type=HEADROOM, default=SERVING_FREE_MEMORY_FRACTION,
                         show_default=True, help="Fraction of device memory kept free."),
            click.option("--decode-attention", type=click.Choice(DECODE_ATTENTION), default="grouped",
                         show_default=True, help="grouped: the decode kernel reads K/V once per KV head "
                         "(FlashInfer, TensorRT-LLM XQA); per-head: once per query head (TensorRT-LLM <= 0.6)."),
            click.option("--request-rate", type=REQUEST_RATE, default=None,
                         help="Requests/s arriving over all replicas (open loop, Poisson; continuous batching). "
                         "Without it: a closed loop of --concurrency clients per replica."),
            click.option("--max-batched-tokens", type=count("max_batched_tokens"), default=PREFILL_CHUNK_TOKENS,
                         show_default=True, help="Most tokens one iteration carries (chunked-prefill budget; "
                         "vLLM max_num_batched_tokens, TensorRT-LLM max_num_tokens)."),
        ]
    ):
        f = option(f)
    return f


def _echo_rich(*renderables: Any) -> None:
    """Render with rich (planner.report.tables.render: the terminal's width, or 160 columns when piped,
    like every other table), then print through click (so CliRunner captures it)."""
    from planner.report.tables import render

    click.echo(render(*renderables), nl=False)


# --- infer group ---------------------------------------------------------------------------------


@cli.group("infer")
def infer() -> None:
    """Size a serving deployment: memory per GPU, TTFT, TPOT and throughput.

    \b
    Examples:
      planner infer estimate -m llama-3.1-70b -w h100-sxm --tp 4 --gpus 8 \\
          --input-len 1000 --output-len 200 --concurrency 64 --weight-dtype fp8
      planner infer search -m llama-3.1-70b -w h100-sxm --gpus 8 \\
          --input-len 1000 --output-len 200 --tpot-max 50ms --weight-dtype bf16,fp8
    """


@infer.command("estimate")
@_serving_options
@click.option("--tp", type=count("tp"), default=1, show_default=True, help="Tensor-parallel degree of a replica.")
@click.option("--pp", type=count("pp"), default=1, show_default=True, help="Pipeline-parallel degree of a replica.")
@click.option("--gpus", type=count("gpus"), default=None, help="GPUs in all; replicas = gpus / (tp x pp)  [default: tp x pp]")
@click.option("--concurrency", type=count("concurrency"), default=1, show_default=True,
              help="Requests in flight per replica (the batch, for static batching).")
@click.option("--weight-dtype", type=click.Choice(WEIGHT_DTYPES), default="bf16", show_default=True,
              help="Weights of the transformer layers (fp8 also computes in fp8, fp4 (NVFP4) in fp4 on Blackwell; "
              "int8/int4 are weight-only).")
@click.option("--kv-dtype", type=click.Choice(KV_DTYPES), default="bf16", show_default=True, help="KV-cache dtype.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output format.")
def estimate_cmd(model_ref: str, hardware_ref: str, profile_path: Path | None, input_len: int, output_len: int, batching: str, headroom: float,
                 decode_attention: str, request_rate: float | None, max_batched_tokens: int, tp: int, pp: int,
                 gpus: int | None, concurrency: int, weight_dtype: str, kv_dtype: str, fmt: str) -> None:
    """Memory, latency and throughput of one serving layout.

    \b
    Example:
      planner infer estimate -m llama-2-70b -w h100-sxm --tp 2 --gpus 8 \\
          --input-len 2048 --output-len 256 --concurrency 32 --weight-dtype fp8 --kv-dtype fp8
    """
    if request_rate is not None and batching != "continuous":
        raise PlannerError("--request-rate needs --batching continuous: static batching has no arrival process")
    model_entry, (hw_entry, _overlay) = load_model(model_ref), with_profile(load_hardware(hardware_ref), profile_path)
    model, hw = model_entry.spec, hw_entry.spec
    layout = resolve_layout(model, tp=tp, pp=pp, gpus=gpus, input_len=input_len, output_len=output_len,
                            concurrency=concurrency, request_rate=request_rate, weight_dtype=weight_dtype,
                            kv_dtype=kv_dtype, batching=batching, decode_attention=decode_attention,
                            max_batched_tokens=max_batched_tokens)
    total_gpus, replicas = layout.gpus_total, layout.replicas
    x = InferenceArrays.from_layout(layout)
    est = estimate_inference(model, hw, x, headroom=headroom)
    config = {
        "model": model_entry.id, "model_name": model.name, "hardware": hw_entry.id, "hardware_name": hw.name,
        "tp": tp, "pp": pp, "gpus": total_gpus, "replicas": replicas, "input_len": input_len,
        "output_len": output_len, "concurrency": concurrency, "weight_dtype": weight_dtype, "kv_dtype": kv_dtype,
        "batching": batching, "headroom": headroom, "decode_attention": decode_attention,
        "request_rate": request_rate, "max_batched_tokens": max_batched_tokens,
    }
    sized = x.with_concurrency(est.memory.concurrency) if request_rate is not None else x
    report = estimate_report(est, config, model, sized)
    report["notes"] = estimate_notes(hw, weight_dtype, kv_dtype, tp)
    if fmt == "json":
        echo_json(report)
    else:
        _echo_rich(*estimate_tables(report))


# --- search ---------------------------------------------------------------------------------------


@infer.command("search")
@_serving_options
@click.option("--gpus", type=count("gpus"), required=True, help="GPUs to serve on; split into replicas of tp x pp.")
@click.option("--weight-dtype", "weight_dtypes", type=Choices(WEIGHT_DTYPES), default="bf16", show_default=True,
              help="Weight dtypes to try, comma-separated.")
@click.option("--kv-dtype", "kv_dtypes", type=Choices(KV_DTYPES), default="bf16", show_default=True,
              help="KV-cache dtypes to try, comma-separated.")
@click.option("--ttft-max", type=Seconds(), default=None, help="Largest acceptable TTFT (seconds, or e.g. 500ms).")
@click.option("--tpot-max", type=Seconds(), default=None, help="Largest acceptable TPOT (seconds, or e.g. 50ms).")
@click.option("--percentile", type=click.Choice(["mean", "p50", "p90", "p99"]), default="p90", show_default=True,
              help="Which TTFT and TPOT the limits apply to (and the table shows beside the mean).")
@click.option("--cross-node-tp", is_flag=True, help="Also try tp larger than a node.")
@click.option("--max-pp", type=count("max_pp"), default=None, help="Largest pipeline degree to try.")
@click.option("--top", type=count("top"), default=10, show_default=True, help="Layouts to show.")
@click.option("--pareto", is_flag=True, help="Show the front of TPOT against output tokens/s per GPU instead.")
@click.option("--plot", "plot_path", default=None, metavar="FILE",
              help="Write TPOT vs tokens/s per GPU with the front (.png or .svg; needs matplotlib).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True,
              help="Output format.")
def search_cmd(model_ref: str, hardware_ref: str, profile_path: Path | None, input_len: int, output_len: int, batching: str, headroom: float,
               decode_attention: str, request_rate: float | None, max_batched_tokens: int, gpus: int,
               weight_dtypes: tuple[str, ...], kv_dtypes: tuple[str, ...], ttft_max: float | None,
               tpot_max: float | None, percentile: str, cross_node_tp: bool, max_pp: int | None, top: int,
               pareto: bool, plot_path: str | None, fmt: str) -> None:
    """Every serving layout on GPUS GPUs, ranked by output tokens/s per GPU within the latency limits.

    Tries tp (dividing the heads, within a node unless --cross-node-tp), pp, the replicas they leave,
    the dtypes given, and concurrencies 1, 2, 4, ... up to the most that fits, plus that most.

    \b
    Example:
      planner infer search -m llama-3.1-70b -w h100-sxm --gpus 16 --input-len 2000 \\
          --output-len 500 --ttft-max 2s --tpot-max 40ms --weight-dtype bf16,fp8 --pareto
    """
    if plot_path is not None:
        from planner.report.plots import check_plot_path

        check_plot_path(plot_path)
    model_entry, (hw_entry, _overlay) = load_model(model_ref), with_profile(load_hardware(hardware_ref), profile_path)
    space = SearchSpace(
        gpus=gpus, input_len=input_len, output_len=output_len, weight_dtypes=weight_dtypes, kv_dtypes=kv_dtypes,
        batching=batching, cross_node_tp=cross_node_tp, max_pp=max_pp, ttft_max_seconds=ttft_max,
        tpot_max_seconds=tpot_max, headroom=headroom, per_head_decode_attention=decode_attention == "per-head",
        request_rate=request_rate, max_batched_tokens=max_batched_tokens,
        percentile=0 if percentile == "mean" else int(percentile[1:]),
    )
    result = search_inference(model_entry.spec, hw_entry.spec, space)
    shown = result.pareto if pareto else result.ranked[:top]
    rows = result_rows(result, shown)
    closest = closest_rows(result)
    if plot_path is not None:
        if result.ranked.size:
            plot_search(result, plot_path, f"{model_entry.id} on {gpus:,} x {hw_entry.id}, {input_len:,} in / "
                  f"{output_len:,} out, {batching} batching")
        else:
            click.echo(f"note: {plot_path} not written, since no layout meets the limits", err=True)
    config = {"model": model_entry.id, "hardware": hw_entry.id, "gpus": gpus, "input_len": input_len,
              "output_len": output_len, "weight_dtypes": list(weight_dtypes), "kv_dtypes": list(kv_dtypes),
              "batching": batching, "ttft_max_seconds": ttft_max, "tpot_max_seconds": tpot_max,
              "cross_node_tp": cross_node_tp, "headroom": headroom, "decode_attention": decode_attention,
              "request_rate": request_rate, "max_batched_tokens": max_batched_tokens, "percentile": percentile}
    if fmt == "json":
        doc = {"config": config, "layouts_considered": result.layouts_considered,
               "candidates_evaluated": int(result.candidates.tp.size), "feasible": int(result.feasible.sum()),
               "rejected": result.rejected, "view": "pareto" if pareto else "top", "results": rows}
        if not rows:
            doc["closest"] = closest
        echo_json(doc)
    elif fmt == "csv":
        from planner.report.csv import to_csv

        columns = {key: [row[key] for row in rows] for key in (rows[0] if rows else ROW_KEYS)}
        click.echo(to_csv(columns), nl=False)
        if not rows:
            click.echo("note: no layout meets the limits; run without --format csv to see the closest", err=True)
    else:
        _echo_rich(*search_tables(result, rows, pareto, config, closest, hw_entry.spec))


