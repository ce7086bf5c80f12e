"""`tcpc calibrate RESULT... --model M`: the spec's assumed values fitted to a real server's
measured runs (tcp_compiler.validation.calibrate), written as a spec file that extends the one
given (`-o FILE.toml`, usable as `--hw FILE`). docs/calibration.md."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from rich.table import Table

from simulator.calibration import Observed, fittable
from simulator.errors import HardwareError
from simulator.hardware import extension_text, list_presets
from simulator.spec import Spec
from tcp_compiler.cli import arg_types, parallel
from tcp_compiler.cli.console import console
from tcp_compiler.cli.flags import add_flags, flag_type, from_args
from tcp_compiler.cli.output import announce, check_outputs, write_atomically
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.model import bundled_models, load_model
from tcp_compiler.frontend.precision import KV_DTYPES, precision
from tcp_compiler.option_fields import MAX_SEQUENCES, positive_number
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.serve import ServeOptions
from tcp_compiler.serve.options import Buckets, Shapes
from tcp_compiler.serve.workload import MAX_RATE
from tcp_compiler.validation.calibrate import FIGURES, Calibration, CostCache, calibrate, observe, source
from tcp_compiler.validation.measured import read_measured
from tcp_compiler.validation.replay import replay


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="fit the spec's assumed values to a real server's measured runs; write them as a spec file",
        description="Replay measured serving runs (vLLM `bench serve --save-result` JSON, or a per-request "
        ".csv/.jsonl) through the serving simulation and fit the spec's assumed values to their TTFT, TPOT, "
        "output throughput and, when measured, average power by bounded least squares; print each value "
        "with its uncertainty and each run's error when left out of the fit. docs/calibration.md.",
    )
    p.add_argument("results", nargs="+", metavar="RESULT", help="measured runs, one file each")
    p.add_argument("--model", required=True, help=f"config.json, checkpoint dir or bundled name: "
                   f"{', '.join(bundled_models())}")  # fmt: skip
    p.add_argument("--hw", default="rngd", metavar="NAME|FILE", help="the spec to start from (default rngd)")
    parallel.add_arguments(p, micro_batches=False)
    arg_types.add_dtype(p, "bf16", "precision (default bf16)")
    p.add_argument("--kv-dtype", choices=sorted(KV_DTYPES), help="KV cache dtype (default: the precision's)")
    measured = p.add_mutually_exclusive_group()
    measured.add_argument(
        "--concurrency", type=arg_types.integer(1, MAX_SEQUENCES), metavar="C",
        help="closed-loop clients of the per-request files (a vLLM result says its own)",
    )  # fmt: skip
    measured.add_argument(
        "--rate", type=flag_type(positive_number(MAX_RATE, allow_inf=True)), metavar="R",
        help="requests per second (inf: all at once) of the per-request files",
    )  # fmt: skip
    add_flags(p.add_argument_group("server"), ServeOptions)
    add_flags(p.add_argument_group("cost grids (1: exact)"), Buckets, suffix="_bucket")
    add_flags(p.add_argument_group("static shapes the runtime compiled (inputs padded up to them)"), Shapes,
              suffix="_shapes")  # fmt: skip
    fitting = p.add_argument_group("fitting")
    fitting.add_argument("--fit", type=_addresses, metavar="KEY[,KEY...]",
                         help="the assumed values to fit, by address (default: those the measured figures "
                         "move most with, listed)")  # fmt: skip
    fitting.add_argument("-o", "--output", metavar="FILE.toml",
                         help="write the fitted values as a spec file that extends --hw")  # fmt: skip
    p.set_defaults(run=run)


def _addresses(text: str) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in text.split(","))
    if not all(keys):
        raise ValueError(f"expected TABLE.KEY[,TABLE.KEY...], got {text!r}")
    return tuple(dict.fromkeys(keys))


def run(args: argparse.Namespace) -> int:
    check_outputs({"--output": args.output})
    if args.output and not args.output.endswith(".toml"):
        raise CliError(f"--output {args.output}: expected a .toml file (a spec file)")
    hw, tp = parallel.system(args)
    for key in args.fit or ():
        try:
            fittable(hw, key)
        except HardwareError as e:
            raise CliError(f"--fit {e}") from None
    model = load_model(args.model)
    prec = precision(args.dtype, kv_dtype=args.kv_dtype)
    options = from_args(ServeOptions, args, buckets=from_args(Buckets, args, "_bucket"),
                        shapes=from_args(Shapes, args, "_shapes"))  # fmt: skip
    runs = [read_measured(path, args.concurrency, args.rate) for path in args.results]
    cache = CostCache()

    compile_options = CompileOptions(chips=tp)

    def observed(measured) -> Observed:
        def simulate(spec: Spec):
            costs = cache.costs(model.config, spec, prec, compile_options, options, args.pp)
            done = replay(measured, model.config, spec, prec, options, compile_options, args.pp, costs)
            return done.metrics, done.report.energy.average_power_w

        return observe(measured, simulate)

    observations = [observed(r) for r in runs]
    kinds = sum(any(o.known[i] for o in observations) for i in range(len(FIGURES)))
    found = calibrate(hw, observations, args.fit, kinds, source(args.results))
    _print(found, hw, [str(r.source) for r in runs])
    if args.output:
        description = f"{hw.name} calibrated to {len(runs)} measured runs of {model.config.name}"
        written = list(dict.fromkeys([*(k for k, _ in args.settings), *found.addresses]))
        text = extension_text(_extends(args.hw, args.output), description, found.fit.spec, written)
        write_atomically(args.output, text)
        announce(args.output, f"spec file extending {args.hw}: use it as --hw {args.output}")
    return 0


def _extends(hw: str, output: str) -> str:
    """How the written file names the spec it extends: a preset by name, a file by its path from
    the written file's folder."""
    if hw in list_presets() and not Path(hw).is_file():
        return hw
    relative = os.path.relpath(Path(hw).resolve(), Path(output).resolve().parent)
    return relative if "/" in relative or relative.endswith(".toml") else f"./{relative}"


