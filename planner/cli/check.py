"""`planner check` (the CI gate), `planner export` (launch configs) and `planner schema` (JSON Schemas).

Thin: jobs are resolved by `planner.engines.job`, estimated by the cost model, diagnosed
and fixed by `planner.search.suggest`, exported by `planner.exporters`; this module parses
options and renders. Exit codes of `check`: 0 every job fits, 1 some job does not, 2 bad input.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from planner.cli import cli
from planner.cli.options import (
    COMPUTE_DTYPES,
    HEADROOM,
    Count,
    attention_kernel_option,
    count,
    echo_json,
    engine_option,
    fp8_recipe_option,
    moe_layout_options,
    warn_if_far,
)
from planner.errors import PlannerError
from planner.specs.layout import LORA_TARGETS, MUON_TP_MODE_CODES, OPTIMIZER_CODES

if TYPE_CHECKING:
    from pydantic import BaseModel

    from planner.engines.job import ResolvedJob
    from planner.search.suggest import Diagnosis, EngineMapper, Suggestion
    from planner.specs.job import Job
    from planner.training.estimate import TrainingEstimate

GIB = float(1 << 30)
ENGINE_OPTIONS = {"deepspeed": "deepspeed", "megatron_args": "megatron", "torchtitan": "torchtitan",
                  "hf_trainer": "hf_trainer", "accelerate_config": "accelerate", "automodel": "automodel"}
# Layout flags, named as `planner estimate` names them; for direct engine checks they give what the file lacks.
PARALLEL_FLAGS = ("tp", "pp", "cp", "dp", "ep", "zero", "sequence_parallel", "recompute", "recompute_layers_per_stage",
                  "micro_batch", "interleave", "microbatch_group_size", "schedule", "flash_attention", "attention_kernel", "overlap_grad_reduce",
                  "overlap_tp_comm", "offload_optimizer", "offload_params", "offload_activation_layers", "recompute_modules", "shard_group",
                  "etp", "moe_dispatcher", "moe_ep_overlap", "moe_delay_wgrad", "moe_shared_expert_overlap", "moe_capacity_factor",
                  "moe_load_imbalance",
                  "cuda_graph_scope", "mtp_layers", "moe_fused_mlp")
TRAINING_FLAGS = ("global_batch", "seq_len", "dtype", "fp8_recipe", "fp8_param_gather", "fp8_attention", "grad_dtype",
                  "optimizer", "engine", "compile",
                  "optimizer_state_dtype", "master_weights_dtype", "muon_ns_steps", "muon_tp_mode", "muon_split_qkv",
                  "lora_rank", "lora_targets")


def layout_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--model/--hardware/--gpus and the layout flags of `planner estimate`."""
    options = [
        click.option("--model", "-m", "model_ref", metavar="MODEL", help="Catalog id, our YAML spec or an HF config.json."),
        click.option("--hardware", "-w", "hardware_ref", metavar="HW", help="Hardware catalog id or YAML profile."),
        click.option("--gpus", type=count("gpus"), help="Total GPUs."),
        click.option("--tp", type=count("tp"), help="Tensor-parallel degree."),
        click.option("--pp", type=count("pp"), help="Pipeline-parallel degree."),
        click.option("--cp", type=count("cp"), help="Context-parallel degree."),
        click.option("--dp", type=count("dp"), help="Data-parallel degree (derived when omitted)."),
        click.option("--ep", type=count("ep"), help="Expert-parallel degree."),
        click.option("--zero", type=click.IntRange(0, 3), help="ZeRO stage 0-3."),
        click.option("--sequence-parallel/--no-sequence-parallel", default=None, help="Megatron sequence parallelism."),
        click.option("--recompute", type=click.Choice(["none", "selective", "full", "op"]),
                     help="Activation recomputation (op: torchtitan op-level selective AC)."),
        click.option("--recompute-layers", "recompute_layers_per_stage", type=count("recompute_layers"),
                     help="With --recompute full: layers per stage recomputed (Megatron 'block')."),
        click.option("--micro-batch", type=count("micro_batch"), help="Sequences per micro-batch."),
        click.option("--global-batch", type=count("global_batch"), help="Sequences per optimizer step."),
        click.option("--seq-len", type=count("seq_len"), help="Tokens per sequence."),
        click.option("--interleave", type=count("interleave"), help="Virtual pipeline stages per rank."),
        click.option("--microbatch-group-size", type=count("microbatch_group_size"),
                     help="With --interleave: micro-batches each virtual stage runs in a row  [default: pp]"),
        click.option("--schedule", type=click.Choice(["1f1b", "gpipe"]), help="Pipeline schedule."),
        click.option("--dtype", type=click.Choice(COMPUTE_DTYPES), help="Compute precision."),
        fp8_recipe_option(),
        click.option("--fp8-param-gather/--no-fp8-param-gather", default=None,
                     help="With --dtype fp8 (fp4): the layers' weights gathered in fp8 (Megatron --fp8-param-gather; "
                     "torchtitan: torchao's float8 all-gather)."),
        click.option("--fp8-attention/--no-fp8-attention", default=None,
                     help="With --dtype fp8: Transformer Engine's FP8 attention (Megatron --fp8-dot-product-attention)."),
        click.option("--grad-dtype", type=click.Choice(["bf16", "fp16", "fp32"]), help="Gradient precision."),
        click.option("--optimizer", type=click.Choice(list(OPTIMIZER_CODES)), help="Optimizer."),
        click.option("--muon-ns-steps", type=Count("ns_steps"), help="With --optimizer muon: Newton-Schulz iterations."),
        click.option("--muon-tp-mode", type=click.Choice(list(MUON_TP_MODE_CODES)),
                     help="With --optimizer muon: how a TP-split matrix is orthogonalised."),
        click.option("--muon-split-qkv/--no-muon-split-qkv", default=None,
                     help="With --optimizer muon: QKV orthogonalised as its Q, K and V parts."),
        click.option("--lora-rank", type=Count("width"), help="LoRA fine-tuning: the adapters' rank."),
        click.option("--lora-targets", type=click.Choice(list(LORA_TARGETS)),
                     help="With --lora-rank: all_linear, attention or qkv."),
        click.option("--flash-attention/--no-flash-attention", default=None, help="Fused attention."),
        attention_kernel_option(),
        click.option("--overlap-grad-reduce/--no-overlap-grad-reduce", default=None,
                     help="Gradient reduction overlaps backward."),
        click.option("--tp-comm-overlap/--no-tp-comm-overlap", "overlap_tp_comm", default=None,
                     help="Tensor-parallel communication overlaps the GEMMs."),
        engine_option(default=None),
        click.option("--offload-optimizer/--no-offload-optimizer", default=None,
                     help="Optimizer states and their step on the CPU."),
        click.option("--offload-params/--no-offload-params", default=None, help="Parameter shards on the host (zero 3)."),
        click.option("--offload-activation-layers", type=Count("layers", minimum=0),
                     help="Layers per stage whose activations go to the host."),
        click.option("--shard-group", type=count("shard_group"),
                     help="Hybrid sharding (HSDP): ZeRO shard group size (dp x cp ranks)."),
        click.option("--recompute-modules", callback=lambda ctx, param, v: None if v is None else tuple(
                     m.strip() for m in v.split(",") if m.strip()), metavar="LIST",
                     help="With --recompute selective: Megatron --recompute-modules, comma list."),
        click.option("--compile/--no-compile", "compile", default=None, help="torch.compile on (torch engines)."),
        click.option("--headroom", type=HEADROOM,
                     help="Share of device memory kept free (default: the cost model's)."),
        click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     metavar="FILE", help="A profile overlay from 'planner calibrate' (overrides a job's profile:)."),
    ]
    for option in reversed(options):
        func = option(func)
    return moe_layout_options(func)


