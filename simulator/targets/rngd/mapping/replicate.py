"""A whole model's Program from the Program of its stand-in graph (layer_period.py):
the left-out layers' commands are copies of a kept layer of the same phase.

The stand-in's program is: prefix ops, one block of ops per kept layer (from the first op of the
layer to the first of the next), the last layer's block, the suffix. The full program keeps all of
that and inserts, before the last layer, a copy per left-out layer of the kept layer in the same
phase of the second period, with its op names, nodes and layer rebound to the left-out layer's.
A dependency on a command of the repeating run moves with the copy (it is the same command of
an earlier layer); one on the prefix or the layers before the run stays.

That rule is checked on the stand-in before it is trusted: the second kept period must be
exactly the first one moved by the rule (every column, dependency, op and name); otherwise
`replicate` returns None and the caller compiles every layer.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping

import numpy as np

from simulator.program import COLUMNS, OpInfo, Program
from simulator.targets.rngd.mapping.layer_period import LayerPeriod

_COPIED = tuple(name for name, _ in COLUMNS if name != "op")


def replicate(program: Program, period: LayerPeriod, origins: Mapping[str, str]) -> Program | None:
    """The full model's program from the stand-in's (`origins`: its graph's, GraphMeta.origins),
    or None when the stand-in's blocks do not repeat as the period says."""
    # A long prefill's copies are ~10^5 ops and ~10^6 names, none of them in a reference cycle:
    # the cyclic collector would rescan the growing heap many times over (half the time).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _replicate(program, period, origins)
    finally:
        if collecting:
            gc.enable()


def _replicate(program: Program, period: LayerPeriod, origins: Mapping[str, str]) -> Program | None:
    """replicate's work: check the second kept period, then copy it and move the last layer."""
    blocks = _blocks(program, period)
    if blocks is None:
        return None
    op_start, cmd_start = blocks  # per kept layer and the last one, then the suffix; ops and commands
    kept, p, first = period.kept, period.period, period.first_periodic
    anchor = int(cmd_start[first])  # the repeating run's first command
    moves: dict[int, np.ndarray] = {}  # per block of the second period: which of its deps move
    for j in range(first + p, kept):
        moves[j] = _moved(program, period, origins, op_start, cmd_start, j - p, j, anchor)
        if moves[j] is None:
            return None
    ptr, idx = program.dep_ptr, program.dep_idx
    tail = int(op_start[kept])
    last_kept = int(op_start[kept - 1])
    after, before = period.reattached()
    head = program.ops[:last_kept] + _rebound(program.ops[last_kept:tail], period, origins, after)
    parts: list[tuple] = [(0, int(cmd_start[kept]), 0, 0, None, head)]
    cmd_end, op_end = int(cmd_start[kept]), tail
    splits: dict[tuple[int, int], dict] = {}  # per source and key set of its renames (see _rebound)
    for layer in range(kept, period.layers - 1):
        source = period.source(layer)
        lo, hi = int(cmd_start[source]), int(cmd_start[source + 1])
        o_lo, o_hi = int(op_start[source]), int(op_start[source + 1])
        names = period.renames(source, layer)
        cache = splits.setdefault((source, len(names)), {})
        ops = _rebound(program.ops[o_lo:o_hi], period, origins, names, source, layer, cache)
        parts.append((lo, hi, cmd_end - lo, op_end - o_lo, moves[source], ops))
        cmd_end += hi - lo
        op_end += o_hi - o_lo
    # The last layer and the suffix read the layers before them (moved) and the prefix (not).
    lo = int(cmd_start[kept])
    last = idx[ptr[lo] :] >= anchor
    ops = _rebound(program.ops[tail:], period, origins, before)
    parts.append((lo, len(program), cmd_end - lo, op_end - tail, last, ops))
    return _assemble(program, parts)


def _blocks(program: Program, period: LayerPeriod) -> tuple[np.ndarray, np.ndarray] | None:
    """First op and first command of each kept layer's block, the last layer's and the suffix's;
    None unless the ops' layers run prefix (-1), kept layers in order, last layer, suffix (-1)."""
    layers = np.array([op.layer for op in program.ops])
    order = [*range(period.kept), period.layers - 1]
    ids = [period.base + j for j in order]
    starts = []
    for layer in ids:
        found = np.flatnonzero(layers == layer)
        if not len(found):
            return None
        starts.append(int(found[0]))
    last_of_last = int(np.flatnonzero(layers == ids[-1])[-1])
    starts.append(last_of_last + 1)
    if any(a >= b for a, b in zip(starts, starts[1:], strict=False)):
        return None
    # Inside each block only its own layer or none; the prefix and suffix have none.
    for k, layer in enumerate(ids):
        inside = layers[starts[k] : starts[k + 1]]
        if np.any((inside != layer) & (inside != -1)):
            return None
    if np.any(layers[: starts[0]] != -1) or np.any(layers[starts[-1] :] != -1):
        return None
    op_start = np.array(starts, np.int64)
    cmd_start = np.searchsorted(program.op, op_start)
    return op_start, cmd_start


def _moved(program: Program, period: LayerPeriod, origins: Mapping[str, str], op_start, cmd_start,
           a: int, b: int, anchor: int) -> np.ndarray | None:  # fmt: skip
    """Which dependencies of block b are block a's moved with it (the same command of the layer
    before, say) rather than kept (a table of the prefix), or None unless block b is block a moved:
    every column, op and name alike, every dependency one or the other."""
    lo_a, hi_a, lo_b, hi_b = (int(cmd_start[i]) for i in (a, a + 1, b, b + 1))
    if hi_a - lo_a != hi_b - lo_b or op_start[a + 1] - op_start[a] != op_start[b + 1] - op_start[b]:
        return None
    for name in _COPIED:
        column = getattr(program, name)
        if not np.array_equal(column[lo_a:hi_a], column[lo_b:hi_b]):
            return None
    if not np.array_equal(program.busy[lo_a:hi_a], program.busy[lo_b:hi_b]):
        return None
    if not np.array_equal(program.op[lo_a:hi_a] - op_start[a], program.op[lo_b:hi_b] - op_start[b]):
        return None
    ptr, idx = program.dep_ptr, program.dep_idx
    if not np.array_equal(np.diff(ptr[lo_a : hi_a + 1]), np.diff(ptr[lo_b : hi_b + 1])):
        return None
    deps_a, deps_b = idx[ptr[lo_a] : ptr[hi_a]], idx[ptr[lo_b] : ptr[hi_b]]
    moved = deps_b == deps_a + (lo_b - lo_a)
    # A kept dependency must be on the commands before the run (copies share it); a moved one
    # may reach back one period at most, or a copy's would land on a layer of another phase.
    if not np.all(moved | ((deps_b == deps_a) & (deps_b < anchor))):
        return None
    if np.any(moved & (deps_b < int(cmd_start[b - period.period]))):
        return None
    ops_a = program.ops[int(op_start[a]) : int(op_start[a + 1])]
    ops_b = program.ops[int(op_start[b]) : int(op_start[b + 1])]
    return moved if _rebound(ops_a, period, origins, period.renames(a, b), a, b) == ops_b else None


def _rebound(
    ops: list[OpInfo], period: LayerPeriod, origins: Mapping[str, str], names: dict[str, str],
    source: int = -1, layer: int = -1, split: dict[str, tuple[str, str] | None] | None = None,
) -> list[OpInfo]:  # fmt: skip
    """The ops with values renamed by `names` (and the values passes made from them, `origins`)
    in their name, nodes and inputs, and ops of layer `source` moved to `layer`.
    `split` caches each name as (key of `names`, suffix) for calls whose `names` have the same keys
    (the copies of one layer: a long prefill's layer has ~10^4 tile ops)."""
    split = {} if split is None else split
    if not split:
        for op in ops:
            for name in (op.name, *op.nodes, *op.inputs):
                if name not in split:
                    split[name] = _split(name, names, period.shared, origins)
    renamed = {name: name if at is None else names[at[0]] + at[1] for name, at in split.items()}
    get = renamed.__getitem__
    src, dst = (period.base + source, period.base + layer) if source >= 0 else (None, None)
    copies: dict[int, OpInfo] = {}  # an op listed again (a block of a token run) stays one object

    def copy(op: OpInfo) -> OpInfo:
        return _with(
            op,
            name=get(op.name),
            nodes=tuple(map(get, op.nodes)),
            inputs=tuple(map(get, op.inputs)),
            layer=dst if op.layer == src else op.layer,
            role=get(op.role) if op.role == op.name else op.role,  # a value of no layer is its own role
        )

    return [copies[id(op)] if id(op) in copies else copies.setdefault(id(op), copy(op)) for op in ops]


def _split(
    name: str, names: dict[str, str], shared: frozenset[str], origins: Mapping[str, str]
) -> tuple[str, str] | None:
    """(the key of `names` that `name` is or was made from by passes, following `origins`, and what
    its name adds to that key's), or None: it is not renamed (a value of the prefix, or made from
    a shared one)."""
    source = name
    while source not in names:
        source = origins.get(source)
        if source is None or source in shared:
            return None
    return source, name[len(source) :]


def _with(op: OpInfo, **changes) -> OpInfo:
    """dataclasses.replace for the many ops of a long prefill (it is several times slower)."""
    new = object.__new__(OpInfo)
    new.__dict__.update(op.__dict__, **changes)
    return new


def _assemble(program: Program, parts) -> Program:
    """The parts' commands concatenated, each part's moving dependencies shifted with it."""
    columns = {name: np.concatenate([getattr(program, name)[lo:hi] for lo, hi, *_ in parts])
               for name in _COPIED}  # fmt: skip
    op = np.concatenate([program.op[lo:hi] + op_shift for lo, hi, _, op_shift, *_ in parts])
    busy = np.concatenate([program.busy[lo:hi] for lo, hi, *_ in parts])
    ptr, idx = program.dep_ptr, program.dep_idx
    counts = np.concatenate([np.diff(ptr[lo : hi + 1]) for lo, hi, *_ in parts])
    deps = []
    for lo, hi, shift, _, moves, _ in parts:
        d = idx[ptr[lo] : ptr[hi]]
        deps.append(d + np.where(moves, shift, 0) if moves is not None else d)
    dep_ptr = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=dep_ptr[1:])
    ops = [info for *_, infos in parts for info in infos]
    return Program(**columns, op=op.astype(program.op.dtype), busy=busy, dep_ptr=dep_ptr,
                   dep_idx=np.concatenate(deps), sites=program.sites, ops=ops)  # fmt: skip
