"""Steady state of a continuously batched engine (in-flight batching with chunked prefill).

The engine runs scheduler iterations back to back. Each iteration carries one decode token of every
running sequence plus prefill tokens of newly admitted prompts, at most `max_batched_tokens` in all
(vLLM's max_num_batched_tokens, TensorRT-LLM's max_num_tokens): a prompt longer than the room the
decodes leave is split into chunks over several iterations (Sarathi-Serve, Agrawal et al. OSDI 2024;
vLLM chunked prefill). Two loads:

- closed loop: `concurrency` clients, each sending its next request when the last one finished
  (benchmark tools' --concurrency, NIM/GenAI-Perf concurrency sweeps);
- open loop: requests arrive at `request_rate` per second (Poisson), as vLLM's benchmark_serving
  --request-rate sends them.

Notation: n decoding sequences (time average), lambda requests/s per replica, t(n, p) the iteration time
with n decode tokens and p prefill tokens (`IterationCost`), t_p the seconds one prompt adds to the
iterations that prefill it, rho = lambda t_p the share of engine time spent prefilling.

- TPOT: a decoding sequence's iterations, t(1 + n_seen, 0) / (1 - rho_seen): the decode work with it
  and the n_seen others, stretched by the others' prefill chunks the iterations also carry.
  TPOT p90/p99: the prompts per iteration are Poisson, so an iteration's time varies;
  a request's TPOT is the mean over its O - 1 iterations (central limit theorem).
- TTFT: the residual of the running iteration (open loop: uniform, mean T/2; closed loop: a client
  resends as its answer leaves, just after the next iteration began: all of T), the wait for prefill work queued
  ahead (M/D/1, planner.serving.queueing, in wall time: while a backlog drains each iteration spends
  a share phi of its time on prefill), then the iterations of its own prompt while the others decode.
- Little's law closes the loop: n = lambda (O - 1) TPOT, and in a closed loop c = lambda (TTFT +
  (O - 1) TPOT). An arrival sees the others: in a closed loop the time-average state with c - 1
  customers (the arrival theorem of mean value analysis, Reiser & Lavenberg, J. ACM 1980), so the
  queue ahead of it and the decodes beside it are scaled by (c - 1)/c; in an open loop the time
  averages themselves (PASTA, Wolff 1982).

Solved by bisection on n for every candidate at once (numpy arrays, no per-candidate loop).
Formulas and a worked example: docs/inference.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.serving.queueing import md1_mean_wait_seconds, wait_quantile

IterationCost = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""Seconds of one scheduler iteration with `decoding` decode tokens and `prefill_tokens` prompt tokens."""

MIN_PREFILL_ROOM_FRACTION = 0.125
"""Share of the token budget left for prefill however many sequences decode: engines cap the running
batch (vLLM max_num_seqs, TensorRT-LLM max_batch_size) below the budget, so prompts always advance;
with the default 8,192 budget this floor (1,024 tokens) matters only past ~7,000 running sequences."""

BISECTION_STEPS = 32
"""Halvings of the bracket for the number of decoding sequences (relative precision 2^-32)."""

OPEN_LOOP_BRACKET_FLOOR = 1e-15
"""Bottom of the open loop's geometric bracket, as a share of its top."""

PERCENTILES = (50, 90, 99)
Z_SCORES = {50: 0.0, 90: 1.2815515655446004, 99: 2.3263478740408408}  # standard normal quantiles


@dataclass(frozen=True)
class SteadyState:
    """The steady state of each candidate (arrays); seconds unless named otherwise.

    stable: False where the load exceeds what the engine can serve (open loop: the rate is above the
    largest sustainable one); its latencies are inf.
    """

    request_rate: np.ndarray  # requests/s per replica
    in_flight: np.ndarray  # requests in the system (waiting, prefilling or decoding), time average
    decoding: np.ndarray  # sequences decoding, time average
    prefill_utilization: np.ndarray  # rho: share of engine time spent on prefill
    prefill_chunks: np.ndarray  # iterations one prompt's prefill spans
    iteration_seconds: np.ndarray  # mean iteration
    prefill_tokens_per_iteration: np.ndarray
    queue_wait_seconds: np.ndarray  # mean wait for the prefill work ahead (wall time)
    residual_seconds: np.ndarray  # mean wait for the running iteration to end
    prompt_seconds: np.ndarray  # own prompt's iterations, and the request's host-side first-token latency
    ttft_seconds: np.ndarray  # mean
    ttft_percentile_seconds: dict[int, np.ndarray]
    tpot_seconds: np.ndarray  # mean
    tpot_percentile_seconds: dict[int, np.ndarray]
    stable: np.ndarray


