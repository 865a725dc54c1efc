"""The hardware profile: accelerator, node, network, and achievable efficiencies.

Bandwidths are bytes per second in ONE direction per GPU (datasheets quote
NVLink as a bidirectional total; a profile stores half of it). Peak FLOP/s are
dense (no structured sparsity).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from planner.specs.bounds import Bounded, check

_STRICT = ConfigDict(extra="forbid", frozen=True)

PeakDtype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8", "int4"]


def _number(value: Any) -> Any:
    """A YAML scalar as a number: no true/false, no text, no inf/nan (planner's YAML reader reads `80e9` as
    a number, as YAML 1.2 does)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    if isinstance(value, str):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value}")
    return value


def _whole_number(value: Any) -> Any:
    """A byte count: an integer, or a float with no fraction (`80e9`) read as that integer."""
    value = _number(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"expected a whole number of bytes, got {value} (it has a fractional part)")
        return int(value)
    return value


def _within(kind: str) -> AfterValidator:
    return AfterValidator(lambda value: check(kind, value))


Bytes = Annotated[PositiveInt, BeforeValidator(_whole_number), _within("memory_bytes")]
Bandwidth = Annotated[PositiveFloat, BeforeValidator(_number), _within("bandwidth")]
Flops = Annotated[PositiveFloat, BeforeValidator(_number), _within("flops")]
Latency = Annotated[PositiveFloat, BeforeValidator(_number), _within("latency_s")]
Number = Annotated[float, BeforeValidator(_number)]


def _non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty; say where the figure comes from")
    return value


class PowerLimit(BaseModel):
    """A board power limit below the chip's nominal one, and what it costs the compute-bound kernels.

    Under its power limit the GPU's power governor lowers the SM clock until the board draws no more than the
    limit; a kernel bound by its arithmetic (GEMMs, the flash-attention core) then runs slower in proportion,
    a kernel bound by HBM or a link barely draws enough power to be throttled. `compute_fraction` is that
    slowdown, measured: the sustained throughput of large GEMMs at `watts` over the same chip's at
    `nominal_watts`, where the profile's efficiency plateaus were measured.
    """

    model_config = _STRICT

    watts: Number = Field(gt=0, le=5000, description="Board power limit the GPUs run at, W.")
    nominal_watts: Number = Field(
        gt=0, le=5000,
        description="The chip's nominal board power (datasheet TDP), W: where the efficiency plateaus were measured.",
    )
    compute_fraction: Number = Field(
        gt=0, le=1,
        description="Sustained throughput of compute-bound (tensor-core) kernels at `watts`, as a fraction of the "
        "same chip's at `nominal_watts` (the ratio of their sustained SM clocks).",
    )
    note: str = Field(description="The measurements the fraction comes from.")

    _check_note = field_validator("note")(_non_empty)

    @model_validator(mode="after")
    def _below_nominal(self) -> PowerLimit:
        if self.watts > self.nominal_watts:
            raise ValueError(
                f"watts ({self.watts:g}) is above nominal_watts ({self.nominal_watts:g}); a power_limit block "
                "describes a limit below the chip's nominal power (remove it at the nominal power)"
            )
        return self


