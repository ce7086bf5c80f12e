"""Builds the simulation report (tcp_compiler.report_types) from a simulation, and renders it as
Markdown. Seconds come from cycles at the spec's clock plus one kernel launch per program (the
spec's kernel_launch_s)."""

from __future__ import annotations

from dataclasses import dataclass

from ir import DType
from simulator.numbers import plural
from simulator.report import OpTotals, bound
from simulator.units import UNITS
from tcp_compiler.report_types import (
    Attention,
    AttentionNote,
    DecodePhase,
    HardwareSummary,
    LayerRow,
    Layers,
    Memory,
    OpRow,
    Ops,
    PrefillPhase,
    Report,
    UnitRow,
    Units,
)
from tcp_compiler.simulate import Simulation


def _ce_dtype(sim: Simulation) -> DType:
    """The contraction engine's operand dtype in this precision (int weights are dequantised)."""
    p = sim.precision
    return p.act if p.quantised else p.weight


@dataclass(frozen=True)
class _Rates:
    """The roofs, from the spec's own derived values."""

    flops_per_s: float
    hbm_bytes_per_s: float
    link_bytes_per_s: float

    @classmethod
    def of(cls, sim: Simulation) -> _Rates:
        hw = sim.hardware
        return cls(hw.flops_per_second(_ce_dtype(sim)), hw.hbm_bytes_per_second, hw.link_bytes_per_s)

    def roofline(self, flops: float, hbm: float, link: float) -> tuple[float, float, float]:
        """Seconds of the compute, memory and communication terms."""
        return flops / self.flops_per_s, hbm / self.hbm_bytes_per_s, link / self.link_bytes_per_s


def _ops(totals: OpTotals, steps: int, sim: Simulation, top: int | None) -> tuple[OpRow, ...]:
    """Per op, averaged per program run (per decode step for decode), heaviest first."""
    clock, rates = sim.hardware.clock_hz, _Rates.of(sim)
    rows = []
    for i, name in enumerate(totals.names):
        seconds = totals.span_cycles[i] / clock / steps
        flops, hbm = totals.flops[i] / steps, totals.hbm_bytes[i] / steps
        link, dm = totals.link_bytes[i] / steps, totals.dm_bytes[i] / steps
        terms = rates.roofline(flops, hbm, link)
        moved = hbm + dm
        rows.append(
            OpRow(
                name=name, kind=totals.kinds[i], layer=int(totals.layers[i]), placement=totals.placements[i],
                seconds=seconds, tensor_unit_seconds=totals.main_cycles[i] / clock / steps, flops=flops,
                hbm_bytes=hbm, dm_bytes=dm, link_bytes=link, intensity=flops / moved if moved else 0.0,
                hbm_intensity=flops / hbm if hbm else 0.0,
                roofline_seconds=max(terms), bound=bound(seconds, *terms),
            )
        )  # fmt: skip
    rows.sort(key=lambda r: -r.seconds)
    return tuple(rows[:top] if top else rows)


def _layers(totals: OpTotals, steps: int, sim: Simulation) -> tuple[LayerRow, ...]:
    """Per decoder layer (-1: embedding, final norm and LM head), per step for decode."""
    clock, rates = sim.hardware.clock_hz, _Rates.of(sim)
    rows = []
    for index, layer in enumerate(totals.layer_ids.tolist()):
        pick = totals.layers == layer
        seconds = float(totals.layer_span_cycles[index]) / clock / steps
        flops = float(totals.flops[pick].sum()) / steps
        hbm = float(totals.hbm_bytes[pick].sum()) / steps
        link = float(totals.link_bytes[pick].sum()) / steps
        moved = hbm + float(totals.dm_bytes[pick].sum()) / steps
        terms = rates.roofline(flops, hbm, link)
        rows.append(
            LayerRow(
                layer=int(layer), seconds=seconds,
                tensor_unit_seconds=float(totals.main_cycles[pick].sum()) / clock / steps,
                flops=flops, hbm_bytes=hbm, intensity=flops / moved if moved else 0.0,
                hbm_intensity=flops / hbm if hbm else 0.0,
                roofline_seconds=max(terms), bound=bound(seconds, *terms),
            )
        )  # fmt: skip
    return tuple(rows)


def _units(totals: OpTotals, cycles: float, sim: Simulation) -> tuple[UnitRow, ...]:
    """Busy cycles and utilisation per unit (simulator.units): units that move bytes (DMA, links)
    by those bytes at their full bandwidth, the others by their busy cycles in the Program."""
    busy = totals.unit_busy.sum(axis=0)
    rows = []
    for u, unit in enumerate(UNITS):
        if unit.moves is not None:
            cycles_busy = float(getattr(totals, unit.moves).sum()) / unit.bandwidth(sim.hardware)
        else:
            cycles_busy = float(busy[u])
        utilisation = float(min(cycles_busy / cycles, 1.0))
        rows.append(UnitRow(unit=unit.name, busy_cycles=cycles_busy, utilisation=utilisation))
    return tuple(rows)


