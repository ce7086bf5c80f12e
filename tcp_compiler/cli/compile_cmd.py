"""`tcpc compile MODEL`: build a model's prefill or decode graph and emit it as IR text."""

from __future__ import annotations

import argparse
import sys

import ir
from simulator.program import Program
from simulator.program_text import format_program
from simulator.spec import Spec
from tcp_compiler.cli import arg_types, parallel
from tcp_compiler.cli.output import check_outputs, si, write_atomically
from tcp_compiler.errors import CapacityError, CliError
from tcp_compiler.frontend.builder import ModelGraph
from tcp_compiler.frontend.model import bundled_models, load_model
from tcp_compiler.frontend.precision import KV_DTYPES, precision
from tcp_compiler.frontend.stages import pipeline_stages
from tcp_compiler.generation.fit import Asked, with_ways_out
from tcp_compiler.pipeline import CompileOptions, build, compile_phase
from tcp_compiler.pipeline import run as run_program


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The options every command that builds a model graph shares."""
    p.add_argument(
        "--batch", type=arg_types.batch, default=1, metavar="B", help="sequences per batch (default 1)"
    )
    arg_types.add_dtype(p, "bf16", "precision of weights and activations (default bf16)")
    p.add_argument(
        "--kv-dtype", choices=sorted(KV_DTYPES), help="KV cache dtype (default: the precision's)"
    )
    p.add_argument(
        "--group-size", type=arg_types.group_size, metavar="N",
        help="w4 only: elements per scale (default 128)",
    )  # fmt: skip
    p.add_argument("--hw", default="rngd", metavar="NAME|FILE", help="hardware spec (default rngd)")
    parallel.add_arguments(p, micro_batches=False)
    parallel.add_sequence_parallel(p)
    p.add_argument(
        "--stage", type=arg_types.integer(0, arg_types.MAX_CHIPS - 1), default=0, metavar="K",
        help="with --pp: the pipeline stage whose graph to build, from 0 (default 0)",
    )  # fmt: skip


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "compile",
        help="build a model's prefill or decode graph and emit its IR",
        description="Build the IR graph of a model (a config.json, a checkpoint directory or a bundled "
        "name such as llama-3.1-8b) for one phase, and print it or write it to a file.",
    )
    p.add_argument(
        "model", help=f"config.json, checkpoint directory, or bundled name: {', '.join(bundled_models())}"
    )
    p.add_argument("--phase", choices=("prefill", "decode"), default="prefill")
    p.add_argument(
        "--seq", type=arg_types.tokens, default=2048, metavar="S",
        help="prefill: prompt length (default 2048)",
    )  # fmt: skip
    p.add_argument(
        "--past", type=arg_types.tokens, default=2048, metavar="P",
        help="decode: tokens already cached (default 2048)",
    )  # fmt: skip
    p.add_argument(
        "--documents",
        type=arg_types.documents,
        default=0,
        metavar="N",
        help="prefill: pack N documents per row (inputs segment, position, ends; logits per document)",
    )
    add_model_arguments(p)
    p.add_argument(
        "--emit",
        choices=("ir", "ir-final", "program"),
        default="ir",
        help="ir: the graph as built; ir-final: the graph after the passes and the attention choice, "
        "as it is scheduled; program: the mapped Program with a totals line (default ir)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    p.set_defaults(run=run)


def check_args(args: argparse.Namespace) -> None:
    """The rules between flags (each flag's own range is its argparse type)."""
    if args.documents and args.phase == "decode":
        raise CliError("--documents applies to --phase prefill (a packed row has no decode)")
    if args.stage >= args.pp:
        raise CliError(f"--stage {args.stage} needs --pp {args.stage + 1} or more (stages count from 0)")
    if args.documents > args.seq:
        raise CliError(f"--documents {args.documents} exceeds --seq {args.seq}: each document needs a token")


def run(args: argparse.Namespace) -> int:
    check_args(args)
    check_outputs({"-o": args.output})
    model = load_model(args.model)
    hw, tp = parallel.system(args)
    prec = precision(args.dtype, args.group_size, args.kv_dtype)
    stage = pipeline_stages(model.config, args.pp)[args.stage] if args.pp > 1 else None
    options = CompileOptions(batch=args.batch, chips=tp, documents=args.documents, stage=stage,
                             sequence_parallel=args.sequence_parallel)  # fmt: skip
    length = args.seq if args.phase == "prefill" else args.past
    if args.emit == "ir":
        built = build(model.config, prec, args.phase, length, options, options.chips_on(hw))
        return _write(args.output, ir.print_graph(built.graph), built)
    # The final graph is printed whole: copying repeated layers' programs would leave them out of it.
    whole = args.emit == "ir-final"
    try:
        compiled = compile_phase(model.config, hw, prec, args.phase, length, options, replicate=not whole)
    except CapacityError as e:
        if args.pp > 1:
            raise
        asked = Asked(model.config, hw, prec, args.batch, length, length, tp, phase=args.phase)
        raise with_ways_out(e, asked) from None
    if args.emit == "ir-final":
        text = ir.print_graph(compiled.graph)
    else:
        chips = options.chips_on(hw)
        where = "one chip" if chips == 1 else f"one of {chips} chips"
        title = f"program {compiled.graph.name} on {hw.name} ({where})"
        text = format_program(compiled.program, title) + totals_line(compiled.program, hw) + "\n"
    return _write(args.output, text, compiled.model)


def totals_line(program: Program, hw: Spec) -> str:
    """The program's totals as `tcpc simulate` reports them for the same phase (engine cycles)."""
    cycles = run_program(program, hw).cycles
    return (
        f"total: {len(program):,} commands, {cycles:,} cycles, {int(program.flops.sum()):,} FLOPs, "
        f"{int(program.hbm_bytes.sum()):,} HBM bytes"
    )


def _write(output: str | None, text: str, built: ModelGraph) -> int:
    """The text on standard output, or into `output` with a one-line summary of the model."""
    if output is None:
        sys.stdout.write(text)
        return 0
    write_atomically(output, text)
    flops = ir.analyze(built.graph).total.flops
    weights = sum(p.type.nbytes for p in built.checkpoint_params())
    print(
        f"wrote {output}: {built.graph.name}, {len(built.graph)} ops, "
        f"{si(flops, 'FLOP')}, {si(weights, 'B')} of weights"
    )
    return 0
