"""The `planner` command line: thin click commands that parse, call the library, and render.

Every command module registers itself on `cli` when imported; COMMANDS maps each command name to
its module, which is imported only when that command runs (or when help lists them all), so a
command pays for no other command's imports.
Library errors (`PlannerError`) and usage errors become one line, `error: ...`, on
stderr with exit code 2 — also under click's CliRunner, since `PlannerGroup.main`
does the translation.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Any

import click

from planner import __version__
from planner.errors import PlannerError

# Exit codes: 0 success (every job fits), 1 a job does not fit (check) or a case fails (validate),
# 2 bad input, 3 an internal error (a bug), never 1, which CI would read as "does not fit".
INTERNAL_ERROR_EXIT_CODE = 3


# A quoted value longer than ECHO_HEAD + ECHO_TAIL + 20 characters is cut in error messages to its start and its end
# (a path keeps its file name), with its length: a 10,000-character bad option value or YAML scalar names itself
# well enough by those.
ECHO_HEAD = 40
ECHO_TAIL = 20
_LONG_QUOTED = re.compile("'([^'\\n]{" + str(ECHO_HEAD + ECHO_TAIL + 20) + ",})'")


def _cut(match: re.Match[str]) -> str:
    value = match.group(1)
    return f"'{value[:ECHO_HEAD]}...{value[-ECHO_TAIL:]}' ({len(value):,} characters)"


def _one_line(message: str) -> str:
    """An error message on one line (stderr carries exactly one line on error; docs/errors.md), each long quoted
    value cut to its start, its end and its length."""
    return _LONG_QUOTED.sub(_cut, "; ".join(part.strip() for part in message.splitlines() if part.strip()))


def _usage_hint(err: click.UsageError) -> str:
    if err.ctx is not None and " " in err.ctx.command_path:
        return f" (see '{err.ctx.command_path} --help')"
    return " (see 'planner --help')"


def _no_nul_bytes(args: list[str]) -> None:
    """A NUL byte cannot be in a real command line (execve ends each argument at one), but an in-process caller
    (CliRunner, `cli.main(args=...)`) can pass one, and every os call on such a path raises ValueError."""
    for pos, arg in enumerate(args):
        if "\x00" in str(arg):
            after = f" (the value of {args[pos - 1]})" if pos and str(args[pos - 1]).startswith("-") else ""
            raise PlannerError(f"argument {pos + 1}{after}, {str(arg)[:40]!r}, holds a NUL byte, which no option value or file name can; "
                               "remove it")


class PlannerGroup(click.Group):
    """Commands listed in COMMANDS order and imported on first use; errors rendered as one line."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"planner.cli.{module}")
        return self.commands.get(cmd_name)

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            _no_nul_bytes(sys.argv[1:] if args is None else list(args))
            rv = super().main(args=args, prog_name=prog_name or "planner", complete_var=complete_var,
                              standalone_mode=False, **extra)
        except PlannerError as err:
            click.echo(f"error: {_one_line(err.render())}", err=True)
            sys.exit(2)
        except click.exceptions.NoArgsIsHelpError as err:  # `planner infer` alone: its help, as asked for
            click.echo(err.format_message())
            sys.exit(0)
        except click.UsageError as err:
            click.echo(f"error: {_one_line(err.format_message())}{_usage_hint(err)}", err=True)
            sys.exit(2)
        except click.exceptions.Exit as err:
            sys.exit(err.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(130)
        except click.ClickException as err:
            click.echo(f"error: {_one_line(err.format_message())}", err=True)
            sys.exit(err.exit_code)
        except Exception as err:  # a bug: keep the 0/1/2 contract (1 means "does not fit" to CI)
            if os.environ.get("PLANNER_DEBUG"):
                raise
            click.echo(f"error: internal error ({type(err).__name__}: {_one_line(str(err))}); this is a bug in planner: "
                       "rerun with PLANNER_DEBUG=1 for the traceback and report it", err=True)
            sys.exit(INTERNAL_ERROR_EXIT_CODE)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=PlannerGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="planner")
def cli() -> None:
    """Plan distributed LLM training and serving before booking a GPU.

    Which split of a model across a cluster fits in memory, and which runs fastest.

    \b
    Example:
      planner search --model llama-3.1-70b --hardware h100-sxm --gpus 256 \\
          --global-batch 512 --seq-len 8192
    """


def main() -> None:
    """Console-script entry point."""
    cli.main()


# Command name -> the module that defines it (importing the module registers the command on `cli`).
# This order is the order of `planner --help`.
COMMANDS: dict[str, str] = {
    "search": "search",
    "estimate": "estimate",
    "check": "check",
    "export": "check",
    "schema": "check",
    "infer": "infer",
    "models": "models_cmd",
    "hardware": "hardware_cmd",
    "validate": "validate",
    "calibrate": "calibrate",
}
