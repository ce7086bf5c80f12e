"""How long `tcpc plan` takes: Llama-3.1-8B and Llama-3.1-70B on up to 8 RNGD chips (every tp x pp
x dp layout of 1 to 8 chips, max sequences 64 and 256, prefill chunks 512 and 2048 tokens, bf16),
the default requests (prompts 64-512, outputs 32-256; 120 per run for p90), under TTFT p90 <= 1 s
and TPOT p90 <= 50 ms. Targets (issue 27): 8B (at least 50 candidates) under 5 minutes, 70B under
15 minutes, on 2 cores.

Prints each plan's wall time, its candidates and tasks (one compile of iteration costs each) and
how many met the SLOs, and its CPU time, each task's measured in the process that ran it: two idle
cores take max(CPU / 2, longest task), which it prints as the 2-core estimate (on a busy machine
the wall time says more about the machine than about the plan).

Run: python benchmarks/plan_speed.py [--jobs N] [--model NAME ...]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from tcp_compiler.executors import local_executor
from tcp_compiler.planner import OK, Context, Result, Space, plan, tasks
from tcp_compiler.serve.max_rate import Slo, searched
from tcp_compiler.serve.workload import Workload

MODELS = ("llama-3.1-8b", "llama-3.1-70b")
TARGET_S = {"llama-3.1-8b": 300.0, "llama-3.1-70b": 900.0}
CHIPS, SLO_TTFT, SLO_TPOT, PERCENTILE = 8, 1.0, 0.05, 90.0
SPACE = Space(CHIPS, max_seqs=(64, 256), max_batch_tokens=(512, 2048))


@dataclass
class Timed:
    rankings: list[list[Result]]  # one per SLO
    wall_s: float
    task_cpu_s: list[float]  # each task's CPU seconds, measured in the process that ran it

    @property
    def cpu_s(self) -> float:
        return sum(self.task_cpu_s)

    @property
    def two_cores_s(self) -> float:
        """Two idle cores take at least half the CPU time and at least the longest task."""
        return max(self.cpu_s / 2, max(self.task_cpu_s))


def measure(model: str, slos: tuple[Slo, ...], jobs: int = 1, space: Space = SPACE) -> Timed:
    """The plan of `model` under each of `slos` (one search each per candidate, one compile per task).
    Each task's CPU time is taken inside the worker that ran it: the pool's workers are children
    of a fork server, not of this process, so this process's rusage never sees them."""
    cpu: list[float] = []

    def counted(points, jobs, run):
        for index, outcome in local_executor(points, jobs, partial(_timed, run)):
            if isinstance(outcome, dict):
                cpu.append(outcome.pop("cpu_s"))
            yield index, outcome

    wall = time.perf_counter()
    rankings = plan(Context(model, "rngd", searched(Workload(), SLO_TTFT, SLO_TPOT, PERCENTILE)[0], slos),
                    space, jobs, counted)  # fmt: skip
    return Timed(rankings, time.perf_counter() - wall, cpu)


def _timed(run: Callable[[Any], dict], point: Any) -> dict:
    """run(point) with the CPU seconds it took in this process."""
    start = time.process_time()
    row = run(point)
    return {**row, "cpu_s": time.process_time() - start}


def interactive() -> Slo:
    return searched(Workload(), SLO_TTFT, SLO_TPOT, PERCENTILE)[1]


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1: this process)")
    parser.add_argument("--model", action="append", choices=MODELS, help="only these (default: both)")
    args = parser.parse_args()
    for model in args.model or MODELS:
        m = measure(model, (interactive(),), args.jobs)
        (results,) = m.rankings
        best = next((r for r in results if r.status == OK), None)
        shown = "none" if best is None else (
            f"tp {best.setting.layout.tp} pp {best.setting.layout.pp} dp {best.setting.layout.dp}, "
            f"{best.setting.max_seqs} seqs, chunk {best.setting.max_batch_tokens}: "
            f"{best.goodput_per_card:.3g} goodput requests/s per card")  # fmt: skip
        timing = f"{m.wall_s:.0f} s wall on {args.jobs} worker{'s' * (args.jobs > 1)}"
        verdict = "within" if m.two_cores_s <= TARGET_S[model] else "OVER"
        timing += (
            f", {m.cpu_s:.0f} s CPU (longest task {max(m.task_cpu_s):.0f} s): about "
            f"{m.two_cores_s:.0f} s on 2 idle cores, {verdict} the {TARGET_S[model]:.0f} s target"
        )
        meeting = sum(r.status == OK for r in results)
        print(f"{model} on up to {CHIPS} chips: {timing}; {len(results)} candidates in "
              f"{len(tasks(SPACE.settings()))} tasks, {meeting} meeting the SLOs; best {shown}",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
