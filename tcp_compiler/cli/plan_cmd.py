"""`tcpc plan MODEL --chips N --slo-ttft S --slo-tpot S`: every tp x pp x dp layout of N chips or
fewer, crossed with the precisions, KV dtypes, sequences at once and prefill chunks listed; those
that fit searched for their highest rate under the SLOs, ranked by goodput per card, the best
each with the `tcpc serve` command that reproduces it (tcp_compiler.planner)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from simulator.hardware import load_hardware
from simulator.numbers import duration
from tcp_compiler.cli import arg_types
from tcp_compiler.cli.console import console
from tcp_compiler.cli.executor_flags import add_executor_flags, executor_of
from tcp_compiler.cli.flags import add_flags, flag_type, from_args
from tcp_compiler.cli.output import announce, check_outputs, write_atomically
from tcp_compiler.cli.serve_cmd import check_slos, slo_seconds
from tcp_compiler.cli.study import _dtypes, _each, _names
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.model import bundled_models, load_model
from tcp_compiler.frontend.precision import KV_DTYPES
from tcp_compiler.planner import OK, Context, Result, Space, plan, tasks
from tcp_compiler.provenance import provenance
from tcp_compiler.serve.max_rate import SloPercentile, searched
from tcp_compiler.serve.options import ServeOptions
from tcp_compiler.serve.workload import Workload

TOP = 10  # configurations listed with their commands, unless --top


def _kv_dtypes(text: str) -> tuple[str, ...]:
    values = _names(text)
    bad = [v for v in values if v not in KV_DTYPES]
    if bad:
        raise ValueError(f"{bad[0]!r} is not one of {', '.join(KV_DTYPES)}")
    return values


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help="the best layout and server settings for a model on up to N chips under latency SLOs",
        description="Every tensor x pipeline x data-parallel layout of --chips N or fewer, crossed with "
        "the --dtype, --kv-dtype, --max-seqs and --max-batch-tokens values listed: those that fit are "
        "searched for the highest Poisson rate whose latency percentiles meet the SLOs (as `tcpc serve "
        "--max-rate`), ranked by goodput per card, the best each with the `tcpc serve` command reproducing "
        "it. docs/planning.md.",
    )
    p.add_argument("model", help=f"config.json, checkpoint dir or bundled name: {', '.join(bundled_models())}"
                   )  # fmt: skip
    p.add_argument("--hw", default="rngd", metavar="NAME|FILE", help="hardware spec of a chip (default rngd)")
    p.add_argument("--chips", type=arg_types.chips, required=True, metavar="N", help="chips to lay out")
    p.add_argument("--all-chips", action="store_true", help="only layouts of all N chips (default: also "
                   "fewer, which win when they serve as much per card)")  # fmt: skip
    space = p.add_argument_group("settings searched (comma-separated lists: every combination)")
    space.add_argument("--dtype", type=flag_type(_dtypes), default=("bf16",), metavar="D,...",
                       help="precisions (default bf16)")  # fmt: skip
    space.add_argument("--kv-dtype", type=flag_type(_kv_dtypes), default=(None,), metavar="D,...",
                       help=f"KV cache dtypes: {', '.join(KV_DTYPES)} (default: the precision's)"
                       )  # fmt: skip
    defaults = ServeOptions()
    space.add_argument("--max-seqs", type=flag_type(_each(ServeOptions, "max_seqs")), metavar="S,...",
                       default=(64, defaults.max_seqs),
                       help=f"sequences running at once (default 64,{defaults.max_seqs})")  # fmt: skip
    space.add_argument("--max-batch-tokens", type=flag_type(_each(ServeOptions, "max_batch_tokens")),
                       metavar="T,...", default=(512, defaults.max_batch_tokens),
                       help=f"tokens per iteration: prefill chunks (default 512,{defaults.max_batch_tokens})")
    add_flags(p.add_argument_group("requests (each search's; its arrivals are Poisson)"), Workload)
    slo = p.add_argument_group("SLOs")
    slo.add_argument("--slo-ttft", type=slo_seconds, metavar="S", help="TTFT SLO in seconds")
    slo.add_argument("--slo-tpot", type=slo_seconds, metavar="S", help="TPOT SLO in seconds")
    add_flags(slo, SloPercentile)
    run_on = p.add_argument_group("where the searches run")
    add_executor_flags(run_on, "the searches (one per layout and precision)")
    run_on.add_argument("--jobs", type=arg_types.jobs, metavar="N", help="worker processes (default: CPUs)")
    out = p.add_argument_group("outputs")
    out.add_argument("--top", type=arg_types.top, default=TOP, metavar="K",
                     help=f"configurations listed, each with its command (default {TOP})")  # fmt: skip
    out.add_argument("--json", metavar="FILE", help="write every candidate's result and the commands listed")
    out.add_argument("--plot", metavar="DIR", help="write plan.png: throughput per card against TPOT for "
                     "every candidate, the Pareto frontier marked")  # fmt: skip
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    pct = from_args(SloPercentile, args).slo_percentile
    check_slos(args, pct, "tcpc plan")
    if args.concurrency is not None or args.rate is not None or args.trace_file is not None:
        raise CliError("tcpc plan chooses each layout's Poisson rate: drop --rate, --concurrency, "
                       "--trace-file")  # fmt: skip
    check_outputs({"--json": args.json}, {"--plot": args.plot})
    executor = executor_of(args)
    model = load_model(args.model)
    hw = load_hardware(args.hw)
    work, slo = searched(from_args(Workload, args), args.slo_ttft, args.slo_tpot, pct)
    space = Space(args.chips, not args.all_chips, tuple(args.dtype), tuple(args.kv_dtype),
                  tuple(args.max_seqs), tuple(args.max_batch_tokens))  # fmt: skip
    candidates = len(space.settings())
    jobs = args.jobs or max(min(len(tasks(space.settings())), os.cpu_count() or 1), 1)
    with Progress(TextColumn("plan"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:  # fmt: skip
        task = bar.add_task("plan", total=None)
        (results,) = plan(Context(args.model, args.hw, work, (slo,)), space, jobs, executor,
                          lambda done, total: bar.update(task, completed=done, total=total))  # fmt: skip
    out = console()
    meeting = [r for r in results if r.status == OK]
    counts = {s: sum(r.status == s for r in results) for s in dict.fromkeys(r.status for r in results)}
    out.print(f"[bold]{model.config.name}[/] on up to {args.chips} x {hw.name}: {candidates} candidates "
              f"({', '.join(f'{n} {s}' for s, n in counts.items())}); {work.requests:,} requests per run and "
              f"replica, the first {slo.warmup:,} left out as warm-up", soft_wrap=True)  # fmt: skip
    out.print(_table(results[: args.top], pct))
    commands = [command(args, r) for r in meeting[: args.top]]
    for rank, line in enumerate(commands, 1):
        out.print(f"{rank}. {line}", soft_wrap=True)
    if args.json:
        document = {"model": model.config.name, "hardware": hw.name, "chips": args.chips,
                    "requests_per_replica": work.requests, "warmup_requests_per_replica": slo.warmup,
                    "slo_ttft_s": slo.ttft_s, "slo_tpot_s": slo.tpot_s, "slo_percentile": pct,
                    "candidates": [r.row() for r in results], "commands": commands,
                    "provenance": provenance(args.argv)}  # fmt: skip
        write_atomically(args.json, json.dumps(document, indent=1) + "\n")
        announce(args.json, "every candidate's result")
    if args.plot:
        from tcp_compiler.sweep.plots import plan_figures, save_all

        title = f"{model.config.name} on up to {args.chips} x {hw.name}"
        try:
            Path(args.plot).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CliError(f"{args.plot}: cannot create: {e.strerror}") from None
        save_all(plan_figures([r.row() for r in results], title, pct, slo.tpot_s), args.plot)
        announce(args.plot, "plan.png")
    return 0


def _table(results: list[Result], pct: float) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    names = ("tp", "pp", "dp", "dtype", "KV", "seqs", "chunk", "rate/s", f"TTFT p{pct:g}", f"TPOT p{pct:g}",
             "goodput/s per card", "tokens/s per card", "margin", "runs")  # fmt: skip
    for name in names:
        table.add_column(name, justify="left" if name in ("dtype", "KV") else "right")
    for r in results:
        s = r.setting
        cells = [str(s.layout.tp), str(s.layout.pp), str(s.layout.dp), s.dtype, s.kv_dtype, str(s.max_seqs),
                 str(s.max_batch_tokens)]  # fmt: skip
        if r.status != OK:
            table.add_row(*cells, f"{r.status}: {r.why}", *[""] * 6)
            continue
        margin = "capacity" if r.capacity_bound else f"+{r.margin:.1%}"
        table.add_row(*cells, f"{r.rate_per_s:.3g}", duration(r.ttft_s, 2), duration(r.tpot_s, 2),
                      f"{r.goodput_per_card:.3g}", f"{r.output_tokens_per_s_per_card:,.0f}", margin,
                      str(r.simulations))  # fmt: skip
    return table


def command(args: argparse.Namespace, r: Result) -> str:
    """The `tcpc serve` command that serves candidate `r` at its found rate."""
    s = r.setting
    words = ["tcpc", "serve", args.model, "--hw", args.hw, "--tp", str(s.layout.tp), "--pp", str(s.layout.pp),
             "--dp", str(s.layout.dp), "--dtype", s.dtype, "--kv-dtype", s.kv_dtype, "--max-seqs",
             str(s.max_seqs), "--max-batch-tokens", str(s.max_batch_tokens), "--requests", str(r.requests),
             "--prompt-len", str(args.prompt_len), "--gen-len", str(args.gen_len), "--seed", str(args.seed),
             "--rate", repr(r.rate_per_s)]  # fmt: skip
    words += ["--shared-prefix", str(args.shared_prefix)] if args.shared_prefix else []
    words += [w for flag, v in (("--slo-ttft", args.slo_ttft), ("--slo-tpot", args.slo_tpot)) if v is not None
              for w in (flag, repr(v))]  # fmt: skip
    return shlex.join(words)
