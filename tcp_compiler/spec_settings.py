"""What-if spec values: `TABLE.KEY=V1,V2,...` read and applied by address, so any declared spec
value (simulator.spec) can be set for one run or swept without writing a spec file.

A setting's key and values are checked against the spec's declarations (type and range) when it is
read, so a bad one is an error before any work; relations between values (sustained HBM bandwidth
above peak) are checked when a setting is applied to a spec (Spec.with_value).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from simulator.errors import HardwareError
from simulator.spec import Param, Spec
from simulator.targets import DEFAULT_TARGET

Setting = tuple[str, int | float]  # (address, value)
SCHEMA: type[Spec] = DEFAULT_TARGET.spec  # the spec class settings are checked against (the default target's)


def spec_values(text: str) -> tuple[str, tuple[int | float, ...]]:
    """`TABLE.KEY=V1,V2,...` as (address, values), each checked against its declaration; a
    ValueError "`address`: ..." names the key."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise ValueError(f"expected TABLE.KEY=VALUE[,VALUE...], got {text!r}")
    try:
        param, _ = SCHEMA.param(key)
        return key, tuple(dict.fromkeys(_value(param, key, v.strip()) for v in values.split(",")))
    except HardwareError as e:
        raise ValueError(str(e)) from None


def spec_value(text: str) -> Setting:
    """`TABLE.KEY=VALUE`: one setting, for a single what-if run."""
    key, values = spec_values(text)
    if len(values) != 1:
        raise ValueError(f"{key}: expected one value (tcpc sweep runs several), got {len(values)}")
    return key, values[0]


def _value(param: Param, key: str, text: str) -> int | float:
    try:
        number: Any = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            raise HardwareError(f"{key}: expected a number, got {text!r}") from None
        if param.kind is int and number.is_integer():
            number = int(number)  # 1e9 for an integer value
    return param.check(key, number)


def with_settings(spec: Spec, settings: Iterable[Setting]) -> Spec:
    """`spec` with each setting applied, its source naming it; a HardwareError names the key."""
    for key, got in settings:
        spec = spec.with_value(key, got, source=f"assumed: set to {got:g}")
    return spec