def _job_from_flags(kw: dict[str, Any], engine: dict[str, Any] | None, what: str) -> Job:
    from planner.specs.job import Job
    from planner.specs.validation import validate_spec

    for name in ("hardware_ref", "gpus"):
        if kw.get(name) is None:
            raise click.UsageError(f"{what} needs --{name.removesuffix('_ref')}")
    data: dict[str, Any] = {
        "model": kw.get("model_ref"), "hardware": kw["hardware_ref"], "gpus": kw["gpus"],
        "parallel": {k: kw[k] for k in PARALLEL_FLAGS if kw.get(k) is not None},
        "training": {k: kw[k] for k in TRAINING_FLAGS if kw.get(k) is not None},
        "headroom": kw.get("headroom"),
    }
    if engine:
        data["engine"] = engine
    return validate_spec(Job, {k: v for k, v in data.items() if v is not None}, "command line")


FLAG_NAMES = {"recompute_layers_per_stage": "--recompute-layers", "overlap_tp_comm": "--tp-comm-overlap"}


def _flags_given(kw: dict[str, Any]) -> list[str]:
    names = ("model_ref", "hardware_ref", "gpus", *PARALLEL_FLAGS, *TRAINING_FLAGS, "headroom")
    return [FLAG_NAMES.get(n, "--" + n.removesuffix("_ref").replace("_", "-")) for n in names if kw.get(n) is not None]


