"""The Perfetto trace and the PNG plots of simulated runs: valid format, exact nesting, real images."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from simulator.engine import simulate
from simulator.hardware import load_hardware
from simulator.program import OpInfo, Program, ProgramBuilder
from simulator.targets.rngd.sites import SITES
from simulator.trace import TraceRun, dma_tid, trace_events, write_trace

DMA_TID = dma_tid(SITES)

HW = load_hardware("rngd")
CLOCK_HZ = HW.chip.clock_hz
HBM, DMA = HW.hbm.sustained_bytes_per_cycle, HW.dma_bytes_per_cycle
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def two_chip_program(layers: int, tokens: int) -> Program:
    """Per layer and chip: a few concurrent weight DMAs, a matmul on them, a vector op on the sub
    pipeline, then chip 0 sends its partial sum over the link and chip 1's reduction waits for it."""
    b = ProgramBuilder(SITES)
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
    return two_chip_runs()


def two_chip_runs() -> list[TraceRun]:
    out: list[TraceRun] = []
    offset = 0.0
    for phase, step, layers, tokens in (("prefill", None, 3, 64), ("decode", 0, 3, 1), ("decode", 1, 3, 1)):
        program = two_chip_program(layers, tokens)
        timeline = simulate(program, HBM, DMA)
        out.append(TraceRun(phase, program, timeline, offset, step))
        offset += float(timeline.end.max())
    return out


