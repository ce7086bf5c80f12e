"""`--tp` / `--pp` / `--micro-batches` / `--set`: the system a command runs on, spread over chips.

`--chips N` and `--tp N` are one option: N chips of tensor parallelism. `--pp P` adds P pipeline
stages of layers, each a tensor-parallel group, so a run takes tp x pp chips of the spec's kind.
`--set TABLE.KEY=V` changes one spec value for a what-if (tcp_compiler.spec_settings);
`--set system.pe_partitions=8` runs each card as 8 tensor-parallel ranks of one PE each.
`--no-sequence-parallel` keeps a tensor-parallel prefill's residual stream whole on every chip.
"""

from __future__ import annotations

import argparse

from simulator.hardware import load_hardware
from simulator.spec import Spec
from tcp_compiler.cli import arg_types
from tcp_compiler.cli.flags import flag_type
from tcp_compiler.errors import CliError
from tcp_compiler.spec_settings import spec_value, with_settings


def add_arguments(p: argparse.ArgumentParser, micro_batches: bool = True) -> None:
    p.add_argument(
        "--chips", "--tp", dest="chips", type=arg_types.chips, metavar="N",
        help="tensor-parallel chips of the spec's kind (per pipeline stage; default: the spec's count "
        "over --pp; --chips 4 on rngd is rngd-4)",
    )  # fmt: skip
    p.add_argument(
        "--pp", type=arg_types.chips, default=1, metavar="P",
        help="pipeline stages of layers, each on its own --tp chips (default 1)",
    )  # fmt: skip
    if micro_batches:
        p.add_argument(
            "--micro-batches", type=arg_types.chips, metavar="M",
            help="with --pp: micro-batches the prefill's batch splits into (default: up to --pp)",
        )  # fmt: skip
    p.add_argument(
        "--set", dest="settings", type=flag_type(spec_value), action="append", default=[],
        metavar="TABLE.KEY=V", help="what if a spec value were V (e.g. hbm.sustained_bytes_per_cycle=1440); "
        "repeatable",
    )  # fmt: skip


def add_sequence_parallel(p: argparse.ArgumentParser) -> None:
    """`--no-sequence-parallel`: a tensor-parallel prefill keeps every token of the residual stream
    on every chip (all-reduces), to compare with the default split (CompileOptions)."""
    p.add_argument(
        "--no-sequence-parallel", dest="sequence_parallel", action="store_false",
        help="tensor-parallel prefill: keep the whole residual stream on every chip, joined by "
        "all-reduces (default: split by tokens over the chips where they divide the prompt)",
    )  # fmt: skip


def system(args: argparse.Namespace) -> tuple[Spec, int]:
    """The hardware of tp x pp chips, with the `--set` values, and the tensor-parallel degree tp;
    with cards split into `system.pe_partitions` ranks, one rank's hardware and tp x that many
    ranks (Hardware.partitioned: the reductions between a card's ranks are collectives too)."""
    hw, tp = _chips(args)
    return with_settings(hw, args.settings).ranks(tp)


def _chips(args: argparse.Namespace) -> tuple[Spec, int]:
    if getattr(args, "micro_batches", None) is not None and args.pp == 1:
        raise CliError("--micro-batches applies to pipeline parallelism: give --pp too")
    if args.pp == 1:
        hw = load_hardware(args.hw, args.chips)
        return hw, args.chips or hw.system.chips
    tp = args.chips or max(load_hardware(args.hw).system.chips // args.pp, 1)
    if tp * args.pp > arg_types.MAX_CHIPS:
        raise CliError(f"--tp {tp} x --pp {args.pp} exceeds {arg_types.MAX_CHIPS} chips")
    return load_hardware(args.hw, tp * args.pp), tp
