"""Training logs -> measured step figures: Megatron-LM, NeMo, torchtitan, DeepSpeed, Hugging Face Trainer, NeMo AutoModel.

Pure: text in, values out (`planner.engines.load.read_log_file` reads the file). What each engine prints:
- Megatron-LM (megatron/training/training.py, training_log): per logged iteration `elapsed time per
  iteration (ms)` (the average over the log interval) and, with --log-throughput, `throughput per GPU
  (TFLOP/s/GPU)`; `[Rank r] (after n iterations) memory (MB) | ... | max reserved: x` (MB = 2^20 bytes;
  the Megatron-Bridge variant prints `memory (GB)` with `-gigabytes` keys); the `arguments` block at
  start-up (`  name ....... value`, one per line, sorted case-insensitively: `DDP_impl` among the d's,
  closed by `end of arguments`); `using world size: n, data-parallel-size: d, [context-parallel size:
  c,] tensor-model-parallel size: t, pipeline-model-parallel size: p` (hyphens vary by version); `using
  torch.float16|bfloat16 for parameters ...`; and, once the tokenizer is built, `> padded vocab (size: v)
  with k dummy tokens (new size: n)`. Megatron-Bridge prints no arguments block: its run is the YAML between
  `------- Task Configuration -------` and a line of dashes (v0.2-v0.3), or the `Configuration Summary
  (Non-Default Values vs Megatron Core)` (v0.4 on); planner.engines.megatron_bridge reads both.
- torchtitan (train.py, metrics logger): `step: n  loss: ...  memory: x GiB(y%)  tps: t  tflops: f  mfu: m%`;
  tps is tokens per second per GPU, memory the peak reserved memory of the step's window. Each field is
  preceded by an ANSI colour code unless `--metrics.disable_color_printing` (its default is colour on, so a
  redirected log holds the escape sequences); `tflops: 0.00  mfu: 0.00%` where the model declares no FLOP
  count per token (FLUX, for one), which says nothing was measured, not that the step did no work.
- NeMo 2 (NeMo's Lightning MegatronStrategy and its progress printer): `Training epoch e, iteration i/N | lr: ...
  | global_batch_size: b | global_step: g | ... | train_step_timing in s: t | [tokens_per_sec_per_gpu: x |]
  consumed_samples: c`, one line per step, seconds per step as measured by NeMo's timer; the step is the global
  step. Its `peak_memory_usage` (bytes, where the memory callback is on) does not say whether it is the
  allocator's reserve or its allocated peak, so it is not read.
- DeepSpeed (utils/timer.py, ThroughputTimer): `epoch=e/micro_step=m/global_step=g, RunningAvgSamplesPerSec=a,
  CurrSamplesPerSec=c, MemAllocated=xGB, MaxMemAllocated=yGB` (2023 on; before, `e/step, ...`, and earlier
  still `SamplesPerSec=`); samples are those of the whole train batch (all ranks); GB there is 2^30 bytes.
- Hugging Face Trainer: the final metrics `{'train_runtime': r, 'train_samples_per_second': s,
  'train_steps_per_second': t, ...}` (or the `***** train metrics *****` block, or the same keys in the
  `train_results.json` / `all_results.json` that `Trainer.save_metrics` writes): averages over the whole
  run, warm-up included, which is all the Trainer prints.
- NeMo AutoModel (nemo_automodel/recipes/llm/train_ft.py @ 36044ad3, log_train_metrics; the VLM and multimodal
  recipes print the same line): `step n | epoch e | loss ... | mem x GiB | tps t(r/gpu) | num_label_tokens k`,
  one line per optimizer step, and the same figures as one JSON object per step in `training.jsonl` under the
  checkpoint directory (MetricLogger), with `num_tokens_per_step`. t is the whole job's tokens (tail padding left
  out, summed over the data-parallel ranks) over the step's wall time, timed from the end of the step before;
  r = t / (cp x dp), a data-parallel rank's share (per GPU only where tp = pp = 1); x is torch's
  max_memory_allocated since the step before (allocated, not reserved). Older lines: `tps r/gpu` alone, and,
  before 2025-08-28 (#399), `mem: x GiB | tps r` with no `/gpu`, where r was each rank's own tokens (before
  #376, 2025-08-23; the whole job's for the five days after). The benchmark recipe
  (recipes/llm/benchmark.py) prints `Rank 0 | Iteration i | ... | Max Memory Allocated: x GB | ...` then `Max
  iter time: s seconds` per iteration (the slowest rank's), and an `Average iteration time` at the end.

Terminal control sequences (colours, cursor moves) are removed before any of this is read, as is the
`[31m`-style residue they leave when a log passes through a tool that drops the escape character.

Warm-up: the first logged step is always dropped (its interval holds the compile/allocator warm-up),
and so is every step numbered WARMUP_STEPS or less. What is left is summarised by its median.
"""

