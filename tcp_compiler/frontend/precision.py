"""Precision modes: which dtype weights, einsum activations, the KV cache and tables use.

Element-wise work (norms, softmax, activations, residual adds) runs in f32 everywhere, as the
Vector Engine does; casts before each einsum put its operands in the mode's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ir import BF16, F16, F32, FP8E4M3, DType
from tcp_compiler.errors import OptionError
from tcp_compiler.frontend.weight_format import FORMATS, GROUP_SIZED, WeightFormat


@dataclass(frozen=True)
class Precision:
    name: str
    weight: DType  # projection and expert weights (a format's codes)
    act: DType  # activation operand of projection einsums (a format's weights dequantise to it)
    kv: DType  # KV cache and the attention einsums' operands
    table: DType  # embedding table and norm weights
    format: WeightFormat | None = None  # scaled / packed projection weights (weight_format.py)
    # What tensor-parallel collectives send: partial sums leave their einsum in f32 and are cast
    # to this before the all_reduce (as TP kernels reduce in the activation dtype); None: the
    # table dtype (bf16 for bf16, fp8 and w4), whatever the KV cache is stored in.
    collective_dtype: DType | None = None

    @property
    def collective(self) -> DType:
        return self.collective_dtype or self.table

    @property
    def quantised(self) -> bool:
        return self.format is not None

    @property
    def operand(self) -> DType:
        """The dtype projection einsums multiply in: the weights', a format's dequantised operand
        (act), or w8a8's integer codes."""
        if self.format is None:
            return self.weight
        return self.format.codes if self.format.act_quant else self.act

    @property
    def group_size(self) -> int:
        """Inputs per scale of a group format (w4, w4-zp, mxfp4), 0 for the others."""
        return self.format.block[1] if self.format is not None and self.format.block[0] == 1 else 0


def _formatted(fmt: WeightFormat) -> Precision:
    """A weight format with bf16 activations, KV cache and tables (w8a8: int8 activations)."""
    return Precision(fmt.name, fmt.codes, BF16, BF16, BF16, format=fmt)


PRECISIONS = {
    "f32": Precision("f32", F32, F32, F32, F32),
    "f16": Precision("f16", F16, F16, F16, F16),
    "bf16": Precision("bf16", BF16, BF16, BF16, BF16),
    "fp8": Precision("fp8", FP8E4M3, FP8E4M3, BF16, BF16),
    **{name: _formatted(fmt) for name, fmt in FORMATS.items()},
}
GROUPED = GROUP_SIZED  # formats whose group size --group-size may change (MX blocks are 32 by definition)
TORCH_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


# KV cache dtypes a run may choose apart from its precision (--kv-dtype): fp8 halves the cache's
# bytes and capacity, as serving stacks' fp8 KV caches do; the attention einsums then read fp8.
KV_DTYPES = {"bf16": BF16, "fp8": FP8E4M3}


def precision(name: str, group_size: int | None = None, kv_dtype: str | None = None) -> Precision:
    if name not in PRECISIONS:
        raise OptionError("{dtype} {value!r} is not supported (supported: {known})", value=name,
                          known=", ".join(PRECISIONS))  # fmt: skip
    p = PRECISIONS[name]
    if kv_dtype is not None:
        if kv_dtype not in KV_DTYPES:
            raise OptionError("{kv_dtype} {value!r} is not supported (supported: {known})", value=kv_dtype,
                              known=", ".join(KV_DTYPES))  # fmt: skip
        p = replace(p, kv=KV_DTYPES[kv_dtype])
    if group_size is not None:
        if name not in GROUPED or p.format is None:
            raise OptionError("{group_size} applies to integer weights ({grouped}), not to {dtype} {value}",
                              grouped=", ".join(GROUPED), value=name)  # fmt: skip
        if group_size <= 0:
            raise OptionError("{group_size} must be positive, got {value}", value=group_size)
        p = replace(p, format=replace(p.format, block=(1, group_size)))
    return p


def checkpoint_precision(torch_dtype: str, fmt: WeightFormat | None = None) -> Precision:
    """The precision a checkpoint was saved in (config.json's torch_dtype / dtype), with its
    projection weights in `fmt` when its quantization_config stores them so."""
    if fmt is not None:
        return _formatted(fmt)
    return PRECISIONS[TORCH_DTYPES.get(torch_dtype, "bf16")]
