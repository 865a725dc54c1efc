"""Options shared by several commands, and small helpers for thin commands."""

from __future__ import annotations

import json
from typing import Any, Callable

import click

FORMAT_TABLE_JSON = click.Choice(["table", "json"])


def format_option(choices: tuple[str, ...] = ("table", "json"), default: str = "table") -> Callable[..., Any]:
    return click.option(
        "--format", "fmt", type=click.Choice(list(choices)), default=default, show_default=True,
        help="Output format.",
    )


def model_option(required: bool = True) -> Callable[..., Any]:
    return click.option(
        "--model", "-m", "model_ref", required=required, metavar="MODEL",
        help="Catalog id (see 'planner models'), our YAML spec, or a HuggingFace config.json.",
    )


def hardware_option(required: bool = True) -> Callable[..., Any]:
    return click.option(
        "--hardware", "-w", "hardware_ref", required=required, metavar="HW",
        help="Catalog id (see 'planner hardware') or a YAML hardware profile.",
    )


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))
