"""From a graph to a Program: fuse, place, tile, and emit commands with their dependencies.

Per pass: its HBM inputs stream in tile by tile on the TensorDMA engines (double buffered: the
load of tile t waits until the main-context command two tiles back has finished, so two tiles
are in flight), the Tensor Unit runs each tile on the main context, and results that live in HBM
are stored back. Weights therefore prefetch during the previous pass's compute, and a decode
step is bounded by how fast HBM delivers its weights.

Each fused op's commands come from a Recipe that depends only on the op's shapes, dtypes and
where its values live (an OpView), so recipes are cached and shared by identical layers and
decode steps; wiring them into one Program is a light walk over the ops.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ir import Graph, TensorType
from ir.memo import per_graph
from ir.ops import REGISTRY, OpCall
from simulator.program import OpInfo, PreparedCommand, Program, ProgramBuilder
from simulator.targets.rngd import units
from simulator.targets.rngd.mapping.experts import GroupedCost, grouped_cost
from simulator.targets.rngd.mapping.fusion import FusedOp, fuse
from simulator.targets.rngd.mapping.lanes import maximum
from simulator.targets.rngd.mapping.layer_period import LayerPeriod
from simulator.targets.rngd.mapping.placement import EinsumShape, Placement, place
from simulator.targets.rngd.mapping.policy import DEFAULT_POLICY, MappingPolicy
from simulator.targets.rngd.mapping.residency import HBM, dm_budget, residency_at, tileable, writes_hbm
from simulator.targets.rngd.mapping.token_chunks import best_chunks, candidates, chunked, pipelined, token_run
from simulator.targets.rngd.mapping.token_tiles import TileChoice, TiledRun
from simulator.targets.rngd.mapping.traits import CONTRACTION_STAGE, traits
from simulator.targets.rngd.sites import SITES
from simulator.targets.rngd.spec import Hardware
from simulator.targets.rngd.units import (
    CHIP_LINK,
    COMMIT,
    CONTRACTION,
    DMA,
    FETCH,
    LINK,
    MAIN,
    PE_LINK,
    PE_PATH,
    REDUCER,
    SWITCH,
    TENSOR_DMA,
    TRF_LOAD,
    VECTOR,
)
from tcp_compiler.errors import TcpcError


@dataclass(frozen=True)
class NodeView:
    """A node as its costs see it: kind, attributes, result and operand types (no name)."""

    kind: str
    attrs: tuple
    type: TensorType
    operands: tuple[TensorType, ...]

    def call(self) -> OpCall:
        return OpCall(self.kind, "", self.operands, dict(self.attrs), self.type)

    def cost(self):
        return REGISTRY[self.kind].cost(self.call())


@dataclass(frozen=True)
class OpView:
    """What a fused op's commands depend on; equal views get the same Recipe."""

    kind: str  # "pass", "dma", "collective"
    nodes: tuple[NodeView, ...]
    inputs: tuple[tuple[TensorType, str, str], ...]  # (type, residency, producing kind) per memory input
    outputs: tuple[tuple[TensorType, str], ...]  # (type, residency) per memory output
    chunks: int = 1  # a collective sent in chunks, each as soon as one tile of its producer is done
    fetched: int = 0  # the leading nodes that transform weights as the pass fetches them (prologue)
    # Views key the recipe caches: hashing their nested types on every lookup would dominate them.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.kind, self.nodes, self.inputs, self.outputs, self.chunks,
                                                self.fetched)))  # fmt: skip

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True)
class Step:
    """One command of a recipe. `role` says how it is wired: load (after the gate and the HBM
    producers), main (after this tile's load and every producer), store (after this tile's main),
    move / link (after the producers), chunk (a collective's share, after the producer's tile that
    completes it), after (after the previous command)."""

    role: str
    context: str
    cycles: int
    latency: int | None = None
    moved: int = 0
    flops: int = 0
    hbm_bytes: int = 0
    dm_bytes: int = 0
    link_bytes: int = 0
    busy: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class PassPlan:
    """A pass as its tiles: per tile, the HBM bytes loaded before it and stored after it, and its
    main command; and its placement described."""

    tiles: tuple[tuple[int, int, Step], ...]
    placement: str
    operand: str = ""  # the dtype its contraction multiplies in ("" without one)


# What a pass's plan does not read: rates, clocks and link or HBM timing (its DMA moves are timed
# from the spec each time), and the power, energy and area tables. A sweep over these values
# re-times the moves and reuses the plan (placement, tiling, compute cycles).
PLAN_FREE = ("chip.clock_hz", "chip.tdp_w", "hbm.", "dma.", "system.", "energy.", "power.",
             "operating_point.", "area.")  # fmt: skip
