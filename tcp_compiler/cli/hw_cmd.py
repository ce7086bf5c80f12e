"""`tcpc hw show NAME|FILE` and `tcpc hw list`: the hardware spec, its sources and derived peaks.

Architects read this before trusting any simulated number: which values are published, which are
assumptions (knobs), and what peaks and ridge points they imply.
"""

from __future__ import annotations

import argparse
import json

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from simulator.hardware import list_presets, load_hardware
from simulator.spec import Spec
from simulator.target import AreaModel
from simulator.targets import target_of
from tcp_compiler.cli.console import console
from tcp_compiler.report.tables import line_table, wrap

_KIND_STYLE = {"published": "green", "derived": "cyan", "assumed": "bold yellow"}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "hw",
        help="show the hardware spec (presets or a TOML file) with sources and derived peaks",
        description="Inspect hardware specs: every parameter with its unit and source (published, "
        "derived or assumed), and the peaks they imply.",
    )
    commands = p.add_subparsers(title="hw commands", metavar="HW_COMMAND")
    show = commands.add_parser(
        "show",
        help="print one spec: parameters by table, then derived peaks",
        description="Load a preset by name (see `tcpc hw list`) or a spec file, validate it, and print "
        "its parameters with unit and source, then MACs/cycle, TFLOP/s, HBM bandwidth, ridge points "
        "and on-chip memory totals.",
    )
    show.add_argument("spec", metavar="NAME|FILE", nargs="?", default="rngd",
                      help="a preset name such as rngd-4, or a .toml file (default rngd)")  # fmt: skip
    show.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    show.set_defaults(hw_action="show")
    listing = commands.add_parser("list", help="list the bundled presets", description="List the presets.")
    listing.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    listing.set_defaults(hw_action="list")
    p.set_defaults(run=run, hw_action=None, hw_help=p.print_help)


def run(args: argparse.Namespace) -> int:
    if args.hw_action == "show":
        hw = load_hardware(args.spec)
        if args.json:
            print(json.dumps(hw.to_dict(), indent=2))
        else:
            _print_spec(hw)
        return 0
    if args.hw_action == "list":
        _print_presets(args.json)
        return 0
    args.hw_help()
    return 0


def _print_presets(as_json: bool) -> None:
    presets = [load_hardware(name) for name in list_presets()]
    if as_json:
        rows = [{"name": h.name, "chips": h.system.chips, "description": h.description} for h in presets]
        print(json.dumps(rows, indent=2))
        return
    out = console()
    rows = [(h.name, str(h.system.chips), h.description) for h in presets]
    out.print(line_table("hardware presets (tcpc hw show NAME)", ("name", "chips", "description"), rows,
                         out.width, elastic=2, left={"name", "description"}))  # fmt: skip


def _print_spec(hw: Spec) -> None:
    """One borderless table per section, all with the same columns: each parameter's value with its
    unit (the readable form; `--json` has the exact numbers) and its source, wrapped at spaces or
    after a `/` of a path to the width left, so no word is cut and the table reads at 100 columns."""
    out = console()
    extends = f", extends {hw.extends}" if hw.extends else ""
    out.print(Text.assemble((f"hardware {hw.name}", "bold"), f"  ({hw.path}{extends})"))
    if hw.description:
        out.print(Text(hw.description))
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for dotted, value, unit, source in hw.parameters():
        group, key = dotted.rsplit(".", 1)
        groups.setdefault(group, []).append((key, _compact_value(value, unit), source))
    rows = [row for params in groups.values() for row in params]
    key_width = max(len(key) for key, _, _ in rows)
    value_width = max(len("value"), *(len(value) for _, value, _ in rows))
    source_width = max(_MIN_SOURCE, out.width - key_width - value_width - 6)  # 3 between columns
    for number, (group, params) in enumerate(groups.items()):
        table = Table(
            title=Text(f"[{group}]", style="bold"), title_justify="left", box=box.SIMPLE_HEAD,
            show_edge=False, pad_edge=False, show_header=number == 0,
        )  # fmt: skip
        table.add_column("key", no_wrap=True, width=key_width)
        table.add_column("value", justify="right", no_wrap=True, width=value_width)
        table.add_column("source", no_wrap=True, width=source_width)
        for key, value, source in params:
            kind, _, reference = source.partition(":")
            text = Text("\n".join(wrap(f"{kind}:{reference}", source_width)))
            text.stylize(_KIND_STYLE.get(kind, ""), 0, len(kind) + 1)
            table.add_row(Text(key, style="yellow" if kind == "assumed" else ""), value, text)
        out.print(table)
    assumed = hw.assumed_keys
    if assumed:
        out.print(
            Text.assemble(
                (f"{len(assumed)} values are assumed", "bold yellow"),
                " (knobs, not published; override them in a file that extends this one): ",
                ", ".join(assumed),
            )
        )

    _print_compute(out, hw)
    _print_memory(out, hw)
    area = target_of(hw).area
    if area is not None:
        _print_area(out, hw, area)


_MIN_SOURCE = 12  # characters: narrower terminals get longer lines rather than a sliver of source


