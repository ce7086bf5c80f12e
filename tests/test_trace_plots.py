"""The Perfetto trace and the PNG plots of simulated runs: valid format, exact nesting, real images."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from simulator.engine import simulate
from simulator.program import OpInfo, Program, ProgramBuilder
from simulator.trace import TraceRun, trace_events, write_trace

CLOCK_HZ = 1.0e9
HBM, DMA = 1440.0, 2048.0
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def two_chip_program(layers: int, tokens: int) -> Program:
    """Per layer and chip: a few concurrent weight DMAs, a matmul on them, a vector op on the sub
    pipeline, then chip 0 sends its partial sum over the link and chip 1's reduction waits for it."""
    b = ProgramBuilder()
    load = b.op(OpInfo("load_w", "dma", -1))
    previous: dict[int, int | None] = {0: None, 1: None}
    for layer in range(layers):
        mm = b.op(OpInfo("matmul", "contraction", layer))
        act = b.op(OpInfo("silu", "vector", layer))
        send = b.op(OpInfo("send", "link", layer))
        red = b.op(OpInfo("allreduce", "vector", layer))
        done: dict[int, int] = {}
        for chip in (0, 1):
            loads = []
            for k in range(3):
                moved = (1 + k) * 64 * 1024
                cycles = 300 + moved // 2048
                loads.append(
                    b.command(
                        "dma",
                        load,
                        cycles,
                        [previous[chip]],
                        latency=300,
                        moved=moved,
                        chip=chip,
                        hbm_bytes=moved,
                        dm_bytes=moved,
                        busy={"tensor_dma": cycles},
                    )  # fmt: skip
                )
            cycles = 200 * tokens + 500
            m = b.command("main", mm, cycles, loads, chip=chip, flops=2 * 4096 * 64 * tokens,
                          dm_bytes=64 * 1024, busy={"contraction": cycles, "fetch": cycles // 2})  # fmt: skip
            done[chip] = b.command("sub", act, 40 * tokens + 10, [m], chip=chip, busy={"vector": 40 * tokens})
        s = b.command("link", send, 800, [done[0]], chip=0, link_bytes=8192, busy={"chip_link": 800})
        r = b.command("main", red, 120, [s, done[1]], chip=1, busy={"vector": 100, "reducer": 120})
        previous = {0: s, 1: r}
    return b.build()


@pytest.fixture(scope="module")
def runs() -> list[TraceRun]:
    out: list[TraceRun] = []
    offset = 0.0
    for name, layers, tokens in (("prefill", 3, 64), ("decode 0", 3, 1), ("decode 1", 3, 1)):
        program = two_chip_program(layers, tokens)
        timeline = simulate(program, HBM, DMA)
        out.append(TraceRun(name, program, timeline, offset))
        offset += float(timeline.end.max())
    return out


def test_trace_events_follow_the_trace_event_format(runs: list[TraceRun], tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    write_trace(path, runs, CLOCK_HZ)
    with open(path) as f:
        loaded = json.load(f)
    assert loaded == json.loads(json.dumps(trace_events(runs, CLOCK_HZ)))  # file and dict agree
    assert loaded["displayTimeUnit"] == "ns"
    events = loaded["traceEvents"]
    for e in events:
        assert {"name", "ph", "ts", "pid", "tid"} <= e.keys(), e
        assert e["ph"] in {"X", "M"}
        if e["ph"] == "X":
            assert e["dur"] >= 0
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == sum(len(r.program) for r in runs) + len(runs)

    # Every thread that carries events is named, and so is every process.
    named_threads = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    named_procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert {(e["pid"], e["tid"]) for e in complete} <= named_threads
    assert sorted(named_procs.values()) == ["chip 0", "chip 1"]
    thread_names = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    for pid in named_procs:
        assert {(pid, "main"), (pid, "sub"), (pid, "link"), (pid, "dma 0"), (pid, "dma 1")} <= thread_names


def test_events_on_one_thread_never_overlap_partially(runs: list[TraceRun]) -> None:
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in trace_events(runs, CLOCK_HZ)["traceEvents"]:
        if e["ph"] == "X":
            by_thread[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    eps = 1e-9
    for spans in by_thread.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list[float] = []  # ends of the enclosing open events
        for start, end in spans:
            while stack and stack[-1] <= start + eps:
                stack.pop()
            assert not stack or end <= stack[-1] + eps, "partial overlap on one thread"
            stack.append(end)


def test_dma_commands_take_the_lowest_free_lane(runs: list[TraceRun]) -> None:
    events = trace_events(runs, CLOCK_HZ)["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    loads = [e for e in events if e["ph"] == "X" and e["cat"] == "dma"]
    lanes = [int(names[(e["pid"], e["tid"])].split()[1]) for e in loads]
    assert max(lanes) == 2  # three concurrent loads per chip and layer, never more
    for e, lane in zip(loads, lanes, strict=True):
        below = [
            o
            for o, other in zip(loads, lanes, strict=True)
            if o["pid"] == e["pid"] and other < lane and o["ts"] <= e["ts"] < o["ts"] + o["dur"]
        ]
        assert len(below) == lane  # every lower lane was busy at this command's start


def test_runs_follow_each_other_on_the_global_axis(runs: list[TraceRun]) -> None:
    events = [e for e in trace_events(runs, CLOCK_HZ)["traceEvents"] if e["ph"] == "X"]
    by_run: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        by_run[e["args"]["run"]].append(e)
    for before, after in zip(runs, runs[1:], strict=False):
        before_end = max(e["ts"] + e["dur"] for e in by_run[before.name])
        assert min(e["ts"] for e in by_run[after.name]) >= before_end - 1e-9
    phases = sorted((e for e in events if e["cat"] == "phase"), key=lambda e: e["ts"])
    assert [e["name"] for e in phases] == ["prefill", "decode 0", "decode 1"]
    for run, phase in zip(runs, phases, strict=True):
        assert phase["ts"] == pytest.approx(run.offset / CLOCK_HZ * 1e6, abs=1e-3)
        assert phase["dur"] == pytest.approx(run.timeline.end.max() / CLOCK_HZ * 1e6, abs=2e-3)
    matmul = next(e for e in events if e["name"] == "L0 matmul")
    assert matmul["cat"] == "contraction" and matmul["args"]["flops"] > 0
    assert {"run", "flops", "hbm_bytes", "dm_bytes", "link_bytes", "cycles"} <= matmul["args"].keys()


def test_trace_times_are_microseconds_of_the_timeline(runs: list[TraceRun]) -> None:
    run = runs[1]
    events = trace_events(runs, CLOCK_HZ)["traceEvents"]
    mine = [e for e in events if e["ph"] == "X" and e["cat"] != "phase" and e["args"]["run"] == run.name]
    expected = sorted(((run.offset + run.timeline.start) / CLOCK_HZ * 1e6).tolist())
    assert np.allclose(sorted(e["ts"] for e in mine), expected, atol=1e-3)


def _check_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_MAGIC
    image = imread(path)
    assert image.shape[0] > 300 and image.shape[1] > 300
    assert image[..., :3].std() > 0.01  # not a blank canvas
    assert not list(path.parent.glob(f".{path.name}.*"))  # the temporary file was moved into place


def test_roofline_png(tmp_path: Path) -> None:
    from simulator.plots import RooflinePoint, roofline_png

    points = [
        RooflinePoint("matmul", "prefill", 4e12, 2e9, 0.02),
        RooflinePoint("attention", "prefill", 5e11, 4e9, 0.004),
        RooflinePoint("matmul", "decode", 8e9, 4e9, 0.003),
        RooflinePoint("attention", "decode", 1e9, 1e9, 0.001),
        RooflinePoint("no bytes", "decode", 1e9, 0.0, 0.001),  # skipped
        RooflinePoint("no time", "prefill", 1e9, 1e9, 0.0),  # skipped
    ]
    path = tmp_path / "roofline.png"
    roofline_png(path, points, {"bf16": 262.144e12, "fp8": 524.288e12}, 1.44e12, "roofline (test)")
    _check_png(path)


def test_timeline_png(runs: list[TraceRun], tmp_path: Path) -> None:
    from simulator.plots import timeline_png

    path = tmp_path / "timeline.png"
    units = ["tensor_dma", "contraction", "vector", "chip_link"]
    timeline_png(path, runs, units, CLOCK_HZ, "timeline (test)", bins=200)
    _check_png(path)
    # Many decode steps: only the phase changes are labelled, and it still renders.
    step = runs[1]
    span = float(step.timeline.end.max())
    many = [runs[0]]
    many += [TraceRun(f"decode {k}", step.program, step.timeline, step.offset + k * span) for k in range(60)]
    timeline_png(path, many, units, CLOCK_HZ, "many steps (test)", bins=100)
    _check_png(path)
    with pytest.raises(ValueError, match="unknown unit"):
        timeline_png(path, runs, ["warp_drive"], CLOCK_HZ, "bad")


def test_spread_conserves_busy_cycles(runs: list[TraceRun]) -> None:
    from simulator.plots import _spread

    run = runs[0]
    edges = np.linspace(0.0, float(run.timeline.end.max()), 97)
    amount = run.program.busy[:, 1].astype(np.float64)
    per_bin = _spread(run.timeline.start, run.timeline.end, amount, edges)
    assert per_bin.sum() == pytest.approx(amount.sum(), rel=1e-9)
    assert np.all(per_bin <= np.diff(edges) * 2 + 1e-6)  # two chips, one contraction pipeline each
