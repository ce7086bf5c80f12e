"""Bounded reading of the tables of requests other tools write (a serving trace, a measured run):
one row per request in a .jsonl (an object a line) or .csv (a header row) file, read with a size
bound and every cell checked, so a bad file is a one-line RequestFileError naming its file, line
and field. tcp_compiler.serve.workload (traces) and tcp_compiler.validation.measured (measured
runs) read their rows here."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from simulator.files import read_input
from tcp_compiler.errors import RequestFileError
from tcp_compiler.frontend import json_input

MAX_DEPTH = 2  # a line is one flat object; a value nested deeper is not a request
MAX_CELL = 64  # characters of one CSV cell: the longest number a request needs is far shorter
MAX_DIGITS = 24  # of an integer cell: beyond any token count (MAX_TOKENS), short of int()'s limits


def read_text(path: Path, limit: int, what: str) -> str:
    """The file's text, at most `limit` bytes of UTF-8 (`what` names such files in the error)."""
    try:
        return read_input(path, limit, what).decode("utf-8")
    except OSError as e:
        raise RequestFileError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise RequestFileError(f"{path}: not UTF-8 text") from None


def rows(path: Path, text: str, required: tuple[str, ...]) -> list[tuple[int, dict]]:
    """(line, row) of every request in a .csv (by suffix) or .jsonl file; a CSV header must name
    every `required` field (a JSON line lacking one is caught when the field is read)."""
    if path.suffix.lower() == ".csv":
        return csv_rows(path, text, required)
    return jsonl_rows(path, text)


def jsonl_rows(path: Path, text: str) -> list[tuple[int, dict]]:
    found = []
    for line, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            row = json_input.loads(raw, MAX_DEPTH)
        except ValueError as e:
            raise RequestFileError(f"{path}:{line}: not valid JSON: {e}") from None
        if not isinstance(row, dict):
            raise RequestFileError(f"{path}:{line}: expected a JSON object, got {type(row).__name__}")
        found.append((line, row))
    return found


def csv_rows(path: Path, text: str, required: tuple[str, ...]) -> list[tuple[int, dict]]:
    """The rows under the header; strict quoting, so a quote left open is an error at the line
    it opens rather than a cell that swallows the rest of the file."""
    reader = csv.reader(io.StringIO(text), strict=True)
    records: list[tuple[int, list[str]]] = []
    start = 1  # the line the record being read starts at
    try:
        for cells in reader:
            records.append((start, cells))
            start = reader.line_num + 1
    except csv.Error as e:
        raise RequestFileError(f"{path}:{start}: not valid CSV: {e}") from None
    if not records:
        raise RequestFileError(f"{path}: empty; expected a header row {','.join(required)}")
    header = [h.strip() for h in records[0][1]]
    missing = [f for f in required if f not in header]
    if missing:
        expected = ",".join(required)
        raise RequestFileError(f"{path}:1: header lacks {', '.join(missing)} (expected {expected})")
    found = []
    for line, cells in records[1:]:
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise RequestFileError(f"{path}:{line}: {len(cells)} fields, the header has {len(header)}")
        found.append((line, dict(zip(header, (c.strip() for c in cells), strict=True))))
    return found


def cell(where: str, name: str, value: object, integer: bool, lo: float, hi: float, unit: str) -> float:
    """`value` (field `name` at `where`, a "file:line" or "file: key[i]") as a number from `lo` to
    `hi`; a RequestFileError saying what was expected otherwise."""
    try:
        number = finite_number(value, integer)
    except (TypeError, ValueError, OverflowError):
        want = "an integer" if integer else "a number"
        raise RequestFileError(f"{where}: field {name}: expected {want}, got {shown(value)}") from None
    if not lo <= number <= hi:
        raise RequestFileError(
            f"{where}: field {name}: expected {lo:,.0f} to {hi:,.0f} {unit}, got {shown(value)}"
        )
    return number


def finite_number(value: object, integer: bool) -> float:
    """A JSON or CSV cell as a finite number: integers must be whole (2.0 is 2, 2.5 is not one);
    an integer cell holds digits only, at most MAX_DIGITS of them; a cell at most MAX_CELL
    characters."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, str):
        value = value.strip()
        if len(value) > (MAX_DIGITS if integer else MAX_CELL):
            raise ValueError(value)
        value = int(value, 10) if integer else float(value)
    if not isinstance(value, (int, float)):
        raise TypeError(value)
    number = float(value)  # OverflowError past float's range
    if not math.isfinite(number) or (integer and not number.is_integer()):
        raise ValueError(value)
    return number


def shown(value: object) -> str:
    """A cell as a message quotes it, cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