class AcceleratorSpec(BaseModel):
    """One accelerator (GPU) as its datasheet describes it."""

    model_config = _STRICT

    name: str = Field(description="Marketing name, e.g. 'NVIDIA H100 SXM5 80GB'.")
    memory_bytes: Bytes = Field(description="Device memory in bytes (GB = 1e9 on datasheets).")
    memory_bandwidth_bytes_per_s: Bandwidth = Field(description="Peak device-memory bandwidth, bytes/s.")
    peak_flops_per_s: dict[PeakDtype, Flops] = Field(
        description="Dense peak FLOP/s (or OP/s for int) per dtype; no sparsity."
    )
    fp8_gemm_any_layout: bool = Field(
        default=False,
        description="The fp8 tensor cores take every operand layout (Blackwell sm100), so an fp8 recipe with "
        "per-tensor scales writes one fp8 copy of a GEMM input and no transposed one (Transformer Engine's "
        "is_non_tn_fp8_gemm_supported); false on Hopper and Ada, whose fp8 GEMMs take only the TN layout.",
    )
    fp8_block_scaling: bool = Field(
        default=False,
        description="The fp8 tensor cores apply a scale per block of 32 elements themselves (the MX formats: "
        "Blackwell's block-scaled MMA), which the mxfp8 recipe needs; false on Hopper and Ada.",
    )
    fused_grouped_mlp: bool = Field(
        default=False,
        description="Transformer Engine's fused grouped MLP for MoE experts runs on this chip (Layout.moe_fused_mlp): "
        "its CuTe DSL grouped-GEMM kernels are built for compute capability 10 only (B200, GB200, B300, GB300; "
        "transformer_engine/pytorch/ops/fused/grouped_mlp.py is_supported); false on Hopper, Ada and AMD.",
    )
    source: str = Field(description="Datasheet or paper the figures come from.")
    power_limit: PowerLimit | None = Field(
        default=None,
        description="The board power limit the GPUs run at where it is below the nominal one (the peaks stay the "
        "datasheet's); null at the nominal power.",
    )

    _check_source = field_validator("source")(_non_empty)

    @field_validator("peak_flops_per_s")
    @classmethod
    def _needs_bf16_or_fp16(cls, value: dict[str, float]) -> dict[str, float]:
        if "bf16" not in value and "fp16" not in value:
            raise ValueError("give at least a bf16 or fp16 peak (dense FLOP/s)")
        return value


class NodeSpec(BaseModel):
    """A node: the GPUs joined by the fast intra-node fabric (one NVLink domain)."""

    model_config = _STRICT

    gpus_per_node: Annotated[int, Bounded("gpus")] = Field(description="GPUs sharing the intra-node fabric (the NVLink/xGMI domain).")
    link_kind: Literal["nvlink", "xgmi", "pcie"] = Field(description="Intra-node interconnect.")
    bandwidth_bytes_per_s: Bandwidth = Field(
        description="Per-GPU intra-node bandwidth, ONE direction (half the datasheet's bidirectional total)."
    )
    latency_s: Latency = Field(description="Per-message latency (alpha) of an intra-node collective step, seconds.")
    source: str = Field(description="Where the bandwidth and latency figures come from.")

    _check_source = field_validator("source")(_non_empty)


class NetworkSpec(BaseModel):
    """The inter-node network (scale-out fabric)."""

    model_config = _STRICT

    kind: Literal["infiniband", "roce", "ethernet"] = Field(description="Scale-out network technology.")
    bandwidth_bytes_per_s: Bandwidth = Field(
        description="Per-GPU inter-node bandwidth, one direction: NICs x link speed / GPUs per node."
    )
    nics_per_node: Annotated[int, Bounded("gpus")] | None = Field(default=None, description="Compute NICs per node (documentation, checked).")
    nic_bits_per_s: Bandwidth | None = Field(default=None, description="Line rate of one NIC in bits/s (checked).")
    latency_s: Latency = Field(description="Per-message latency (alpha) across the network, seconds.")
    source: str = Field(description="Where the figures come from.")

    _check_source = field_validator("source")(_non_empty)

    @model_validator(mode="after")
    def _nic_figures_together(self) -> NetworkSpec:
        if (self.nics_per_node is None) != (self.nic_bits_per_s is None):
            raise ValueError("give both nics_per_node and nic_bits_per_s, or neither")
        return self


class MatmulEfficiency(BaseModel):
    """Achievable fraction of dense peak for 16-bit matrix multiplies, as a saturating curve over GEMM size.

    efficiency(x) = peak_fraction * x / (x + peak * GEMM_FIXED_SECONDS), x = FLOP of one GEMM on one GPU:
    every GEMM pays a fixed time on top of its ideal one (planner/physics/kernels.py, one value for every
    chip). Large training GEMMs sit on the plateau; thin TP shards and small micro-batches fall below it.
    """

    model_config = _STRICT

    peak_fraction: Number = Field(gt=0, le=1, description="Plateau fraction of dense 16-bit peak for large GEMMs.")
    note: str = Field(description="How the values were chosen.")

    _check_note = field_validator("note")(_non_empty)


