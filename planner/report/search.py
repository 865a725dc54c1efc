"""`planner search` output as data: the JSON document, the CSV columns, the table rows.

Pure: these functions return dicts, strings and rich renderables; the CLI prints them. rich is only
imported by `tables()` (through planner.report.tables), so JSON and CSV output never load it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.search.engine import NearMiss, SearchResult
from planner.search.rank import Selection, TrainingCost, training_cost
from planner.specs.engine import engine_profile
from planner.specs.layout import RECOMPUTE_NAMES
from planner.training.estimate import MFU_PLAUSIBILITY_MARGIN, estimate, estimate_many
from planner.training.time import engine_overlaps_tp


@dataclass(frozen=True)
class SearchView:
    """What to show of a search: the ranking, the candidates shown, and the cost of training if asked."""

    result: SearchResult
    objective: str
    selection: Selection  # the ranking and the positions shown (top K, or the Pareto front)
    pareto: bool
    cost: TrainingCost | None  # over all of result.layouts, when --tokens is given
    seconds: float  # wall time of the search (grid, rules, cost model, ranking)

    @property
    def order(self) -> np.ndarray:
        return self.selection.order

    @property
    def shown(self) -> np.ndarray:
        return self.selection.shown

    @property
    def ranks(self) -> np.ndarray:
        return self.selection.ranks

    @property
    def winner(self) -> int | None:
        return self.selection.winner


def cost_over(result: SearchResult, tokens: float | None, price: float | None) -> TrainingCost | None:
    if tokens is None:
        return None
    return training_cost(tokens, result.results.tokens_per_second, result.layouts.gpus, price)


def _cost_json(cost: TrainingCost, pos: int) -> dict[str, Any]:
    return {
        "tokens": cost.tokens,
        "hours": float(cost.hours[pos]),
        "gpu_hours": float(cost.gpu_hours[pos]),
        "price_per_gpu_hour_usd": cost.price_per_gpu_hour_usd,
        "dollars": None if cost.dollars is None else float(cost.dollars[pos]),
    }


def candidate_json(result: SearchResult, pos: int) -> dict[str, Any]:
    """`planner estimate`'s JSON for the candidate at `pos` (the same function, so the same numbers)."""
    layout = result.layout(pos)
    return estimate(result.model, result.hardware, layout, headroom=result.headroom).to_json()


def _near_miss_json(miss: NearMiss) -> dict[str, Any]:
    data = miss.estimate.to_json()
    data["diagnosis"] = miss.diagnosis.to_json()
    data["suggestions"] = [s.to_json() for s in miss.suggestions]
    return data


def _relaxed_json(found: SearchResult | None, field: str) -> dict[str, Any] | None:
    if found is None:
        return None
    from planner.search.rank import rank

    best = int(rank(found.layouts, found.results, "throughput", found.fits)[0])
    return {field: getattr(found.problem, field), "feasible": found.feasible, "best": candidate_json(found, best)}


