"""The runs file of `planner calibrate RUNS.yaml`: measured runs, each a job plus what was measured.

A run is a job (a path to a job file, relative to the runs file, or the job inline, as `planner check`
reads it) and either `measured` figures or a `log` to read them from. A Megatron-LM log holds its own
layout (the printed arguments); its run may then give only `hardware` (and what the log lacks in `job`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, model_validator

from planner.specs.bounds import Bounded, BoundedReal

# The training logs planner reads (planner.engines.logs has a reader for each).
LogFormat = Literal["megatron", "nemo", "torchtitan", "deepspeed", "hf_trainer", "automodel"]
LOG_FORMATS: tuple[str, ...] = ("megatron", "nemo", "torchtitan", "deepspeed", "hf_trainer", "automodel")

_STRICT = ConfigDict(extra="forbid", frozen=True)

# The smallest measured figure taken: a millionth of a second, of a token/s, of a TFLOP/s, of a GiB. No real
# run is near it, and above it the step seconds derived (batch tokens / throughput) and the errors against
# the prediction stay finite; a denormal like 5e-324 gave an infinite error and a fit pulled to its bounds.
MIN_MEASURED = 1e-6
Seconds = Annotated[PositiveFloat, BoundedReal("seconds", minimum=MIN_MEASURED)]
TokensPerSecond = Annotated[PositiveFloat, BoundedReal("tokens_per_second", minimum=MIN_MEASURED)]
TeraFlops = Annotated[PositiveFloat, BoundedReal("tflops", minimum=MIN_MEASURED)]
GiB = Annotated[PositiveFloat, BoundedReal("memory_gib", minimum=MIN_MEASURED)]


class Measured(BaseModel):
    """What was measured on the run; give at least one timing (step, tokens/s or TFLOP/s) or a peak."""

    model_config = _STRICT

    step_seconds: Seconds | None = Field(default=None, description="Seconds per optimizer step (steady state).")
    tokens_per_second_per_gpu: TokensPerSecond | None = Field(default=None, description="Training tokens/s per GPU.")
    model_tflops_per_gpu: TeraFlops | None = Field(
        default=None, description="Model TFLOP/s per GPU (6N-style count without recompute), as MFU tables report.")
    hardware_tflops_per_gpu: TeraFlops | None = Field(
        default=None, description="Hardware TFLOP/s per GPU (recomputed forward included), as Narayanan et al. report.")
    peak_memory_gib: GiB | None = Field(default=None, description="Peak device memory per GPU, GiB (2^30).")

    @model_validator(mode="after")
    def _something(self) -> Measured:
        if all(v is None for v in self.model_dump().values()):
            raise ValueError("give at least one measured figure")
        return self


class LogSource(BaseModel):
    """A training log to read the measurements from."""

    model_config = _STRICT

    path: str = Field(description="The log file, relative to the runs file.")
    format: LogFormat | None = Field(
        default=None, description="Engine that wrote it; detected from the text when left out.")
    training_args: str | None = Field(
        default=None, description="Hugging Face Trainer only: the TrainingArguments as JSON/YAML (to_dict()).")
    warmup_steps: Annotated[int, Bounded("steps")] | None = Field(default=None, description="Steps left out at the start (default 3).")


class RunEntry(BaseModel):
    """One measured run."""

    model_config = _STRICT

    name: str | None = Field(default=None, description="Label in the output (default: the job's or log's name).")
    job: str | dict[str, Any] | None = Field(
        default=None, description="Job file (relative path) or the job inline (validated as a job once the log "
        "has added what it holds: a Megatron-LM log's world size and arguments).")
    hardware: str | None = Field(default=None, description="With a Megatron-LM log and no job: the hardware id.")
    measured: Measured | None = Field(default=None, description="Measured figures.")
    log: LogSource | None = Field(default=None, description="A training log holding the measurements.")
    source: str | None = Field(default=None, description="Where the measurement comes from (free text).")

    @model_validator(mode="after")
    def _needs(self) -> RunEntry:
        if self.measured is None and self.log is None:
            raise ValueError("give 'measured' figures or a 'log'")
        if self.job is None and self.hardware is None:
            raise ValueError("give a 'job' (or, with a Megatron-LM log, at least 'hardware')")
        return self


class RunsFile(BaseModel):
    model_config = _STRICT

    description: str | None = None
    runs: list[RunEntry] = Field(min_length=1, description="The measured runs, all on one hardware profile.")
