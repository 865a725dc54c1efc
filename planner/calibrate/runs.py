"""Measured runs for a calibration: from a runs file (jobs + measured figures or logs) or from logs alone.

A `Run` is one job on one hardware profile with its measured step time (every measured throughput is
turned into seconds per step with the job's own token and FLOP counts) and, when given, its measured
peak memory. `predict_seconds` is the model's prediction of that run on a (possibly overlaid) profile.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.engines import load, logs, megatron, megatron_bridge
from planner.engines.job import ResolvedJob, resolve_job
from planner.errors import PlannerError
from planner.specs.engine import engine_profile
from planner.specs.hardware import HardwareProfile
from planner.specs.job import EngineSection, Job
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.specs.runs import Measured, RunEntry, RunsFile
from planner.specs.validation import validate_spec
from planner.training.estimate import evaluate
from planner.training.flops import step_flop
from planner.training.time import layer_time

GIB = 2**30
QUANTITIES = ("step_seconds", "layer_forward_backward_seconds")


@dataclass(frozen=True)
class Run:
    """One measured run: the job's model, hardware and layout, and what was measured (SI units)."""

    name: str
    model_id: str
    model: ModelSpec
    hardware_id: str
    hardware: HardwareProfile
    layout: Layout
    measured_seconds: float | None  # per step (or per layer pass, for quantity layer_forward_backward_seconds)
    measured_peak_bytes: float | None = None
    quantity: str = "step_seconds"
    source: str = ""
    group: str = ""
    warnings: tuple[str, ...] = ()


def predict_seconds(run: Run, hw: HardwareProfile) -> float:
    """The model's time for the run's measured quantity on profile `hw`."""
    lay = run.layout.to_arrays()
    if run.quantity == "layer_forward_backward_seconds":
        t = layer_time(run.model, hw, lay, moe_layer=False)
        return float((t.forward + t.backward + t.recompute + t.tp_comm)[0])
    return float(evaluate(run.model, hw, lay, engine=engine_profile(run.layout.engine)).step_seconds[0])


def predict_peak_bytes(run: Run, hw: HardwareProfile) -> float:
    return float(evaluate(run.model, hw, run.layout.to_arrays(), engine=engine_profile(run.layout.engine)).peak_bytes[0])


def measured_step_seconds(model: ModelSpec, layout: Layout, m: Measured, source: str) -> float | None:
    """Seconds per step from whichever timing was measured (the first of step, tokens/s, TFLOP/s)."""
    if m.step_seconds is not None:
        return m.step_seconds
    gpus = layout.gpus
    if m.tokens_per_second_per_gpu is not None:
        return layout.global_batch * layout.seq_len / (m.tokens_per_second_per_gpu * gpus)
    flop = step_flop(model, layout.to_arrays())
    if m.model_tflops_per_gpu is not None:
        return float(flop.model_flop[0]) / (m.model_tflops_per_gpu * 1e12 * gpus)
    if m.hardware_tflops_per_gpu is not None:
        return float(flop.hardware_flop[0]) / (m.hardware_tflops_per_gpu * 1e12 * gpus)
    return None


def run_from_job(name: str, job: ResolvedJob, measured: Measured, *, source: str = "", group: str = "",
                 warnings: tuple[str, ...] = ()) -> Run:
    seconds = measured_step_seconds(job.model, job.layout, measured, source)
    peak = measured.peak_memory_gib * GIB if measured.peak_memory_gib is not None else None
    return Run(name=name, model_id=job.model_id, model=job.model, hardware_id=job.hardware_id, hardware=job.hardware,
               layout=job.layout, measured_seconds=seconds, measured_peak_bytes=peak, source=source, group=group,
               warnings=(*job.warnings, *warnings))


def _needs_layout(reading: logs.LogReading) -> bool:
    """Whether the log's timing is a whole-job or per-rank rate that the job's layout turns into step time."""
    return reading.step_seconds is None and reading.tokens_per_second_per_gpu is None and bool(
        reading.samples_per_second or reading.tokens_per_second or reading.tokens_per_second_per_data_rank)