def to_json(view: SearchView, *, misses: list[NearMiss] | None = None,
            more_gpus: SearchResult | None = None, shorter_seq: SearchResult | None = None) -> dict[str, Any]:
    """{"evaluated", "feasible", "rejected", "candidates"} plus context; candidates best first, each with
    the keys of `planner estimate --format json` (and "rank", and "cost" when --tokens is given)."""
    r = view.result
    shown = view.shown.tolist()
    estimates = estimate_many(r.model, r.hardware, [r.layout(pos) for pos in shown], headroom=r.headroom)
    candidates = []
    for pos, est in zip(shown, estimates, strict=True):
        data = est.to_json()
        data["rank"] = int(view.ranks[pos])
        if view.cost is not None:
            data["cost"] = _cost_json(view.cost, pos)
        candidates.append(data)
    doc: dict[str, Any] = {
        "evaluated": r.evaluated,
        "feasible": r.feasible,
        "rejected": dict(r.rejected),
        "candidates": candidates,
        "costed": r.costed,
        "objective": view.objective,
        "pareto": view.pareto,
        "problem": {"gpus": r.problem.gpus, "global_batch": r.problem.global_batch, "seq_len": r.problem.seq_len,
                    "dtype": r.problem.dtype, "grad_dtype": r.problem.grad_dtype, "optimizer": r.problem.optimizer,
                    "flash_attention": r.problem.flash_attention,
                    "overlap_grad_reduce": r.problem.overlap_grad_reduce,
                    "overlap_tp_comm": r.problem.overlap_tp_comm, "engine": r.problem.engine,
                    "compile": r.problem.compile, "optimizer_state_dtype": r.problem.optimizer_state_dtype,
                    "master_weights_dtype": r.problem.master_weights_dtype, "schedule": r.problem.schedule,
                    "moe_dispatcher": r.problem.moe_dispatcher, "moe_ep_overlap": r.problem.moe_ep_overlap,
                    "moe_delay_wgrad": r.problem.moe_delay_wgrad, "moe_fused_mlp": r.problem.moe_fused_mlp,
                    "moe_load_imbalance": r.problem.moe_load_imbalance,
                    "headroom": r.headroom},
        "seconds": {"search": view.seconds, "grid": r.grid_seconds, "evaluate": r.evaluate_seconds},
    }
    if r.model.moe is not None:
        doc["moe"] = {"dispatcher": r.problem.moe_dispatcher, "ep_overlap": r.problem.moe_ep_overlap,
                      "assumed": moe_assumption(view)}
    if r.feasible == 0:
        doc["closest"] = [_near_miss_json(m) for m in (misses or [])]
        doc["fewest_gpus"] = _relaxed_json(more_gpus, "gpus")
        doc["longest_seq_len"] = _relaxed_json(shorter_seq, "seq_len")
    return doc


CSV_LAYOUT = ("tp", "pp", "cp", "dp", "etp", "ep", "zero", "sequence_parallel", "recompute", "micro_batch", "interleave")
CSV_RESULTS = (
    "peak_bytes", "peak_stage", "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
    "other_bytes", "step_seconds", "compute_seconds", "communication_seconds", "tp_comm_seconds", "cp_comm_seconds",
    "ep_comm_seconds", "pp_comm_seconds", "dp_comm_seconds", "bubble_seconds",
    "host_seconds", "optimizer_seconds", "recompute_seconds", "tokens_per_second", "model_tflops_per_gpu",
    "hardware_tflops_per_gpu", "mfu", "hfu", "implausible_mfu",
)


def csv_columns(view: SearchView, rows: np.ndarray) -> dict[str, np.ndarray]:
    """One column per field, one entry per position in `rows` (in that order), taken as whole arrays."""
    lay, res = view.result.layouts, view.result.results
    cols: dict[str, np.ndarray] = {"rank": view.ranks[rows]}
    for name in CSV_LAYOUT:
        cols[name] = getattr(lay, name)[rows]
    cols["recompute"] = np.array([RECOMPUTE_NAMES[c] for c in sorted(RECOMPUTE_NAMES)])[cols["recompute"]]
    cols["num_micro_batches"] = lay.num_micro_batches[rows]
    for name in CSV_RESULTS:
        cols[name] = getattr(res, name)[rows]
    if view.cost is not None:
        cols["train_hours"] = view.cost.hours[rows]
        if view.cost.dollars is not None:
            cols["train_dollars"] = view.cost.dollars[rows]
    return cols


# Table -----------------------------------------------------------------------------------------------
def layout_label(layout: Any) -> str:
    """'tp 8 pp 16 cp 1 dp 64 ZeRO 1 SP recompute full mb 1 v 1' for a Layout ('... dp 64 etp 1 ep 8 ...' for
    expert parallelism, etp shown where it is not tp)."""
    ep = f" ep {layout.ep}" if layout.ep > 1 else ""
    if layout.expert_tp != layout.tp:
        ep = f" etp {layout.expert_tp}{ep}"
    sp = " SP" if layout.sequence_parallel else ""
    return (f"tp {layout.tp} pp {layout.pp} cp {layout.cp} dp {layout.dp}{ep} ZeRO {layout.zero}{sp} "
            f"recompute {layout.recompute} mb {layout.micro_batch} v {layout.interleave}")


