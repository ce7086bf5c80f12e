"""`tcpc simulate [MODEL]`: TTFT, TPOT and where the time goes, per phase, layer, op and unit."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from simulator.spec import Spec
from simulator.targets import target_of
from tcp_compiler.analysis.roofline import Roofline
from tcp_compiler.cli import arg_types, parallel
from tcp_compiler.cli.console import console
from tcp_compiler.cli.flags import add_flags, from_args
from tcp_compiler.cli.output import announce, check_outputs, write_atomically
from tcp_compiler.cli.status import StageStatus, check_length, large_plan_note
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.model import bundled_models, load_model
from tcp_compiler.frontend.precision import KV_DTYPES, precision
from tcp_compiler.observer import Observer
from tcp_compiler.option_fields import PrefillOptions
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.provenance import provenance
from tcp_compiler.report.build import build_report
from tcp_compiler.report.energy import capped_hardware, run_power
from tcp_compiler.report.markdown import render_markdown
from tcp_compiler.report.terminal import print_report
from tcp_compiler.report.types import Report
from tcp_compiler.serve.options import ServeOptions, Shapes
from tcp_compiler.simulate import Simulation, simulate_generation

DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_PROMPT = 2048


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="simulate prefill and decode on TCP hardware: TTFT, TPOT, per-op/unit costs and bounds",
        description="Compile a model, map it onto the hardware and simulate a generation cycle by cycle. "
        f"With no arguments: {DEFAULT_MODEL} on rngd, batch 1, prompt 2048, 128 generated tokens.",
    )
    p.add_argument(
        "model", nargs="?", default=DEFAULT_MODEL,
        help=f"config.json, checkpoint dir or bundled name: {', '.join(bundled_models())}",
    )  # fmt: skip
    p.add_argument("--hw", default="rngd", metavar="NAME|FILE", help="hardware spec (default rngd)")
    parallel.add_arguments(p)
    parallel.add_sequence_parallel(p)
    p.add_argument(
        "--batch", type=arg_types.batch, default=1, metavar="B", help="sequences per batch (default 1)"
    )
    p.add_argument(
        "--prompt-len", type=arg_types.tokens, metavar="P",
        help=f"prompt tokens (default {DEFAULT_PROMPT}, less if the model has fewer positions)",
    )  # fmt: skip
    p.add_argument(
        "--gen-len", type=arg_types.tokens, default=128, metavar="G", help="generated tokens (default 128)"
    )
    add_flags(p, PrefillOptions)
    runtime = p.add_argument_group("serving runtime (as tcpc serve's)")
    add_flags(runtime, Shapes, suffix="_shapes")
    add_flags(runtime, ServeOptions, only=("block_size",))
    arg_types.add_dtype(p, "bf16", "precision (default bf16)")
    p.add_argument(
        "--kv-dtype", choices=sorted(KV_DTYPES), help="KV cache dtype (default: the precision's)"
    )
    p.add_argument(
        "--group-size", type=arg_types.group_size, metavar="N",
        help="w4 only: elements per scale (default 128)",
    )  # fmt: skip
    p.add_argument(
        "--top", type=top_count, default=10, metavar="N|all",
        help="op roles listed per phase (default 10; 0 or all: every role)",
    )  # fmt: skip
    p.add_argument("--json", metavar="FILE", help="write the report as JSON (docs/report-schema.md)")
    p.add_argument("--markdown", metavar="FILE", help="write the report as Markdown")
    p.add_argument(
        "--trace", metavar="FILE", help="write a Perfetto trace (prefill and the first decode steps)"
    )
    p.add_argument(
        "--trace-steps", type=arg_types.trace_steps, default=2, metavar="N",
        help="decode steps in the trace (default 2)",
    )
    p.add_argument("--plot", metavar="DIR", help="write roofline.png, timeline.png and energy.png into DIR")
    arg_types.add_power_cap(p, "every phase", "simulated")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    for name in ("batch", "prompt_len", "gen_len"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise CliError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    files = {"--json": args.json, "--markdown": args.markdown, "--trace": args.trace}
    check_outputs(files, {"--plot": args.plot})
    model = load_model(args.model)
    if args.prompt_len is None:
        args.prompt_len = default_prompt(model.config.max_positions, args.gen_len)
        if args.prompt_len != DEFAULT_PROMPT:
            Console(stderr=True).print(
                f"prompt {args.prompt_len} (not {DEFAULT_PROMPT}): {model.config.name} has "
                f"{model.config.max_positions:,} positions and the generation takes {args.gen_len}"
            )
    past_context = check_length(model.config, args.prompt_len + args.gen_len - 1)  # the last is not fed back
    hw, tp = parallel.system(args)
    prec = precision(args.dtype, args.group_size, args.kv_dtype)

    def simulate(spec: Spec) -> Simulation:
        watch = _Watch(bar=args.gen_len >= 64)
        try:
            return simulate_generation(
                model.config, spec, prec, args.batch, args.prompt_len, args.gen_len, tp,
                trace_steps=args.trace_steps if args.trace or args.plot else 0, pp=args.pp,
                micro_batches=args.micro_batches, observer=watch,
                options=CompileOptions(batch=args.batch, chips=tp, sequence_parallel=args.sequence_parallel),
                prefill_chunk=from_args(PrefillOptions, args).prefill_chunk, advise=True,
                shapes=from_args(Shapes, args, "_shapes"), block_size=args.block_size,
            )  # fmt: skip
        finally:
            watch.stop()

    sim = simulate(hw)
    if args.power_cap is not None:
        cap = arg_types.watts(args.power_cap, hw)
        capped = capped_hardware(sim, cap)
        if capped is not hw:
            sim = simulate(capped)
    report = build_report(sim)
    sites = target_of(sim.hardware).sites
    print_report(report, sites, console(), args.top)
    past_context()
    if args.json:
        document = {**report.to_dict(), "provenance": provenance(args.argv)}
        write_atomically(args.json, json.dumps(document, indent=2) + "\n")
        announce(args.json, "JSON report, docs/report-schema.md")
    if args.markdown:
        write_atomically(args.markdown, render_markdown(report, sites, args.top))
        announce(args.markdown, "Markdown report")
    if args.trace:
        _trace(sim, args.trace)
        announce(args.trace, "Perfetto trace: open in ui.perfetto.dev")
    if args.plot:
        _plots(sim, report, args.plot, args.top)
        announce(args.plot, "roofline.png, timeline.png, energy.png")
    return 0


def top_count(text: str) -> int:
    """`--top`: a count of at least 0, or `all` (0: every role)."""
    if text.strip().lower() == "all":
        return 0
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count or 'all', got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a count of at least 0 or 'all', got {value}")
    return value


def default_prompt(max_positions: int, gen_len: int) -> int:
    """The default prompt, shortened so prompt + generation fit a model's learned positions (0: no
    limit); the last generated token is never fed back, so prompt + gen - 1 positions are used."""
    if not max_positions:
        return DEFAULT_PROMPT
    return max(1, min(DEFAULT_PROMPT, max_positions - gen_len + 1))


class _Watch(Observer):
    """The run's one observer: a status line naming the stage and lowering step, a note up front
    for a large attention plan, and the decode steps' bar once they start."""

    def __init__(self, bar: bool) -> None:
        self.status, self.bar, self.what = StageStatus(), _LazyProgress(enabled=bar), ""

    def stage(self, what: str) -> None:
        self.what = what
        self.status(what)

    def step(self, name: str) -> None:
        self.status(f"{self.what}: {name}")

    def planned(self, attention: list[dict]) -> None:
        note = large_plan_note(attention)
        if note:
            print(note, file=sys.stderr)

    def progress(self, done: int, total: int) -> None:
        self.status.stop()  # the decode bar takes over the line
        self.bar.update(done, total)

    def stop(self) -> None:
        self.status.stop()
        self.bar.stop()


