"""`tcpc sweep MODEL --batch 1,8,32 --prompt-len 128,2048 ...`: a grid of simulations in parallel."""

from __future__ import annotations

import argparse
import json
import math
import os
from functools import partial

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from simulator.hardware import load_hardware
from simulator.numbers import duration
from tcp_compiler.cli import arg_types
from tcp_compiler.cli.console import console
from tcp_compiler.cli.flags import declared, describe, help_of, list_type
from tcp_compiler.cli.output import announce, check_outputs, plural, write_atomically
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.provenance import provenance
from tcp_compiler.report.tables import line_table
from tcp_compiler.serve.workload import DEFAULT_RATE, Workload

MAX_POINTS = 4096  # simulations one sweep may ask for
PROMPT_LEN, GEN_LEN = 2048, 128  # a simulation sweep's lengths (a serving sweep's: serve's Workload)


def check_args(args: argparse.Namespace) -> None:
    """The rules between flags (each flag's own range is its argparse type): a bounded grid."""
    lengths = (args.prompt_len or [PROMPT_LEN], args.gen_len or [GEN_LEN])
    if args.serve:
        if len(args.requests) != 1 or args.batch != [1]:
            raise CliError("--serve takes one --requests count and no --batch (the scheduler forms batches)")
        lists = (*lengths, args.dtype, args.chips or [1], args.pp, (args.rate + args.concurrency) or [1])
    else:
        if args.rate or args.concurrency:
            raise CliError("--rate and --concurrency sweep serving runs: add --serve")
        for name, values in (("--prompt-len", args.prompt_len), ("--gen-len", args.gen_len)):
            drawn = next((v for v in values or () if v.kind != "fixed"), None)
            if drawn is not None:
                raise CliError(f"{name}: {drawn} is a length distribution, which serving runs draw from "
                               "(add --serve); a simulation takes token counts")  # fmt: skip
        lists = (args.batch, *lengths, args.dtype, args.chips or [1], args.pp)
    points = math.prod(len(v) for v in lists)
    if points > MAX_POINTS:
        raise CliError(f"the grid has {points:,} points; a sweep runs at most {MAX_POINTS:,}")


