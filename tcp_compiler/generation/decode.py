"""The decode loop: every step of a generation at its own KV length, through the stages in turn.

Each stage's steps come from its compiled template (the target's recipes: DecodeSteps) in blocks of
consecutive lengths; the stages' blocks are joined into one block per stretch of lengths
(the target's recipes: chain_block), which the engine times whole. One stage is the degenerate
pipeline: its blocks are timed as they are. Per-op and per-unit figures are summed over all steps.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from simulator.program import Program, ProgramBlock
from simulator.report import OpTotals
from simulator.spec import Spec
from simulator.step_totals import StepTotals
from simulator.timeline import Timeline
from tcp_compiler.observer import QUIET, Observer
from tcp_compiler.pipeline import run_block
from tcp_compiler.recipes import Steps, recipes


@dataclass
class Run:
    """One simulated program (the prefill, or one decode step) and its timeline."""

    phase: str  # "prefill" or "decode"
    program: Program
    timeline: Timeline
    step: int | None = None  # a decode step's index

    @property
    def name(self) -> str:
        """"prefill", "decode 17"."""
        return self.phase if self.step is None else f"{self.phase} {self.step}"

    @property
    def cycles(self) -> int:
        return self.timeline.cycles


@dataclass
class DecodeRuns:
    """Every decode step's cycles, FLOPs and HBM bytes (over all stages), their op totals summed,
    and the first steps' runs (for traces and plots)."""

    cycles: np.ndarray
    flops: np.ndarray
    hbm: np.ndarray
    totals: OpTotals | None
    traced: list[Run]


def run_decode(
    stages: Sequence[Steps], hw: Spec, lengths: range, trace: int = 2, observer: Observer = QUIET
) -> DecodeRuns:
    """The decode steps whose caches hold `lengths` positions (past + the new one), each through
    the stages in turn; the first `trace` steps kept as runs; the observer hears each block done."""
    steps = len(lengths)
    cycles, flops, hbm = (np.zeros(steps, np.int64) for _ in range(3))
    totals = StepTotals()  # what adding every step's op_totals gives, summed as integers where exact
    traced: list[Run] = []
    done = 0
    for block in step_blocks(stages, lengths, hw):
        timeline = run_block(block, hw)
        taken = slice(done, done + len(block))
        cycles[taken] = [timeline.row(k).cycles for k in range(len(block))]
        flops[taken], hbm[taken] = block.sums("flops"), block.sums("hbm_bytes")
        totals.add_block(block, timeline)
        for k in range(min(len(block), trace - done)):
            traced.append(Run("decode", block.program(k), timeline.row(k), done + k))
        done += len(block)
        observer.progress(done, steps)
    return DecodeRuns(cycles, flops, hbm, totals.totals(), traced)


def step_blocks(stages: Sequence[Steps], lengths: range, hw: Spec) -> Iterator[ProgramBlock]:
    """The steps at `lengths` through the stages in turn, as blocks: each stage's template splits
    its lengths into blocks of its own, so a joined block ends where any stage's does."""
    streams = [template.blocks(lengths) for template in stages]
    current = [next(s) for s in streams] if len(lengths) else []
    start = [0] * len(stages)  # where in its current block each stage is
    book = recipes(hw)
    links = book.in_turn(len(stages))
    received = [template.graph.meta.received for template in stages]
    done = 0
    while done < len(lengths):
        take = min(len(b) - at for b, at in zip(current, start, strict=True))
        parts = [_lanes(b, at, take) for b, at in zip(current, start, strict=True)]
        yield book.chain_block(parts, links, received)
        done += take
        for s, stream in enumerate(streams):
            start[s] += take
            if start[s] == len(current[s]) and done < len(lengths):
                current[s], start[s] = next(stream), 0


def _lanes(block: ProgramBlock, start: int, count: int) -> ProgramBlock:
    """Programs start .. start + count - 1 of a block (the block itself when that is all of it)."""
    if start == 0 and count == len(block):
        return block
    end = start + count
    return ProgramBlock(block.base, block.rows, block.values[start:end], block.busy[start:end])
