"""`tcpc search MODEL --range TABLE.KEY=LO:HI[:log] ...`: the Pareto front of spec designs.

A seeded multi-objective search (Optuna's NSGA-II) over spec value ranges; objectives and
constraints are report figures. Its study lives in `--dir` (SQLite), so the same command run again
resumes it and several workers pointed at one folder share it. Every front point is printed with
its hash and the `tcpc simulate --set ...` command that reproduces it.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from simulator.hardware import load_hardware
from tcp_compiler.cli import arg_types
from tcp_compiler.cli.console import console
from tcp_compiler.cli.executor_flags import add_executor_flags, executor_of, executor_session
from tcp_compiler.cli.output import announce, check_outputs, write_atomically
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.report.tables import line_table
from tcp_compiler.search.front import feasible, front_rows, pareto_front, plot_front
from tcp_compiler.search.goals import parse_constraint, parse_objective
from tcp_compiler.search.space import parse_range, parse_setting
from tcp_compiler.search.study import Search, run_search
from tcp_compiler.search.trials import Workload

DEFAULT_OBJECTIVES = ("tokens_per_s_per_chip:max", "hardware.area_mm2:min")
MAX_TRIALS = 100_000


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "search",
        help="multi-objective search over spec value ranges (Optuna): the Pareto front of designs",
        description="Search spec value ranges for the designs on the Pareto front of report figures "
        "(default: tokens/s per chip against die area) under constraints, seeded and resumable.",
    )
    p.add_argument("model", help="config.json, checkpoint dir or bundled name")
    p.add_argument(
        "--hw", default="rngd", metavar="NAME|FILE", help="the spec the ranges vary (default rngd)"
    )
    p.add_argument(
        "--range",
        dest="ranges",
        action="append",
        default=[],
        metavar="TABLE.KEY=LO:HI[:log]",
        help="a spec value to search, e.g. hbm.sustained_bytes_per_cycle=700:2900:log (repeatable)",
    )
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="TABLE.KEY=V",
        help="a spec value every trial uses (repeatable)",
    )
    p.add_argument(
        "--objective",
        dest="objectives",
        action="append",
        default=[],
        metavar="FIGURE:max|min",
        help="a report figure to maximise or minimise (repeatable; default: "
        f"{' and '.join(DEFAULT_OBJECTIVES)}); any scalar of docs/report-schema.md, dotted",
    )
    p.add_argument(
        "--constraint",
        dest="constraints",
        action="append",
        default=[],
        metavar="FIGURE<=X",
        help="a bound on a report figure, e.g. ttft_seconds<=0.5 or hardware.area_mm2<=700",
    )
    p.add_argument("--batch", type=arg_types.integer(1, arg_types.MAX_BATCH), default=1, metavar="B")
    p.add_argument("--prompt-len", type=arg_types.integer(1, arg_types.MAX_TOKENS), default=2048, metavar="P")
    p.add_argument("--gen-len", type=arg_types.integer(1, arg_types.MAX_TOKENS), default=128, metavar="G")
    p.add_argument("--dtype", choices=list(PRECISIONS), default="bf16", metavar="DTYPE",
                   help=f"precision: {', '.join(PRECISIONS)} (default bf16)")
    p.add_argument(
        "--chips",
        "--tp",
        dest="chips",
        type=arg_types.integer(1, arg_types.MAX_CHIPS),
        metavar="N",
        help="tensor-parallel chips (default: the spec's count)",
    )
    p.add_argument(
        "--trials",
        type=arg_types.integer(1, MAX_TRIALS),
        default=32,
        metavar="N",
        help="finished trials the study should hold (a resumed search runs only the rest)",
    )
    p.add_argument(
        "--population",
        type=arg_types.integer(2, 4096),
        default=8,
        metavar="N",
        help="trials per generation, costed in parallel (default 8)",
    )
    p.add_argument("--seed", type=arg_types.integer(0, 2**31 - 1), default=0, metavar="S")
    p.add_argument("--jobs", type=arg_types.jobs, metavar="N", help="worker processes (default: CPUs)")
    add_executor_flags(p, "trials")
    p.add_argument(
        "--dir",
        default="tcpc-search",
        metavar="DIR",
        help="the study's folder (its SQLite storage); the same command resumes it",
    )
    p.add_argument(
        "--plot", metavar="FILE.png", help="write the trials and the front on the first two objectives"
    )
    p.add_argument("--json", metavar="FILE", help="write the front's rows as JSON")
    p.set_defaults(run=run)


def search_of(args: argparse.Namespace) -> Search:
    """The search the flags state, every flag checked before any work."""
    hw = load_hardware(args.hw, args.chips)
    schema = type(hw)
    if not args.ranges:
        raise CliError(
            "--range: give at least one spec value to search, e.g. --range chip.clock_hz=0.8e9:1.4e9"
        )
    ranges = tuple(parse_range(text, schema) for text in args.ranges)
    settings = tuple(parse_setting(text, schema) for text in args.settings)
    both = {r.address for r in ranges} & {a for a, _ in settings}
    if both:
        raise CliError(f"--set {sorted(both)[0]}: it is also searched (--range); give one or the other")
    objectives = tuple(parse_objective(t) for t in (args.objectives or DEFAULT_OBJECTIVES))
    if args.plot and len(objectives) < 2:
        raise CliError("--plot: needs two objectives (the plot's axes)")
    workload = Workload(
        args.model, args.hw, args.batch, args.prompt_len, args.gen_len, args.dtype, args.chips
    )
    constraints = tuple(parse_constraint(t) for t in args.constraints)
    return Search(workload, ranges, objectives, constraints, settings, args.seed, args.population)


def run(args: argparse.Namespace) -> int:
    check_outputs({"--plot": args.plot, "--json": args.json})
    search = search_of(args)
    executor = executor_of(args)
    jobs = args.jobs or min(search.population, os.cpu_count() or 1)
    with executor_session(args, jobs), Progress(
        TextColumn("search"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=console(stderr=True), transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task("trials", total=args.trials)
        outcome = run_search(search, Path(args.dir), args.trials, jobs,
                             lambda done, total: bar.update(task, completed=done), executor)  # fmt: skip
    study = outcome.study
    ok = feasible(study)
    front = pareto_front(search, ok)
    rows = front_rows(search, front)
    _print_front(search, rows, len(study.trials), len(ok), outcome)
    if args.json:
        write_atomically(args.json, json.dumps({"study": search.name, "definition": search.definition(),
                                                "front": rows}, indent=2) + "\n")  # fmt: skip
        announce(args.json, f"{len(rows)} front points")
    if args.plot:
        plot_front(search, study, Path(args.plot))
        announce(args.plot, "trials and the Pareto front")
    return 0


def _print_front(search: Search, rows: list[dict], trials: int, ok: int, outcome) -> None:
    out = console()
    searched = [r.address for r in search.ranges]
    goals = [o.figure for o in search.objectives]
    columns = ["trial", "hash", *searched, *goals]
    cells = [[str(r["trial"]), r["hash"], *(f"{r[a]:.4g}" for a in searched), *(f"{r[g]:.4g}" for g in goals)]
             for r in rows]  # fmt: skip
    title = f"Pareto front: {len(rows)} of {ok} feasible trials ({trials} in the study, {search.name})"
    out.print(line_table(title, columns, cells, out.width, left=("hash",)))
    for r in rows:
        out.print(f"{r['trial']}: {r['command']}", soft_wrap=True, highlight=False)
    if outcome.failed:
        out.print(f"{len(outcome.failed)} trials of this run failed; the first: {outcome.failed[0]}",
                  soft_wrap=True, highlight=False)  # fmt: skip
