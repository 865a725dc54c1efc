"""The parallel layout: how a training job is split across GPUs and batched.

`Layout` is one layout (pydantic, strict). `LayoutArrays` is the same fields as
numpy arrays, one entry per candidate; the cost model only ever sees
`LayoutArrays`, so `estimate` (0-d arrays) and `search` (a grid) share every
formula.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from planner.specs.bounds import Degree, GlobalBatch, Interleave, Layers, MicroBatch, SeqLen, ZeroStage

Recompute = Literal["none", "selective", "full"]
RECOMPUTE_CODES: dict[str, int] = {"none": 0, "selective": 1, "full": 2}
RECOMPUTE_NAMES: dict[int, str] = {code: name for name, code in RECOMPUTE_CODES.items()}

ComputeDtype = Literal["bf16", "fp16", "fp8"]
GradDtype = Literal["bf16", "fp16", "fp32"]
Optimizer = Literal["adam", "sgd"]
Schedule = Literal["1f1b", "gpipe"]

# Bytes of optimizer state per parameter, beyond the 16-bit weights and gradients.
# Mixed-precision Adam: fp32 master weights + momentum + variance = 4 + 4 + 4 = 12
# (Rajbhandari et al. 2020, ZeRO, Sec. 3.1, "K = 12"). SGD with momentum: master + momentum = 8.
OPTIMIZER_STATE_BYTES_PER_PARAM: dict[str, int] = {"adam": 12, "sgd": 8}


class Layout(BaseModel):
    """One training layout: parallel degrees, memory strategies, batch and precision."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: Degree = Field(default=1, description="Tensor-parallel degree (Megatron intra-layer split).")
    pp: Degree = Field(default=1, description="Pipeline-parallel degree (stages).")
    cp: Degree = Field(default=1, description="Context-parallel degree (sequence split across GPUs, ring attention).")
    dp: Degree = Field(default=1, description="Data-parallel degree (replicas, or shards under ZeRO/FSDP).")
    ep: Degree = Field(default=1, description="Expert-parallel degree (MoE only); experts split across DP ranks.")
    zero: ZeroStage = Field(default=0, description="ZeRO stage: 0 none, 1 optimizer, 2 +gradients, 3 +parameters (FSDP).")
    sequence_parallel: StrictBool = Field(default=False, description="Megatron sequence parallelism (needs tp > 1).")
    recompute: Recompute = Field(default="none", description="Activation recomputation: none, selective (attention core), full.")
    recompute_layers_per_stage: Layers | None = Field(
        default=None,
        description="With full recompute: how many layers per stage are recomputed (Megatron 'block'); null = all.",
    )
    micro_batch: MicroBatch = Field(default=1, description="Sequences per micro-batch per data-parallel rank.")
    global_batch: GlobalBatch = Field(description="Sequences per optimizer step, all replicas together.")
    seq_len: SeqLen = Field(description="Tokens per sequence.")
    interleave: Interleave = Field(default=1, description="Virtual pipeline stages per rank (interleaved 1F1B); 1 = plain.")
    schedule: Schedule = Field(default="1f1b", description="Pipeline schedule: 1f1b (PipeDream-Flush) or gpipe.")
    dtype: ComputeDtype = Field(default="bf16", description="Compute precision of the matrix multiplies.")
    grad_dtype: GradDtype = Field(default="bf16", description="Gradient precision (fp32 = Megatron's main grads).")
    optimizer: Optimizer = Field(default="adam", description="Optimizer (sets the optimizer-state bytes per parameter).")
    flash_attention: StrictBool = Field(default=True, description="Fused attention: no s x s score matrix is stored.")
    overlap_grad_reduce: StrictBool = Field(
        default=True,
        description="Data-parallel gradient reduction overlaps the backward pass (PyTorch DDP/FSDP, "
        "Megatron --overlap-grad-reduce); false for a reduction after backward (Megatron 2021 'local' DDP).",
    )
    overlap_tp_comm: StrictBool = Field(
        default=False,
        description="Tensor-parallel collectives overlap the GEMMs (Megatron --tp-comm-overlap, async TP).",
    )
    fp8_param_gather: bool = Field(
        default=False,
        description="fp8 training keeps the transformer layers' compute weights in fp8 and all-gathers them in "
        "fp8 (Megatron-LM --fp8-param-gather); needs dtype fp8 and a sharded optimizer (zero >= 1).",
    )

    @model_validator(mode="after")
    def _check_flags(self) -> Layout:
        if self.recompute_layers_per_stage is not None and self.recompute != "full":
            raise ValueError("recompute_layers_per_stage applies only with recompute 'full'")
        if self.fp8_param_gather and (self.dtype != "fp8" or self.zero < 1):
            raise ValueError("fp8_param_gather needs dtype fp8 and zero >= 1 (Megatron-LM allows it only with the "
                             "distributed optimizer or FSDP)")
        return self

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    def to_arrays(self) -> LayoutArrays:
        return LayoutArrays.from_layouts([self])


_INT_FIELDS = ("tp", "pp", "cp", "dp", "ep", "zero", "micro_batch", "global_batch", "seq_len", "interleave")


