"""The search space: spec value ranges and fixed settings, by address, checked against the spec's
declarations (type and range) before any work, with one-line errors naming the flag."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import HardwareError
from simulator.spec import Param, Spec
from tcp_compiler.errors import SearchError


@dataclass(frozen=True)
class Range:
    """One searched value: `address` from `lo` to `hi` (inclusive), sampled on a log scale with `log`."""

    address: str
    lo: float
    hi: float
    log: bool
    integer: bool

    @property
    def flag(self) -> str:
        scale = ":log" if self.log else ""
        return f"--range {self.address}={self.lo:g}:{self.hi:g}{scale}"


def parse_range(text: str, schema: type[Spec]) -> Range:
    """`TABLE.KEY=LO:HI[:log]` as a Range within the value's declared range, or a SearchError."""
    flag = f"--range {text}"
    address, sep, bounds = text.partition("=")
    parts = bounds.split(":")
    if not sep or len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "log"):
        raise SearchError(f"{flag}: expected TABLE.KEY=LO:HI or TABLE.KEY=LO:HI:log")
    param = _param(flag, address, schema)
    lo, hi = (_number(flag, address, p, param) for p in parts[:2])
    if not lo < hi:
        raise SearchError(f"{flag}: LO must be below HI")
    log = len(parts) == 3
    if log and lo <= 0:
        raise SearchError(f"{flag}: a log range needs LO above 0")
    return Range(address, lo, hi, log, param.kind is int)


def parse_setting(text: str, schema: type[Spec]) -> tuple[str, int | float]:
    """`TABLE.KEY=V`: a value every trial uses, or a SearchError naming the flag."""
    flag = f"--set {text}"
    address, sep, value = text.partition("=")
    if not sep:
        raise SearchError(f"{flag}: expected TABLE.KEY=VALUE")
    param = _param(flag, address, schema)
    return address, _number(flag, address, value, param)


def _param(flag: str, address: str, schema: type[Spec]) -> Param:
    try:
        return schema.param(address)[0]
    except HardwareError as e:
        raise SearchError(f"{flag}: {e}") from None


def _number(flag: str, address: str, text: str, param: Param) -> int | float:
    try:
        number: int | float = int(text) if param.kind is int else float(text)
    except ValueError:
        if param.kind is int and _is_whole(text):
            number = int(float(text))
        else:
            kind = "an integer" if param.kind is int else "a number"
            raise SearchError(f"{flag}: expected {kind}, got {text!r}") from None
    try:
        return param.check(address, number)
    except HardwareError as e:
        raise SearchError(f"{flag}: {e}") from None


def _is_whole(text: str) -> bool:
    try:
        return float(text).is_integer()
    except ValueError:
        return False
