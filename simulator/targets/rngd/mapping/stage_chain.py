"""Pipeline parallelism on the engine: stage programs joined into one program over the stages' chips.

Each stage's program is compiled as one chip of its tensor-parallel group (chip 0). Joined, block
(stage s, micro-batch j) runs on chip s; the commands of the ops that read the received hidden
state (the input its graph's metadata names) wait for the send of block (s - 1, j), which ends
the previous stage's program. Everything
else (a stage works through its micro-batches in order, weights prefetch, HBM and DMA bandwidth
shared per chip, the link queue a stage's sends share with its tensor-parallel collectives) is the
engine's, as for one chip. Blocks are given in an order where every block comes after the one it
receives from (micro-batch by micro-batch), so dependencies point backwards.

One stage is the degenerate pipeline: its one block is its program itself, so simulate and serve
time pp = 1 through the same calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.program import COLUMNS, Program, ProgramBlock
from simulator.targets.rngd.units import LINK
from simulator.timeline import EPS, Timeline

_COLUMNS = tuple(name for name, _ in COLUMNS)
SENT = "send"  # the kind of op that ends an earlier stage's graph: the one send of its hidden state


@dataclass(frozen=True)
class Block:
    stage: int  # the chip it runs on, and the index of its program
    receives_from: int | None  # the index (in the block list) of the block whose send it waits for


def in_turn(stages: int) -> list[Block]:
    """One piece of work (a decode step, a serving iteration's program) through the stages in turn."""
    return [Block(s, s - 1 if s else None) for s in range(stages)]


def micro_batched(stages: int, micro_batches: int) -> list[Block]:
    """Micro-batch j of stage s receives from micro-batch j of stage s - 1 (GPipe's forward pass)."""
    return [Block(s, j * stages + s - 1 if s else None) for j in range(micro_batches) for s in range(stages)]


def receivers(program: Program, received: str | None) -> np.ndarray:
    """Commands of the ops that read the received hidden state, the input `received`."""
    if received is None:
        raise ValueError("a stage program that receives needs the input it receives (graph.meta.received)")
    ops = [k for k, op in enumerate(program.ops) if received in op.inputs]
    return np.flatnonzero(np.isin(program.op, ops))


def sender(program: Program) -> int:
    """The last link command of the send that hands the hidden state on."""
    ops = [k for k, op in enumerate(program.ops) if op.kind == SENT]
    link = np.flatnonzero(np.isin(program.op, ops) & (program.context == program.sites.context(LINK.name)))
    if not len(link):
        raise ValueError("the stage program has no send of its hidden state")
    return int(link[-1])


def chain(stages: Sequence[Program], blocks: Sequence[Block], received: Sequence[str | None]) -> Program:
    """One program of `blocks`, each a copy of its stage's program on chip = stage; `received[s]` is
    the input stage s's graph receives (its graph.meta.received, None for the first stage). Each
    copy lists its stage's OpInfo objects again (simulator.report adds the copies' rows up per
    op). One block of stage 0 is the stage's program itself."""
    if len(blocks) == 1 and blocks[0].stage == 0:
        return stages[0]
    op_base = np.cumsum([0] + [len(stages[b.stage].ops) for b in blocks])
    sizes = [len(stages[b.stage]) for b in blocks]
    base = np.cumsum([0, *sizes])
    cols: dict[str, list[np.ndarray]] = {c: [] for c in _COLUMNS}
    owners, deps, busy = [], [], []
    for k, b in enumerate(blocks):
        p = stages[b.stage]
        for c in _COLUMNS:
            cols[c].append(getattr(p, c))
        cols["chip"][-1] = np.full(len(p), b.stage, np.int16)
        cols["op"][-1] = p.op + op_base[k]
        busy.append(p.busy)
        owners.append(np.repeat(np.arange(len(p)), np.diff(p.dep_ptr)) + base[k])
        deps.append(p.dep_idx + base[k])
        if b.receives_from is not None:
            waiting = receivers(p, received[b.stage])
            owners.append(waiting + base[k])
            source = blocks[b.receives_from]
            deps.append(np.full(len(waiting), base[b.receives_from] + sender(stages[source.stage])))
    owner, dep = np.concatenate(owners), np.concatenate(deps)
    order = np.lexsort((dep, owner))
    owner, dep = owner[order], dep[order]
    n = int(base[-1])
    ptr = np.zeros(n + 1, np.int64)
    ptr[1:] = np.cumsum(np.bincount(owner, minlength=n))
    program = Program(
        **{c: np.concatenate(v) for c, v in cols.items()},
        busy=np.concatenate(busy),
        dep_ptr=ptr,
        dep_idx=dep.astype(np.int64),
        sites=stages[0].sites,
        ops=[op for b in blocks for op in stages[b.stage].ops],
    )
    program.validate()
    return program


def chain_block(
    stages: Sequence[ProgramBlock], blocks: Sequence[Block], received: Sequence[str | None]
) -> ProgramBlock:
    """The programs of stage blocks of equal length joined k by k: program k of the result is
    chain([stage.program(k) ...], blocks, received), its varying rows those of each block's copy."""
    if len(blocks) == 1 and blocks[0].stage == 0:
        return stages[0]
    base = chain([s.base for s in stages], blocks, received)
    offsets = np.cumsum([0] + [len(stages[b.stage].base) for b in blocks])
    parts = [stages[b.stage] for b in blocks]
    return ProgramBlock(
        base,
        np.concatenate([p.rows + offsets[k] for k, p in enumerate(parts)]),
        np.concatenate([p.values for p in parts], axis=1),
        np.concatenate([p.busy for p in parts], axis=1),
    )


def handoffs(program: Program, timeline: Timeline, stages: int) -> tuple[int, ...]:
    """When each stage of a chained program has done its part (its chip's last command, in whole
    cycles as Timeline.cycles counts them): the last is the program's cycles."""
    ends = np.maximum.accumulate([timeline.end[program.chip == s].max() for s in range(stages - 1)])
    return (*(int(math.ceil(e - EPS)) for e in ends), timeline.cycles)