def test_trace_events_follow_the_trace_event_format(runs: list[TraceRun], tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    write_trace(path, runs, HW)
    with open(path) as f:
        loaded = json.load(f)
    assert loaded == json.loads(json.dumps(trace_events(runs, HW)))  # file and dict agree
    assert loaded["displayTimeUnit"] == "ns"
    events = loaded["traceEvents"]
    for e in events:
        assert {"name", "ph", "ts", "pid"} <= e.keys(), e
        assert e["ph"] in {"X", "M", "C"}
        if e["ph"] == "X":
            assert e["dur"] >= 0 and "tid" in e
    complete = [e for e in events if e["ph"] == "X"]
    dma = SITES.context("dma")
    others = sum(int((r.program.context != dma).sum()) for r in runs)
    assert len([e for e in complete if e["tid"] < DMA_TID]) == others + len(runs)  # + one per phase
    assert loaded["metadata"]["dma_engines"] == HW.dma.engines

    # Every thread that carries events is named, and so is every process.
    named_threads = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    named_procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert {(e["pid"], e["tid"]) for e in complete} <= named_threads
    assert sorted(named_procs.values()) == ["chip 0", "chip 1"]
    thread_names = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    for pid in named_procs:
        assert {(pid, "main"), (pid, "sub"), (pid, "link")} <= thread_names
        engines = {name for p, name in thread_names if p == pid and name.startswith("dma")}
        assert engines == {f"dma engine {k}" for k in range(HW.dma.engines)}  # the spec's count, no more


def test_events_on_one_thread_never_overlap_partially(runs: list[TraceRun]) -> None:
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in trace_events(runs, HW)["traceEvents"]:
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


def test_dma_engine_tracks_carry_each_move_s_bytes(runs: list[TraceRun]) -> None:
    """A move's slices over the engine tracks add up to its bytes at one engine's rate (the pool
    shares bandwidth, so time on the engines is bytes, not descriptor lifetime)."""
    events = trace_events(runs, HW)["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    engine_us: dict[tuple[str, int, int], float] = defaultdict(float)
    for e in events:
        if e["ph"] == "X" and e["tid"] >= DMA_TID:
            assert names[(e["pid"], e["tid"])].startswith("dma engine ")
            engine_us[(e["args"]["run"], e["pid"], e["args"]["command"])] += e["dur"]
    dma = SITES.context("dma")
    for run in runs:
        p = run.program
        for i in np.flatnonzero(p.context == dma).tolist():
            cycles = engine_us[(run.name, int(p.chip[i]) + 1, i)] * 1e-6 * CLOCK_HZ
            # whole-nanosecond rounding of each slice's ends: at most 1 ns per slice and engine
            assert cycles * HW.dma.bytes_per_cycle_each == pytest.approx(p.moved[i], abs=8 * 256 * 2)


def test_descriptor_counter_counts_moves_in_flight(runs: list[TraceRun]) -> None:
    counters = [e for e in trace_events(runs, HW)["traceEvents"] if e["ph"] == "C"]
    assert counters and all(e["name"] == "dma descriptors" for e in counters)
    assert max(e["args"]["starting"] + e["args"]["moving"] for e in counters) == 3  # three loads per layer
    assert min(min(e["args"].values()) for e in counters) == 0
    last = {}
    for e in counters:
        last[e["pid"]] = e["args"]
    assert all(v == {"starting": 0, "moving": 0} for v in last.values())  # all done at the end


def one_chip_runs() -> list[TraceRun]:
    """Chip 0's part of the two-chip program with its link send: what a tensor-parallel compile gives."""
    b = ProgramBuilder(SITES)
    mm, send = b.op(OpInfo("matmul", "pass", 0)), b.op(OpInfo("all_reduce", "collective", 0))
    load = b.command("dma", mm, 2300, latency=300, moved=4096 * 1024, hbm_bytes=4096 * 1024)
    m = b.command("main", mm, 5000, [load], flops=10**9, busy={"contraction": 5000})
    b.command("link", send, 800, [m], link_bytes=8192, busy={"chip_link": 800})
    program = b.build()
    return [TraceRun("prefill", program, simulate(program, HBM, DMA), 0.0)]


def test_tensor_parallel_chips_mirror_chip_0() -> None:
    trace = trace_events(one_chip_runs(), HW, chips=8)
    events = trace["traceEvents"]
    assert trace["metadata"]["chips"] == 8 and trace["metadata"]["symmetric"] is True
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(procs.values()) == [f"chip {k}" for k in range(8)]
    complete = [e for e in events if e["ph"] == "X" and e["cat"] != "phase"]

    def seen(pid: int) -> list[tuple]:
        return sorted((e["name"], e["tid"], e["ts"], e["dur"]) for e in complete if e["pid"] == pid)

    assert seen(1)
    for pid in range(2, 9):
        assert seen(pid) == seen(1)  # chip k mirrors chip 0, link (collective) included
    assert {e["pid"] for e in complete if e["cat"] == "collective"} == set(range(1, 9))
    with pytest.raises(ValueError, match="one-chip"):
        trace_events(two_chip_runs(), HW, chips=4)


def test_mirrors_stay_within_the_event_budget(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import simulator.trace as trace

    runs = one_chip_runs()
    full = trace_events(runs, HW, chips=8)["traceEvents"]
    budget = len([e for e in full if e["ph"] in "XC"]) - 1
    monkeypatch.setattr(trace, "MAX_EVENTS", budget)
    kept = trace_events(runs, HW, chips=8)
    events = [e for e in kept["traceEvents"] if e["ph"] in "XC"]
    assert len(events) <= budget
    assert kept["metadata"]["mirrored_tracks"] != "every"
    labels = [e["args"]["labels"] for e in kept["traceEvents"] if e["name"] == "process_labels"]
    assert len(labels) == 7 and all("only" in label for label in labels)
    # the collective still shows on every chip
    assert {e["pid"] for e in events if e.get("cat") == "collective"} == set(range(1, 9))
    path = tmp_path / "t.json"
    write_trace(path, runs, HW, chips=8)
    assert json.loads(path.read_text()) == json.loads(json.dumps(kept))


def test_runs_follow_each_other_on_the_global_axis(runs: list[TraceRun]) -> None:
    events = [e for e in trace_events(runs, HW)["traceEvents"] if e["ph"] == "X"]
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
    events = trace_events(runs, HW)["traceEvents"]
    mine = [
        e for e in events
        if e["ph"] == "X" and e["cat"] != "phase" and e["tid"] < DMA_TID and e["args"]["run"] == run.name
    ]  # fmt: skip
    not_dma = run.program.context != SITES.context("dma")
    expected = sorted(((run.offset + run.timeline.start[not_dma]) / CLOCK_HZ * 1e6).tolist())
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
    # ten identical layers land on one spot: one marker, one legend entry that says so
    points += [RooflinePoint(f"l{k}.down", "decode", 2e9, 1e9, 0.002, k, "down") for k in range(10)]
    path = tmp_path / "roofline.png"
    labels = roofline_png(path, points, {"bf16": 262.144e12, "fp8": 524.288e12}, 1.44e12, "roofline (test)")
    _check_png(path)
    assert sorted(labels) == sorted(
        [
            "prefill: matmul",
            "prefill: attention",
            "decode: matmul",
            "decode: attention",
            "decode: down x10 (l0-l9)",
        ]
    )


def test_roofline_legend_has_one_entry_per_visible_marker(tmp_path: Path) -> None:
    from simulator.plots import LEGEND_MARKERS, RooflinePoint, roofline_png
    from simulator.roofline_markers import markers

    # 40 distinct spots: the heaviest get an entry each, the rest one entry per phase
    points = [
        RooflinePoint(f"op{k}", ("prefill", "decode")[k % 2], 1e9 * 1.5**k, 1e8, 1e-3 / (k + 1))
        for k in range(40)
    ]
    spots = markers(points)
    assert len(spots) == 40
    labels = roofline_png(tmp_path / "r.png", points, {"bf16": 262.144e12}, 1.44e12, "many")
    assert len(labels) == LEGEND_MARKERS + 2
    assert sorted(labels[-2:]) == [f"{phase}: 12 lighter spots (12 ops)" for phase in ("decode", "prefill")]
    # coincident points of different phases stay apart; near-coincident ones of one phase merge
    close = [RooflinePoint("a", "prefill", 1e9, 1e6, 1e-3), RooflinePoint("b", "prefill", 1.01e9, 1e6, 1e-3)]
    close.append(RooflinePoint("c", "decode", 1e9, 1e6, 1e-3))
    assert sorted(m.label for m in markers(close)) == ["a, b", "c"]


def test_timeline_png(runs: list[TraceRun], tmp_path: Path) -> None:
    from simulator.plots import timeline_png

    path = tmp_path / "timeline.png"
    units = ["tensor_dma", "contraction", "vector", "chip_link"]
    timeline_png(path, runs, units, HW, "timeline (test)", bins=200)
    _check_png(path)
    # Many decode steps: only the phase changes are labelled, and it still renders.
    step = runs[1]
    span = float(step.timeline.end.max())
    many = [runs[0]]
    many += [TraceRun("decode", step.program, step.timeline, step.offset + k * span, k) for k in range(60)]
    timeline_png(path, many, units, HW, "many steps (test)", bins=100)
    _check_png(path)
    with pytest.raises(ValueError, match="unknown unit"):
        timeline_png(path, runs, ["warp_drive"], HW, "bad")


def test_spread_conserves_busy_cycles(runs: list[TraceRun]) -> None:
    from simulator.busy_time import spread

    run = runs[0]
    edges = np.linspace(0.0, float(run.timeline.end.max()), 97)
    amount = run.program.busy[:, 1].astype(np.float64)
    per_bin = spread(run.timeline.start, run.timeline.end, amount, edges)
    assert per_bin.sum() == pytest.approx(amount.sum(), rel=1e-9)
    assert np.all(per_bin <= np.diff(edges) * 2 + 1e-6)  # two chips, one contraction pipeline each


def test_timeline_utilisation_is_the_report_s() -> None:
    """The plot's utilisation per unit, over each phase, equals the report's (one definition)."""
    from simulator.busy_time import binned_utilisation, phase_utilisation
    from tcp_compiler.frontend.model import load_model
    from tcp_compiler.frontend.precision import precision
    from tcp_compiler.report.build import build_report
    from tcp_compiler.simulate import simulate_generation

    hw = load_hardware("rngd", 2)  # links busy too
    sim = simulate_generation(
        load_model("llama-3.2-1b").config, hw, precision("bf16"), 1, 32, 3, trace_steps=2
    )
    runs, offset = [], 0.0
    for run in [sim.prefill, *sim.traced_steps]:  # every decode step: the report's decode is theirs
        runs.append(TraceRun(run.phase, run.program, run.timeline, offset, run.step))
        offset += run.cycles
    report = build_report(sim)
    means = phase_utilisation(runs, hw, SITES.unit_names)
    edges = np.array([0.0, float(sim.prefill.cycles), offset])  # one bin per phase
    binned = binned_utilisation(runs, hw, SITES.unit_names, edges)
    for column, (phase, rows) in enumerate(report.units.items()):
        for k, row in enumerate(rows):
            assert means[phase][row.unit] == pytest.approx(row.utilisation, rel=1e-9, abs=1e-12), row
            assert binned[k, column] == pytest.approx(row.utilisation, rel=1e-6, abs=1e-9), row
    dma = {phase: m["tensor_dma"] for phase, m in means.items()}
    assert 0.05 < dma["decode"] < 0.95 and dma["prefill"] > 0  # neither saturated nor idle
    assert means["decode"]["chip_link"] > 0


def test_dma_layout_follows_the_engine_s_bandwidth_sharing() -> None:
    """One HBM-bound move alone holds 1,440 / 256 = 5.625 engines; two equal moves side by side
    halve the pool between them; the replayed shares move exactly each move's bytes."""
    from simulator.dma_layout import engine_slices
    from simulator.dma_shares import dma_shares

    b = ProgramBuilder(SITES)
    op = b.op(OpInfo("load", "dma", -1))
    nbytes = 2048 * 1000
    alone = b.command("dma", op, 500 + 1000, latency=500, moved=nbytes, hbm_bytes=nbytes)
    pair = [
        b.command("dma", op, 500 + 1000, [alone], latency=500, moved=nbytes, dm_bytes=nbytes) for _ in "ab"
    ]
    program = b.build()
    timeline = simulate(program, HBM, DMA)
    shares = dma_shares(program, timeline, HBM, DMA)
    moved = np.bincount(shares.command, weights=shares.rate * (shares.t1 - shares.t0), minlength=3)
    assert moved == pytest.approx([nbytes] * 3, rel=1e-9)
    slices = engine_slices(shares, HW.dma.engines, HW.dma.bytes_per_cycle_each)
    mine = slices.command == alone
    span = timeline.end[alone] - timeline.start[alone] - 500  # moving at 1,440 B/cycle
    held = np.bincount(slices.engine[mine], weights=(slices.t1 - slices.t0)[mine], minlength=8) / span
    assert held == pytest.approx([1, 1, 1, 1, 1, 0.625, 0, 0])
    for k, cmd in enumerate(pair):  # on-chip moves: 1,024 B/cycle each, four engines apiece
        on = slices.command == cmd
        assert sorted(slices.engine[on].tolist()) == [4 * k + e for e in range(4)]


def test_roofline_names_the_run_and_draws_only_its_dtype_roof_with_the_legend_beside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import simulator.plots as plots
    from tcp_compiler.cli import main

    drawn: dict = {}
    real = plots.roofline_png

    def spy(path, points, peaks, hbm, title):
        drawn.update(peaks=peaks, title=title)
        return real(path, points, peaks, hbm, title)

    figures = []
    monkeypatch.setattr(plots, "roofline_png", spy)
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig))
    args = ["simulate", "llama-3.2-1b", "--dtype", "fp8", "--batch", "2", "--prompt-len", "16",
            "--gen-len", "2"]
    assert main([*args, "--plot", str(tmp_path)]) == 0
    assert list(drawn["peaks"]) == ["fp8e4m3"]
    assert drawn["title"] == "llama-3.2-1b on rngd: fp8, batch 2, prompt 16"
    roofline = figures[0]
    ax = roofline.axes[0]
    renderer = roofline.canvas.get_renderer()
    assert ax.get_legend().get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1
