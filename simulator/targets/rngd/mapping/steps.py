"""Decode steps one after another: each simulated with its own KV length, compiled only once.

A generation's decode steps differ only in the KV length (axes P and Sk). The step graph goes
through the passes, fusion and scheduling once; for each later step only the ops whose shapes
mention those axes get new recipes (cached by shape), and their commands are patched into the
program's arrays. When a new length changes a program's structure (a KV read needs one more
tile), the step is scheduled afresh from the resized graph and becomes the new template.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from ir import Graph, Node, TensorType
from ir.memo import per_graph
from simulator.program import VARYING, Program, ProgramBlock, command_timing
from simulator.targets.rngd.mapping.fusion import fuse
from simulator.targets.rngd.mapping.lanes import Diverged, Lanes, lane_values
from simulator.targets.rngd.mapping.placement import EinsumShape, is_placed, place_ahead
from simulator.targets.rngd.mapping.policy import DEFAULT_POLICY, MappingPolicy
from simulator.targets.rngd.mapping.residency import DM, DM_STORED, placed
from simulator.targets.rngd.mapping.schedule import OpView, Step, build_recipe, scheduled
from simulator.targets.rngd.mapping.traits import traits
from simulator.targets.rngd.mapping.view_resize import ResizePlan, resize_type
from simulator.targets.rngd.sites import SITES
from simulator.targets.rngd.spec import Hardware

AHEAD = 64  # decode lengths whose einsums are placed together
BLOCK = 256  # decode lengths costed together as lanes
_UNIT_COLUMN = {unit: i for i, unit in enumerate(SITES.unit_names)}  # a busy unit's column in Program.busy


def resize_graph(graph: Graph, sizes: dict[str, int]) -> Graph:
    """The same graph with the named axes at new sizes; unchanged nodes are shared. Kept per graph
    and sizes (ir.memo), so a spec change resizes to the same graph and what is kept on it."""
    return _resized(graph, tuple(sorted(sizes.items())))


@per_graph
def _resized(graph: Graph, sizes: tuple[tuple[str, int], ...]) -> Graph:
    at = dict(sizes)
    out = Graph(graph.name)
    for n in graph.nodes:
        t = resize_type(n.type, at)
        out.append(n if t is n.type else Node(n.name, n.kind, n.operands, n.attrs, t, n.line))
    out.outputs = list(graph.outputs)
    out.param_values = graph.param_values
    out.meta = graph.meta
    return out


class DecodeSteps:
    """Programs of a decode graph at any KV length, from one compiled template."""

    def __init__(
        self, graph: Graph, hw: Hardware, policy: MappingPolicy = DEFAULT_POLICY, chip: int = 0
    ) -> None:
        self.hw, self.policy, self.chip = hw, policy, chip
        self.in_blocks = 0  # lengths `programs` costed as part of a block, not alone
        self._compile(graph)

    def _compile(self, graph: Graph) -> None:
        self.graph = graph
        self.ops = fuse(graph)
        self.program, self.views, self.recipes = scheduled(graph, self.hw, self.policy, self.chip)
        fixed = {n.name for n in graph.nodes if traits(n.kind).in_memory} | set(graph.outputs)
        self.fixed_in = [tuple(v in fixed for v in op.inputs) for op in self.ops]
        self.fixed_out = [tuple(v in fixed for v in op.outputs) for op in self.ops]
        # Ops whose shapes follow the KV length, grouped by identical view (one per layer kind).
        self.dynamic: dict[tuple, list[int]] = {}
        for k, v in enumerate(self.views):
            if _mentions(v, graph.meta.kv_axes):
                self.dynamic.setdefault((v, self.fixed_in[k], self.fixed_out[k]), []).append(k)
        first = np.searchsorted(self.program.op, np.arange(len(self.ops)))
        # Where each dynamic group's commands start, one entry per op of the group.
        starts = {key: first[np.array(ks)] for key, ks in self.dynamic.items()}
        # The rows a step patches, per (group, recipe step) in order, and how many each one has.
        self.roles = {key: [s.role for s in self.recipes[ks[0]].steps] for key, ks in self.dynamic.items()}
        patched = [starts[key] + j for key, roles in self.roles.items() for j in range(len(roles))]
        self.rows = np.concatenate(patched) if patched else np.zeros(0, np.int64)
        self.counts = [len(r) for r in patched]
        self.plans = {key: ResizePlan(*key, graph.meta.kv_axes) for key in self.dynamic}
        # Per dynamic group, the lengths whose einsums its last batch placed (a range).
        self.placed: dict[tuple, range] = {}

    def at(self, length: int) -> Program:
        """The program of the step whose KV cache holds `length` positions (past + 1)."""
        sizes = self.graph.meta.kv_sizes(length)
        steps: list[Step] = []  # the recipe steps of every dynamic group, in self.rows' order
        memo: dict[TensorType, TensorType] = {}  # the groups share types (scores, probabilities)
        for key in self.dynamic:
            # Each length is new: build the recipe directly instead of through the shared cache.
            view = self.plans[key].at(sizes, memo, self._where)
            if length not in self.placed.get(key, ()):
                self._place_ahead(key, view, length)
            r = build_recipe(view, self.hw, self.policy)
            if [s.role for s in r.steps] != self.roles[key]:
                self._compile(resize_graph(self.graph, sizes))  # the structure changed
                return self.program
            steps.extend(r.steps)
        return ProgramBlock(self.program, self.rows, *_step_values(steps, self.counts, 1)).program(0)

    def programs(self, lengths: range) -> Iterator[Program]:
        """The programs at consecutive lengths, in order (what `at` gives at each)."""
        for block in self.blocks(lengths):
            for k in range(len(block)):
                yield block.program(k)

    def blocks(self, lengths: range) -> Iterator[ProgramBlock]:
        """The programs at consecutive lengths, in order, as blocks of one structure: BLOCK
        lengths are costed at once (simulator.targets.rngd.mapping.lanes); a block whose lengths need
        different control flow or a new structure splits, down to single lengths costed by `at`."""
        for first in range(0, len(lengths), BLOCK):
            yield from self._block(lengths[first : first + BLOCK])

    def _block(self, lengths: range) -> Iterator[ProgramBlock]:
        if len(lengths) == 1:
            program = self.at(lengths[0])
            yield ProgramBlock(program, *_unvarying(program))
            return
        try:
            values, busy = self._lanes(lengths)
        except (Diverged, TypeError) as failed:
            # Split where the lanes first differ (they agree before it), unless that is near the
            # start (or unknown): then in halves, so lanes that all differ cost K log K, not K^2.
            # The first part may compile a new template, which the second then uses. A TypeError
            # is cost code Lanes cannot run (single lengths run it as the scalar code it is).
            lane = failed.lane if isinstance(failed, Diverged) else 0
            near = lane < max(1, len(lengths) // 8) or lane >= len(lengths)
            cut = len(lengths) // 2 if near else lane
            yield from self._block(lengths[:cut])
            yield from self._block(lengths[cut:])
            return
        self.in_blocks += len(lengths)
        yield ProgramBlock(self.program, self.rows, values, busy)

    def _lanes(self, lengths: range) -> tuple[np.ndarray, np.ndarray]:
        """The dynamic commands' values at every length of the block (_step_values); Diverged
        when the lanes need different control flow or the template's structure fails them."""
        memo: dict[TensorType, TensorType] = {}
        steps: list[Step] = []
        sizes = self.graph.meta.kv_sizes(Lanes(np.arange(lengths.start, lengths.stop, dtype=np.int64)))
        for key in self.dynamic:
            r = build_recipe(self.plans[key].at(sizes, memo, self._where), self.hw, self.policy)
            if [s.role for s in r.steps] != self.roles[key]:
                raise Diverged  # a new structure somewhere in the block
            steps.extend(r.steps)
        return _step_values(steps, self.counts, len(lengths))

    def _place_ahead(self, key: tuple, view: OpView, length: int) -> None:
        """Places the view's einsums at the next AHEAD lengths in one batch when this length's is
        not placed yet (placing costs the same for one shape or a batch of them). Steps at the
        lengths of the group's last batch skip this check: placements are pure, so one the cache
        has dropped meanwhile is placed again, alone, to the same integers."""
        for node in view.nodes:
            if node.kind != "einsum":
                continue
            shape = EinsumShape.of(dict(node.attrs)["eq"], node.operands, node.type)
            if is_placed(shape, self.hw, self.policy):
                continue
            ahead = [self.graph.meta.kv_sizes(n) for n in range(length, length + AHEAD)]
            shapes = [replace(shape, sizes=tuple((axis, kv.get(axis, size)) for axis, size in shape.sizes))
                      for kv in ahead]  # fmt: skip
            place_ahead(shapes, self.hw, self.policy)
            self.placed[key] = range(length, length + AHEAD)

    def _where(self, t: TensorType, was: str, fixed: bool) -> str:
        """Residency of a resized value on this template's hardware and policy (for ResizePlan)."""
        return _where(t, was, fixed, self.hw, self.policy)