def _terms_inner(cost: IterationCost, n: np.ndarray, closed: np.ndarray, c: np.ndarray, s: np.ndarray,
           o: np.ndarray, budget: np.ndarray, rho_o1: np.ndarray, first: float) -> dict[str, np.ndarray]:
    """Every figure of the steady state with n sequences decoding (the bisection's variable)."""
    seen_share = np.where(closed, (c - 1) / np.maximum(c, 1), 1.0)  # arrival theorem / PASTA
    n_seen = n * seen_share
    room = np.maximum(budget - n_seen, MIN_PREFILL_ROOM_FRACTION * budget)
    chunks = np.ceil(s / room)
    chunk = s / chunks
    t0 = cost(n_seen, np.zeros_like(n_seen))
    t_chunk = cost(n_seen, chunk)
    t_room = cost(n_seen, room)
    t_self = cost(1 + n_seen, np.zeros_like(n_seen))
    decodes = o > 1

    def arrivals(t_p: np.ndarray) -> np.ndarray:
        # n = lambda (O - 1) TPOT with TPOT = t_self / (1 - rho_seen), rho_seen = lambda t_p x seen_share
        return np.asarray(np.where(decodes, n / np.maximum((o - 1) * t_self + n * t_p * seen_share, 1e-300),
                                   rho_o1 / np.maximum(t_p, 1e-300)))

    # Seconds one prompt adds to the iterations: its chunks' share of what prefill adds to a decode iteration.
    # Alone in an iteration a chunk's compute hides partly behind the decodes' weight reads; but the
    # prompts of an iteration share that slack, so each pays its share of what all of them add together:
    # the iteration's prefill tokens P (lambda T s, from the single-chunk estimate, which overstates it)
    # cost (t(n, P) - t0) / P per token, at least the single chunk's rate.
    t_p = chunks * np.maximum(t_chunk - t0, 0.0)
    lam_alone = arrivals(t_p)
    shared = np.clip(lam_alone * t0 / np.maximum(1 - lam_alone * t_p, 1e-300) * s, chunk, np.maximum(room, chunk))
    t_p = np.maximum(t_p, s * np.maximum(cost(n_seen, shared) - t0, 0.0) / shared)
    lam = arrivals(t_p)
    rho = lam * t_p
    rho_seen = rho * seen_share
    stable = rho < 1
    tpot = np.where(stable, t_self / np.maximum(1 - rho_seen, 1e-300), np.inf)
    iteration = np.where(stable, t0 / np.maximum(1 - rho, 1e-300), np.inf)
    busy = np.where(closed, (c > 1).astype(float), 1.0)  # open loop: set below from the occupancy
    phi = np.maximum(t_room - t0, 1e-300) / t_room  # prefill share of an iteration while a backlog drains
    wait = md1_mean_wait_seconds(rho_seen, t_p) / phi
    prompt = chunks * t_chunk + first
    e2e_no_residual = wait + prompt + (o - 1) * tpot
    occupancy = lam * e2e_no_residual  # requests in the system, residual aside (open loop)
    busy = np.where(closed, busy, 1 - np.exp(-np.where(stable, occupancy, 0.0)))
    # open loop: an arrival lands anywhere in the running iteration (mean T/2); closed loop: a client resends
    # as its response leaves, just after the next iteration began, and waits all of it
    residual = busy * iteration * np.where(closed, 1.0, 0.5)
    ttft = residual + wait + prompt
    return {
        "lam": lam, "rho": rho, "rho_seen": rho_seen, "stable": stable, "chunks": chunks, "t_chunk": t_chunk,
        "t0": t0, "tpot": tpot, "iteration": iteration, "busy": busy, "wait": wait, "prompt": prompt,
        "residual": residual, "ttft": ttft, "in_flight": lam * (ttft + (o - 1) * tpot), "seen_share": seen_share,
    }