PlanFinder = Callable[["OpView", Hardware, MappingPolicy], PassPlan]


@dataclass(frozen=True)
class Recipe:
    kind: str
    placement: str
    steps: tuple[Step, ...]
    streams_weights: bool = False  # its loads bring weights from HBM (see emit's gate)
    operand: str = ""  # the dtype its contraction multiplies in ("" without one)


def op_view(graph: Graph, op: FusedOp, where: Mapping[str, str]) -> OpView:
    nodes = tuple(
        NodeView(n.kind, tuple(n.attrs.items()), n.type, tuple(graph[o].type for o in n.operands))
        for n in [*op.prologue, *op.nodes]  # weight transforms first: they happen as the pass fetches
    )
    inputs = tuple((graph[v].type, where.get(v, HBM), graph[v].kind) for v in op.inputs)
    outputs = tuple((graph[v].type, where[v]) for v in op.outputs)
    return OpView(op.kind, nodes, inputs, outputs, fetched=len(op.prologue))


_RECIPES: dict[tuple[OpView, Hardware, MappingPolicy], Recipe] = {}
_PLANS: dict[tuple[OpView, tuple, MappingPolicy], PassPlan] = {}
_KEPT = 200_000  # entries of either cache before it starts afresh


def recipe(view: OpView, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY) -> Recipe:
    """The commands of one fused op (cached by view, hardware and policy; a pass's plan by view,
    policy and the spec's values outside PLAN_FREE)."""
    key = (view, hw, policy)
    if key not in _RECIPES:
        if len(_RECIPES) > _KEPT:
            _RECIPES.clear()
        _RECIPES[key] = build_recipe(view, hw, policy, _kept_plan)
    return _RECIPES[key]


def _kept_plan(view: OpView, hw: Hardware, policy: MappingPolicy) -> PassPlan:
    key = (view, hw.values_except(PLAN_FREE), policy)
    if key not in _PLANS:
        if len(_PLANS) > _KEPT:
            _PLANS.clear()
        _PLANS[key] = _pass_plan(view, hw, policy)
    return _PLANS[key]


def build_recipe(
    view: OpView, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY, plan: PlanFinder | None = None
) -> Recipe:
    """The commands of one fused op; `plan` finds a pass's plan (default: computes it)."""
    if view.kind == "pass":
        built = _pass_recipe((plan or _pass_plan)(view, hw, policy), hw)
    else:
        built = {"dma": _dma, "collective": _collective}[view.kind](view, hw, policy)
    weights = any(traits(kind).weight and w == HBM for _, w, kind in view.inputs)
    return replace(built, streams_weights=weights) if weights else built


@dataclass
class Wiring:
    """The program being built, and what the next op's commands wait for."""

    builder: ProgramBuilder = field(default_factory=lambda: ProgramBuilder(SITES))
    done: dict[str, int] = field(default_factory=dict)  # value -> the command after which it is in memory
    mains: list[int] = field(default_factory=list)  # every main-context command so far, in order
    weight_mains: list[int] = field(default_factory=list)  # those of passes that stream weights
    tiles: dict[str, list[int]] = field(default_factory=dict)  # value -> its producer's main commands
    rows: RecipeRows = field(default_factory=lambda: RecipeRows())


@dataclass
class RecipeRows:
    """Recipes' steps as a builder's rows, each recipe converted once (layers share recipes)."""

    builder: ProgramBuilder = field(default_factory=lambda: ProgramBuilder(SITES))
    kept: dict[int, tuple[Recipe, list[PreparedCommand]]] = field(default_factory=dict)  # id -> (it, rows)

    def __call__(self, r: Recipe) -> list[PreparedCommand]:
        """The recipe's rows (the recipe is kept with them, so its id stays its own)."""
        kept = self.kept.get(id(r))
        if kept is None:
            rows = [self.builder.prepare(s.context, s.cycles, latency=s.latency, moved=s.moved, flops=s.flops,
                                         hbm_bytes=s.hbm_bytes, dm_bytes=s.dm_bytes, link_bytes=s.link_bytes,
                                         busy=dict(s.busy)) for s in r.steps]  # fmt: skip
            kept = self.kept[id(r)] = (r, rows)
        return kept[1]


@per_graph
def op_views(graph: Graph, budget: int, tiled: tuple[TiledRun, ...] = ()) -> tuple[OpView, ...]:
    """The view of each of the graph's fused ops (by index) when values live as `budget` and the
    `tiled` runs place them (residency_at): kept per graph, so a sweep over other spec values
    reuses them."""
    where = residency_at(graph, budget, tiled)
    return tuple(op_view(graph, op, where) for op in fuse(graph))


