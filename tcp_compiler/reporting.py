"""The simulation report: one JSON-able dict (schema in docs/report-schema.md), rendered as rich
terminal tables or Markdown. Seconds come from cycles at the spec's clock plus one kernel launch
per program (the spec's kernel_launch_s)."""

from __future__ import annotations

import numpy as np

from ir import DType
from simulator.program import UNITS
from simulator.report import OpTotals, bound
from tcp_compiler.simulate import Simulation

SCHEMA = "tcpc.report/1"


def _ce_dtype(sim: Simulation) -> DType:
    """The contraction engine's operand dtype in this precision (int weights are dequantised)."""
    p = sim.precision
    return p.act if p.quantised else p.weight


def _rates(sim: Simulation) -> dict[str, float]:
    hw, m = sim.hardware, sim.machine
    return {
        "flops_per_s": 2 * m.macs(_ce_dtype(sim)) * hw.clock_hz,
        "hbm_bytes_per_s": hw.hbm_sustained_bytes_per_cycle * hw.clock_hz,
        "link_bytes_per_s": hw.link_bytes_per_s,
        "dma_bytes_per_cycle": m.dma_bytes_per_cycle,
    }


def _roofline(flops: float, hbm: float, link: float, rates: dict[str, float]) -> tuple[float, float, float]:
    return flops / rates["flops_per_s"], hbm / rates["hbm_bytes_per_s"], link / rates["link_bytes_per_s"]


def _phase(seconds, flops, hbm, link, rates) -> dict:
    terms = _roofline(flops, hbm, link, rates)
    return {"roofline_seconds": max(terms), "bound": bound(seconds, *terms)}


def _ops(totals: OpTotals, steps: int, sim: Simulation, top: int | None) -> list[dict]:
    """Per op, averaged per program run (per decode step for decode), heaviest first."""
    clock, rates = sim.hardware.clock_hz, _rates(sim)
    rows = []
    for i, name in enumerate(totals.names):
        seconds = totals.span_cycles[i] / clock / steps
        flops, hbm = totals.flops[i] / steps, totals.hbm_bytes[i] / steps
        link, dm = totals.link_bytes[i] / steps, totals.dm_bytes[i] / steps
        terms = _roofline(flops, hbm, link, rates)
        moved = hbm + dm
        rows.append(
            {
                "name": name, "kind": totals.kinds[i], "layer": int(totals.layers[i]),
                "placement": totals.placements[i], "seconds": seconds,
                "tensor_unit_seconds": totals.main_cycles[i] / clock / steps, "flops": flops,
                "hbm_bytes": hbm, "dm_bytes": dm, "link_bytes": link,
                "intensity": flops / moved if moved else 0.0, "roofline_seconds": max(terms),
                "bound": bound(seconds, *terms),
            }
        )  # fmt: skip
    rows.sort(key=lambda r: -r["seconds"])
    return rows[:top] if top else rows


def _layers(totals: OpTotals, steps: int, sim: Simulation) -> list[dict]:
    """Per decoder layer (-1: embedding, final norm and LM head), per step for decode."""
    clock, rates = sim.hardware.clock_hz, _rates(sim)
    rows = []
    for index, layer in enumerate(totals.layer_ids.tolist()):
        pick = totals.layers == layer
        seconds = float(totals.layer_span_cycles[index]) / clock / steps
        flops = float(totals.flops[pick].sum()) / steps
        hbm = float(totals.hbm_bytes[pick].sum()) / steps
        link = float(totals.link_bytes[pick].sum()) / steps
        moved = hbm + float(totals.dm_bytes[pick].sum()) / steps
        terms = _roofline(flops, hbm, link, rates)
        rows.append(
            {
                "layer": int(layer), "seconds": seconds,
                "tensor_unit_seconds": float(totals.main_cycles[pick].sum()) / clock / steps,
                "flops": flops, "hbm_bytes": hbm, "intensity": flops / moved if moved else 0.0,
                "roofline_seconds": max(terms), "bound": bound(seconds, *terms),
            }
        )  # fmt: skip
    return rows


