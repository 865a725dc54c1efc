"""Hand-checkable specs shared by the cost-model tests: round hardware numbers and a tiny GPT.

Round hardware: 1 PFLOP/s bf16 (2 fp8), 2 TB/s HBM, 8 GPUs per node on a 400 GB/s (one direction)
fabric with 3 us latency, 50 GB/s per GPU of network with 10 us; efficiencies 0.8 matmul (each GEMM
paying GEMM_FIXED_SECONDS = 7.5 us of peak work, i.e. half saturation at 7.5 GFLOP), 0.7 fp8 matmul,
0.5 attention plateau, 0.9 memory, 0.8 network and, unless given, 0.5 node fabric.
"""

from __future__ import annotations

from planner.specs.hardware import HardwareProfile
from planner.specs.layout import Layout, LayoutArrays
from planner.specs.model import ModelSpec


def round_hw(peaks: dict | None = None, memory_bytes: int = 80 * 10**9,
             intra_node_fraction: float = 0.5) -> HardwareProfile:
    note = "test value"
    return HardwareProfile.model_validate(dict(
        name="round",
        accelerator=dict(name="round", memory_bytes=memory_bytes, memory_bandwidth_bytes_per_s=2e12,
                         peak_flops_per_s=peaks or {"bf16": 1e15, "fp8": 2e15}, source="test"),
        node=dict(gpus_per_node=8, link_kind="nvlink", bandwidth_bytes_per_s=400e9, latency_s=3e-6, source="test"),
        network=dict(kind="infiniband", bandwidth_bytes_per_s=50e9, latency_s=10e-6, source="test"),
        efficiency=dict(matmul=dict(peak_fraction=0.8, note=note),
                        matmul_fp8=dict(fraction=0.7, note=note) if "fp8" in (peaks or {"fp8": 1}) else None,
                        attention=dict(fraction=0.5, note=note), memory_bandwidth=dict(fraction=0.9, note=note),
                        intra_node_link=dict(fraction=intra_node_fraction, note=note),
                        inter_node_link=dict(fraction=0.8, note=note)),
    ))


def tiny(**overrides) -> ModelSpec:
    """A 2-layer GPT: h 64, 4 heads, GeLU MLP of 256, vocab 100, LayerNorm, dropout."""
    fields = dict(name="tiny GPT", num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256,
                  mlp_kind="standard", vocab_size=100, max_seq_len=256, norm_kind="layernorm", dropout=True)
    fields.update(overrides)
    return ModelSpec(**fields)


def lay(**fields) -> LayoutArrays:
    """One layout as arrays; global batch dp x micro-batch and seq 32 unless given."""
    fields.setdefault("global_batch", fields.get("dp", 1) * fields.get("micro_batch", 1))
    fields.setdefault("seq_len", 32)
    return Layout(**fields).to_arrays()


TINY_GEMMS = ((64, 192), (64, 64), (64, 256), (256, 64))  # tiny's (k inputs, n outputs): QKV, out, fc1, fc2


def tiny_gemm_passes(*, operand_bytes: float, peak: float, plateau: float, tokens: int = 32
                     ) -> tuple[float, float, float]:
    """(forward, input gradient, weight gradient) seconds of tiny's four GEMMs on round_hw, by hand: each on the
    roofline max(2 M k n / (peak x plateau), bytes / 1.8e12) + 7.5e-6 / plateau, the forward reading M x k and k x n
    and writing M x n, the input gradient reading M x n and k x n and writing M x k, the weight gradient reading
    M x k and M x n and writing k x n; inputs at operand_bytes, outputs 2 bytes."""
    m, a = tokens, operand_bytes

    def one(flop: float, nbytes: float) -> float:
        return max(flop / (peak * plateau), nbytes / 1.8e12) + 7.5e-6 / plateau

    fwd = dgrad = wgrad = 0.0
    for k, n in TINY_GEMMS:
        flop = 2 * m * k * n
        fwd += one(flop, a * (m * k + k * n) + 2 * m * n)
        dgrad += one(flop, a * (m * n + k * n) + 2 * m * k)
        wgrad += one(flop, a * (m * k + m * n) + 2 * k * n)
    return fwd, dgrad, wgrad
