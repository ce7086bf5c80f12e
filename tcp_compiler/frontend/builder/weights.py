"""Projection weights in the precision's weight format, and the projections that read them.

Weights keep their Hugging Face names and layouts ([out, in], heads split out by a free reshape),
so binding a checkpoint is a reshape per tensor (a stack for MoE experts). A quantised format's
codes, scales and zero points are params of their own, dequantised as the weight is fetched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ir import F32, FP8E4M3, I32, U4, Axis, DType, Node, TensorType
from tcp_compiler.frontend.builder.core import Adapter, Binding, Cut, Getter, GraphBuilder, Weight, whole
from tcp_compiler.frontend.weight_format import Edge, Layout, Parts, WeightFormat, compress, layout, quantise


def weight(
    b: GraphBuilder,
    name: str,
    axes: dict[str, int],
    contract: Sequence[str],
    sources: Sequence[str] | None = None,
    make: Callable[[Getter, int], np.ndarray] | None = None,
    part: Cut = whole,
    scaled_after: bool = False,
) -> Weight:
    """A projection weight in the precision's weight format, dequantised as it is fetched;
    returns (operand, contracted axes, split).

    `make` gives a rank's float weight (by default this rank's `part` of the tensor `name`). A
    format quantises that shard, or, when the checkpoint stores the format, reads the stored
    parts (`name:codes`, `:scale`, `:zero`, expanded to one value per element) through the same
    `make`, so scales and zero points are cut exactly as their weight is.

    The format's blocks (weight_format.layout) split a blocked axis A into `Ag` x `Ai`; on the
    contracted side `split` is (A, size of Ai) so the caller splits the activation the same
    way; a split output side is merged back after dequantising (a free view). A side the blocks
    do not tile (an Edge: DeepSeek's partial edge blocks) stays whole, its scales picked per
    element by block position as they are fetched. With
    `scaled_after` a format that quantises activations (w8a8) returns its integer codes and
    leaves its scales in `b.post_scales` for the caller to apply after the einsum.
    """
    if make is None:
        found, shape = b.cfg.tensors.source(name), tuple(axes.values())
        sources = found.tensors
        make = lambda get, rank: part(found.load(get), rank).reshape(shape)  # noqa: E731
    sources = tuple(sources or (name,))
    p, fmt = b.p, b.p.format
    if fmt is None or not fmt.applies(name):
        dtype = p.weight if fmt is None else p.act
        return b.param(name, dtype, axes, Binding(sources, make)), tuple(contract), None
    lay = layout(name, fmt, axes, contract)
    parts = _parts_maker(fmt, lay, make)
    shape = tuple(lay.codes.values())

    def codes(get: Getter, rank: int) -> np.ndarray:
        return parts(get, rank).codes.reshape(shape)

    def per_block(which: str) -> Binding:
        def made(get: Getter, rank: int) -> np.ndarray:
            return compress(getattr(parts(get, rank), which), lay, name, which)

        return Binding(sources, made)

    q = b.param(name, fmt.codes, lay.codes, Binding(sources, codes))
    s = b.param(f"{name}.scale", fmt.scale, lay.scales, per_block("scale"))
    z = b.param(f"{name}.zero", U4, lay.scales, per_block("zero")) if fmt.zero else None
    grouped = tuple(contract)
    if lay.split is not None:
        axis = lay.split[0]
        grouped = tuple(c2 for c in contract for c2 in ((f"{axis}g", f"{axis}i") if c == axis else (c,)))
    if scaled_after and fmt.act_quant:
        b.post_scales[name] = s
        return q, grouped, lay.split
    return _dequantise(b, q, s, z, fmt, lay), grouped, lay.split


def _parts_maker(fmt: WeightFormat, lay: Layout, make: Callable[[Getter, int], np.ndarray]):
    """(get, rank) -> the rank's weight in `fmt`: the checkpoint's stored parts (read as
    `tensor:codes`, `:scale`, `:zero`, each through `make` so they are cut as the weight is), or
    its float shard quantised."""
    if not fmt.stored:
        return lambda get, rank: quantise(make(get, rank), fmt, lay)

    def stored(get: Getter, rank: int) -> Parts:
        def part(suffix: str) -> np.ndarray:
            return make(lambda tensor: get(f"{tensor}:{suffix}"), rank)

        # A chip's share zero-padded past the weight's width (Sharding) has zero codes and zero
        # scales; e8m0 holds no zero (it would read NaN), so padded blocks take scale 1.
        scale = part("scale")
        scale = np.where(scale == 0, 1, scale).astype(scale.dtype)
        return Parts(part("codes"), scale, part("zero") if fmt.zero else None)

    return stored


def _dequantise(b: GraphBuilder, q: Node, s: Node, z: Node | None, fmt: WeightFormat, lay: Layout) -> Node:
    """(table[q] or q, minus the zero point) x scale, in the operand dtype: the Fetch Adapter's
    lookup (fp4 -> fp8), casts and integer zero-point subtraction, then the scale multiply (an edge
    side's scales looked up by each element's block, as the Fetch Adapter looks codes up). A weight
    used again (Zamba2's shared blocks) is dequantised again where it is used, as it is fetched
    again: those values are named in the using layer."""
    g, name = b.g, q.name
    again = f"{name}.dequant" in g
    if again:
        name = b.name(name)

    def to(x: Node, dtype: DType) -> Node:  # a param's casts are the using layer's own when used again
        if not again or x.type.dtype == dtype or x.kind != "param":
            return b.to(x, dtype)
        return g.add("cast", x, name=f"{name}.{x.name}.{dtype}", type=x.type.with_dtype(dtype))

    work = b.p.act if fmt.scale == b.p.act else F32  # the VE multiplies in f32
    if fmt.table:
        table = _lookup_table(b, fmt.table)
        x = b.to(g.add("gather", table, q, name=f"{name}.decoded", axis="C"), work)
    elif z is not None:
        x = b.to(g.add("sub", to(q, I32), to(z, I32), name=f"{name}.centred"), work)
    else:
        x = to(q, work)
    for edge in lay.edges:
        s = g.add("gather", s, _block_index(b, edge), name=f"{name}.scale.{edge.axis}", axis=edge.axis)
    x = g.add("mul", x, to(s, work), name=f"{name}.dequant")
    if lay.out_split is not None:
        x = g.add("reshape", x, name=f"{name}.merged", type=TensorType.of(work, **lay.merged))
    return b.to(x, b.p.act)


def _block_index(b: GraphBuilder, edge: Edge) -> Node:
    """Each element's block along an edge side, a const i32 over its axes (flat position // block
    size): address arithmetic the dequantiser does, shared by every weight with that side."""
    axes = "".join(f"{a}{n}" for a, n in edge.axes.items())
    name = f"block_of.{axes}.b{edge.size}"
    if name not in b.g:
        values = (np.arange(edge.elements) // edge.size).tolist()
        b.g.add("const", name=name, type=TensorType.of(I32, **edge.axes), values=values)
    return b.g[name]


def _lookup_table(b: GraphBuilder, values: tuple[float, ...]) -> Node:
    """The codes' values as a const [C] in fp8 (the Fetch Adapter's fp4 -> fp8 table)."""
    name = "fp4e2m1.table"
    if name not in b.g:
        b.g.add("const", name=name, type=TensorType.of(FP8E4M3, C=len(values)), values=list(values))
    return b.g[name]


def split_groups(b: GraphBuilder, x: Node, split: tuple[str, int] | None) -> Node:
    """Splits x's axis A into [Ag, Ai] (a free view) to meet a group-quantised weight."""
    if split is None:
        return x
    axis, inner = split
    name = b.derived(x.name, f".groups.{axis}{inner}")
    if name in b.g:
        return b.g[name]
    axes = []
    for a in x.type.axes:
        axes += [Axis(f"{axis}g", a.size // inner), Axis(f"{axis}i", inner)] if a.name == axis else [a]
    return b.g.add("reshape", x, name=name, type=x.type.with_axes(axes))


def linear(
    b: GraphBuilder,
    x: Node,
    name: str,
    axes: dict[str, int],
    contract: Sequence[str],
    out: Sequence[str],
    label: str,
    part: Cut = whole,
    bias: Cut | None = None,
) -> Node:
    """x times the weight `name` into the value of role `label`; with `bias` (its cut), plus the
    `.bias` twin of the weight over the weight's output axes, and the adapter the builder has for
    the weight (core.GraphBuilder.adapted)."""
    adapter = b.adapters.get(name)
    if adapter is None:
        return _project(b, x, name, axes, contract, out, label, part, bias)
    y = _project(b, x, name, axes, contract, out, f"{label}.base", part, bias)
    return _adapt(b, x, y, adapter, axes, contract, out, label, part)


def _project(
    b: GraphBuilder, x: Node, name: str, axes: dict[str, int], contract: Sequence[str], out: Sequence[str],
    label: str, part: Cut, bias: Cut | None,
) -> Node:
    """x times the weight `name` (see linear), plus its bias."""
    w, grouped, split = weight(b, name, axes, contract, part=part, scaled_after=True)
    x = split_groups(b, x, split)
    post = b.post_scales.get(w.name)
    if post is None:
        x = b.to(x, w.type.dtype)
    else:
        x, x_scale = _quantise_rows(b, x, grouped, w.type.dtype)
    eq = f"{' '.join(x.type.names)}, {' '.join(w.type.names)} -> {' '.join(out)}"
    y = b.einsum(x, w, name=b.name(label), eq=eq, dtype=F32 if post is None else I32)
    if post is not None:  # integer sums, scaled back per token and per output channel
        y = b.g.add("mul", b.to(y, F32), x_scale, name=b.name(f"{label}.xs"))
        y = b.g.add("mul", y, b.to(post, F32), name=b.name(f"{label}.ws"))
    if bias is None:
        return y
    bias_axes = {a: n for a, n in axes.items() if a not in contract}
    t = b.tensor(name.removesuffix(".weight") + ".bias", b.p.table, bias_axes, bias)
    return b.g.add("add", y, b.to(t, F32), name=b.name(f"{label}_b"))


def _adapt(
    b: GraphBuilder, x: Node, y: Node, adapter: Adapter, axes: dict[str, int], contract: Sequence[str],
    out: Sequence[str], label: str, part: Cut,
) -> Node:
    """y plus the adapter's x A^T B^T: x A^T [.., rank] once per input (projections sharing A
    reuse it), then B's rows cut as the projection's are."""
    down = b.name(adapter.label)
    if down in b.g:
        low = b.g[down]
    else:
        lead = [a for a in x.type.names if a not in contract]
        low_axes = {"Ra": adapter.rank, **{a: axes[a] for a in contract}}
        low = _project(b, x, adapter.down, low_axes, contract, [*lead, "Ra"], adapter.label, whole, None)
    up_axes = {**{a: n for a, n in axes.items() if a not in contract}, "Ra": adapter.rank}
    extra = _project(b, low, adapter.up, up_axes, ["Ra"], out, f"{label}.adapter", part, None)
    return b.g.add("add", y, extra, name=b.name(label))


def apply(b: GraphBuilder, x: Node, w: Weight, out: Sequence[str], label: str) -> Node:
    """x times a projection weight already made (dequantised, its contracted axis split into
    groups when integer: x's is split the same way) into the value of role `label`."""
    operand, _, split = w
    x = b.to(split_groups(b, x, split), operand.type.dtype)
    eq = f"{' '.join(x.type.names)}, {' '.join(operand.type.names)} -> {' '.join(out)}"
    return b.einsum(x, operand, name=b.name(label), eq=eq)


def _quantise_rows(b: GraphBuilder, x: Node, contract: Sequence[str], dtype: DType) -> tuple[Node, Node]:
    """x as `dtype` integers with one dynamic scale per token (its largest |x| over the
    contracted axes maps to the largest code), as w8a8 kernels quantise activations; returns
    (codes, f32 scales). Computed once however many projections read x."""
    g, tag = b.g, b.derived(x.name, f".{dtype}.rows")
    if tag not in g:
        xf = b.to(x, F32)
        top = g.add("reduce", g.add("abs", xf, name=b.derived(tag, ".abs")), name=b.derived(tag, ".max"),
                    op="max", axes=list(contract))  # fmt: skip
        limit = b.const(float(2 ** (dtype.bits - 1) - 1))
        step = g.add("div", top, limit, name=b.derived(tag, ".step"))
        step = g.add("max", step, b.const(1e-30), name=b.derived(tag, ".scale"))
        scaled = g.add("div", xf, step, name=b.derived(tag, ".scaled"))
        g.add("cast", scaled, name=tag, type=xf.type.with_dtype(dtype))
    return g[tag], g[b.derived(tag, ".scale")]
