"""Prefill and decode graphs from a ModelConfig, in the einsum form of seed 001.

Embedding is a gather; RoPE a gather from a [P, Kp, R, T] table of 2x2 rotations plus an einsum;
GQA an einsum that broadcasts the group axis G (no repeated K/V); masks are `where`; softmax is
reduce-max, sub, exp, reduce-sum, div; the LM head sees the last position only in prefill.
Weights keep their Hugging Face names and layouts ([out, in], heads split out by a free reshape),
so binding a checkpoint is a reshape per tensor (a stack for MoE experts).

Axis names: B batch, S tokens, D hidden, H query heads = Hkv x G, K head dim = R x Kp (the two
rotate_half halves), P cache positions, Sq / Sk query and key positions, F MLP width, V vocab,
E experts, Kk routed slots.

Tensor parallelism (`chips=N`, Megatron style): the graph is ONE chip of an SPMD program and every
rank runs it with its own weight shards, so H, Hkv, F and V are per-chip sizes. Q/K/V, gate/up and
the experts' gate/up are column-parallel (a block of the [out, in] rows), o_proj and down
row-parallel (a block of the columns) followed by an all_reduce of the [B, S, D] partial sums;
with fewer KV heads than chips each chip holds the one KV head its query heads read. The LM head
is vocab-parallel with an all_gather of the logits when N divides V. Embedding, norms, router and
RoPE tables are replicated. With chips=1 no collective appears and every param is whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ir import F32, FP8E4M3, I32, U4, Axis, DType, Graph, Node, TensorType
from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend import mla
from tcp_compiler.frontend.config import Layer, ModelConfig
from tcp_compiler.frontend.masks import DecodeMasks, PrefillMasks
from tcp_compiler.frontend.positions import alibi_slopes, sinusoidal_table
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.frontend.routing import route, shared_expert
from tcp_compiler.frontend.stages import Stage, whole_model
from tcp_compiler.frontend.weight_format import Layout, Parts, WeightFormat, compress, layout, quantise

Getter = Callable[[str], np.ndarray]
Cut = Callable[[np.ndarray, int], np.ndarray]  # (whole Hugging Face tensor, rank) -> the rank's part
Weight = tuple[Node, tuple[str, ...], tuple[str, int] | None]  # (operand, contracted axes, group split)


@dataclass(frozen=True)
class Binding:
    """How a param's value is made for a rank: from these checkpoint tensors (none for tables)."""

    sources: tuple[str, ...]
    make: Callable[[Getter, int], np.ndarray]


def _whole(w: np.ndarray, rank: int) -> np.ndarray:
    return w


def _cut(dim: int, parts: int, index: Callable[[int], int] = lambda rank: rank) -> Cut:
    """Block `index(rank)` of `parts` equal blocks along `dim` (0: rows of [out, in], 1: columns)."""
    if parts == 1:
        return _whole

    def cut(w: np.ndarray, rank: int) -> np.ndarray:
        n, i = w.shape[dim] // parts, index(rank)
        return w[(slice(None),) * dim + (slice(i * n, (i + 1) * n),)]

    return cut