def _log_figures(reading: logs.LogReading, layout: Layout | None) -> Measured:
    """The log's steady-state figures as Measured. samples/s (DeepSpeed, HF Trainer: the whole job's) become
    seconds per step with the job's global batch; tokens/s of the whole job (NeMo AutoModel) tokens/s per GPU over
    the job's GPUs, and those of one data-parallel rank (AutoModel's `/gpu`: the job's over dp x cp) the same after
    times dp x cp."""
    values: dict[str, Any] = {}
    if reading.step_seconds is not None:
        values["step_seconds"] = reading.step_seconds
    elif reading.tokens_per_second_per_gpu is not None:
        values["tokens_per_second_per_gpu"] = reading.tokens_per_second_per_gpu
    elif layout is not None and reading.tokens_per_second:
        values["tokens_per_second_per_gpu"] = reading.tokens_per_second / layout.gpus
    elif layout is not None and reading.tokens_per_second_per_data_rank:
        values["tokens_per_second_per_gpu"] = (reading.tokens_per_second_per_data_rank * layout.dp * layout.cp
                                               / layout.gpus)
    elif reading.samples_per_second and layout is not None:
        values["step_seconds"] = layout.global_batch / reading.samples_per_second
    if reading.peak_memory_bytes is not None:
        values["peak_memory_gib"] = reading.peak_memory_bytes / GIB
    if not values:
        raise PlannerError("the log holds no step time, throughput or memory figure", source=reading.source)
    try:
        return Measured(**values)
    except ValidationError as err:  # a zero, negative or absurd figure in the log: say which, from which file
        first = err.errors()[0]
        name = str(first["loc"][0]) if first.get("loc") else "figure"
        shown = {"step_seconds": "step time (s)", "tokens_per_second_per_gpu": "tokens/s per GPU",
                 "peak_memory_gib": "peak memory (GiB)"}.get(name, name)
        raise PlannerError(f"the log's {shown}, {values.get(name)!r}, is not a measurement planner can use "
                           f"({first['msg']}); check the log's steady-state lines", source=reading.source) from None


def _megatron_job(reading: logs.LogReading, entry_job: dict[str, Any] | None, hardware: str | None,
                  source: str) -> Job:
    """A job for a Megatron-LM log: the printed arguments as engine flags, world size as the GPU count; for a
    Megatron-Bridge log, its printed Task Configuration."""
    if not reading.arguments and reading.bridge_config is not None:
        return _megatron_bridge_job(reading, entry_job, hardware, source)
    arguments = logs.megatron_job_arguments(reading)
    missing = logs.missing_megatron_arguments(arguments, entry_job or {})
    if missing:
        cut = ("the arguments block is cut short (no 'end of arguments' line)" if reading.arguments and
               not reading.arguments_complete else "the log prints no arguments block" if not reading.arguments
               else "the arguments block")
        raise PlannerError(f"{cut} and lacks {', '.join(missing)}; give the rest in a job file with --job (model: "
                           "a catalog id or a ModelSpec, and the fields named), or log the whole block", source=source)
    flags = logs.megatron_flags(arguments, megatron.READ_FLAGS)
    if not flags:
        raise PlannerError("the log prints no arguments block planner can read; give the layout in 'job'", source=source)
    return _log_job(reading, entry_job, hardware, " ".join(flags), "the log prints no 'using world size'", source)


def _log_job(reading: logs.LogReading, entry_job: dict[str, Any] | None, hardware: str | None, args: str,
             no_world: str, source: str) -> Job:
    """The entry's job with the hardware, the GPU count (the job's, else the log's world size) and the log's
    Megatron arguments as its engine."""
    base = dict(entry_job or {})
    if hardware is not None:
        base["hardware"] = hardware
    if "gpus" not in base and "nodes" not in base:
        if reading.world_size is None:
            raise PlannerError(f"{no_world}; give job.gpus", source=source)
        base["gpus"] = reading.world_size
    base["engine"] = EngineSection(format="megatron", args=args).model_dump(exclude_none=True)
    return validate_spec(Job, base, source)


def _megatron_bridge_job(reading: logs.LogReading, entry_job: dict[str, Any] | None, hardware: str | None,
                         source: str) -> Job:
    """A job for a Megatron-Bridge log: its Task Configuration as the engine's arguments (the model and layout
    from its `model` and `train` sections); the GPU count from the log's world size, else the entry's job."""
    assert reading.bridge_config is not None
    data = megatron_bridge.parse_bridge_text(reading.bridge_config, source)
    if data is None:
        raise PlannerError("the log's Task Configuration block is not a Megatron-Bridge config planner can read; give "
                           "the layout in 'job'", source=source)
    tokens, _ = megatron_bridge.bridge_tokens(data, source)
    job = dict(entry_job or {})
    lora = megatron_bridge.peft_fields(data, source)  # its LoRA, which no Megatron-LM flag says: the job's own wins
    if lora:
        training = job.get("training")
        job["training"] = {**lora, **(training if isinstance(training, dict) else {})}
    return _log_job(reading, job, hardware, shlex.join(tokens), "a Megatron-Bridge log does not print the GPU "
                    "count", source)


def runs_from_entries(data: RunsFile, base: Path, source: str) -> list[Run]:
    runs = []
    for i, entry in enumerate(data.runs):
        where = f"{source}: runs[{i}]"
        runs.append(_run_from_entry(entry, base, where, i))
    return runs


