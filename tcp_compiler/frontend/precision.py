"""Precision modes: which dtype weights, einsum activations, the KV cache and tables use.

Element-wise work (norms, softmax, activations, residual adds) runs in f32 everywhere, as the
Vector Engine does; casts before each einsum put its operands in the mode's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ir import BF16, F16, F32, FP8E4M3, I4, DType
from tcp_compiler.errors import CliError


@dataclass(frozen=True)
class Precision:
    name: str
    weight: DType  # projection and expert weights
    act: DType  # activation operand of projection einsums (when weights are not quantised to ints)
    kv: DType  # KV cache and the attention einsums' operands
    table: DType  # embedding table and norm weights
    group_size: int = 0  # per-group scales along the contracted axis, for integer weights
    # What tensor-parallel collectives send: partial sums leave their einsum in f32 and are cast
    # to this before the all_reduce (as TP kernels reduce in the activation dtype); None: the
    # table dtype (bf16 for bf16, fp8 and w4), whatever the KV cache is stored in.
    collective_dtype: DType | None = None

    @property
    def collective(self) -> DType:
        return self.collective_dtype or self.table

    @property
    def quantised(self) -> bool:
        return self.weight.is_int


PRECISIONS = {
    "f32": Precision("f32", F32, F32, F32, F32),
    "f16": Precision("f16", F16, F16, F16, F16),
    "bf16": Precision("bf16", BF16, BF16, BF16, BF16),
    "fp8": Precision("fp8", FP8E4M3, FP8E4M3, BF16, BF16),
    "w4": Precision("w4", I4, BF16, BF16, BF16, group_size=128),
}
TORCH_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


# KV cache dtypes a run may choose apart from its precision (--kv-dtype): fp8 halves the cache's
# bytes and capacity, as serving stacks' fp8 KV caches do; the attention einsums then read fp8.
KV_DTYPES = {"bf16": BF16, "fp8": FP8E4M3}


def precision(name: str, group_size: int | None = None, kv_dtype: str | None = None) -> Precision:
    if name not in PRECISIONS:
        raise CliError(f"--dtype {name!r} is not supported (supported: {', '.join(PRECISIONS)})")
    p = PRECISIONS[name]
    if kv_dtype is not None:
        if kv_dtype not in KV_DTYPES:
            raise CliError(f"--kv-dtype {kv_dtype!r} is not supported (supported: {', '.join(KV_DTYPES)})")
        p = replace(p, kv=KV_DTYPES[kv_dtype])
    if group_size is not None:
        if not p.quantised:
            raise CliError(f"--group-size applies to integer weights (w4), not to --dtype {name}")
        if group_size <= 0:
            raise CliError(f"--group-size must be positive, got {group_size}")
        p = replace(p, group_size=group_size)
    return p


def checkpoint_precision(torch_dtype: str) -> Precision:
    """The precision a checkpoint was saved in (config.json's torch_dtype / dtype)."""
    return PRECISIONS[TORCH_DTYPES.get(torch_dtype, "bf16")]