def _compact_value(value: int | float, unit: str) -> str:
    """The readable form when there is one (64 GB/s, 2 us, 512 KiB), else the value and its unit."""
    human = _human(value, unit)
    if human:
        return human
    text = f"{int(value):,}" if isinstance(value, float) and value.is_integer() else f"{value:,}"
    return f"{text} {unit}".rstrip()


def _print_compute(console: Console, hw: Spec) -> None:
    multi = hw.system.chips > 1
    title = f"peak compute per chip at {hw.chip.clock_hz / 1e9:g} GHz" + (
        f" ({hw.system.chips} chips)" if multi else ""
    )
    columns = ["dtype", "MAC/lane/cycle", "MACs/cycle", "TFLOP/s", "ridge FLOP/B"]
    if multi:
        columns.append(f"TFLOP/s x {hw.system.chips}")
    rows = []
    for dtype, per_lane in hw.contraction.macs_per_lane_cycle.items():
        assumed = hw.is_assumed(f"contraction.macs_per_lane_cycle.{dtype}")
        label = dtype + (" (assumed)" if assumed else "")
        tflops = hw.flops_per_second(dtype) / 1e12
        row = [label, f"{per_lane:,}", f"{hw.macs_per_cycle(dtype):,}", f"{tflops:,.1f}"]
        row.append(f"{hw.ridge_flops_per_byte(dtype):,.1f}")
        if multi:
            row.append(f"{hw.system.chips * tflops:,.1f}")
        rows.append(row)
    console.print(line_table(title, columns, rows, console.width, left={"dtype"}))
    console.print("ridge point = peak FLOP/s / sustained HBM bytes/s: below it an op is memory-bound")


def _print_memory(console: Console, hw: Spec) -> None:
    columns = ["quantity", "per chip"] + ([f"x {hw.system.chips} chips"] if hw.system.chips > 1 else [])
    gbs = lambda bytes_per_s: f"{bytes_per_s / 1e9:,.0f} GB/s"
    gb = lambda n: f"{n / 1e9:,.0f} GB"
    dma = hw.dma_bytes_per_cycle * hw.chip.clock_hz
    rows = [
        ("PEs", f"{hw.pes}", f"{hw.system.chips * hw.pes:,}"),
        (
            "slices",
            f"{hw.slices:,} ({hw.slices_per_cluster} per cluster)",
            f"{hw.system.chips * hw.slices:,}",
        ),
        ("DM (SRAM)", _binary(hw.dm_bytes), _binary(hw.system.chips * hw.dm_bytes)),
        ("TRF", _binary(hw.trf_bytes), _binary(hw.system.chips * hw.trf_bytes)),
        ("VRF", _binary(hw.vrf_bytes), _binary(hw.system.chips * hw.vrf_bytes)),
        ("HBM capacity", gb(hw.hbm.capacity_bytes), gb(hw.system.chips * hw.hbm.capacity_bytes)),
        ("HBM peak", gbs(hw.hbm_peak_bytes_per_second), gbs(hw.system.chips * hw.hbm_peak_bytes_per_second)),
        ("HBM sustained", gbs(hw.hbm_bytes_per_second), gbs(hw.system.chips * hw.hbm_bytes_per_second)),
        ("TensorDMA (all engines)", gbs(dma), gbs(hw.system.chips * dma)),
        ("chip-to-chip link, per direction", gbs(hw.system.link_bytes_per_s), "-"),
    ]
    cells = [row[: len(columns)] for row in rows]
    title = "memory and bandwidth per chip"
    console.print(line_table(title, columns, cells, console.width, left={"quantity"}))


def _print_area(console: Console, hw: Spec, area: AreaModel) -> None:
    """The die area by part as the area model adds it, beside the published die it is checked on."""
    table = Table(title=Text("die area per chip (the [area] table's model)"), title_justify="left")
    table.add_column("part")
    table.add_column("mm^2", justify="right", no_wrap=True)
    table.add_column("sized by")
    sized_by = area.sized_by(hw)
    for part, mm2 in area.parts(hw).items():
        table.add_row(part, f"{mm2:,.1f}", sized_by[part])
    table.add_row(Text("total", style="bold"), Text(f"{hw.area_mm2:,.1f}", style="bold"),
                  f"{area.published}: {area.published_mm2(hw):g} mm^2")  # fmt: skip
    console.print(table)


def _format_value(value: int | float, unit: str) -> str:
    """Exact value with thousands separators, plus a readable form for large or small magnitudes."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        text = f"{int(value):,}"
    else:
        text = f"{value:,}" if isinstance(value, int) else f"{value:g}"
    human = _human(value, unit)
    return f"{text} ({human})" if human else text


def _human(value: float, unit: str) -> str:
    if unit == "s" and value < 1:
        return f"{value * 1e6:g} us" if value < 1e-3 else f"{value * 1e3:g} ms"
    if unit == "B" and value >= 1024:
        if value % 1024 == 0 and value < 1e9:
            return _binary(int(value))
        return f"{value / 1e9:g} GB" if value >= 1e9 else ""
    if unit in ("Hz", "B/s") and value >= 1e6:
        for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
            if value >= scale:
                return f"{value / scale:g} {prefix}{unit}"
    return ""


def _binary(n: int) -> str:
    """Bytes in binary units, as on-chip memories are sized (256 MiB of DM)."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"
