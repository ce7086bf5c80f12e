"""`tcpc inspect FILE.tir`: parse, verify and report counts, FLOPs, bytes and intensity per op."""

from __future__ import annotations

import argparse
import json

import ir
from ir.analysis import GraphCost
from ir.dot import to_dot
from tcp_compiler.cli import arg_types
from tcp_compiler.cli.console import console as make_console
from tcp_compiler.cli.output import announce, check_outputs, si, write_atomically
from tcp_compiler.provenance import provenance
from tcp_compiler.report.tables import line_table


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="parse and verify a .tir graph; report FLOPs, bytes and intensity per op",
        description="Parse and verify an IR graph, then print its op counts and, per op and in "
        "total, FLOPs, bytes read and written, and arithmetic intensity.",
    )
    p.add_argument("file", help="a .tir text file")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--dot", metavar="OUT.dot", help="also write the dataflow graph as Graphviz DOT")
    p.add_argument("--top", type=arg_types.top, metavar="N", help="list only the N ops with the most FLOPs")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_outputs({"--dot": args.dot})
    graph = ir.load(args.file)
    cost = ir.analyze(graph)
    if args.dot:
        write_atomically(args.dot, to_dot(graph))
        announce(args.dot, "Graphviz DOT")
    if args.json:
        print(json.dumps({**cost.to_json(), "provenance": provenance(args.argv)}, indent=2))
    else:
        _print_tables(args.file, cost, args.top)
    return 0


def _print_tables(source: str, cost: GraphCost, top: int | None) -> None:
    console = make_console()
    total = cost.total
    console.print(f"[bold]graph {cost.graph}[/bold]  ({source}, {len(cost.per_node)} ops)")

    bytes_by_kind: dict[str, int] = {}
    for nc in cost.per_node:
        bytes_by_kind[nc.node.kind] = bytes_by_kind.get(nc.node.kind, 0) + nc.cost.bytes
    flops = cost.flops_by_kind
    kind_rows = [
        (kind, str(count), si(flops[kind]), si(bytes_by_kind[kind], "B"),
         f"{100 * flops[kind] / total.flops:.1f} %" if total.flops else "-")
        for kind, count in sorted(cost.counts_by_kind.items(), key=lambda kv: (-flops[kv[0]], kv[0]))
    ]  # fmt: skip
    console.print(line_table("ops by kind", ("kind", "count", "FLOPs", "bytes", "share of FLOPs"), kind_rows,
                             console.width, left={"kind"}))  # fmt: skip

    rows = list(cost.per_node)
    title = "per op"
    if top is not None:
        rows = sorted(rows, key=lambda nc: -nc.cost.flops)[:top]
        title = f"top {len(rows)} ops by FLOPs"
    op_rows = [
        (f"%{nc.node.name}", nc.node.kind, str(nc.node.type), si(nc.cost.flops),
         si(nc.cost.bytes_read, "B"), si(nc.cost.bytes_written, "B"),
         f"{nc.cost.intensity:.2f}" if nc.cost.bytes else "-")
        for nc in rows
    ]  # fmt: skip
    columns = ("value", "op", "type", "FLOPs", "read", "written", "FLOP/B")
    # Types are the long cells: they wrap at their spaces.
    console.print(line_table(title, columns, op_rows, console.width, elastic=2, left={"value", "op", "type"}))
    link = f", chip links {si(total.link_bytes, 'B')}" if total.link_bytes else ""
    console.print(
        f"[bold]total[/bold]: {si(total.flops, 'FLOP')} ({total.flops:,} FLOPs), "
        f"read {si(total.bytes_read, 'B')}, written {si(total.bytes_written, 'B')}{link}, "
        f"intensity {total.intensity:.2f} FLOP/B"
    )