def _where(t: TensorType, was: str, fixed: bool, hw: Hardware, policy: MappingPolicy) -> str:
    """Residency of a resized value: inputs, params and outputs stay put; intermediates follow
    simulator.targets.rngd.mapping.residency's rule (one an output views is still written through)."""
    if fixed:
        return was
    where = placed(t.nbytes, hw, policy)
    return DM_STORED if was == DM_STORED and where == DM else where


def _mentions(view: OpView, axes: tuple[str, ...]) -> bool:
    types = [n.type for n in view.nodes] + [t for n in view.nodes for t in n.operands]
    types += [t for t, _, _ in view.inputs] + [t for t, _ in view.outputs]
    return any(a.name in axes for t in types for a in t.axes)


def _step_values(steps: list[Step], counts: list[int], lanes: int) -> tuple[np.ndarray, np.ndarray]:
    """The patched columns (VARYING) and busy cycles of the dynamic commands, per lane:
    [lanes, rows, len(VARYING)] and [lanes, rows, len(SITES.units)]; one row of values per recipe
    step, repeated over its group's ops (`counts`). Values may be ints or Lanes."""
    values = np.empty((lanes, len(steps), len(VARYING)), np.int64)
    busy = np.zeros((lanes, len(steps), len(SITES.units)), np.int64)
    for i, s in enumerate(steps):
        timing = dict(zip(("cycles", "latency"), command_timing(s.cycles, s.latency), strict=True))
        for c, name in enumerate(VARYING):
            values[:, i, c] = lane_values(timing[name] if name in timing else getattr(s, name), lanes)
        for unit, value in s.busy:
            busy[:, i, _UNIT_COLUMN[unit]] = lane_values(value, lanes)
    return np.repeat(values, counts, axis=1), np.repeat(busy, counts, axis=1)


def _unvarying(program: Program) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, values, busy) of a block of one program that is its base."""
    none = np.zeros(0, np.int64)
    return (
        none,
        none.reshape(1, 0, 1).repeat(len(VARYING), 2),
        none.reshape(1, 0, 1).repeat(len(SITES.units), 2),
    )
