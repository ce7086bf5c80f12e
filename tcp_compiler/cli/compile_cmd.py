"""`tcpc compile MODEL`: build a model's prefill or decode graph and emit it as IR text."""

from __future__ import annotations

import argparse
import sys

import ir
from tcp_compiler.cli.output import si, write_atomically
from tcp_compiler.frontend.builder import ModelGraph, build_decode, build_prefill
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS, precision


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The options every command that builds a model graph shares."""
    p.add_argument("--batch", type=int, default=1, metavar="B", help="sequences per batch (default 1)")
    p.add_argument(
        "--dtype", default="bf16", choices=sorted(PRECISIONS), help="precision of weights and activations"
    )
    p.add_argument("--group-size", type=int, metavar="N", help="w4 only: elements per scale (default 128)")


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
    add_model_arguments(p)
    p.add_argument("--emit", choices=("ir",), default="ir", help="what to emit (default ir)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    p.set_defaults(run=run)


def build(args: argparse.Namespace) -> ModelGraph:
    model = load_model(args.model)
    prec = precision(args.dtype, args.group_size)
    if args.phase == "prefill":
        return build_prefill(model.config, prec, args.batch, args.seq)
    return build_decode(model.config, prec, args.batch, args.past)


def run(args: argparse.Namespace) -> int:
    built = build(args)
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
