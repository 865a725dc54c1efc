"""Kernel times shared by training and serving: GEMMs on the matmul efficiency curve, memory-bound traffic,
the attention core's work, and which peak each dtype runs at.

Every function broadcasts over numpy arrays. The efficiencies are the hardware profile's (its `efficiency`
block, with a note on how each was chosen); the constants here are properties of the kernels themselves.
"""

from __future__ import annotations

import numpy as np

from planner.specs.hardware import HardwareProfile
from planner.specs.layout import LayoutArrays
from planner.specs.model import ModelSpec

# Flash attention with a causal mask skips the blocks above the diagonal: about half the s x s work
# (Dao 2023, FlashAttention-2, Sec. 3.1.1, "causal masking ... skip ... about 2x speedup").
CAUSAL_WORK_FRACTION = 0.5
# FlashAttention-2's backward runs 5 matmuls against the forward's 2 (it recomputes S and P): 2.5x.
FLASH_BACKWARD_TO_FORWARD = 2.5

def causal_pairs(new_tokens: np.ndarray, window: int = 0) -> np.ndarray:
    """Query-key pairs a causal prefill of `new_tokens` computes (token i sees i tokens, itself
    included; at most `window` under a sliding window): n(n+1)/2, or W(W+1)/2 + (n - W) W."""
    n = np.asarray(new_tokens, dtype=float)
    full: np.ndarray = n * (n + 1) / 2
    if not window:
        return full
    w = float(window)
    return np.asarray(np.where(n <= w, full, w * (w + 1) / 2 + (n - w) * w))


def window_work_fraction(model: ModelSpec, seq_len: np.ndarray) -> np.ndarray:
    """Share of the full causal attention work that the model's layers do, averaged over its layers:
    a sliding-window layer computes causal_pairs(s, window) of the s(s+1)/2 pairs (Mistral v0.1, Gemma 2/3,
    gpt-oss). Flash kernels with a window skip the rest (FlashAttention-2's window_size); 1 without windows."""
    s = np.asarray(seq_len, dtype=float)
    if not model.sliding_window_layers or model.sliding_window_tokens is None:
        return np.ones_like(s)
    ratio = causal_pairs(s, model.sliding_window_tokens) / causal_pairs(s)
    sliding = model.sliding_window_layers / model.num_layers
    return np.asarray(1.0 - sliding + sliding * ratio)


def peak_16bit_flops(hw: HardwareProfile) -> float:
    """Dense bf16 peak (fp16 on chips without bf16, e.g. V100)."""
    peaks = hw.accelerator.peak_flops_per_s
    return peaks.get("bf16", peaks.get("fp16", 0.0))


def gemm_peak_flops(hw: HardwareProfile, lay: LayoutArrays) -> np.ndarray:
    """Peak for the GEMMs: fp8 where the layout trains in fp8 (the attention core stays 16-bit)."""
    return np.where(lay.fp8, hw.accelerator.peak_flops_per_s.get("fp8", np.nan), peak_16bit_flops(hw))


def matmul_seconds(hw: HardwareProfile, flop: np.ndarray, peak: np.ndarray | float) -> np.ndarray:
    """One GEMM of `flop` FLOP at the profile's size-dependent efficiency."""
    curve = hw.efficiency.matmul
    flop = np.asarray(flop, dtype=float)
    efficiency = curve.peak_fraction * flop / (flop + curve.half_saturation_flop)
    return np.where(flop > 0, flop / (peak * np.maximum(efficiency, 1e-12)), 0.0)


def memory_seconds(hw: HardwareProfile, nbytes: np.ndarray) -> np.ndarray:
    bandwidth = hw.accelerator.memory_bandwidth_bytes_per_s * hw.efficiency.memory_bandwidth.fraction
    return np.asarray(nbytes, dtype=float) / bandwidth


