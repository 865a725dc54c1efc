"""A profile overlay: fitted values of a few named factors of one hardware profile (`planner calibrate`).

FACTORS is the one table of what a calibration may fit: a name, the field of `HardwareProfile` it reads
and writes (a dotted path), its bounds and the width of its prior around the shipped value (a standard
deviation of the log of the value: 0.15 lets the fit move the value by about 15% before the prior
pushes back as hard as one run's residual of the measurement noise). A factor whose path the profile
lacks (the efficiency block changes shape) is skipped, so a new field is one new row.

The memory reserve is not a profile field: it is bytes the runs' measured peaks hold beyond the model's
own peak (allocator pools, framework buffers). `apply_overlay` carries it by lowering
`accelerator.memory_bytes` by that amount, which leaves every fits test as `peak + reserve <= usable`. It is
never negative (see MEMORY_RESERVE_LOW_BYTES).

`apply_overlay` builds a new profile with `model_copy` (no global state) and revalidates it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from planner.errors import PlannerError
from planner.specs.bounds import strict_float
from planner.specs.hardware import X86_HOST_SECONDS_PER_LAUNCH, HardwareProfile, HostLaunch

FiniteFloat = Annotated[float, BeforeValidator(strict_float)]  # no true/false, no text, no nan/inf


@dataclass(frozen=True)
class Factor:
    """One fittable factor: where it lives on a HardwareProfile, its bounds and prior width."""

    name: str
    path: str  # dotted field path on HardwareProfile
    low: float
    high: float
    prior_sigma: float  # standard deviation of log(value / shipped value)
    what: str
    # For a field inside an optional block (null on some profiles): the value a profile without the block takes,
    # and how a fitted value builds the block. None: a profile without the field has no such factor.
    absent: float | None = None
    build: Callable[[float], BaseModel] | None = None


# The attention plateaus are kernel benchmark figures (the profiles' efficiency.attention* notes), so their
# prior is as wide as one kernel's measured throughput moves between builds and machines, not a free guess:
# cuDNN's fused attention on GB200 went from 0.519 to 0.557 of dense peak at 8k keys between cuDNN 9.17 and
# 9.22 (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training artifacts, log difference 0.07), and the NeMo
# long-sequence runs, attention-bound up to 1M tokens, sit within 2.2% of the FlashAttention-2 benchmark
# curve they were never fitted to (docs/validation.md). A log sd of 0.10 holds that spread at one sd and
# allows 30% at the 3-sd limit; a cluster whose attention differs by more runs another kernel (the layout's
# attention_kernel), which no plateau factor stands for. It was 0.30 before: three torchtitan runs with the
# context-parallel rows the model misses then moved FlashAttention-2's plateau 24% down, and the source's
# 8B cp 2 run from +7% to +31%, past its 15% tolerance.
ATTENTION_PRIOR_SIGMA = 0.10

# The CPU time per eager op is a measurement of one host class (x86 DGX H100 13.5 us, GB200's Grace 37 us, GH200's
# 33 us: NVIDIA/TransformerEngine issue #2053), and hosts of one class differ by their CPU model, clock and the
# Python, PyTorch and Transformer Engine builds that issue the ops (Holistic Trace Analysis gives 5-20 us per
# launch). A log sd of 0.35 holds a 1.4x spread at one sd; the 3-sd limit (2.9x) reaches from x86 to Grace.
HOST_LAUNCH_PRIOR_SIGMA = 0.35

# The fp4 plateau is not a kernel benchmark of its own on every chip: the profiles derive it from their fp8 plateau
# and one measured NVFP4/MXFP8 kernel ratio (Transformer Engine's GEMM profiling tutorial on B300; the profiles'
# efficiency.matmul_fp4 notes), and NVFP4 GEMM kernels are the newest in cuBLAS and Transformer Engine. Its prior is
# as wide as the link factors' (0.25) rather than the measured plateaus' (0.15).
FP4_PLATEAU_PRIOR_SIGMA = 0.25

FACTORS: tuple[Factor, ...] = (
    Factor("gemm_plateau", "efficiency.matmul.peak_fraction", 0.20, 1.0, 0.15,
           "plateau fraction of dense peak reached by large GEMMs"),
    Factor("gemm_fp8_plateau", "efficiency.matmul_fp8.fraction", 0.20, 1.0, 0.15,
           "plateau fraction of the fp8 peak reached by large fp8 GEMMs"),
    Factor("gemm_fp4_plateau", "efficiency.matmul_fp4.fraction", 0.10, 1.0, FP4_PLATEAU_PRIOR_SIGMA,
           "plateau fraction of the fp4 peak reached by large NVFP4 GEMMs"),
    Factor("attention", "efficiency.attention.fraction", 0.10, 1.0, ATTENTION_PRIOR_SIGMA,
           "plateau of the flash-attention curve, fraction of dense 16-bit peak"),
    Factor("attention_flash2", "efficiency.attention_flash2.fraction", 0.10, 1.0, ATTENTION_PRIOR_SIGMA,
           "plateau of FlashAttention-2 (PyTorch SDPA engines on Hopper), fraction of dense 16-bit peak"),
    Factor("memory_bound", "efficiency.memory_bandwidth.fraction", 0.20, 1.0, 0.20,
           "element-wise and optimizer kernels, fraction of HBM bandwidth"),
    Factor("intra_node_link", "efficiency.intra_node_link.fraction", 0.20, 1.0, 0.25,
           "exposed collectives inside a node, fraction of NVLink bandwidth"),
    Factor("inter_node_link", "efficiency.inter_node_link.fraction", 0.20, 1.0, 0.25,
           "exposed collectives across nodes, fraction of NIC bandwidth"),
    Factor("step_overhead", "efficiency.step_overhead_seconds", 0.005, 10.0, 1.0,
           "fixed seconds per optimizer step (framework, optimizer launches, data loader)"),
    Factor("host_launch", "efficiency.host_launch.seconds", 2e-6, 1e-4, HOST_LAUNCH_PRIOR_SIGMA,
           "CPU seconds to issue one eager op and its kernel (the host's speed, the Python and framework build)",
           absent=X86_HOST_SECONDS_PER_LAUNCH,
           build=lambda seconds: HostLaunch(seconds=seconds, note="fitted by planner calibrate to measured runs")),
)
FACTOR_BY_NAME = {f.name: f for f in FACTORS}

# The memory reserve: bytes beyond the model's peak; bounds and prior width in bytes. Never negative: where the
# model over-predicts the measured peaks, the reserve stays 0 (a calibration does not let a job fit in memory
# the shipped model says it lacks; `planner check` gates CI on it), and the report shows the over-prediction.
MEMORY_RESERVE_LOW_BYTES = 0
MEMORY_RESERVE_HIGH_BYTES = 16 * 2**30
MEMORY_RESERVE_PRIOR_BYTES = 4 * 2**30

OVERLAY_KIND = "planner-profile-overlay"


def read_factor(hw: HardwareProfile, factor: Factor) -> float | None:
    """The factor's value on `hw`, or None when the profile has no such field."""
    value: Any = hw
    for part in factor.path.split("."):
        if value is None:
            return factor.absent
        if not hasattr(value, part):
            return None
        value = getattr(value, part)
    return float(value) if isinstance(value, (int, float)) else None


