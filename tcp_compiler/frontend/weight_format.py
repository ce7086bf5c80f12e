"""Weight formats: how a projection weight is stored (codes, scales, zero points, a lookup table)
and how its blocks fall on the builder's named axes.

One description covers every format: codes of dtype `codes`, one scale per block of `block` =
(rows, columns) of the Hugging Face [out, in] matrix (0: the whole axis, so (0, 0) is per tensor,
(1, 0) per output channel, (1, g) groups of g inputs, (128, 128) DeepSeek's blocks), optionally a
zero point per block, optionally a table the codes index (fp4 e2m1 -> its value). A format with
`edges` (DeepSeek's fp8 blocks) cuts an axis its blocks do not tile into ceil(A / b) blocks, the
last one partial, as transformers' finegrained_fp8 dequantises them. The builder
reads nothing else, so a new format is one entry in FORMATS (and a reader if checkpoints store it).

Dequantised, an element is (table[q] or q, minus its block's zero) x its block's scale. `quantise`
makes a format's codes from float weights (costing and `--dtype` on a float checkpoint);
checkpoint readers (quantised_checkpoint.py) produce the same expanded parts from stored tensors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ir import BF16, E8M0, F32, FP8E4M3, I4, I8, U4, DType
from tcp_compiler.errors import FrontendError, OptionError
from tcp_compiler.frontend.quantize import group_split

# fp4 e2m1 (OCP MX spec 1.0, section 5.3.3): code 0-7 are +0, 0.5, 1, 1.5, 2, 3, 4, 6; 8-15 their negatives.
FP4_E2M1 = tuple(float(v) for v in np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(float))
_FP4_MAX = 6.0
_FP4_MAX_EXP = 2  # largest e2m1 exponent (6 = 1.5 x 2^2): MX scales put a block's max near 2^2


@dataclass(frozen=True)
class WeightFormat:
    """How one projection weight is stored; see the module docstring."""

    name: str
    codes: DType
    scale: DType | None
    block: tuple[int, int] = (0, 0)  # (rows, columns) sharing one scale / zero; 0: the whole axis
    zero: bool = False  # a zero point per block, stored as u4 (AWQ / GPTQ)
    table: tuple[float, ...] = ()  # the codes index this table (MXFP4's fp4 e2m1 values)
    act_quant: bool = False  # activations quantised per token to `codes` (w8a8), scales after the einsum
    keep: tuple[str, ...] = ()  # canonical weight names left in float (a checkpoint's ignore list)
    stored: bool = False  # a checkpoint stores the parts (read as tensor:codes / :scale / :zero)
    edges: bool = False  # a block may be cut short by the axis's end (fixed blocks, not --group-size's)

    def applies(self, name: str) -> bool:
        """Whether the canonical weight `name` is stored in this format (not on the keep list)."""
        module = name.removesuffix(".weight")
        return not any(_matches(pattern, module) for pattern in self.keep)

    def bits_per_weight(self, rows: int, cols: int) -> float:
        """Bits one element of a [rows, cols] weight costs in HBM: its code plus its share of the
        blocks' scales and zero points (ceil(rows / b) x ceil(cols / b) blocks: a partial edge
        block has a scale of its own)."""
        blocks = -(-rows // (self.block[0] or rows)) * -(-cols // (self.block[1] or cols))
        extra = (self.scale.bits if self.scale else 0) + (U4.bits if self.zero else 0)
        return self.codes.bits + extra * blocks / (rows * cols)


def _matches(pattern: str, module: str) -> bool:
    """compressed-tensors' `re:` regexes, else a module name or its trailing parts (`lm_head`,
    `mlp.gate`), as ignore lists and modules_to_not_convert name modules."""
    if pattern.startswith("re:"):
        return any(re.fullmatch(pattern[3:], m) is not None for m in (module, f"{module}.weight"))
    return f".{module}".endswith(f".{pattern}")


GROUP_SIZED = ("w4", "w4-zp")  # the --dtype formats whose groups --group-size sets

# As published quantised checkpoints do (compressed-tensors' and DeepSeek's ignore lists, AWQ,
# GPTQ, gpt-oss), the formats leave the LM head, MoE routers and Qwen2-MoE's shared-expert gate in bf16.
KEEP = ("lm_head", "mlp.gate", "block_sparse_moe.gate", "mlp.router", "mlp.shared_expert_gate")

# --dtype names of the formats (beside bf16 / fp8 in precision.py; w4 is tcpc's own symmetric
# int4, which quantises every projection); checkpoints get theirs from quantization_config.
FORMATS: dict[str, WeightFormat] = {
    "w4": WeightFormat("w4", I4, BF16, (1, 128)),
    "fp8-tensor": WeightFormat("fp8-tensor", FP8E4M3, F32, (0, 0), keep=KEEP),
    "fp8-channel": WeightFormat("fp8-channel", FP8E4M3, F32, (1, 0), keep=KEEP),
    "fp8-block": WeightFormat("fp8-block", FP8E4M3, F32, (128, 128), keep=KEEP, edges=True),
    "w8a16": WeightFormat("w8a16", I8, F32, (1, 0), keep=KEEP),
    "w8a8": WeightFormat("w8a8", I8, F32, (1, 0), act_quant=True, keep=KEEP),
    "w4-zp": WeightFormat("w4-zp", U4, BF16, (1, 128), zero=True, keep=KEEP),
    "mxfp4": WeightFormat("mxfp4", U4, E8M0, (1, 32), table=FP4_E2M1, keep=KEEP),
}


@dataclass(frozen=True)
class Edge:
    """A side of a weight (its output or its contracted axes, flattened row-major) whose blocks of
    `size` the axes do not tile: `blocks` = ceil(elements / size) scales along scale axis `axis`,
    the last block partial. The codes keep the side's axes whole (no padding in HBM); each
    element's scale is its block's, picked by position (weights.py gathers it as it fetches)."""

    axis: str
    axes: dict[str, int]
    size: int

    @property
    def elements(self) -> int:
        return math.prod(self.axes.values())

    @property
    def blocks(self) -> int:
        return -(-self.elements // self.size)


@dataclass(frozen=True)
class Layout:
    """A weight of `axes` cut into its format's blocks: the codes' axes (a blocked axis A the
    blocks tile becomes Ag x Ai), the scales' axes (the codes' without the within-block ones; an
    `edges` side becomes its one axis of blocks), the contracted axis split the activation must
    follow, and the output axis that was split (merged back after dequantising, a free view)."""

    codes: dict[str, int]
    scales: dict[str, int]
    split: tuple[str, int] | None
    out_split: str | None
    edges: tuple[Edge, ...] = ()

    @property
    def merged(self) -> dict[str, int]:
        """The codes' axes with the split output axis whole again (contracted splits stay)."""
        a = self.out_split
        if a is None:
            return dict(self.codes)
        result: dict[str, int] = {}
        for name, n in self.codes.items():
            if name == f"{a}i":
                result[a] = result.pop(f"{a}g") * n
            else:
                result[name] = n
        return result

    @property
    def blocked(self) -> dict[str, int]:
        """The codes' axes with each edge side as whole blocks (`_blocked`)."""
        return _blocked(self.codes, self.edges)

    def to_blocks(self, x: np.ndarray, mode: str) -> np.ndarray:
        """x (shaped like the codes) in the `blocked` shape: each edge side flattened and padded
        to whole blocks, with zeros (mode "constant") or its last element (mode "edge")."""
        shape, names = list(self.codes.values()), list(self.codes)
        x = x.reshape(shape)
        for edge in self.edges:
            i = names.index(next(iter(edge.axes)))
            x = x.reshape(*shape[:i], edge.elements, *shape[i + len(edge.axes) :])
            pad = [(0, 0)] * x.ndim
            pad[i] = (0, edge.blocks * edge.size - edge.elements)
            x = np.pad(x, pad, mode=mode)
            shape[i : i + len(edge.axes)] = [edge.blocks * edge.size]
            names[i : i + len(edge.axes)] = [edge.axis]
        return x.reshape(tuple(self.blocked.values()))

    def from_blocks(self, x: np.ndarray) -> np.ndarray:
        """The inverse of `to_blocks`: the padding cut off, shaped like the codes."""
        names = list(self.blocked)
        for edge in self.edges:
            i = names.index(edge.axis)
            x = x.reshape(*x.shape[:i], edge.blocks * edge.size, *x.shape[i + 2 :])
            x = x[(slice(None),) * i + (slice(0, edge.elements),)]
            names[i : i + 2] = [edge.axis]
        return x.reshape(tuple(self.codes.values()))


