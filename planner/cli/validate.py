"""`planner validate`: predicted vs published for every reference case."""

from __future__ import annotations

import statistics
from collections import defaultdict

import click

from planner.cli import cli
from planner.cli.options import echo_json, format_option
from planner.validate import ValidationRow


def all_rows(which: str) -> list[ValidationRow]:
    rows: list[ValidationRow] = []
    if which in ("all", "training"):
        from planner.validate.training import rows as training_rows

        rows += training_rows()
    if which in ("all", "inference"):
        from planner.validate.inference import rows as inference_rows

        rows += inference_rows()
    return rows


def summary(rows: list[ValidationRow]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[ValidationRow]] = defaultdict(list)
    for row in rows:
        groups[row.group].append(row)
    return {
        group: {
            "cases": len(items),
            "passed": sum(r.passed for r in items),
            "median_abs_error": statistics.median(abs(r.error) for r in items),
            "max_abs_error": max(abs(r.error) for r in items),
        }
        for group, items in groups.items()
    }


def markdown(rows: list[ValidationRow]) -> str:
    lines = []
    for group, stats in summary(rows).items():
        lines.append(f"### {group}\n")
        lines.append(f"{stats['passed']}/{stats['cases']} within tolerance; median |error| "
                     f"{100 * stats['median_abs_error']:.1f}%, max {100 * stats['max_abs_error']:.1f}%.\n")
        lines.append("| case | quantity | predicted | published | error | tolerance | ok |")
        lines.append("|---|---|---:|---:|---:|---:|:-:|")
        for r in (r for r in rows if r.group == group):
            lines.append(f"| {r.case_id} | {r.quantity} ({r.unit}) | {r.predicted:.4g} | {r.published:.4g} | "
                         f"{100 * r.error:+.1f}% | ±{100 * r.tolerance:.0f}% | {'yes' if r.passed else 'NO'} |")
        lines.append("")
    return "\n".join(lines)


@cli.command("validate")
@click.option("--only", "which", type=click.Choice(["all", "training", "inference"]), default="all", show_default=True,
              help="Which reference cases to run.")
@format_option(("table", "json", "markdown"))
def validate_command(which: str, fmt: str) -> None:
    """Print predicted vs published for every reference case (memory, step time, serving).

    Exit code 1 when any case is outside its tolerance, so CI can run it.

    \b
    Example:
      planner validate --only training --format markdown > docs/validation-table.md
    """
    rows = all_rows(which)
    failed = [r for r in rows if not r.passed]
    if fmt == "json":
        echo_json({
            "summary": summary(rows),
            "cases": [
                {"id": r.case_id, "group": r.group, "quantity": r.quantity, "unit": r.unit, "predicted": r.predicted,
                 "published": r.published, "error": r.error, "tolerance": r.tolerance, "passed": r.passed,
                 "source": r.source}
                for r in rows
            ],
        })
    elif fmt == "markdown":
        click.echo(markdown(rows))
    else:
        from planner.report.tables import render, simple_table

        tables = []
        for group, stats in summary(rows).items():
            body = [
                [r.case_id, f"{r.quantity} ({r.unit})", f"{r.predicted:.4g}", f"{r.published:.4g}",
                 f"{100 * r.error:+.1f}%", f"±{100 * r.tolerance:.0f}%", "ok" if r.passed else "FAIL"]
                for r in rows if r.group == group
            ]
            caption = (f"{stats['passed']}/{stats['cases']} within tolerance; median |error| "
                       f"{100 * stats['median_abs_error']:.1f}%, max {100 * stats['max_abs_error']:.1f}%")
            tables.append(simple_table(group, ["case", "quantity", "predicted", "published", "error", "tol", ""],
                                       body, right=["predicted", "published", "error", "tol"], caption=caption))
        click.echo(render(*tables), nl=False)
    if failed:
        raise SystemExit(1)