from __future__ import annotations

import ast
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from planner.engines import hf_trainer, megatron_bridge
from planner.errors import PlannerError, short_repr
from planner.specs.runs import LOG_FORMATS

WARMUP_STEPS = 3
MIB = 2**20
GIB = 2**30


@dataclass(frozen=True)
class LogStep:
    """One logged step (or interval) and what it measured."""

    step: int
    step_seconds: float | None = None
    tokens_per_second_per_gpu: float | None = None
    tokens_per_second: float | None = None  # whole job
    tokens_per_second_per_data_rank: float | None = None  # whole job / (dp x cp)
    samples_per_second: float | None = None  # whole job
    tflops_per_gpu: float | None = None
    mfu: float | None = None
    memory_bytes: float | None = None


@dataclass(frozen=True)
class LogReading:
    """What a log says about the steady state of one run."""

    format: str
    source: str
    steps_logged: int
    steps_used: tuple[int, ...]
    step_seconds: float | None = None
    step_seconds_logged: tuple[float, ...] = ()  # of steps_used, in order (Megatron: each a log interval's mean)
    tokens_per_second_per_gpu: float | None = None
    tokens_per_second: float | None = None  # whole job (NeMo AutoModel)
    tokens_per_second_per_data_rank: float | None = None  # whole job / (dp x cp) (NeMo AutoModel)
    samples_per_second: float | None = None
    steps_per_second: float | None = None
    tflops_per_gpu: float | None = None
    peak_memory_bytes: float | None = None
    world_size: int | None = None
    arguments: dict[str, str] = field(default_factory=dict)  # Megatron: the printed block, as printed
    arguments_complete: bool = False  # Megatron: the block's `end of arguments` line was seen
    startup: dict[str, str] = field(default_factory=dict)  # Megatron: argument values other start-up lines print
    bridge_config: str | None = None  # Megatron-Bridge: the log from its printed config on (YAML or summary)
    warnings: tuple[str, ...] = ()


# ECMA-48 control sequences: CSI (colours, cursor moves), OSC (window titles, hyperlinks, ended by BEL or ST) and
# the two-character escapes; then the SGR residue `[31m` / `[38;2;180;60;0m` that is left where the escape
# character itself was dropped (a log pasted through a web page or a CI viewer). At least one digit before the
# `m`, so `[model]` or `[m]` in a log line stays as it is.
_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_SGR_RESIDUE = re.compile(r"\[\d{1,3}(?:;\d{1,3})*m")


def plain_text(text: str) -> str:
    """A log without the terminal's control sequences (see the module docstring)."""
    if "\x1b" in text:
        text = _ESCAPE.sub("", text)
    return _SGR_RESIDUE.sub("", text) if "m" in text and "[" in text else text


def detect_format(text: str, source: str) -> str:
    return _detect_plain(plain_text(text), source)


def _detect_plain(text: str, source: str) -> str:
    """detect_format on text already without control sequences."""
    if "elapsed time per iteration (ms)" in text or "------------------------ arguments" in text:
        return "megatron"
    if "train_step_timing in s:" in text:
        return "nemo"
    if re.search(r"step:\s*\d+\s+loss:", text) and "tps:" in text:
        return "torchtitan"
    if "SamplesPerSec=" in text:
        return "deepspeed"
    if ((_AUTOMODEL_STEP.search(text) and "tps" in text) or "Max iter time:" in text or _AUTOMODEL_AVERAGE.search(text)
            or _automodel_jsonl(text)):
        return "automodel"
    if "train_samples_per_second" in text or "train_runtime" in text:
        return "hf_trainer"
    raise PlannerError("not a log planner can read: no Megatron-LM or NeMo iteration line, torchtitan step line, "
                       "DeepSpeed timer line, Hugging Face Trainer metrics or NeMo AutoModel step line; give the "
                       "format with --log-format",
                       source=source)


def _measure(text: str, source: str, line: int | None, what: str) -> float:
    """A measured figure (a step time, a throughput, a peak): a _number that must be positive, for a zero or
    negative one says the run measured nothing (a counter not started, a garbled line)."""
    value = _number(text, source, line, what)
    if value <= 0:
        raise PlannerError(f"{what} is {text.strip()}: a measured step time, throughput or memory figure must be "
                           "positive; is this a finished, steady-state step?", source=source,
                           field=f"line {line}" if line is not None else None)
    return value


def _number(text: str, source: str, line: int | None, what: str) -> float:
    """A figure the log prints (thousands separators allowed); PlannerError naming the log and line when it is
    not a finite number (a garbled or interleaved line, nan, inf)."""
    where = f"line {line}" if line is not None else None
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        raise PlannerError(f"{what} is not a number: {text!r}; is the line garbled (two ranks writing at once)?",
                           source=source, field=where) from None
    if not math.isfinite(value):
        raise PlannerError(f"{what} is not a finite number: {text!r}", source=source, field=where)
    return value