def _blocked(codes: dict[str, int], edges: Sequence[Edge]) -> dict[str, int]:
    """`codes` with each edge side as whole blocks `{axis}` x `{axis}i` (its last block padded):
    the shape in which every block is an aligned sub-array."""
    result: dict[str, int] = {}
    for name, n in codes.items():
        edge = next((e for e in edges if name in e.axes), None)
        if edge is None:
            result[name] = n
        elif name == next(iter(edge.axes)):
            result.update({edge.axis: edge.blocks, f"{edge.axis}i": edge.size})
    return result


def layout(name: str, fmt: WeightFormat, axes: dict[str, int], contract: Sequence[str]) -> Layout:
    """The blocks of weight `name` with `axes` ([E,] out..., in...; `contract` the in axes).

    A side whose blocks tile one of its axes splits it; otherwise a format with `edges` cuts the
    side into ceil(elements / block) blocks (an Edge), and any other format refuses. A stacked
    expert axis E always keeps its own scales (experts are separate tensors)."""
    out = [a for a in axes if a not in contract and a != "E"]
    codes, within = dict(axes), set()
    split = None
    out_split = None
    edges: list[Edge] = []
    for side, size in ((out, fmt.block[0]), (list(contract), fmt.block[1])):
        if size == 0 or not side:
            within |= set(side)
            continue
        if size == 1:
            continue
        try:
            axis, inner = group_split(name, axes, side, size)
        except OptionError:
            if side is not out and fmt.name in GROUP_SIZED:  # group_split's error names group_size
                raise
            if not fmt.edges:
                what = "rows do not tile its output" if side is out else "columns do not tile its input"
                shape = " x ".join(f"{a}={axes[a]}" for a in side)
                raise FrontendError(f"{name}: {fmt.name} blocks of {size} {what} axes {shape}") from None
            edges.append(Edge(f"{''.join(side)}g", {a: axes[a] for a in side}, size))
            within |= set(side)
            continue
        codes = _split_axis(codes, axis, inner)
        within |= set(side[side.index(axis) + 1 :]) | {f"{axis}i"}
        if side is out:
            out_split = axis
        else:
            split = (axis, inner)
    within |= {f"{e.axis}i" for e in edges}
    scales = {a: n for a, n in _blocked(codes, edges).items() if a not in within}
    return Layout(codes, scales, split, out_split, tuple(edges))


