"""Benchmark `planner search`: the whole process, the cost model on the grid alone, and a per-layout loop.

    python benchmarks/bench_search.py                      # the dense case: Llama 3.1 405B on 16,384 H100
    python benchmarks/bench_search.py --case deepseek-v3   # MoE: DeepSeek-V3 on its report's 2,048 H800, fp8
    python benchmarks/bench_search.py --runs 11 --sample 500

Three figures, each the median of several runs:
1. whole process: `python -m planner search ...` in a subprocess, from start to exit (imports included);
2. evaluation alone: the cost model over the search's broadcast grid, as `planner search` runs it
   (`evaluate()` on blocks of structural rows, then the points that pass the rules kept as flat
   arrays), in layouts per second counting only the layouts that pass the rules;
3. a plain Python loop calling `estimate()` once per layout on a random sample of the same layouts,
   in layouts per second, and the ratio of (2) to it.
The whole process is also given as CPU time (user + system), which a busy machine disturbs less than
wall time. Also the import floor (`python -c "import planner.cli.search"`) and the grid + rules time, for context.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

from planner.engines.load import load_hardware, load_model
from planner.search.engine import evaluate_space, first_broken_rule
from planner.search.space import Problem, build_space, flatten
from planner.training.estimate import DEFAULT_HEADROOM, estimate
from planner.training.rules import violations


def median_seconds(fn, runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def child_cpu_seconds(fn, runs: int) -> float:
    """Median user + system CPU time of the child processes `fn` runs (less sensitive to a busy machine)."""
    times = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        fn()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(times)


# The benchmark's cases (docs/performance.md has their targets): the dense one of the search's first issue, and
# DeepSeek-V3 on the cluster of its technical report (arXiv:2412.19437, Sec. 3.1-3.3 and 4.2: 2,048 H800, FP8,
# 15,360 sequences of 4,096 tokens), issue 16's MoE case.
CASES: dict[str, dict[str, object]] = {
    "llama-405b": {"model": "llama-3.1-405b", "hardware": "h100-sxm", "gpus": 16384, "global_batch": 2048,
                   "seq_len": 8192, "dtype": "bf16"},
    "deepseek-v3": {"model": "deepseek-v3", "hardware": "h800", "gpus": 2048, "global_batch": 15360,
                    "seq_len": 4096, "dtype": "fp8"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=sorted(CASES), default="llama-405b",
                        help="preset problem; the options below override its fields")
    parser.add_argument("--model")
    parser.add_argument("--hardware")
    parser.add_argument("--gpus", type=int)
    parser.add_argument("--global-batch", type=int)
    parser.add_argument("--seq-len", type=int)
    parser.add_argument("--dtype", choices=("bf16", "fp16", "fp8"))
    parser.add_argument("--runs", type=int, default=7, help="repetitions per figure (median reported)")
    parser.add_argument("--sample", type=int, default=200, help="layouts in the per-layout estimate() loop")
    args = parser.parse_args()
    for name, value in CASES[args.case].items():
        if getattr(args, name) is None:
            setattr(args, name, value)

    command = [sys.executable, "-m", "planner", "search", "--model", args.model, "--hardware", args.hardware,
               "--gpus", str(args.gpus), "--global-batch", str(args.global_batch), "--seq-len", str(args.seq_len),
               "--dtype", args.dtype]
    env = {**os.environ, "COLUMNS": "160"}

    def whole() -> None:
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)

    def imports() -> None:
        subprocess.run([sys.executable, "-c", "import planner.cli.search"], check=True, env=env)

    model = load_model(args.model).spec
    hw = load_hardware(args.hardware).spec
    problem = Problem(gpus=args.gpus, global_batch=args.global_batch, seq_len=args.seq_len, dtype=args.dtype)

    def grid_and_rules():
        space = build_space(model, problem)
        ok = (first_broken_rule(violations(model, space.grid, problem.gpus), space.shape) < 0) & space.in_space
        return space, np.flatnonzero(ok)

    space, valid = grid_and_rules()
    lay = flatten(space.grid, valid)

    def evaluation():
        with np.errstate(divide="ignore", invalid="ignore"):
            evaluate_space(model, hw, space, valid, headroom=DEFAULT_HEADROOM)

    evaluation()  # warm-up

    sample = np.random.default_rng(0).choice(lay.size, size=min(args.sample, lay.size), replace=False)
    layouts = [lay.to_layout(int(i), dtype=args.dtype) for i in sample]

    def loop() -> None:
        for layout in layouts:
            estimate(model, hw, layout, headroom=DEFAULT_HEADROOM)

    whole()  # warm the file cache
    t_whole, t_whole_min = median_seconds(whole, args.runs)
    cpu_whole = child_cpu_seconds(whole, args.runs)
    t_import, _ = median_seconds(imports, args.runs)
    t_grid, _ = median_seconds(grid_and_rules, args.runs)
    t_eval, t_eval_min = median_seconds(evaluation, args.runs)
    t_loop, _ = median_seconds(loop, max(1, args.runs // 3))

    vec_rate = lay.size / t_eval
    loop_rate = len(layouts) / t_loop
    rows = [
        ("whole process (median / best)", f"{t_whole:.3f} s / {t_whole_min:.3f} s", " ".join(command[1:])),
        ("whole process, CPU time (median)", f"{cpu_whole:.3f} s", "user + system"),
        ("  of which: imports", f"{t_import:.3f} s", "python -c 'import planner.cli.search'"),
        ("grid + rules", f"{t_grid * 1e3:.1f} ms",
         f"{space.size:,} layouts ({space.grid.size:,} grid points), {lay.size:,} pass the rules"),
        ("evaluation alone (median / best)", f"{t_eval * 1e3:.1f} ms / {t_eval_min * 1e3:.1f} ms",
         f"{vec_rate:,.0f} layouts/s (best {lay.size / t_eval_min:,.0f})"),
        ("per-layout estimate() loop", f"{t_loop / len(layouts) * 1e3:.2f} ms/layout", f"{loop_rate:,.0f} layouts/s"),
        ("vectorised / loop", f"{vec_rate / loop_rate:,.0f}x", ""),
    ]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"numpy {np.__version__}; load average {os.getloadavg()[0]:.2f}")
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>24}  {note}")


if __name__ == "__main__":
    main()
