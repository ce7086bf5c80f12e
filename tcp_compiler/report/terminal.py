"""The report on the terminal (`tcpc simulate`): a summary with what limits each phase, units,
the layers (identical ones collapsed into one row) and the heaviest op roles.

Every table fits the console without cutting a header or a value (tcp_compiler.report.tables: a long
op role or layer list wraps, columns that do not fit side by side stack) and has no vertical rules;
the Markdown and JSON reports hold it all.
"""

from __future__ import annotations

from rich.console import Console

from simulator.numbers import duration, si
from simulator.target import Sites
from tcp_compiler.analysis.limiter import limiter_line
from tcp_compiler.report.tables import line_table
from tcp_compiler.report.text import (
    LAYER_COLUMNS,
    OTHER_NOTE,
    PIPELINE_COLUMNS,
    ROLE_COLUMNS,
    attention_lines,
    chips_text,
    device_noun,
    energy_lines,
    layer_groups,
    pipeline_caption,
    pipeline_cells,
    pipeline_title,
    role_cells,
    runtime_lines,
    top_roles,
    unrun_line,
)
from tcp_compiler.report.types import Report

LAYER_ROWS = 12  # at most this many rows of layer groups per phase
_LEFT = {"phase", "bound", "op role", "unit", "layers", "attention"}
_FIRST_WIDTH = 24  # characters of an op role or a layer list before it wraps


def print_report(report: Report, sites: Sites, console: Console, top: int = 10) -> None:
    """Prints the report of a run on `sites` (its target's: the limiter's words); `top` op roles
    per phase (0: all)."""
    hw = report.hardware
    console.print(
        f"[bold]{report.model}[/bold] on [bold]{hw.name}[/bold] ({chips_text(hw.chips, hw.ranks_per_card)}), "
        f"{report.dtype}, batch {report.batch}, prompt {report.prompt_len}, gen {report.gen_len}"
    )
    _summary(report, sites, console)
    _pipeline(report, console)
    _units(report, console)
    _layers(report, console)
    _roles(report, console, top)
    mem = report.memory
    console.print(
        f"HBM per {device_noun(hw.ranks_per_card)}: weights {si(mem.weights_bytes, 'B')}, "
        f"KV cache {si(mem.kv_cache_bytes, 'B')} "
        f"({si(mem.kv_cache_bytes_per_token, 'B')}/token"
        + (f" + {si(mem.state_bytes_per_sequence, 'B')}/sequence of state" if mem.state_bytes_per_sequence
           else "")
        + f"), free {si(mem.free_bytes, 'B')} of "
        f"{si(mem.hbm_capacity_bytes, 'B')}"
    )
    if mem.unrun_params:
        console.print(unrun_line(mem))
    if hw.assumed:
        console.print(f"[dim]assumed spec values: {', '.join(hw.assumed)}[/dim]")


def _summary(report: Report, sites: Sites, console: Console) -> None:
    pre, dec = report.prefill, report.decode
    rows = [[
        "prefill", duration(pre.seconds), duration(pre.roofline_seconds),
        f"{pre.seconds / pre.roofline_seconds:.2f}",
        f"{pre.seconds / pre.config_bound_seconds:.2f}", pre.bound, si(pre.flops), si(pre.hbm_bytes, "B"),
    ]]  # fmt: skip
    if dec.steps:
        rows.append([
            "decode", duration(dec.tpot_seconds_mean), duration(dec.roofline_seconds_mean),
            f"{dec.tpot_seconds_mean / dec.roofline_seconds_mean:.2f}",
            f"{dec.tpot_seconds_mean / dec.config_bound_seconds_mean:.2f}", dec.bound,
            si(dec.flops_per_step_mean), si(dec.hbm_bytes_per_step_mean, "B"),
        ])  # fmt: skip
    # x roof: against the program's own FLOPs and bytes; x model: against the config-only floor.
    columns = ("phase", "time", "roofline", "x roof", "x model", "bound", "FLOPs", "HBM")
    console.print(line_table("summary: prefill = TTFT, decode = mean TPOT", columns, rows, console.width,
                             left=_LEFT))  # fmt: skip
    if dec.steps:
        console.print(
            f"TPOT first {duration(dec.tpot_seconds_first)}, last {duration(dec.tpot_seconds_last)}; "
            f"decode {report.decode_tokens_per_s:.1f} tokens/s, end to end "
            f"{report.throughput_tokens_per_s:.1f} tokens/s"
        )
    if pre.model_flops:
        executed = "" if pre.flops == pre.model_flops else f", the program executes {si(pre.flops)}"
        console.print(
            f"prefill: the model's math is {si(pre.model_flops)} FLOPs{executed}; model FLOPs utilisation "
            f"{100 * pre.model_flops_utilisation:.1f}%"
        )
    for phase, part in (("prefill", pre), ("decode", dec)):
        if part.limiter is not None:
            console.print(limiter_line(phase, part.limiter, sites))
    for line in [*runtime_lines(report), *attention_lines(report)]:
        console.print(line)
    for line in energy_lines(report):
        console.print(line)