# check --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Checked:
    job: ResolvedJob
    estimate: TrainingEstimate
    diagnosis: Diagnosis | None  # set exactly when the estimate does not fit
    suggestions: tuple[Suggestion, ...]
    searched: bool = True  # False with --no-suggest: no changes were looked for

    def to_json(self) -> dict[str, Any]:
        from planner.physics.params import count_params

        counted = count_params(self.job.model)
        data: dict[str, Any] = {"job": self.job.source, "model": self.job.model_id, "hardware": self.job.hardware_id,
                                "params": counted.total, "active_params": counted.active}
        data.update(self.estimate.to_json())
        data["warnings"] = list(self.job.warnings)
        if not self.estimate.fits:
            assert self.diagnosis is not None  # run_checks diagnoses every job that does not fit
            data["diagnosis"] = self.diagnosis.to_json()
            data["suggestions"] = [s.to_json() for s in self.suggestions]
        return data


def run_checks(resolved: list[ResolvedJob], *, suggest: bool = True) -> list[Checked]:
    """Estimate every job; diagnose and fix those that do not fit."""
    from planner.search.suggest import diagnose
    from planner.training.estimate import estimate

    out: list[Checked] = []
    for job in resolved:
        try:
            est = estimate(job.model, job.hardware, job.layout, headroom=job.headroom)
        except PlannerError as err:
            raise PlannerError(err.message, source=err.source or job.source, field=err.field) from None
        if est.fits:
            out.append(Checked(job, est, None, ()))
        else:
            fixes = _fixes(job, est) if suggest else ()
            out.append(Checked(job, est, diagnose(est), fixes, searched=suggest))
    return out


def _fixes(job: ResolvedJob, est: TrainingEstimate) -> tuple[Suggestion, ...]:
    """The smallest changes that fit: layout changes on the job's GPUs; when none fits, precision changes on
    them and the fewest GPUs of the same kind on which some layout fits (a search at each count)."""
    from planner.search.engine import fewest_gpus_fix
    from planner.search.suggest import keeps_gpus, suggest

    mapper = _engine_mapper(job.engine)
    fixes = list(suggest(job.model, job.hardware, est, engine=mapper))
    if any(keeps_gpus(f) and not _precision(f) for f in fixes):
        return tuple(fixes)
    fewest = fewest_gpus_fix(job.model, job.hardware, est, engine=mapper)
    if fewest is None:
        return tuple(fixes)
    kept = [f for f in fixes if keeps_gpus(f) or f.gpus < fewest.gpus]
    return (*kept, fewest)


def _precision(fix: Suggestion) -> bool:
    from planner.search.suggest import is_precision_change

    return is_precision_change(fix)


def _engine_mapper(engine: str | None) -> EngineMapper | None:
    """What the job's engine would run for a layout (its writer's `engine_layout`), for the suggestions."""
    from planner.engines.export import EXPORT_FORMATS, exporter

    return exporter(engine)[0] if engine in EXPORT_FORMATS else None


def _host_text(est: Any) -> str:
    """Host memory and the CPU optimizer step, when the layout offloads anything."""
    host = est.scalar("host_bytes")
    if host <= 0:
        return ""
    capacity = est.result.host_capacity_bytes
    of = f" of {capacity / GIB:.0f} GiB" if capacity != float("inf") else ""
    return (f"; host {host / GIB:.1f} GiB per node{of}, CPU optimizer step "
            f"{est.scalar('cpu_optimizer_seconds'):.3g} s")


