"""Shared test helpers."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import cli

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_cli():
    """Invoke `planner ARGS...` in-process; returns click's Result (exit_code, stdout, stderr)."""
    runner = CliRunner()

    def _run(*args: str):
        return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)

    return _run