@dataclass(frozen=True)
class LayoutArrays:
    """Layouts as parallel numpy arrays (shape (n,)); the cost model's only input besides the specs.

    `recompute` holds RECOMPUTE_CODES; `recompute_layers` is -1 where all layers are recomputed.
    `sequence_parallel`, `flash_attention` and `gpipe` are booleans; precisions are per-candidate too,
    as bytes and as peak-FLOP keys, so mixed grids stay possible.
    """

    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    dp: np.ndarray
    ep: np.ndarray
    zero: np.ndarray
    sequence_parallel: np.ndarray
    recompute: np.ndarray
    recompute_layers: np.ndarray
    micro_batch: np.ndarray
    global_batch: np.ndarray
    seq_len: np.ndarray
    interleave: np.ndarray
    gpipe: np.ndarray
    flash_attention: np.ndarray
    grad_bytes: np.ndarray
    optimizer_bytes: np.ndarray
    fp8: np.ndarray
    overlap_grad_reduce: np.ndarray
    overlap_tp_comm: np.ndarray
    fp8_params: np.ndarray  # transformer-layer weights held in fp8 (fp8_param_gather)

    @property
    def shape(self) -> tuple[int, ...]:
        """The broadcast shape of all fields: (n,) for a list of layouts; a search grid may give each field
        its own axis (fields of shape (a, 1, 1), (1, z, 1), ...) so terms that depend on few fields are
        computed once per distinct value."""
        return np.broadcast_shapes(*(getattr(self, f.name).shape for f in fields(self)))

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def gpus(self) -> np.ndarray:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def num_micro_batches(self) -> np.ndarray:
        """Micro-batches per step per pipeline (gradient-accumulation steps); floor where indivisible."""
        return np.maximum(self.global_batch // np.maximum(self.dp * self.micro_batch, 1), 1)

    @classmethod
    def from_layouts(cls, layouts: list[Layout]) -> LayoutArrays:
        cols: dict[str, np.ndarray] = {
            name: np.array([getattr(lay, name) for lay in layouts], dtype=np.int64) for name in _INT_FIELDS
        }
        cols["sequence_parallel"] = np.array([lay.sequence_parallel for lay in layouts], dtype=bool)
        cols["recompute"] = np.array([RECOMPUTE_CODES[lay.recompute] for lay in layouts], dtype=np.int64)
        cols["recompute_layers"] = np.array(
            [-1 if lay.recompute_layers_per_stage is None else lay.recompute_layers_per_stage for lay in layouts],
            dtype=np.int64,
        )
        cols["gpipe"] = np.array([lay.schedule == "gpipe" for lay in layouts], dtype=bool)
        cols["flash_attention"] = np.array([lay.flash_attention for lay in layouts], dtype=bool)
        cols["grad_bytes"] = np.array([4 if lay.grad_dtype == "fp32" else 2 for lay in layouts], dtype=np.int64)
        cols["optimizer_bytes"] = np.array(
            [OPTIMIZER_STATE_BYTES_PER_PARAM[lay.optimizer] for lay in layouts], dtype=np.int64
        )
        cols["fp8"] = np.array([lay.dtype == "fp8" for lay in layouts], dtype=bool)
        for flag in ("overlap_grad_reduce", "overlap_tp_comm"):
            cols[flag] = np.array([getattr(lay, flag) for lay in layouts], dtype=bool)
        cols["fp8_params"] = np.array([lay.fp8_param_gather for lay in layouts], dtype=bool)
        return cls(**cols)

    def take(self, index: np.ndarray | int) -> LayoutArrays:
        """The candidates at `index` (an int keeps a length-1 array)."""
        idx = np.atleast_1d(index)
        return LayoutArrays(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    def to_layout(self, i: int, *, dtype: str = "bf16") -> Layout:
        """Candidate i back as a `Layout` (the compute dtype is passed, as grids share one)."""
        rl = int(self.recompute_layers[i])
        grad = {4: "fp32", 2: "bf16"}[int(self.grad_bytes[i])]
        opt = {v: k for k, v in OPTIMIZER_STATE_BYTES_PER_PARAM.items()}[int(self.optimizer_bytes[i])]
        return Layout(
            **{name: int(getattr(self, name)[i]) for name in _INT_FIELDS},
            sequence_parallel=bool(self.sequence_parallel[i]),
            recompute=RECOMPUTE_NAMES[int(self.recompute[i])],  # type: ignore[arg-type]
            recompute_layers_per_stage=None if rl < 0 else rl,
            schedule="gpipe" if bool(self.gpipe[i]) else "1f1b",
            flash_attention=bool(self.flash_attention[i]),
            overlap_grad_reduce=bool(self.overlap_grad_reduce[i]),
            overlap_tp_comm=bool(self.overlap_tp_comm[i]),
            fp8_param_gather=bool(self.fp8_params[i]),
            grad_dtype=grad,  # type: ignore[arg-type]
            optimizer=opt,  # type: ignore[arg-type]
            dtype="fp8" if bool(self.fp8[i]) else dtype,  # type: ignore[arg-type]
        )