class Fraction(BaseModel):
    """An achievable fraction of a datasheet peak, with how it was chosen."""

    model_config = _STRICT

    fraction: Number = Field(gt=0, le=1, description="Achievable fraction of the datasheet figure.")
    note: str = Field(description="How the value was chosen.")

    _check_note = field_validator("note")(_non_empty)


class AttentionEfficiency(Fraction):
    """The fused-attention curve of the chip's best kernel: its plateau (fraction of dense 16-bit peak) and,
    where the profile measures them, the key lengths at which the kernel reaches half of it
    (planner/physics/kernels.py attention_efficiency; null takes the Hopper/Ampere values there)."""

    half_saturation_tokens_causal: Number | None = Field(
        default=None, gt=0, le=1e6,
        description="Keys per sequence block at which the causal kernel reaches half its plateau; null: "
        "kernels.ATTENTION_HALF_SATURATION_TOKENS_CAUSAL.",
    )
    half_saturation_tokens_noncausal: Number | None = Field(
        default=None, gt=0, le=1e6,
        description="The same without a mask (ring attention's off-diagonal steps); null: "
        "kernels.ATTENTION_HALF_SATURATION_TOKENS_NONCAUSAL.",
    )


class Fp8AttentionSpeedup(BaseModel):
    """How much faster the chip's fused attention runs with fp8 inputs than with 16-bit ones (Transformer
    Engine's FP8 attention: Megatron --fp8-dot-product-attention), measured on causal forward + backward:
    16-bit time / fp8 time, one row per head dimension, one column per sequence length, for the per-tensor
    scaled kernel (delayed and current scaling) and the MXFP8 one (physics/kernels.py fp8_attention_speedup)."""

    model_config = _STRICT

    head_dims: list[Annotated[int, Field(gt=0, le=1024)]] = Field(
        min_length=1, description="Query/key head dimensions of the rows, increasing.")
    block_tokens: list[Annotated[int, Field(gt=0, le=10_000_000)]] = Field(
        min_length=1, description="Keys per sequence of the columns, increasing.")
    per_tensor: list[list[Annotated[float, Field(gt=0, le=10)]]] | None = Field(
        default=None, description="Per-tensor scaled fp8 (delayed or current scaling): 16-bit / fp8 time.")
    mxfp8: list[list[Annotated[float, Field(gt=0, le=10)]]] | None = Field(
        default=None, description="MXFP8 (a scale per 32 elements): 16-bit / fp8 time; null where the chip has none.")
    note: str = Field(description="The benchmark the ratios come from.")

    _check_note = field_validator("note")(_non_empty)

    @model_validator(mode="after")
    def _shapes(self) -> Fp8AttentionSpeedup:
        for name in ("head_dims", "block_tokens"):
            values = getattr(self, name)
            if any(b <= a for a, b in zip(values, values[1:])):
                raise ValueError(f"{name} must increase")
        if self.per_tensor is None and self.mxfp8 is None:
            raise ValueError("give per_tensor, mxfp8 or both")
        for name in ("per_tensor", "mxfp8"):
            table = getattr(self, name)
            if table is not None and (len(table) != len(self.head_dims)
                                      or any(len(row) != len(self.block_tokens) for row in table)):
                raise ValueError(f"{name} needs one row per head dimension ({len(self.head_dims)}) of one value per "
                                 f"sequence length ({len(self.block_tokens)})")
        return self


X86_HOST_SECONDS_PER_LAUNCH = 13.5e-6
"""CPU time to issue one op and its kernel from an eager PyTorch step (Python, dispatcher, cudaLaunchKernel) on
an x86 DGX host: a torch Linear forward (one GEMM) costs 13.48 us of CPU on a DGX H100 (Intel Xeon Platinum
8480C), against 37.08 us on a GB200's Grace CPU and 33.17 us on a GH200's (NVIDIA/TransformerEngine issue
#2053, 'High CPU overhead on Grace systems', bf16, hidden 2,048, 8,192 tokens; Transformer Engine's Linear
costs 99.66 us there); inside the 5-20 us per launch that Holistic Trace Analysis gives. What a profile
without efficiency.host_launch takes (planner.physics.launch)."""