def _terms(*args: object) -> dict[str, np.ndarray]:
    """`_terms_inner` with the inf and nan of overloaded candidates left quiet (they are masked as unstable)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return _terms_inner(*args)  # type: ignore[arg-type]


def steady_state(cost: IterationCost, *, concurrency: np.ndarray, request_rate: np.ndarray, input_len: np.ndarray,
                 output_len: np.ndarray, max_batched_tokens: np.ndarray,
                 first_token_seconds: float = 0.0) -> SteadyState:
    """The steady state at `concurrency` clients (where request_rate is 0) or at `request_rate` requests/s.
    first_token_seconds: host-side latency of a request before its first token, beyond its iterations."""
    c = np.asarray(concurrency, dtype=float)
    rate = np.asarray(request_rate, dtype=float)
    s = np.asarray(input_len, dtype=float)
    o = np.asarray(output_len, dtype=float)
    budget = np.asarray(max_batched_tokens, dtype=float)
    shape = np.broadcast_shapes(c.shape, rate.shape, s.shape, o.shape, budget.shape)
    c, rate, s, o, budget = (np.broadcast_to(a, shape) for a in (c, rate, s, o, budget))
    closed = rate <= 0
    # the bracket: n in [0, c] in a closed loop; in an open loop up to the budget (more cannot decode at once);
    # O = 1 (nothing decodes): the variable is rho itself, in [0, 1)
    decodes = o > 1
    hi = np.where(closed, c, budget)
    lo = np.zeros(shape)
    hi_v = np.where(decodes, hi, 1.0)

    def excess(v: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        n = np.where(decodes, v, 0.0)
        t = _terms(cost, n, closed, c, s, o, budget, np.where(decodes, 0.0, v), first_token_seconds)
        return np.where(closed, np.where(t["stable"], t["in_flight"], np.inf) - c, t["lam"] - rate), t

    # open loop: servable only where the most the bracket allows (budget-many decoding) reaches the rate
    reached = closed | (excess(hi_v)[0] >= 0)
    # open loop: geometric bisection from 1e-15 of the bracket (a trickle of requests decodes ~1e-4 sequences)
    lo = np.where(closed, lo, hi_v * OPEN_LOOP_BRACKET_FLOOR)
    for _ in range(BISECTION_STEPS):
        mid = np.where(closed, (lo + hi_v) / 2, np.sqrt(lo * hi_v))
        over = excess(mid)[0] > 0
        hi_v = np.where(over, mid, hi_v)
        lo = np.where(over, lo, mid)
    v = np.where(closed, lo, lo)
    _, t = excess(v)
    stable = t["stable"] & reached
    inf = np.full(shape, np.inf)
    n = np.where(decodes, v, 0.0)
    ttft = np.where(stable, t["ttft"], inf)
    tpot = np.where(stable, t["tpot"], inf)
    uniform = np.where(closed, 0.0, t["busy"])  # closed loop: the residual is the whole iteration, fixed
    fixed = np.where(closed, t["residual"], 0.0)
    quantiles = {
        q: np.where(stable, t["prompt"] + fixed + wait_quantile(q / 100, t["iteration"], uniform, t["rho_seen"],
                                                                 t["wait"]), inf)
        for q in PERCENTILES
    }
    # TPOT spread: the others' prompt chunks per iteration ~ Poisson(lambda_seen T chunks), each adding
    # (t_chunk - t0)
    per_chunk = np.maximum(t["t_chunk"] - t["t0"], 0.0)
    variance = t["lam"] * t["seen_share"] * t["iteration"] * t["chunks"] * per_chunk**2
    sigma = np.sqrt(np.where(stable, variance, 0.0) / np.maximum(o - 1, 1))
    tpot_q = {q: np.where(stable, t["tpot"] + Z_SCORES[q] * sigma, inf) for q in PERCENTILES}
    lam = np.where(closed | stable, t["lam"], rate)
    return SteadyState(
        request_rate=lam,
        in_flight=np.where(stable, t["in_flight"], inf),
        decoding=n,
        prefill_utilization=t["rho"],
        prefill_chunks=t["chunks"],
        iteration_seconds=np.where(stable, t["iteration"], inf),
        prefill_tokens_per_iteration=np.where(stable, t["lam"] * t["iteration"] * s, inf),
        queue_wait_seconds=np.where(stable, t["wait"], inf),
        residual_seconds=np.where(stable, t["residual"], inf),
        prompt_seconds=t["prompt"],
        ttft_seconds=ttft,
        ttft_percentile_seconds=quantiles,
        tpot_seconds=tpot,
        tpot_percentile_seconds=tpot_q,
        stable=stable,
    )