@dataclass(frozen=True)
class Sharding:
    """One chip's share of a model over `chips`: per-chip head, width and vocab sizes, and the cuts."""

    chips: int
    heads: int
    kv_heads: int
    kv_replicas: int  # chips holding the same KV head (1 when the KV heads split)
    intermediate: int
    moe_intermediate: int
    vocab: int  # LM head rows per chip: vocab / chips, or the whole vocab when replicated

    @staticmethod
    def plan(cfg: ModelConfig, chips: int) -> Sharding:
        """Per-chip sizes, or a one-line FrontendError naming what does not divide."""
        H, Hkv, N = cfg.heads, cfg.kv_heads, chips
        if H % N or (Hkv % N if Hkv >= N else N % Hkv):
            raise FrontendError(
                f"{cfg.name}: {H} heads and {Hkv} KV heads do not split over {N} chips "
                f"(heads must be a multiple of the chips, KV heads a multiple or a divisor of them)"
            )
        if any(not layer.moe for layer in cfg.layers) and cfg.intermediate % N:
            raise FrontendError(f"{cfg.name}: MLP width {cfg.intermediate} does not split over {N} chips")
        moe_f = cfg.moe.intermediate if cfg.moe is not None else 0
        if any(layer.moe for layer in cfg.layers) and moe_f % N:
            raise FrontendError(f"{cfg.name}: expert width {moe_f} does not split over {N} chips")
        vocab = cfg.vocab // N if cfg.vocab % N == 0 else cfg.vocab
        replicas = N // Hkv if Hkv < N else 1
        kv = max(Hkv // N, 1)
        return Sharding(N, H // N, kv, replicas, cfg.intermediate // N, moe_f // N, vocab)

    @property
    def groups(self) -> int:
        return self.heads // self.kv_heads

    @property
    def column(self) -> Cut:
        """Column-parallel: this rank's block of the output rows."""
        return _cut(0, self.chips)

    @property
    def row(self) -> Cut:
        """Row-parallel: this rank's block of the input columns."""
        return _cut(1, self.chips)

    @property
    def row_bias(self) -> Cut:
        """A row-parallel projection's bias: whole on rank 0, zeros elsewhere, so that the sum over
        the chips (the all_reduce that follows) adds it exactly once."""
        if self.chips == 1:
            return _whole
        return lambda w, rank: w if rank == 0 else np.zeros_like(w)

    @property
    def kv(self) -> Cut:
        """K/V projection rows: this rank's KV heads, or the one shared by `kv_replicas` ranks."""
        replicas = self.kv_replicas
        return _cut(0, self.chips // replicas, lambda rank: rank // replicas)


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


def build_prefill(
    cfg: ModelConfig,
    precision: Precision,
    batch: int,
    seq: int,
    padded: bool = False,
    chips: int = 1,
    documents: int = 0,
    stage: Stage | None = None,
) -> ModelGraph:
    """Prompt processing: logits at each sequence's last real token, and every layer's KV cache.

    With `padded`, sequences are right-padded to `seq` and an input `lengths` [B] gives their
    real lengths; keys past a sequence's length are masked out. `chips`: see the module docstring.

    With `documents` = N, each row packs N documents one after another (seed 002's packed
    sequences): inputs `segment` [B, S] give each token's document id, `position` [B, S] its
    position within its document and `ends` [B, N] the index of each document's last token. A
    token attends causally within its own document only, and the logits are [B, N, V], one row
    per document's last token, as if each document had been run on its own.

    With a pipeline `stage` (tcp_compiler.frontend.stages), the graph holds that stage's layers
    only: after the first stage it takes the hidden state as an input `hidden`, and before the
    last it ends by sending its own (output `hidden.sent`) instead of computing logits.
    """
    stage = stage or whole_model(cfg)
    _check_sizes(batch=batch, seq=seq, chips=chips)
    if documents and padded:
        raise FrontendError(
            "a packed prefill takes no padding: give trailing tokens a segment id of their own"
        )
    b = _Builder(cfg, precision, _graph_name(cfg, "prefill", stage), batch, seq, positions=seq, chips=chips)
    ids = b.g.input("ids", TensorType.of(I32, B=batch, S=seq)) if stage.first else None
    lengths = b.g.input("lengths", TensorType.of(I32, B=batch)) if padded else None
    segment = None
    if documents:
        b.packed = True
        segment = b.g.input("segment", TensorType.of(I32, B=batch, S=seq))
        pos = b.g.input("position", TensorType.of(I32, B=batch, S=seq))
        ends = b.g.input("ends", TensorType.of(I32, B=batch, N=documents)) if stage.last else None
    else:
        pos = b.g.add("iota", name="pos", type=TensorType.of(I32, S=seq), axis="S")
    masks = PrefillMasks(b.g, b.const, b.seq, lengths, segment)
    h = b.enter(stage, lambda: b.embed(ids, pos))
    outputs = []
    for i in stage.layers:
        h, k, v = b.layer(i, cfg.layers[i], h, pos, masks, past=None)
        outputs += [k, v]
    if not stage.last:
        b.g.set_outputs(b.leave(stage, h), *outputs)
        return b.done("prefill", padded, outputs)
    if documents:
        last = b.g.add("gather", h, ends, name="h_last", axis="S")
    elif lengths is None:
        last = b.g.add("slice", h, name="h_last.s", axis="S", start=seq - 1, stop=seq)
        last = b.g.add("reshape", last, name="h_last", type=TensorType.of(F32, B=batch, D=cfg.hidden))
    else:
        one = b.const(1, I32)
        index = b.g.add("sub", lengths, one, name="last_index")
        last = b.g.add("gather", h, index, name="h_last", axis="S")
    b.g.set_outputs(b.head(last), *outputs)
    return b.done("prefill", padded, outputs)


def build_decode(
    cfg: ModelConfig, precision: Precision, batch: int, past: int, chips: int = 1, stage: Stage | None = None
) -> ModelGraph:
    """One new token per sequence at position `pos` [B] against caches of past + 1 slots.

    Each layer's cache comes in as `l{i}.k_cache_in` / `l{i}.v_cache_in` [B, Hkv, P, K] and goes out
    updated (a scatter at `pos`) as `l{i}.k_cache` / `l{i}.v_cache`; keys after `pos` are masked.
    With `chips` > 1 the caches hold only this chip's KV heads; with a pipeline `stage`, only its
    layers' caches (see build_prefill).
    """
    stage = stage or whole_model(cfg)
    _check_sizes(batch=batch, past=past + 1, chips=chips)
    name = _graph_name(cfg, "decode", stage)
    b = _Builder(cfg, precision, name, batch, 1, positions=past + 1, chips=chips)
    ids = b.g.input("ids", TensorType.of(I32, B=batch, S=1)) if stage.first else None
    pos = b.g.input("pos", TensorType.of(I32, B=batch))
    masks = DecodeMasks(b.g, b.const, b.positions, pos)
    h = b.enter(stage, lambda: b.embed(ids, pos))
    outputs = []
    for i in stage.layers:
        h, k, v = b.layer(i, cfg.layers[i], h, pos, masks, past=past + 1)
        outputs += [k, v]
    if not stage.last:
        b.g.set_outputs(b.leave(stage, h), *outputs)
        return b.done("decode", False, outputs)
    last = b.g.add("reshape", h, name="h_last", type=TensorType.of(F32, B=batch, D=cfg.hidden))
    b.g.set_outputs(b.head(last), *outputs)
    return b.done("decode", False, outputs)


def check_positions(cfg: ModelConfig, positions: int) -> None:
    """A model with learned positions has a table of max_position_embeddings rows: no more."""
    if cfg.position == "learned" and positions > cfg.max_positions:
        raise FrontendError(
            f"{cfg.name}: {positions} positions exceed its {cfg.max_positions} learned position "
            f"embeddings (max_position_embeddings)"
        )


def _graph_name(cfg: ModelConfig, phase: str, stage: Stage) -> str:
    return f"{cfg.name}.{phase}" if stage.count == 1 else f"{cfg.name}.{phase}.stage{stage.index}"


def _parts_maker(fmt: WeightFormat, lay: Layout, make: Callable[[Getter, int], np.ndarray]):
    """(get, rank) -> the rank's weight in `fmt`: the checkpoint's stored parts (read as
    `tensor:codes`, `:scale`, `:zero`, each through `make` so they are cut as the weight is), or
    its float shard quantised."""
    if not fmt.stored:
        return lambda get, rank: quantise(make(get, rank), fmt, lay)

    def stored(get: Getter, rank: int) -> Parts:
        def part(suffix: str) -> np.ndarray:
            return make(lambda tensor: get(f"{tensor}:{suffix}"), rank)

        return Parts(part("codes"), part("scale"), part("zero") if fmt.zero else None)

    return stored


def _layer_of_name(name: str) -> int:
    head = name.split(".")[0]
    return int(head[1:]) if head.startswith("l") and head[1:].isdigit() else -1


def _check_sizes(**sizes: int) -> None:
    for key, value in sizes.items():
        if value < 1:
            raise FrontendError(f"{key} must be at least 1, got {value}")


class _Builder:
    def __init__(
        self,
        cfg: ModelConfig,
        precision: Precision,
        name: str,
        batch: int,
        seq: int,
        positions: int,
        chips: int,
    ) -> None:
        self.cfg, self.p = cfg, precision
        self.sh = Sharding.plan(cfg, chips)
        self.g = Graph(name)
        self.batch, self.seq, self.positions = batch, seq, positions
        self.bindings: dict[str, Binding] = {}
        self._ropes: dict[str, Node] = {}
        self.post_scales: dict[str, Node] = {}  # w8a8 weight -> its scales, applied after the einsum
        self.windows: set[int] = set()  # sliding windows whose KV caches are rings
        self.packed = False  # positions are per token [B, S] (packed documents), not an iota

    def done(self, phase: str, padded: bool, kv: list[Node]) -> ModelGraph:
        """The finished model graph, with its metadata: the KV outputs, the axes of the KV length
        (this builder names cached positions P and attended keys Sk), and each value's decoder
        layer (it names layer i's values `l{i}.*`; the map makes that explicit, so nothing
        downstream parses names)."""
        past = self.positions - 1 if phase == "decode" else 0
        self.g.meta.kv_outputs = tuple(n.name for n in kv)
        rings = {axis: w for w in sorted(self.windows) for axis in self.kv_axis_names(w)}
        self.g.meta.kv_axes = ("P", "Sk", *rings)
        self.g.meta.kv_windows = rings
        self.g.meta.layers = {n.name: _layer_of_name(n.name) for n in self.g.nodes}
        return ModelGraph(
            self.g, self.cfg, self.p, phase, self.batch, self.seq, past, padded, self.sh.chips, self.bindings
        )

    # -- pipeline stages -----------------------------------------------------------------------
    def enter(self, stage: Stage, embed: Callable[[], Node]) -> Node:
        """The first stage embeds; a later one receives the hidden state [B, S, D], sent in the
        precision's collective dtype, and carries on in f32."""
        if stage.first:
            return embed()
        sent = TensorType.of(self.p.collective, B=self.batch, S=self.seq, D=self.cfg.hidden)
        return self.to(self.g.input("hidden", sent), F32)

    def leave(self, stage: Stage, h: Node) -> Node:
        """Hands the hidden state to the next stage: cast to the collective dtype, then sent."""
        return self.g.add("send", self.to(h, self.p.collective), name="hidden.sent", stage=stage.index + 1)

    # -- small pieces --------------------------------------------------------------------------
    def const(self, value: float | int, dtype: DType = F32) -> Node:
        name = f"c.{dtype}.{value!r}".replace("-", "m").replace("+", "")
        if name not in self.g:
            self.g.add("const", name=name, type=TensorType.of(dtype), value=value)
        return self.g[name]

    def to(self, x: Node, dtype: DType) -> Node:
        """x in `dtype`, cast once however many einsums read it."""
        if x.type.dtype == dtype:
            return x
        name = f"{x.name}.{dtype}"
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
        self, name: str, dtype: DType, axes: dict[str, int], cut: Cut = _whole, source: str | None = None
    ) -> Node:
        """A checkpoint tensor (canonical name `source`, by default `name`) as a param: this rank's
        `cut` of it in the canonical layout, reshaped to `axes`."""
        shape, found = tuple(axes.values()), self.cfg.tensors.source(source or name)
        return self.param(
            name,
            dtype,
            axes,
            Binding(found.tensors, lambda get, rank: cut(found.load(get), rank).reshape(shape)),
        )

    def all_reduce(self, x: Node, name: str) -> Node:
        """The sum of every chip's partial x (x itself on one chip), sent in the precision's
        collective dtype and returned in x's."""
        if self.sh.chips == 1:
            return x
        wire = self.p.collective
        if x.type.dtype == wire:
            return self.g.add("all_reduce", x, name=name, op="sum", chips=self.sh.chips)
        sent = self.g.add("cast", x, name=f"{name}.send", type=x.type.with_dtype(wire))
        summed = self.g.add("all_reduce", sent, name=f"{name}.{wire}", op="sum", chips=self.sh.chips)
        return self.g.add("cast", summed, name=name, type=x.type)

    # -- projections ---------------------------------------------------------------------------
    def weight(
        self,
        name: str,
        axes: dict[str, int],
        contract: Sequence[str],
        sources: Sequence[str] | None = None,
        make: Callable[[Getter, int], np.ndarray] | None = None,
        cut: Cut = _whole,
        scaled_after: bool = False,
    ) -> Weight:
        """A projection weight in the precision's weight format, dequantised as it is fetched;
        returns (operand, contracted axes, split).

        `make` gives a rank's float weight (by default this rank's `cut` of the tensor `name`). A
        format quantises that shard, or, when the checkpoint stores the format, reads the stored
        parts (`name:codes`, `:scale`, `:zero`, expanded to one value per element) through the same
        `make`, so scales and zero points are cut exactly as their weight is.

        The format's blocks (weight_format.layout) split a blocked axis A into `Ag` x `Ai`; on the
        contracted side `split` is (A, size of Ai) so the caller splits the activation the same
        way; a split output side is merged back after dequantising (a free view). With
        `scaled_after` a format that quantises activations (w8a8) returns its integer codes and
        leaves its scales in `self.post_scales` for the caller to apply after the einsum.
        """
        if make is None:
            found, shape = self.cfg.tensors.source(name), tuple(axes.values())
            sources = found.tensors
            make = lambda get, rank: cut(found.load(get), rank).reshape(shape)  # noqa: E731
        sources = tuple(sources or (name,))
        p, fmt = self.p, self.p.format
        if fmt is None or not fmt.applies(name):
            dtype = p.weight if fmt is None else p.act
            return self.param(name, dtype, axes, Binding(sources, make)), tuple(contract), None
        lay = layout(name, fmt, axes, contract)
        parts = _parts_maker(fmt, lay, make)
        shape = tuple(lay.codes.values())

        def codes(get: Getter, rank: int) -> np.ndarray:
            return parts(get, rank).codes.reshape(shape)

        def per_block(part: str) -> Binding:
            def made(get: Getter, rank: int) -> np.ndarray:
                return compress(getattr(parts(get, rank), part), lay, name, part)

            return Binding(sources, made)

        q = self.param(name, fmt.codes, lay.codes, Binding(sources, codes))
        s = self.param(f"{name}.scale", fmt.scale, lay.scales, per_block("scale"))
        z = self.param(f"{name}.zero", U4, lay.scales, per_block("zero")) if fmt.zero else None
        grouped = tuple(contract)
        if lay.split is not None:
            axis = lay.split[0]
            grouped = tuple(c2 for c in contract for c2 in ((f"{axis}g", f"{axis}i") if c == axis else (c,)))
        if scaled_after and fmt.act_quant:
            self.post_scales[name] = s
            return q, grouped, lay.split
        return self.dequantise(q, s, z, fmt, lay), grouped, lay.split

    def dequantise(self, q: Node, s: Node, z: Node | None, fmt: WeightFormat, lay: Layout) -> Node:
        """(table[q] or q, minus the zero point) x scale, in the operand dtype: the Fetch Adapter's
        lookup (fp4 -> fp8), casts and integer zero-point subtraction, then the scale multiply."""
        g, name = self.g, q.name
        work = self.p.act if fmt.scale == self.p.act else F32  # the VE multiplies in f32
        if fmt.table:
            table = self.lookup_table(fmt.table)
            x = self.to(g.add("gather", table, q, name=f"{name}.decoded", axis="C"), work)
        elif z is not None:
            x = self.to(g.add("sub", self.to(q, I32), self.to(z, I32), name=f"{name}.centred"), work)
        else:
            x = self.to(q, work)
        x = g.add("mul", x, self.to(s, work), name=f"{name}.dequant")
        if lay.out_split is not None:
            x = g.add("reshape", x, name=f"{name}.merged", type=TensorType.of(work, **lay.merged))
        return self.to(x, self.p.act)

    def lookup_table(self, values: tuple[float, ...]) -> Node:
        """The codes' values as a const [C] in fp8 (the Fetch Adapter's fp4 -> fp8 table)."""
        name = "fp4e2m1.table"
        if name not in self.g:
            self.g.add("const", name=name, type=TensorType.of(FP8E4M3, C=len(values)), values=list(values))
        return self.g[name]

    def split_groups(self, x: Node, split: tuple[str, int] | None) -> Node:
        """Splits x's axis A into [Ag, Ai] (a free view) to meet a group-quantised weight."""
        if split is None:
            return x
        axis, inner = split
        name = f"{x.name}.groups.{axis}{inner}"
        if name in self.g:
            return self.g[name]
        axes = []
        for a in x.type.axes:
            axes += [Axis(f"{axis}g", a.size // inner), Axis(f"{axis}i", inner)] if a.name == axis else [a]
        return self.g.add("reshape", x, name=name, type=x.type.with_axes(axes))

    def linear(
        self,
        x: Node,
        name: str,
        axes: dict[str, int],
        contract: Sequence[str],
        out: Sequence[str],
        label: str,
        cut: Cut = _whole,
        bias: Cut | None = None,
    ) -> Node:
        """x times the weight `name`; with `bias` (its cut), plus the `.bias` twin of the weight over
        the weight's output axes."""
        w, grouped, split = self.weight(name, axes, contract, cut=cut, scaled_after=True)
        x = self.split_groups(x, split)
        post = self.post_scales.get(w.name)
        if post is None:
            x = self.to(x, w.type.dtype)
        else:
            x, x_scale = self.quantise_rows(x, grouped, w.type.dtype)
        eq = f"{' '.join(x.type.names)}, {' '.join(w.type.names)} -> {' '.join(out)}"
        y = self.einsum(x, w, name=label, eq=eq, dtype=F32 if post is None else I32)
        if post is not None:  # integer sums, scaled back per token and per output channel
            y = self.g.add("mul", self.to(y, F32), x_scale, name=f"{label}.xs")
            y = self.g.add("mul", y, self.to(post, F32), name=f"{label}.ws")
        if bias is None:
            return y
        bias_axes = {a: n for a, n in axes.items() if a not in contract}
        b = self.tensor(name.removesuffix(".weight") + ".bias", self.p.table, bias_axes, bias)
        return self.g.add("add", y, self.to(b, F32), name=f"{label}_b")

    def quantise_rows(self, x: Node, contract: Sequence[str], dtype: DType) -> tuple[Node, Node]:
        """x as `dtype` integers with one dynamic scale per token (its largest |x| over the
        contracted axes maps to the largest code), as w8a8 kernels quantise activations; returns
        (codes, f32 scales). Computed once however many projections read x."""
        g, tag = self.g, f"{x.name}.{dtype}.rows"
        if tag not in g:
            xf = self.to(x, F32)
            top = g.add("reduce", g.add("abs", xf, name=f"{tag}.abs"), name=f"{tag}.max", op="max",
                        axes=list(contract))  # fmt: skip
            limit = self.const(float(2 ** (dtype.bits - 1) - 1))
            step = g.add("div", top, limit, name=f"{tag}.step")
            step = g.add("max", step, self.const(1e-30), name=f"{tag}.scale")
            scaled = g.add("div", xf, step, name=f"{tag}.scaled")
            g.add("cast", scaled, name=tag, type=xf.type.with_dtype(dtype))
        return g[tag], g[f"{tag}.scale"]

    # -- layers --------------------------------------------------------------------------------
    def embed(self, ids: Node, pos: Node) -> Node:
        """Token embedding, plus absolute positions (learned or sinusoidal), then the embedding norm."""
        cfg, g = self.cfg, self.g
        table = self.tensor("model.embed_tokens.weight", self.p.table, {"V": cfg.vocab, "D": cfg.hidden})
        x = self.to(g.add("gather", table, ids, name="embed", axis="V"), F32)
        if cfg.embed_scale is not None:
            scale = np.float32(cfg.embed_scale)
            if cfg.embed_scale_in_table_dtype:
                scale = self.p.table.round(scale)
            x = g.add("mul", x, self.const(float(scale)), name="embed.scaled")
        if cfg.position in ("learned", "sinusoidal"):
            table = self.position_table()
            where = g.add("gather", table, pos, name="embed.position", axis=table.type.names[0])
            x = g.add("add", x, self.to(where, F32), name="embed.positioned")
        if cfg.embed_norm:
            x = self.norm(x, "D", "model.embed_norm", "embed_norm")
        return x

    def position_table(self) -> Node:
        """[P, D] absolute position embeddings: the checkpoint's (learned) or computed (sinusoidal)."""
        cfg, positions = self.cfg, self.positions
        if cfg.position == "sinusoidal":
            axes = {"P": positions, "D": cfg.hidden}
            dim = cfg.hidden
            return self.param(
                "sinusoidal.table",
                self.p.table,
                axes,
                Binding((), lambda get, rank: sinusoidal_table(positions, dim)),
            )
        check_positions(cfg, positions)
        axes = {"Pos": cfg.max_positions, "D": cfg.hidden}  # not P: that is the KV length
        return self.tensor("model.embed_positions.weight", self.p.table, axes)

    def norm(
        self, x: Node, axis: str, prefix: str, label: str, kind: str | None = None, eps: float | None = None
    ) -> Node:
        """The model's norm (or `kind`) over `axis`, with weight `{prefix}.weight` (and `.bias`);
        `eps` where a norm has its own (DeepSeek's low-rank norms)."""
        cfg, g = self.cfg, self.g
        n = x.type.size(axis)
        kind = kind or cfg.norm
        if kind == "layer":
            total = g.add("reduce", x, name=f"{label}.total", op="sum", axes=[axis])
            mean = g.add("mul", total, self.const(1.0 / n), name=f"{label}.avg")
            x = g.add("sub", x, mean, name=f"{label}.centred")
        sq = g.add("mul", x, x, name=f"{label}.sq")
        total = g.add("reduce", sq, name=f"{label}.sum", op="sum", axes=[axis])
        mean = g.add("mul", total, self.const(1.0 / n), name=f"{label}.mean")
        epsilon = self.const(cfg.norm_eps if eps is None else eps)
        rstd = g.add("rsqrt", g.add("add", mean, epsilon, name=f"{label}.var"), name=f"{label}.rstd")
        unit = g.add("mul", x, rstd, name=f"{label}.unit")
        w = self.to(self.tensor(f"{prefix}.weight", self.p.table, {axis: n}), F32)
        if cfg.norm_offset:
            w = g.add("add", w, self.const(cfg.norm_offset), name=f"{prefix}.weight.plus1")
        if kind != "layer":
            return g.add("mul", unit, w, name=label)
        b = self.to(self.tensor(f"{prefix}.bias", self.p.table, {axis: n}), F32)
        return g.add("add", g.add("mul", unit, w, name=f"{label}.scaled"), b, name=label)

    def heads_norm(self, x: Node, heads: str, prefix: str, label: str, cut: Cut) -> Node:
        """RMSNorm over all heads x K at once (OLMo 2's q/k norm), weight [heads * K] cut like the
        projection. This chip holds some of the heads, so the sum of squares over its heads joins
        the other chips' (an all_reduce in f32) before the mean; a KV head held by several chips
        is summed once per holder, so the mean divides by every chip's element count."""
        cfg, g = self.cfg, self.g
        sq = g.add("mul", x, x, name=f"{label}.sq")
        total = g.add("reduce", sq, name=f"{label}.sum", op="sum", axes=[heads, "K"])
        if self.sh.chips > 1:
            total = g.add("all_reduce", total, name=f"{label}.sum.all", op="sum", chips=self.sh.chips)
        count = x.type.size(heads) * cfg.head_dim * self.sh.chips
        mean = g.add("mul", total, self.const(1.0 / count), name=f"{label}.mean")
        rstd = g.add(
            "rsqrt", g.add("add", mean, self.const(cfg.norm_eps), name=f"{label}.var"), name=f"{label}.rstd"
        )
        unit = g.add("mul", x, rstd, name=f"{label}.unit")
        axes = {heads: x.type.size(heads), "K": cfg.head_dim}
        w = self.to(self.tensor(f"{prefix}.weight", self.p.table, axes, cut), F32)
        return g.add("mul", unit, w, name=label)

    def residual(self, x: Node, f: Node, name: str) -> Node:
        """x + f(x), with x scaled by DeepNet's alpha and f(x) by Granite's residual multiplier when
        the model sets them."""
        if self.cfg.residual_scale != 1.0:
            x = self.g.add(
                "mul", x, self.const(float(np.float32(self.cfg.residual_scale))), name=f"{name}.alpha"
            )
        if self.cfg.branch_scale != 1.0:
            scale = self.const(float(np.float32(self.cfg.branch_scale)))
            f = self.g.add("mul", f, scale, name=f"{name}.branch")
        return self.g.add("add", x, f, name=name)

    def softcap(self, x: Node, cap: float, label: str) -> Node:
        """cap * tanh(x / cap): Gemma 2's soft bound on attention scores and logits."""
        c = self.const(float(np.float32(cap)))
        t = self.g.add("tanh", self.g.add("div", x, c, name=f"{label}.over"), name=f"{label}.tanh")
        return self.g.add("mul", t, c, name=label)

    def rope_table(self, layer: Layer, pos: Node) -> Node:
        """The rotations for this graph's positions, gathered once per RoPE variant."""
        if layer.rope_name not in self._ropes:
            k = self.cfg.rotary
            rope, positions = layer.rope, self.positions
            assert rope is not None
            axes = {"P": positions, "Kp": k // 2, "R": 2, "T": 2}
            table = self.param(
                f"{layer.rope_name}.table",
                self.p.kv,
                axes,
                Binding((), lambda get, rank: rope.table(k, positions)),
            )
            self._ropes[layer.rope_name] = self.g.add(
                "gather", table, pos, name=f"{layer.rope_name}.rot", axis="P"
            )
        return self._ropes[layer.rope_name]

    def position_heads(self, x: Node, heads: str, layer: Layer, pos: Node, label: str) -> Node:
        """Q or K with RoPE on its first `rotary` dims -> [B, heads, S, ...]. x comes as [B, S, heads, K]
        when RoPE rotates whole heads, else already as [B, heads, S, K] (see `attention`)."""
        cfg, g = self.cfg, self.g
        rd, k = cfg.rotary, cfg.head_dim
        if rd == 0 or layer.rope is None:
            return x
        rot = self.rope_table(layer, pos)
        if rd == k:
            return self.rotate(x, heads, rot, label)
        part = g.add("slice", x, name=f"{label}.rotary", axis="K", start=0, stop=rd)
        rest = g.add("slice", x, name=f"{label}.pass", axis="K", start=rd, stop=k)
        rotated = g.add(
            "reshape", self.rotate(part, heads, rot, label), name=f"{label}.rot_heads", type=part.type
        )
        return g.add("concat", rotated, rest, name=f"{label}.positioned", axis="K")

    def rotate(self, x: Node, heads: str, rot: Node, label: str) -> Node:
        """x [B, S, heads, K] (any order) -> [B, heads, S, T, Kp] rotated (T, Kp: the halves of K again)."""
        kp = x.type.size("K") // 2
        axes = [a for a in x.type.axes if a.name != "K"] + [Axis("R", 2), Axis("Kp", kp)]
        pairs = self.g.add("reshape", x, name=f"{label}.pairs", type=x.type.with_axes(axes))
        pairs = self.to(pairs, rot.type.dtype)  # the contraction engine takes bf16, not f32
        eq = f"{' '.join(pairs.type.names)}, {' '.join(rot.type.names)} -> B {heads} S T Kp"
        return self.einsum(pairs, rot, name=f"{label}.rot", eq=eq)

    def layer(self, i: int, layer: Layer, h: Node, pos: Node, masks, past: int | None):
        """One block: pre-norm (optionally with Gemma's sandwich norms), post-norm or parallel."""
        cfg, g = self.cfg, self.g
        pre = f"model.layers.{i}"
        attn_norm, mlp_norm = f"{pre}.input_layernorm", f"{pre}.post_attention_layernorm"
        if cfg.block == "post":
            a, k_cache, v_cache = self.attention(i, layer, h, pos, masks, past)
            h = self.norm(self.residual(h, a, f"l{i}.h_attn"), "D", attn_norm, f"l{i}.attn_norm")
            m = self.feed_forward(i, layer, h)
            return self.norm(self.residual(h, m, f"l{i}.h_mlp"), "D", mlp_norm, f"l{i}.out"), k_cache, v_cache
        n = self.norm(h, "D", attn_norm, f"l{i}.attn_norm") if cfg.pre_norms else h
        if cfg.block == "parallel":
            a, k_cache, v_cache = self.attention(i, layer, n, pos, masks, past, reduce=False)
            n2 = n if cfg.parallel_norms == 1 else self.norm(h, "D", mlp_norm, f"l{i}.mlp_norm")
            m = self.feed_forward(i, layer, n2, reduce=False)
            both = self.all_reduce(g.add("add", a, m, name=f"l{i}.parallel"), f"l{i}.parallel.sum")
            return self.residual(h, both, f"l{i}.out"), k_cache, v_cache
        a, k_cache, v_cache = self.attention(i, layer, n, pos, masks, past)
        if cfg.sandwich_norms:
            a = self.norm(a, "D", f"{pre}.post_attention_layernorm", f"l{i}.attn_out_norm")
            mlp_norm = f"{pre}.pre_feedforward_layernorm"
        h = self.residual(n if cfg.residual_from_norm else h, a, f"l{i}.h_attn")
        n = self.norm(h, "D", mlp_norm, f"l{i}.mlp_norm") if cfg.pre_norms else h
        m = self.feed_forward(i, layer, n)
        if cfg.sandwich_norms:
            m = self.norm(m, "D", f"{pre}.post_feedforward_layernorm", f"l{i}.mlp_out_norm")
        return self.residual(n if cfg.residual_from_norm else h, m, f"l{i}.out"), k_cache, v_cache

    def feed_forward(self, i: int, layer: Layer, x: Node, reduce: bool = True) -> Node:
        return self.moe(i, x, reduce) if layer.moe else self.mlp(i, x, reduce)

    def attention(
        self, i: int, layer: Layer, x: Node, pos: Node, masks, past: int | None, reduce: bool = True
    ):
        """This chip's heads: column-parallel Q/K/V, row-parallel o_proj summed over the chips
        (by the caller when `reduce` is False, as a parallel block sums attention and MLP first);
        DeepSeek's latent attention in tcp_compiler.frontend.mla (per-head K/V expanded from the
        latent in prefill, kv_b_proj absorbed into the query and output in decode)."""
        if self.cfg.mla is not None:
            o, latent_cache, rope_cache = mla.attention(self, i, layer, x, pos, masks, past)
            return (self.all_reduce(o, f"l{i}.o.sum") if reduce else o), latent_cache, rope_cache
        cfg, g, p, sh = self.cfg, self.g, self.p, self.sh
        pre = f"model.layers.{i}.self_attn"
        D, H, Hkv, K, G = cfg.hidden, sh.heads, sh.kv_heads, cfg.head_dim, sh.groups
        B, S = self.batch, self.seq
        # Q and K come out as RoPE's rotation reads them; otherwise heads-first, as attention reads them.
        qk = "B S {} K" if cfg.rotary == K and layer.rope is not None else "B {} S K"
        heads = {
            "q": ("H", H, sh.column, qk),
            "k": ("Hkv", Hkv, sh.kv, qk),
            "v": ("Hkv", Hkv, sh.kv, "B {} S K"),
        }
        q, k, v = (
            self.linear(
                x,
                f"{pre}.{n}_proj.weight",
                {axis: size, "K": K, "D": D},
                ["D"],
                order.format(axis).split(),
                f"l{i}.{n}",
                cut,
                cut if cfg.qkv_bias else None,
            )
            for n, (axis, size, cut, order) in heads.items()
        )
        if cfg.qk_norm and cfg.qk_norm_all_heads:
            q = self.heads_norm(q, "H", f"{pre}.q_norm", f"l{i}.q_norm", sh.column)
            k = self.heads_norm(k, "Hkv", f"{pre}.k_norm", f"l{i}.k_norm", sh.kv)
        elif cfg.qk_norm:
            q = self.norm(q, "K", f"{pre}.q_norm", f"l{i}.q_norm", kind="rms")
            k = self.norm(k, "K", f"{pre}.k_norm", f"l{i}.k_norm", kind="rms")
        q_pos = self.position_heads(q, "H", layer, pos, f"l{i}.q")
        k_pos = self.position_heads(k, "Hkv", layer, pos, f"l{i}.k")
        q5 = g.add(
            "reshape", q_pos, name=f"l{i}.q_heads", type=TensorType.of(F32, B=B, Hkv=Hkv, G=G, Sq=S, K=K)
        )
        k_new = self.to(
            g.add("reshape", k_pos, name=f"l{i}.k_new", type=TensorType.of(F32, B=B, Hkv=Hkv, S=S, K=K)), p.kv
        )
        v_new = self.to(v, p.kv)
        window = layer.sliding_window
        cache_axis, key_axis = self.kv_axis_names(window)
        if past is None:  # prefill: every key just computed; the cache keeps what decode will read
            keys_type = TensorType.of(p.kv, B=B, Hkv=Hkv, Sk=S, K=K)
            keys = g.add("reshape", k_new, name=f"l{i}.keys", type=keys_type)
            values = g.add("reshape", v_new, name=f"l{i}.values", type=keys_type)
            k_cache = self.prefill_cache(k_new, f"l{i}.k_cache", window)
            v_cache = self.prefill_cache(v_new, f"l{i}.v_cache", window)
        else:  # decode: write the new position into the cache that came in
            slots = past if window is None else min(past, window)
            cache_type = TensorType.of(p.kv, B=B, Hkv=Hkv, K=K).with_axes(
                [Axis("B", B), Axis("Hkv", Hkv), Axis(cache_axis, slots), Axis("K", K)]
            )
            slot = self.cache_slot(pos, window)
            k_in = g.input(f"l{i}.k_cache_in", cache_type)
            v_in = g.input(f"l{i}.v_cache_in", cache_type)
            k_cache = g.add("scatter", k_in, slot, k_new, name=f"l{i}.k_cache", axis=cache_axis)
            v_cache = g.add("scatter", v_in, slot, v_new, name=f"l{i}.v_cache", axis=cache_axis)
            keys_type = cache_type.with_axes(
                [Axis("B", B), Axis("Hkv", Hkv), Axis(key_axis, slots), Axis("K", K)]
            )
            keys = g.add("reshape", k_cache, name=f"l{i}.keys", type=keys_type)
            values = g.add("reshape", v_cache, name=f"l{i}.values", type=keys_type)
        out = self.attend(i, self.to(q5, p.kv), keys, values, masks(window), pos)
        o = self.linear(out, f"{pre}.o_proj.weight", {"D": D, "H": H, "K": K}, ["H", "K"], ["B", "S", "D"],
                        f"l{i}.o", sh.row, sh.row_bias if cfg.out_bias else None)  # fmt: skip
        return (self.all_reduce(o, f"l{i}.o.sum") if reduce else o), k_cache, v_cache

    def attend(self, i: int, q: Node, keys: Node, values: Node, mask: Node, pos: Node) -> Node:
        """Softmax(q k^T * scale [+ ALiBi], masked [, beside gpt-oss's sink]) v with K/V broadcast
        over the group axis G.
        The key axis is the keys' third (Sk, or a sliding window's ring of slots)."""
        cfg, g, p = self.cfg, self.g, self.p
        sk = keys.type.names[2]
        s = self.einsum(q, keys, name=f"l{i}.scores", eq=f"B Hkv G Sq K, B Hkv {sk} K -> B Hkv G Sq {sk}")
        s = g.add("mul", self.to(s, F32), self.const(cfg.scale), name=f"l{i}.scaled")
        if cfg.position == "alibi":
            s = g.add("add", s, self.alibi(keys.type.size(sk), pos), name=f"l{i}.biased")
        if cfg.attn_softcap is not None:
            s = self.softcap(s, cfg.attn_softcap, f"l{i}.capped")
        s = g.add("where", mask, s, self.const(-float("inf")), name=f"l{i}.masked")
        top = g.add("reduce", s, name=f"l{i}.max", op="max", axes=[sk])
        sink = self.sink(i) if cfg.attn_sinks else None
        if sink is not None:  # gpt-oss: one more logit per head, with no value (see sink)
            top = g.add("max", top, sink, name=f"l{i}.max_sink")
        e = g.add("exp", g.add("sub", s, top, name=f"l{i}.shifted"), name=f"l{i}.exp")
        total = g.add("reduce", e, name=f"l{i}.sum", op="sum", axes=[sk])
        if sink is not None:
            sink_e = g.add("exp", g.add("sub", sink, top, name=f"l{i}.sink_shifted"), name=f"l{i}.sink_exp")
            total = g.add("add", total, sink_e, name=f"l{i}.sum_sink")
        probs = g.add("div", e, total, name=f"l{i}.probs")
        out = self.einsum(
            self.to(probs, p.kv),
            values,
            name=f"l{i}.attn",
            eq=f"B Hkv G Sq {sk}, B Hkv {sk} K -> B Hkv G Sq K",
        )
        B, S, H, K = self.batch, self.seq, self.sh.heads, cfg.head_dim
        return g.add(
            "reshape", self.to(out, F32), name=f"l{i}.attn_heads", type=TensorType.of(F32, B=B, H=H, S=S, K=K)
        )

    def sink(self, i: int) -> Node:
        """[Hkv, G] f32: layer i's learned sink logit per head (this chip's heads). It joins the
        softmax's max and sum as a key with no value, so each row's weights sum to less than 1."""
        sh = self.sh
        axes = {"Hkv": sh.kv_heads, "G": sh.groups}
        w = self.tensor(f"model.layers.{i}.self_attn.sinks", self.p.table, axes, sh.column)
        return self.to(w, F32)

    def kv_axis_names(self, window: int | None) -> tuple[str, str]:
        """(cache axis, key axis) of a layer: P and Sk, or for a sliding window of W tokens its own
        pair (the cache is a ring of at most W slots, so it stops growing with the context)."""
        if window is None:
            return "P", "Sk"
        self.windows.add(window)
        return f"Pw{window}", f"Skw{window}"

    def cache_slot(self, pos: Node, window: int | None) -> Node:
        """[B, S=1]: where decode writes position `pos`: its own slot, or pos mod W in a ring."""
        g, B = self.g, self.batch
        name = "slot" if window is None else f"slot.w{window}"
        if name not in g:
            where = pos if window is None else g.add("mod", pos, self.const(window, I32), name=f"{name}.ring")
            g.add("reshape", where, name=name, type=TensorType.of(I32, B=B, S=1))
        return g[name]

    def prefill_cache(self, x: Node, name: str, window: int | None) -> Node:
        """The cache a prefill hands to decode: every position, or for a window of W < S tokens
        the ring decode continues: slot s holds the last position p < length with p = s mod W."""
        g, S = self.g, self.seq
        if self.packed:  # each document's cache position by position: no decode continues a packed row
            window = None
        axis, _ = self.kv_axis_names(window)
        if window is None or window >= S:
            return g.add("reshape", x, name=name, type=x.type.with_axes(
                Axis(axis, a.size) if a.name == "S" else a for a in x.type.axes))  # fmt: skip
        return g.add("gather", x, self.ring_positions(window), name=name, axis="S")

    def ring_positions(self, window: int) -> Node:
        """[(B,) Pw]: the position each ring slot holds after the prompt: the last position p
        before the sequence's length with p mod W = slot (0 for a slot no position reached)."""
        g, tag = self.g, f"ring.w{window}"
        if tag not in g:
            last = (g.add("sub", "lengths", self.const(1, I32), name=f"{tag}.last") if "lengths" in g
                    else self.const(self.seq - 1, I32))  # fmt: skip
            slots = g.add("iota", name=f"{tag}.slot", type=TensorType.of(I32, **{f"Pw{window}": window}),
                          axis=f"Pw{window}")  # fmt: skip
            back = g.add("mod", g.add("sub", last, slots, name=f"{tag}.behind"), self.const(window, I32),
                         name=f"{tag}.back")  # fmt: skip
            at = g.add("sub", last, back, name=f"{tag}.at")
            g.add("max", at, self.const(0, I32), name=tag)
        return g[tag]

    def alibi(self, keys: int, pos: Node) -> Node:
        """ALiBi's bias slope[h] * position of key k, [Hkv, G, Sk] (or [B, Hkv, G, Sk] for packed
        rows, whose positions restart per document); built once, shared by every layer. The
        query's own position would only shift each softmax row by a constant, so it is left out."""
        g = self.g
        if "alibi.bias" in g:
            return g["alibi.bias"]
        sh, heads, scale = self.sh, self.cfg.heads, np.float32(self.cfg.alibi_scale)
        axes = {"Hkv": sh.kv_heads, "G": sh.groups}
        column = sh.column
        slopes = self.param(
            "alibi.slopes",
            F32,
            axes,
            Binding(
                (), lambda get, rank: column(alibi_slopes(heads) * scale, rank).reshape(tuple(axes.values()))
            ),
        )
        if self.packed:
            where = g.add("reshape", pos, name="alibi.k", type=TensorType.of(I32, B=self.batch, Sk=keys))
            where = g.add("cast", where, name="alibi.k.f32", type=where.type.with_dtype(F32))
        else:  # an f32 iota, which stays an iota (a cast of it would fold into a const of fixed length)
            where = g.add("iota", name="alibi.k", type=TensorType.of(F32, Sk=keys), axis="Sk")
        return g.add("mul", slopes, where, name="alibi.bias")

    def activate(self, gate: Node, label: str) -> Node:
        return self.g.add(self.cfg.activation, gate, name=label)

    def mlp(self, i: int, x: Node, reduce: bool = True) -> Node:
        """Gated (act(gate) * up) or plain (act(up)) MLP over this chip's F columns; the down
        projection's partial sums join over chips."""
        cfg, g, sh = self.cfg, self.g, self.sh
        pre = f"model.layers.{i}.mlp"
        D, F = cfg.hidden, sh.intermediate
        bias = sh.column if cfg.mlp_bias else None
        up = self.linear(x, f"{pre}.up_proj.weight", {"F": F, "D": D}, ["D"], ["B", "S", "F"], f"l{i}.up",
                         sh.column, bias)  # fmt: skip
        if cfg.mlp == "gated":
            gate = self.linear(x, f"{pre}.gate_proj.weight", {"F": F, "D": D}, ["D"], ["B", "S", "F"],
                               f"l{i}.gate", sh.column, bias)  # fmt: skip
            act = g.add("mul", self.activate(gate, f"l{i}.act"), up, name=f"l{i}.glu")
        else:
            act = self.activate(up, f"l{i}.act")
        down = self.linear(act, f"{pre}.down_proj.weight", {"D": D, "F": F}, ["F"], ["B", "S", "D"],
                           f"l{i}.down", sh.row, sh.row_bias if cfg.mlp_bias else None)  # fmt: skip
        return self.all_reduce(down, f"l{i}.down.sum") if reduce else down

    def moe(self, i: int, x: Node, reduce: bool = True) -> Node:
        """Router softmax, top-k (renormalised where the family does; gpt-oss: top-k of the logits,
        then a softmax over them), then experts grouped by token.

        As real MoE kernels do: `dispatch` orders the T x k routed slots' token rows by expert,
        `bincount` gives each expert's row count, each projection is a `grouped_einsum` of those
        rows with the whole stacked expert weight [E, ...] (each expert's weights read at most
        once; FLOPs exactly tokens x k x one expert's), and `combine` sums each token's k slots
        weighted by its routing weights. Every chip routes (the router is replicated) and holds a
        1/chips slice of every expert's width; the combined partial sums join over the chips.
        """
        cfg, g = self.cfg, self.g
        moe = cfg.moe
        assert moe is not None
        D, E = cfg.hidden, moe.experts
        router = self.linear(
            x, moe.router_name.format(i=i), {"E": E, "D": D}, ["D"], ["B", "S", "E"], f"l{i}.router",
            bias=_whole if moe.router_bias else None,
        )  # fmt: skip
        if moe.softmax_after_top_k:
            return self.experts(i, x, *self.top_k_softmax(i, router), reduce)
        if moe.scoring == "sigmoid":
            return self.experts(i, x, *route(self, i, router), reduce)
        top = g.add("reduce", router, name=f"l{i}.router.max", op="max", axes=["E"])
        e = g.add("exp", g.add("sub", router, top, name=f"l{i}.router.shifted"), name=f"l{i}.router.exp")
        probs = g.add(
            "div",
            e,
            g.add("reduce", e, name=f"l{i}.router.sum", op="sum", axes=["E"]),
            name=f"l{i}.router.probs",
        )
        idx = g.add("topk", probs, name=f"l{i}.experts", axis="E", k=moe.top_k, new_axis="Kk")
        weights = g.add("gather", probs, idx, name=f"l{i}.expert_weights", axis="E")
        if moe.normalize_top_k:
            total = g.add("reduce", weights, name=f"l{i}.expert_weights.sum", op="sum", axes=["Kk"])
            weights = g.add("div", weights, total, name=f"l{i}.expert_weights.norm")
        return self.experts(i, x, idx, weights, reduce)

    def top_k_softmax(self, i: int, router: Node) -> tuple[Node, Node]:
        """gpt-oss's routing: the top-k router logits, then a softmax over those k only (the same
        weights as a softmax over all experts renormalised over the k, in k exps, not E)."""
        g, k = self.g, self.cfg.moe.top_k
        idx = g.add("topk", router, name=f"l{i}.experts", axis="E", k=k, new_axis="Kk")
        logits = g.add("gather", router, idx, name=f"l{i}.expert_logits", axis="E")
        top = g.add("reduce", logits, name=f"l{i}.expert_logits.max", op="max", axes=["Kk"])
        shifted = g.add("sub", logits, top, name=f"l{i}.expert_logits.shifted")
        e = g.add("exp", shifted, name=f"l{i}.expert_exp")
        total = g.add("reduce", e, name=f"l{i}.expert_exp.sum", op="sum", axes=["Kk"])
        return idx, g.add("div", e, total, name=f"l{i}.expert_weights")

    def experts(self, i: int, x: Node, idx: Node, weights: Node, reduce: bool) -> Node:
        """The routed experts of layer i: x's rows for slots `idx` [B, S, Kk] through each chosen
        expert's gated MLP, summed with `weights` (see moe)."""
        cfg, g, sh = self.cfg, self.g, self.sh
        D, F, E = cfg.hidden, sh.moe_intermediate, cfg.moe.experts
        counts = g.add("bincount", idx, name=f"l{i}.expert_counts", type=TensorType.of(I32, E=E))
        column, row = sh.column, sh.row
        gate_w = self.expert_weight(i, 0, {"E": E, "F": F, "D": D}, "D", column)
        rows = g.add("dispatch", self.to(x, gate_w[0].type.dtype), idx, name=f"l{i}.expert_rows", axis="R")
        gate = self.expert(rows, counts, gate_w, f"l{i}.expert_gate", self.expert_bias(i, 0, idx, F, column))
        up_w = self.expert_weight(i, 1, {"E": E, "F": F, "D": D}, "D", column)
        up = self.expert(rows, counts, up_w, f"l{i}.expert_up", self.expert_bias(i, 1, idx, F, column))
        act = self.glu(gate, up, f"l{i}.expert")
        down_w = self.expert_weight(i, 2, {"E": E, "D": D, "F": F}, "F", row)
        down_b = self.expert_bias(i, 2, idx, D, sh.row_bias)
        down = self.expert(act, counts, down_w, f"l{i}.expert_down", down_b)
        out = g.add("combine", down, idx, weights, name=f"l{i}.moe", axis="R", slots=["Kk"])
        shared = shared_expert(self, i, x)
        if shared is not None:
            out = g.add("add", out, shared, name=f"l{i}.moe_shared")
        return self.all_reduce(out, f"l{i}.moe.sum") if reduce else out

    def glu(self, gate: Node, up: Node, label: str) -> Node:
        """act(gate) * up, or with the experts' swiglu_limit gpt-oss's clamped SwiGLU: gate clamped
        above at the limit, up to [-limit, limit], then (up + 1) * gate * sigmoid(alpha * gate)."""
        g, moe = self.g, self.cfg.moe
        if moe is None or moe.swiglu_limit is None:
            return g.add("mul", self.activate(gate, f"{label}_act"), up, name=f"{label}_glu")
        limit = float(np.float32(moe.swiglu_limit))
        gate = g.add("min", gate, self.const(limit), name=f"{label}_gate_clamped")
        up = g.add("max", g.add("min", up, self.const(limit), name=f"{label}_up_below"), self.const(-limit),
                   name=f"{label}_up_clamped")  # fmt: skip
        alpha = self.const(float(np.float32(moe.swiglu_alpha)))
        scaled = g.add("mul", gate, alpha, name=f"{label}_gate_scaled")
        act = g.add("mul", gate, g.add("sigmoid", scaled, name=f"{label}_sigmoid"), name=f"{label}_act")
        shifted = g.add("add", up, self.const(1.0), name=f"{label}_up_plus1")
        return g.add("mul", shifted, act, name=f"{label}_glu")

    def stacked_experts(self, i: int, name: str, experts: int, cut: Cut) -> Binding:
        """The one place expert tensors are bound: canonical per-expert tensor `name` ({i}, {e}) of
        every expert, each found through the family's layout (a tensor of its own, or its slice of
        a tensor stacking them all) and cut for the rank, stacked as [E, ...]."""
        found = [self.cfg.tensors.source(name.format(i=i, e=e)) for e in range(experts)]
        sources = tuple(dict.fromkeys(t for f in found for t in f.tensors))
        return Binding(sources, lambda get, rank: np.stack([cut(f.load(get), rank) for f in found]))

    def expert_weight(self, i: int, which: int, axes: dict[str, int], contract: str, cut: Cut) -> Weight:
        """The whole stacked weight [E, ...] of expert projection `which` (gate, up, down), each
        expert's checkpoint tensor cut for this rank; dequantised as it is fetched when integer."""
        fmt = self.cfg.moe.expert_names[which]
        binding = self.stacked_experts(i, fmt, axes["E"], cut)
        name = fmt.format(i=i, e="all").replace(".all.", ".")
        return self.weight(name, axes, [contract], binding.sources, binding.make)

    def expert_bias(self, i: int, which: int, idx: Node, width: int, cut: Cut) -> Node | None:
        """[R, out] f32: each sorted row's expert's bias for projection `which` (None when experts
        have none): the stacked [E, out] biases gathered by each row's expert, dispatch(idx, idx)."""
        moe, g = self.cfg.moe, self.g
        if not moe.expert_bias:
            return None
        row_experts = f"l{i}.row_experts"
        if row_experts not in g:
            g.add("dispatch", idx, idx, name=row_experts, axis="R")
        fmt = moe.expert_names[which].removesuffix(".weight") + ".bias"
        name = fmt.format(i=i, e="all").replace(".all.", ".")
        out = "D" if which == 2 else "F"
        binding = self.stacked_experts(i, fmt, moe.experts, cut)
        b = self.param(name, self.p.table, {"E": moe.experts, out: width}, binding)
        return self.to(g.add("gather", b, g[row_experts], name=f"{name}.rows", axis="E"), F32)

    def expert(self, rows: Node, counts: Node, weight: Weight, label: str, bias: Node | None = None) -> Node:
        """The rows [R, contract] (sorted by expert) against their experts' slices of the weight,
        plus each row's expert's `bias` [R, out] when given."""
        w, grouped, split = weight
        x = self.to(self.split_groups(rows, split), w.type.dtype)
        out = ["R", *(a for a in w.type.names if a != "E" and a not in grouped)]
        eq = f"{' '.join(x.type.names)}, {' '.join(w.type.names)} -> {' '.join(out)}"
        y = TensorType.from_pairs(F32, [(a, {**x.type.sizes, **w.type.sizes}[a]) for a in out])
        top_k = self.cfg.moe.top_k
        y = self.g.add("grouped_einsum", x, w, counts, name=label, eq=eq, group="E", top_k=top_k, type=y)
        return y if bias is None else self.g.add("add", y, bias, name=f"{label}_b")

    def head(self, x: Node) -> Node:
        """Final norm and LM head on [B, (N,) D]; tied models reuse the embedding table.

        Vocab-parallel over chips: each chip computes its V / chips rows (a tied head gets its own
        param cut from the embedding, which stays whole for the lookup) and an all_gather joins them.
        """
        cfg, sh = self.cfg, self.sh
        if cfg.final_norm:
            x = self.norm(x, "D", "model.norm", "final_norm")
        axes = {"V": sh.vocab, "D": cfg.hidden}
        parallel = sh.vocab != cfg.vocab
        cut = sh.column if parallel else _whole
        lead = [a for a in x.type.names if a != "D"]
        if cfg.tie_embeddings:
            embedding = "model.embed_tokens.weight"  # the stage's own copy when it does not embed
            if parallel:
                table = self.tensor("lm_head.weight", self.p.table, axes, cut, source=embedding)
            else:
                table = self.tensor(embedding, self.p.table, {"V": cfg.vocab, "D": cfg.hidden})
            eq = f"{' '.join(lead)} D, V D -> {' '.join(lead)} V"
            logits = self.einsum(self.to(x, table.type.dtype), table, name="logits.raw", eq=eq)
        else:
            logits = self.linear(x, "lm_head.weight", axes, ["D"], [*lead, "V"], "logits.raw", cut)
        logits = self.to(logits, F32)
        if cfg.logits_divisor != 1.0:
            logits = self.g.add("div", logits, self.const(cfg.logits_divisor), name="logits.scaled")
        if cfg.final_softcap is not None:
            logits = self.softcap(logits, cfg.final_softcap, "logits.capped")
        if parallel:
            logits = self.g.add("all_gather", logits, name="logits.gather", axis="V", chips=sh.chips)
        full = [x.type.axis(a) for a in lead] + [Axis("V", cfg.vocab)]
        return self.g.add("reshape", logits, name="logits", type=TensorType(F32, tuple(full)))