def _print(found: Calibration, base: Spec, files: list[str]) -> None:
    out = console()
    if found.elasticities:
        table = Table(title="assumed values by how much the measured figures move with them "
                      "(rms of d ln figure / d ln value)")  # fmt: skip
        table.add_column("value")
        table.add_column("sensitivity", justify="right")
        table.add_column("fitted", justify="center")
        for address, e in sorted(found.elasticities.items(), key=lambda kv: -kv[1]):
            if e > 0:
                table.add_row(address, f"{e:.3g}", "yes" if address in found.addresses else "")
        out.print(table)
    table = Table(title=f"fitted to {len(files)} measured runs")
    for column in ("value", "was", "fitted", "± 1 sigma", "unit"):
        table.add_column(column, justify="left" if column in ("value", "unit") else "right")
    for address in found.addresses:
        sigma, unit = found.fit.sigmas[address], base.param(address)[0].unit
        table.add_row(address, f"{base.value(address):.4g}", f"{found.fit.values[address]:.4g}",
                      "n/a" if math.isnan(sigma) else f"{sigma:.2g}", unit)  # fmt: skip
    out.print(table)
    table = Table(title="each run's error (simulated / measured - 1): before the fit, after it, and "
                  "left out of it (n/a: the other runs cannot fit the values)")  # fmt: skip
    for column in ("run", "figure", "before", "fitted", "left out"):
        table.add_column(column, justify="left" if column in ("run", "figure") else "right")
    for k, name in enumerate(files):
        left_out = found.left_out[k]
        for i, figure in enumerate(found.figures[k]):
            table.add_row(Path(name).name if i == 0 else "", figure, _percent(found.before[k][i]),
                          _percent(found.fit.errors[k][i]),
                          "n/a" if left_out is None else _percent(left_out[i]))  # fmt: skip
    out.print(table)


def _percent(v: float) -> str:
    return f"{100 * v:+.1f}%"
