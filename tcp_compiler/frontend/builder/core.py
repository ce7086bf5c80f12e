"""The graph under construction: sizes, sharding, constants, naming and metadata.

Every block (weights, positions, norms, attention, ffn, moe, model) is a set of functions taking
a `GraphBuilder`; they share state only through it. Naming is the core's: inside a decoder layer
(`with b.layer(i, layer)`) `b.name("q")` is `l{i}.q`, and the builder records layer i and role `q` for it
in the graph's metadata, so nothing downstream parses names.

Tensor parallelism (`chips=N`, Megatron style): the graph is ONE chip of an SPMD program and every
rank runs it with its own weight shards, so H, Hkv, F and V are per-chip sizes. Q/K/V, gate/up and
the experts' gate/up are column-parallel (a block of the [out, in] rows), o_proj and down
row-parallel (a block of the columns) followed by an all_reduce of the [B, S, D] partial sums;
with fewer KV heads than chips each chip holds the one KV head its query heads read. The LM head
and the embedding are vocab-parallel when N divides V: each chip holds V / N rows, the lookup's
rows join in an all_reduce and the logits in an all_gather. Norms, router and RoPE tables are
replicated. With chips=1 no collective appears and every param is whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ir import F32, I32, DType, Graph, Node, TensorType
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.config import Layer, ModelConfig
from tcp_compiler.frontend.precision import Precision

Getter = Callable[[str], np.ndarray]
Cut = Callable[[np.ndarray, int], np.ndarray]  # (whole Hugging Face tensor, rank) -> the rank's part
Weight = tuple[Node, tuple[str, ...], tuple[str, int] | None]  # (operand, contracted axes, group split)


@dataclass(frozen=True)
class Binding:
    """How a param's value is made for a rank: from these checkpoint tensors (none for tables)."""

    sources: tuple[str, ...]
    make: Callable[[Getter, int], np.ndarray]


def whole(w: np.ndarray, rank: int) -> np.ndarray:
    return w


def cut(
    dim: int, parts: int, index: Callable[[int], int] = lambda rank: rank, width: int | None = None
) -> Cut:
    """Block `index(rank)` of `parts` equal blocks along `dim` (0: rows of [out, in], 1: columns);
    with `width`, blocks of that many from the tensor zero-padded to `parts` x `width` (a width
    the chips or a weight format's blocks do not divide: the last chips hold the zeros)."""
    if parts == 1 and width is None:
        return whole

    def block(w: np.ndarray, rank: int) -> np.ndarray:
        n, i = width or w.shape[dim] // parts, index(rank)
        if width is not None and w.shape[dim] < parts * width:
            pad = [(0, 0)] * w.ndim
            pad[dim] = (0, parts * width - w.shape[dim])
            w = np.pad(w, pad)
        return w[(slice(None),) * dim + (slice(i * n, (i + 1) * n),)]

    return block


def _check_ssm_split(cfg: ModelConfig, chips: int) -> None:
    """Mamba layers split over chips as Megatron splits a block: Mamba-1 by inner channels, Mamba-2
    by whole groups of heads (each chip's heads keep their own B and C), the gated DeltaNet by
    whole key heads, RWKV-4 by WKV channels and RWKV-5 / 6 by whole heads; a one-line refusal
    when the chips do not divide them."""
    ssm = cfg.ssm
    if ssm is None or chips == 1:
        return
    if ssm.kind == "rwkv4" and ssm.inner % chips:
        raise FrontendError(f"{cfg.name}: RWKV's {ssm.inner} WKV channels do not split over {chips} chips")
    if ssm.kind in ("rwkv5", "rwkv6") and ssm.heads % chips:
        raise FrontendError(f"{cfg.name}: RWKV's {ssm.heads} heads do not split over {chips} chips")
    if ssm.kind == "gated_delta" and ssm.groups % chips:
        raise FrontendError(
            f"{cfg.name}: the gated DeltaNet's {ssm.groups} key heads (linear_num_key_heads) do not split "
            f"over {chips} chips (the key heads must be a multiple of the chips)"
        )
    if ssm.kind == "mamba" and ssm.inner % chips:
        raise FrontendError(f"{cfg.name}: Mamba's inner width {ssm.inner} does not split over {chips} chips")
    if ssm.kind == "mamba2" and ssm.groups % chips:
        raise FrontendError(
            f"{cfg.name}: Mamba-2's {ssm.heads} heads in {ssm.groups} groups (n_groups) do not split over "
            f"{chips} chips (the groups must be a multiple of the chips)"
        )