def _dtypes(text: str) -> list[str]:
    values = [t.strip() for t in text.split(",") if t.strip()]
    bad = [v for v in values if v not in PRECISIONS]
    if bad or not values:
        raise argparse.ArgumentTypeError(
            f"--dtype: {bad[0] if bad else text!r} is not one of {', '.join(PRECISIONS)}"
        )
    return values


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="simulate a grid of batch sizes, prompt lengths, chip counts and precisions in parallel",
        description="One simulation per point of the grid, in worker processes; one row per point with "
        "a hash of model + hardware + options. A point that fails reports its error in its row.",
    )
    p.add_argument("model", help="config.json, checkpoint dir or bundled name")
    p.add_argument(
        "--batch", type=arg_types.integers(1, arg_types.MAX_BATCH), default=[1], metavar="B,...",
        help="sequences per batch, comma-separated (default 1)",
    )  # fmt: skip
    p.add_argument(
        "--prompt-len", type=list_type(Workload, "prompt_len"), metavar="P,...",
        help=f"comma-separated (default {PROMPT_LEN}); with --serve, {help_of(Workload, 'prompt_len')}",
    )  # fmt: skip
    p.add_argument(
        "--gen-len", type=list_type(Workload, "gen_len"), metavar="G,...",
        help=f"comma-separated (default {GEN_LEN}); with --serve, {help_of(Workload, 'gen_len')}",
    )  # fmt: skip
    p.add_argument(
        "--chips", "--tp", dest="chips", type=arg_types.integers(1, arg_types.MAX_CHIPS), metavar="N,...",
        help="comma-separated tensor-parallel chips per pipeline stage (default: the spec's count)",
    )  # fmt: skip
    p.add_argument(
        "--pp", type=arg_types.integers(1, arg_types.MAX_CHIPS), default=[1], metavar="P,...",
        help="pipeline stages, comma-separated (default 1): each point runs on chips x stages",
    )  # fmt: skip
    p.add_argument(
        "--dtype", type=_dtypes, default=["bf16"], metavar="D,...",
        help=f"precisions, comma-separated: {', '.join(PRECISIONS)} (default bf16)",
    )  # fmt: skip
    p.add_argument("--hw", default="rngd", metavar="NAME|FILE", help="hardware spec (default rngd)")
    serving = p.add_argument_group("serving sweeps (--serve): one `tcpc serve` run per load x chips x dtype")
    serving.add_argument("--serve", action="store_true", help="sweep serving runs instead of one batch")
    serving.add_argument(
        "--rate", type=list_type(Workload, "rate"), default=[], metavar="R,...",
        help=f"comma-separated: {help_of(Workload, 'rate')}",
    )  # fmt: skip
    serving.add_argument(
        "--concurrency", type=list_type(Workload, "concurrency"), default=[], metavar="C,...",
        help=f"comma-separated: {help_of(Workload, 'concurrency')}",
    )  # fmt: skip
    serving.add_argument(
        "--requests", type=list_type(Workload, "requests"), default=[declared(Workload, "requests")[0]],
        metavar="N", help=f"{help_of(Workload, 'requests')} per serving run",
    )  # fmt: skip
    p.add_argument("--jobs", type=arg_types.jobs, metavar="N", help="worker processes (default: CPUs)")
    p.add_argument("--csv", metavar="FILE", help="write the rows as CSV")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    p.add_argument("--plot", metavar="DIR", help="write throughput and latency plots into DIR")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # The sweep's modules (process pools, the serving model) are imported here: every tcpc command
    # builds this parser, few run it.
    from tcp_compiler.serve.sweep import SERVE_COLUMNS, run_serve_point, serve_grid
    from tcp_compiler.sweep import COLUMNS, csv_text, grid, run_point, run_sweep

    check_args(args)
    check_outputs({"--csv": args.csv, "--json": args.json}, {"--plot": args.plot})
    hw = load_hardware(args.hw)  # a bad spec is an error for the whole sweep, not per point
    chips = args.chips or [hw.system.chips]
    if args.serve:
        work = Workload()
        rates = args.rate or ([] if args.concurrency else [DEFAULT_RATE])
        points: list = serve_grid(args.model, args.hw, chips, args.dtype, args.requests[0],
                                  [str(v) for v in args.prompt_len or [work.prompt_len]],
                                  [str(v) for v in args.gen_len or [work.gen_len]], rates, args.concurrency,
                                  args.pp)  # fmt: skip
        run_row, columns, shown = run_serve_point, SERVE_COLUMNS, SERVE_SHOWN
    else:
        prompt, gen = ([int(v.a) for v in values or [length]] for values, length in
                       ((args.prompt_len, PROMPT_LEN), (args.gen_len, GEN_LEN)))  # fmt: skip
        points = grid(args.model, args.hw, chips, args.batch, prompt, gen, args.dtype, args.pp)
        run_row, columns, shown = run_point, COLUMNS, SHOWN
    run_row = partial(run_row, describe=describe)  # a failed point's error names flags, as tcpc does
    jobs = args.jobs or min(len(points), os.cpu_count() or 1)
    if jobs < 1:
        raise CliError(f"--jobs must be at least 1, got {jobs}")
    with Progress(
        TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=Console(stderr=True), transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task("sweep", total=len(points))
        rows = run_sweep(points, jobs, lambda done, total: bar.update(task, completed=done), run_row)
    _print(rows, shown, saved=bool(args.csv or args.json))
    if args.csv:
        write_atomically(args.csv, csv_text(rows, columns))
        announce(args.csv, f"{len(rows)} rows")
    if args.json:
        origin = provenance(args.argv)  # on every row: the JSON is the rows, as the CSV is
        write_atomically(args.json, json.dumps([{**r, "provenance": origin} for r in rows], indent=2) + "\n")
        announce(args.json, f"{len(rows)} rows")
    if args.plot:
        from pathlib import Path

        from tcp_compiler.sweep_plots import serve_sweep_plots, sweep_plots

        try:
            Path(args.plot).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CliError(f"{args.plot}: cannot create: {e.strerror}") from None
        plots = serve_sweep_plots if args.serve else sweep_plots
        written = plots(rows, args.plot, f"{args.model} on {hw.name}")
        announce(args.plot, ", ".join(p.name for p in written))
    failed = sum(r["status"] != "ok" for r in rows)
    return 1 if failed == len(rows) else 0


SHOWN = (  # column, header, format; the first _CONFIG ones are the point's configuration
    ("chips", "chips", str), ("pp", "pp", str), ("batch", "batch", str), ("prompt_len", "prompt", str),
    ("gen_len", "gen", str), ("dtype", "dtype", str),
    ("ttft_seconds", "TTFT", lambda v: duration(float(v))),
    ("tpot_seconds_mean", "TPOT", lambda v: duration(float(v))),
    ("throughput_tokens_per_s", "tok/s", lambda v: f"{float(v):.1f}"),
)  # fmt: skip


SERVE_SHOWN = (  # column, header, format; the first _CONFIG ones are the point's configuration
    ("chips", "chips", str), ("pp", "pp", str), ("dtype", "dtype", str), ("prompt_len", "prompt", str),
    ("gen_len", "gen", str), ("rate", "req/s", str), ("concurrency", "clients", str),
    ("throughput_output_tokens_per_s", "out tok/s", lambda v: f"{float(v):,.0f}"),
    ("ttft_p50_s", "TTFT p50", lambda v: duration(float(v))),
    ("ttft_p99_s", "TTFT p99", lambda v: duration(float(v))),
    ("tpot_p50_s", "TPOT p50", lambda v: duration(float(v))),
    ("preemptions", "preempted", str),
)  # fmt: skip
_CONFIG = {"chips", "pp", "batch", "prompt_len", "gen_len", "dtype", "rate", "concurrency"}


def _print(rows: list[dict], shown: tuple, saved: bool) -> None:
    """One row per point, named by the configuration values that vary; those the points share go
    into a line above (a load the sweep does not vary, `-` in every row, is left out). A status column
    when some point failed: its error wraps in its row (--csv and --json hold all of it)."""
    config = [c for c in shown if c[0] in _CONFIG]
    varying = [c for c in config if len({cell(r, c[0], c[2]) for r in rows}) > 1]
    shared = [(header, cell(rows[0], column, fmt)) for column, header, fmt in config if (column, header, fmt)
              not in varying]  # fmt: skip
    fixed = [f"{h} {value}" for h, value in shared if value != "-" and (h, value) != ("pp", "1")]
    columns = [*varying, *(c for c in shown if c[0] not in _CONFIG)]
    failed = sum(r["status"] != "ok" for r in rows)
    cells = [
        [*(cell(r, column, fmt) for column, _, fmt in columns),
         *(["ok" if r["status"] == "ok" else f"failed: {status_line(r['error'])}"] if failed else [])]
        for r in rows
    ]  # fmt: skip
    out = console()
    if fixed:
        out.print(f"every point: {', '.join(fixed)}")
    title = f"sweep: {plural(len(rows), 'point')}"
    headers = (*(header for _, header, _ in columns), *(["status"] if failed else []))
    # columns holding words (a length distribution, an error) align left, numbers right
    words = {h for i, h in enumerate(headers) if any(not r[i][:1].isdigit() and r[i] != "-" for r in cells)}
    out.print(line_table(title, headers, cells, out.width, elastic=len(columns) if failed else 0,
                         left={"dtype", "status", *words}, keys=max(len(varying), 1)))  # fmt: skip
    if failed:
        where = "in its row of --csv and --json" if saved else "with --csv FILE or --json FILE"
        out.print(f"{plural(failed, 'point')} failed; the whole error is {where}")


def cell(row: dict, column: str, fmt) -> str:
    """A row's value as shown: `-` for a value the point does not have."""
    return fmt(row[column]) if row[column] != "" else "-"


def status_line(error: str) -> str:
    """A failed point's error on one line: its first, less the `model: ` prefix every row repeats."""
    first = error.strip().splitlines()[0] if error.strip() else "error"
    prefix, _, rest = first.partition(": ")
    return rest if rest and " " not in prefix else first