def _pipeline(report: Report, console: Console) -> None:
    """Per stage: its layers and how much of each phase it works (the rest it waits)."""
    pipe = report.pipeline
    if pipe is not None:
        rows = [pipeline_cells(s) for s in pipe.stages]
        console.print(line_table(pipeline_title(pipe), PIPELINE_COLUMNS, rows, console.width,
                                 left={"stage", "layers"}, caption=pipeline_caption(pipe)))  # fmt: skip


def _units(report: Report, console: Console) -> None:
    """One table, a column pair per phase."""
    phases = report.units.items()
    columns = ("unit", *(f"{label} {phase}" for phase, _ in phases for label in ("busy cycles", "util")))
    rows = []
    for index, first in enumerate(phases[0][1]):
        cells = [first.unit]
        for _, units in phases:
            cells += [f"{units[index].busy_cycles:,.0f}", f"{100 * units[index].utilisation:.1f} %"]
        rows.append(cells)
    title = "units: busy cycles and utilisation" + (" (decode: all steps)" if len(phases) > 1 else "")
    console.print(line_table(title, columns, rows, console.width, left=_LEFT))


def _layers(report: Report, console: Console) -> None:
    """Identical layers (same printed figures) collapse into one row; at most LAYER_ROWS rows."""
    seconds = {"prefill": report.prefill.seconds, "decode": report.decode.tpot_seconds_mean or 0.0}
    for phase, layers in report.layers.items():
        groups = layer_groups(layers, seconds[phase])
        per_step = " (per step)" if phase == "decode" else ""
        rows = [[g.label, str(len(g.layers)), *g.cells] for g in groups[:LAYER_ROWS]]
        caption = f"n layers with identical figures share a row; {OTHER_NOTE}"
        title = f"layers, {phase}{per_step}: figures per layer"
        columns = ("layers", "n", *LAYER_COLUMNS)
        console.print(line_table(title, columns, rows, console.width, left=_LEFT, caption=caption,
                                 elastic_max=_FIRST_WIDTH))  # fmt: skip
        if len(groups) > LAYER_ROWS:
            left = groups[LAYER_ROWS:]
            console.print(
                f"... {len(left)} more rows ({sum(len(g.layers) for g in left)} layers): every layer is in "
                "--markdown and --json"
            )


def _roles(report: Report, console: Console, top: int) -> None:
    for phase, roles in report.op_roles.items():
        shown, rest = top_roles(roles, top)
        per_step = " (per step)" if phase == "decode" else ""
        title = f"top op roles, {phase}{per_step}: {len(shown)} of {len(roles)}"
        caption = "a role is one op across layers (n ops); share: of the phase's time (ops overlap)"
        rows = [role_cells(r) for r in shown]
        console.print(line_table(title, ROLE_COLUMNS, rows, console.width, left=_LEFT, caption=caption,
                                 elastic_max=_FIRST_WIDTH))  # fmt: skip
        if rest:
            console.print(rest)