def _decode(sim: Simulation, rates: _Rates) -> DecodePhase:
    steps = len(sim.decode_cycles)
    if not steps:
        return DecodePhase(steps=0)
    tpot = sim.decode_cycles / sim.hardware.clock_hz + sim.hardware.kernel_launch_s
    mean = float(tpot.mean())
    flops, hbm = sim.decode_flops.mean(), sim.decode_hbm.mean()
    terms = rates.roofline(flops, hbm, sim.decode_ops.link_bytes.sum() / steps)
    return DecodePhase(
        steps=steps, tpot_seconds_mean=mean, tpot_seconds_first=float(tpot[0]),
        tpot_seconds_last=float(tpot[-1]), seconds_total=float(tpot.sum()), flops_per_step_mean=float(flops),
        hbm_bytes_per_step_mean=float(hbm), bound=bound(mean, *terms), roofline_seconds_mean=max(terms),
    )  # fmt: skip


def build_report(sim: Simulation, top: int | None = 20) -> Report:
    hw, clock, rates = sim.hardware, sim.hardware.clock_hz, _Rates.of(sim)
    launch = hw.kernel_launch_s
    p = sim.prefill.program
    prefill_seconds = sim.prefill.cycles / clock + launch
    terms = rates.roofline(p.flops.sum(), p.hbm_bytes.sum(), p.link_bytes.sum())
    prefill = PrefillPhase(
        cycles=sim.prefill.cycles, seconds=prefill_seconds, launch_seconds=launch, flops=int(p.flops.sum()),
        hbm_bytes=int(p.hbm_bytes.sum()), roofline_seconds=max(terms), bound=bound(prefill_seconds, *terms),
    )  # fmt: skip
    decode = _decode(sim, rates)
    steps = decode.steps
    total = prefill_seconds + (decode.seconds_total if steps else 0.0)
    cap = sim.capacity
    kv_per_token = cap.kv_cache / max(1, sim.batch * (sim.prompt_len + max(sim.gen_len - 1, 0)))
    return Report(
        model=sim.config.name,
        family=sim.config.family,
        hardware=HardwareSummary(
            name=hw.name, chips=sim.chips, clock_hz=clock, peak_flops_per_s=rates.flops_per_s,
            hbm_bytes_per_s=rates.hbm_bytes_per_s, assumed=tuple(hw.assumed_keys),
        ),
        batch=sim.batch, prompt_len=sim.prompt_len, gen_len=sim.gen_len, dtype=sim.precision.name,
        prefill=prefill,
        decode=decode,
        ttft_seconds=prefill_seconds,
        throughput_tokens_per_s=sim.batch * sim.gen_len / total if total else 0.0,
        decode_tokens_per_s=sim.batch / decode.tpot_seconds_mean if steps else 0.0,
        units=Units(
            prefill=_units(sim.prefill_ops, sim.prefill.cycles, sim),
            decode=_units(sim.decode_ops, float(sim.decode_cycles.sum()), sim) if steps else None,
        ),
        layers=Layers(
            prefill=_layers(sim.prefill_ops, 1, sim),
            decode=_layers(sim.decode_ops, steps, sim) if steps else None,
        ),
        ops=Ops(
            prefill=_ops(sim.prefill_ops, 1, sim, top),
            decode=_ops(sim.decode_ops, steps, sim, top) if steps else None,
        ),
        attention=Attention(prefill=tuple(AttentionNote(**note) for note in sim.attention)),
        memory=Memory(
            hbm_capacity_bytes=cap.available, weights_bytes=cap.weights, kv_cache_bytes=cap.kv_cache,
            kv_cache_bytes_per_token=kv_per_token, activations_bytes=cap.activations, free_bytes=cap.free,
        ),
    )  # fmt: skip


def attention_lines(report: Report) -> list[str]:
    """One line per attention form the prefill used: form, tile, how many layers, and why (the
    first such layer's reason)."""
    notes = report.attention.prefill
    groups: dict[tuple, list[AttentionNote]] = {}
    for note in notes:
        groups.setdefault((note.form, note.rows, note.block), []).append(note)
    lines = []
    for (form, rows, block), group in groups.items():
        what = (
            "plain softmax" if form == "plain" else f"online softmax, tiles of {rows} queries x {block} keys"
        )
        lines.append(f"prefill attention: {what} in {len(group)} of {len(notes)} layers ({group[0].reason})")
    return lines


def render_markdown(report: Report) -> str:
    """The report as Markdown: summary, units, top ops per phase, memory."""
    hw, pre, dec = report.hardware, report.prefill, report.decode
    lines = [
        f"# {report.model} on {hw.name} ({plural(hw.chips, 'chip')})",
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
    lines += [f"- {line}" for line in attention_lines(report)] + [""]
    for phase, units in report.units.items():
        lines += [f"## Units, {phase}", "", "| unit | busy cycles | utilisation |", "|---|---:|---:|"]
        lines += [f"| {u.unit} | {u.busy_cycles:.0f} | {100 * u.utilisation:.1f} % |" for u in units]
        lines.append("")
    for phase, ops in report.ops.items():
        lines += [f"## Top ops, {phase}", "", "| op | layer | seconds | FLOPs | HBM bytes | bound |",
                  "|---|---:|---:|---:|---:|---|"]  # fmt: skip
        lines += [
            f"| {o.name} | {o.layer} | {o.seconds:.6f} | {o.flops:.4g} | {o.hbm_bytes:.4g} | {o.bound} |"
            for o in ops
        ]
        lines.append("")
    mem = report.memory
    lines += [
        "## Memory per chip",
        "",
        f"Weights {mem.weights_bytes:,} B, KV cache {mem.kv_cache_bytes:,} B "
        f"({mem.kv_cache_bytes_per_token:.0f} B per token), free {mem.free_bytes:,} B of "
        f"{mem.hbm_capacity_bytes:,} B.",
    ]
    return "\n".join(lines) + "\n"