def _headline(c: Checked) -> str:
    j, est = c.job, c.estimate
    who = f"{j.model_id} on {j.gpus} x {j.hardware_id}"
    peak = est.stages[est.peak_stage].total_bytes
    if est.fits:
        return (f"{who}: fits, peak {peak / GIB:.1f} GiB of {est.usable_bytes / GIB:.1f} GiB usable (stage "
                f"{est.peak_stage}); step {est.scalar('step_seconds'):.3g} s, MFU {est.scalar('mfu'):.1%}"
                + _host_text(est))
    if peak <= est.usable_bytes:  # the GPUs fit; the host does not
        return (f"{who}: does not fit: host memory {est.scalar('host_bytes') / GIB:.1f} GiB per node exceeds "
                f"{est.result.host_capacity_bytes * (1 - est.headroom) / GIB:.1f} GiB usable; offload less or use "
                f"more nodes")
    d = c.diagnosis
    assert d is not None  # run_checks diagnoses every job that does not fit
    return (f"{who}: does not fit: stage {d.stage} needs {d.peak_bytes / GIB:.1f} GiB, {d.over_bytes / GIB:.1f} GiB "
            f"({d.over_bytes:,.0f} bytes) over the {d.usable_bytes / GIB:.1f} GiB usable; largest term: {d.dominant} "
            f"({d.dominant_bytes / GIB:.1f} GiB)")


def _fix_lines(c: Checked) -> list[str]:
    if c.estimate.fits or not c.searched:
        return []
    if not c.suggestions:
        return ["no single or paired change fits; try 'planner search' for a new layout"]
    return [s.summary() for s in c.suggestions]


def _render_table(checked: list[Checked]) -> None:
    for c in checked:
        click.echo(f"{'PASS' if c.estimate.fits else 'FAIL'}  {c.job.source}  {_headline(c)}")
        fixes = _fix_lines(c)
        if fixes and c.suggestions:
            click.echo("      changes that fit (each re-estimated):")
        for line in fixes:
            click.echo(f"        {line}")
    fit = sum(c.estimate.fits for c in checked)
    click.echo(f"{fit} of {len(checked)} job{'s' if len(checked) != 1 else ''} fit.")


