"""Element types of the IR and how values of each type are stored and rounded.

The interpreter keeps every float tensor as float32 holding only values representable in its
declared dtype, so a bf16 or fp8 graph behaves numerically like the hardware that stores it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import ml_dtypes
import numpy as np

Kind = Literal["float", "int", "bool"]


@dataclass(frozen=True)
class DType:
    """An element type: its text name, storage width in bits and numeric kind."""

    name: str
    bits: int
    kind: Kind

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def storage(self) -> np.dtype:
        """The numpy dtype the interpreter uses to hold values of this type."""
        return _STORAGE[self.kind]

    def round(self, array: np.ndarray) -> np.ndarray:
        """Returns `array` rounded onto this dtype's value grid, in interpreter storage."""
        return _ROUNDERS[self.name](np.asarray(array))


F32 = DType("f32", 32, "float")
F16 = DType("f16", 16, "float")
BF16 = DType("bf16", 16, "float")
FP8E4M3 = DType("fp8e4m3", 8, "float")
FP8E5M2 = DType("fp8e5m2", 8, "float")
I32 = DType("i32", 32, "int")
I8 = DType("i8", 8, "int")
I4 = DType("i4", 4, "int")
# Storage-only types of packed weight formats, which the Fetch Adapter converts as it fetches:
# u4 holds unsigned 4-bit codes (AWQ/GPTQ values and zero points, fp4 e2m1 bit patterns that a
# table lookup decodes); e8m0 is MX's shared power-of-two scale, 2^(e - 127).
U4 = DType("u4", 4, "int")
E8M0 = DType("e8m0", 8, "float")
BOOL = DType("bool", 8, "bool")

DTYPES: dict[str, DType] = {
    d.name: d for d in (F32, F16, BF16, FP8E4M3, FP8E5M2, E8M0, I32, I8, I4, U4, BOOL)
}

_STORAGE: dict[str, np.dtype] = {
    "float": np.dtype(np.float32),
    "int": np.dtype(np.int32),
    "bool": np.dtype(np.bool_),
}


def _float_rounder(narrow: type | None, saturate: bool):
    """Round to nearest even through `narrow`; fp8 casts saturate as quantisation kernels do."""

    def rounder(a: np.ndarray) -> np.ndarray:
        a = a.astype(np.float32)
        if narrow is None:
            return a
        if saturate:
            limit = float(ml_dtypes.finfo(narrow).max)
            a = np.clip(a, -limit, limit)
        return a.astype(narrow).astype(np.float32)

    return rounder


def _int_rounder(bits: int, signed: bool = True):
    """Float to int rounds half to even; everything saturates to the (signed or unsigned) range."""
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)

    def rounder(a: np.ndarray) -> np.ndarray:
        # Clip in float64 / int64: float32 cannot hold 2**31 - 1 and would overflow the cast.
        if a.dtype.kind == "f":
            a = np.rint(np.nan_to_num(a.astype(np.float64), nan=0.0, posinf=high, neginf=low))
        else:
            a = a.astype(np.int64)
        return np.clip(a, low, high).astype(np.int32)

    return rounder


_ROUNDERS = {
    "f32": _float_rounder(None, False),
    "f16": _float_rounder(np.float16, False),
    "bf16": _float_rounder(ml_dtypes.bfloat16, False),
    "fp8e4m3": _float_rounder(ml_dtypes.float8_e4m3fn, True),
    "fp8e5m2": _float_rounder(ml_dtypes.float8_e5m2, True),
    "i32": _int_rounder(32),
    "i8": _int_rounder(8),
    "i4": _int_rounder(4),
    "u4": _int_rounder(4, signed=False),
    "e8m0": _float_rounder(ml_dtypes.float8_e8m0fnu, False),
    "bool": lambda a: a.astype(np.bool_),
}
