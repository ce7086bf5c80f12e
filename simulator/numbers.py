"""Numbers for people: SI prefixes with three significant digits, so table columns stay readable."""

from __future__ import annotations

from decimal import Decimal

_PREFIXES = ["", "K", "M", "G", "T", "P", "E"]


def si(value: float, unit: str = "") -> str:
    """1.5e9 -> '1.50 G'; whole numbers below 1000 print as they are."""
    if isinstance(value, int) and abs(value) >= 10**300:  # beyond a float: scale exactly
        value = Decimal(value)
    magnitude = 0
    while abs(value) >= 1000 and magnitude < len(_PREFIXES) - 1:
        value /= 1000
        magnitude += 1
    whole = magnitude == 0 and float(value).is_integer()
    text = f"{value:.0f}" if whole else f"{value:.3g}"
    return f"{text} {_PREFIXES[magnitude]}{unit}".rstrip()


def duration(seconds: float, decimals: int = 3) -> str:
    """'19.454 ms', '1.234 s': milliseconds below a second, seconds from one up (never
    '1,234.500 ms'), with `decimals` places."""
    return f"{seconds:,.{decimals}f} s" if seconds >= 1 else f"{seconds * 1e3:.{decimals}f} ms"


def plural(count: int, noun: str) -> str:
    """'1 chip', '4 chips': a count with its noun, for report wording."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"