@per_graph
def token_tiles(graph: Graph, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY) -> tuple[TileChoice, ...]:
    """Each run of the graph that can hold its activations a token tile at a time (tileable), with
    the estimated cycles of the run both ways, as the schedule would emit it: tiled in its fastest
    tile count (from the fewest that fit), and spilled (its values stored and read back, no cut).
    The one place that decides whether a run is tiled: where that is faster (TileChoice.tiled)."""
    budget = dm_budget(hw, policy)
    runs = tileable(graph, budget)
    if not runs:
        return ()
    tiled, spilled = op_views(graph, budget, runs), op_views(graph, budget)  # runs are apart: views too
    choices = []
    for run in runs:
        options = {c: _run_cycles([tiled[k] for k in run.ops], c, hw, policy) for c in run.tile_counts()}
        tiles = best_chunks(options)
        spill = _run_cycles([spilled[k] for k in run.ops], 1, hw, policy)
        choices.append(TileChoice(run, tiles, pipelined(*options[tiles], tiles), pipelined(*spill, 1)))
    return tuple(choices)


def tiled_runs(graph: Graph, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY) -> tuple[TiledRun, ...]:
    """The runs of the graph held a token tile at a time (those token_tiles finds faster tiled)."""
    return tuple(choice.run for choice in token_tiles(graph, hw, policy) if choice.tiled)


def plan_token_tiles(
    graph: Graph, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY, period: LayerPeriod | None = None
) -> list[dict]:
    """One note per run of ops whose intermediates DM holds a token tile at a time: its fewest
    tiles and the estimated times that chose it; with `period` (`graph` a stand-in), the left-out
    layers' notes too, copied as their programs are."""
    budget, ops = dm_budget(hw, policy), fuse(graph)
    notes = [choice.note(graph, ops, budget, hw.chip.clock_hz) for choice in token_tiles(graph, hw, policy)
             if choice.tiled]  # fmt: skip
    return notes if period is None else period.copied_notes(notes)