def _gh_escape(text: str, *, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def _render_github(checked: list[Checked]) -> None:
    for c in checked:
        file = _gh_escape(c.job.source, prop=True)
        for warning in c.job.warnings:
            click.echo(f"::warning file={file},title=planner check::{_gh_escape(warning)}")
        if c.estimate.fits:
            click.echo(f"::notice file={file},title=planner check::{_gh_escape(_headline(c))}")
        else:
            body = "\n".join([_headline(c), *(f"- {line}" for line in _fix_lines(c))])
            title = _gh_escape("planner check: out of memory", prop=True)
            click.echo(f"::error file={file},title={title}::{_gh_escape(body)}")


@cli.command("check")
@click.argument("jobs", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--deepspeed", "deepspeed", type=click.Path(dir_okay=False, path_type=Path),
              help="Check a DeepSpeed JSON config (with --model, --hardware, --gpus, --seq-len).")
@click.option("--megatron-args", "megatron_args", type=click.Path(dir_okay=False, path_type=Path),
              help="Check Megatron-LM arguments or a launch script, a MODEL_ARGS YAML (its variables as "
              "NAME=value in --engine-args), or a Megatron-Bridge run_config.yaml or override file (with "
              "--hardware, --gpus; --model for an override).")
@click.option("--torchtitan", "torchtitan", type=click.Path(dir_okay=False, path_type=Path),
              help="Check a torchtitan TOML job config, or a config_registry.py of torchtitan main with "
              "--engine-args \"--config FUNCTION\" (with --hardware, --gpus).")
@click.option("--automodel", "automodel", type=click.Path(dir_okay=False, path_type=Path),
              help="Check a NeMo AutoModel recipe YAML (with --hardware, --gpus).")
@click.option("--hf-trainer", "hf_trainer", metavar="SCRIPT|COMMAND",
              help="Check a Hugging Face Trainer launch: a launch script, or the command line itself "
                   "('torchrun --nproc_per_node 8 train.py --model_name_or_path ... --fsdp \"full_shard auto_wrap\" ...').")
@click.option("--accelerate-config", "accelerate_config", type=click.Path(dir_okay=False, path_type=Path),
              help="Check an accelerate config YAML (FSDP or DeepSpeed plugin); the Trainer command line in --engine-args.")
@click.option("--engine-args", metavar="FLAGS",
              help="More engine flags as one string: Megatron-LM arguments, torchtitan --section.option overrides, or "
                   "the Trainer command line for --accelerate-config.")
@layout_options
@click.option("--format", "fmt", type=click.Choice(["table", "json", "github"]), default="table", show_default=True,
              help="table for people, json for tools, github for GitHub Actions annotations.")
@click.option("--no-suggest", is_flag=True, help="Skip searching for changes that make a failing job fit.")
@click.pass_context
def check_cmd(ctx: click.Context, /, jobs: tuple[Path, ...], deepspeed: Path | None, megatron_args: Path | None,
              torchtitan: Path | None, automodel: Path | None, hf_trainer: str | None, accelerate_config: Path | None,
              engine_args: str | None,
              fmt: str, no_suggest: bool, **kw: Any) -> None:
    """Check that training jobs fit in GPU memory: exit 0 if all fit, 1 if any does not, 2 on bad input.

    JOBS are job files (YAML; see 'planner schema job' and docs/check.md). Or check an engine config
    directly with --deepspeed, --megatron-args or --torchtitan; then --model, --hardware, --gpus and the
    layout flags give what the file lacks. For a job that does not fit, the stage, the bytes over, the
    dominant memory term and the smallest changes that fit (each re-estimated) are printed.

    \b
    Examples:
      planner check jobs/*.yaml --format github
      planner check --deepspeed ds_config.json --model llama-3.1-8b --hardware h100-sxm --gpus 64 --seq-len 4096
      planner check --megatron-args train_llama.sh --hardware h100-sxm --gpus 512
      planner check --torchtitan llama3_8b.toml --hardware h100-sxm --gpus 64
      planner check --torchtitan torchtitan/models/llama3/config_registry.py --engine-args "--config llama3_70b" \\
          --hardware h100-sxm --gpus 64
      planner check --automodel qwen3_moe_30b_te_deepep.yaml --hardware h100-sxm --gpus 8
      planner check --hf-trainer "torchrun --nproc_per_node 8 train.py --model_name_or_path Qwen/Qwen2.5-7B
        --fsdp 'full_shard auto_wrap' --bf16 true --per_device_train_batch_size 1" --hardware h100-sxm --seq-len 4096
      planner check --accelerate-config fsdp.yaml --engine-args "accelerate launch train.py ..." --hardware h100-sxm
    """
    from planner.engines.job import load_job, resolve_job

    engines = {ENGINE_OPTIONS[k]: v for k, v in (("deepspeed", deepspeed), ("megatron_args", megatron_args),
                                                  ("torchtitan", torchtitan), ("automodel", automodel),
                                                  ("hf_trainer", hf_trainer), ("accelerate_config", accelerate_config))
               if v is not None}
    names = "--deepspeed, --megatron-args, --torchtitan, --automodel, --hf-trainer, --accelerate-config"
    if len(engines) > 1:
        raise click.UsageError(f"give one of {names}")
    if engines and jobs:
        raise click.UsageError(f"give job files or an engine config ({names}), not both")
    if not engines and not jobs:
        raise click.UsageError(f"give job files, or an engine config with one of {names}")
    if jobs:
        if _flags_given(kw) or engine_args:
            given = [*_flags_given(kw), *(["--engine-args"] if engine_args else [])]
            verb, them = ("applies", "it") if len(given) == 1 else ("apply", "them")
            raise click.UsageError(f"{', '.join(given)} {verb} to direct engine checks; put {them} in the job file")
        resolved = [load_job(path, profile=kw.get("profile_path")) for path in jobs]
    else:
        fmt_name, path = next(iter(engines.items()))
        engine: dict[str, Any] = {"format": fmt_name, "path": str(path)}
        from planner.engines.load import path_problem

        if fmt_name == "hf_trainer" and len(str(path).split()) > 1 and path_problem(Path(str(path))) is not None:
            engine = {"format": fmt_name, "args": str(path)}  # the command line itself
            path = Path("command line")
        if engine_args:
            engine["args"] = engine_args
        if kw.get("gpus") is None and fmt_name in ("hf_trainer", "accelerate"):
            from planner.engines.job import launch_gpus

            kw["gpus"] = launch_gpus(fmt_name, Path(engine["path"]) if "path" in engine else None, engine.get("args"))
        flag = {"megatron": "--megatron-args", "accelerate": "--accelerate-config"}.get(fmt_name, f"--{fmt_name.replace('_', '-')}")
        job = _job_from_flags(kw, engine, flag)
        resolved = [resolve_job(job, base=Path("."), source=str(path), profile=kw.get("profile_path"))]
    checked = run_checks(resolved, suggest=not no_suggest)
    for c in checked:
        for warning in c.job.warnings:
            click.echo(f"warning: {warning}", err=True)
        warn_if_far(c.job.profile, c.job.model, c.job.layout)
    if fmt == "json":
        echo_json([c.to_json() for c in checked])
    elif fmt == "github":
        _render_github(checked)
    else:
        _render_table(checked)
    ctx.exit(0 if all(c.estimate.fits for c in checked) else 1)


# export -------------------------------------------------------------------------------------------
@cli.command("export")
@click.argument("job_file", required=False, type=click.Path(dir_okay=False, path_type=Path), metavar="[JOB]")
@click.option("--to", "to", required=True, type=click.Choice(["megatron", "megatron_bridge", "deepspeed", "torchtitan", "torchtitan_registry",
                                    "hf_trainer", "automodel"]),
              help="Engine format to write.")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="File to write (default: print to stdout).")