def _split_axis(axes: dict[str, int], axis: str, inner: int) -> dict[str, int]:
    result: dict[str, int] = {}
    for a, n in axes.items():
        result.update({f"{axis}g": n // inner, f"{axis}i": inner} if a == axis else {a: n})
    return result


@dataclass(frozen=True)
class Parts:
    """A weight in a format, each part expanded to one value per element of the weight (as the
    checkpoint readers and `quantise` give them): codes, scale and zero point (None if absent)."""

    codes: np.ndarray
    scale: np.ndarray | None
    zero: np.ndarray | None


def compress(parts_value: np.ndarray, lay: Layout, name: str, part: str) -> np.ndarray:
    """An expanded part (one value per weight element) as its param: one value per block. Raises
    if a block's values differ (a layout the format's blocks do not describe); a partial edge
    block is padded with its own last value, so only the values it holds are compared."""
    blocked = lay.to_blocks(parts_value, "edge")
    shape = blocked.shape
    pick = tuple(slice(None) if a in lay.scales else slice(0, 1) for a in lay.blocked)
    first = blocked[pick]
    if not np.array_equal(np.broadcast_to(first, shape), blocked, equal_nan=True):
        raise FrontendError(
            f"{name}: its {part} is not constant over the format's blocks of {lay.blocked} (this chip's "
            f"share, or this part of a fused weight, starts inside a block the checkpoint stores)"
        )
    return first.reshape(tuple(lay.scales.values()))


def quantise(w: np.ndarray, fmt: WeightFormat, lay: Layout) -> Parts:
    """`fmt`'s codes, scales and zeros for float weights `w` (shaped like the weight's axes), each
    expanded to `w`'s shape: symmetric absmax scales, AWQ-style min/max zero points, MX scales.
    A partial edge block's scale comes from the elements it holds (its zero padding adds none)."""
    x = lay.to_blocks(w.astype(np.float32), "constant")
    within = tuple(i for i, a in enumerate(lay.blocked) if a not in lay.scales)
    top = np.abs(x).max(axis=within, keepdims=True)
    if fmt.zero:
        high = np.maximum(x.max(axis=within, keepdims=True), 0)
        low = np.minimum(x.min(axis=within, keepdims=True), 0)
        scale = _round_scale(np.maximum(high - low, 1e-30) / 15.0, fmt)
        zero = np.clip(np.rint(-low / scale), 0, 15)
        q = np.clip(np.rint(x / scale) + zero, 0, 15)
        return _expanded(w.shape, lay, q, scale, zero)
    if fmt.table:
        exponent = np.floor(np.log2(np.maximum(top, 2.0**-127))) - _FP4_MAX_EXP
        scale = _round_scale(2.0 ** np.clip(exponent, -127, 127), fmt)
        values = np.clip(x / scale, -_FP4_MAX, _FP4_MAX).astype(ml_dtypes.float4_e2m1fn)  # nearest even
        return _expanded(w.shape, lay, values.view(np.uint8).astype(np.float32), scale, None)
    if fmt.codes == FP8E4M3:
        limit = float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)
    else:
        limit = 2 ** (fmt.codes.bits - 1) - 1
    scale = _round_scale(np.maximum(top, 1e-30) / limit, fmt)
    return _expanded(w.shape, lay, fmt.codes.round(x / scale), scale, None)


def _round_scale(scale: np.ndarray, fmt: WeightFormat) -> np.ndarray:
    assert fmt.scale is not None
    return fmt.scale.round(scale)


def _expanded(out: tuple[int, ...], lay: Layout, q, scale, zero) -> Parts:
    shape = tuple(lay.blocked.values())

    def full(a):
        if a is None:
            return None
        return lay.from_blocks(np.broadcast_to(a, shape)).reshape(out).astype(np.float32)

    return Parts(full(q), full(scale), full(zero))