class _LazyProgress:
    """A progress bar that appears only once decode steps start, so errors print cleanly."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.progress, self.task = enabled, None, None

    def update(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.progress is None:
            self.progress = Progress(
                TextColumn("decode steps"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                console=Console(stderr=True), transient=True,
            )  # fmt: skip
            self.progress.start()
            self.task = self.progress.add_task("decode", total=total)
        self.progress.update(self.task, completed=done)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _trace(sim: Simulation, path: str) -> None:
    from simulator.trace import TraceRun, write_trace

    runs, offset = [], 0.0
    for run in [sim.prefill, *sim.traced_steps]:
        power = run_power(sim, run.program, run.timeline)
        runs.append(TraceRun(run.phase, run.program, run.timeline, offset, run.step, power))
        offset += run.cycles
    # A pipelined program already places each stage on its own chip: no mirrors of chip 0 then.
    write_trace(path, runs, sim.hardware, chips=sim.chips if sim.stages == 1 else 1)


def _plots(sim: Simulation, report: Report, directory: str, top: int) -> None:
    from pathlib import Path

    from simulator.plots import RooflinePoint, energy_png, roofline_png, timeline_png
    from simulator.trace import TraceRun

    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CliError(f"{out}: cannot create: {e.strerror}") from None
    points = [  # one point per op role: the mean of its ops
        RooflinePoint(r.role, phase, r.flops / r.count, r.hbm_bytes / r.count, r.seconds / r.count)
        for phase, roles in report.op_roles.items()
        for r in (roles if top <= 0 else roles[:top])
    ]
    operand = sim.precision.operand  # the run's compute roof only: the dtype its contractions run in
    peaks = {operand.name: Roofline.of(sim.hardware, operand).flops_per_s}
    title = f"{sim.config.name} on {sim.hardware.name}"
    run = f"{report.dtype}, batch {report.batch}, prompt {report.prompt_len}"
    roofline_png(out / "roofline.png", points, peaks, report.hardware.hbm_bytes_per_s, f"{title}: {run}")
    runs, offset = [], 0.0
    for run in [sim.prefill, *sim.traced_steps]:
        runs.append(TraceRun(run.phase, run.program, run.timeline, offset, run.step))
        offset += run.cycles
    timeline_png(out / "timeline.png", runs, sim.prefill.program.sites.unit_names, sim.hardware, title)
    phases = {"prefill": report.energy.prefill, "decode": report.energy.decode}
    by_phase = {name: {u.unit: u.joules for u in p.by_unit} for name, p in phases.items() if p is not None}
    energy_png(out / "energy.png", by_phase, title)