class HostLaunch(BaseModel):
    """Host (CPU) time to issue one eager framework op and its kernel, on the node's CPUs, with its source."""

    model_config = _STRICT

    seconds: Number = Field(gt=0, le=1e-3, description="CPU seconds per eager op (Python, dispatcher, kernel launch).")
    note: str = Field(description="How the value was chosen.")

    _check_note = field_validator("note")(_non_empty)


class PublishedMfu(BaseModel):
    """The best model-FLOPs utilisation published for this chip, per GEMM dtype (of that dtype's dense peak):
    the ceiling of the plausibility guard (training/estimate.py)."""

    model_config = _STRICT

    bf16: Number | None = Field(default=None, gt=0, le=1, description="Best published bf16/fp16 MFU, of the 16-bit peak.")
    fp8: Number | None = Field(default=None, gt=0, le=1, description="Best published fp8 MFU, of the fp8 peak.")
    fp4: Number | None = Field(default=None, gt=0, le=1, description="Best published NVFP4 MFU, of the fp4 peak.")
    note: str = Field(description="Which runs, with their sources.")

    _check_note = field_validator("note")(_non_empty)


# A fixed cost per optimizer step that no FLOP or byte count captures: the framework's Python work, kernel
# launches of the optimizer over hundreds of tensors, gradient-norm and loss reductions, the data loader's
# hand-off and logging. Published end-to-end step times include it (Megatron-LM's README: "end-to-end incl.
# data loading, optimizer, logging"); it matters for short steps only. Fitted by benchmarks/calibrate_training.py
# on the published runs of five sources (grid 0-0.2 s); a profile may carry its own (EfficiencySpec).
DEFAULT_STEP_OVERHEAD_SECONDS = 0.15


class EfficiencySpec(BaseModel):
    """What real kernels and collectives reach, as fractions of datasheet peaks."""

    model_config = _STRICT

    matmul: MatmulEfficiency = Field(description="16-bit GEMM efficiency curve.")
    matmul_fp8: Fraction | None = Field(
        default=None,
        description="Plateau fraction of the fp8 peak that large fp8 GEMMs reach (same fixed cost per GEMM as "
        "16-bit); required when the accelerator has an fp8 peak.",
    )
    matmul_fp4: Fraction | None = Field(
        default=None,
        description="Plateau fraction of the fp4 peak that large NVFP4 GEMMs reach (same fixed cost per GEMM as "
        "16-bit); NVFP4 training (dtype fp4) needs it and an fp4 peak.",
    )
    attention: AttentionEfficiency = Field(
        description="Fused (flash) attention forward + backward on long blocks: the plateau of the attention "
        "curve (planner/physics/kernels.py attention_efficiency), fraction of dense 16-bit peak, and optionally "
        "the chip's own half-saturation lengths of that curve."
    )
    attention_flash2: Fraction | None = Field(
        default=None,
        description="FlashAttention-2 (PyTorch SDPA's default flash backend) where the chip has a faster fused "
        "kernel: the plateau of the same attention curve, fraction of dense 16-bit peak; null where "
        "FlashAttention-2 is the chip's best kernel (the attention plateau applies).",
    )
    attention_fp8: Fp8AttentionSpeedup | None = Field(
        default=None,
        description="The fused attention's speed with fp8 inputs over 16-bit ones, measured (Transformer Engine's "
        "FP8 attention); null where no measurement is at hand (a layout asking for FP8 attention is refused).",
    )
    memory_bandwidth: Fraction = Field(description="Streaming (memory-bound) kernels, fraction of HBM bandwidth.")
    intra_node_link: Fraction = Field(description="Collective bus bandwidth reached inside a node (NCCL busbw / link).")
    inter_node_link: Fraction = Field(description="Collective bus bandwidth reached across nodes (NCCL busbw / NIC).")
    best_published_mfu: PublishedMfu | None = Field(
        default=None, description="Best published training MFU on this chip per dtype; estimates above it are flagged."
    )
    host_launch: HostLaunch | None = Field(
        default=None,
        description="CPU time per eager op and kernel launch on this system's host CPUs (planner/physics/launch.py); "
        "null takes X86_HOST_SECONDS_PER_LAUNCH, the figure measured on an x86 DGX host.",
    )
    step_overhead_seconds: float = Field(
        default=DEFAULT_STEP_OVERHEAD_SECONDS,
        ge=0.0,
        le=60.0,
        description="Fixed cost per optimizer step that no FLOP or byte count captures (framework Python, the "
        "optimizer's launches over hundreds of tensors, loss and norm reductions, the data loader's hand-off); "
        "`planner calibrate` can fit it (factor step_overhead).",
    )