def _peak(steps: list[LogStep]) -> float | None:
    """The largest memory figure of the steps that print one (None when none does)."""
    memory = [s.memory_bytes for s in steps if s.memory_bytes is not None]
    return max(memory) if memory else None


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(statistics.median(present)) if present else None


def _steady(steps: list[LogStep], fmt: str, source: str, warmup: int) -> list[LogStep]:
    if not steps:
        raise PlannerError(f"holds no usable step: no {fmt} line; is this the training log (rank 0)?", source=source)
    ordered = sorted(steps, key=lambda s: s.step)
    used = [s for s in ordered[1:] if s.step > warmup]
    if not used:
        numbers = ", ".join(str(s.step) for s in ordered)
        raise PlannerError(f"holds no usable step: the logged steps ({numbers}) are all warm-up (the first logged "
                           f"step and steps <= {warmup} are left out); log a longer run", source=source)
    return used


_ITERATION = re.compile(r"iteration\s+(\d+)/\s*\d+\s*\|(.*)$")


def _iteration_fields(rest: str) -> dict[str, str]:
    """The `name: value | name: value | ...` fields after an iteration line's `iteration i/N |` (Megatron-LM and NeMo
    print their step figures so), each name and value stripped; a field without a value is left out."""
    return {k.strip(): v.strip() for k, _, v in (part.partition(":") for part in rest.split("|")) if v}
_MEMORY = re.compile(r"\(after (\d+) iterations\) memory \((MB|GB)\)(.*)$")
_ARGUMENT = re.compile(r"^\s{1,4}([A-Za-z_][A-Za-z0-9_]*) \.{2,} ?(.*?)\s*$")
_WORLD = re.compile(r"using world size: (\d+)")
# `using world size` line degrees; `encoder-tensor-model-parallel size` is not the tensor-parallel degree. No word
# boundary before the name: Megatron-Core (2024-25) prints `hierarchical context-parallel sizes: Nonetensor-model-
# parallel size: 4` without a separator.
_DEGREE = re.compile(r"(?<!encoder-)(data-parallel|context-parallel|tensor-model-parallel|pipeline-model-parallel)"
                     r"[- ]size: (\d+)")
_PARAMS_DTYPE = re.compile(r"using torch\.(float16|bfloat16) for parameters")
_PADDED_VOCAB = re.compile(r"padded vocab \(size: (\d+)\) with (\d+) dummy tokens \(new size: (\d+)\)")


def _megatron(text: str, source: str, warmup: int) -> LogReading:
    steps: list[LogStep] = []
    peak: float | None = None
    args: dict[str, str] = {}
    startup: dict[str, str] = {}
    in_args = complete = False
    world = None
    for number, line in enumerate(text.splitlines(), 1):
        if "------------------------ arguments" in line:
            in_args = True
            continue
        if "-------------------- end of arguments" in line:
            in_args, complete = False, True
            continue
        if in_args:
            m = _ARGUMENT.match(line)
            if m:
                args[m.group(1)] = m.group(2)
                continue
            in_args = False
        m = _WORLD.search(line)
        if m:
            world = int(m.group(1))
            for degree in _DEGREE.finditer(line):
                startup[degree.group(1).replace("-", "_") + "_size"] = degree.group(2)
            continue
        m = _PARAMS_DTYPE.search(line)
        if m:
            startup["bf16" if m.group(1) == "bfloat16" else "fp16"] = "True"
            continue
        m = _PADDED_VOCAB.search(line)
        if m:
            startup["padded_vocab_size"] = m.group(3)
            continue
        m = _ITERATION.search(line)
        if m:
            fields = _iteration_fields(m.group(2))
            ms = fields.get("elapsed time per iteration (ms)")
            if fields.get("global batch size", "").isdigit():  # the batch of the step (a ramp-up changes it)
                startup["global_batch_size"] = fields["global batch size"]
            tflops = fields.get("throughput per GPU (TFLOP/s/GPU)")
            steps.append(LogStep(
                step=int(m.group(1)),
                step_seconds=_measure(ms, source, number, "elapsed time per iteration (ms)") / 1e3 if ms else None,
                tflops_per_gpu=_measure(tflops, source, number, "throughput per GPU (TFLOP/s/GPU)") if tflops else None))
            continue
        m = _MEMORY.search(line)
        if m:
            unit = MIB if m.group(2) == "MB" else GIB
            for part in m.group(3).split("|"):
                key, _, value = part.partition(":")
                if key.strip().replace("-gigabytes", "") in ("max reserved", "max_reserved", "max allocated",
                                                              "max_allocated") and value.strip():
                    peak = max(peak or 0.0, _measure(value.strip(), source, number, key.strip()) * unit)
    used = _steady(steps, "Megatron-LM iteration", source, warmup)
    if not any(s.step_seconds for s in used):
        raise PlannerError("the iteration lines carry no 'elapsed time per iteration (ms)'", source=source)
    return LogReading(
        format="megatron", source=source, steps_logged=len(steps), steps_used=tuple(s.step for s in used),
        step_seconds=_median([s.step_seconds for s in used]), tflops_per_gpu=_median([s.tflops_per_gpu for s in used]),
        step_seconds_logged=tuple(s.step_seconds for s in used if s.step_seconds is not None),
        peak_memory_bytes=peak, world_size=world, arguments=args, arguments_complete=complete, startup=startup,
        bridge_config=megatron_bridge.config_block(text),
    )


