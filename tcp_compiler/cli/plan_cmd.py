"""`tcpc plan MODEL --chips N --slo-ttft S --slo-tpot S`: every tp x pp x dp layout of N chips,
the ones that fit searched for their highest rate under the SLOs, ranked by goodput per card, each
with the `tcpc serve` command that reproduces it (tcp_compiler.planner)."""

from __future__ import annotations

import argparse
import shlex

from rich.table import Table

from simulator.hardware import load_hardware
from simulator.numbers import duration
from tcp_compiler.cli import arg_types
from tcp_compiler.cli.console import console
from tcp_compiler.cli.flags import add_flags, from_args
from tcp_compiler.cli.serve_cmd import check_slos, slo_seconds
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.model import bundled_models, load_model
from tcp_compiler.frontend.precision import KV_DTYPES, precision
from tcp_compiler.planner import Candidate, plan
from tcp_compiler.serve.max_rate import SloPercentile, searched
from tcp_compiler.serve.workload import Workload


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help="the best tp x pp x dp layout of N chips for a model under latency SLOs",
        description="Every tensor x pipeline x data-parallel layout of --chips N: those that fit are "
        "searched for the highest Poisson rate whose latency percentiles meet the SLOs (as `tcpc serve "
        "--max-rate`), ranked by goodput per card, each with the `tcpc serve` command reproducing it.",
    )
    p.add_argument("model", help=f"config.json, checkpoint dir or bundled name: {', '.join(bundled_models())}"
                   )  # fmt: skip
    p.add_argument("--hw", default="rngd", metavar="NAME|FILE", help="hardware spec (default rngd)")
    p.add_argument("--chips", type=arg_types.chips, required=True, metavar="N", help="chips to lay out")
    arg_types.add_dtype(p, "bf16", "precision (default bf16)")
    p.add_argument("--kv-dtype", choices=sorted(KV_DTYPES), help="KV cache dtype (default: the precision's)")
    add_flags(p.add_argument_group("requests (each search's; its arrivals are Poisson)"), Workload)
    slo = p.add_argument_group("SLOs")
    slo.add_argument("--slo-ttft", type=slo_seconds, metavar="S", help="TTFT SLO in seconds")
    slo.add_argument("--slo-tpot", type=slo_seconds, metavar="S", help="TPOT SLO in seconds")
    add_flags(slo, SloPercentile)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    pct = from_args(SloPercentile, args).slo_percentile
    check_slos(args, pct, "tcpc plan")
    if args.concurrency is not None or args.rate is not None or args.trace_file is not None:
        raise CliError("tcpc plan chooses each layout's Poisson rate: drop --rate, --concurrency, "
                       "--trace-file")  # fmt: skip
    model = load_model(args.model)
    hw = load_hardware(args.hw)
    prec = precision(args.dtype, kv_dtype=args.kv_dtype)
    work, slo = searched(from_args(Workload, args), args.slo_ttft, args.slo_tpot, pct)
    rows = plan(model.config, hw, prec, args.chips, work, slo)
    out = console()
    table = Table(show_edge=False, pad_edge=False)
    names = ("tp", "pp", "dp", "rate/s", f"TTFT p{pct:g}", f"TPOT p{pct:g}", "goodput/s per card", "margin",
             "runs")  # fmt: skip
    for name in names:
        table.add_column(name, justify="right")
    for c in rows:
        cells = [str(c.layout.tp), str(c.layout.pp), str(c.layout.dp)]
        if c.found is None:
            table.add_row(*cells, c.why, *[""] * 5)
            continue
        best = c.found.best
        margin = "capacity" if c.found.capacity_bound else f"+{c.found.margin:.1%}"
        figures = (f"{best.rate:.3g}", duration(best.ttft_s, 2), duration(best.tpot_s, 2),
                   f"{c.goodput_per_card:.3g}", margin, str(c.found.simulations))  # fmt: skip
        table.add_row(*cells, *figures)
    meeting = sum(c.found is not None for c in rows)
    out.print(f"[bold]{model.config.name}[/] on {args.chips} x {hw.name}, {prec.name}: {len(rows)} layouts, "
              f"{meeting} meeting the SLOs; {work.requests:,} requests per run, the first {slo.warmup:,} "
              "left out as warm-up")  # fmt: skip
    out.print(table)
    for rank, c in enumerate((c for c in rows if c.found is not None), 1):
        out.print(f"{rank}. {command(args, c, work.requests)}", soft_wrap=True)
    return 0


def command(args: argparse.Namespace, c: Candidate, requests: int) -> str:
    """The `tcpc serve` command that serves candidate `c`'s found rate."""
    assert c.found is not None
    words = ["tcpc", "serve", args.model, "--hw", args.hw, "--tp", str(c.layout.tp), "--pp", str(c.layout.pp),
             "--dp", str(c.layout.dp), "--dtype", args.dtype, "--requests", str(requests), "--prompt-len",
             str(args.prompt_len), "--gen-len", str(args.gen_len), "--seed", str(args.seed),
             "--rate", repr(c.found.best.rate)]  # fmt: skip
    words += ["--kv-dtype", args.kv_dtype] if args.kv_dtype else []
    words += ["--shared-prefix", str(args.shared_prefix)] if args.shared_prefix else []
    words += [w for flag, v in (("--slo-ttft", args.slo_ttft), ("--slo-tpot", args.slo_tpot)) if v is not None
              for w in (flag, repr(v))]  # fmt: skip
    return shlex.join(words)