def _units(totals: OpTotals, cycles: float, sim: Simulation) -> list[dict]:
    """Busy cycles and utilisation per unit; the DMA engines and links by bytes against bandwidth."""
    rates, clock = _rates(sim), sim.hardware.clock_hz
    busy = totals.unit_busy.sum(axis=0)
    rows = []
    for u, unit in enumerate(UNITS):
        if unit == "tensor_dma":  # the cycles its moves would take at the engines' full rate
            cycles_busy = float(totals.dma_bytes.sum()) / rates["dma_bytes_per_cycle"]
            utilisation = cycles_busy / cycles
        elif unit == "chip_link":
            utilisation = totals.link_bytes.sum() / (cycles / clock * rates["link_bytes_per_s"])
            cycles_busy = float(busy[u])
        else:
            utilisation = busy[u] / cycles
            cycles_busy = float(busy[u])
        rows.append({"unit": unit, "busy_cycles": cycles_busy, "utilisation": float(min(utilisation, 1.0))})
    return rows


def build_report(sim: Simulation, top: int | None = 20) -> dict:
    hw, clock, rates = sim.hardware, sim.hardware.clock_hz, _rates(sim)
    launch = hw.kernel_launch_s
    p = sim.prefill.program
    prefill_seconds = sim.prefill.cycles / clock + launch
    prefill = {
        "cycles": sim.prefill.cycles, "seconds": prefill_seconds, "launch_seconds": launch,
        "flops": int(p.flops.sum()), "hbm_bytes": int(p.hbm_bytes.sum()),
        **_phase(prefill_seconds, p.flops.sum(), p.hbm_bytes.sum(), p.link_bytes.sum(), rates),
    }  # fmt: skip
    steps = len(sim.decode_cycles)
    tpot = sim.decode_cycles / clock + launch
    decode: dict = {"steps": steps}
    if steps:
        link = sim.decode_ops.link_bytes.sum() / steps
        decode.update(
            {
                "tpot_seconds_mean": float(tpot.mean()), "tpot_seconds_first": float(tpot[0]),
                "tpot_seconds_last": float(tpot[-1]), "seconds_total": float(tpot.sum()),
                "flops_per_step_mean": float(sim.decode_flops.mean()),
                "hbm_bytes_per_step_mean": float(sim.decode_hbm.mean()),
                **_phase(float(tpot.mean()), sim.decode_flops.mean(), sim.decode_hbm.mean(), link, rates),
            }
        )  # fmt: skip
        decode["roofline_seconds_mean"] = decode.pop("roofline_seconds")
    total = prefill_seconds + (float(tpot.sum()) if steps else 0.0)
    cap = sim.capacity
    kv_per_token = cap.kv_cache / max(1, sim.batch * (sim.prompt_len + max(sim.gen_len - 1, 0)))
    report = {
        "schema": SCHEMA,
        "model": sim.config.name,
        "family": sim.config.family,
        "hardware": {
            "name": hw.name, "chips": sim.chips, "clock_hz": clock, "peak_flops_per_s": rates["flops_per_s"],
            "hbm_bytes_per_s": rates["hbm_bytes_per_s"], "assumed": list(hw.assumed_keys),
        },
        "batch": sim.batch, "prompt_len": sim.prompt_len, "gen_len": sim.gen_len, "dtype": sim.precision.name,
        "prefill": prefill,
        "decode": decode,
        "ttft_seconds": prefill_seconds,
        "throughput_tokens_per_s": sim.batch * sim.gen_len / total if total else 0.0,
        "decode_tokens_per_s": sim.batch / decode["tpot_seconds_mean"] if steps else 0.0,
        "units": {"prefill": _units(sim.prefill_ops, sim.prefill.cycles, sim)},
        "layers": {"prefill": _layers(sim.prefill_ops, 1, sim)},
        "ops": {"prefill": _ops(sim.prefill_ops, 1, sim, top)},
        "attention": {"prefill": sim.attention},
        "memory": {
            "hbm_capacity_bytes": cap.available, "weights_bytes": cap.weights, "kv_cache_bytes": cap.kv_cache,
            "kv_cache_bytes_per_token": kv_per_token, "activations_bytes": cap.activations,
            "free_bytes": cap.free,
        },
    }  # fmt: skip
    if steps:
        report["units"]["decode"] = _units(sim.decode_ops, float(sim.decode_cycles.sum()), sim)
        report["layers"]["decode"] = _layers(sim.decode_ops, steps, sim)
        report["ops"]["decode"] = _ops(sim.decode_ops, steps, sim, top)
    return _plain(report)