def _nemo(text: str, source: str, warmup: int) -> LogReading:
    steps: dict[int, LogStep] = {}
    startup: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        m = _ITERATION.search(line)
        if not m or "train_step_timing in s:" not in line:
            continue
        fields = _iteration_fields(m.group(2))
        step = int(fields["global_step"]) if fields.get("global_step", "").isdigit() else int(m.group(1))
        if fields.get("global_batch_size", "").isdigit():
            startup["global_batch_size"] = fields["global_batch_size"]
        tokens = fields.get("tokens_per_sec_per_gpu")
        steps.setdefault(step, LogStep(
            step=step, step_seconds=_measure(fields["train_step_timing in s"], source, number, "train_step_timing in s"),
            tokens_per_second_per_gpu=_measure(tokens, source, number, "tokens_per_sec_per_gpu") if tokens else None))
    used = _steady(list(steps.values()), "NeMo 'train_step_timing in s'", source, warmup)
    return LogReading(
        format="nemo", source=source, steps_logged=len(steps), steps_used=tuple(s.step for s in used),
        step_seconds=_median([s.step_seconds for s in used]),
        step_seconds_logged=tuple(s.step_seconds for s in used if s.step_seconds is not None),
        tokens_per_second_per_gpu=_median([s.tokens_per_second_per_gpu for s in used]), startup=startup,
    )


# A torchtitan step line, field by field in this order: `step: n ... memory: x GiB ... tps: t [... tflops: f]
# [... mfu: m%]`. One pattern with `.*?` between the fields backtracked cubically on a line of repeated
# `step: 1 memory: 1 GiB` with no tps (an 11 KB line took 9 s, 22 KB 70 s); each field is searched for after
# the one before instead, which takes the same (leftmost) match in linear time.
_TITAN_FIELDS = (re.compile(r"step:\s*(\d+)\s"), re.compile(r"memory:\s*([\d.]+)\s*GiB"), re.compile(r"tps:\s*([\d,]+)"))
_TITAN_TFLOPS = re.compile(r"tflops:\s*([\d.,]+)")
_TITAN_MFU = re.compile(r"mfu:\s*([\d.]+)%")


def _titan_line(line: str) -> tuple[str, str, str, str | None, str | None] | None:
    """The step, memory, tps, tflops and mfu figures of a torchtitan step line, or None when it is not one."""
    found: list[str] = []
    at = 0
    for pattern in _TITAN_FIELDS:
        m = pattern.search(line, at)
        if m is None:
            return None
        found.append(m.group(1))
        at = m.end()
    tflops = _TITAN_TFLOPS.search(line, at)
    mfu = _TITAN_MFU.search(line, tflops.end() if tflops else at)
    return found[0], found[1], found[2], tflops.group(1) if tflops else None, mfu.group(1) if mfu else None


def _declared(text: str | None, source: str, line: int, what: str) -> float | None:
    """A figure torchtitan derives from the model's declared FLOPs per token: None where it is absent or printed
    as zero (no FLOP count declared), else a finite, non-negative number."""
    if text is None:
        return None
    value = _number(text, source, line, what)
    if value < 0:
        raise PlannerError(f"{what} is {text}: it cannot be negative; is the line garbled?", source=source,
                           field=f"line {line}")
    return value if value > 0 else None


def _torchtitan(text: str, source: str, warmup: int) -> LogReading:
    steps: dict[int, LogStep] = {}
    no_flops = False
    for number, line in enumerate(text.splitlines(), 1):
        fields = _titan_line(line)
        if fields:
            step, gib, tps, tflops, mfu = fields
            n = int(step)
            tflops_value = _declared(tflops, source, number, "tflops")
            no_flops = no_flops or (tflops is not None and tflops_value is None)
            mfu_value = _declared(mfu, source, number, "mfu")
            steps.setdefault(n, LogStep(
                step=n, tokens_per_second_per_gpu=_measure(tps, source, number, "tps"),
                memory_bytes=_measure(gib, source, number, "memory") * GIB,
                tflops_per_gpu=tflops_value, mfu=mfu_value / 100 if mfu_value is not None else None,
            ))  # one line per rank: the first of each step stands for it
    used = _steady(list(steps.values()), "torchtitan step", source, warmup)
    warnings = ("torchtitan printed tflops 0: the model declares no FLOP count per token, so only tps and memory "
                "are read",) if no_flops else ()
    return LogReading(
        format="torchtitan", source=source, steps_logged=len(steps), steps_used=tuple(s.step for s in used),
        tokens_per_second_per_gpu=_median([s.tokens_per_second_per_gpu for s in used]),
        tflops_per_gpu=_median([s.tflops_per_gpu for s in used]), peak_memory_bytes=_peak(used), warnings=warnings,
    )


