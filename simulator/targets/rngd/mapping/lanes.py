"""One integer per lane, through unchanged scalar code: the cost model over a block of decode lengths.

A decode step's recipes depend on its KV length only through axis sizes. Passing a `Lanes` value
(one size per length of a block) where the scalar code expects an int runs that code once for the
whole block: arithmetic, `math.ceil`, `sum` and `math.prod` act lane by lane on int64 / float64
arrays with the operations Python's ints and floats do, so each lane gets the integers a scalar
run at its length gives. Where the code needs one answer for all lanes (an `if`, `max`, `range`,
an index) and the lanes disagree, or where int64 could differ from Python's unbounded ints, it
raises `Diverged`: the caller then splits the block, down to single lengths costed as scalars.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

_INT_LIMIT = 2**62  # int64 results stay exact while every operand stays below this
_FLOAT_EXACT = 2**53  # ints converted to float64 for a true division are exact below this


class Diverged(Exception):
    """The lanes need different control flow, or a value outside exact int64: cost them apart.
    `lane`, when known, is the first lane whose answer differs from lane 0's (0: not known)."""

    def __init__(self, lane: int = 0) -> None:
        super().__init__(lane)
        self.lane = lane


def first_difference(values: np.ndarray) -> int:
    """The first index whose value differs from values[0] (0 when all agree)."""
    return int(np.argmax(values != values[0]))


def _raw(x: Any) -> Any:
    return x.v if type(x) is Lanes else x


def _magnitude(x: Any) -> float:
    """The largest absolute value of an operand (Python int, float, numpy scalar or Lanes)."""
    if type(x) is Lanes:
        if x.m is None:
            values = x.v.astype(np.int8) if x.v.dtype.kind == "b" else x.v
            x.m = float(max(-values.min(), values.max(), 0)) if values.size else 0.0
        return x.m
    return abs(float(x))


def _check_int(x: Any) -> None:
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool) and abs(int(x)) >= _INT_LIMIT:
        raise Diverged


def _is_int(x: Any) -> bool:
    v = _raw(x)
    return isinstance(v, (int, np.integer)) or (isinstance(v, np.ndarray) and v.dtype.kind in "iub")


def _arith(op: Callable, a: Any, b: Any, bound: Callable[[float, float], float]) -> Lanes:
    """op lane by lane; for ints, refuses results int64 might not hold: `bound` of the operands'
    magnitudes bounds the result's, and is kept as its magnitude (no pass over the lanes)."""
    _check_int(a)
    _check_int(b)
    out = Lanes(op(_raw(a), _raw(b)))
    if _is_int(a) and _is_int(b):
        out.m = bound(_magnitude(a), _magnitude(b))
        if out.m >= _INT_LIMIT:
            raise Diverged
    return out


def _sum_bound(x: float, y: float) -> float:
    return x + y


def _product_bound(x: float, y: float) -> float:
    return x * y


def _quotient_bound(x: float, y: float) -> float:
    return x + 1  # floor division by a nonzero int: at most one past the dividend


def _remainder_bound(x: float, y: float) -> float:
    return y  # below the divisor


def _divide(a: Any, b: Any) -> Lanes:
    """True division: Python divides ints exactly rounded; float64 of each int is exact below 2^53."""
    for x in (a, b):
        _check_int(x)
        if _is_int(x) and _magnitude(x) >= _FLOAT_EXACT:
            raise Diverged
    if np.any(np.asarray(_raw(b)) == 0):
        raise ZeroDivisionError("division by zero")
    return Lanes(np.true_divide(_raw(a), _raw(b)))


def _compare(op: Callable, a: Any, b: Any) -> Lanes:
    """A comparison lane by lane. Python compares an int with a float exactly; numpy converts the
    int to float64 first, exact only below 2^53."""
    if _is_int(a) != _is_int(b) and max(_magnitude(a), _magnitude(b)) >= _FLOAT_EXACT:
        raise Diverged
    out = Lanes(op(_raw(a), _raw(b)))
    out.m = 1.0
    return out


def _floor_divide(a: Any, b: Any) -> Lanes:
    if np.any(np.asarray(_raw(b)) == 0):
        raise ZeroDivisionError("integer division or modulo by zero")
    return _arith(np.floor_divide, a, b, _quotient_bound)


def _modulo(a: Any, b: Any) -> Lanes:
    if np.any(np.asarray(_raw(b)) == 0):
        raise ZeroDivisionError("integer division or modulo by zero")
    return _arith(np.remainder, a, b, _remainder_bound)


