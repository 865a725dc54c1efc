"""Serving reports: the JSON documents, tables and plot of `planner infer estimate` and `planner infer search`.

Pure rendering of what planner.serving and planner.search.serving computed: dicts for JSON/CSV, rich
renderables for the tables (the CLI prints them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planner.physics.kernels import has_nvfp4_gemms
from planner.search.serving import InferenceSearchResult
from planner.serving.estimate import BATCHING
from planner.serving.rules import REASONS


def _gb(nbytes: float) -> str:
    return f"{nbytes / 2**30:,.2f} GiB"


def _time(seconds: float | None) -> str:
    from planner.report.tables import human_seconds

    return "inf" if seconds is None or not np.isfinite(seconds) else human_seconds(seconds)


def _scalar(value: Any) -> int | float:
    """A 0-d array as a JSON number: whole byte counts as int."""
    item = np.asarray(value).item()
    return int(item) if isinstance(item, float) and item.is_integer() else item


def _num(value: Any) -> float | None:
    """A 0-d array as a JSON number; None where it is infinite (an overloaded engine)."""
    v = float(np.asarray(value))
    return v if np.isfinite(v) else None


LATENCY_KEYS = ("ttft_seconds", "ttft_p50_seconds", "ttft_p90_seconds", "ttft_p99_seconds", "tpot_seconds",
                "tpot_p50_seconds", "tpot_p90_seconds", "tpot_p99_seconds", "e2e_seconds")


def _serving_dict(s: Any, replicas: int) -> dict[str, Any]:
    out: dict[str, Any] = {key: _num(getattr(s, key)) for key in LATENCY_KEYS}
    out.update({
        "output_tokens_per_second": float(s.output_tokens_per_second),
        "output_tokens_per_second_per_gpu": float(s.output_tokens_per_second_per_gpu),
        "output_tokens_per_second_all_replicas": float(s.output_tokens_per_second) * replicas,
        "in_flight_per_replica": _num(s.in_flight), "requests_per_second_per_replica": _num(s.request_rate),
        "stable": bool(s.stable),
    })
    return out


def _steady_dict(st: Any) -> dict[str, Any]:
    """The continuous-batching steady state, term by term (planner.serving.continuous.SteadyState)."""
    names = ("request_rate", "in_flight", "decoding", "prefill_utilization", "prefill_chunks", "iteration_seconds",
             "prefill_tokens_per_iteration", "residual_seconds", "queue_wait_seconds", "prompt_seconds")
    return {name: _num(getattr(st, name)) for name in names} | {"stable": bool(st.stable)}


def _stages_list(model: Any, x: Any) -> list[dict[str, Any]]:
    """Memory per GPU of every pipeline stage, as `planner estimate --format json` reports `stages`."""
    from planner.serving.inputs import model_shapes
    from planner.serving.memory import stage_memory

    sm = stage_memory(model_shapes(model), x, np.arange(int(x.pp)))
    return [
        {"stage": int(sm.stage[i]), "layers": int(sm.layers[i]), "weights_bytes": _scalar(sm.weights_bytes[i]),
         "kv_cache_bytes": _scalar(sm.kv_cache_bytes[i]), "activations_bytes": _scalar(sm.activations_bytes[i]),
         "other_bytes": _scalar(sm.other_bytes[i]), "total_bytes": _scalar(sm.total_bytes[i])}
        for i in range(sm.stage.size)
    ]


def _pass_dict(p: Any) -> dict[str, float]:
    names = ("gemm_seconds", "attention_seconds", "elementwise_seconds", "layer_overhead_seconds", "tp_comm_seconds",
             "head_seconds", "pass_overhead_seconds", "pp_comm_seconds", "stage_seconds", "traversal_seconds",
             "gemm_flop", "attention_flop", "weight_bytes_read", "kv_bytes_read")
    return {name: float(getattr(p, name)) for name in names}


def estimate_report(est: Any, config: dict[str, Any], model: Any, x: Any) -> dict[str, Any]:
    """The JSON document of `infer estimate` (keys may be added, never renamed). `x`: the layout as the
    memory was sized (an open loop: at the requests it holds in flight)."""
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
            "linear_state_bytes_per_sequence": mem.linear_state_bytes_per_sequence,
            "weights_bytes_by_stage": {
                "first": _scalar(stages.first_bytes), "middle": _scalar(stages.middle_bytes),
                "last": _scalar(stages.last_bytes),
            },
        },
        "fits": bool(mem.fits),
        "max_concurrency": int(mem.max_concurrency),
        "stages": _stages_list(model, x),
        "latency": {k: both[config["batching"]][k] for k in LATENCY_KEYS},
        "throughput": {
            "output_tokens_per_second": float(chosen.output_tokens_per_second),
            "output_tokens_per_second_per_gpu": float(chosen.output_tokens_per_second_per_gpu),
            "output_tokens_per_second_all_replicas": float(chosen.output_tokens_per_second) * config["replicas"],
        },
        "batching": both,
        "steady_state": _steady_dict(times.steady),
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


def estimate_tables(r: dict[str, Any]) -> list[Any]:
    from rich.table import Table
    from rich.text import Text

    c, m = r["config"], r["memory"]
    cap = m["capacity_bytes"]
    replicas = f"{c['replicas']} replica" + ("" if c["replicas"] == 1 else "s")
    load = (f"{c['request_rate']:g} requests/s" if c.get("request_rate")
            else f"{c['concurrency']:,} in flight per replica")
    head = Text(f"{c['model_name']} on {c['hardware_name']}: tp {c['tp']} x pp {c['pp']}, {replicas}, "
                f"{load}, {c['input_len']:,} in / {c['output_len']:,} out, "
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
        f"replica; KV cache {m['kv_cache_bytes_per_token']:,.0f} bytes per token (whole model, one replica)"
        + (f" and {m['linear_state_bytes_per_sequence'] / 2**20:,.1f} MiB of Gated DeltaNet state per sequence"
           if m.get("linear_state_bytes_per_sequence") else ""))
    times = Table(title="Latency and throughput", title_justify="left",
                  caption="* the batching chosen (--batching): the figures in JSON 'latency' and 'throughput'",
                  caption_justify="left")
    for name in ("batching", "TTFT mean", "p50", "p90", "p99", "TPOT mean", "p90", "p99", "end-to-end",
                 "out tok/s per replica", "out tok/s per GPU"):
        times.add_column(name, justify="left" if name == "batching" else "right")
    for name, s in r["batching"].items():
        mark = " *" if name == c["batching"] else ""
        lat = [_time(s[k]) for k in ("ttft_seconds", "ttft_p50_seconds", "ttft_p90_seconds", "ttft_p99_seconds",
                                     "tpot_seconds", "tpot_p90_seconds", "tpot_p99_seconds", "e2e_seconds")]
        times.add_row(name + mark, *lat, f"{s['output_tokens_per_second']:,.0f}",
                      f"{s['output_tokens_per_second_per_gpu']:,.0f}")
    st = r["steady_state"]
    if not st["stable"]:
        load_line = Text(f"continuous: OVERLOADED: {c['request_rate']:g} requests/s over {replicas} is more than the "
                         "engine can serve; latencies grow without bound", style="bold red")
    else:
        loop = (f"{c['request_rate']:g} requests/s arriving over {replicas} (open loop)" if c.get("request_rate")
                else f"a closed loop of {c['concurrency']:,} clients per replica")
        load_line = Text(
            f"continuous, {loop}: {st['request_rate']:,.3g} requests/s per replica, {st['in_flight']:,.1f} in flight "
            f"({st['decoding']:,.1f} decoding); prefill takes {st['prefill_utilization']:.0%} of engine time, "
            f"{st['prefill_chunks']:g} iteration(s) per prompt at --max-batched-tokens {c['max_batched_tokens']:,}.\n"
            f"  TTFT (mean) = {_time(st['residual_seconds'])} for the running iteration + "
            f"{_time(st['queue_wait_seconds'])} queued behind other prompts + {_time(st['prompt_seconds'])} for its "
            f"own prompt's iterations; mean iteration {_time(st['iteration_seconds'])}")
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
    out: list[Any] = [head, mem, fit_line, times, load_line, parts]
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
    if weight_dtype == "fp4" and not has_nvfp4_gemms(hw):
        notes.append(f"{hw.accelerator.name} has no NVFP4 GEMM in its profile: fp4 weights are costed weight-only "
                     "(0.5625 bytes per weight read, GEMMs at the 16-bit rate, as vLLM's FP4 Marlin kernel runs them)")
    if "fp8" not in hw.accelerator.peak_flops_per_s:
        if weight_dtype == "fp8":
            notes.append(f"{hw.accelerator.name} has no fp8 tensor cores: fp8 weights are costed weight-only "
                         "(1 byte per weight read, GEMMs at the 16-bit rate)")
        if kv_dtype == "fp8":
            notes.append(f"{hw.accelerator.name} has no fp8 units: the fp8 KV cache is costed at 1 byte per "
                         "element, converted to 16 bits for attention")
    return notes


ROW_KEYS = ("rank", "tp", "pp", "replicas", "weight_dtype", "kv_dtype", "concurrency", "ttft_seconds",
            "ttft_p50_seconds", "ttft_p90_seconds", "ttft_p99_seconds", "tpot_seconds", "tpot_p90_seconds",
            "tpot_p99_seconds", "e2e_seconds", "output_tokens_per_second", "output_tokens_per_second_per_gpu",
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
        "kv_dtype": result.kv_dtype, "concurrency": np.where(c.request_rate > 0, m.concurrency, c.concurrency),
        "ttft_seconds": s.ttft_seconds, "ttft_p50_seconds": s.ttft_p50_seconds, "ttft_p90_seconds": s.ttft_p90_seconds,
        "ttft_p99_seconds": s.ttft_p99_seconds, "tpot_seconds": s.tpot_seconds, "tpot_p90_seconds": s.tpot_p90_seconds,
        "tpot_p99_seconds": s.tpot_p99_seconds, "e2e_seconds": s.e2e_seconds,
        "output_tokens_per_second": s.output_tokens_per_second,
        "output_tokens_per_second_per_gpu": s.output_tokens_per_second_per_gpu,
        "output_tokens_per_second_all_replicas": s.output_tokens_per_second * result.replicas,
        "total_bytes": np.round(m.total_bytes).astype(np.int64), "max_concurrency": m.max_concurrency,
    }
    picked = {name: col[idx].tolist() for name, col in columns.items()}
    ranks = [r or None for r in rank[idx].tolist()]
    return [{"rank": ranks[i], **{name: picked[name][i] for name in columns}} for i in range(len(idx))]


def closest_rows(result: InferenceSearchResult) -> dict[str, dict[str, Any] | None]:
    """Of the candidates that fit in memory and keep up with the load, the one with the lowest TTFT and the one
    with the lowest TPOT (what the limits would have to allow); None where nothing fits in memory, or where every
    candidate that fits is overloaded by --request-rate (its latencies are infinite: no figure to show)."""
    s, c = result.serving(), result.candidates
    fits = np.flatnonzero(result.estimate.memory.fits & np.asarray(s.stable, dtype=bool))
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
    overloaded = bool(np.any(result.estimate.memory.fits & ~np.asarray(result.serving().stable, dtype=bool)))
    if closest["lowest_ttft"] is None and overloaded:
        lines = [f"No layout keeps up with --request-rate {config['request_rate']:g}/s: every layout that fits in "
                 "memory is overloaded (requests arrive faster than its replicas serve them)."]
        hints.append("lower --request-rate")
        hints.append("add GPUs (more replicas share the rate)")
        if untried:
            hints.append("try --weight-dtype " + ",".join([*dtypes, *untried]))
    elif closest["lowest_ttft"] is None:
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


def search_tables(result: InferenceSearchResult, rows: list[dict[str, Any]], pareto: bool,
                   config: dict[str, Any], closest: dict[str, Any], hw: Any) -> list[Any]:
    from rich.table import Table
    from rich.text import Text

    out: list[Any] = []
    if rows:
        what = "Latency-throughput front (TPOT against output tokens/s per GPU)" if pareto else "Best layouts"
        out.append(Text(f"{what} for {config['model']} on {config['gpus']:,} x {config['hardware']}, "
                        f"{config['input_len']:,} in / {config['output_len']:,} out, {config['batching']} batching"))
        pct = config.get("percentile", "mean")
        ranking = ("end-to-end latency (every layout carries --request-rate)" if config.get("request_rate")
                   else "output tokens/s per GPU")
        table = Table(caption=f"#: rank by {ranking}; in flight: sequences per replica; TTFT/TPOT: mean and {pct} "
                      "(the limits apply to the latter); mem/GPU: most loaded stage", caption_justify="left")
        pct_key = "" if pct == "mean" else f"_{pct}"
        for name in ("#", "tp", "pp", "replicas", "weights", "KV", "in flight", "TTFT", f"TTFT {pct}", "TPOT",
                     f"TPOT {pct}", "tok/s/GPU", "tok/s total", "mem/GPU"):
            table.add_column(name, justify="right", no_wrap=True)
        for row in rows:
            tpot_pct = row["tpot_seconds"] if pct in ("mean", "p50") else row[f"tpot{pct_key}_seconds"]
            table.add_row(str(row["rank"]), str(row["tp"]), str(row["pp"]), f"{row['replicas']:,}",
                          row["weight_dtype"], row["kv_dtype"], f"{row['concurrency']:,}", _time(row["ttft_seconds"]),
                          _time(row[f"ttft{pct_key}_seconds"]), _time(row["tpot_seconds"]), _time(tpot_pct),
                          f"{row['output_tokens_per_second_per_gpu']:,.0f}",
                          f"{row['output_tokens_per_second_all_replicas']:,.0f}", _gb(row["total_bytes"]))
        out.append(table)
        why = why_pipeline_first(result, rows)
        if why:
            out.append(Text(why))
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


def why_pipeline_first(result: InferenceSearchResult, rows: list[dict[str, Any]]) -> str | None:
    """When the best layout pipelines (pp > 1), the numbers that put it ahead of the best pp = 1 layout:
    requests in flight per GPU (KV memory), the time per decode step in TP all-reduces, and the decode
    round's pipeline bubble; None when the best layout does not pipeline or no pp = 1 layout is feasible."""
    if not rows or rows[0]["pp"] == 1 or rows[0]["rank"] != 1:
        return None
    c = result.candidates
    best = int(result.ranked[0])
    flat = result.ranked[c.pp[result.ranked] == 1]
    if flat.size == 0:
        return f"pp {rows[0]['pp']} ranks first: no layout without pipelining is feasible here."
    other = int(flat[0])
    s = result.serving()
    it = result.estimate.times.iteration
    gpus = c.tp * c.pp

    def per_gpu(i: int) -> float:
        return float(result.estimate.memory.concurrency[i] / gpus[i])

    gain = float(s.output_tokens_per_second_per_gpu[best] / s.output_tokens_per_second_per_gpu[other]) - 1
    return (f"why pp {int(c.pp[best])} ranks first: {gain:+.0%} tokens/s per GPU over the best pp = 1 layout "
            f"(tp {int(c.tp[other])}, {float(s.output_tokens_per_second_per_gpu[other]):,.0f}): "
            f"{per_gpu(best):,.1f} vs {per_gpu(other):,.1f} sequences in flight per GPU; TP all-reduces "
            f"{_time(float(it.tp_comm_seconds[best]))} vs {_time(float(it.tp_comm_seconds[other]))} per iteration; "
            f"the pipeline's iteration takes {_time(float(it.traversal_seconds[best]))} to cross all stages. "
            "(Every published serving deployment in planner's reference cases runs tp alone within a node.)")


def plot_search(result: InferenceSearchResult, path: str, title: str) -> None:
    from planner.report.plots import plot_latency_vs_throughput

    s = result.serving()
    plot_latency_vs_throughput(
        path, tpot_seconds=s.tpot_seconds, tokens_per_second_per_gpu=s.output_tokens_per_second_per_gpu,
        feasible=np.flatnonzero(result.feasible), front=result.pareto, best=int(result.ranked[0]),
        tpot_max_seconds=result.space.tpot_max_seconds, title=title,
        others=np.flatnonzero(result.estimate.memory.fits & ~result.feasible),
    )