# (?<!\d): a match starts where a number does, so a long run of digits is scanned once, not once per digit. The
# step is the global (optimizer) step where the line names it (2023 on), else the second number of `e/step`.
_DS = re.compile(r"(?:(?<!\d)\d+/(\d+)|epoch=\d+/micro_step=\d+/global_step=(\d+)), "
                 r"(?:RunningAvgSamplesPerSec=[\d.eE+-]+, )?(?:Curr)?SamplesPerSec=([\d.eE+-]+)"
                 r"(?:, MemAllocated=([\d.]+)GB, MaxMemAllocated=([\d.]+)GB)?")


def _deepspeed(text: str, source: str, warmup: int) -> LogReading:
    steps: dict[int, LogStep] = {}
    for number, line in enumerate(text.splitlines(), 1):
        m = _DS.search(line)
        if m:
            n = int(m.group(1) or m.group(2))
            steps.setdefault(n, LogStep(
                step=n, samples_per_second=_measure(m.group(3), source, number, "SamplesPerSec"),
                memory_bytes=_measure(m.group(5), source, number, "MaxMemAllocated") * GIB if m.group(5) else None))
    used = _steady(list(steps.values()), "DeepSpeed timer", source, warmup)
    peak = _peak(used)
    return LogReading(
        format="deepspeed", source=source, steps_logged=len(steps), steps_used=tuple(s.step for s in used),
        samples_per_second=_median([s.samples_per_second for s in used]), peak_memory_bytes=peak,
        warnings=("DeepSpeed's MaxMemAllocated counts allocated tensors, not the allocator's reserve",)
        if peak is not None else (),
    )


_HF_BLOCK = re.compile(r"^\s*(train_[a-z_]+|epoch)\s*=\s*(\S+)\s*$")
# The metrics as printed (a Python dict: single quotes) or as Trainer.save_metrics writes them (JSON)
_HF_METRICS = re.compile(r"\{[^{}]*['\"]train_runtime['\"][^{}]*\}", flags=re.S)
# A scalar printed through its repr: numpy 2 (`np.float64(1.5)`) or torch (`tensor(1.5)`, with a device or dtype)
_SCALAR_REPR = re.compile(r"\b(?:np|numpy)\.(?:float|int)(?:16|32|64)\(([^()]*)\)|\btensor\(([^(),]*)(?:,[^()]*)?\)")


def _metrics_dict(text: str) -> dict[str, Any] | None:
    """The Trainer's metrics from one printed dict or JSON object; None when it is not one."""
    try:
        found = json.loads(text)
    except ValueError:
        try:
            found = ast.literal_eval(_SCALAR_REPR.sub(lambda m: m.group(1) or m.group(2), text))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # TypeError: `{[1]: 2}`
            return None
    return found if isinstance(found, dict) else None


def _hf_trainer(text: str, source: str, warmup: int) -> LogReading:
    metrics: dict[str, Any] = {}
    for m in _HF_METRICS.finditer(text):
        found = _metrics_dict(m.group(0))
        if found is not None:
            metrics = found
    if not metrics:
        for line in text.splitlines():
            block = _HF_BLOCK.match(line)
            if block:
                metrics[block.group(1)] = block.group(2)
    if "train_samples_per_second" not in metrics and "train_steps_per_second" not in metrics:
        raise PlannerError("holds no usable step: no train_samples_per_second or train_steps_per_second (the "
                           "Trainer prints them when training ends); log a finished run", source=source)

    def value(key: str) -> float | None:
        return _measure(str(metrics[key]), source, None, key) if key in metrics else None

    steps = value("train_steps_per_second")
    warnings = ["the Trainer's figures average the whole run, warm-up steps included; they cannot be left out"]
    if steps is None:
        warnings.append("no train_steps_per_second: before transformers 4.7 (PR #11818) the Trainer printed steps "
                        "per second as train_samples_per_second; check which one this log holds")
    return LogReading(
        format="hf_trainer", source=source, steps_logged=1, steps_used=(), samples_per_second=value("train_samples_per_second"),
        steps_per_second=steps, step_seconds=1.0 / steps if steps else None, warnings=tuple(warnings),
    )


