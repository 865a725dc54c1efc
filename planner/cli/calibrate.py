"""`planner calibrate`: fit the hardware profile's efficiency factors to measured runs or training logs."""

from __future__ import annotations

from pathlib import Path

import click

from planner.cli import cli
from planner.cli.options import echo_json
from planner.specs.runs import LOG_FORMATS


@cli.command("calibrate")
@click.argument("runs_file", required=False, type=click.Path(dir_okay=False, path_type=Path), metavar="[RUNS]")
@click.option("--log", "logs", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="A training log (Megatron-LM, NeMo, torchtitan, DeepSpeed, HF Trainer); repeat for more runs.")
@click.option("--log-format", type=click.Choice(LOG_FORMATS), default=None,
              help="The logs' engine  [default: detected]")
@click.option("--job", "job_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --log: the job file of the logged run(s) (model, hardware, layout).")
@click.option("--hardware", "-w", "hardware_ref", default=None, metavar="HW",
              help="With a Megatron-LM --log and no --job: the hardware (the log holds the model and layout).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the profile overlay here (use it with --profile FILE).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output format.")
def calibrate_cmd(runs_file: Path | None, logs: tuple[Path, ...], log_format: str | None, job_path: Path | None,
                  hardware_ref: str | None, out: Path | None, fmt: str) -> None:
    """Fit the model to measured runs: per-run error before and after, a leave-one-out error, and a
    profile overlay that estimate, search, check, export and infer take with --profile FILE.

    RUNS is a YAML of runs (each a job plus measured step seconds, tokens/s per GPU, TFLOP/s or peak
    memory, or a log); see docs/calibrate.md. Or give --log files with --job (or, for Megatron-LM logs,
    --hardware). Exit 0 after a fit, 2 on bad input (a log with no usable step included).

    \b
    Examples:
      planner calibrate runs.yaml --out h100-ours.yaml
      planner calibrate --log train.log --hardware h100-sxm --out h100-ours.yaml
    """
    from planner.calibrate.overlay import calibrate
    from planner.calibrate.runs import load_runs, runs_from_logs

    if (runs_file is None) == (not logs):
        raise click.UsageError("give a runs file or --log files (not both)")
    if runs_file is not None:
        if job_path or hardware_ref or log_format:
            raise click.UsageError("--job, --hardware and --log-format go with --log; put them in the runs file")
        runs = load_runs(runs_file)
    else:
        if job_path is None and hardware_ref is None:
            raise click.UsageError("--log needs --job (or, for a Megatron-LM log, --hardware)")
        runs = runs_from_logs(list(logs), job_path=job_path, hardware=hardware_ref, log_format=log_format)
    for run in runs:
        for warning in run.warnings:
            click.echo(f"warning: {run.name}: {warning}", err=True)
    result = calibrate(runs)
    if out is not None:
        from planner.engines.overlay import write_overlay

        write_overlay(out, result.overlay)
    if fmt == "json":
        echo_json(result.overlay.model_dump(exclude_none=True))
    else:
        from planner.report.calibrate import render_calibration

        click.echo(render_calibration(result.overlay), nl=False)
    if out is not None:
        click.echo(f"wrote {out}", err=True)
