"""Documented JSON records: the base of the report's types (tcp_compiler.report.types) and of the
analysis results they embed (tcp_compiler.analysis: a limiter, an op role). Each field carries its
meaning and unit, from which the report schema is generated; `to_dict()` is the JSON object."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

    from simulator.target import Sites


def doc(
    meaning: str,
    unit: str = "",
    values: str = "",
    target: Callable[[Sites], tuple[tuple[str, ...], str]] | None = None,
    **kwargs: Any,
) -> Any:
    """A field with its meaning and unit, for the generated schema doc; `values` names a mapping
    ("module:NAME") whose keys the doc lists as the field's values, so the doc cannot omit one;
    `target`: the field's values and meaning depend on the hardware target, and this gives them
    from its sites (the doc shows the default target's)."""
    return field(metadata={"doc": meaning, "unit": unit, "values": values, "target": target}, **kwargs)


@dataclass(frozen=True, kw_only=True)
class Record:
    """Base of every report object: numpy scalars become Python numbers, so the report is plain JSON."""

    nulls: ClassVar[bool] = False  # None fields written as null (True) or left out (False)

    def __post_init__(self) -> None:
        for name in _field_names(type(self)):
            value = getattr(self, name)
            if isinstance(value, np.generic):
                object.__setattr__(self, name, value.item())

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, keys in field order, None fields left out (or null: `nulls`)."""
        keep = self.nulls
        return {f.name: _json(v) for f in fields(self) if (v := getattr(self, f.name)) is not None or keep}


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    """A record class's field names (dataclasses.fields is slow, and reports make many rows)."""
    return tuple(f.name for f in fields(cls))


def _json(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    return value