def _plain(value):
    """numpy scalars to Python numbers, so the report serialises as JSON."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def attention_lines(report: dict) -> list[str]:
    """One line per attention form the prefill used: form, tile, how many layers, and why (the
    first such layer's reason)."""
    groups: dict[tuple, list[dict]] = {}
    for note in report["attention"]["prefill"]:
        groups.setdefault((note["form"], note.get("rows"), note.get("block")), []).append(note)
    total = len(report["attention"]["prefill"])
    lines = []
    for (form, rows, block), notes in groups.items():
        what = (
            "plain softmax" if form == "plain" else f"online softmax, tiles of {rows} queries x {block} keys"
        )
        lines.append(f"prefill attention: {what} in {len(notes)} of {total} layers ({notes[0]['reason']})")
    return lines


def render_markdown(report: dict) -> str:
    """The report as Markdown: summary, units, top ops per phase, memory."""
    hw, pre, dec = report["hardware"], report["prefill"], report["decode"]
    lines = [
        f"# {report['model']} on {hw['name']} ({hw['chips']} chip(s))",
        "",
        f"{report['dtype']}, batch {report['batch']}, prompt {report['prompt_len']}, "
        f"gen {report['gen_len']}.",
        "",
        "| phase | seconds | roofline seconds | bound |",
        "|---|---:|---:|---|",
        f"| prefill (TTFT) | {pre['seconds']:.6f} | {pre['roofline_seconds']:.6f} | {pre['bound']} |",
    ]
    if dec["steps"]:
        lines.append(
            f"| decode (TPOT mean of {dec['steps']}) | {dec['tpot_seconds_mean']:.6f} | "
            f"{dec['roofline_seconds_mean']:.6f} | {dec['bound']} |"
        )
    lines += ["", f"Throughput: {report['throughput_tokens_per_s']:.2f} tokens/s end to end.", ""]
    lines += [f"- {line}" for line in attention_lines(report)] + [""]
    for phase, units in report["units"].items():
        lines += [f"## Units, {phase}", "", "| unit | busy cycles | utilisation |", "|---|---:|---:|"]
        lines += [f"| {u['unit']} | {u['busy_cycles']:.0f} | {100 * u['utilisation']:.1f} % |" for u in units]
        lines.append("")
    for phase, ops in report["ops"].items():
        lines += [f"## Top ops, {phase}", "", "| op | layer | seconds | FLOPs | HBM bytes | bound |",
                  "|---|---:|---:|---:|---:|---|"]  # fmt: skip
        lines += [
            f"| {o['name']} | {o['layer']} | {o['seconds']:.6f} | {o['flops']:.4g} | {o['hbm_bytes']:.4g} "
            f"| {o['bound']} |"
            for o in ops
        ]
        lines.append("")
    mem = report["memory"]
    lines += [
        "## Memory per chip",
        "",
        f"Weights {mem['weights_bytes']:,} B, KV cache {mem['kv_cache_bytes']:,} B "
        f"({mem['kv_cache_bytes_per_token']:.0f} B per token), free {mem['free_bytes']:,} B of "
        f"{mem['hbm_capacity_bytes']:,} B.",
    ]
    return "\n".join(lines) + "\n"