@layout_options
def export_cmd(job_file: Path | None, to: str, out: Path | None, **kw: Any) -> None:
    """Write the launch configuration of a layout for Megatron-LM (its arguments, or a Megatron-Bridge override YAML
    with --to megatron_bridge), DeepSpeed, torchtitan (its v0.2 TOML, or a Python config function for torchtitan
    main with --to torchtitan_registry), NeMo AutoModel or the Hugging Face Trainer.

    The layout comes from a job file, or from the flags of 'planner estimate'. The file starts with what
    planner predicts for it (peak memory, step time, MFU); for DeepSpeed, whose JSON has no comments, the
    prediction is in a "_planner" key that DeepSpeed ignores. Settings the engine fixes itself (torchtitan's
    fp32 gradients, for instance) are mapped and noted on stderr. 'planner check' reads the file back to the
    same layout.

    \b
    Examples:
      planner export job.yaml --to megatron --out megatron_args.sh
      planner export --to torchtitan --model llama-3.1-8b --hardware h100-sxm --gpus 64 --global-batch 256 \\
          --seq-len 8192 --zero 3 --recompute selective
    """
    from planner.engines.export import render_export, write_export
    from planner.engines.job import load_job, resolve_job
    from planner.training.estimate import estimate

    if job_file is not None:
        if _flags_given(kw):
            raise click.UsageError(f"{', '.join(_flags_given(kw))} cannot be combined with a job file")
        job = load_job(job_file, profile=kw.get("profile_path"))
    else:
        if kw.get("model_ref") is None:
            raise click.UsageError("give a job file, or --model, --hardware, --gpus and the layout flags")
        job = resolve_job(_job_from_flags(kw, None, "planner export"), base=Path("."), source="command line",
                          profile=kw.get("profile_path"))
    est = estimate(job.model, job.hardware, job.layout, headroom=job.headroom)
    exported = render_export(to, job.model_id, job.model, job.hardware, job.layout, est, hardware_id=job.hardware_id)
    if out is not None:  # written (a regular file, or write_text's one error) before the notes are printed
        out = write_export(exported, out)
    for note in exported.notes:
        click.echo(f"note: {note}", err=True)
    if out is None:
        click.echo(exported.text, nl=False)
        return
    click.echo(f"wrote {out}", err=True)


# schema -------------------------------------------------------------------------------------------
@cli.command("schema")
@click.argument("kind", type=click.Choice(["job", "model", "hardware", "layout"]))
def schema_cmd(kind: str) -> None:
    """Print the JSON Schema of a file kind, for editors (yaml-language-server, VS Code).

    \b
    Example:
      planner schema job > planner-job.schema.json
      # then, first line of a job file:  # yaml-language-server: $schema=planner-job.schema.json
    """
    from planner.specs.job import job_json_schema

    if kind == "job":
        schema = job_json_schema()
    else:
        from planner.specs.hardware import HardwareProfile
        from planner.specs.layout import Layout
        from planner.specs.model import ModelSpec

        specs: dict[str, type[BaseModel]] = {"model": ModelSpec, "hardware": HardwareProfile, "layout": Layout}
        schema = specs[kind].model_json_schema()
    click.echo(json.dumps(schema, indent=2))
