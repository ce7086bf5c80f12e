"""`tcpc validate RESULT... --model M`: measured serving runs (vLLM `bench serve --save-result`
JSON, or per-request CSV / JSONL) replayed through `tcpc serve`'s simulation, measured vs
simulated figure by figure. docs/validation.md."""

from __future__ import annotations

import argparse
import json

from tcp_compiler.cli import arg_types, parallel
from tcp_compiler.cli.console import console
from tcp_compiler.cli.flags import add_flags, flag, flag_parser, from_args
from tcp_compiler.cli.output import announce, check_outputs, write_atomically
from tcp_compiler.frontend.model import bundled_models, load_model
from tcp_compiler.frontend.precision import KV_DTYPES, precision
from tcp_compiler.option_fields import flagged
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.provenance import provenance
from tcp_compiler.serve.options import Buckets, ServeOptions, Shapes
from tcp_compiler.serve.server import serving_costs
from tcp_compiler.serve.workload import Workload
from tcp_compiler.validation.compare import compare, load_key, summarize
from tcp_compiler.validation.measured import read_measured
from tcp_compiler.validation.replay import replay
from tcp_compiler.validation.report import ValidationReport
from tcp_compiler.validation.terminal import print_validation_report

ARRIVAL_OPTIONS = ("concurrency", "rate", "seed")  # Workload's, for files that do not say them


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "validate",
        help="measured serving runs (vLLM bench serve results) against the serving simulation",
        description="Read measured serving runs, replay the same requests through the serving "
        "simulation (closed loop at the run's concurrency, or its arrivals or rate) and print "
        "measured vs simulated TTFT, TPOT, ITL and E2E (mean, p50, p90, p99) and throughput, with "
        "simulated / measured ratios. docs/validation.md.",
    )
    p.add_argument(
        "results",
        nargs="+",
        metavar="RESULT",
        help="a vLLM `bench serve --save-result` .json (per-request arrays with --save-detailed), or a "
        ".csv / .jsonl with input_tokens, output_tokens, ttft_s, tpot_s [, latency_s, arrival_s, power_w]",
    )
    p.add_argument(
        "--model",
        required=True,
        help=f"config.json, checkpoint dir or bundled name: {', '.join(bundled_models())}",
    )
    p.add_argument("--hw", default="rngd", metavar="NAME|FILE", help="hardware spec (default rngd)")
    parallel.add_arguments(p, micro_batches=False)
    arg_types.add_dtype(p, "bf16", "precision (default bf16)")
    p.add_argument("--kv-dtype", choices=sorted(KV_DTYPES), help="KV cache dtype (default: the precision's)")
    arrivals = p.add_argument_group("how a .csv / .jsonl run's requests arrived (a vLLM result states it)")
    exclusive = arrivals.add_mutually_exclusive_group()
    for field, how in flagged(Workload):
        if field.name in ARRIVAL_OPTIONS:
            target = exclusive if how.exclusive else arrivals
            text = how.help.replace(" (default %(default)s)", "")
            target.add_argument(flag(field.name), type=flag_parser(how), default=field.default,
                                metavar=how.metavar, help=text)  # fmt: skip
    add_flags(p.add_argument_group("server"), ServeOptions)
    grids = p.add_argument_group("cost grids (1: exact; docs/serving.md gives the error of each)")
    add_flags(grids, Buckets, suffix="_bucket")
    shapes = p.add_argument_group("static shapes the runtime compiled (inputs padded up to them)")
    add_flags(shapes, Shapes, suffix="_shapes")
    out = p.add_argument_group("outputs")
    out.add_argument("--json", metavar="FILE", help="write every run's figures and the summary")
    out.add_argument(
        "--plot", metavar="DIR", help="write validation.png: each figure against concurrency or rate"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_outputs({"--json": args.json}, {"--plot": args.plot})
    measured = [read_measured(path, args.concurrency, args.rate) for path in args.results]
    config = load_model(args.model).config
    hw, tp = parallel.system(args)
    prec = precision(args.dtype, kv_dtype=args.kv_dtype)
    options = from_args(ServeOptions, args, buckets=from_args(Buckets, args, "_bucket"),
                        shapes=from_args(Shapes, args, "_shapes"))  # fmt: skip
    compile_options = CompileOptions(chips=tp)
    # One cost cache for every run: the runs share their model, hardware and grids.
    costs = serving_costs(config, hw, prec, compile_options, options, args.pp)
    runs = [compare(m, replay(m, config, hw, prec, options, compile_options, args.pp, costs, args.seed))
            for m in measured]  # fmt: skip
    runs.sort(key=load_key)
    report = ValidationReport(
        model=config.name, hardware=hw.name, chips=compile_options.chips_on(hw) * args.pp, dtype=prec.name,
        kv_dtype=prec.kv.name, scheduler=options.scheduler, runs=tuple(runs), summary=summarize(runs),
    )  # fmt: skip
    print_validation_report(report, console())
    if args.json:
        document = {**report.to_dict(), "provenance": provenance(args.argv)}
        write_atomically(args.json, json.dumps(document, indent=1) + "\n")
        announce(args.json, "validation report, docs/validation.md")
    if args.plot:
        from tcp_compiler.validation.plots import write_plots

        announce(args.plot, ", ".join(write_plots(report, args.plot)))
    return 0
