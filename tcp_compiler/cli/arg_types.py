"""Argument types for the `tcpc` flags: each numeric flag has a range, checked while parsing, so a
bad value is a one-line usage error naming the flag and no command starts work it cannot finish.

The upper bounds are far beyond any useful run but keep one typo from asking for unbounded work
(a trillion decode steps, a million-way sweep): MAX_TOKENS (prompt, sequence, KV cache), MAX_BATCH,
MAX_STEPS (generated tokens, decode steps, traced steps), MAX_CHIPS (as a hardware spec allows),
MAX_JOBS and MAX_LIST (values per sweep list).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from tcp_compiler.option_fields import ascii_int

MAX_TOKENS = 1 << 20
MAX_BATCH = 1 << 16
MAX_STEPS = 1 << 16
MAX_CHIPS = 1024
MAX_GROUP = 1 << 20
MAX_TOP = 1 << 20
MAX_JOBS = 1024
MAX_LIST = 64
MAX_TOKEN_ID = (1 << 31) - 1


def _parse_int(text: str) -> int | None:
    """The integer `text` spells in ASCII digits (tcp_compiler.option_fields.ascii_int), or None."""
    try:
        return ascii_int(text)
    except ValueError:
        return None


def integer(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer from lo to hi inclusive."""

    def parse(text: str) -> int:
        value = _parse_int(text)
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer from {lo:,} to {hi:,}, got {text!r}")
        return value

    parse.__name__ = "integer"
    return parse


def integers(lo: int, hi: int, max_count: int = MAX_LIST) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated integers from lo to hi, at least one, at most max_count."""

    def parse(text: str) -> list[int]:
        parts = [t for t in text.split(",") if t.strip(" \t")]
        values = [_parse_int(t) for t in parts]
        if not parts or any(v is None for v in values):
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
        if any(not lo <= v <= hi for v in values):  # type: ignore[operator]
            raise argparse.ArgumentTypeError(f"expected integers from {lo:,} to {hi:,}, got {text!r}")
        if len(values) > max_count:
            raise argparse.ArgumentTypeError(f"expected at most {max_count} values, got {len(values)}")
        return values  # type: ignore[return-value]

    parse.__name__ = "integers"
    return parse


def numbers(lo: float, hi: float, max_count: int = MAX_LIST) -> Callable[[str], list[float]]:
    """An argparse type: comma-separated finite numbers above lo and at most hi, at most max_count."""

    def parse(text: str) -> list[float]:
        values = []
        for part in (t.strip(" \t") for t in text.split(",")):
            typed = part.isascii() and not any(c == "_" or c.isspace() for c in part)
            try:  # float() also reads Unicode digits, underscores and newlines, which no user means
                value = float(part) if typed else math.nan
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and lo < value <= hi):
                raise argparse.ArgumentTypeError(f"expected numbers in ({lo:g}, {hi:g}], got {part!r}")
            values.append(value)
        if len(values) > max_count:
            raise argparse.ArgumentTypeError(f"expected at most {max_count} values, got {len(values)}")
        return values

    parse.__name__ = "numbers"
    return parse


positive = integer(1, 1 << 62)
tokens = integer(1, MAX_TOKENS)
batch = integer(1, MAX_BATCH)
steps = integer(1, MAX_STEPS)
chips = integer(1, MAX_CHIPS)
group_size = integer(1, MAX_GROUP)
top = integer(1, MAX_TOP)
jobs = integer(1, MAX_JOBS)
documents = integer(0, MAX_TOKENS)
decode_steps = integer(0, MAX_STEPS)
trace_steps = integer(0, MAX_STEPS)


def token_ids(text: str) -> list[int]:
    """Comma-separated token ids, 0 to MAX_TOKEN_ID, at least one and at most MAX_TOKENS."""
    parts = [t for t in text.split(",") if t.strip(" \t")]
    if len(parts) > MAX_TOKENS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_TOKENS:,} token ids, got {len(parts):,}")
    values = [_parse_int(t) for t in parts]
    if any(v is None for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text[:60]!r}")
    if not values:
        raise argparse.ArgumentTypeError("expected at least one token id")
    if any(not 0 <= v <= MAX_TOKEN_ID for v in values):  # type: ignore[operator]
        raise argparse.ArgumentTypeError(f"expected token ids from 0 to {MAX_TOKEN_ID:,}, got {text[:60]!r}")
    return values  # type: ignore[return-value]


def add_dtype(parser: argparse.ArgumentParser, default: str | None, help: str) -> None:
    """The --dtype flag: its choices listed in its help, not in the usage line (twelve names would
    push that past 100 columns)."""
    from tcp_compiler.frontend.precision import PRECISIONS

    names = sorted(PRECISIONS)
    parser.add_argument("--dtype", default=default, choices=names, metavar="DTYPE",
                        help=f"{help}: {', '.join(names)}")  # fmt: skip


def power_cap(text: str) -> float | str:
    """`tdp` or a power in watts, above zero."""
    if text == "tdp":
        return text
    try:
        watts = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected watts or 'tdp', got {text!r}") from None
    if not watts > 0:
        raise argparse.ArgumentTypeError(f"must be above 0 W, got {text}")
    return watts


def add_power_cap(parser: argparse.ArgumentParser, what: str, done: str) -> None:
    """`--power-cap W|tdp`; `what` must stay within it, the run `done` again at the lower clock."""
    parser.add_argument(
        "--power-cap", type=power_cap, metavar="W|tdp",
        help=f"lower the clock and its voltage (DVFS) until {what} draws at most W per chip "
        f"(tdp: the spec's chip.tdp_w); the run is {done} again at that clock",
    )  # fmt: skip


def watts(cap: float | str, hw) -> float:
    """The cap `power_cap` parsed, in watts (`tdp`: the spec's chip.tdp_w)."""
    return hw.chip.tdp_w if cap == "tdp" else cap
