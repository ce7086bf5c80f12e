"""`tcpc simulate [MODEL]`: TTFT, TPOT and where the time goes, per phase, layer, op and unit."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from simulator.hardware import load_hardware
from tcp_compiler.cli.output import announce, check_outputs, plural, si, write_atomically
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.model import bundled_models, load_model
from tcp_compiler.frontend.precision import PRECISIONS, precision
from tcp_compiler.report_types import Report
from tcp_compiler.reporting import attention_lines, build_report, render_markdown
from tcp_compiler.simulate import Simulation, simulate_generation

DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_PROMPT = 2048
PEAK_DTYPES = ("bf16", "fp8")  # the compute roofs drawn on the roofline plot


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
    p.add_argument(
        "--chips", type=int, metavar="N",
        help="tensor-parallel chips of the spec's kind (default: its count; --chips 4 on rngd is rngd-4)",
    )  # fmt: skip
    p.add_argument("--batch", type=int, default=1, metavar="B", help="sequences per batch (default 1)")
    p.add_argument(
        "--prompt-len", type=int, metavar="P",
        help=f"prompt tokens (default {DEFAULT_PROMPT}, less if the model has fewer positions)",
    )  # fmt: skip
    p.add_argument("--gen-len", type=int, default=128, metavar="G", help="generated tokens (default 128)")
    p.add_argument("--dtype", default="bf16", choices=sorted(PRECISIONS), help="precision (default bf16)")
    p.add_argument("--group-size", type=int, metavar="N", help="w4 only: elements per scale (default 128)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="ops listed per phase (default 10)")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON (docs/report-schema.md)")
    p.add_argument("--markdown", metavar="FILE", help="write the report as Markdown")
    p.add_argument(
        "--trace", metavar="FILE", help="write a Perfetto trace (prefill and the first decode steps)"
    )
    p.add_argument(
        "--trace-steps", type=int, default=2, metavar="N", help="decode steps in the trace (default 2)"
    )
    p.add_argument("--plot", metavar="DIR", help="write roofline.png and timeline.png into DIR")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    for name in ("batch", "prompt_len", "gen_len", "top"):
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
    hw = load_hardware(args.hw, args.chips)
    prec = precision(args.dtype, args.group_size)
    bar = _LazyProgress(enabled=args.gen_len >= 64)
    try:
        sim = simulate_generation(
            model.config, hw, prec, args.batch, args.prompt_len, args.gen_len, args.chips,
            trace_steps=args.trace_steps if args.trace else 0, progress=bar.update,
        )  # fmt: skip
    finally:
        bar.stop()
    report = build_report(sim, top=args.top)
    _print(report)
    if args.json:
        write_atomically(args.json, json.dumps(report.to_dict(), indent=2) + "\n")
        announce(args.json, "JSON report, docs/report-schema.md")
    if args.markdown:
        write_atomically(args.markdown, render_markdown(report))
        announce(args.markdown, "Markdown report")
    if args.trace:
        _trace(sim, args.trace)
        announce(args.trace, "Perfetto trace: open in ui.perfetto.dev")
    if args.plot:
        _plots(sim, report, args.plot)
        announce(args.plot, "roofline.png, timeline.png")
    return 0


def default_prompt(max_positions: int, gen_len: int) -> int:
    """The default prompt, shortened so prompt + generation fit a model's learned positions (0: no
    limit); the last generated token is never fed back, so prompt + gen - 1 positions are used."""
    if not max_positions:
        return DEFAULT_PROMPT
    return max(1, min(DEFAULT_PROMPT, max_positions - gen_len + 1))


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
        runs.append(TraceRun(run.name, run.program, run.timeline, offset))
        offset += run.cycles
    write_trace(path, runs, sim.hardware.clock_hz)


def _plots(sim: Simulation, report: Report, directory: str) -> None:
    from pathlib import Path

    from simulator.plots import RooflinePoint, roofline_png, timeline_png
    from simulator.program import UNITS
    from simulator.trace import TraceRun

    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CliError(f"{out}: cannot create: {e.strerror}") from None
    points = [
        RooflinePoint(op.name, phase, op.flops, op.hbm_bytes, op.seconds)
        for phase, ops in report.ops.items()
        for op in ops
    ]
    peaks = {name: sim.hardware.flops_per_second(name) for name in PEAK_DTYPES}
    title = f"{sim.config.name} on {sim.hardware.name}"
    roofline_png(out / "roofline.png", points, peaks, report.hardware.hbm_bytes_per_s, title)
    runs, offset = [], 0.0
    for run in [sim.prefill, *sim.traced_steps]:
        runs.append(TraceRun(run.name, run.program, run.timeline, offset))
        offset += run.cycles
    timeline_png(out / "timeline.png", runs, UNITS, sim.hardware.clock_hz, title)


def _print(report: Report) -> None:
    console = Console()
    hw = report.hardware
    console.print(
        f"[bold]{report.model}[/bold] on [bold]{hw.name}[/bold] ({plural(hw.chips, 'chip')}), "
        f"{report.dtype}, batch {report.batch}, prompt {report.prompt_len}, gen {report.gen_len}"
    )
    pre, dec = report.prefill, report.decode
    summary = Table(title="summary: prefill = TTFT, decode = mean TPOT", title_justify="left")
    for column in ("phase", "time", "roofline", "x roof", "bound", "FLOPs", "HBM"):
        left = column in ("phase", "bound")
        summary.add_column(column, justify="left" if left else "right", no_wrap=left)
    ratio = pre.seconds / pre.roofline_seconds
    summary.add_row(
        "prefill", _ms(pre.seconds), _ms(pre.roofline_seconds), f"{ratio:.2f}", pre.bound,
        si(pre.flops), si(pre.hbm_bytes, "B"),
    )  # fmt: skip
    if dec.steps:
        ratio = dec.tpot_seconds_mean / dec.roofline_seconds_mean
        summary.add_row(
            "decode", _ms(dec.tpot_seconds_mean), _ms(dec.roofline_seconds_mean), f"{ratio:.2f}", dec.bound,
            si(dec.flops_per_step_mean), si(dec.hbm_bytes_per_step_mean, "B"),
        )  # fmt: skip
    console.print(summary)
    if dec.steps:
        console.print(
            f"TPOT first {_ms(dec.tpot_seconds_first)}, last {_ms(dec.tpot_seconds_last)}; "
            f"decode {report.decode_tokens_per_s:.1f} tokens/s, end to end "
            f"{report.throughput_tokens_per_s:.1f} tokens/s"
        )
    for line in attention_lines(report):
        console.print(line)
    for phase, units in report.units.items():
        table = Table(title=f"units, {phase}", title_justify="left")
        for column in ("unit", "busy cycles", "utilisation"):
            table.add_column(column, justify="left" if column == "unit" else "right")
        for u in units:
            table.add_row(u.unit, f"{u.busy_cycles:,.0f}", f"{100 * u.utilisation:.1f} %")
        console.print(table)
    for phase, ops in report.ops.items():
        table = Table(
            title=f"top ops, {phase}" + (" (per step)" if phase == "decode" else ""), title_justify="left"
        )
        numeric = ("layer", "time", "FLOPs", "HBM", "FLOP/HBM B")
        for column in ("op", "layer", "time", "FLOPs", "HBM", "FLOP/HBM B", "bound"):
            table.add_column(column, justify="right" if column in numeric else "left")
        for op in ops:
            table.add_row(
                op.name, str(op.layer) if op.layer >= 0 else "-", _ms(op.seconds), si(op.flops),
                si(op.hbm_bytes, "B"), f"{op.hbm_intensity:,.1f}", op.bound,
            )  # fmt: skip
        console.print(table)
    mem = report.memory
    console.print(
        f"HBM per chip: weights {si(mem.weights_bytes, 'B')}, KV cache {si(mem.kv_cache_bytes, 'B')} "
        f"({si(mem.kv_cache_bytes_per_token, 'B')}/token), free {si(mem.free_bytes, 'B')} of "
        f"{si(mem.hbm_capacity_bytes, 'B')}"
    )
    if hw.assumed:
        console.print(f"[dim]assumed spec values: {', '.join(hw.assumed)}[/dim]")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"