# NeMo AutoModel's step line, field by field (as torchtitan's, one search after another): `step n | epoch e |`, then
# `mem[:] x GiB`, then `tps t`, with `(r/gpu)` after it (2025-08-28 on) or `/gpu` instead of the job's figure.
_AUTOMODEL_STEP = re.compile(r"\bstep\s+(\d+)\s*\|\s*epoch\s+\d+\s*\|")
_AUTOMODEL_MEMORY = re.compile(r"\|\s*mem:?\s*([^\s|]+)\s*GiB")
_AUTOMODEL_TPS = re.compile(r"\|\s*tps:?\s*([^\s|(/]+)(?:\(([^\s|)/]+)/gpu\)|(/gpu))?")
_AUTOMODEL_ITERATION = re.compile(r"\bIteration (\d+) \|")
_AUTOMODEL_BENCH_MEMORY = re.compile(r"Max Memory Allocated: ([^\s|]+) GB")
_AUTOMODEL_ITER_TIME = re.compile(r"Max iter time: ([^\s]+) seconds")
_AUTOMODEL_AVERAGE = re.compile(r"Average iteration time: ([^\s]+) seconds \((?:excluding first \d+ warmup|all \d+) "
                                r"iterations\)")


def _automodel_jsonl(text: str) -> bool:
    """Whether the text is AutoModel's training.jsonl: its first line a JSON object with a step and tps."""
    first = text.lstrip()[:4096].split("\n", 1)[0].strip()
    if not first.startswith("{"):
        return False
    try:
        record = json.loads(first)
    except ValueError:
        return False
    return isinstance(record, dict) and "step" in record and "tps" in record


def _automodel(text: str, source: str, warmup: int) -> LogReading:
    if _automodel_jsonl(text):
        return _automodel_records(text, source, warmup)
    if "Max iter time:" in text or _AUTOMODEL_AVERAGE.search(text):
        return _automodel_benchmark(text, source, warmup)
    steps: dict[int, LogStep] = {}
    job_rate: dict[int, float] = {}
    rank_rate: dict[int, float] = {}
    bare = False
    for number, line in enumerate(text.splitlines(), 1):
        m = _AUTOMODEL_STEP.search(line)
        if m is None or "[val]" in line[:m.start()]:
            continue
        mem = _AUTOMODEL_MEMORY.search(line, m.end())
        tps = _AUTOMODEL_TPS.search(line, m.end())
        if tps is None:
            continue
        n = int(m.group(1))
        if n in steps:
            continue  # one line per rank where every rank logs: the first stands for the step
        rate = _measure(tps.group(1), source, number, "tps")
        if tps.group(2):  # `tps t(r/gpu)`: the whole job's
            job_rate[n] = rate
        else:  # `tps r/gpu`, or `tps r`: a rank's own tokens (see the module docstring)
            rank_rate[n] = rate
            bare = bare or not tps.group(3)
        steps[n] = LogStep(step=n, memory_bytes=_measure(mem.group(1), source, number, "mem") * GIB if mem else None)
    used = _steady(list(steps.values()), "NeMo AutoModel step", source, warmup)
    peak = _peak(used)
    warnings = [_AUTOMODEL_ALLOCATED] if peak is not None else []
    if job_rate or rank_rate:
        warnings.append("NeMo AutoModel's tps counts a step's tokens less tail padding: read as the job's global batch "
                        "x seq_len over it, right for packed or full-length sequences and too slow where they are "
                        "padded; the training.jsonl beside the checkpoints gives each step's time exactly")
    if bare:
        warnings.append("the step lines print tps without '/gpu': read as one data-parallel rank's tokens per second, "
                        "as NeMo AutoModel printed it until 2025-08-22 (from #376, 2025-08-23, to #399, 2025-08-28, "
                        "it printed the whole job's); give measured.tokens_per_second_per_gpu if this log is from "
                        "that week")
    return LogReading(
        format="automodel", source=source, steps_logged=len(steps), steps_used=tuple(s.step for s in used),
        tokens_per_second=_median([job_rate.get(s.step) for s in used]),
        tokens_per_second_per_data_rank=_median([rank_rate.get(s.step) for s in used]),
        peak_memory_bytes=peak, warnings=tuple(warnings),
    )


_AUTOMODEL_ALLOCATED = ("NeMo AutoModel's mem is torch's max_memory_allocated (tensors), not the allocator's reserve; "
                        "the reserve is larger by the allocator's fragmentation")


