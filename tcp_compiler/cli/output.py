"""Writing output files whole or not at all; `si` formats numbers for people."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from simulator.files import atomic_output
from simulator.numbers import plural, si
from tcp_compiler.errors import CliError


def write_atomically(path: str | Path, text: str) -> None:
    """Writes to a temporary file beside `path` and renames it, so no half-written file remains."""
    write_atomically_bytes(path, text.encode("utf-8"))


def write_atomically_bytes(path: str | Path, data: bytes) -> None:
    try:
        with atomic_output(path) as tmp:
            tmp.write_bytes(data)
    except OSError as e:
        raise CliError(f"{path}: cannot write: {e.strerror}") from None


def check_outputs(files: dict[str, str | None], folders: dict[str, str | None] | None = None) -> None:
    """Checks every output path (flag -> path; None: not asked for) before any work starts: a file's
    folder must exist and be writable and the file must not be a folder; a folder must be one, or
    be creatable. So a run never fails at its end having written only some of its outputs."""
    for flag, path in files.items():
        if path is None:
            continue
        target = Path(path)
        if target.is_dir():
            raise CliError(f"{flag} {path}: cannot write: it is a folder; give a file name")
        parent = target.parent
        if not parent.is_dir():
            raise CliError(f"{flag} {path}: cannot write: folder {parent} does not exist")
        if not _can_create_in(parent):
            raise CliError(f"{flag} {path}: cannot write: cannot create files in {parent}")
    for flag, path in (folders or {}).items():
        if path is None:
            continue
        folder = Path(path)
        if folder.exists() and not folder.is_dir():
            raise CliError(f"{flag} {path}: cannot write: it exists and is not a folder")
        existing = next(p for p in (folder, *folder.absolute().parents) if p.exists())
        if not existing.is_dir() or not _can_create_in(existing):
            raise CliError(f"{flag} {path}: cannot write: cannot create folders or files in {existing}")


def _can_create_in(folder: Path) -> bool:
    """Whether a file can be created in `folder`, tried for real (permission bits do not bind root,
    and some file systems refuse whatever the bits say)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".tcpc-probe.", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True


def announce(path: str | Path, what: str) -> None:
    """Says where an output went, on standard error so standard output stays the report or data."""
    print(f"wrote {path} ({what})", file=sys.stderr)


__all__ = ["announce", "check_outputs", "plural", "si", "write_atomically", "write_atomically_bytes"]
