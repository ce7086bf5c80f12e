"""Options stated once: flags generated from options dataclasses, the serve command's flags from
Workload / ServeOptions / Buckets, and sweep columns from the sweep points' fields."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

import pytest

from tcp_compiler.cli import build_parser
from tcp_compiler.cli.flags import add_flags, from_args
from tcp_compiler.option_fields import flagged, option, positive_number
from tcp_compiler.serve.options import Buckets, ServeOptions
from tcp_compiler.serve.workload import Workload
from tcp_compiler.sweep import COLUMNS, Point
from tcp_compiler.sweep.serve import SERVE_COLUMNS, ServePoint


@dataclass(frozen=True)
class Knobs:
    size: int = option(4, "elements (default %(default)s)", "N", bounds=(1, 8))
    rate: float | None = option(None, "per second", "R", parse=positive_number(10), exclusive="load")
    clients: int | None = option(None, "closed loop", "C", bounds=(1, 9), exclusive="load")
    mode: str = option("fast", "how (default %(default)s)", choices=("fast", "slow"))
    note: str = "no flag"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="knobs", exit_on_error=False)
    add_flags(p, Knobs)
    return p


def test_a_declared_field_is_a_flag_with_its_default_help_and_range() -> None:
    p = parser()
    assert from_args(Knobs, p.parse_args([])) == Knobs()
    args = p.parse_args(["--size", "8", "--rate", "2.5", "--mode", "slow"])
    assert from_args(Knobs, args, note="x") == Knobs(size=8, rate=2.5, mode="slow", note="x")
    text = p.format_help()
    assert "--size N" in text and "elements (default 4)" in text and "{fast,slow}" in text
    assert "[--rate R | --clients C]" in p.format_usage()
    assert "--note" not in text
    with pytest.raises(argparse.ArgumentError, match="expected an integer from 1 to 8, got '9'"):
        p.parse_args(["--size", "9"])
    with pytest.raises(argparse.ArgumentError, match="expected a number above 0 and at most 10, got '11'"):
        p.parse_args(["--rate", "11"])


def test_serve_flags_are_the_declared_options() -> None:
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]
    dests = {action.dest: action for action in serve._actions}
    for cls, suffix in ((Workload, ""), (ServeOptions, ""), (Buckets, "_bucket")):
        for field, how in flagged(cls):
            action = dests[field.name + suffix]
            assert action.default == field.default and action.help == how.help, field.name
    args = build_parser().parse_args(["serve"])
    assert from_args(Workload, args) == Workload()
    assert from_args(ServeOptions, args, buckets=from_args(Buckets, args, "_bucket")) == ServeOptions()


def test_sweep_rows_begin_with_their_points_options() -> None:
    assert COLUMNS[: len(fields(Point))] == ("hash", *(f.name for f in fields(Point) if f.name != "spec"))
    assert SERVE_COLUMNS[1:11] == tuple(f.name for f in fields(ServePoint) if f.name not in ("seed", "spec"))
    assert "seed" not in SERVE_COLUMNS and "spec" not in SERVE_COLUMNS


def test_grid_flags_repeat_alias_and_switch_as_declared() -> None:
    import argparse

    from tcp_compiler.cli.flags import add_flags, from_args
    from tcp_compiler.cli.study import SweepGrid

    parser = argparse.ArgumentParser()
    add_flags(parser, SweepGrid)
    assert from_args(SweepGrid, parser.parse_args([])) == SweepGrid()
    args = ["--hw", "a", "--hw", "b,c", "--tp", "2,4", "--serve", "--set", "chip.clock_hz=1e9,2e9",
            "--set", "dma.engines=4"]  # fmt: skip
    got = from_args(SweepGrid, parser.parse_args(args))
    assert got.hw == ("a", "b", "c") and got.chips == (2, 4) and got.serve is True
    assert got.set == (("chip.clock_hz", (1e9, 2e9)), ("dma.engines", (4,)))