def padded_width(width: int, chips: int, align: int) -> int:
    """A chip's share of a width split over `chips`, rounded up to a multiple of `align` (a weight
    format's blocks along it): width / chips when both divide, else the zero-padded share."""
    share = -(-width // chips)
    return -(-share // align) * align


@dataclass(frozen=True)
class Sharding:
    """One chip's share of a model over `chips`: per-chip head, width and vocab sizes, and the cuts."""

    chips: int
    heads: int
    kv_heads: int
    kv_replicas: int  # chips holding the same KV head (1 when the KV heads split)
    intermediate: int
    moe_intermediate: int
    vocab: int  # embedding and LM head rows per chip: vocab / chips, or the whole vocab when replicated

    align: int  # a chip's MLP and expert widths are multiples of this (a group-sized format's groups)

    @staticmethod
    def plan(cfg: ModelConfig, precision: Precision, chips: int, layer: Layer | None = None) -> Sharding:
        """Per-chip sizes (of `layer` when its KV heads or MLP width are its own), or a one-line
        FrontendError naming what does not divide. MLP and expert widths never refuse: a share
        the chips or the format's groups do not divide is zero-padded up (padded rows give zero
        activations, padded columns add nothing); a format whose blocks may be cut short at an
        edge (fp8-block) holds the share unpadded, its last block partial."""
        H, Hkv, N = cfg.heads, cfg.kv_heads if layer is None else cfg.kv_heads_of(layer), chips
        intermediate = cfg.intermediate if layer is None else cfg.intermediate_of(layer)
        _check_ssm_split(cfg, N)
        attends = any("attention" in each.mixers or each.shared is not None for each in cfg.layers)
        if attends and (H % N or (Hkv % N if Hkv >= N else N % Hkv)):
            raise FrontendError(
                f"{cfg.name}: {H} heads and {Hkv} KV heads do not split over {N} chips "
                f"(heads must be a multiple of the chips, KV heads a multiple or a divisor of them)"
            )
        fmt = precision.format
        # groups and MX blocks must tile a chip's share: pad it; blocks with partial edges need not
        align = math.lcm(*(n for n in fmt.block if n)) if fmt is not None and not fmt.edges else 1
        moe_f = cfg.moe.intermediate if cfg.moe is not None else 0
        vocab = cfg.vocab // N if cfg.vocab % N == 0 else cfg.vocab
        replicas = N // Hkv if Hkv < N else 1
        kv = max(Hkv // N, 1)
        widths = (padded_width(intermediate, N, align), padded_width(moe_f, N, align))
        return Sharding(N, H // N if attends else H, kv, replicas, *widths, vocab, align)

    def width(self, whole: int) -> int:
        """A chip's share of an MLP or expert width (`padded_width`)."""
        return padded_width(whole, self.chips, self.align)

    def columns(self, width: int) -> Cut:
        """Column-parallel rows of a width whose per-chip share is `width` (zero-padded)."""
        return cut(0, self.chips, width=width)

    def rows(self, width: int) -> Cut:
        """Row-parallel columns of a width whose per-chip share is `width` (zero-padded)."""
        return cut(1, self.chips, width=width)

    @property
    def groups(self) -> int:
        return self.heads // self.kv_heads

    @property
    def column(self) -> Cut:
        """Column-parallel: this rank's block of the output rows."""
        return cut(0, self.chips)

    @property
    def row(self) -> Cut:
        """Row-parallel: this rank's block of the input columns."""
        return cut(1, self.chips)

    @property
    def row_bias(self) -> Cut:
        """A row-parallel projection's bias: whole on rank 0, zeros elsewhere, so that the sum over
        the chips (the all_reduce that follows) adds it exactly once."""
        if self.chips == 1:
            return whole
        return lambda w, rank: w if rank == 0 else np.zeros_like(w)

    @property
    def kv(self) -> Cut:
        """K/V projection rows: this rank's KV heads, or the one shared by `kv_replicas` ranks."""
        replicas = self.kv_replicas
        return cut(0, self.chips // replicas, lambda rank: rank // replicas)


@dataclass(frozen=True)
class Adapter:
    """A low-rank adapter beside a projection (Zamba2's, formally LoRA): x A^T B^T added to its
    output. `down` A [rank, in] is whole on every chip and read once per input however many
    projections share it (`label` names that product); `up` B [out, rank] is cut as the
    projection's rows are."""

    down: str
    up: str
    rank: int
    label: str


@dataclass
class ModelGraph:
    """A built graph plus what running or costing it needs to know."""

    graph: Graph
    config: ModelConfig
    precision: Precision
    phase: str
    batch: int
    seq: int
    past: int
    padded: bool
    chips: int = 1
    bindings: dict[str, Binding] = field(default_factory=dict)

    def bind(self, get: Getter, rank: int = 0) -> dict[str, np.ndarray]:
        """Rank `rank`'s param values by name, read through `get` (memoised here) and sliced."""
        if not 0 <= rank < self.chips:
            raise FrontendError(f"rank {rank} is outside the {self.chips} chips of {self.graph.name}")
        cache: dict[str, np.ndarray] = {}

        def memo(name: str) -> np.ndarray:
            if name not in cache:
                cache[name] = get(name)
            return cache[name]

        return {name: b.make(memo, rank) for name, b in self.bindings.items()}

    def checkpoint_params(self) -> list[Node]:
        """Params whose values come from the checkpoint (not computed tables like RoPE)."""
        return [self.graph[n] for n, b in self.bindings.items() if b.sources]


class GraphBuilder:
    """One graph being built: the model, precision, sizes and sharding every block reads, the
    params' bindings, and the layer and role of every value named in a layer."""

    def __init__(
        self,
        cfg: ModelConfig,
        precision: Precision,
        name: str,
        batch: int,
        seq: int,
        positions: int,
        chips: int,
        split: bool = False,
    ) -> None:
        self.cfg, self.p = cfg, precision
        self.sh = Sharding.plan(cfg, precision, chips)
        self.g = Graph(name)
        self.batch, self.seq, self.positions = batch, seq, positions
        # The residual stream is sequence-parallel (`join`, `gathered`): a chip holds S / chips tokens.
        self.split = split and chips > 1
        self.bindings: dict[str, Binding] = {}
        self.post_scales: dict[str, Node] = {}  # w8a8 weight -> its scales, applied after the einsum
        self.windows: set[int] = set()  # sliding windows whose KV caches are rings
        self.packed = False  # positions are per token [B, S] (packed documents), not an iota
        self._layer = -1  # the decoder layer being built, -1 outside one
        self._layers: dict[str, int] = {}  # value -> its decoder layer (absent: none)
        self._roles: dict[str, str] = {}  # value -> its role in its layer (absent: its name)
        self._received: str | None = None  # the input a later pipeline stage receives
        self.embedded: Node | None = None  # the embedding's output (Zamba2's shared blocks read it)
        self.adapters: dict[str, Adapter] = {}  # projection weight -> the adapter added to it (`adapted`)

    @property
    def tokens(self) -> int:
        """The tokens of the residual stream this chip holds: S / chips when it is split, else S."""
        return self.seq // self.sh.chips if self.split else self.seq

    # -- naming and metadata -------------------------------------------------------------------

    @contextmanager
    def layer(self, i: int, layer: Layer) -> Iterator[None]:
        """Values named inside (through `name`) belong to decoder layer i, built with its sharding
        (`sh`: its own KV heads and MLP width where it has them)."""
        model = self.sh
        if layer.kv_heads is not None or layer.intermediate is not None:
            self.sh = Sharding.plan(self.cfg, self.p, model.chips, layer)
        self._layer = i
        try:
            yield
        finally:
            self._layer, self.sh = -1, model

    @contextmanager
    def adapted(self, adapters: dict[str, Adapter]) -> Iterator[None]:
        """Projections of these weights built inside (weights.linear) add their adapters: a
        shared weight's adapters differ from one use to the next."""
        self.adapters = adapters
        try:
            yield
        finally:
            self.adapters = {}

    def name(self, role: str) -> str:
        """The name of a value with this role: `l{i}.{role}` inside layer i, recorded as the
        layer's with its role; `role` itself outside a layer."""
        if self._layer < 0:
            return role
        name = f"l{self._layer}.{role}"
        self._layers[name], self._roles[name] = self._layer, role
        return name

    def derived(self, source: str, suffix: str) -> str:
        """`{source}{suffix}`: a value made from `source` alone (a cast, a view), of its layer,
        its role source's with the suffix."""
        name = source + suffix
        if source in self._layers:
            self._layers[name] = self._layers[source]
            self._roles[name] = self._roles[source] + suffix
        return name

    def receive(self, name: str, type: TensorType) -> Node:
        """The input this graph (a later pipeline stage) receives from the stage before it."""
        self._received = name
        return self.g.input(name, type)

    def done(self, phase: str, padded: bool, kv: list[Node]) -> ModelGraph:
        """The finished model graph, with its metadata: the KV outputs, the axes of the KV length
        (this builder names cached positions P and attended keys Sk), and each value's decoder
        layer and role (from `name` and `derived`, so nothing downstream parses names), and the
        input a later pipeline stage receives."""
        past = self.positions - 1 if phase == "decode" else 0
        meta = self.g.meta
        meta.kv_outputs = tuple(n.name for n in kv)
        rings = {axis: w for w in sorted(self.windows) for axis in _ring_axes(w)}
        meta.kv_axes = ("P", "Sk", *rings)
        meta.kv_windows = rings
        meta.layers = {n.name: self._layers.get(n.name, -1) for n in self.g.nodes}
        meta.roles = {n.name: self._roles.get(n.name, n.name) for n in self.g.nodes}
        meta.received = self._received
        return ModelGraph(
            self.g, self.cfg, self.p, phase, self.batch, self.seq, past, padded, self.sh.chips, self.bindings
        )

    # -- constants, casts, params --------------------------------------------------------------
    def const(self, value: float | int, dtype: DType = F32) -> Node:
        name = f"c.{dtype}.{value!r}".replace("-", "m").replace("+", "")
        if name not in self.g:
            self.g.add("const", name=name, type=TensorType.of(dtype), value=value)
        return self.g[name]

    def to(self, x: Node, dtype: DType) -> Node:
        """x in `dtype`, cast once however many einsums read it."""
        if x.type.dtype == dtype:
            return x
        name = self.derived(x.name, f".{dtype}")
        if name in self.g:
            return self.g[name]
        return self.g.add("cast", x, name=name, type=x.type.with_dtype(dtype))

    def einsum(self, *operands: Node, eq: str, name: str, dtype: DType = F32) -> Node:
        """An einsum accumulating in f32 (float operands) or i32 (w8a8's int8), as the contraction
        engine does."""
        sizes = {a.name: a.size for x in operands for a in x.type.axes}
        out = TensorType.from_pairs(dtype, [(n, sizes[n]) for n in eq.split("->")[1].split()])
        return self.g.add("einsum", *operands, name=name, eq=eq, type=out)

    def param(self, name: str, dtype: DType, axes: dict[str, int], binding: Binding) -> Node:
        if name in self.g:
            return self.g[name]
        self.bindings[name] = binding
        return self.g.param(name, TensorType.of(dtype, **axes))

    def tensor(
        self, name: str, dtype: DType, axes: dict[str, int], part: Cut = whole, source: str | None = None
    ) -> Node:
        """A checkpoint tensor (canonical name `source`, by default `name`) as a param: this rank's
        `part` of it in the canonical layout, reshaped to `axes`."""
        shape, found = tuple(axes.values()), self.cfg.tensors.source(source or name)
        return self.param(
            name,
            dtype,
            axes,
            Binding(found.tensors, lambda get, rank: part(found.load(get), rank).reshape(shape)),
        )

    def all_reduce(self, x: Node, name: str) -> Node:
        """The sum of every chip's partial x (x itself on one chip), sent in the precision's
        collective dtype and returned in x's."""
        if self.sh.chips == 1:
            return x
        return self._wired(x, name, "all_reduce", op="sum")

    def join(self, x: Node, name: str) -> Node:
        """A block's row-parallel partial sums [B, S, D] joined into the residual stream's layout:
        an all_reduce, or with the stream split (`split`) a reduce_scatter along S (this chip's
        tokens summed over the chips: the all-reduce's first half, half its wire bytes)."""
        if not self.split:
            return self.all_reduce(x, name)
        return self._wired(x, name, "reduce_scatter", op="sum", axis="S")

    def gathered(self, x: Node) -> Node:
        """A block's input [B, S, D] on every token: with the stream split, this chip's S / chips
        tokens all-gathered along S (the all-reduce's second half), in the collective dtype the
        block's einsums read; x itself otherwise."""
        if not self.split:
            return x
        return self._wired(x, self.derived(x.name, ".gathered"), "all_gather", axis="S")

    def local(self, x: Node) -> Node:
        """This chip's tokens of x [..., S, ...] when the stream is split (a gather along S by the
        chip's S / chips positions, a per-rank index), x itself otherwise."""
        if not self.split:
            return x
        n = self.tokens
        if "tokens.mine" not in self.g:
            mine = Binding((), lambda get, rank: np.arange(rank * n, (rank + 1) * n, dtype=np.int32))
            self.param("tokens.mine", I32, {"S": n}, mine)
        return self.g.add("gather", x, self.g["tokens.mine"], name=self.derived(x.name, ".mine"), axis="S")

    def pick(self, h: Node, index: Node, name: str) -> Node:
        """Rows of h [B, S, D] at token `index` (axes of its own, or [B] batch-matched): a gather
        along S, or with the stream split the one chip holding each row gives it and the others
        zeros, summed over the chips in f32 (exact: one term is not zero)."""
        g = self.g
        if not self.split:
            return g.add("gather", h, index, name=name, axis="S")
        n = self.tokens
        offset = Binding((), lambda get, rank: np.array(rank * n, np.int32))
        first = self.param("tokens.first", I32, {}, offset)
        at = g.add("sub", index, first, name=f"{name}.local")
        zero = self.const(0, I32)
        above = g.add("ge", at, zero, name=f"{name}.above")
        below = g.add("lt", at, self.const(n, I32), name=f"{name}.below")
        mine = g.add("and", above, below, name=f"{name}.held")
        at = g.add("where", mine, at, zero, name=f"{name}.index")
        rows = g.add("gather", h, at, name=f"{name}.rows", axis="S")
        kept = g.add("where", mine, rows, self.const(0.0), name=f"{name}.partial")
        return g.add("all_reduce", kept, name=name, op="sum", chips=self.sh.chips)

    def _wired(self, x: Node, name: str, kind: str, **attrs) -> Node:
        """Collective `kind` of x over the chips, sent in the precision's collective dtype and
        returned in x's."""
        wire, chips = self.p.collective, self.sh.chips
        if x.type.dtype == wire:
            return self.g.add(kind, x, name=name, chips=chips, **attrs)
        sent = self.g.add("cast", x, name=self.derived(name, ".send"), type=x.type.with_dtype(wire))
        done = self.g.add(kind, sent, name=self.derived(name, f".{wire}"), chips=chips, **attrs)
        return self.g.add("cast", done, name=name, type=done.type.with_dtype(x.type.dtype))

    def softcap(self, x: Node, cap: float, label: str) -> Node:
        """cap * tanh(x / cap): Gemma 2's soft bound on attention scores and logits."""
        c = self.const(float(np.float32(cap)))
        over = self.g.add("div", x, c, name=self.name(f"{label}.over"))
        t = self.g.add("tanh", over, name=self.name(f"{label}.tanh"))
        return self.g.add("mul", t, c, name=self.name(label))

    def scaled(self, x: Node, scale: float, label: str) -> Node:
        """x times a multiplier as float32 holds it (Falcon-H1's muP multipliers); x itself at 1."""
        if scale == 1.0:
            return x
        return self.g.add("mul", x, self.const(float(np.float32(scale))), name=self.name(label))

    def kv_axis_names(self, window: int | None) -> tuple[str, str]:
        """(cache axis, key axis) of a layer: P and Sk, or for a sliding window of W tokens its own
        pair (the cache is a ring of at most W slots, so it stops growing with the context)."""
        if window is None:
            return "P", "Sk"
        self.windows.add(window)
        return _ring_axes(window)


def _ring_axes(window: int) -> tuple[str, str]:
    return f"Pw{window}", f"Skw{window}"
