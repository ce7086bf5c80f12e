"""`tcpc serve [MODEL]`: a serving run (continuous batching, chunked prefill, paged KV) and its
request-level latency and throughput, every iteration timed by tcpc's compiler and engine."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from simulator.spec import Spec
from tcp_compiler.cli import arg_types, parallel
from tcp_compiler.cli.console import console
from tcp_compiler.cli.flags import add_flags, flag_type, from_args
from tcp_compiler.cli.output import announce, check_outputs, write_atomically
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.model import bundled_models, load_model
from tcp_compiler.frontend.precision import KV_DTYPES, precision
from tcp_compiler.observer import QUIET, Observer
from tcp_compiler.option_fields import MAX_SEQUENCES, positive_number
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.provenance import provenance
from tcp_compiler.report.energy import at_clock
from tcp_compiler.report.serve_build import capped_clock, serve_report
from tcp_compiler.report.serve_terminal import print_serve_report
from tcp_compiler.report.serve_types import MaxRate, ServeRun
from tcp_compiler.report.vllm_result import vllm_result
from tcp_compiler.serve import IterationCosts, Request, ServeOptions, ServeResult, serve
from tcp_compiler.serve.max_rate import (
    Found,
    Slo,
    SloPercentile,
    at_rate,
    max_rate,
    measured_requests,
    searched,
    warmup_requests,
)  # fmt: skip
from tcp_compiler.serve.options import Buckets, Shapes
from tcp_compiler.serve.server import serving_costs
from tcp_compiler.serve.workload import DEFAULT_RATE, Workload

DEFAULT_MODEL = "llama-3.1-8b"
RESULT_FORMATS = ("tcpc", "vllm")
MAX_SECONDS = 1e6  # an SLO
slo_seconds = flag_type(positive_number(MAX_SECONDS))


def add_parser(subparsers) -> None:
    work = Workload()
    p = subparsers.add_parser(
        "serve",
        help="simulate a server: continuous batching, chunked prefill, paged KV, TTFT / TPOT / goodput",
        description="Serve a stream of requests with a batching scheduler and a paged KV cache, each "
        "iteration compiled and timed cycle by cycle; reports throughput and latency percentiles. "
        f"With no arguments: {DEFAULT_MODEL} on rngd, {work.requests} requests (prompt {work.prompt_len}, "
        f"output {work.gen_len}) arriving at {DEFAULT_RATE:g}/s, chunked prefill. docs/serving.md.",
    )
    p.add_argument(
        "model",
        nargs="?",
        default=DEFAULT_MODEL,
        help=f"config.json, checkpoint dir or bundled name: {', '.join(bundled_models())}",
    )
    p.add_argument("--hw", default="rngd", metavar="NAME|FILE", help="hardware spec (default rngd)")
    parallel.add_arguments(p, micro_batches=False)
    arg_types.add_dtype(p, "bf16", "precision (default bf16)")
    p.add_argument("--kv-dtype", choices=sorted(KV_DTYPES), help="KV cache dtype (default: the precision's)")
    add_flags(p.add_argument_group("requests"), Workload)
    add_flags(p.add_argument_group("server"), ServeOptions)
    grids = p.add_argument_group("cost grids (1: exact; docs/serving.md gives the error of each)")
    add_flags(grids, Buckets, suffix="_bucket")
    shapes = p.add_argument_group("static shapes the runtime compiled (inputs padded up to them)")
    add_flags(shapes, Shapes, suffix="_shapes")
    arg_types.add_power_cap(p, "every iteration", "served")
    out = p.add_argument_group("outputs")
    out.add_argument("--slo-ttft", type=slo_seconds, metavar="S", help="TTFT SLO in seconds, for goodput")
    out.add_argument("--slo-tpot", type=slo_seconds, metavar="S", help="TPOT SLO in seconds, for goodput")
    out.add_argument(
        "--max-rate", action="store_true", help="find the highest Poisson rate whose --slo-percentile "
        "latencies meet --slo-ttft and --slo-tpot (bisection over rates, seeded requests, warm-up left out; "
        "docs/serving.md) and report the run at it",
    )  # fmt: skip
    add_flags(out, SloPercentile)
    out.add_argument("--json", metavar="FILE", help="write the figures, every request and every iteration")
    out.add_argument(
        "--result-format",
        choices=RESULT_FORMATS,
        default="tcpc",
        help="tcpc: the serving report; vllm: it and the keys vLLM `bench serve --save-result "
        "--save-detailed` writes (input_lens, ttfts, itls, mean_tpot_ms, ...), for `tcpc validate` and "
        "vLLM's tools (default tcpc; needs --json)",
    )
    out.add_argument(
        "--plot", metavar="DIR", help="write latency CDFs, throughput, KV occupancy and power plots"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_outputs({"--json": args.json}, {"--plot": args.plot})
    vllm = args.result_format == "vllm"
    if vllm and not args.json:
        raise CliError("--result-format vllm writes the vLLM keys into the --json FILE: give --json")
    model = load_model(args.model)
    hw, tp = parallel.system(args)
    prec = precision(args.dtype, kv_dtype=args.kv_dtype)
    work = from_args(Workload, args)
    pct = from_args(SloPercentile, args).slo_percentile
    options = from_args(ServeOptions, args, buckets=from_args(Buckets, args, "_bucket"),
                        shapes=from_args(Shapes, args, "_shapes"), concurrency=args.concurrency)  # fmt: skip

    def served(spec: Spec, requests: list[Request], costs: IterationCosts | None = None) -> ServeResult:
        bar = _Bar() if costs is None else QUIET  # a search's many runs: no bar each
        try:
            return serve(model.config, spec, prec, requests, options, CompileOptions(chips=tp), costs,
                         args.pp, observer=bar, token_gaps=vllm)  # fmt: skip
        finally:
            if isinstance(bar, _Bar):
                bar.stop()

    cap = None if args.power_cap is None else arg_types.watts(args.power_cap, hw)
    found = None
    if args.max_rate:
        _check_search(args, pct)
        drawn, slo = searched(work, args.slo_ttft, args.slo_tpot, pct)
        costs = serving_costs(model.config, hw, prec, CompileOptions(chips=tp), options, args.pp)
        found = max_rate(lambda rate: served(hw, at_rate(drawn, rate), costs), slo)
        result = found.best.result
    else:
        requests = work.load()
        result = served(hw, requests)
        if cap is not None:
            result = _within_cap(result, cap, lambda spec: served(spec, requests))
    rate = found.best.rate if found else None
    report = serve_report(result, args.slo_ttft, args.slo_tpot, _run_info(result, args, rate), cap)
    if found is not None:
        report = dataclasses.replace(report, max_rate=_max_rate(found, slo))
    print_serve_report(report, console())
    if args.json:
        document = {**report.to_dict(), **(vllm_result(result, report) if vllm else {}),
                    "provenance": provenance(args.argv)}  # fmt: skip
        write_atomically(args.json, json.dumps(document, indent=1) + "\n")
        announce(args.json, "serving report, docs/serving.md")
    if args.plot:
        from tcp_compiler.serve.plots import write_plots

        names = write_plots(result, args.plot)
        announce(args.plot, ", ".join(names))
    return 0


CAP_ROUNDS = 8  # serving again at a lower clock settles in one or two rounds


def _within_cap(result: ServeResult, cap_w: float, served: Callable[[Spec], ServeResult]) -> ServeResult:
    """Served again at a lower clock (and its DVFS voltage) until no iteration draws more than
    `cap_w` per chip: each round takes the clock at which the last run's iterations would stay
    within it; a slower server forms other batches, so the new run is checked in turn (each round
    only lowers the clock)."""
    base = result.hardware
    for _ in range(CAP_ROUNDS):
        clock = capped_clock(result, cap_w)
        if clock >= result.hardware.chip.clock_hz:
            break
        result = served(at_clock(base, clock, cap_w))
    return result


def check_slos(args: argparse.Namespace, pct: float, what: str) -> None:
    """A rate search (`what`) needs an SLO to meet, and a percentile it has the requests for."""
    if args.slo_ttft is None and args.slo_tpot is None:
        raise CliError(f"{what} searches for the highest rate meeting SLOs: give --slo-ttft or --slo-tpot")
    needed = measured_requests(pct)
    if needed + warmup_requests(needed) > MAX_SEQUENCES:
        raise CliError(f"--slo-percentile {pct:g} needs {needed:,} measured requests, more "
                       f"than {MAX_SEQUENCES:,} a run serves: give a lower percentile")  # fmt: skip


def _check_search(args: argparse.Namespace, pct: float) -> None:
    """--max-rate draws its own Poisson arrivals and needs an SLO to meet."""
    check_slos(args, pct, "--max-rate")
    given = [flag for flag, value in (("--rate", args.rate), ("--concurrency", args.concurrency),
                                      ("--trace-file", args.trace_file), ("--power-cap", args.power_cap))
             if value is not None]  # fmt: skip
    if given:
        raise CliError(f"--max-rate chooses the Poisson rate itself: drop {given[0]}")


def _max_rate(found: Found, slo: Slo) -> MaxRate:
    best = found.best
    return MaxRate(
        rate_per_s=best.rate, failing_rate_per_s=found.failing_rate, margin=found.margin,
        percentile=slo.percentile, slo_ttft_s=slo.ttft_s, slo_tpot_s=slo.tpot_s, ttft_s=best.ttft_s,
        tpot_s=best.tpot_s, requests=len(best.result.sequences), warmup_requests=slo.warmup,
        simulations=found.simulations, capacity_bound=found.capacity_bound,
    )  # fmt: skip


def _run_info(result: ServeResult, args: argparse.Namespace, rate: float | None = None) -> ServeRun:
    """The run's options as the command line gave them; `rate`: the one --max-rate found."""
    return ServeRun(
        model=result.config.name,
        hardware=result.hardware.name,
        chips=result.chips,
        ranks_per_card=result.hardware.system.ranks_per_card,
        pp=args.pp,
        dtype=result.precision.name,
        kv_dtype=result.precision.kv.name,
        scheduler=result.options.scheduler,
        max_batch_tokens=result.options.max_batch_tokens,
        max_seqs=result.options.max_seqs,
        attention=result.options.attention,
        shapes=", ".join(f"{k} {v}" for k, v in vars(result.options.shapes).items()),
        prefix_cache=result.options.prefix_cache,
        shared_prefix=args.shared_prefix,
        arrivals=_arrivals(args),
        rate_per_s=rate or _arrivals(args) == "poisson" and (args.rate or DEFAULT_RATE) or None,
        concurrency=args.concurrency,
        trace_file=args.trace_file,
        prompt_len=None if args.trace_file else str(args.prompt_len),
        gen_len=None if args.trace_file else str(args.gen_len),
        seed=args.seed,
    )


def _arrivals(args: argparse.Namespace) -> str:
    if args.concurrency:  # with a trace file: a closed loop over its lengths
        return "closed loop"
    if args.trace_file:
        return "trace"
    return "at once" if args.rate == math.inf else "poisson"


class _Bar(Observer):
    """Requests completed, on standard error, shown once the first iteration is timed."""

    def __init__(self) -> None:
        self.bar: Progress | None = None
        self.task = None

    def progress(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = Progress(
                TextColumn("requests"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("serve", total=total)
        self.bar.update(self.task, completed=done)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
