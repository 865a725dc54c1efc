"""Writing a command's output files: only regular files, whole or not at all.

A target that exists must be a regular file (a symbolic link is followed to the file it names); a directory, a
FIFO, a device or a socket is refused, for writing a file in their place would replace them (a device node, for a
process with the rights) and opening a FIFO blocks. The text goes to a scratch file beside the target, renamed onto
it once written, so a failed write leaves the old file (or none) behind. docs/errors.md: bad input writes nothing.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from planner.errors import PlannerError


def writable_target(path: Path | str) -> Path:
    """The regular file `path` names (links followed), or a PlannerError saying why it cannot be written."""
    path = Path(path)
    if not str(path) or path.name in ("", ".", ".."):
        raise PlannerError("is not a file name; give the file to write", source=str(path) or "''")
    try:
        resolved = path.resolve(strict=False) if path.is_symlink() else path
    except (OSError, RuntimeError):  # a loop of symbolic links (RuntimeError before Python 3.13)
        raise PlannerError("is a loop of symbolic links; give a file path to write", source=str(path)) from None
    try:
        mode = resolved.stat().st_mode
    except FileNotFoundError:
        return resolved
    except OSError as err:
        raise PlannerError(f"cannot write: {err.strerror or err}", source=str(path)) from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
        raise PlannerError(f"is {kind}; give a file path to write", source=str(path))
    return resolved


def write_text(path: Path | str, text: str, *, make_parents: bool = False) -> Path:
    """Write `text` to the regular file `path` through a scratch file renamed into place; returns the path written."""
    target = writable_target(path)
    scratch = scratch_path(target)
    try:
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        scratch.write_text(text, encoding="utf-8")
        keep_mode(target, scratch)
        os.replace(scratch, target)
    except OSError as err:
        remove_quietly(scratch)
        raise PlannerError(f"cannot write: {err.strerror or err}", source=str(path)) from None
    return target


def scratch_path(target: Path) -> Path:
    """A scratch file beside `target` with its suffix (matplotlib picks the format by it), short enough for any
    name the target may have (NAME_MAX counts the target's name alone)."""
    return target.with_name(f".planner-{os.getpid()}-{abs(hash(target.name)) % 10**8}.partial{target.suffix[:16]}")


def keep_mode(target: Path, scratch: Path) -> None:
    """An existing target's permission bits on its replacement (the scratch file has the umask's)."""
    try:
        os.chmod(scratch, stat.S_IMODE(target.stat().st_mode))
    except OSError:
        pass


def remove_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass
