"""The largest value planner accepts for every count and size a user writes, in one table.

Every flag, job field, spec field and engine setting that holds a count or a size is checked against
this table before any arithmetic, so the cost model (numpy, 64-bit integers and floats) never sees a
value it cannot hold and no search grows with a magnitude. The limits are far above any real run
(the largest published training runs use about 1e5 GPUs, 1e3-way tensor x pipeline splits, 1e4
sequences per step, 1e6-token contexts, 3e4-wide models) and low enough that the products the cost
model forms stay exact: tokens per micro-batch (micro_batch x seq_len <= 2**40) times a width
(<= 2**20) stays below 2**63. docs/errors.md lists them; tests/fuzz checks that each is enforced
with exit code 2 and a message that gives the limit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

import annotated_types
from pydantic import AfterValidator, BeforeValidator, Field


@dataclass(frozen=True)
class Limit:
    """The largest accepted value of one kind of quantity, and what it counts."""

    maximum: int | float
    unit: str


# name -> limit; names are the kinds of quantity, shared by the fields that hold one.
LIMITS: dict[str, Limit] = {
    "gpus": Limit(1 << 20, "GPUs"),  # 1,048,576
    "nodes": Limit(1 << 17, "nodes"),
    "degree": Limit(1 << 20, "ranks"),  # tp, pp, cp, dp, ep, replicas
    "interleave": Limit(1 << 14, "virtual stages per rank"),
    "global_batch": Limit(1 << 24, "sequences"),
    "micro_batch": Limit(1 << 16, "sequences"),
    "grad_accum": Limit(1 << 24, "micro-batches"),
    "seq_len": Limit(1 << 24, "tokens"),  # 16,777,216; also input_len, output_len, max_seq_len
    "concurrency": Limit(1 << 24, "sequences"),
    "layers": Limit(1 << 14, "layers"),
    "width": Limit(1 << 20, "elements"),  # hidden_size, ffn sizes, head_dim, LoRA ranks
    "heads": Limit(1 << 16, "heads"),
    "vocab": Limit(1 << 24, "tokens"),
    "experts": Limit(1 << 14, "experts"),
    "ns_steps": Limit(1 << 10, "Newton-Schulz iterations"),
    "top": Limit(1 << 20, "rows"),
    "memory_bytes": Limit(float(1 << 50), "bytes"),  # 1 PiB per accelerator
    "bandwidth": Limit(1e16, "bytes/s"),
    "flops": Limit(1e19, "FLOP/s"),
    "latency_s": Limit(1.0, "seconds"),
    "price_usd": Limit(1e6, "USD per GPU-hour"),
    "tokens": Limit(1e18, "tokens"),
    "seconds": Limit(1e6, "seconds"),
    "tokens_per_second": Limit(1e9, "tokens/s per GPU"),
    "tflops": Limit(1e7, "TFLOP/s per GPU"),
    "memory_gib": Limit(float(1 << 20), "GiB"),
    "steps": Limit(1 << 30, "steps"),
    "count": Limit(1 << 53, ""),  # any other integer setting of an engine file (iterations, intervals, seeds)
}

# Files planner reads: the largest size and nesting it parses.
MAX_FILE_BYTES = 16 << 20  # 16 MiB; a real config.json, job or launch script is a few KiB
MAX_LOG_BYTES = 256 << 20  # a training log read by `planner calibrate`
MAX_NESTING = 64  # YAML/JSON/TOML containers inside containers
MAX_SHELL_EXPANSION_CHARS = 1 << 20  # a launch script's variables, expanded, at most 1 MiB each
MAX_SHELL_WORDS = 1 << 16  # words in one expanded command or array
MAX_SHELL_INT_BITS = 64  # bash's arithmetic is 64-bit; a larger intermediate is an error here


def maximum(kind: str) -> int | float:
    return LIMITS[kind].maximum


def describe(kind: str) -> str:
    limit = LIMITS[kind]
    value = limit.maximum
    shown = f"{int(value):,}" if float(value).is_integer() and value < 1e15 else f"{value:g}"
    return f"{shown} {limit.unit}".rstrip()


def over_limit(kind: str, value: Any) -> str | None:
    """Why `value` exceeds the limit of `kind`, or None when it is within it (or not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    if value > LIMITS[kind].maximum:
        shown = f"{value:,}" if value < 1e15 else f"{float(value):.3g}"
        return f"{shown} is above planner's limit of {describe(kind)}; see docs/errors.md"
    return None


def check(kind: str, value: Any) -> Any:
    """`value` unchanged, or ValueError when it is not finite or above the limit of `kind`."""
    problem = over_limit(kind, value)
    if problem:
        raise ValueError(problem)
    return value


def strict_int(value: Any) -> Any:
    """Reject what pydantic's lax mode would coerce into an integer: true/false, '2', 2.0."""
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {str(value).lower()}")
    if isinstance(value, (str, float)):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def strict_float(value: Any) -> Any:
    if isinstance(value, bool) or isinstance(value, str):
        raise ValueError(f"expected a number, got {value if isinstance(value, str) else str(value).lower()!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value}")
    return value


@dataclass(frozen=True)
class Bounded(annotated_types.GroupedMetadata):
    """Pydantic metadata for a count: a strict integer (true/false, '2' and 2.0 are errors) in
    [minimum, the limit of `kind`]. Use as `Annotated[int, Bounded("gpus")]`."""

    kind: str
    minimum: int = 1

    def __iter__(self) -> Iterator[object]:
        # 'greater than 0', as pydantic words PositiveInt
        yield annotated_types.Gt(self.minimum - 1) if self.minimum > 0 else annotated_types.Ge(self.minimum)
        yield BeforeValidator(strict_int)
        yield AfterValidator(lambda value: check(self.kind, value))
        yield Field(json_schema_extra={"maximum": LIMITS[self.kind].maximum})


@dataclass(frozen=True)
class BoundedReal(annotated_types.GroupedMetadata):
    """Pydantic metadata for a real number: finite (an int is fine; a string or true/false is not), at most
    the limit of `kind`, and at least `minimum` when one is given. Use as `Annotated[float, BoundedReal("price_usd")]`."""

    kind: str
    minimum: float | None = None

    def __iter__(self) -> Iterator[object]:
        if self.minimum is not None:
            yield annotated_types.Ge(self.minimum)
        yield BeforeValidator(strict_float)
        yield AfterValidator(lambda value: check(self.kind, value))
        yield Field(json_schema_extra={"maximum": LIMITS[self.kind].maximum})


GpuCount = Annotated[int, Bounded("gpus")]
NodeCount = Annotated[int, Bounded("nodes")]
Degree = Annotated[int, Bounded("degree")]
Interleave = Annotated[int, Bounded("interleave")]
GlobalBatch = Annotated[int, Bounded("global_batch")]
MicroBatch = Annotated[int, Bounded("micro_batch")]
MicroBatchCount = Annotated[int, Bounded("grad_accum")]  # a number of micro-batches
SeqLen = Annotated[int, Bounded("seq_len")]
Layers = Annotated[int, Bounded("layers")]
LayersOrNone = Annotated[int, Bounded("layers", minimum=0)]  # a count of layers that may be zero
Width = Annotated[int, Bounded("width")]
Heads = Annotated[int, Bounded("heads")]
Vocab = Annotated[int, Bounded("vocab")]
Experts = Annotated[int, Bounded("experts")]
ExpertsOrNone = Annotated[int, Bounded("experts", minimum=0)]
NsSteps = Annotated[int, Bounded("ns_steps")]  # Muon's Newton-Schulz iterations per step
ZeroStage = Annotated[int, Field(ge=0, le=3), BeforeValidator(strict_int)]
"""A ZeRO stage, 0 to 3, as a strict integer."""

# Flag name (without the dashes, underscores for dashes) -> the kind of quantity it holds.
FIELD_KINDS: dict[str, str] = {
    "gpus": "gpus", "nodes": "nodes", "tp": "degree", "pp": "degree", "cp": "degree", "dp": "degree",
    "ep": "degree", "max_pp": "degree", "interleave": "interleave", "global_batch": "global_batch",
    "micro_batch": "micro_batch", "seq_len": "seq_len", "input_len": "seq_len", "output_len": "seq_len",
    "concurrency": "concurrency", "recompute_layers": "layers", "recompute_layers_per_stage": "layers",
    "offload_activation_layers": "layers", "shard_group": "degree", "microbatch_group_size": "grad_accum", "max_batched_tokens": "seq_len", "top": "top",
    "muon_ns_steps": "ns_steps", "muon_num_ns_steps": "ns_steps", "lora_rank": "width",
}
