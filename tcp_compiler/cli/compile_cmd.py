"""`tcpc compile MODEL`: build a model's prefill or decode graph and emit it as IR text."""

from __future__ import annotations

import argparse
import sys

import ir
from simulator.hardware import load_hardware
from simulator.program_text import format_program
from tcp_compiler.cli.output import si, write_atomically
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.builder import ModelGraph, build_decode, build_prefill
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS, precision
from tcp_compiler.mapping.capacity import check_capacity, model_capacity
from tcp_compiler.mapping.machine import machine_from
from tcp_compiler.mapping.schedule import schedule
from tcp_compiler.passes import run_passes


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The options every command that builds a model graph shares."""
    p.add_argument("--batch", type=int, default=1, metavar="B", help="sequences per batch (default 1)")
    p.add_argument(
        "--dtype", default="bf16", choices=sorted(PRECISIONS), help="precision of weights and activations"
    )
    p.add_argument("--group-size", type=int, metavar="N", help="w4 only: elements per scale (default 128)")
    p.add_argument("--hw", default="rngd", metavar="NAME|FILE", help="hardware spec (default rngd)")
    p.add_argument("--chips", type=int, metavar="N", help="tensor-parallel chips (default: the spec's)")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "compile",
        help="build a model's prefill or decode graph and emit its IR",
        description="Build the IR graph of a model (a config.json, a checkpoint directory or a bundled "
        "name such as llama-3.1-8b) for one phase, and print it or write it to a file.",
    )
    p.add_argument("model", help="config.json, checkpoint directory, or bundled model name")
    p.add_argument("--phase", choices=("prefill", "decode"), default="prefill")
    p.add_argument("--seq", type=int, default=2048, metavar="S", help="prefill: prompt length (default 2048)")
    p.add_argument(
        "--past", type=int, default=2048, metavar="P", help="decode: tokens already cached (default 2048)"
    )
    p.add_argument(
        "--documents",
        type=int,
        default=0,
        metavar="N",
        help="prefill: pack N documents per row (inputs segment, position, ends; logits per document)",
    )
    add_model_arguments(p)
    p.add_argument(
        "--emit",
        choices=("ir", "program"),
        default="ir",
        help="the IR graph, or the mapped Program (default ir)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    p.set_defaults(run=run)


def build(args: argparse.Namespace, chips: int) -> ModelGraph:
    model = load_model(args.model)
    prec = precision(args.dtype, args.group_size)
    if args.documents < 0:
        raise CliError(f"--documents must be at least 0, got {args.documents}")
    if args.phase == "prefill":
        return build_prefill(model.config, prec, args.batch, args.seq, chips=chips, documents=args.documents)
    if args.documents:
        raise CliError("--documents applies to --phase prefill (a packed row has no decode)")
    return build_decode(model.config, prec, args.batch, args.past, chips=chips)


def run(args: argparse.Namespace) -> int:
    hw = load_hardware(args.hw)
    chips = args.chips or hw.chips
    built = build(args, chips)
    if args.emit == "program":
        machine = machine_from(hw)
        check_capacity(model_capacity(built, machine), built.graph.name, machine, chips)
        title = f"program {built.graph.name} on {hw.name} (one of {chips} chips)"
        text = format_program(schedule(run_passes(built.graph), machine), title)
    else:
        text = ir.print_graph(built.graph)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    write_atomically(args.output, text)
    flops = ir.analyze(built.graph).total.flops
    weights = sum(p.type.nbytes for p in built.checkpoint_params())
    print(
        f"wrote {args.output}: {built.graph.name}, {len(built.graph)} ops, "
        f"{si(flops, 'FLOP')}, {si(weights, 'B')} of weights"
    )
    return 0
