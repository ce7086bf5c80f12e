"""Energy figures of the README's default run and of `tcpc serve`'s default, and how joules per token
move when each energy value moves by +-50 %: the generated sections of docs/energy.md.

  python -m benchmarks.energy_figures                # print the sections
  python -m benchmarks.energy_figures --write-docs   # ... and write them into docs/energy.md

The activity of a run does not depend on the energy values, so each what-if re-prices the same
simulated activity with `hw.with_value(address, value)`: one simulation per figure set.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from simulator.hardware import load_hardware
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.report.build import build_report
from tcp_compiler.report.energy import energy, mac_dtype
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve import ServeOptions, serve
from tcp_compiler.serve.workload import Workload
from tcp_compiler.simulate import Simulation, simulate_generation

PAGE = Path(__file__).parents[1] / "docs" / "energy.md"
MARKS = {
    name: (f"<!-- {name}: benchmarks/energy_figures.py -->", f"<!-- end {name} -->")
    for name in ("default-run", "serve-default", "sensitivity")
}
MODEL, PROMPT, GEN = "llama-3.1-8b", 2048, 128  # the README's default run (tcpc simulate)
# What would pin each value: the measurement that isolates it.
PINNED_BY = {
    "energy.mac_pj": "power of a compute-bound prefill (large batch x prompt) in that dtype, less static "
    "power, over its MACs (with trf_read: the two scale together)",
    "energy.vector_op_pj": "a Vector-Engine-only kernel (RMSNorm or softmax over a long row) at two sizes",
    "energy.vector_operand_bytes": "as vector_op_pj (VRF traffic and ALU ops scale together)",
    "energy.dm_pj_per_byte": "DM-to-DM TensorDMA copies (no HBM) at two sizes",
    "energy.trf_read_pj_per_byte": "as mac_pj; a GEMM whose stationary tile is reused longer separates it",
    "energy.trf_write_pj_per_byte": "GEMMs that reload the TRF often vs rarely (same MACs)",
    "energy.vrf_read_pj_per_byte": "as vector_op_pj",
    "energy.vrf_write_pj_per_byte": "as vector_op_pj",
    "energy.fetch_pj_per_flit": "a fetch-bound pass (elementwise over DM-resident data) at two sizes",
    "energy.switch_pj_per_flit": "a GEMM with wide vs narrow stream operands (same MACs)",
    "energy.commit_pj_per_flit": "a pass writing wide vs narrow results (same inputs)",
    "energy.hbm_pj_per_byte": "power of a memory-bound decode (batch 1) less static power, over HBM bytes; "
    "or the stack vendor's pJ/bit",
    "energy.dma_pj_per_byte": "HBM->DM vs DM->DM moves of the same bytes (separates it from HBM)",
    "energy.link_pj_per_byte": "an all-reduce loop on 2 chips at two sizes",
    "energy.host_pcie_pj_per_byte": "host <-> device copies at two sizes",
    "power.idle_w": "card power with the model loaded and no requests (furiosa-smi)",
    "power.active_baseline_w": "power of a kernel that keeps the device running with little activity "
    "(DMA start-up-bound small moves) less idle",
    "power.leakage_w": "idle power at two voltages (or die temperatures)",
    "operating_point.voltage_v": "a DVFS sweep: power of one kernel at several clocks",
}


def default_run() -> Simulation:
    hw = load_hardware("rngd")
    return simulate_generation(load_model(MODEL).config, hw, precision("bf16"), 1, PROMPT, GEN)


def run_lines(sim: Simulation) -> list[str]:
    e = build_report(sim, top=1).energy
    units = sorted(((u.unit, u.joules) for u in e.decode.by_unit), key=lambda x: -x[1])[:4]
    share = ", ".join(f"{name} {100 * j / e.decode.dynamic_joules:.0f}%" for name, j in units)
    return [
        f"`tcpc simulate` ({MODEL}, rngd, bf16, batch 1, prompt {PROMPT}, {GEN} generated tokens):",
        "",
        "| phase | energy | average power per chip | per token |",
        "|---|---:|---:|---:|",
        f"| prefill | {e.prefill.joules:.2f} J | {e.prefill.average_power_w:.0f} W | "
        f"{e.prefill.joules_per_token * 1e3:.2f} mJ / prompt token |",
        f"| decode step (mean) | {e.decode.joules:.3f} J | {e.decode.average_power_w:.0f} W | "
        f"{e.decode.joules_per_token:.3f} J / token |",
        f"| whole run | {e.joules:.1f} J | {e.average_power_w:.0f} W | {e.tokens_per_joule:.3f} tokens / J |",
        "",
        f"A decode step's dynamic energy ({e.decode.dynamic_joules:.3f} J of {e.decode.joules:.3f} J): "
        f"{share}.",
    ]


def serve_lines() -> list[str]:
    """`tcpc serve` with no arguments: llama-3.1-8b on rngd, 64 requests at 8/s, chunked prefill."""
    config = load_model(MODEL).config
    result = serve(config, load_hardware("rngd"), precision("bf16"), Workload().load(), ServeOptions())
    e = serve_report(result).energy
    return [
        f"`tcpc serve` ({MODEL}, rngd, bf16, 64 requests at 8/s, chunked prefill):",
        "",
        "| energy | mean power per chip | peak | idle | per request | output tokens / J |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {e.joules:,.0f} J | {e.average_power_w:.0f} W | {e.peak_power_w:.0f} W | "
        f"{e.idle_power_w:.0f} W | {e.joules_per_request:.1f} J | {e.output_tokens_per_joule:.2f} |",
    ]


def _per_token(sim: Simulation) -> tuple[float, float]:
    """(prefill J per prompt token, decode J per generated token) of a simulation's activity."""
    prefill_seconds, decode_seconds = _seconds(sim)
    e = energy(sim, prefill_seconds, decode_seconds)
    return e.prefill.joules_per_token, e.decode.joules_per_token


