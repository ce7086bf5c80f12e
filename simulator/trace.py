"""Chrome / Perfetto trace-event JSON of simulated timelines, so a run can be browsed command by command.

Each chip is a process and each execution context a thread. Timestamps are quantised to whole
nanoseconds before they are written: Perfetto stores integer nanoseconds (it rounds ts * 1000), so
quantising here guarantees that what it reads nests exactly as written. pids and tids start at 1
because Perfetto treats pid 0 / tid 0 as the kernel's swapper.
"""

from __future__ import annotations

import gc
import heapq
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from simulator.files import atomic_output
from simulator.program import CONTEXTS, Program
from simulator.timeline import Timeline

# Thread ids inside each chip's process; DMA lanes follow at DMA_TID + k.
PHASES_TID = 1
CONTEXT_TID = {"main": 2, "sub": 3, "link": 4}
DMA_TID = 5
_DMA = CONTEXTS.index("dma")
_CHUNK = 50_000  # events per json.dumps call when streaming to a file


@dataclass(frozen=True)
class TraceRun:
    """One simulated program placed on the global time axis (runs are sequential)."""

    name: str  # e.g. "prefill", "decode 17"
    program: Program
    timeline: Timeline
    offset: float  # cycles: where this run starts on the global time axis


def run_end(run: TraceRun) -> float:
    """Where a run ends on the global axis, in cycles."""
    return run.offset + (float(run.timeline.end.max()) if len(run.timeline.end) else 0.0)


def chip_pid(chip: int) -> int:
    """The trace process of a chip (Perfetto special-cases pid 0, so chip c is pid c + 1)."""
    return chip + 1


def trace_events(runs: Sequence[TraceRun], clock_hz: float) -> dict:
    """The whole trace as one JSON-ready dict: {"traceEvents": [...], "displayTimeUnit": "ns"}."""
    events: list[dict] = []
    with _gc_paused():
        for chunk in _event_chunks(runs, clock_hz):
            events.extend(chunk)
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_trace(path: str | os.PathLike, runs: Sequence[TraceRun], clock_hz: float) -> None:
    """Writes the trace atomically, streaming it in chunks so millions of events stay within memory."""
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f, _gc_paused():
        f.write('{"traceEvents":[')
        first = True
        for chunk in _event_chunks(runs, clock_hz):
            if not chunk:
                continue
            # json.dumps takes the C encoder; json.dump would take the pure-Python one.
            text = json.dumps(chunk, separators=(",", ":"))
            f.write(text[1:-1] if first else "," + text[1:-1])
            first = False
        f.write('],"displayTimeUnit":"ns"}')


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Millions of fresh dicts would trigger the cyclic collector over and over; none form cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _event_chunks(runs: Sequence[TraceRun], clock_hz: float) -> Iterator[list[dict]]:
    """Metadata first, then one list of complete events per run (split into chunks)."""
    ns_per_cycle = 1e9 / clock_hz
    spans = [_ns_spans(run, ns_per_cycle) for run in runs]
    tids = _thread_ids(runs, spans)
    chips = sorted({int(c) for run in runs for c in np.unique(run.program.chip)} | {0})
    lanes = {chip: 0 for chip in chips}
    for run, t in zip(runs, tids, strict=True):
        dma = run.program.context == _DMA
        for chip in np.unique(run.program.chip[dma]).tolist():
            top = int(t[dma & (run.program.chip == chip)].max()) - DMA_TID + 1
            lanes[chip] = max(lanes[chip], top)
    yield _metadata(chips, lanes)

    phases_pid = chip_pid(0)
    for run, (ts, end), tid in zip(runs, spans, tids, strict=True):
        yield [_phase_event(run, ns_per_cycle, phases_pid)]
        p = run.program
        names = [f"L{op.layer} {op.name}" if op.layer >= 0 else op.name for op in p.ops]
        kinds = [op.kind for op in p.ops]
        op = p.op.tolist()
        pid = (p.chip.astype(np.int64) + 1).tolist()
        tid_l = tid.tolist()
        ts_us = (ts / 1000.0).tolist()
        dur_us = ((end - ts) / 1000.0).tolist()
        flops, hbm, dm, link, cycles = (
            a.tolist() for a in (p.flops, p.hbm_bytes, p.dm_bytes, p.link_bytes, p.cycles)
        )
        rname = run.name
        for lo in range(0, len(p), _CHUNK):
            hi = min(lo + _CHUNK, len(p))
            yield [
                {
                    "name": names[op[i]],
                    "cat": kinds[op[i]],
                    "ph": "X",
                    "ts": ts_us[i],
                    "dur": dur_us[i],
                    "pid": pid[i],
                    "tid": tid_l[i],
                    "args": {
                        "run": rname,
                        "flops": flops[i],
                        "hbm_bytes": hbm[i],
                        "dm_bytes": dm[i],
                        "link_bytes": link[i],
                        "cycles": cycles[i],
                    },
                }
                for i in range(lo, hi)
            ]


