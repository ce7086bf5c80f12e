"""Figures per op and per unit from simulated programs: what ran where, for how long, and why.

Every figure is derived from the Program (FLOPs, bytes, unit busy cycles) and its Timeline
(when each command ran); nothing is estimated here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.occupancy import StateSweeps, plan, state_cycles
from simulator.program import Program, ProgramBlock
from simulator.target import Sites
from simulator.timeline import Timeline
from simulator.utilisation import command_bytes

SUMMED = (
    "main_cycles", "busy_cycles", "flops", "hbm_bytes", "dm_bytes", "link_bytes", "unit_busy", "dma_bytes",
    "layer_span_cycles", "state_cycles",
)  # fmt: skip


@dataclass
class OpTotals:
    """Per-op sums (arrays indexed like program.ops), addable across decode steps."""

    names: list[str]
    kinds: list[str]
    layers: np.ndarray
    placements: list[str]
    roles: list[str]  # each op's role (OpInfo.role): the ops that do the same work in every layer
    operands: list[str]  # the dtype each op's contraction multiplies in (OpInfo.operand, "" for none)
    main_cycles: np.ndarray  # time the op occupies its target's primary context (RNGD: the main pipeline)
    busy_cycles: np.ndarray  # the time at least one of its commands is under way
    flops: np.ndarray
    hbm_bytes: np.ndarray
    dm_bytes: np.ndarray
    link_bytes: np.ndarray
    unit_busy: np.ndarray  # [ops, units]
    dma_bytes: np.ndarray  # bytes its DMA commands move (a pass's own DM traffic is not a DMA move)
    layer_ids: np.ndarray  # the distinct layers, ascending
    layer_span_cycles: np.ndarray  # per layer: the time at least one of its ops was under way
    state_cycles: np.ndarray  # per combination of activities (simulator.occupancy): the phase's cycles
    sites: Sites  # the target's units and activities the columns above index

    def __add__(self, other: OpTotals) -> OpTotals:
        assert self.names == other.names, "decode steps must share their op list"
        sums = {f: getattr(self, f) + getattr(other, f) for f in SUMMED}
        return OpTotals(
            self.names,
            self.kinds,
            self.layers,
            self.placements,
            self.roles,
            self.operands,
            layer_ids=self.layer_ids,
            sites=self.sites,
            **sums,
        )


_OP_COLUMNS: list[tuple[list, tuple]] = []  # (program.ops, its columns): decode steps share one list


def _op_columns(ops: list) -> tuple:
    """(names, kinds, layers, placements, roles, operands, layer ids, layer index per op) of a
    program's op list."""
    for known, columns in _OP_COLUMNS:
        if known is ops:
            return columns
    layers = np.array([o.layer for o in ops])
    layer_ids, of_layer = np.unique(layers, return_inverse=True)
    columns = ([o.name for o in ops], [o.kind for o in ops], layers, [o.placement for o in ops],
               [o.role for o in ops], [o.operand for o in ops], layer_ids, of_layer)  # fmt: skip
    _OP_COLUMNS[:] = [(ops, columns), *_OP_COLUMNS[:3]]
    return columns


_STARTS: list[tuple[np.ndarray, int, np.ndarray]] = []  # (program.op, ops, starts): steps share one


def _op_starts(op: np.ndarray, ops: int) -> np.ndarray:
    """The first command of each op (decode steps share their template's op column)."""
    for known, count, starts in _STARTS:
        if known is op and count == ops:
            return starts
    starts = np.searchsorted(op, np.arange(ops))
    assert np.all(np.diff(op) >= 0) and np.all(np.diff(starts) > 0), "each op owns a run of commands"
    _STARTS[:] = [(op, ops, starts), *_STARTS[:3]]
    return starts


def op_totals(program: Program, timeline: Timeline) -> OpTotals:
    """Sums per op; an op's commands are contiguous in a program, so each sum is one reduceat. A
    pipelined program lists an op once per micro-batch (the same OpInfo): those rows add up."""
    starts = op_starts(program)
    integers = command_integers(program)
    per_op = {f: np.add.reduceat(v.astype(np.float64), starts, axis=0) for f, v in integers.items()}
    totals = assemble(program.ops, per_op, timed_totals(program, timeline), program.sites)
    return _fold_copies(totals, program.ops)


def op_starts(program: Program) -> np.ndarray:
    return _op_starts(program.op, len(program.ops))


def command_integers(program: Program) -> dict[str, np.ndarray]:
    """The integer figures op totals sum, per command (OpTotals fields; each sum per op is exact
    in float64 below 2^53, so their order does not matter: simulator.step_totals uses that)."""
    return {
        "flops": program.flops, "hbm_bytes": program.hbm_bytes, "dm_bytes": program.dm_bytes,
        "link_bytes": program.link_bytes, "unit_busy": program.busy,
        "dma_bytes": command_bytes(program)["dma_bytes"],  # integers, as floats
    }  # fmt: skip


def timed_totals(program: Program, timeline: Timeline) -> dict[str, np.ndarray]:
    """The OpTotals fields that come from the timeline (floats: sums depend on their order)."""
    starts = op_starts(program)
    duration = timeline.end - timeline.start
    first = np.minimum.reduceat(timeline.start, starts)
    last = np.maximum.reduceat(timeline.end, starts)
    *_, layer_ids, of_layer = _op_columns(program.ops)
    from simulator.span_kernels import op_busy  # numba: loaded when a program runs, not for --help

    return {
        "main_cycles": np.add.reduceat(
            np.where(program.context == program.sites.primary, duration, 0.0), starts, axis=0
        ),
        "busy_cycles": op_busy(timeline.start, timeline.end, starts) if len(starts) else np.zeros(0),
        "layer_span_cycles": _busy_spans(first, last, of_layer, len(layer_ids)),
        "state_cycles": state_cycles(program, timeline),
    }


