"""`tcpc serve [MODEL]`: a serving run (continuous batching, chunked prefill, paged KV) and its
request-level latency and throughput, every iteration timed by tcpc's compiler and engine."""

from __future__ import annotations

import argparse
import json
import math

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tcp_compiler.cli import arg_types, parallel
from tcp_compiler.cli.console import console
from tcp_compiler.cli.output import announce, check_outputs, write_atomically
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.model import bundled_models, load_model
from tcp_compiler.frontend.precision import KV_DTYPES, PRECISIONS, precision
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.provenance import provenance
from tcp_compiler.serve import ServeOptions, ServeResult, load_trace, serve, synthetic
from tcp_compiler.serve.costs import ATTENTION_MODES, Buckets
from tcp_compiler.serve.metrics import iterations_table, requests_table, summary
from tcp_compiler.serve.schedulers import SCHEDULERS
from tcp_compiler.serve.workload import Lengths, lengths

DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_REQUESTS = 64
DEFAULT_PROMPT = "uniform:64:512"
DEFAULT_GEN = "uniform:32:256"
DEFAULT_RATE = 8.0  # requests per second: enough to keep a batch of a few dozen busy
MAX_SECONDS = 1e6


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="simulate a server: continuous batching, chunked prefill, paged KV, TTFT / TPOT / goodput",
        description="Serve a stream of requests with a batching scheduler and a paged KV cache, each "
        "iteration compiled and timed cycle by cycle; reports throughput and latency percentiles. "
        f"With no arguments: {DEFAULT_MODEL} on rngd, {DEFAULT_REQUESTS} requests (prompt {DEFAULT_PROMPT}, "
        f"output {DEFAULT_GEN}) arriving at {DEFAULT_RATE:g}/s, chunked prefill. docs/serving.md.",
    )
    p.add_argument(
        "model",
        nargs="?",
        default=DEFAULT_MODEL,
        help=f"config.json, checkpoint dir or bundled name: {', '.join(bundled_models())}",
    )
    p.add_argument("--hw", default="rngd", metavar="NAME|FILE", help="hardware spec (default rngd)")
    parallel.add_arguments(p, micro_batches=False)
    p.add_argument("--dtype", default="bf16", choices=sorted(PRECISIONS), help="precision (default bf16)")
    p.add_argument("--kv-dtype", choices=sorted(KV_DTYPES), help="KV cache dtype (default: the precision's)")
    work = p.add_argument_group("requests")
    work.add_argument(
        "--requests",
        type=arg_types.integer(1, arg_types.MAX_BATCH),
        default=DEFAULT_REQUESTS,
        metavar="N",
        help=f"requests (default {DEFAULT_REQUESTS})",
    )
    work.add_argument(
        "--prompt-len",
        type=_lengths,
        default=lengths(DEFAULT_PROMPT),
        metavar="P",
        help=f"prompt tokens: N, uniform:LO:HI or normal:MEAN:STD (default {DEFAULT_PROMPT})",
    )
    work.add_argument(
        "--gen-len",
        type=_lengths,
        default=lengths(DEFAULT_GEN),
        metavar="G",
        help=f"output tokens, as --prompt-len (default {DEFAULT_GEN})",
    )
    work.add_argument(
        "--seed", type=arg_types.integer(0, (1 << 63) - 1), default=0, help="for lengths and arrivals"
    )
    arrive = work.add_mutually_exclusive_group()
    arrive.add_argument(
        "--rate",
        type=_rate,
        metavar="R",
        help=f"Poisson arrivals per second, or inf: all at once (default {DEFAULT_RATE:g})",
    )
    arrive.add_argument(
        "--concurrency",
        type=arg_types.integer(1, arg_types.MAX_BATCH),
        metavar="C",
        help="closed loop: C clients, each sending its next request when one ends",
    )
    work.add_argument(
        "--trace-file",
        metavar="FILE",
        help="requests from a .jsonl or .csv file (arrival_s, prompt_len, output_len)",
    )
    sched = p.add_argument_group("server")
    sched.add_argument(
        "--scheduler", choices=SCHEDULERS, default="chunked", help="batching policy (default chunked)"
    )
    sched.add_argument(
        "--max-batch-tokens",
        type=arg_types.tokens,
        default=2048,
        metavar="T",
        help="tokens per iteration (prefill budget; default 2048)",
    )
    sched.add_argument(
        "--max-seqs",
        type=arg_types.batch,
        default=256,
        metavar="S",
        help="sequences running at once (default 256)",
    )
    sched.add_argument(
        "--block-size",
        type=arg_types.integer(1, 4096),
        default=16,
        metavar="B",
        help="tokens per KV block (default 16)",
    )
    sched.add_argument(
        "--attention",
        choices=ATTENTION_MODES,
        default="paged",
        help="decode attention reads each sequence's length (paged) or the longest (padded)",
    )
    grid = p.add_argument_group("cost grids (1: exact; docs/serving.md gives the error of each)")
    default = Buckets()
    for name, what in (("kv", "decode KV length"), ("batch", "decode batch"), ("tokens", "prefill tokens")):
        grid.add_argument(
            f"--{name}-bucket",
            type=arg_types.integer(1, arg_types.MAX_TOKENS),
            default=getattr(default, name),
            metavar="N",
            help=f"{what} grid step (default {getattr(default, name)})",
        )
    out = p.add_argument_group("outputs")
    out.add_argument("--slo-ttft", type=_seconds, metavar="S", help="TTFT SLO in seconds, for goodput")
    out.add_argument("--slo-tpot", type=_seconds, metavar="S", help="TPOT SLO in seconds, for goodput")
    out.add_argument("--json", metavar="FILE", help="write the figures, every request and every iteration")
    out.add_argument("--plot", metavar="DIR", help="write latency CDFs, throughput and KV occupancy plots")
    p.set_defaults(run=run)


