"""Plots with matplotlib (the optional `plot` extra), imported only when a plot is asked for."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from planner.errors import PlannerError

PLOT_SUFFIXES = (".png", ".svg")


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlannerError("--plot needs matplotlib; install it with: pip install 'planner[plot]'") from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _finish(fig: Any, ax: Any, path: Path, title: str, xlabel: str, ylabel: str) -> None:
    """Labels, grid and legend shared by every plot, then the file."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as err:
        raise PlannerError(f"cannot write plot: {err.strerror or err}", source=str(path)) from None


def check_plot_path(path: str | Path) -> Path:
    """The path, if its suffix is one we can write (checked before any work is done)."""
    p = Path(path)
    if p.suffix.lower() not in PLOT_SUFFIXES:
        raise PlannerError(f"plot file '{p}' must end in {' or '.join(PLOT_SUFFIXES)}")
    folder = p.parent
    try:  # checked before the search, else the whole search runs before the write fails
        what = None if stat.S_ISDIR(os.stat(folder).st_mode) else "is not a folder"
    except (FileNotFoundError, NotADirectoryError):
        what = "does not exist"
    except OSError as err:  # a name longer than the file system allows, a folder we may not search
        what = f"cannot be read ({err.strerror or err})"
    except ValueError:  # os.stat refuses a NUL byte (the command line cannot pass one; a caller in Python can)
        what = "is not a path (it holds a NUL byte)"
    if what is not None:
        raise PlannerError(f"--plot {p}: folder '{folder}' {what}; give a path in an existing folder")
    return p


def plot_throughput_vs_memory(
    path: str | Path,
    *,
    peak_bytes: np.ndarray,
    tokens_per_second: np.ndarray,
    front: np.ndarray,
    winner: int | None,
    capacity_bytes: float,
    usable_bytes: float,
    title: str,
) -> Path:
    """Scatter every layout (peak memory per GPU vs tokens/s), draw the Pareto front, mark the winner.

    `front` and `winner` are positions in the arrays. Returns the path written.
    """
    p = check_plot_path(path)
    plt = _pyplot()
    gb = np.asarray(peak_bytes, dtype=float) / 2**30
    rate = np.asarray(tokens_per_second, dtype=float)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    try:
        ax.scatter(gb, rate, s=6, alpha=0.35, color="tab:blue", linewidths=0, label=f"feasible layouts ({gb.size:,})")
        if front.size:
            order = front[np.argsort(gb[front])]
            ax.step(gb[order], rate[order], where="post", color="tab:orange", linewidth=1.5)
            ax.scatter(gb[order], rate[order], s=18, color="tab:orange", zorder=3, label=f"Pareto front ({front.size})")
        if winner is not None:
            ax.scatter([gb[winner]], [rate[winner]], marker="*", s=220, color="tab:red", edgecolors="black",
                       zorder=4, label="best")
        ax.axvline(usable_bytes / 2**30, color="gray", linestyle="--", linewidth=1, label="usable memory")
        ax.axvline(capacity_bytes / 2**30, color="black", linestyle=":", linewidth=1, label="capacity")
        _finish(fig, ax, p, title, "peak memory per GPU (GiB)", "throughput (tokens/s)")
    finally:
        plt.close(fig)
    return p


def plot_latency_vs_throughput(
    path: str | Path,
    *,
    tpot_seconds: np.ndarray,
    tokens_per_second_per_gpu: np.ndarray,
    feasible: np.ndarray,
    front: np.ndarray,
    best: int | None,
    tpot_max_seconds: float | None,
    title: str,
    others: np.ndarray | None = None,
) -> Path:
    """Serving layouts as output tokens/s per GPU against TPOT: the feasible ones, the latency-throughput
    front as a staircase, the best (most tokens/s per GPU) marked, --tpot-max as a vertical line, and
    `others` (those that fit in memory but miss a latency limit) in grey.

    `feasible`, `front`, `others` and `best` are positions in the arrays. Returns the path written.
    """
    p = check_plot_path(path)
    plt = _pyplot()
    ms = np.asarray(tpot_seconds, dtype=float) * 1e3
    rate = np.asarray(tokens_per_second_per_gpu, dtype=float)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    try:
        if others is not None and others.size:
            ax.scatter(ms[others], rate[others], s=8, alpha=0.3, color="tab:gray", linewidths=0,
                       label=f"over a latency limit ({others.size:,})")
        ax.scatter(ms[feasible], rate[feasible], s=8, alpha=0.45, color="tab:blue", linewidths=0,
                   label=f"feasible ({feasible.size:,})")
        if front.size:
            ax.step(ms[front], rate[front], where="post", color="tab:orange", linewidth=1.5)
            ax.scatter(ms[front], rate[front], s=18, color="tab:orange", zorder=3, label=f"front ({front.size})")
        if best is not None:
            ax.scatter([ms[best]], [rate[best]], marker="*", s=220, color="tab:red", edgecolors="black", zorder=4,
                       label="best (tokens/s per GPU)")
        if tpot_max_seconds is not None:
            ax.axvline(tpot_max_seconds * 1e3, color="gray", linestyle="--", linewidth=1, label="--tpot-max")
        _finish(fig, ax, p, title, "TPOT (ms)", "output tokens/s per GPU")
    finally:
        plt.close(fig)
    return p