def block_timed_totals(block: ProgramBlock, timeline: Timeline) -> dict[str, np.ndarray]:
    """timed_totals of every program of a block at once, from its [programs, commands] timeline:
    each figure gets a leading axis, row k what timed_totals(block.program(k), timeline k) gives."""
    base = block.base
    starts = op_starts(base)
    first = np.minimum.reduceat(timeline.start, starts, axis=1)
    last = np.maximum.reduceat(timeline.end, starts, axis=1)
    *_, layer_ids, of_layer = _op_columns(base.ops)
    duration = timeline.end - timeline.start
    from simulator.span_kernels import op_busy_rows, span_pieces_rows  # numba: loaded when a program runs

    # Each row's pieces summed by numpy as _busy_spans sums them (row by row, the same sums).
    spans = np.zeros((len(block), len(layer_ids)))
    if first.shape[1]:
        spans = span_pieces_rows(first, last, of_layer, len(layer_ids)).sum(axis=-1)
    # Each program's columns as state_cycles reads them: the base's, with the varying rows written.
    own = {name: getattr(base, name).copy() for name in ("latency", "cycles", "moved", "hbm_bytes")}
    marker = plan(base.sites)[1]
    busy = base.busy[:, marker].copy() if marker >= 0 else np.zeros(len(base), np.int64)
    states_of, sweeps = [], StateSweeps(base.sites)
    for k in range(len(block)):
        block.write(k, own)
        if marker >= 0:
            busy[block.rows] = block.busy[k, :, marker]
        row = timeline.row(k)
        states_of.append(sweeps(base.context, base.chip, row.start, row.end, own["latency"], own["cycles"],
                                own["moved"], own["hbm_bytes"], busy, row.cycles))  # fmt: skip
    return {
        "main_cycles": np.add.reduceat(
            np.where(base.context == base.sites.primary, duration, 0.0), starts, axis=1
        ),
        "busy_cycles": op_busy_rows(timeline.start, timeline.end, starts),
        "layer_span_cycles": spans,
        "state_cycles": np.array(states_of),
    }


def assemble(
    ops: list, per_op: dict[str, np.ndarray], timed: dict[str, np.ndarray], sites: Sites
) -> OpTotals:
    """OpTotals of an op list from its summed integer and timeline figures."""
    names, kinds, layers, placements, roles, operands, layer_ids, _ = _op_columns(ops)
    return OpTotals(names=names, kinds=kinds, layers=layers, placements=placements, roles=roles,
                    operands=operands, layer_ids=layer_ids, sites=sites, **per_op, **timed)  # fmt: skip


_COPY_ROWS: list[tuple[list, np.ndarray, int]] = []  # (program.ops, rows, distinct): steps share one


def _copy_rows(ops: list) -> tuple[np.ndarray, int]:
    """Each op's row among the distinct OpInfo objects of `ops`, and how many there are (per op
    list, not per program: every decode step of a generation has the same one)."""
    for known, row, distinct in _COPY_ROWS:
        if known is ops:
            return row, distinct
    first: dict[int, int] = {}
    row = np.array([first.setdefault(id(o), len(first)) for o in ops], np.int64)
    _COPY_ROWS[:] = [(ops, row, len(first)), *_COPY_ROWS[:3]]
    return row, len(first)


def distinct_ops(ops: list) -> int:
    """How many distinct OpInfo objects `ops` lists (fewer than its length: copies to fold)."""
    return _copy_rows(ops)[1]


def _fold_copies(totals: OpTotals, ops: list) -> OpTotals:
    """One row per distinct OpInfo: copies of an op (one per micro-batch) sum, their busy time too."""
    row, distinct = _copy_rows(ops)
    if distinct == len(ops):
        return totals
    keep = np.unique(row, return_index=True)[1]

    def fold(values: np.ndarray) -> np.ndarray:
        out = np.zeros((distinct, *values.shape[1:]))
        np.add.at(out, row, values)
        return out

    per_op = {f: fold(getattr(totals, f)) for f in SUMMED if f not in ("layer_span_cycles", "state_cycles")}
    return OpTotals(
        [totals.names[k] for k in keep], [totals.kinds[k] for k in keep], totals.layers[keep],
        [totals.placements[k] for k in keep], [totals.roles[k] for k in keep],
        [totals.operands[k] for k in keep], layer_ids=totals.layer_ids, sites=totals.sites,
        layer_span_cycles=totals.layer_span_cycles, state_cycles=totals.state_cycles, **per_op,
    )  # fmt: skip


def _busy_spans(first: np.ndarray, last: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    """Per group, the length of the union of its ops' [first, last] intervals: a decoder layer's
    ops run back to back, while the non-layer ops (embedding, final norm, LM head) sit at both
    ends of the program, and the time between them belongs to the layers.

    In start order within a group, each interval adds what lies beyond the latest end before it
    (simulator.span_kernels); each group's pieces are one row, summed by numpy."""
    if len(first) == 0:
        return np.zeros(groups)
    from simulator.span_kernels import span_pieces  # numba: loaded when a program runs, not for --help

    return span_pieces(first, last, group, groups).sum(axis=1)