def _automodel_records(text: str, source: str, warmup: int) -> LogReading:
    """training.jsonl: a step's seconds are its num_tokens_per_step over its tps (the same tokens and the same
    wall time), where the record has both; else the job's tps."""
    steps: dict[int, LogStep] = {}
    job_rate: dict[int, float] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise PlannerError("is not a JSON object: training.jsonl holds one per line; is the file cut short?",
                               source=source, field=f"line {number}") from None
        if not isinstance(record, dict) or "tps" not in record or "step" not in record:
            continue
        step = record["step"]
        if isinstance(step, bool) or not isinstance(step, int):
            raise PlannerError(f"step is {short_repr(step)}: a step number is an integer", source=source,
                               field=f"line {number}")
        tps = _measure(str(record["tps"]), source, number, "tps")
        tokens = record.get("num_tokens_per_step")
        step_seconds = _measure(str(tokens), source, number, "num_tokens_per_step") / tps if tokens is not None else None
        mem = record.get("mem")
        if step not in steps:
            job_rate[step] = tps
            steps[step] = LogStep(step=step, step_seconds=step_seconds,
                                  memory_bytes=_measure(str(mem), source, number, "mem") * GIB if mem is not None else None)
    used = _steady(list(steps.values()), "NeMo AutoModel training.jsonl record", source, warmup)
    peak = _peak(used)
    seconds = [s.step_seconds for s in used]
    exact = all(v is not None for v in seconds)
    return LogReading(
        format="automodel", source=source, steps_logged=len(steps), steps_used=tuple(s.step for s in used),
        step_seconds=_median(seconds) if exact else None,
        step_seconds_logged=tuple(v for v in seconds if v is not None) if exact else (),
        tokens_per_second=None if exact else _median([job_rate[s.step] for s in used]),
        peak_memory_bytes=peak, warnings=(_AUTOMODEL_ALLOCATED,) if peak is not None else (),
    )


def _automodel_benchmark(text: str, source: str, warmup: int) -> LogReading:
    """The benchmark recipe's lines: each iteration's `Max iter time` (after its `Iteration i` line), the peak
    allocated memory it prints (never reset there, so the last is the run's); only the `Average iteration time`
    where no iteration's time is printed (it already leaves the recipe's own warm-up iterations out)."""
    steps: dict[int, LogStep] = {}
    iteration: int | None = None
    memory: float | None = None
    average: float | None = None
    for number, line in enumerate(text.splitlines(), 1):
        m = _AUTOMODEL_ITERATION.search(line)
        if m:
            iteration = int(m.group(1))
            found = _AUTOMODEL_BENCH_MEMORY.search(line, m.end())
            if found:
                memory = max(memory or 0.0, _measure(found.group(1), source, number, "Max Memory Allocated") * GIB)
            continue
        m = _AUTOMODEL_ITER_TIME.search(line)
        if m and iteration is not None and iteration not in steps:
            steps[iteration] = LogStep(step=iteration, step_seconds=_measure(m.group(1), source, number, "Max iter time"))
            continue
        m = _AUTOMODEL_AVERAGE.search(line)
        if m:
            average = _measure(m.group(1), source, number, "Average iteration time")
    warnings = (_AUTOMODEL_ALLOCATED,) if memory is not None else ()
    if not steps and average is not None:
        return LogReading(format="automodel", source=source, steps_logged=0, steps_used=(), step_seconds=average,
                          peak_memory_bytes=memory, warnings=(*warnings, "no iteration's time is printed: the "
                          "benchmark's average iteration time is read, over the iterations it times"))
    used = _steady(list(steps.values()), "NeMo AutoModel benchmark 'Max iter time'", source, warmup)
    return LogReading(
        format="automodel", source=source, steps_logged=len(steps), steps_used=tuple(s.step for s in used),
        step_seconds=_median([s.step_seconds for s in used]),
        step_seconds_logged=tuple(s.step_seconds for s in used if s.step_seconds is not None),
        peak_memory_bytes=memory, warnings=warnings,
    )


_READERS = {"megatron": _megatron, "nemo": _nemo, "torchtitan": _torchtitan, "deepspeed": _deepspeed, "hf_trainer": _hf_trainer,
            "automodel": _automodel}


def read_log(text: str, source: str, fmt: str | None = None, *, warmup_steps: int = WARMUP_STEPS) -> LogReading:
    """The steady-state figures of a training log; PlannerError when it holds no usable step."""
    text = plain_text(text)
    fmt = fmt or _detect_plain(text, source)
    if fmt not in _READERS:
        raise PlannerError(f"unknown log format '{fmt}'; use one of {', '.join(LOG_FORMATS)}", source=source)
    return _READERS[fmt](text, source, warmup_steps)


# Megatron's printed arguments -> the flags planner's Megatron importer reads ------------------------------
# Printed twice after Megatron-LM's validate_args copies one into the other (GPT: encoder_* = the model's own);
# the importer, reading flags as given on a command line, refuses both at once, so the copy is dropped.
_DERIVED_COPIES = (("encoder_num_layers", "num_layers"), ("encoder_seq_length", "seq_length"))