def _lengths(text: str) -> Lengths:
    try:
        return lengths(text, arg_types.MAX_TOKENS)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive(text: str, allow_inf: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isinf(value) and value > 0 and allow_inf:
        return value
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(
            f"expected a number above 0 and at most {MAX_SECONDS:g}, got {text!r}"
        )
    return value


def _rate(text: str) -> float:
    return _positive(text, allow_inf=True)


def _seconds(text: str) -> float:
    return _positive(text, allow_inf=False)


def run(args: argparse.Namespace) -> int:
    check_outputs({"--json": args.json}, {"--plot": args.plot})
    model = load_model(args.model)
    hw, tp = parallel.system(args)
    prec = precision(args.dtype, kv_dtype=args.kv_dtype)
    if args.trace_file:
        if args.rate is not None or args.concurrency is not None:
            raise CliError("--trace-file gives each request's arrival: drop --rate / --concurrency")
        requests = load_trace(args.trace_file)
    else:
        rate = DEFAULT_RATE if args.rate is None and args.concurrency is None else args.rate
        rate = None if rate is not None and math.isinf(rate) else rate
        requests = synthetic(
            args.requests, args.prompt_len, args.gen_len, rate, args.concurrency is not None, args.seed
        )
    options = ServeOptions(
        scheduler=args.scheduler,
        max_seqs=args.max_seqs,
        max_batch_tokens=args.max_batch_tokens,
        block_size=args.block_size,
        buckets=Buckets(args.kv_bucket, args.batch_bucket, args.tokens_bucket),
        attention=args.attention,
        concurrency=args.concurrency,
    )
    bar = _Bar()
    try:
        result = serve(
            model.config, hw, prec, requests, options, CompileOptions(chips=tp), bar.update, pp=args.pp
        )
    finally:
        bar.stop()
    figures = summary(result, args.slo_ttft, args.slo_tpot)
    print_summary(result, figures, console())
    if args.json:
        document = {
            "run": _run_info(result, args),
            **figures,
            "requests": requests_table(result),
            "per_iteration": iterations_table(result),
            "provenance": provenance(args.argv),
        }
        write_atomically(args.json, json.dumps(document, indent=1) + "\n")
        announce(args.json, "serving report, docs/serving.md")
    if args.plot:
        from tcp_compiler.serve.plots import write_plots

        names = write_plots(result, args.plot)
        announce(args.plot, ", ".join(names))
    return 0


def _run_info(result: ServeResult, args: argparse.Namespace) -> dict:
    return {
        "model": result.config.name,
        "hardware": result.hardware.name,
        "chips": result.chips,
        "pp": args.pp,
        "dtype": result.precision.name,
        "kv_dtype": result.precision.kv.name,
        "scheduler": result.options.scheduler,
        "max_batch_tokens": result.options.max_batch_tokens,
        "max_seqs": result.options.max_seqs,
        "attention": result.options.attention,
        "arrivals": _arrivals(args),
        "rate_per_s": _arrivals(args) == "poisson" and (args.rate or DEFAULT_RATE) or None,
        "concurrency": args.concurrency,
        "trace_file": args.trace_file,
        "prompt_len": None if args.trace_file else str(args.prompt_len),
        "gen_len": None if args.trace_file else str(args.gen_len),
        "seed": args.seed,
    }


def _arrivals(args: argparse.Namespace) -> str:
    if args.trace_file:
        return "trace"
    if args.concurrency:
        return "closed loop"
    return "at once" if args.rate == math.inf else "poisson"


def print_summary(result: ServeResult, f: dict, out: Console) -> None:
    o = result.options
    out.print(
        f"[bold]{result.config.name}[/] on {result.hardware.name} ({result.chips} chip"
        f"{'s' if result.chips > 1 else ''}), {result.precision.name}, KV {result.precision.kv.name}; "
        f"{o.scheduler} scheduler, {o.max_batch_tokens:,} tokens / iteration, up to {o.max_seqs} sequences"
    )
    out.print(
        f"{f['requests_completed']:,} requests in {f['duration_s']:.2f} s simulated: "
        f"[bold]{f['throughput_output_tokens_per_s']:,.0f}[/] output tokens/s, "
        f"{f['throughput_total_tokens_per_s']:,.0f} total tokens/s, "
        f"{f['throughput_requests_per_s']:.2f} requests/s"
    )
    table = Table(title=None, show_edge=False, pad_edge=False)
    table.add_column("latency")
    for col in ("mean", "p50", "p90", "p99"):
        table.add_column(col, justify="right")
    for key, name in (("ttft_seconds", "TTFT ms"), ("tpot_seconds", "TPOT ms"), ("e2e_seconds", "E2E s")):
        scale = 1.0 if key == "e2e_seconds" else 1e3
        table.add_row(
            name, *(f"{f[key][c] * scale:,.{2 if scale == 1 else 1}f}" for c in ("mean", "p50", "p90", "p99"))
        )
    out.print(table)
    g = f["goodput"]
    if g["slo_ttft_s"] is not None or g["slo_tpot_s"] is not None:
        pairs = (("TTFT", g["slo_ttft_s"]), ("TPOT", g["slo_tpot_s"]))
        slos = ", ".join(f"{k} <= {v * 1e3:g} ms" for k, v in pairs if v is not None)
        out.print(f"goodput ({slos}): {g['requests_per_s']:.2f} requests/s, {g['fraction']:.0%} of requests")
    kv = f["kv_cache"]
    out.print(
        f"KV cache: {kv['blocks']:,} blocks of {kv['block_size']} tokens per chip "
        f"({kv['kv_bytes'] / 1e9:.1f} GB "
        f"beside {kv['weight_bytes'] / 1e9:.1f} GB of weights); peak {kv['peak_blocks_used']:,} used, "
        f"mean {kv['mean_blocks_used']:,.0f}; {f['preemptions']:,} preemptions (recompute)"
    )
    c = f["cost_cache"]
    out.print(
        f"{f['iterations']:,} iterations ({f['mixed_iterations']:,} mixed prefill + decode), "
        f"{f['model_bound_ratio']:.2f}x the model's bound; timed by {c['engine_runs']:,} engine runs of "
        f"{c['decode_templates']:,} decode templates and {c['prefill_compiles']:,} prefill programs"
    )


class _Bar:
    """Requests completed, on standard error, shown once the first iteration is timed."""

    def __init__(self) -> None:
        self.progress: Progress | None = None
        self.task = None

    def update(self, done: int, total: int) -> None:
        if self.progress is None:
            self.progress = Progress(
                TextColumn("requests"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.progress.start()
            self.task = self.progress.add_task("serve", total=total)
        self.progress.update(self.task, completed=done)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
