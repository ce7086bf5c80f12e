"""Objectives and constraints, each named by a report figure: any scalar of the simulate report
(`ttft_seconds`, `decode.tpot_seconds_mean`, `hardware.area_mm2`, ...; docs/report-schema.md)
or a figure derived here (`tokens_per_s_per_chip`), so a figure new reports carry (energy, power)
is an objective or constraint without code here."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from simulator.spec import suggest
from tcp_compiler.errors import OptionError, SearchError

DIRECTIONS = ("max", "min")


def report_figures(report: dict[str, Any]) -> dict[str, float]:
    """Every numeric scalar of a report (its to_dict()) by dotted name, plus the derived figures."""
    flat: dict[str, float] = {}

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            elif isinstance(value, int | float) and not isinstance(value, bool):
                flat[prefix + key] = float(value)

    walk(report, "")
    chips = flat.get("hardware.chips", 1.0)
    flat["tokens_per_s_per_chip"] = flat.get("throughput_tokens_per_s", 0.0) / chips
    flat["decode_tokens_per_s_per_chip"] = flat.get("decode_tokens_per_s", 0.0) / chips
    return flat


@dataclass(frozen=True)
class Objective:
    figure: str
    direction: str  # "max" or "min"

    @property
    def text(self) -> str:
        return f"{self.figure}:{self.direction}"


@dataclass(frozen=True)
class Constraint:
    """`figure <= bound` or `figure >= bound`; its violation is how far a point is outside it."""

    figure: str
    op: str
    bound: float

    @property
    def text(self) -> str:
        return f"{self.figure}{self.op}{self.bound:g}"

    def violation(self, figures: dict[str, float]) -> float:
        value = figures[self.figure]
        return value - self.bound if self.op == "<=" else self.bound - value


def parse_objective(text: str) -> Objective:
    figure, sep, direction = text.rpartition(":")
    if not sep or direction not in DIRECTIONS or not figure:
        raise OptionError(
            "{objective} {text}: expected FIGURE:max or FIGURE:min (e.g. tokens_per_s_per_chip:max)",
            text=text,
        )
    return Objective(figure, direction)


_CONSTRAINT = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=)\s*(\S+)\s*$")


def parse_constraint(text: str) -> Constraint:
    match = _CONSTRAINT.match(text)
    try:
        bound = float(match.group(3)) if match else None
    except ValueError:
        bound = None
    if match is None or bound is None:
        raise OptionError(
            "{constraint} {text}: expected FIGURE<=NUMBER or FIGURE>=NUMBER (e.g. ttft_seconds<=0.5)",
            text=text,
        )
    return Constraint(match.group(1), match.group(2), bound)


def check_figures(names: list[str], figures: dict[str, float], flag: str) -> None:
    """Objectives and constraints name figures a report has: checked on the first costed point."""
    for name in names:
        if name not in figures:
            raise SearchError(f"{flag} {name}: the report has no such figure{suggest(name, figures)}")
