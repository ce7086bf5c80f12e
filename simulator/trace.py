"""Chrome / Perfetto trace-event JSON of simulated timelines, so a run can be browsed command by command.

Each chip is a process and each execution context a thread: the ordered contexts of the program's
target (RNGD: main, sub and link) carry their commands as they ran; the DMA engines are one thread
each (as many as the spec has), with the pooled context's moves laid out on them as the engine model
shares the pool (simulator.dma_layout), and a "dma descriptors" counter shows how many moves were
starting up or moving; a "power (W)" counter per chip follows each run's power over time (a value
per window of the run, simulator.energy.power_track) when the runs carry it. A tensor-parallel
program is compiled for one chip and every chip runs it symmetrically, so chips 1..n-1 mirror chip 0
(the trace's metadata says so). The file stays bounded whatever the chip count: when full mirrors
would pass MAX_EVENTS, mirrored chips drop their DMA tracks, and then their other ordered tracks,
keeping the collective tracks (RNGD: link) on every chip; process labels and metadata say what was
left out.

Timestamps are quantised to whole nanoseconds before they are written: Perfetto stores integer
nanoseconds (it rounds ts * 1000), so quantising here guarantees that what it reads nests exactly as
written. pids and tids start at 1 because Perfetto treats pid 0 / tid 0 as the kernel's swapper.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from simulator.dma_layout import EngineSlices, engine_slices
from simulator.dma_shares import dma_shares, moving_rate
from simulator.energy import PowerTrack
from simulator.files import atomic_output
from simulator.program import Program
from simulator.spec import Spec
from simulator.target import Sites
from simulator.timeline import Timeline

# Thread ids inside each chip's process: phases, then the ordered contexts from FIRST_CONTEXT_TID
# in the target's order, then DMA engine k at dma_tid(sites) + k.
PHASES_TID = 1
FIRST_CONTEXT_TID = 2
MAX_EVENTS = 300_000  # events (about 150 B each) past which mirrored chips drop tracks
DESCRIPTORS = "dma descriptors"  # the counter of DMA moves starting up / moving, per chip
POWER = "power (W)"  # the counter of a chip's power over time
_CHUNK = 50_000  # events per json.dumps call when streaming to a file


@dataclass(frozen=True)
class TraceRun:
    """One simulated program placed on the global time axis (runs are sequential)."""

    phase: str  # e.g. "prefill", "decode": the plots sum a phase's runs
    program: Program
    timeline: Timeline
    offset: float  # cycles: where this run starts on the global time axis
    step: int | None = None  # which step of its phase (a decode step's index), if it has several
    power: PowerTrack | None = None  # its power per chip over time, for the POWER counter

    @property
    def name(self) -> str:
        """"prefill", "decode 17"."""
        return self.phase if self.step is None else f"{self.phase} {self.step}"


def run_end(run: TraceRun) -> float:
    """Where a run ends on the global axis, in cycles."""
    return run.offset + (float(run.timeline.end.max()) if len(run.timeline.end) else 0.0)


def context_tids(sites: Sites) -> dict[str, int]:
    """The thread of each ordered context (pooled moves go on the DMA engines' threads)."""
    ordered = [c.name for c in sites.contexts if c.ordered]
    return {name: FIRST_CONTEXT_TID + k for k, name in enumerate(ordered)}


def dma_tid(sites: Sites) -> int:
    """The thread of DMA engine 0, after the ordered contexts' threads."""
    return FIRST_CONTEXT_TID + len(context_tids(sites))


def tiers(sites: Sites) -> tuple[str, str, str]:
    """What a mirrored chip keeps, by tier (tracks of tier <= its own): the collective contexts,
    then the ordered ones (named by the primary and collective contexts), then every track."""
    collective = [c.name for c in sites.contexts if c.collective]
    primary = sites.contexts[sites.primary].name
    return " and ".join(collective), " and ".join([primary, *collective]), "every"


def chip_pid(chip: int) -> int:
    """The trace process of a chip (Perfetto special-cases pid 0, so chip c is pid c + 1)."""
    return chip + 1


@dataclass(frozen=True)
class _Laid:
    """One run's commands as trace rows: where each complete event goes and what it shows."""

    command: np.ndarray  # index into the program
    chip: np.ndarray
    tid: np.ndarray
    ts: np.ndarray  # whole nanoseconds, global axis
    end: np.ndarray
    tier: np.ndarray  # index into tiers(): 0 collective, 1 other ordered contexts, 2 DMA engines
    counters: list[tuple[int, list[float], list[int], list[int]]]  # per chip: (chip, us, starting, moving)

    def events(self, tier: int) -> int:
        """How many events a chip's copy of this run has when it keeps tracks up to `tier`."""
        counted = sum(len(c[1]) for c in self.counters) if tier == _EVERY else 0
        return int((self.tier <= tier).sum()) + counted


_EVERY = 2  # the tier that keeps every track


def trace_events(runs: Sequence[TraceRun], hw: Spec, chips: int = 1) -> dict:
    """The whole trace as one JSON-ready dict: {"traceEvents": [...], "displayTimeUnit": "ns", ...}."""
    plan = _Plan(runs, hw, chips)
    events: list[dict] = []
    with _gc_paused():
        for chunk in plan.chunks():
            events.extend(chunk)
    return {"traceEvents": events, "displayTimeUnit": "ns", "metadata": plan.metadata()}


def write_trace(path: str | os.PathLike, runs: Sequence[TraceRun], hw: Spec, chips: int = 1) -> None:
    """Writes the trace atomically, streaming it in chunks so millions of events stay within memory."""
    plan = _Plan(runs, hw, chips)
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f, _gc_paused():
        f.write('{"traceEvents":[')
        first = True
        for chunk in plan.chunks():
            if not chunk:
                continue
            # json.dumps takes the C encoder; json.dump would take the pure-Python one.
            text = json.dumps(chunk, separators=(",", ":"))
            f.write(text[1:-1] if first else "," + text[1:-1])
            first = False
        f.write('],"displayTimeUnit":"ns","metadata":' + json.dumps(plan.metadata()) + "}")


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


class _Plan:
    """What goes where: every run laid out once, then emitted for its own chips and the mirrors."""

    def __init__(self, runs: Sequence[TraceRun], hw: Spec, chips: int) -> None:
        if not runs or any(run.program.sites != runs[0].program.sites for run in runs):
            raise ValueError("a trace needs runs, all of programs of one target")
        placed = sorted({int(c) for run in runs for c in np.unique(run.program.chip)} | {0})
        if chips > 1 and placed != [0]:
            raise ValueError(f"only a one-chip (SPMD) program can be mirrored onto {chips} chips")
        self.runs, self.rates, self.sites = runs, hw.rates, runs[0].program.sites
        self.tids, self.dma_tid, self.tiers = context_tids(self.sites), dma_tid(self.sites), tiers(self.sites)
        self.ns_per_cycle = 1e9 / self.rates.clock_hz
        self.mirrors = list(range(1, chips)) if chips > 1 else []
        self.chips = placed + self.mirrors
        self.laid = [self._lay(run) for run in runs]
        own = len(runs) + sum(laid.events(_EVERY) for laid in self.laid)  # + phase events
        fits = [
            t
            for t in range(_EVERY + 1)
            if own + len(self.mirrors) * sum(r.events(t) for r in self.laid) <= MAX_EVENTS
        ]
        self.tier = max(fits, default=0)  # what mirrored chips keep

    def _ns(self, run: TraceRun, cycles: np.ndarray) -> np.ndarray:
        """Cycles on a run's axis as whole nanoseconds on the global axis (monotone rounding, so
        intervals that were disjoint or nested stay so)."""
        return np.rint((run.offset + cycles) * self.ns_per_cycle)

    def _lay(self, run: TraceRun) -> _Laid:
        p, t = run.program, run.timeline
        fixed = np.array([self.tids.get(c, 0) for c in self.sites.context_names], np.int64)
        collective = np.array([c.collective for c in self.sites.contexts])
        other = np.flatnonzero(p.context != self.sites.pool)
        slices = self._engines(run)
        ts = np.concatenate([self._ns(run, t.start[other]), self._ns(run, slices.t0)])
        end = np.concatenate([self._ns(run, t.end[other]), self._ns(run, slices.t1)])
        return _Laid(
            command=np.concatenate([other, slices.command]),
            chip=np.concatenate([p.chip[other].astype(np.int64), slices.chip]),
            tid=np.concatenate([fixed[p.context[other]], self.dma_tid + slices.engine]),
            ts=ts,
            end=np.maximum(end, ts),
            tier=np.concatenate([np.where(collective[p.context[other]], 0, 1), np.full(len(slices), _EVERY)]),
            counters=self._counters(run),
        )

    def _engines(self, run: TraceRun) -> EngineSlices:
        rates = self.rates
        shares = dma_shares(run.program, run.timeline, rates.hbm_bytes_per_cycle, rates.dma_bytes_per_cycle)
        return engine_slices(shares, rates.dma_engines, rates.dma_bytes_per_cycle_each)

    def metadata(self) -> dict:
        """What a reader needs to know that the events cannot say."""
        rates, n = self.rates, len(self.chips)
        meta = {
            "chips": n,
            "dma_engines": rates.dma_engines,
            "dma": f"the {rates.dma_engines} DMA engines of a chip are one pool of "
            f"{rates.dma_bytes_per_cycle:g} B/cycle shared by the moves in flight; a move holds "
            f"rate / {rates.dma_bytes_per_cycle_each:g} engines and may be split over several, and the "
            f"'{DESCRIPTORS}' counter shows moves starting up (no bandwidth) and moving",
        }
        if self.mirrors:
            meta["symmetric"] = True
            meta["mirrors"] = (
                "tensor-parallel SPMD: every chip runs chip 0's program, so chip k mirrors chip 0 "
                "(its collectives on the link track included)"
            )
            meta["mirrored_tracks"] = self.tiers[self.tier]
        return meta

    def chunks(self) -> Iterator[list[dict]]:
        """Metadata first, then per run its phase event, its counters and its complete events, for
        its own chips and then each mirror (split into chunks)."""
        yield self._thread_names()
        for run, laid in zip(self.runs, self.laid, strict=True):
            yield [self._phase_event(run)]
            yield self._power_events(run)
            yield from self._counter_events(laid)
            yield from self._complete(run, laid)

    def _complete(self, run: TraceRun, laid: _Laid) -> Iterator[list[dict]]:
        p = run.program
        names = [f"L{op.layer} {op.name}" if op.layer >= 0 else op.name for op in p.ops]
        kinds = [op.kind for op in p.ops]
        op = p.op.tolist()
        cols = (p.flops, p.hbm_bytes, p.dm_bytes, p.link_bytes, p.moved, p.cycles)
        flops, hbm, dm, link, moved, cycles = (a.tolist() for a in cols)
        command, tid = laid.command.tolist(), laid.tid.tolist()
        ts_us, dur_us = (laid.ts / 1000.0).tolist(), ((laid.end - laid.ts) / 1000.0).tolist()
        everything = list(range(len(command)))
        # Each row's args are built once; a mirror's events say whose they are instead of repeating them.
        args = [
            {
                "run": run.name,
                "command": c,
                "flops": flops[c],
                "hbm_bytes": hbm[c],
                "dm_bytes": dm[c],
                "link_bytes": link[c],
                "moved_bytes": moved[c],
                "cycles": cycles[c],
            }
            for c in command
        ]
        jobs = [(everything, [chip_pid(c) for c in laid.chip.tolist()], args)]
        for mirror in self.mirrors:
            rows = np.flatnonzero(laid.tier <= self.tier).tolist()
            mirrored = [{"run": run.name, "command": c, "mirror_of": "chip 0"} for c in command]
            jobs.append((rows, [chip_pid(mirror)] * len(rows), mirrored))
        for rows, pid, arg in jobs:
            for lo in range(0, len(rows), _CHUNK):
                yield [
                    {
                        "name": names[op[command[k]]],
                        "cat": kinds[op[command[k]]],
                        "ph": "X",
                        "ts": ts_us[k],
                        "dur": dur_us[k],
                        "pid": pid[lo + j],
                        "tid": tid[k],
                        "args": arg[k],
                    }
                    for j, k in enumerate(rows[lo : lo + _CHUNK])
                ]

    def _counters(self, run: TraceRun) -> list[tuple[int, list[float], list[int], list[int]]]:
        """Per chip, how many DMA descriptors were starting up and how many moving, at each change."""
        p, t = run.program, run.timeline
        rate = moving_rate(p)
        out = []
        pool = p.context == self.sites.pool
        for chip in np.unique(p.chip[pool]).tolist():
            ids = np.flatnonzero(pool & (p.chip == chip))
            moves = (rate[ids] > 0).astype(np.float64)
            begin = np.where(moves > 0, t.start[ids] + p.latency[ids], t.end[ids])  # start-up ends
            at = np.concatenate([self._ns(run, x) for x in (t.start[ids], begin, t.end[ids])])
            starting = np.concatenate([np.ones(len(ids)), -np.ones(len(ids)), np.zeros(len(ids))])
            moving = np.concatenate([np.zeros(len(ids)), moves, -moves])
            times, where = np.unique(at, return_inverse=True)
            up = np.cumsum(np.bincount(where, starting, len(times))).round().astype(int).tolist()
            on = np.cumsum(np.bincount(where, moving, len(times))).round().astype(int).tolist()
            out.append((chip, (times / 1000.0).tolist(), up, on))
        return out

    def _counter_events(self, laid: _Laid) -> Iterator[list[dict]]:
        for chip, times, up, on in laid.counters:
            mirrors = self.mirrors if self.tier == _EVERY else []
            for pid in [chip_pid(chip)] + [chip_pid(m) for m in mirrors]:
                yield [
                    {
                        "name": DESCRIPTORS,
                        "ph": "C",
                        "ts": us,
                        "pid": pid,
                        "tid": self.dma_tid,  # ignored for counters, there for readers expecting one
                        "args": {"starting": a, "moving": b},
                    }
                    for us, a, b in zip(times, up, on, strict=True)
                ]

    def _power_events(self, run: TraceRun) -> list[dict]:
        """The run's power on every chip, a value from the start of each of its windows (mirrors
        follow chip 0); none when the run has no track."""
        if run.power is None:
            return []
        times = (self._ns(run, run.power.edges[:-1]) / 1000.0).tolist()
        return [
            {"name": POWER, "ph": "C", "ts": ts, "pid": chip_pid(chip), "tid": PHASES_TID, "args": {"W": w}}
            for chip in self.chips
            for ts, w in zip(times, run.power.watts.get(chip, run.power.watts[0]).tolist(), strict=True)
        ]  # fmt: skip

    def _thread_names(self) -> list[dict]:
        """Process and thread names (and sort orders, so chips and engines appear in order)."""
        events: list[dict] = []

        def meta(name: str, pid: int, tid: int, args: dict) -> None:
            events.append({"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args})

        first = FIRST_CONTEXT_TID
        for chip in self.chips:
            pid = chip_pid(chip)
            # Process metadata rides on the first context's thread: tid 0 is the swapper in Perfetto too.
            meta("process_name", pid, first, {"name": f"chip {chip}"})
            meta("process_sort_index", pid, first, {"sort_index": chip})
            if chip in self.mirrors:
                label = "mirrors chip 0" + (
                    "" if self.tier == _EVERY else f" ({self.tiers[self.tier]} tracks only)"
                )
                meta("process_labels", pid, first, {"labels": label})
            threads = [(PHASES_TID, "phases")] if chip == 0 else []
            threads += [(tid, name) for name, tid in self.tids.items()]
            threads += [(self.dma_tid + k, f"dma engine {k}") for k in range(self.rates.dma_engines)]
            for tid, name in threads:
                meta("thread_name", pid, tid, {"name": name})
                meta("thread_sort_index", pid, tid, {"sort_index": tid})
        return events

    def _phase_event(self, run: TraceRun) -> dict:
        """One complete event spanning a whole run, on chip 0's "phases" thread."""
        start = float(np.rint(run.offset * self.ns_per_cycle))
        end = max(float(np.rint(run_end(run) * self.ns_per_cycle)), start)
        return {
            "name": run.name,
            "cat": "phase",
            "ph": "X",
            "ts": start / 1000.0,
            "dur": (end - start) / 1000.0,
            "pid": chip_pid(0),
            "tid": PHASES_TID,
            "args": {"run": run.name, "commands": len(run.program), "cycles": run.timeline.cycles},
        }