def _entry_job(entry: RunEntry, base: Path) -> tuple[dict[str, Any] | None, Path, str | None]:
    """The run's job as a mapping (validated later), the folder its paths are relative to, and its file."""
    if isinstance(entry.job, str):
        path = Path(entry.job) if Path(entry.job).is_absolute() else base / entry.job
        data = load.read_structured(path)
        if not isinstance(data, dict):
            raise PlannerError("expected a mapping of fields (a job)", source=str(path))
        return data, path.parent, str(path)
    return entry.job, base, None


def _run_from_entry(entry: RunEntry, base: Path, where: str, index: int) -> Run:
    raw, job_base, job_source = _entry_job(entry, base)
    job_where = job_source or f"{where}: job"
    warnings: list[str] = []
    measured = entry.measured
    job: Job | None = None
    parallel = raw.get("parallel") if raw is not None else None  # not a mapping: the Job spec says so below
    megatron_layout = raw is None or ("engine" not in raw and not (parallel.get("tp") if isinstance(parallel, dict)
                                                                   else parallel))
    if entry.log is None or not megatron_layout:
        if raw is None:
            raise PlannerError("give 'job'", source=where, field="job")
        job = validate_spec(Job, raw, job_where)
    if entry.log is not None:
        log_path = Path(entry.log.path) if Path(entry.log.path).is_absolute() else base / entry.log.path
        text = load.read_log_file(log_path)
        reading = logs.read_log(text, str(log_path), entry.log.format,
                                warmup_steps=entry.log.warmup_steps or logs.WARMUP_STEPS)
        warnings += reading.warnings
        if reading.format == "megatron" and megatron_layout:
            job = _megatron_job(reading, raw, entry.hardware, str(log_path))
        elif job is None and raw is not None:
            job = validate_spec(Job, raw, job_where)
        if job is None:
            raise PlannerError(f"a {reading.format} log does not hold the layout; give 'job'", source=where, field="job")
        if reading.format == "hf_trainer" and entry.log.training_args:
            args_path = base / entry.log.training_args
            args = load.read_structured(args_path, engine=True)
            if not isinstance(args, dict):
                raise PlannerError("expected a mapping (TrainingArguments.to_dict())", source=str(args_path))
            gpus = job.gpus or 1
            fields = logs.hf_training_arguments_fields(args, gpus)
            dump = job.model_dump(exclude_none=True)
            for key, value in fields.items():
                section = "training" if key in ("global_batch", "dtype") else "parallel"
                dump.setdefault(section, {}).setdefault(key, value)
            job = validate_spec(Job, dump, str(args_path))
        layout = resolve_job(job, base=job_base, source=job_source or where).layout if _needs_layout(reading) else None
        measured = _merge(measured, _log_figures(reading, layout))
    assert job is not None and measured is not None
    resolved = resolve_job(job, base=job_base, source=job_source or where)
    name = entry.name or (Path(entry.log.path).stem if entry.log else Path(job_source or f"run{index + 1}").stem)
    return run_from_job(name, resolved, measured, source=entry.source or (entry.log.path if entry.log else ""),
                        warnings=tuple(warnings))


def _merge(given: Measured | None, from_log: Measured) -> Measured:
    if given is None:
        return from_log
    values = from_log.model_dump(exclude_none=True)
    values.update(given.model_dump(exclude_none=True))  # what the runs file states wins over the log
    return Measured(**values)


def load_runs(path: Path) -> list[Run]:
    """A runs file (YAML) -> its runs; every path inside is relative to it."""
    data = validate_spec(RunsFile, load.read_structured(path), str(path))
    return runs_from_entries(data, path.parent, str(path))


def runs_from_logs(log_paths: list[Path], *, job_path: Path | None, hardware: str | None,
                   log_format: str | None = None) -> list[Run]:
    """`planner calibrate --log FILE ... [--job JOB | --hardware HW]`: one run per log, the job shared."""
    runs: list[Run] = []
    for path in log_paths:
        entry: dict[str, Any] = {"log": {"path": str(path.resolve())}}
        if log_format:
            entry["log"]["format"] = log_format
        if job_path is not None:
            entry["job"] = str(job_path.resolve())
        if hardware is not None:
            entry["hardware"] = hardware
        parsed = validate_spec(RunEntry, entry, str(path))
        runs.append(_run_from_entry(parsed, Path.cwd(), str(path), len(runs)))
    return runs


def check_one_system(runs: list[Run]) -> None:
    names = {r.hardware.name for r in runs}
    if len(names) > 1:
        raise PlannerError(f"the runs are on {len(names)} systems ({', '.join(sorted(names))}); a profile overlay "
                           "belongs to one: calibrate each system's runs separately")
    usable = [r for r in runs if r.measured_seconds is not None or r.measured_peak_bytes is not None]
    if not usable:
        raise PlannerError("no run has a measured time or peak memory")


