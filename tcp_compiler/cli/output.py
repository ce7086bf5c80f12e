"""Writing output files whole or not at all; `si` formats numbers for people."""

from __future__ import annotations

import sys
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


def announce(path: str | Path, what: str) -> None:
    """Says where an output went, on standard error so standard output stays the report or data."""
    print(f"wrote {path} ({what})", file=sys.stderr)


__all__ = ["announce", "plural", "si", "write_atomically", "write_atomically_bytes"]