def moe_assumption(view: SearchView) -> str:
    """The MoE settings every candidate of the search is costed with, in words."""
    p = view.result.problem
    if p.moe_ep_overlap:
        overlap = "overlapped with compute"
    elif p.schedule == "dualpipe":
        overlap = "overlapped with compute by the dualpipe schedule"
    else:
        overlap = "not overlapped"
    if p.resolved_moe_delay_wgrad:
        overlap += (", the experts' weight gradients after the dispatch's backward" if p.paired_overlap
                    else ", the dispatch's backward beside the experts' weight gradients")
    fused = ", experts in the fused grouped MLP" if p.moe_fused_mlp else ""
    load = "" if p.moe_load_imbalance == 1.0 else f", the busiest rank at {p.moe_load_imbalance:g}x the balanced load"
    return f"{p.moe_dispatcher} token dispatcher, expert all-to-all {overlap}{fused}{load}"


def _headline(view: SearchView, model_id: str, hardware_id: str) -> str:
    p = view.result.problem
    what = "Pareto front (step time vs peak memory)" if view.pareto else f"top {view.shown.size}"
    moe = f", {moe_assumption(view)}" if view.result.model.moe is not None else ""
    return (f"{model_id} on {p.gpus:,} x {hardware_id}: global batch {p.global_batch:,} x {p.seq_len:,} tokens, "
            f"{p.dtype}{moe}, {what} by {view.objective}")


def summary_lines(view: SearchView) -> list[str]:
    """The summary line (evaluated, feasible, time) and the rejection counts by reason."""
    from planner.report.tables import human_bytes

    r = view.result
    rate = r.costed / r.evaluate_seconds if r.evaluate_seconds > 0 else float("inf")
    lines = [  # two lines, so that neither is wider than a 160-column terminal
        f"Evaluated {r.evaluated:,} layouts ({r.costed:,} passed the rules and were costed); {r.feasible:,} fit in "
        f"{human_bytes(r.results.usable_bytes)} of {human_bytes(r.results.capacity_bytes)} per GPU "
        f"(headroom {r.headroom:.0%}).",
        f"Search took {view.seconds:.3f} s (cost model {r.evaluate_seconds:.3f} s, {rate:,.0f} layouts/s).",
    ]
    if r.rejected:
        lines.append("Rejected: " + ", ".join(f"{code} {n:,}" for code, n in r.rejected.items()))
    if r.problem.overlap_tp_comm and not engine_overlaps_tp(r.model, engine_profile(r.problem.engine)):
        lines.append(f"TP: {r.problem.engine} turns TP comm overlap off for models with multi-latent attention "
                     "(Megatron-Core's TELinear): the TP collectives are counted exposed.")
    elif r.problem.overlap_tp_comm:
        lines.append(f"TP: layouts with SP overlap TP collectives with the GEMMs ({r.problem.engine}'s TP comm "
                     "overlap, Megatron --tp-comm-overlap); --no-tp-comm-overlap to search without.")
    if r.model.moe is not None:
        lines.append(f"MoE: every layout assumes the {moe_assumption(view)} (engine {r.problem.engine}; "
                     "change with --moe-dispatcher, --moe-ep-overlap).")
    return lines