def view_of(view: OpView, tiles: int, hw: Hardware) -> OpView:
    """The op's view (`view`, from op_views); a collective is chunked to follow its producer's
    `tiles` (as tensor-parallel kernels overlap the all-reduce with the GEMM that produces it) when
    each chunk's transfer outlasts the ring's latencies it adds."""
    if view.kind != "collective" or tiles < 2:
        return view
    paths = collective_paths(view.nodes[0], hw)
    transfer = sum(p.transfer_cycles(hw) for p in paths)
    latency = sum(p.latency_cycles(hw) for p in paths)
    chunks = min(tiles, max(1, transfer // max(latency, 1)))
    return replace(view, chunks=chunks) if chunks > 1 else view


def schedule(graph: Graph, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY, chip: int = 0) -> Program:
    """The Program of one chip running `graph` (an SPMD graph's collectives use the links)."""
    budget = dm_budget(hw, policy)
    choices = {choice.run.ops[0]: choice for choice in token_tiles(graph, hw, policy) if choice.tiled}
    tiled = tuple(choice.run for choice in choices.values())
    where = residency_at(graph, budget, tiled)
    ops, views = fuse(graph), op_views(graph, budget, tiled)
    runs = {}  # first op -> (its token run, blocks), where cutting the run into blocks pays
    i = 0
    while i < len(ops):
        if i in choices:  # its intermediates fit DM only a token tile at a time: cut it, in the best tiles
            runs[i] = ([ops[k] for k in choices[i].run.ops], choices[i].tiles)
            i += len(choices[i].run.ops)
            continue
        run = token_run(graph, ops, i, where)
        if run and candidates(graph, run):
            run_views = [views[op.index] for op in run]
            options = {c: _run_cycles(run_views, c, hw, policy) for c in (1, *candidates(graph, run))}
            chunks = best_chunks(options)
            if chunks > 1:
                runs[i] = (run, chunks)
                i += len(run)
                continue
        i += 1
    if not runs:
        return scheduled(graph, hw, policy, chip)[0]
    wiring = Wiring()
    i = 0
    while i < len(ops):
        if i in runs:
            run, chunks = runs[i]
            _emit_run(wiring, run, [recipe(chunk_view(views[op.index], chunks), hw, policy) for op in run],
                      chunks, where, chip)  # fmt: skip
            i += len(run)
            continue
        emit(wiring, ops[i], recipe(view_of(views[i], _tiles(wiring, ops[i]), hw), hw, policy), where, chip)
        i += 1
    return wiring.builder.build()


def _tiles(wiring: Wiring, op: FusedOp) -> int:
    """The main commands of the op that produced `op`'s first input, as wired so far."""
    return len(wiring.tiles.get(op.inputs[0], ())) if op.inputs else 0


def scheduled(
    graph: Graph, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY, chip: int = 0
) -> tuple[Program, list[OpView], list[Recipe]]:
    """The Program of the graph's ops one after another (no token runs cut into blocks, none held
    a token tile at a time), and the view and recipe of each fused op. The wiring (which command
    waits for which) follows from the recipes' shapes alone: a spec whose recipes have the shapes
    of one already wired for this graph (a bandwidth, clock or latency change) refills that
    program's values instead of wiring it again."""
    budget = dm_budget(hw, policy)
    views, rows, mains = [], RecipeRows(), {}  # mains: value -> main commands of its producer
    recipes = []
    for op in fuse(graph):
        tiles = mains.get(op.inputs[0], 0) if op.inputs else 0
        view = view_of(op_views(graph, budget)[op.index], tiles, hw)
        r = recipe(view, hw, policy)
        views.append(view)
        recipes.append(r)
        for v in op.outputs:
            mains[v] = sum(s.context == MAIN.name for s in r.steps)
    wired, shaped = _wired(graph, budget, chip), {}
    shapes = tuple(shaped.get(id(r)) or shaped.setdefault(id(r), _shape(r)) for r in recipes)
    if shapes in wired:
        wired.move_to_end(shapes)
        return wired[shapes].refilled([row for r in recipes for row in rows(r)]), views, recipes
    wiring = Wiring(rows=rows)
    where = residency_at(graph, budget)
    for op, r in zip(fuse(graph), recipes, strict=True):
        emit(wiring, op, r, where, chip)
    program = wired[shapes] = wiring.builder.build()
    while len(wired) > _WIRED_KEPT:
        wired.popitem(last=False)
    return program, views, recipes


_WIRED_KEPT = 8  # wirings kept per graph, DM budget and chip


@per_graph
def _wired(graph: Graph, budget: int, chip: int) -> OrderedDict[tuple, Program]:
    """The programs wired for this graph so far, by their recipes' shapes."""
    return OrderedDict()


def _shape(r: Recipe) -> tuple:
    """What the wiring of a recipe's commands depends on: its steps' roles and contexts, whether it
    streams weights, and what its op's info says (kind, placement)."""
    return r.kind, r.placement, r.streams_weights, tuple((s.role, s.context) for s in r.steps)


def chunk_view(view: OpView, chunks: int) -> OpView:
    """The view of one block of `chunks` along the tokens (simulator.targets.rngd.mapping.token_chunks)."""
    if chunks == 1:
        return view
    nodes = tuple(
        replace(n, type=chunked(n.type, chunks), operands=tuple(chunked(t, chunks) for t in n.operands))
        for n in view.nodes
    )
    inputs = tuple((chunked(t, chunks), w, kind) for t, w, kind in view.inputs)
    outputs = tuple((chunked(t, chunks), w) for t, w in view.outputs)
    return replace(view, nodes=nodes, inputs=inputs, outputs=outputs)


def _run_cycles(views: list[OpView], chunks: int, hw: Hardware, policy: MappingPolicy) -> tuple[int, int]:
    """(link cycles, Tensor Unit cycles) of a token run cut into `chunks` blocks, all blocks: the
    collectives' transfers, and per pass the longer of its compute and its HBM moves (loads of
    weights and spilled inputs, stores of what it spills). Kept per views, count, spec and policy:
    a model's layers repeat the same runs."""
    key = (tuple(views), chunks, hw, policy)
    if key not in _ESTIMATES:
        if len(_ESTIMATES) > _KEPT:
            _ESTIMATES.clear()
        link = work = 0
        for view in views:
            view = chunk_view(view, chunks)
            if view.kind == "pass":  # its totals, not its tiles' commands: cheap at any length
                work += max(*_pass_totals(view, hw, policy).cycles(hw))
                continue
            steps = recipe(view, hw, policy).steps
            link += sum(s.cycles for s in steps if s.context in (LINK.name, PE_LINK.name))
            main = sum(s.cycles for s in steps if s.context == MAIN.name)
            work += max(main, sum(s.cycles for s in steps if s.role in ("load", "store")))
        _ESTIMATES[key] = (link * chunks, work * chunks)
    return _ESTIMATES[key]


_ESTIMATES: dict[tuple, tuple[int, int]] = {}


def _emit_run(wiring: Wiring, run: list[FusedOp], recipes: list[Recipe], chunks: int,
              where: Mapping[str, str], chip: int) -> None:  # fmt: skip
    """A token run, block by block and skewed as a software pipeline. Its all-reduces cut it into
    segments (up to one's transfer, from its combining step to the next one's transfer, ...);
    block c of segment j is emitted in slot c + j, after block c + 1 of segment j - 1, so the
    Tensor Unit computes the next block while the links carry this one (both queues run in order:
    a step that waits for a transfer holds back everything behind it)."""
    segments: list[list[tuple[int, FusedOp, Recipe]]] = [[]]
    for k, op in enumerate(run):
        if op.kind == "collective":
            sent, *rest = _halves(op, recipes[k])
            segments[-1].append((k, op, sent))
            segments.append([(k, *rest)] if rest else [])
        else:
            segments[-1].append((k, op, recipes[k]))
    infos: dict[int, OpInfo] = {}
    done: list[dict[str, int]] = [{} for _ in range(chunks)]  # per block: its values' last commands
    for slot in range(chunks + len(segments) - 1):
        for j, segment in enumerate(segments):
            c = slot - j
            if not 0 <= c < chunks:
                continue
            for k, op, r in segment:
                wiring.done.update(done[c])
                infos[k] = emit(wiring, op, r, where, chip, infos.get(k))
                done[c].update({v: wiring.done[v] for v in op.outputs})
    wiring.done.update(done[-1])  # the last block's: the queues it ran on are in order


def _halves(op: FusedOp, r: Recipe) -> tuple[Recipe, ...]:
    """A collective's recipe as (its transfers, then, if it combines, the op that reads what
    arrived and its combining step)."""
    sent = replace(r, steps=tuple(s for s in r.steps if s.context != MAIN.name))
    combining = tuple(replace(s, role="main") for s in r.steps if s.context == MAIN.name)
    if not combining:
        return (sent,)
    return sent, replace(op, inputs=list(op.outputs)), replace(r, steps=combining)


def emit(wiring: Wiring, op: FusedOp, r: Recipe, where: Mapping[str, str], chip: int,
         info: OpInfo | None = None) -> OpInfo:  # fmt: skip
    """Appends one op's recipe to the program, wired to its producers; `info`: the op's OpInfo when
    it is emitted again (a block of a token run), so the report folds the blocks into one row."""
    b = wiring.builder
    nodes = tuple(n.name for n in op.nodes)
    info = info or OpInfo(op.name, r.kind, op.layer, nodes, r.placement, tuple(op.inputs), op.role, r.operand)
    index = b.op(info)
    producers = [wiring.done[v] for v in op.inputs if v in wiring.done]
    from_hbm = [wiring.done[v] for v in op.inputs if v in wiring.done and where.get(v, HBM) == HBM]
    load = main = last = None
    mains: list[int] = []
    tiles = wiring.tiles.get(op.inputs[0], []) if op.inputs else []
    chunks = sum(s.role == "chunk" for s in r.steps)
    chunk = 0
    for s, row in zip(r.steps, wiring.rows(r), strict=True):
        if s.role == "load":
            # Two tiles in flight: a load waits for the main command two tiles back. Weights have
            # their own double buffer, so a weight load waits only for the weight tile two back:
            # the next GEMM's weights stream in during collectives, norms and attention.
            behind = wiring.weight_mains if r.streams_weights else wiring.mains
            gate = behind[-2] if len(behind) >= 2 else None
            deps = [gate, *from_hbm]
        elif s.role == "main":
            deps = [load, *producers]
        elif s.role == "store":
            deps = [main]
        elif s.role == "after":
            deps = [last]
        elif s.role == "chunk":  # after the producer's tile that completes this chunk's share
            chunk += 1
            deps = [tiles[-(-chunk * len(tiles) // chunks) - 1]] if tiles else producers
        else:
            deps = producers
        last = b.add(row, index, deps, chip)
        if s.role == "load":
            load = last
        if s.context == MAIN.name:
            mains.append(last)
            wiring.mains.append(last)
            if r.streams_weights:
                wiring.weight_mains.append(last)
            main, load = last, None
    for v in op.outputs:
        wiring.done[v] = last
        wiring.tiles[v] = mains
    return info


def _split(total: int, parts: int) -> list[int]:
    """`total` in `parts` near-equal ints, the larger first (a comparison, not a branch: the
    total may be lanes of a block of decode lengths, simulator.targets.rngd.mapping.lanes)."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def _transfer(role: str, nbytes: int, hw: Hardware, hbm_sides: int) -> Step:
    """One TensorDMA move of `nbytes`; `hbm_sides`: how many of its ends (source, destination) are
    in HBM. The simulator shares DMA and HBM bandwidth among the moves in flight."""
    cycles = units.dma_cycles(hw, nbytes, hbm_sides)
    return Step(
        role, DMA.name, cycles, latency=hw.dma.startup_cycles, moved=nbytes, hbm_bytes=nbytes * hbm_sides,
        dm_bytes=nbytes * (2 - hbm_sides), busy=((TENSOR_DMA.name, cycles),),
    )  # fmt: skip


def _vector_cycles(
    view: OpView, hw: Hardware, slices: int, grouped: GroupedCost | None = None
) -> tuple[int, int]:
    """(throughput cycles, latency) of the pass's element-wise and reduction work on the VE; a
    grouped pass transforms (dequantises) only the slices of the experts it hits."""
    adapter = _adapter_nodes(view)
    vector = [n for n in view.nodes if traits(n.kind).stage != CONTRACTION_STAGE and n not in adapter]
    if not vector:
        return 0, 0

    def numel(t: TensorType) -> int:
        return _share(t, grouped)

    elements = max(max(numel(t) for t in n.operands) if n.operands else numel(n.type) for n in vector)
    throughput, latency = units.vector_cycles(
        hw, elements, any(n.type.dtype.is_float for n in vector), len(vector),
        any(traits(n.kind).ends_pass for n in vector), slices,
    )  # fmt: skip
    steps = [_recurrence_cycles(n, hw, slices) for n in vector if traits(n.kind).step_chain]
    return max([throughput, *steps]), latency


def _recurrence_cycles(node: NodeView, hw: Hardware, slices: int) -> int:
    """A recurrence's VE cycles: its steps (the size of its sequence axis) over its state (the last
    operand, h0; times the columns of a matrix transition, `mix`), one after another
    (units.recurrence_cycles)."""
    attrs = dict(node.attrs)
    axis, mix = attrs["axis"], attrs.get("mix")
    steps = max(t.size(axis) for t in node.operands if axis in t.names)
    work = node.operands[-1].numel * (node.operands[0].size(mix[1]) if mix else 1)
    return units.recurrence_cycles(hw, steps, work, traits(node.kind).step_chain, slices)


def _share(t: TensorType, grouped: GroupedCost | None) -> int:
    """Elements of t a pass touches: all, or a grouped pass's share of the experts it hits."""
    return t.numel if grouped is None else math.ceil(t.numel * grouped.share(t))


def _adapter_nodes(view: OpView) -> list[NodeView]:
    """Weight transforms the Fetch Adapter does (tcp-hardware.md, Fetch Adapter): table lookups
    (a gather from a const table) and zero-point subtraction (the integer sub of codes and zeros)."""
    fetched = view.nodes[: view.fetched]
    return [n for n in fetched if n.kind == "gather" or (n.kind == "sub" and n.type.dtype.is_int)]


def _adapter_cycles(view: OpView, hw: Hardware, slices: int, grouped: GroupedCost | None) -> tuple[int, int]:
    """(throughput cycles, latency) of the Fetch Adapter decoding the pass's packed weight codes."""
    adapter = _adapter_nodes(view)
    if not adapter:
        return 0, 0

    def code_bytes(n: NodeView) -> int:
        """Bytes of the codes n decodes: a lookup's index, or the int weight input of n's size."""
        if n.kind == "gather":
            bits = n.operands[1].dtype.bits
        else:
            bits = next(t.dtype.bits for t, _, kind in view.inputs
                        if traits(kind).weight and t.dtype.is_int and t.numel == n.type.numel)  # fmt: skip
        return math.ceil(_share(n.type, grouped) * bits / 8)

    lookup = sum(code_bytes(n) for n in adapter if n.kind == "gather")
    convert = sum(code_bytes(n) for n in adapter if n.kind != "gather")
    return units.adapter_cycles(hw, lookup, convert, len(adapter), slices)


def _contraction(view: OpView) -> NodeView | None:
    return next((n for n in view.nodes if traits(n.kind).stage == CONTRACTION_STAGE), None)


def _grouped(view: OpView, hw: Hardware, policy: MappingPolicy) -> GroupedCost | None:
    """The expected experts and GEMMs of a pass whose contraction is a grouped einsum (MoE)."""
    einsum = _contraction(view)
    return grouped_cost(einsum.call(), hw, policy) if einsum and einsum.kind == "grouped_einsum" else None


@dataclass(frozen=True)
class PassTotals:
    """A pass as a whole, before it is cut into tiles: what its plan splits among them."""

    flops: int
    hbm_in: int  # bytes loaded from HBM
    hbm_out: int  # bytes stored to HBM
    dm_bytes: int
    main_cycles: int
    fetch: int
    vector: int
    tiles: int
    placement: Placement | None
    grouped: GroupedCost | None
    einsum: NodeView | None

    def cycles(self, hw: Hardware) -> tuple[int, int]:
        """(main cycles, HBM move cycles) of all its tiles, as its recipe's steps add up
        (_pass_recipe: a load and a store per tile that moves bytes), without making them."""
        moves = 0
        for total in (self.hbm_in, self.hbm_out):
            base, extra = divmod(total, self.tiles)  # _split: `extra` tiles move base + 1 bytes
            if base:
                moves += (self.tiles - extra) * units.dma_cycles(hw, base, 1)
            if extra:
                moves += extra * units.dma_cycles(hw, base + 1, 1)
        return self.main_cycles, moves


def _pass_totals(view: OpView, hw: Hardware, policy: MappingPolicy) -> PassTotals:
    """A pass's placement, compute, fetch and tile count; it reads none of PLAN_FREE."""
    flops = sum(n.cost().flops for n in view.nodes)
    grouped = _grouped(view, hw, policy)
    # A grouped einsum reads only the experts routing hits (uniform routing: mapping/experts.py).
    read = grouped.read_bytes if grouped else (lambda t: t.nbytes)
    hbm_in = sum(
        read(t) if traits(kind).in_memory else t.nbytes
        for t, w, kind in view.inputs
        if w == HBM and not traits(kind).immediate
    )
    dm_bytes = sum(t.nbytes for t, w, kind in view.inputs if w != HBM and not traits(kind).immediate)
    hbm_out = sum(t.nbytes for t, w in view.outputs if writes_hbm(w))
    dm_bytes += sum(t.nbytes for t, w in view.outputs if w != HBM)
    placement = None
    einsum = _contraction(view)
    if grouped is not None:
        placement = grouped.placement
    elif einsum is not None:
        shape = EinsumShape.of(dict(einsum.attrs)["eq"], einsum.operands, einsum.type)
        placement = place(shape, hw, policy)
    if placement is not None:
        slices = placement.slices_used
        compute, latency = placement.cycles - placement.latency, placement.latency
    else:
        slices, compute, latency = hw.slices, 0, 0
    vector, vector_latency = _vector_cycles(view, hw, slices, grouped)
    adapter, adapter_latency = _adapter_cycles(view, hw, slices, grouped)
    fetch = max(units.fetch_cycles(hw, dm_bytes, slices), adapter)
    main_cycles = maximum(compute, vector, fetch, 1) + latency + vector_latency + adapter_latency
    tiles = max(
        placement.tiles if placement else 1,
        min(policy.max_tiles, math.ceil(hbm_in / (hw.dm_bytes // policy.tile_divisor))),
    )
    return PassTotals(flops, hbm_in, hbm_out, dm_bytes, main_cycles, fetch, vector, tiles, placement, grouped,
                      einsum)  # fmt: skip


def _pass_plan(view: OpView, hw: Hardware, policy: MappingPolicy) -> PassPlan:
    """A pass's tiles and main commands: placement, compute and fetch; it reads none of
    PLAN_FREE (its HBM moves are timed by _pass_recipe)."""
    t = _pass_totals(view, hw, policy)
    placement, grouped, einsum, tiles = t.placement, t.grouped, t.einsum, t.tiles
    tiled = []
    for f, lin, lout, dm, cyc in zip(
        _split(t.flops, tiles),
        _split(t.hbm_in, tiles),
        _split(t.hbm_out, tiles),
        _split(t.dm_bytes, tiles),
        _split(t.main_cycles, tiles),
        strict=True,
    ):
        fetch = math.ceil(cyc * t.fetch / t.main_cycles)
        busy = {FETCH.name: fetch, VECTOR.name: math.ceil(t.vector / tiles)}
        if placement is not None:
            busy[CONTRACTION.name] = busy[REDUCER.name] = math.ceil(placement.compute_cycles / tiles)
            busy[SWITCH.name] = math.ceil(placement.supply_cycles / tiles)
            busy[COMMIT.name] = math.ceil(placement.commit_cycles / tiles)
            busy[TRF_LOAD.name] = math.ceil(placement.reload_cycles / tiles)
        main = Step("main", MAIN.name, cyc, flops=f, dm_bytes=dm, busy=tuple(busy.items()))
        tiled.append((lin, lout, main))
    described = placement.describe(hw) if placement else ""
    described += f" {grouped.describe()}" if grouped else ""
    operand = einsum.operands[0].dtype.name if einsum is not None else ""
    return PassPlan(tuple(tiled), described, operand)


def _pass_recipe(plan: PassPlan, hw: Hardware) -> Recipe:
    """A pass's commands: per tile, its HBM loads, its main command and its stores."""
    steps = []
    for lin, lout, main in plan.tiles:
        if lin:
            steps.append(_transfer("load", lin, hw, 1))
        steps.append(main)
        if lout:
            steps.append(_transfer("store", lout, hw, 1))
    return Recipe("pass", plan.placement, tuple(steps), operand=plan.operand)


def _dma(view: OpView, hw: Hardware, policy: MappingPolicy) -> Recipe:
    (node,) = view.nodes
    moved = node.cost().bytes_written  # TensorDMA moves what it writes; it reads the same bytes
    sides = int(any(w == HBM for _, w, _ in view.inputs)) + int(writes_hbm(view.outputs[0][1]))
    return Recipe(node.kind, "", (_transfer("move", moved, hw, sides),))


def _collective(view: OpView, hw: Hardware, policy: MappingPolicy) -> Recipe:
    (node,) = view.nodes
    chips = dict(node.attrs).get("chips", 0)  # a send joins two stages, not a group
    if chips > hw.system.chips:
        raise TcpcError(
            f"the {node.kind} spans {chips} chips but hardware '{hw.name}' has {hw.system.chips}"
        )
    cost = node.cost()
    steps = []
    paths = collective_paths(node, hw)
    shares = [_split(path.nbytes, view.chunks) for path in paths]
    for chunk in range(view.chunks):  # each chunk is a whole collective of its share
        for k, path in enumerate(paths):
            role = "after" if k else "chunk" if view.chunks > 1 else "link"
            steps.append(path.step(role, shares[k][chunk], hw))
    if cost.flops:
        vector, _ = units.vector_cycles(hw, node.type.numel, True, 0, False, hw.slices)
        steps.append(
            Step("after", MAIN.name, vector, flops=cost.flops, dm_bytes=cost.bytes,
                 busy=((VECTOR.name, vector),))  # fmt: skip
        )
    return Recipe(node.kind, "", tuple(steps))


@dataclass(frozen=True)
class CollectivePath:
    """One phase of a collective as one rank runs it: `steps` sequential transfers that send
    `nbytes` in all, over the chip links or PE to PE within a card."""

    context: str  # LINK or PE_LINK
    nbytes: int
    steps: int

    def latency_cycles(self, hw: Hardware) -> int:
        if self.context == LINK.name:
            return max(self.steps, 1) * hw.link_latency_cycles
        return max(self.steps, 1) * hw.system.pe_link_latency_cycles

    def transfer_cycles(self, hw: Hardware) -> int:
        if self.context == LINK.name:
            return units.link_transfer_cycles(hw, self.nbytes)
        return units.pe_link_cycles(hw, self.nbytes, self.steps) - self.latency_cycles(hw)

    def step(self, role: str, nbytes: int, hw: Hardware) -> Step:
        """The command of this phase for `nbytes` of it (a chunk's share)."""
        if self.context == LINK.name:
            cycles = units.link_cycles(hw, nbytes, self.steps)
            return Step(role, LINK.name, cycles, link_bytes=nbytes, busy=((CHIP_LINK.name, cycles),))
        cycles = units.pe_link_cycles(hw, nbytes, self.steps)
        # DM to DM: read on one PE, written on the next
        return Step(role, PE_LINK.name, cycles, dm_bytes=2 * nbytes, busy=((PE_PATH.name, cycles),))


def collective_paths(node: NodeView, hw: Hardware) -> list[CollectivePath]:
    """How one rank runs a collective over the ranks of `hw` (Hardware.partitioned): on whole
    cards, the ring of its cost over the chip links; on cards split into P ranks, hierarchically,
    the ranks of a card PE to PE and the cards over their links, each rank with its share:
    all_reduce = reduce-scatter in the card, all-reduce of the rank's 1/P across the cards,
    all-gather in the card; all_gather = across the cards, then in the card; reduce_scatter = in
    the card, then across; a send = the rank's 1/P over the link, gathered in the next card."""
    cost = node.cost()
    per_card = hw.system.ranks_per_card
    ranks = dict(node.attrs).get("chips", per_card)  # a send: one rank to its peer
    if per_card == 1:
        return [CollectivePath(LINK.name, cost.link_bytes, cost.link_steps)]
    if ranks % per_card:
        raise TcpcError(
            f"the {node.kind} spans {ranks} ranks, not whole cards of {per_card} (system.ranks_per_card)"
        )
    p, n = per_card, ranks // per_card
    x = node.operands[0].nbytes
    in_card = x * (p - 1) // p
    if node.kind == "all_reduce":
        paths = [(PE_LINK.name, in_card, p - 1), (LINK.name, 2 * (n - 1) * (x // p) // n, 2 * (n - 1)),
                 (PE_LINK.name, in_card, p - 1)]  # fmt: skip
    elif node.kind == "all_gather":
        paths = [(LINK.name, (n - 1) * x, n - 1), (PE_LINK.name, (p - 1) * n * x, p - 1)]
    elif node.kind == "reduce_scatter":
        paths = [(PE_LINK.name, in_card, p - 1), (LINK.name, (n - 1) * (x // p) // n, n - 1)]
    else:  # send
        paths = [(LINK.name, x // p, 1), (PE_LINK.name, in_card, p - 1)]
    return [CollectivePath(c, b, s) for c, b, s in paths if s > 0]
