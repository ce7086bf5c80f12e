"""Writing output files whole or not at all, and formatting numbers for people."""

from __future__ import annotations

from pathlib import Path

from simulator.files import atomic_output
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


_PREFIXES = ["", "K", "M", "G", "T", "P", "E"]


def si(value: float, unit: str = "") -> str:
    """1.5e9 -> '1.50 G'; keeps three significant digits so columns stay readable."""
    magnitude = 0
    while abs(value) >= 1000 and magnitude < len(_PREFIXES) - 1:
        value /= 1000
        magnitude += 1
    text = f"{value:.0f}" if magnitude == 0 and float(value).is_integer() else f"{value:.3g}"
    return f"{text} {_PREFIXES[magnitude]}{unit}".rstrip()
