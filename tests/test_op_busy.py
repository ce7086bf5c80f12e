"""An op's time is the time at least one of its commands is under way: a weight fetched early (a
prefetch beside an earlier pass) counts for its fetch, not for the ops that ran before the pass
read it, so the op's bound is judged on its own work (issue 24.5: `o` and the norms of a MoE
prefill read as "overhead" because their spans stretched over the attention before them)."""

from __future__ import annotations

import numpy as np

from simulator.hardware import load_hardware
from simulator.span_kernels import op_busy
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.report.build import build_report
from tcp_compiler.simulate import simulate_generation


def test_busy_time_is_the_union_of_the_commands_intervals() -> None:
    start = np.array([0.0, 50.0, 55.0, 10.0, 10.0, 30.0])
    end = np.array([5.0, 60.0, 58.0, 20.0, 40.0, 35.0])
    # op 0: [0, 5] and [50, 60] (a gap between), [55, 58] inside; op 1: [10, 40] covers [10, 20], [30, 35]
    assert op_busy(start, end, np.array([0, 3])).tolist() == [15.0, 30.0]


def test_an_op_fetched_early_is_not_charged_for_the_wait() -> None:
    sim = simulate_generation(
        load_model("llama-3.2-1b").config, load_hardware("rngd"), precision("bf16"), 1, 256, 1
    )
    program, timeline = sim.prefill.program, sim.prefill.timeline
    rows = {r.name: r for r in build_report(sim).ops.prefill}
    clock = sim.hardware.chip.clock_hz
    gaps = 0
    for k, info in enumerate(program.ops):
        mine = np.flatnonzero(program.op == k)
        intervals = sorted(zip(timeline.start[mine], timeline.end[mine], strict=True))
        union, latest = 0.0, -np.inf
        for a, b in intervals:
            union += max(b - max(a, latest), 0.0)
            latest = max(latest, b)
        span = timeline.end[mine].max() - timeline.start[mine].min()
        gaps += span > union + 1
        assert abs(rows[info.name].seconds * clock - union) < 1e-6 * max(union, 1.0), info.name
    assert gaps, "no op waits between its fetch and its pass here: the test cannot tell span from busy time"


def test_each_op_is_judged_at_the_rate_of_the_dtype_it_multiplies_in() -> None:
    """An fp8 run keeps its KV cache in bf16: attention's einsums multiply bf16 at half fp8's
    peak, and their roofline says so (at fp8's rate a compute-bound tile reads as "overhead")."""
    hw = load_hardware("rngd")
    sim = simulate_generation(load_model("llama-3.2-1b").config, hw, precision("fp8"), 1, 256, 1)
    operand = {info.name: info.operand for info in sim.prefill.program.ops}
    rows = build_report(sim).ops.prefill
    attention = [r for r in rows if operand[r.name] == "bf16" and r.flops]
    projections = [r for r in rows if operand[r.name] == "fp8e4m3" and r.flops]
    assert attention and projections
    for r in attention:
        assert r.roofline_seconds >= r.flops / hw.flops_per_second("bf16") * (1 - 1e-12), r.name
    for r in projections:
        assert r.roofline_seconds >= r.flops / hw.flops_per_second("fp8e4m3") * (1 - 1e-12), r.name