class HostSpec(BaseModel):
    """The node's host (CPU side), as offload sees it: host memory, its bandwidth, the GPU-host link."""

    model_config = _STRICT

    cpu: str = Field(description="CPUs of the node, e.g. '2x AMD EPYC 7742'.")
    memory_bytes: Bytes = Field(description="Host memory of the node, bytes.")
    memory_bandwidth_bytes_per_s: Bandwidth = Field(description="Peak host-memory bandwidth of the node (all sockets), bytes/s.")
    link_bandwidth_bytes_per_s: Bandwidth = Field(
        description="GPU <-> host bandwidth one GPU gets in one direction when all GPUs of the node transfer at once "
        "(PCIe lanes shared through switches, or NVLink-C2C), bytes/s."
    )
    source: str = Field(description="Where the figures come from.")

    _check_source = field_validator("source")(_non_empty)


class HardwareProfile(BaseModel):
    """An accelerator, how many share a node, how nodes connect, and what is achievable."""

    model_config = _STRICT

    name: str = Field(description="Profile name (e.g. 'DGX H100').")
    description: str | None = Field(default=None, description="One line about the system.")
    accelerator: AcceleratorSpec
    node: NodeSpec
    network: NetworkSpec | None = Field(default=None, description="Scale-out network; null for a single-node system.")
    efficiency: EfficiencySpec
    host: HostSpec | None = Field(
        default=None, description="The node's host (CPU memory and GPU-host link), for offload; null when not known."
    )
    price_per_gpu_hour_usd: Annotated[PositiveFloat, BeforeValidator(_number), _within("price_usd")] | None = Field(
        default=None, description="Typical on-demand cloud price per GPU-hour (USD), for the cost objective."
    )
    price_source: str | None = Field(default=None, description="Where the price comes from.")

    @model_validator(mode="after")
    def _check_network(self) -> HardwareProfile:
        net = self.network
        if net is not None and net.nics_per_node and net.nic_bits_per_s:
            implied = net.nics_per_node * net.nic_bits_per_s / 8 / self.node.gpus_per_node
            if abs(implied - net.bandwidth_bytes_per_s) > 0.01 * implied:
                raise ValueError(
                    f"network.bandwidth_bytes_per_s ({net.bandwidth_bytes_per_s:.4g}) disagrees with "
                    f"nics_per_node x nic_bits_per_s / 8 / gpus_per_node ({implied:.4g}); make them agree"
                )
        if "fp8" in self.accelerator.peak_flops_per_s and self.efficiency.matmul_fp8 is None:
            raise ValueError(
                "efficiency.matmul_fp8: required when accelerator.peak_flops_per_s has an fp8 peak; give the plateau "
                "fraction of the fp8 peak large fp8 GEMMs reach, with a note"
            )
        if self.price_per_gpu_hour_usd is not None and not self.price_source:
            raise ValueError("price_per_gpu_hour_usd needs a price_source")
        return self

    # Convenience accessors ---------------------------------------------------
    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype; KeyError when the chip has no such units."""
        return self.accelerator.peak_flops_per_s[dtype]  # type: ignore[index]

    @property
    def inter_node_bandwidth_bytes_per_s(self) -> float:
        return self.network.bandwidth_bytes_per_s if self.network else self.node.bandwidth_bytes_per_s

    @property
    def inter_node_latency_s(self) -> float:
        return self.network.latency_s if self.network else self.node.latency_s
