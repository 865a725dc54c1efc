"""`planner infer estimate` (one serving layout) and `planner infer search` (every layout on N GPUs).

Thin: the formulas live in planner.serving.estimate*; this module parses options, calls them,
and renders a table, JSON or CSV (and, on request, a plot; matplotlib is imported only then).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import numpy as np

from planner.cli import cli
from planner.cli.options import HEADROOM, count, echo_json, hardware_option, model_option, profile_option, with_profile
from planner.engines.load import load_hardware, load_model
from planner.search.serving import InferenceSearchResult, SearchSpace, search_inference
from planner.serving.estimate import BATCHING, REASONS, check_layout, estimate_inference
from planner.serving.inputs import KV_DTYPES, WEIGHT_DTYPES, InferenceArrays
from planner.serving.memory import DEFAULT_HEADROOM
from planner.specs.bounds import over_limit

DECODE_ATTENTION = ("grouped", "per-head")


# --- Option types --------------------------------------------------------------------------------


class Seconds(click.ParamType):
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


class Choices(click.ParamType):
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
            click.option("--headroom", type=HEADROOM, default=DEFAULT_HEADROOM,
                         show_default=True, help="Fraction of device memory kept free."),
            click.option("--decode-attention", type=click.Choice(DECODE_ATTENTION), default="grouped",
                         show_default=True, help="grouped: the decode kernel reads K/V once per KV head "
                         "(FlashInfer, TensorRT-LLM XQA); per-head: once per query head (TensorRT-LLM <= 0.6)."),
        ]
    ):
        f = option(f)
    return f


def _echo_rich(*renderables: Any) -> None:
    """Render with rich (planner.report.tables.render: the terminal's width, or 160 columns when piped,
    like every other table), then print through click (so CliRunner captures it)."""
    from planner.report.tables import render

    click.echo(render(*renderables), nl=False)


def _gb(nbytes: float) -> str:
    return f"{nbytes / 2**30:,.2f} GiB"


def _time(seconds: float) -> str:
    from planner.report.tables import human_seconds

    return human_seconds(seconds)


def _scalar(value: Any) -> int | float:
    """A 0-d array as a JSON number: whole byte counts as int."""
    item = np.asarray(value).item()
    return int(item) if isinstance(item, float) and item.is_integer() else item


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
              help="Weights of the transformer layers (fp8 also computes in fp8; int8/int4 are weight-only).")
@click.option("--kv-dtype", type=click.Choice(KV_DTYPES), default="bf16", show_default=True, help="KV-cache dtype.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output format.")
def estimate_cmd(model_ref: str, hardware_ref: str, profile_path: Path | None, input_len: int, output_len: int, batching: str, headroom: float,
                 decode_attention: str, tp: int, pp: int, gpus: int | None, concurrency: int, weight_dtype: str,
                 kv_dtype: str, fmt: str) -> None:
    """Memory, latency and throughput of one serving layout.

    \b
    Example:
      planner infer estimate -m llama-2-70b -w h100-sxm --tp 2 --gpus 8 \\
          --input-len 2048 --output-len 256 --concurrency 32 --weight-dtype fp8 --kv-dtype fp8
    """
    model_entry, (hw_entry, _overlay) = load_model(model_ref), with_profile(load_hardware(hardware_ref), profile_path)
    model, hw = model_entry.spec, hw_entry.spec
    x = InferenceArrays.build(
        tp=tp, pp=pp, concurrency=concurrency, input_len=input_len, output_len=output_len,
        weight_dtype=weight_dtype, kv_dtype=kv_dtype, per_head_decode_attention=decode_attention == "per-head",
    )
    total_gpus = tp * pp if gpus is None else gpus
    check_layout(model, x, gpus=total_gpus)
    est = estimate_inference(model, hw, x, headroom=headroom)
    replicas = total_gpus // (tp * pp)
    config = {
        "model": model_entry.id, "model_name": model.name, "hardware": hw_entry.id, "hardware_name": hw.name,
        "tp": tp, "pp": pp, "gpus": total_gpus, "replicas": replicas, "input_len": input_len,
        "output_len": output_len, "concurrency": concurrency, "weight_dtype": weight_dtype, "kv_dtype": kv_dtype,
        "batching": batching, "headroom": headroom, "decode_attention": decode_attention,
    }
    report = estimate_report(est, config)
    report["notes"] = estimate_notes(hw, weight_dtype, kv_dtype, tp)
    if fmt == "json":
        echo_json(report)
    else:
        _echo_rich(*_estimate_tables(report))


def _serving_dict(s: Any, replicas: int) -> dict[str, float]:
    return {
        "ttft_seconds": float(s.ttft_seconds), "tpot_seconds": float(s.tpot_seconds),
        "e2e_seconds": float(s.e2e_seconds), "output_tokens_per_second": float(s.output_tokens_per_second),
        "output_tokens_per_second_per_gpu": float(s.output_tokens_per_second_per_gpu),
        "output_tokens_per_second_all_replicas": float(s.output_tokens_per_second) * replicas,
    }


def _pass_dict(p: Any) -> dict[str, float]:
    names = ("gemm_seconds", "attention_seconds", "elementwise_seconds", "layer_overhead_seconds", "tp_comm_seconds",
             "head_seconds", "pass_overhead_seconds", "pp_comm_seconds", "stage_seconds", "traversal_seconds",
             "gemm_flop", "attention_flop", "weight_bytes_read", "kv_bytes_read")
    return {name: float(getattr(p, name)) for name in names}


def estimate_report(est: Any, config: dict[str, Any]) -> dict[str, Any]:
    """The JSON document of `infer estimate` (keys may be added, never renamed)."""
    mem, times = est.memory, est.times
    chosen = est.serving(config["batching"])
    both = {name: _serving_dict(est.serving(name), config["replicas"]) for name in BATCHING}
    stages = mem.stage_weights
    return {
        "config": config,
        "memory": {
            "weights_bytes": _scalar(mem.weights_bytes),
            "kv_cache_bytes": _scalar(mem.kv_cache_bytes),
            "kv_cache_bytes_per_token": _scalar(mem.kv_cache_bytes_per_token),
            "activations_bytes": _scalar(mem.activations_bytes),
            "other_bytes": _scalar(mem.other_bytes),
            "total_bytes": _scalar(mem.total_bytes),
            "capacity_bytes": _scalar(mem.capacity_bytes),
            "usable_bytes": _scalar(mem.usable_bytes),
            "kv_cache_bytes_per_sequence": _scalar(mem.kv_cache_bytes_per_sequence),
            "weights_bytes_by_stage": {
                "first": _scalar(stages.first_bytes), "middle": _scalar(stages.middle_bytes),
                "last": _scalar(stages.last_bytes),
            },
        },
        "fits": bool(mem.fits),
        "max_concurrency": int(mem.max_concurrency),
        "latency": {k: both[config["batching"]][k] for k in ("ttft_seconds", "tpot_seconds", "e2e_seconds")},
        "throughput": {
            "output_tokens_per_second": float(chosen.output_tokens_per_second),
            "output_tokens_per_second_per_gpu": float(chosen.output_tokens_per_second_per_gpu),
            "output_tokens_per_second_all_replicas": float(chosen.output_tokens_per_second) * config["replicas"],
        },
        "batching": both,
        "breakdown": {
            "prefill_pass": _pass_dict(times.prefill),
            "decode_step": _pass_dict(times.decode),
            "continuous_iteration": _pass_dict(times.iteration),
            "prefill_passes": int(times.prefill_passes),
            "decode_micro_batches": int(times.decode_micro_batches),
            "prefill_seconds": float(times.prefill_seconds),
        },
    }


def _bar(part: float, whole: float, width: int = 30) -> str:
    filled = int(round(min(max(part / whole, 0.0), 1.0) * width)) if whole > 0 else 0
    return "█" * filled + "·" * (width - filled)


def _estimate_tables(r: dict[str, Any]) -> list[Any]:
    from rich.table import Table
    from rich.text import Text

    c, m = r["config"], r["memory"]
    cap = m["capacity_bytes"]
    replicas = f"{c['replicas']} replica" + ("" if c["replicas"] == 1 else "s")
    head = Text(f"{c['model_name']} on {c['hardware_name']}: tp {c['tp']} x pp {c['pp']}, {replicas}, "
                f"{c['concurrency']:,} in flight per replica, {c['input_len']:,} in / {c['output_len']:,} out, "
                f"weights {c['weight_dtype']}, KV {c['kv_dtype']}")
    mem = Table(title="Memory per GPU (most loaded stage)", title_justify="left")
    for name, justify in (("", "left"), ("bytes", "right"), ("of capacity", "left"), ("share", "right")):
        mem.add_column(name, justify=justify)  # type: ignore[arg-type]
    for label, key in (("weights", "weights_bytes"), ("KV cache", "kv_cache_bytes"),
                       ("activations", "activations_bytes"), ("reserve", "other_bytes"), ("total", "total_bytes")):
        mem.add_row(label, _gb(m[key]), _bar(m[key], cap), f"{m[key] / cap:.0%}")
    verdict = Text("fits" if r["fits"] else "DOES NOT FIT", style="bold green" if r["fits"] else "bold red")
    fit_line = Text("verdict: ").append(verdict).append(
        f" in {_gb(m['usable_bytes'])} usable of {_gb(cap)} ({c['headroom']:.0%} headroom)\n"
        f"max concurrency: {r['max_concurrency']:,} sequences of {c['input_len'] + c['output_len']:,} tokens per "
        f"replica; KV cache {m['kv_cache_bytes_per_token']:,.0f} bytes per token (whole model, one replica)")
    times = Table(title="Latency and throughput", title_justify="left",
                  caption="* the batching chosen (--batching): the figures in JSON 'latency' and 'throughput'",
                  caption_justify="left")
    for name in ("batching", "TTFT", "TPOT", "end-to-end", "out tok/s per replica", "out tok/s per GPU"):
        times.add_column(name, justify="left" if name == "batching" else "right")
    for name, s in r["batching"].items():
        mark = " *" if name == c["batching"] else ""
        times.add_row(name + mark, _time(s["ttft_seconds"]), _time(s["tpot_seconds"]), _time(s["e2e_seconds"]),
                      f"{s['output_tokens_per_second']:,.0f}", f"{s['output_tokens_per_second_per_gpu']:,.0f}")
    d = r["breakdown"]["decode_step"]
    micro = r["breakdown"]["decode_micro_batches"]
    if c["pp"] == 1:
        title = "One static decode step, per GPU"
    else:
        per = c["concurrency"] / micro
        title = (f"One static decode pass of a micro-batch ({per:,.4g} sequences, {micro:g} micro-batches) "
                 f"through all {c['pp']} stages, per GPU of a stage")
    parts = Table(title=title, title_justify="left")
    names = ("GEMMs", "attention", "element-wise", "layer overhead", "TP all-reduce", "output head",
             "pass overhead", "PP send", "total")
    keys = ("gemm_seconds", "attention_seconds", "elementwise_seconds", "layer_overhead_seconds", "tp_comm_seconds",
            "head_seconds", "pass_overhead_seconds", "pp_comm_seconds", "traversal_seconds")
    for name in names:
        parts.add_column(name, justify="right")
    parts.add_row(*(_time(d[k]) for k in keys))
    out: list[Any] = [head, mem, fit_line, times, parts]
    out += [Text(f"note: {note}") for note in r.get("notes", [])]
    return out


def estimate_notes(hw: Any, weight_dtype: str, kv_dtype: str, tp: int = 1) -> list[str]:
    """What the figures assume where the chip lacks the dtype's units (docs/inference.md, Dtypes), and
    when the tensor-parallel group spans nodes (infer search tries that only with --cross-node-tp)."""
    notes = []
    per_node = hw.node.gpus_per_node
    if tp > per_node:
        notes.append(f"tp {tp} spans {-(-tp // per_node)} nodes of {per_node} GPUs: its all-reduces (two per layer "
                     "per pass) cross the inter-node network")
    if "fp8" not in hw.accelerator.peak_flops_per_s:
        if weight_dtype == "fp8":
            notes.append(f"{hw.accelerator.name} has no fp8 tensor cores: fp8 weights are costed weight-only "
                         "(1 byte per weight read, GEMMs at the 16-bit rate)")
        if kv_dtype == "fp8":
            notes.append(f"{hw.accelerator.name} has no fp8 units: the fp8 KV cache is costed at 1 byte per "
                         "element, converted to 16 bits for attention")
    return notes


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
@click.option("--cross-node-tp", is_flag=True, help="Also try tp larger than a node.")
@click.option("--max-pp", type=count("max_pp"), default=None, help="Largest pipeline degree to try.")
@click.option("--top", type=count("top"), default=10, show_default=True, help="Layouts to show.")
@click.option("--pareto", is_flag=True, help="Show the front of TPOT against output tokens/s per GPU instead.")
@click.option("--plot", "plot_path", default=None, metavar="FILE",
              help="Write TPOT vs tokens/s per GPU with the front (.png or .svg; needs matplotlib).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True,
              help="Output format.")
def search_cmd(model_ref: str, hardware_ref: str, profile_path: Path | None, input_len: int, output_len: int, batching: str, headroom: float,
               decode_attention: str, gpus: int, weight_dtypes: tuple[str, ...], kv_dtypes: tuple[str, ...],
               ttft_max: float | None, tpot_max: float | None, cross_node_tp: bool, max_pp: int | None, top: int,
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
    )
    result = search_inference(model_entry.spec, hw_entry.spec, space)
    shown = result.pareto if pareto else result.ranked[:top]
    rows = result_rows(result, shown)
    closest = closest_rows(result)
    if plot_path is not None:
        if result.ranked.size:
            _plot(result, plot_path, f"{model_entry.id} on {gpus:,} x {hw_entry.id}, {input_len:,} in / "
                  f"{output_len:,} out, {batching} batching")
        else:
            click.echo(f"note: {plot_path} not written, since no layout meets the limits", err=True)
    config = {"model": model_entry.id, "hardware": hw_entry.id, "gpus": gpus, "input_len": input_len,
              "output_len": output_len, "weight_dtypes": list(weight_dtypes), "kv_dtypes": list(kv_dtypes),
              "batching": batching, "ttft_max_seconds": ttft_max, "tpot_max_seconds": tpot_max,
              "cross_node_tp": cross_node_tp, "headroom": headroom, "decode_attention": decode_attention}
    if fmt == "json":
        doc = {"config": config, "layouts_considered": result.layouts_considered,
               "candidates_evaluated": int(result.candidates.tp.size), "feasible": int(result.feasible.sum()),
               "rejected": result.rejected, "view": "pareto" if pareto else "top", "results": rows}
        if not rows:
            doc["closest"] = closest
        echo_json(doc)
    elif fmt == "csv":
        from planner.report.csv import to_csv

        columns = {key: [row[key] for row in rows] for key in (rows[0] if rows else _ROW_KEYS)}
        click.echo(to_csv(columns), nl=False)
        if not rows:
            click.echo("note: no layout meets the limits; run without --format csv to see the closest", err=True)
    else:
        _echo_rich(*_search_tables(result, rows, pareto, config, closest, hw_entry.spec))


_ROW_KEYS = ("rank", "tp", "pp", "replicas", "weight_dtype", "kv_dtype", "concurrency", "ttft_seconds", "tpot_seconds",
             "e2e_seconds", "output_tokens_per_second", "output_tokens_per_second_per_gpu",
             "output_tokens_per_second_all_replicas", "total_bytes", "max_concurrency")


def result_rows(result: InferenceSearchResult, idx: np.ndarray) -> list[dict[str, Any]]:
    """One dict per candidate in `idx` (the JSON and CSV rows). `rank` is the place in the whole ranking
    (output tokens/s per GPU), also on the Pareto front; None for a candidate that is not feasible."""
    s, m, c = result.serving(), result.estimate.memory, result.candidates
    rank = np.zeros(c.tp.size, dtype=np.int64)
    rank[result.ranked] = np.arange(1, result.ranked.size + 1)
    idx = np.asarray(idx, dtype=np.int64)
    columns = {
        "tp": c.tp, "pp": c.pp, "replicas": result.replicas, "weight_dtype": result.weight_dtype,
        "kv_dtype": result.kv_dtype, "concurrency": c.concurrency, "ttft_seconds": s.ttft_seconds,
        "tpot_seconds": s.tpot_seconds, "e2e_seconds": s.e2e_seconds,
        "output_tokens_per_second": s.output_tokens_per_second,
        "output_tokens_per_second_per_gpu": s.output_tokens_per_second_per_gpu,
        "output_tokens_per_second_all_replicas": s.output_tokens_per_second * result.replicas,
        "total_bytes": np.round(m.total_bytes).astype(np.int64), "max_concurrency": m.max_concurrency,
    }
    picked = {name: col[idx].tolist() for name, col in columns.items()}
    ranks = [r or None for r in rank[idx].tolist()]
    return [{"rank": ranks[i], **{name: picked[name][i] for name in columns}} for i in range(len(idx))]


def closest_rows(result: InferenceSearchResult) -> dict[str, dict[str, Any] | None]:
    """Of the candidates that fit in memory, the one with the lowest TTFT and the one with the lowest TPOT
    (what the limits would have to allow); None where nothing fits in memory."""
    fits = np.flatnonzero(result.estimate.memory.fits)
    s, c = result.serving(), result.candidates
    out: dict[str, dict[str, Any] | None] = {}
    for name, values in (("lowest_ttft", s.ttft_seconds), ("lowest_tpot", s.tpot_seconds)):
        if fits.size == 0:
            out[name] = None
            continue
        # lowest time, then the most tokens/s per GPU, then the smallest replica
        order = np.lexsort((c.tp[fits] * c.pp[fits], -s.output_tokens_per_second_per_gpu[fits], values[fits]))
        out[name] = result_rows(result, fits[order[:1]])[0]
    return out


def _row_label(row: dict[str, Any]) -> str:
    replicas = f"{row['replicas']:,} replica" + ("" if row["replicas"] == 1 else "s")
    return (f"tp {row['tp']} pp {row['pp']} x {replicas}, {row['concurrency']:,} in flight, "
            f"weights {row['weight_dtype']}, KV {row['kv_dtype']}")


SMALLER_WEIGHTS = ("fp8", "int4")  # fewer bytes per weight: less memory, fewer bytes read per decode step


def _nothing_meets(result: InferenceSearchResult, config: dict[str, Any], closest: dict[str, Any],
                   hw: Any) -> list[str]:
    """What no layout met, how close the search came, and which options could change that."""
    limits = {"ttft": config["ttft_max_seconds"], "tpot": config["tpot_max_seconds"]}
    dtypes, kv_dtypes = config["weight_dtypes"], config["kv_dtypes"]
    untried = [d for d in SMALLER_WEIGHTS if d not in dtypes]
    hints: list[str] = []
    if closest["lowest_ttft"] is None:
        lines = ["No layout fits in memory, even with one sequence in flight."]
        hints.append("add GPUs")
        if untried:
            hints.append("try --weight-dtype " + ",".join([*dtypes, *untried]))
        if "fp8" not in kv_dtypes:
            hints.append("try --kv-dtype " + ",".join([*kv_dtypes, "fp8"]))
        if "tp_cross_node" in result.rejected:
            hints.append("allow --cross-node-tp")
        hints.append("or shorten --input-len/--output-len")
    else:
        given = ", ".join(f"--{k}-max {_time(v)}" for k, v in limits.items() if v is not None)
        lines = [f"No layout meets the limits ({given}). Of the layouts that fit in memory:"]
        for key in ("ttft", "tpot"):
            row = closest[f"lowest_{key}"]
            lines.append(f"  lowest {key.upper()} {_time(row[f'{key}_seconds'])}: {_row_label(row)}")
        hints.append("relax " + " or ".join(f"--{k}-max" for k, v in limits.items() if v is not None))
        # latency falls with more tensor parallelism and fewer bytes or FLOPs per token, not with more replicas
        if "tp_cross_node" in result.rejected:
            hints.append("allow --cross-node-tp")
        elif config["gpus"] < hw.node.gpus_per_node:
            hints.append(f"use up to {hw.node.gpus_per_node} GPUs (a wider tp)")
        faster = [d for d in untried if d == "int4" and limits["tpot"] is not None]
        if "fp8" in untried and "fp8" in hw.accelerator.peak_flops_per_s:
            faster.insert(0, "fp8")  # fp8 tensor cores: faster prefill and decode
        if faster:
            hints.append("try --weight-dtype " + ",".join([*dtypes, *faster]))
    lines.append("To change that: " + "; ".join(hints) + ".")
    return lines


def _search_tables(result: InferenceSearchResult, rows: list[dict[str, Any]], pareto: bool,
                   config: dict[str, Any], closest: dict[str, Any], hw: Any) -> list[Any]:
    from rich.table import Table
    from rich.text import Text

    out: list[Any] = []
    if rows:
        what = "Latency-throughput front (TPOT against output tokens/s per GPU)" if pareto else "Best layouts"
        out.append(Text(f"{what} for {config['model']} on {config['gpus']:,} x {config['hardware']}, "
                        f"{config['input_len']:,} in / {config['output_len']:,} out, {config['batching']} batching"))
        table = Table(caption="#: rank by output tokens/s per GPU; in flight: sequences per replica; "
                      "mem/GPU: most loaded stage", caption_justify="left")
        for name in ("#", "tp", "pp", "replicas", "weights", "KV", "in flight", "TTFT", "TPOT", "tok/s/GPU",
                     "tok/s total", "mem/GPU"):
            table.add_column(name, justify="right", no_wrap=True)
        for row in rows:
            table.add_row(str(row["rank"]), str(row["tp"]), str(row["pp"]), f"{row['replicas']:,}",
                          row["weight_dtype"], row["kv_dtype"], f"{row['concurrency']:,}", _time(row["ttft_seconds"]),
                          _time(row["tpot_seconds"]), f"{row['output_tokens_per_second_per_gpu']:,.0f}",
                          f"{row['output_tokens_per_second_all_replicas']:,.0f}", _gb(row["total_bytes"]))
        out.append(table)
    else:
        out += [Text(line) for line in _nothing_meets(result, config, closest, hw)]
    n = result.layouts_considered
    out.append(Text(f"{n:,} layout{'' if n == 1 else 's'} (tp x pp x dtypes), {result.candidates.tp.size:,} with "
                    f"their concurrencies; {int(result.feasible.sum()):,} feasible"))
    if result.rejected:
        out.append(Text("Rejected (tp_*, pp_*, memory: layouts; ttft, tpot: layouts at one concurrency):"))
        reasons = Table()
        reasons.add_column("reason")
        reasons.add_column("count", justify="right")
        descriptions = {**REASONS, "tp_cross_node": "tp larger than a node (allow with --cross-node-tp)",
                        "memory": "does not fit in memory, even with one sequence in flight"}
        for code, count in sorted(result.rejected.items(), key=lambda kv: -kv[1]):
            reasons.add_row(f"{code}: {descriptions.get(code, code)}", f"{count:,}")
        out.append(reasons)
    else:
        out.append(Text("Rejected: none"))
    return out


def _plot(result: InferenceSearchResult, path: str, title: str) -> None:
    from planner.report.plots import plot_latency_vs_throughput

    s = result.serving()
    plot_latency_vs_throughput(
        path, tpot_seconds=s.tpot_seconds, tokens_per_second_per_gpu=s.output_tokens_per_second_per_gpu,
        feasible=np.flatnonzero(result.feasible), front=result.pareto, best=int(result.ranked[0]),
        tpot_max_seconds=result.space.tpot_max_seconds, title=title,
        others=np.flatnonzero(result.estimate.memory.fits & ~result.feasible),
    )