def _set_path(obj: BaseModel, parts: list[str], value: float, factor: Factor) -> BaseModel:
    head = parts[0]
    if len(parts) == 1:
        return obj.model_copy(update={head: value})
    inner = getattr(obj, head)
    if inner is None and len(parts) == 2 and factor.build is not None:
        return obj.model_copy(update={head: factor.build(value)})
    return obj.model_copy(update={head: _set_path(inner, parts[1:], value, factor)})


def with_factors(hw: HardwareProfile, values: dict[str, float], memory_reserve_bytes: float = 0.0) -> HardwareProfile:
    """A copy of `hw` with the named factors set (no validation: the fit stays inside the bounds)."""
    out: BaseModel = hw
    for name, value in values.items():
        factor = FACTOR_BY_NAME[name]
        out = _set_path(out, factor.path.split("."), float(value), factor)
    if memory_reserve_bytes:
        acc = out.accelerator  # type: ignore[attr-defined]
        reduced = int(round(acc.memory_bytes - memory_reserve_bytes))
        out = out.model_copy(update={"accelerator": acc.model_copy(update={"memory_bytes": max(reduced, 1)})})
    assert isinstance(out, HardwareProfile)
    return out


class FittedFactor(BaseModel):
    """One factor of the overlay: what the profile shipped, what the runs say, and how sure that is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="Field of the hardware profile (dotted).")
    shipped: FiniteFloat = Field(description="Value in the profile the fit started from.")
    fitted: FiniteFloat = Field(description="Fitted value; what commands use with --profile.")
    sigma: FiniteFloat = Field(ge=0, description="One standard deviation of the fitted value (posterior, Gaussian).")
    why: str | None = Field(default=None, description="Why the runs could identify this factor.")


class MemoryReserve(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    shipped_bytes: FiniteFloat = Field(default=0.0, description="Reserve the shipped model adds (0: none beyond its own).")
    fitted_bytes: FiniteFloat = Field(
        ge=MEMORY_RESERVE_LOW_BYTES, le=float(1 << 50),  # never negative (above); at most the device-memory limit
        description="Bytes the measured peaks hold beyond the model's peak.",
    )
    sigma_bytes: FiniteFloat = Field(ge=0, description="One standard deviation of fitted_bytes.")


class ProfileOverlay(BaseModel):
    """What `planner calibrate` writes and `--profile FILE` (or a job's `profile:`) reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = Field(default=OVERLAY_KIND, description=f"Always '{OVERLAY_KIND}'.")
    hardware: str = Field(description="Catalog id (or file) of the profile the fit ran on.")
    hardware_name: str = Field(description="That profile's `name`; the overlay applies to it only.")
    factors: dict[str, FittedFactor] = Field(default_factory=dict, description="Fitted factors by name.")
    memory_reserve: MemoryReserve | None = Field(default=None, description="Fitted memory reserve, if peaks were given.")
    runs: list[dict[str, Any]] = Field(default_factory=list, description="The runs the fit used, with errors.")
    fit: dict[str, Any] = Field(default_factory=dict, description="Fit summary: errors, leave-one-out, choices.")

    def check_factors(self, source: str) -> None:
        if self.kind != OVERLAY_KIND:
            raise PlannerError(f"kind is '{self.kind}', expected '{OVERLAY_KIND}'; is this a calibrate output?",
                               source=source, field="kind")
        for name, fitted in self.factors.items():
            factor = FACTOR_BY_NAME.get(name)
            if factor is None:
                raise PlannerError(f"unknown factor; known: {', '.join(FACTOR_BY_NAME)}", source=source,
                                   field=f"factors.{name}")
            if fitted.path != factor.path:
                raise PlannerError(f"path '{fitted.path}' is not the factor's field '{factor.path}'", source=source,
                                   field=f"factors.{name}.path")
            if not factor.low <= fitted.fitted <= factor.high:
                raise PlannerError(f"fitted value {fitted.fitted} is outside [{factor.low}, {factor.high}]",
                                   source=source, field=f"factors.{name}.fitted")


def apply_overlay(hw: HardwareProfile, overlay: ProfileOverlay, *, source: str = "profile") -> HardwareProfile:
    """`hw` with the overlay's fitted values; an error when the overlay was fitted on another system."""
    if hw.name != overlay.hardware_name:
        raise PlannerError(f"was fitted on '{overlay.hardware_name}' ({overlay.hardware}), not on '{hw.name}'; "
                           f"use it with --hardware {overlay.hardware} or calibrate on this system's runs",
                           source=source, field="hardware_name")
    overlay.check_factors(source)
    for name in overlay.factors:
        if read_factor(hw, FACTOR_BY_NAME[name]) is None:
            raise PlannerError(f"the profile has no field {FACTOR_BY_NAME[name].path}; recalibrate",
                               source=source, field=f"factors.{name}")
    values = {name: f.fitted for name, f in overlay.factors.items()}
    reserve = overlay.memory_reserve.fitted_bytes if overlay.memory_reserve else 0.0
    out = with_factors(hw, values, reserve)
    try:
        return HardwareProfile.model_validate(out.model_dump())
    except ValidationError as err:
        from planner.specs.validation import describe_validation_error

        raise PlannerError(f"the overlaid profile is invalid: {describe_validation_error(err)}", source=source) from None