def _seconds(sim: Simulation) -> tuple[float, float]:
    hw = sim.hardware
    launch = hw.system.kernel_launch_s
    return (sim.prefill.cycles / hw.chip.clock_hz + launch,
            float((sim.decode_cycles / hw.chip.clock_hz + launch).sum()))  # fmt: skip


def sensitivity_lines(sim: Simulation) -> list[str]:
    hw = sim.hardware
    base = _per_token(sim)
    lines = [
        f"Joules per token of the default run (prefill {base[0] * 1e3:.2f} mJ / prompt token, decode "
        f"{base[1]:.3f} J / token) when one value moves by -50 % / +50 % (the others as specified):",
        "",
        "| value | source | prefill J/token | decode J/token | would be pinned by |",
        "|---|---|---:|---:|---|",
    ]
    run_mac = f"energy.mac_pj.{mac_dtype(sim)}"
    for address in hw.leaf_keys():
        table = address.split(".")[0]
        if table not in ("energy", "power") and address != "operating_point.voltage_v":
            continue
        if address.startswith("energy.mac_pj.") and address != run_mac:
            continue  # no MAC of this run is in another dtype
        pinned = PINNED_BY[address.rsplit(".", 1)[0] if address.startswith("energy.mac_pj") else address]
        moved = []
        for factor in (0.5, 1.5):
            value = hw.value(address) * factor
            value = max(1, round(value)) if isinstance(hw.value(address), int) else value
            moved.append(_per_token(dataclasses.replace(sim, hardware=hw.with_value(address, value))))
        kind = hw.sources[address].split(":")[0]
        cells = [
            " / ".join(f"{100 * (m[k] / base[k] - 1):+.1f}%" for m in moved) for k in (0, 1)
        ]
        lines.append(f"| `{address}` | {kind} | {cells[0]} | {cells[1]} | {pinned} |")
    return lines


def sections() -> dict[str, list[str]]:
    sim = default_run()
    return {
        "default-run": run_lines(sim), "serve-default": serve_lines(), "sensitivity": sensitivity_lines(sim)
    }


def main() -> None:
    try:  # run as a script (benchmarks/ is on the path) or as python -m benchmarks.energy_figures
        from doc_sections import add_write_docs, write_section
    except ModuleNotFoundError:
        from benchmarks.doc_sections import add_write_docs, write_section

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    add_write_docs(parser, PAGE)
    args = parser.parse_args()

    for name, lines in sections().items():
        print("\n".join(lines), end="\n\n")
        if args.write_docs:
            write_section(PAGE, *MARKS[name], lines, write=True)


if __name__ == "__main__":
    main()