def candidates_table(view: SearchView, model_id: str, hardware_id: str) -> Any:
    from planner.report.tables import (
        human_count,
        human_seconds,
        memory_bar,
        percent,
        simple_table,
    )

    r = view.result
    lay, res = r.layouts, r.results
    moe = bool((lay.ep > 1).any()) or r.model.moe is not None
    headers = ["#", "tp", "pp", "cp", "dp"] + (["etp", "ep"] if moe else []) + [
        "zero", "sp", "recompute", "mb", "v", "memory per GPU", "step", "tokens/s", "MFU", "bubble", "comm"]
    if view.cost is not None:
        headers += ["hours"] + (["cost"] if view.cost.dollars is not None else [])
    rows = []
    for pos in view.shown.tolist():
        step = float(res.step_seconds[pos])
        row: list[Any] = [view.ranks[pos], lay.tp[pos], lay.pp[pos], lay.cp[pos], lay.dp[pos]]
        row += [lay.etp[pos], lay.ep[pos]] if moe else []
        row += [
            lay.zero[pos], "on" if lay.sequence_parallel[pos] else "-", RECOMPUTE_NAMES[int(lay.recompute[pos])],
            lay.micro_batch[pos], lay.interleave[pos],
            memory_bar(float(res.peak_bytes[pos]), res.capacity_bytes, res.usable_bytes),
            human_seconds(step), human_count(float(res.tokens_per_second[pos])),
            percent(float(res.mfu[pos])) + (" !" if bool(res.implausible_mfu[pos]) else ""),
            percent(float(res.bubble_seconds[pos]) / step), percent(float(res.communication_seconds[pos]) / step),
        ]
        if view.cost is not None:
            row.append(f"{float(view.cost.hours[pos]):,.0f} h")
            if view.cost.dollars is not None:
                row.append(f"${human_count(float(view.cost.dollars[pos]))}")
        rows.append(row)
    right = {h for h in headers if h not in ("recompute", "memory per GPU", "sp")}
    caption = ("bubble, comm: share of the step lost to the pipeline bubble and to communication not hidden "
               "behind compute. v: interleaved stages per rank."
               + (" etp: expert tensor parallelism (1 with tp > 1: parallel folding, EP across tp x dp)." if moe else "")
               + " A layout equal in degrees, step time and memory "
               "to a better one shares its rank and is not repeated.")
    if bool(res.implausible_mfu[view.shown].any()):
        best = float(np.nanmax(res.best_published_mfu[view.shown]))
        caption += (f" MFU !: more than {MFU_PLAUSIBILITY_MARGIN:.0%} above the best published MFU for this chip and "
                    f"dtype ({best:.0%}); implausible, the estimate probably misses a cost.")
    if view.cost is not None:
        price = view.cost.price_per_gpu_hour_usd
        caption += (f" Train hours for {view.cost.tokens:.3g} tokens"
                    + (f" at ${price:g} per GPU-hour." if price is not None else "; give --price-per-gpu-hour for dollars."))
    return simple_table(_headline(view, model_id, hardware_id), headers, rows, right=sorted(right), caption=caption)


def nothing_fits_lines(view: SearchView, misses: list[NearMiss], more_gpus: SearchResult | None,
                       shorter_seq: SearchResult | None) -> list[str]:
    """What to change when no layout fits: the closest candidates with verified fixes, then bigger moves."""
    from planner.report.tables import human_bytes, human_seconds

    r = view.result
    lines = [f"Nothing fits: all {r.costed:,} layouts that pass the rules need more than "
             f"{human_bytes(r.results.usable_bytes)} per GPU. Closest candidates:"]
    for n, miss in enumerate(misses, 1):
        d = miss.diagnosis
        lines.append(f"  {n}. {layout_label(miss.estimate.layout)}: peak {human_bytes(d.peak_bytes)} on stage "
                     f"{d.stage}, {human_bytes(d.over_bytes)} over; largest term {d.dominant} "
                     f"({human_bytes(d.dominant_bytes)})")
        if not miss.suggestions:
            lines.append("     no single change of this layout fits")
        for s in miss.suggestions:
            lines.append(f"     -> {s.description}: peak {human_bytes(s.peak_bytes)}, step "
                         f"{human_seconds(s.step_seconds)} ({s.step_change:+.0%})")
    for found, what in ((more_gpus, "gpus"), (shorter_seq, "seq_len")):
        if found is None:
            continue
        from planner.search.rank import rank

        best = int(rank(found.layouts, found.results, "throughput", found.fits)[0])
        layout = found.layout(best)
        label = f"{found.problem.gpus:,} GPUs" if what == "gpus" else f"seq_len {found.problem.seq_len:,}"
        lines.append(f"With {label}: {found.feasible:,} layouts fit; best {layout_label(layout)}, step "
                     f"{human_seconds(float(found.results.step_seconds[best]))}, peak "
                     f"{human_bytes(float(found.results.peak_bytes[best]))}")
    if more_gpus is None:
        lines.append(f"No layout fits even with {16 * r.problem.gpus:,} GPUs.")
    return lines
