"""How fast a warm worker re-costs a design point, and how long a 1,000-point sweep over spec
values takes: Llama-3.1-8B on one RNGD, prompt 2048, 128 generated tokens, over 10 HBM bandwidths
x 10 clocks x 10 DM sizes, on the local process pool (targets: 0.1 s CPU per warm point, the
sweep under 5 minutes on 2 cores).

Run: python benchmarks/sweep_speed.py [--jobs N] [--points-per-axis K]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

from tcp_compiler.search.trials import DesignPoint, Workload, cost
from tcp_compiler.sweep import run_sweep

WORKLOAD = Workload("llama-3.1-8b", "rngd", 1, 2048, 128, "bf16")
PEAK = ("hbm.peak_bytes_per_cycle", 4000.0)  # a ceiling above every swept sustained rate


def axes(k: int) -> list[list[tuple[str, float]]]:
    spread = lambda lo, hi: [lo + (hi - lo) * i / max(k - 1, 1) for i in range(k)]  # noqa: E731
    return [
        [("hbm.sustained_bytes_per_cycle", v) for v in spread(720.0, 2880.0)],
        [("chip.clock_hz", v) for v in spread(0.8e9, 1.4e9)],
        [("memory.dm_bytes_per_slice", int(v) // 4096 * 4096) for v in spread(256 * 1024, 1024 * 1024)],
    ]


def warm_seconds(repeats: int = 8) -> list[float]:
    """CPU seconds of re-costing the point with a new HBM bandwidth or clock, caches warm."""
    cost(DesignPoint(WORKLOAD, (PEAK,)))
    changes = [("hbm.sustained_bytes_per_cycle", 900.0 + 100 * i) for i in range(repeats // 2)]
    changes += [("chip.clock_hz", 0.9e9 + 0.05e9 * i) for i in range(repeats - len(changes))]
    seconds = []
    for change in changes:
        start = time.process_time()
        result = cost(DesignPoint(WORKLOAD, (PEAK, change)))
        seconds.append(time.process_time() - start)
        assert "figures" in result, result
    return seconds


def timed_cost(point: DesignPoint) -> dict:
    """`cost`, with the worker's CPU seconds for the point (the pool's workers are not reaped when
    the sweep returns, so the children's rusage would miss them)."""
    start = time.process_time()
    row = cost(point)
    return {**row, "cpu_s": time.process_time() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--points-per-axis", type=int, default=10)
    args = parser.parse_args()
    seconds = warm_seconds()
    median, low, high = statistics.median(seconds), min(seconds), max(seconds)
    print("warm re-cost of an 8B point (prompt 2048, gen 128) after a bandwidth or clock change: "
          f"median {median:.3f} s CPU, min {low:.3f}, max {high:.3f}")  # fmt: skip
    points = [
        DesignPoint(WORKLOAD, (PEAK, *combo)) for combo in itertools.product(*axes(args.points_per_axis))
    ]
    start = time.perf_counter()
    rows = run_sweep(points, args.jobs, run=timed_cost)
    wall = time.perf_counter() - start
    cpu = sum(r.get("cpu_s", 0.0) for r in rows)
    failed, each = sum("error" in r for r in rows), cpu / len(points)
    print(f"sweep of {len(points):,} points (HBM bandwidth x clock x DM size) on {args.jobs} local workers: "
          f"{wall:.1f} s wall, {cpu:.1f} s worker CPU ({each:.3f} s per point), {failed} failed")  # fmt: skip


if __name__ == "__main__":
    main()