class Lanes:
    """A value per lane; behaves as an int (or float) for the scalar cost code."""

    __slots__ = ("v", "m")
    __array_ufunc__ = None  # numpy scalars defer to the reflected operators below

    def __init__(self, values: np.ndarray) -> None:
        self.v = values
        self.m: float | None = None  # a bound on the largest magnitude: computed, or from operands

    @staticmethod
    def of(values: Any) -> Lanes:
        return Lanes(np.asarray(values))

    def __len__(self) -> int:
        return len(self.v)

    # arithmetic, lane by lane
    def __add__(self, o: Any) -> Lanes:
        return _arith(np.add, self, o, _sum_bound)

    def __radd__(self, o: Any) -> Lanes:
        return _arith(np.add, o, self, _sum_bound)

    def __sub__(self, o: Any) -> Lanes:
        return _arith(np.subtract, self, o, _sum_bound)

    def __rsub__(self, o: Any) -> Lanes:
        return _arith(np.subtract, o, self, _sum_bound)

    def __mul__(self, o: Any) -> Lanes:
        return _arith(np.multiply, self, o, _product_bound)

    def __rmul__(self, o: Any) -> Lanes:
        return _arith(np.multiply, o, self, _product_bound)

    def __truediv__(self, o: Any) -> Lanes:
        return _divide(self, o)

    def __rtruediv__(self, o: Any) -> Lanes:
        return _divide(o, self)

    def __floordiv__(self, o: Any) -> Lanes:
        return _floor_divide(self, o)

    def __rfloordiv__(self, o: Any) -> Lanes:
        return _floor_divide(o, self)

    def __mod__(self, o: Any) -> Lanes:
        return _modulo(self, o)

    def __rmod__(self, o: Any) -> Lanes:
        return _modulo(o, self)

    def __divmod__(self, o: Any) -> tuple[Lanes, Lanes]:
        return self // o, self % o

    def __rdivmod__(self, o: Any) -> tuple[Lanes, Lanes]:
        return o // self, o % self

    def __neg__(self) -> Lanes:
        return Lanes(-self.v)

    def __pos__(self) -> Lanes:
        return self

    def __abs__(self) -> Lanes:
        return Lanes(np.abs(self.v))

    def __ceil__(self) -> Lanes:
        """math.ceil: an int per lane, as Python's ceil of a float is."""
        if self.v.dtype.kind == "f":
            if _magnitude(self) >= _INT_LIMIT:
                raise Diverged
            return Lanes(np.ceil(self.v).astype(np.int64))
        return self

    def __floor__(self) -> Lanes:
        if self.v.dtype.kind == "f":
            if _magnitude(self) >= _INT_LIMIT:
                raise Diverged
            return Lanes(np.floor(self.v).astype(np.int64))
        return self

    # comparisons give lanes of booleans; only a branch on them needs the lanes to agree
    def __lt__(self, o: Any) -> Lanes:
        return _compare(np.less, self, o)

    def __le__(self, o: Any) -> Lanes:
        return _compare(np.less_equal, self, o)

    def __gt__(self, o: Any) -> Lanes:
        return _compare(np.greater, self, o)

    def __ge__(self, o: Any) -> Lanes:
        return _compare(np.greater_equal, self, o)

    def __eq__(self, o: Any) -> Lanes:  # type: ignore[override]
        return _compare(np.equal, self, o)

    def __ne__(self, o: Any) -> Lanes:  # type: ignore[override]
        return _compare(np.not_equal, self, o)

    def __hash__(self) -> int:
        return hash((self.v.dtype.str, self.v.tobytes()))

    def __bool__(self) -> bool:
        if self.v.all():
            return True
        if not self.v.any():
            return False
        raise Diverged(first_difference(self.v))

    def __index__(self) -> int:
        return int(self.uniform())

    def uniform(self) -> Any:
        """The one value every lane holds (a Python scalar), or Diverged."""
        first = self.v[0]
        if not (self.v == first).all():
            raise Diverged(first_difference(self.v))
        return first.item()

    def __format__(self, spec: str) -> str:
        low, high = self.v.min().item(), self.v.max().item()
        return format(low, spec) if low == high else f"{format(low, spec)}..{format(high, spec)}"

    def __repr__(self) -> str:
        return f"Lanes({self.v!r})"


def maximum(*values: Any) -> Any:
    """max(*values), lane by lane when some are Lanes (and all are ints: max keeps the winner's
    type, which one array could not); else the builtin, which needs the lanes to agree."""
    if not has_lanes(values) or not all(_is_int(v) for v in values):
        return max(values)
    return Lanes(np.maximum.reduce(np.broadcast_arrays(*(np.asarray(_raw(v)) for v in values))))


def minimum(*values: Any) -> Any:
    """min(*values), lane by lane when some are Lanes (see maximum)."""
    if not has_lanes(values) or not all(_is_int(v) for v in values):
        return min(values)
    return Lanes(np.minimum.reduce(np.broadcast_arrays(*(np.asarray(_raw(v)) for v in values))))


def any_lane(condition: Any) -> bool:
    """bool(condition), or whether any lane holds it (for text describing a block of lengths)."""
    return bool(condition.v.any()) if type(condition) is Lanes else bool(condition)


def lane_values(x: Any, count: int) -> np.ndarray:
    """x as `count` values, one per lane (a scalar repeats)."""
    return np.broadcast_to(np.asarray(_raw(x)), (count,))


def has_lanes(values: Any) -> bool:
    return any(type(v) is Lanes for v in values)