def _ns_spans(run: TraceRun, ns_per_cycle: float) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every command in whole nanoseconds on the global axis (monotone rounding,
    so intervals that were disjoint or nested stay so)."""
    t = run.timeline
    ts = np.rint((run.offset + t.start) * ns_per_cycle)
    end = np.maximum(np.rint((run.offset + t.end) * ns_per_cycle), ts)
    return ts, end


def _thread_ids(runs: Sequence[TraceRun], spans: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """Each command's tid: its context's thread, or for DMA the lowest-numbered lane free at its start.

    DMA descriptors overlap freely, and overlapping complete events on one thread break Perfetto's
    nesting, so they are interval-partitioned per chip over all runs (ties by run, then index).
    """
    fixed = np.array([CONTEXT_TID.get(c, 0) for c in CONTEXTS], np.int64)
    tids = [fixed[run.program.context] for run in runs]
    starts, ends, where = [], [], []
    for r, (run, (ts, end)) in enumerate(zip(runs, spans, strict=True)):
        ids = np.flatnonzero(run.program.context == _DMA)
        starts.append(ts[ids])
        ends.append(end[ids])
        where.append(np.stack([np.full(len(ids), r), ids, run.program.chip[ids].astype(np.int64)], 1))
    if not runs:
        return tids
    start, end = np.concatenate(starts), np.concatenate(ends)
    where = np.concatenate(where)
    order = np.lexsort((where[:, 1], where[:, 0], start))
    busy: dict[int, list[tuple[float, int]]] = {}  # chip -> heap of (end, lane) of lanes in use
    free: dict[int, list[int]] = {}  # chip -> heap of released lanes
    opened: dict[int, int] = {}  # chip -> lanes opened so far
    lane_of = np.empty(len(order), np.int64)
    for k, s, e, chip in zip(
        order.tolist(), start[order].tolist(), end[order].tolist(), where[order, 2].tolist(), strict=True
    ):
        b, f = busy.setdefault(chip, []), free.setdefault(chip, [])
        while b and b[0][0] <= s:
            heapq.heappush(f, heapq.heappop(b)[1])
        if f:
            lane = heapq.heappop(f)
        else:
            lane = opened.get(chip, 0)
            opened[chip] = lane + 1
        heapq.heappush(b, (e, lane))
        lane_of[k] = lane
    for r in range(len(runs)):
        mine = where[:, 0] == r
        tids[r][where[mine, 1]] = DMA_TID + lane_of[mine]
    return tids


def _metadata(chips: list[int], lanes: dict[int, int]) -> list[dict]:
    """Process and thread names (and sort orders, so chips and lanes appear in order)."""
    events: list[dict] = []

    def meta(name: str, pid: int, tid: int, args: dict) -> None:
        events.append({"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args})

    for chip in chips:
        pid = chip_pid(chip)
        # Process metadata rides on the main thread: tid 0 is the swapper in Perfetto too.
        meta("process_name", pid, CONTEXT_TID["main"], {"name": f"chip {chip}"})
        meta("process_sort_index", pid, CONTEXT_TID["main"], {"sort_index": chip})
        threads = [(PHASES_TID, "phases")] if chip == 0 else []
        threads += [(tid, name) for name, tid in CONTEXT_TID.items()]
        threads += [(DMA_TID + k, f"dma {k}") for k in range(lanes[chip])]
        for tid, name in threads:
            meta("thread_name", pid, tid, {"name": name})
            meta("thread_sort_index", pid, tid, {"sort_index": tid})
    return events


def _phase_event(run: TraceRun, ns_per_cycle: float, pid: int) -> dict:
    """One complete event spanning a whole run, on chip 0's "phases" thread."""
    start = float(np.rint(run.offset * ns_per_cycle))
    end = max(float(np.rint(run_end(run) * ns_per_cycle)), start)
    return {
        "name": run.name,
        "cat": "phase",
        "ph": "X",
        "ts": start / 1000.0,
        "dur": (end - start) / 1000.0,
        "pid": pid,
        "tid": PHASES_TID,
        "args": {"run": run.name, "commands": len(run.program), "cycles": run.timeline.cycles},
    }
