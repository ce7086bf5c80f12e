"""The report as Markdown (`tcpc simulate --markdown`): what the terminal shows, with every layer
and (with `top=0`) every op role, for reading or pasting into a review."""

from __future__ import annotations

from collections.abc import Sequence

from simulator.target import Sites
from tcp_compiler.analysis.limiter import limiter_line
from tcp_compiler.report.text import (
    LAYER_COLUMNS,
    OTHER_NOTE,
    PIPELINE_COLUMNS,
    ROLE_COLUMNS,
    attention_lines,
    chips_text,
    device_noun,
    energy_lines,
    layer_cells,
    layer_label,
    pipeline_caption,
    pipeline_cells,
    pipeline_title,
    role_cells,
    runtime_lines,
    top_roles,
    unrun_line,
)
from tcp_compiler.report.types import Report

_LEFT = {"op role", "bound", "attention", "layer", "unit"}


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table, numbers right-aligned; `|` in a cell is escaped."""
    align = ["---" if c in _LEFT else "---:" for c in columns]
    lines = [f"| {' | '.join(columns)} |", f"|{'|'.join(align)}|"]
    lines += [f"| {' | '.join(cell.replace('|', chr(92) + '|') for cell in row)} |" for row in rows]
    return [*lines, ""]


def _phase_seconds(report: Report) -> dict[str, float]:
    return {"prefill": report.prefill.seconds, "decode": report.decode.tpot_seconds_mean or 0.0}


def render_markdown(report: Report, sites: Sites, top: int = 10) -> str:
    """Summary with what limits each phase (in the words of `sites`, where it ran), units, every
    layer, the `top` op roles per phase (0: all), memory."""
    hw, pre, dec = report.hardware, report.prefill, report.decode
    lines = [
        f"# {report.model} on {hw.name} ({chips_text(hw.chips, hw.ranks_per_card)})",
        "",
        f"{report.dtype}, batch {report.batch}, prompt {report.prompt_len}, gen {report.gen_len}.",
        "",
        "| phase | seconds | roofline seconds | bound |",
        "|---|---:|---:|---|",
        f"| prefill (TTFT) | {pre.seconds:.6f} | {pre.roofline_seconds:.6f} | {pre.bound} |",
    ]
    if dec.steps:
        lines.append(
            f"| decode (TPOT mean of {dec.steps}) | {dec.tpot_seconds_mean:.6f} | "
            f"{dec.roofline_seconds_mean:.6f} | {dec.bound} |"
        )
    lines += ["", f"Throughput: {report.throughput_tokens_per_s:.2f} tokens/s end to end.", ""]
    for phase, part in (("prefill", pre), ("decode", dec)):
        if part.limiter is not None:
            lines.append(
                f"- {limiter_line(phase, part.limiter, sites, shown=len(part.limiter.parts), least=0.0)}"
            )
    notes = [*runtime_lines(report), *attention_lines(report), *energy_lines(report)]
    lines += [f"- {line}" for line in notes] + [""]
    if report.pipeline is not None:
        pipe = report.pipeline
        lines += [f"## {pipeline_title(pipe).capitalize()}", "", pipeline_caption(pipe) + ".", ""]
        lines += _table(PIPELINE_COLUMNS, [pipeline_cells(s) for s in pipe.stages])
    for phase, units in report.units.items():
        lines += [f"## Units, {phase}", "", "| unit | busy cycles | utilisation |", "|---|---:|---:|"]
        lines += [f"| {u.unit} | {u.busy_cycles:.0f} | {100 * u.utilisation:.1f} % |" for u in units]
        lines.append("")
    seconds = _phase_seconds(report)
    for phase, layers in report.layers.items():
        per_step = " (per step)" if phase == "decode" else ""
        lines += [f"## Layers, {phase}{per_step}", "", f"Share: of the phase's time; {OTHER_NOTE}.", ""]
        ordered = sorted(layers, key=lambda row: (row.layer < 0, row.layer))  # the non-layer ops last
        rows = [[layer_label(row.layer), *layer_cells(row, seconds[phase])] for row in ordered]
        lines += _table(("layer", *LAYER_COLUMNS), rows)
    for phase, roles in report.op_roles.items():
        shown, rest = top_roles(roles, top)
        per_step = " (per step)" if phase == "decode" else ""
        lines += [f"## Top op roles, {phase}{per_step}", "",
                  "One row per op across layers: n ops, their total time, the time per layer, the share "
                  "of the phase's time (ops overlap, so shares can sum past 100%).", ""]  # fmt: skip
        lines += _table(ROLE_COLUMNS, [role_cells(r) for r in shown])
        if rest:
            lines += [rest, ""]
    mem = report.memory
    lines += [
        f"## Memory per {device_noun(report.hardware.ranks_per_card)}",
        "",
        f"Weights {mem.weights_bytes:,} B, KV cache {mem.kv_cache_bytes:,} B "
        f"({mem.kv_cache_bytes_per_token:.0f} B per token"
        + (f" + {mem.state_bytes_per_sequence:,} B per sequence of state" if mem.state_bytes_per_sequence
           else "")
        + f"), free {mem.free_bytes:,} B of "
        f"{mem.hbm_capacity_bytes:,} B.",
    ]
    if mem.unrun_params:
        lines += ["", unrun_line(mem)]
    return "\n".join(lines) + "\n"
