"""A typed report's scalar figures as flat columns (`prefill.seconds`, `memory.free_bytes`), so a
result store holds every figure a report has, new fields included, without listing them."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from tcp_compiler.report.types import Record

Scalar = int | float | str | bool


def figures(record: Record, prefix: str = "") -> dict[str, Scalar]:
    """Every scalar field of `record` and of the records it holds, by dotted name; per-row tables
    (tuples) and absent values are left out."""
    out: dict[str, Scalar] = {}
    for f in fields(record):
        value: Any = getattr(record, f.name)
        name = prefix + f.name
        if isinstance(value, Record):
            out.update(figures(value, name + "."))
        elif isinstance(value, Scalar):
            out[name] = value
    return out