# What a Megatron-LM log must print for planner to build the run's job from it alone, by the job field that
# can stand in for it. The model's own (num_layers ...) only when the job names no model.
MEGATRON_MODEL_ARGUMENTS = ("num_layers", "hidden_size", "num_attention_heads")
MEGATRON_LAYOUT_ARGUMENTS = (("seq_length", "training.seq_len"), ("micro_batch_size", "parallel.micro_batch"),
                             ("global_batch_size", "training.global_batch"), ("tensor_model_parallel_size",
                             "parallel.tp"), ("pipeline_model_parallel_size", "parallel.pp"))


def megatron_job_arguments(reading: LogReading) -> dict[str, str]:
    """The run's Megatron arguments: the printed block, completed from the other start-up lines (the
    degrees of the world-size line, the parameter dtype, the padded vocabulary) where it lacks them, less
    the copies validate_args makes. `transformer_impl local` without flash attention is Megatron-LM's own
    unfused attention (megatron/model/transformer.py CoreAttention), said as `attention_backend unfused`; Muon's
    layer-wise distributed optimizer and its QKV split are said as the flags that ask for them."""
    args = dict(reading.arguments)
    for name, value in reading.startup.items():
        args.setdefault(name, value)
    for copy, own in _DERIVED_COPIES:
        if copy in args and own in args:
            del args[copy]
    # an emerging optimizer with --use-distributed-optimizer prints use_distributed_optimizer False and
    # use_layer_wise_distributed_optimizer True (megatron/training/arguments.py @ d98e8a64, the emerging-optimizer
    # check): its layer-wise distributed optimizer, which the importer reads from --use-distributed-optimizer
    if args.get("use_layer_wise_distributed_optimizer") == "True":
        args["use_distributed_optimizer"] = "True"
    if args.get("muon_split_qkv") == "False":  # printed under its dest; the flag is --muon-no-split-qkv
        args["muon_no_split_qkv"] = "True"
    backend = args.get("attention_backend", "")
    if "." in backend:  # printed as the enum member, e.g. AttnBackend.auto
        args["attention_backend"] = backend.rsplit(".", 1)[1]
    if (args.get("transformer_impl") == "local" and args.get("use_flash_attn") != "True"
            and "attention_backend" not in args):
        args["attention_backend"] = "unfused"
    return args


def missing_megatron_arguments(arguments: dict[str, str], job: dict[str, Any]) -> list[str]:
    """The arguments a Megatron-LM log lacks for its run, each with the job field that can give it instead
    (none when the job gives it)."""
    parallel, training = job.get("parallel") or {}, job.get("training") or {}
    given = {f"parallel.{k}" for k in parallel} | {f"training.{k}" for k in training}
    missing = [] if job.get("model") else [n for n in MEGATRON_MODEL_ARGUMENTS if arguments.get(n, "None") == "None"]
    for name, field_name in MEGATRON_LAYOUT_ARGUMENTS:
        if arguments.get(name, "None") == "None" and field_name not in given:
            missing.append(f"{name} (or {field_name})")
    return missing


def megatron_flags(arguments: dict[str, str], read_flags: dict[str, str]) -> list[str]:
    """The printed `arguments` block as command-line flags, only those in `read_flags` (flag -> kind)."""
    tokens: list[str] = []
    for name, raw in arguments.items():
        flag = name.replace("_", "-")
        kind = read_flags.get(flag)
        if kind is None or raw in ("None", ""):
            continue
        if kind == "bool":
            if raw == "True":
                tokens.append(f"--{flag}")
            continue
        if kind == "list":
            try:
                items = ast.literal_eval(raw)
            except (ValueError, SyntaxError):
                continue
            if items:
                tokens += [f"--{flag}", *(str(i) for i in items)]
            continue
        tokens += [f"--{flag}", raw]
    return tokens


def hf_training_arguments_fields(args: dict[str, Any], gpus: int) -> dict[str, Any]:
    """Layout fields from a Hugging Face TrainingArguments dump (`TrainingArguments.to_dict()`, JSON/YAML)."""
    out: dict[str, Any] = {}
    micro = args.get("per_device_train_batch_size")
    if micro:
        out["micro_batch"] = int(micro)
        out["global_batch"] = int(micro) * int(args.get("gradient_accumulation_steps") or 1) * gpus
    if args.get("bf16"):
        out["dtype"] = "bf16"
    elif args.get("fp16"):
        out["dtype"] = "fp16"
    if args.get("gradient_checkpointing"):
        out["recompute"] = "full"
    optim = str(args.get("optim") or "").removeprefix("OptimizerNames.").lower()  # printed as the enum or its value
    if optim in hf_trainer.OPTIMIZERS:
        out.update(hf_trainer.optimizer_fields(optim))
    fsdp = args.get("fsdp") or ""
    fsdp_text = " ".join(fsdp) if isinstance(fsdp, list) else str(fsdp)
    if "full_shard" in fsdp_text:
        out["zero"] = 3
    elif "shard_grad_op" in fsdp_text:
        out["zero"] = 2
    return out
