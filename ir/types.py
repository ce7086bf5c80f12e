"""Tensor types: a dtype and an ordered shape of named axes (`bf16[B=1, S=2048, D=4096]`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ir.dtypes import DType
from ir.hashing import HashOnce


@dataclass(frozen=True)
class Axis:
    """One named dimension. Names make einsums readable and let the mapper reason per axis."""

    name: str
    size: int

    def __str__(self) -> str:
        return f"{self.name}={self.size}"


@dataclass(frozen=True)
class TensorType(HashOnce):
    dtype: DType
    axes: tuple[Axis, ...]

    __hash__ = HashOnce.__hash__

    @staticmethod
    def of(dtype: DType, **sizes: int) -> TensorType:
        """`TensorType.of(BF16, B=1, S=4)`: keyword order is axis order."""
        return TensorType(dtype, tuple(Axis(n, s) for n, s in sizes.items()))

    @staticmethod
    def from_pairs(dtype: DType, pairs) -> TensorType:
        return TensorType(dtype, tuple(Axis(n, int(s)) for n, s in pairs))

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.axes))}]"

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    @cached_property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.axes)

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self._size_of)

    @cached_property
    def _size_of(self) -> dict[str, int]:
        return {a.name: a.size for a in self.axes}

    @property
    def rank(self) -> int:
        return len(self.axes)

    @cached_property
    def numel(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def nbytes(self) -> int:
        """Bytes in memory; sub-byte types pack, rounded up to a whole byte."""
        return (self.numel * self.dtype.bits + 7) // 8

    def index(self, name: str) -> int:
        return self.names.index(name)

    def size(self, name: str) -> int:
        return self._size_of[name]

    def axis(self, name: str) -> Axis:
        return self.axes[self.index(name)]

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(dtype, self.axes)

    def with_axes(self, axes) -> TensorType:
        return TensorType(self.dtype, tuple(axes))
