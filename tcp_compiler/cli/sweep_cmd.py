"""`tcpc sweep MODEL... --batch 1,8,32 --set hbm.sustained_bytes_per_cycle=720,1440 ...`: a grid of
simulations or serving runs, on local worker processes or Ray, optionally kept in a Parquet store."""

from __future__ import annotations

import argparse
import json
import math
import os
from functools import partial
from pathlib import Path

from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from simulator.hardware import load_hardware
from tcp_compiler.cli import arg_types
from tcp_compiler.cli.console import console
from tcp_compiler.cli.executor_flags import add_executor_flags, executor_of
from tcp_compiler.cli.flags import add_flags, describe, from_args
from tcp_compiler.cli.output import announce, check_outputs, plural, write_atomically
from tcp_compiler.cli.study import SweepGrid, read_study
from tcp_compiler.errors import CliError
from tcp_compiler.observer import Observer
from tcp_compiler.provenance import provenance
from tcp_compiler.report.tables import line_table

MAX_POINTS = 4096  # simulations one sweep may ask for


def check_grid(grid: SweepGrid) -> None:
    """The rules between options (each option's own range is its parser's): a bounded grid."""
    if not grid.model:
        raise CliError("give a MODEL (or several), or --study FILE")
    prompts, outputs = grid.lengths()
    if grid.serve:
        if len(grid.requests) != 1 or grid.batch != (1,):
            raise CliError("--serve takes one --requests count and no --batch (the scheduler forms batches)")
        rates, clients = grid.loads()
        lists = (prompts, outputs, grid.dtype, grid.chips or [1], grid.pp, rates + clients)
    else:
        if grid.rate or grid.concurrency:
            raise CliError("--rate and --concurrency sweep serving runs: add --serve")
        for name, values in (("--prompt-len", prompts), ("--gen-len", outputs)):
            drawn = [str(v) for v in values if v.kind != "fixed"]
            if drawn:
                raise CliError(f"{name} {drawn[0]}: a simulation sweep takes fixed lengths (N); length "
                               "distributions are for --serve")  # fmt: skip
        lists = (grid.batch, prompts, outputs, grid.dtype, grid.chips or [1], grid.pp)
    settings = (values for _, values in grid.set)
    points = math.prod(len(v) for v in (grid.model, grid.hw, *lists, *settings))
    if points > MAX_POINTS:
        raise CliError(f"the grid has {points:,} points; a sweep runs at most {MAX_POINTS:,}")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="simulate a grid of models, specs, spec values, batch sizes, prompt lengths, chip counts "
        "and precisions in parallel",
        description="One simulation (or serving run) per point of the grid, on worker processes or Ray; "
        "one row per point with a hash of model + hardware + options + tcpc version. A point that fails "
        "reports its error in its row. With --store, rows are kept in a Parquet file and points it holds "
        "are skipped.",
    )
    p.add_argument("model", nargs="*", help="config.json, checkpoint dir or bundled name (several: each)")
    add_flags(p, SweepGrid)
    p.add_argument("--study", metavar="FILE.toml", help="read the grid (and store) from a study file")
    p.add_argument("--show", metavar="STORE", help="summarise a result store and exit")
    add_executor_flags(p, "points")
    p.add_argument("--jobs", type=arg_types.jobs, metavar="N", help="worker processes (default: CPUs)")
    p.add_argument("--csv", metavar="FILE", help="write the rows as CSV")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    p.add_argument("--plot", metavar="DIR", help="write throughput and latency plots into DIR")
    p.set_defaults(run=run)


def grid_of(args: argparse.Namespace) -> SweepGrid:
    """The grid the flags state, or the study file's (then no grid flag may be given)."""
    flags = from_args(SweepGrid, args, model=tuple(args.model))
    if args.study is None:
        return flags
    if flags != SweepGrid():
        raise CliError("--study FILE states the grid: give no MODEL or grid flags with it")
    return read_study(args.study)


