"""The bad-input contract every fuzz case checks (docs/errors.md): exit code 2, exactly one line on stderr,
`error: ...` naming the field, no traceback, nothing on stdout, nothing written, and quickly."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from click.testing import CliRunner, Result

from planner.cli import cli

# Each case runs in-process in well under 0.1 s; the limit catches a hang or a search that grows with a
# magnitude (the old `infer search --gpus 2147483648` ran for minutes), with room for a slow CI machine.
CASE_SECONDS = 3.0


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def invoke(args: Sequence[object]) -> tuple[Result, float]:
    runner = CliRunner()
    start = time.perf_counter()
    result = runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result, time.perf_counter() - start


def assert_rejected(args: Sequence[object], *needles: str, folder: Path | None = None) -> str:
    """Run `planner ARGS` and check the contract; returns the error line. `needles` must all appear in it
    (the field or flag and what is wrong); `folder`, when given, must hold the same files afterwards."""
    before = files_under(folder) if folder is not None else set()
    result, seconds = invoke(args)
    lines = result.stderr.splitlines()
    shown = f"planner {' '.join(map(str, args))}\nexit {result.exit_code}\nstderr: {result.stderr!r}\nstdout: {result.stdout[:300]!r}"
    assert result.exit_code == 2, shown
    assert len(lines) == 1 and lines[0].startswith("error: "), shown
    assert "Traceback" not in result.stderr and "internal error" not in lines[0], shown
    assert result.stdout == "", shown
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in the message\n{shown}"
    assert seconds < CASE_SECONDS, f"took {seconds:.1f} s\n{shown}"
    if folder is not None:
        assert files_under(folder) == before, f"wrote {sorted(files_under(folder) - before)}\n{shown}"
    return lines[0]