def run(args: argparse.Namespace) -> int:
    # The sweep's modules (process pools, the serving model) are imported here: every tcpc command
    # builds this parser, few run it.
    from tcp_compiler.store import Store
    from tcp_compiler.sweep import FIGURES, columns, csv_text, grid, point_hash, run_point, run_sweep
    from tcp_compiler.sweep.serve import SERVE_FIGURES, run_serve_point, serve_grid

    if args.show:
        return show(args.show, console())
    executor = executor_of(args)
    g = grid_of(args)
    check_grid(g)
    check_outputs({"--csv": args.csv, "--json": args.json, "--store": g.store}, {"--plot": args.plot})
    hws = [load_hardware(hw) for hw in g.hw]  # a bad spec is an error for the whole sweep, not per point
    prompts, outputs = g.lengths()
    if g.serve:
        rates, clients = g.loads()
        points: list = serve_grid(g.model, g.hw, g.chips, g.dtype, g.requests[0], prompts, outputs, rates,
                                  clients, g.pp, g.set)  # fmt: skip
        run_row, figures, shown = run_serve_point, SERVE_FIGURES, SERVE_SHOWN
    else:
        prompt_lens, gen_lens = ([int(v.a) for v in values] for values in (prompts, outputs))
        points = grid(g.model, g.hw, g.chips, g.batch, prompt_lens, gen_lens, g.dtype, g.pp, g.set)
        run_row, figures, shown = run_point, FIGURES, SHOWN
    header = columns(points, figures)
    run_row = partial(run_row, describe=describe)  # a failed point's error names flags, as tcpc does
    store = Store(g.store) if g.store else None
    hashes = [point_hash(p) for p in points]
    stored = store.rows_of(set(hashes) & store.hashes()) if store else {}
    todo = [p for p, h in zip(points, hashes, strict=True) if h not in stored]
    if stored:
        Console(stderr=True).print(f"{g.store}: {plural(len(stored), 'point')} already stored, "
                                   f"{len(todo)} to run", soft_wrap=True)  # fmt: skip
    jobs = args.jobs or max(min(len(todo), os.cpu_count() or 1), 1)
    with Progress(
        TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=Console(stderr=True), transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task("sweep", total=len(todo))
        progress = _Bar(bar, task)
        if store is None:
            new = run_sweep(todo, jobs, progress, run_row, executor)
        else:
            with store:  # saved whatever ends the sweep (Ctrl-C included)
                new = run_sweep(todo, jobs, progress, run_row, executor, finished=store.add)
    by_hash = {**{h: {k: "" if v is None else v for k, v in r.items()} for h, r in stored.items()},
               **{r["hash"]: r for r in new}}  # fmt: skip
    rows = [by_hash[h] for h in hashes]
    headline = [{c: r.get(c, "") for c in header} for r in rows]
    _print(headline, _varying(headline, header, shown), bool(args.csv or args.json), console())
    if store is not None:
        announce(g.store, f"{plural(len(new), 'row')} added, {len(store.rows)} in all")
    if args.csv:
        write_atomically(args.csv, csv_text(headline, header))
        announce(args.csv, f"{len(rows)} rows")
    if args.json:
        origin = provenance(args.argv)  # on every row: the JSON is the rows, as the CSV is
        document = [{**r, "provenance": origin} for r in headline]
        write_atomically(args.json, json.dumps(document, indent=2) + "\n")
        announce(args.json, f"{len(rows)} rows")
    if args.plot:
        from tcp_compiler.sweep.plots import save_all, serve_sweep_figures, sweep_figures

        names = " / ".join(dict.fromkeys(h.name for h in hws))
        title = f"{', '.join(g.model)} on {names}"
        figures = (serve_sweep_figures if g.serve else sweep_figures)(headline, title)
        try:
            Path(args.plot).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CliError(f"{args.plot}: cannot create: {e.strerror}") from None
        written = save_all(figures, args.plot)
        announce(args.plot, ", ".join(p.name for p in written) or "no plots: no point to plot")
    failed = sum(r["status"] != "ok" for r in rows)
    return 1 if rows and failed == len(rows) else 0


def show(path: str, out: Console) -> int:
    """`--show STORE`: how many points, what varies between them, and their rows' headline figures."""
    from tcp_compiler.store import read_rows
    from tcp_compiler.sweep import FIGURES
    from tcp_compiler.sweep.serve import SERVE_FIGURES

    rows = [{k: "" if v is None else v for k, v in r.items()} for r in read_rows(path)]
    failed = sum(r.get("status") != "ok" for r in rows)
    out.print(f"{path}: {plural(len(rows), 'point')}, {failed} failed")
    not_configuration = {"hash", "status", "error", *FIGURES, *SERVE_FIGURES}
    configuration = [c for c in dict.fromkeys(k for r in rows for k in r)
                     if c not in not_configuration and not c.startswith("report.")]  # fmt: skip
    for column in configuration:
        values = list(dict.fromkeys(str(r.get(column, "")) for r in rows))
        if len(values) > 1:
            out.print(f"  {column}: {', '.join(values[:8])}{' ...' if len(values) > 8 else ''}")
    for kind, shown in (("simulate", SHOWN), ("serve", SERVE_SHOWN)):
        part = [r for r in rows if (r.get("requests", "") != "") == (kind == "serve")]
        if part:
            _print(part, _varying(part, configuration, shown), True, out)
    return 0


SHOWN = (  # column, header, format (pp: shown when a row has stages)
    ("chips", "chips", str), ("pp", "pp", str), ("batch", "batch", str), ("prompt_len", "prompt", str),
    ("gen_len", "gen", str),
    ("dtype", "dtype", str), ("ttft_seconds", "TTFT ms", lambda v: f"{float(v) * 1e3:.3f}"),
    ("tpot_seconds_mean", "TPOT ms", lambda v: f"{float(v) * 1e3:.3f}"),
    ("throughput_tokens_per_s", "tok/s", lambda v: f"{float(v):.1f}"),
)  # fmt: skip


SERVE_SHOWN = (  # column, header, format
    ("chips", "chips", str), ("pp", "pp", str), ("dtype", "dtype", str), ("prompt_len", "prompt", str),
    ("gen_len", "gen", str),
    ("rate", "req/s", str), ("concurrency", "clients", str),
    ("throughput_output_tokens_per_s", "out tok/s", lambda v: f"{float(v):,.0f}"),
    ("ttft_p50_s", "TTFT p50 ms", lambda v: f"{float(v) * 1e3:.1f}"),
    ("ttft_p99_s", "TTFT p99 ms", lambda v: f"{float(v) * 1e3:.1f}"),
    ("tpot_p50_s", "TPOT p50 ms", lambda v: f"{float(v) * 1e3:.2f}"),
    ("preemptions", "preempted", str),
)  # fmt: skip


def _varying(rows: list[dict], columns: tuple | list, shown: tuple) -> tuple:
    """The shown columns, after the model, spec and spec values (by address) when they vary."""
    extra = [c for c in ("model", "hw") if len({r.get(c) for r in rows}) > 1]
    extra += [c for c in columns if "." in c and not c.startswith("report.")]
    return (*((c, c, str) for c in extra), *shown)


class _Bar(Observer):
    """Points done, on the sweep's progress bar."""

    def __init__(self, bar: Progress, task: TaskID) -> None:
        self.bar, self.task = bar, task

    def progress(self, done: int, total: int) -> None:
        self.bar.update(self.task, completed=done)


def _print(rows: list[dict], shown: tuple, saved: bool, out: Console) -> None:
    """The rows' table at the console's width, and where a failed point's whole error is."""
    out.print(sweep_table(rows, shown, out.width))
    failed = sum(r["status"] != "ok" for r in rows)
    if failed:
        where = "in its row of --csv and --json" if saved else "with --csv FILE or --json FILE"
        out.print(f"{plural(failed, 'point')} failed; the whole error is {where}")


def sweep_table(rows: list[dict], shown: tuple, width: int) -> RenderableType:
    """One line per point, within `width` characters (tcp_compiler.report.tables): a failed point's
    error wraps in the status column, and columns that do not fit side by side stack below the
    first. The pp column appears when some point has pipeline stages."""
    if all(r.get("pp", 1) == 1 for r in rows):
        shown = tuple(c for c in shown if c[0] != "pp")
    cells = [
        [*(fmt(r.get(column, "")) if r.get(column, "") != "" else "-" for column, _, fmt in shown),
         "ok" if r["status"] == "ok" else f"failed: {status_line(r['error'])}"]
        for r in rows
    ]  # fmt: skip
    columns = (*(header for _, header, _ in shown), "status")
    return line_table(f"sweep: {len(rows)} points", columns, cells, width, elastic=len(shown),
                      left={"model", "hw", "dtype", "status"})  # fmt: skip


def status_line(error: str) -> str:
    """A failed point's error on one line: its first, less the `model: ` prefix every row repeats."""
    first = error.strip().splitlines()[0] if error.strip() else "error"
    prefix, _, rest = first.partition(": ")
    return rest if rest and " " not in prefix else first
