"""Tensor vs pipeline parallelism on the same 8 chips: the comparison `--tp` / `--pp` exists for.

  python benchmarks/parallelism_figures.py                 # print the table
  python benchmarks/parallelism_figures.py --write-docs    # ... and write it into docs/hardware-model.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

from doc_sections import add_write_docs, write_section

from simulator.hardware import load_hardware
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.report.build import build_report
from tcp_compiler.simulate import simulate_generation

PAGE = Path(__file__).parents[1] / "docs" / "hardware-model.md"
BEGIN, END = "<!-- parallelism: benchmarks/parallelism_figures.py -->", "<!-- end parallelism -->"
MODEL, DTYPE, PROMPT, GEN = "llama-3.1-70b", "fp8", 2048, 16
SPLITS = [(8, 1), (4, 2), (2, 4)]  # (tp, pp) over 8 chips
BATCHES = [1, 32]


def row(tp: int, pp: int, batch: int) -> str:
    hw = load_hardware("rngd", tp * pp)
    sim = simulate_generation(load_model(MODEL).config, hw, precision(DTYPE), batch, PROMPT, GEN, tp, pp=pp)
    r = build_report(sim, top=1)
    busy = "-"
    if r.pipeline is not None:
        busy = f"{100 * min(s.prefill_busy_share for s in r.pipeline.stages):.0f}% / " + (
            f"{100 * min(s.decode_busy_share for s in r.pipeline.stages):.0f}%"
        )
    return (
        f"| {tp} x {pp} | {batch} | {r.ttft_seconds * 1e3:,.1f} "
        f"| {r.prefill.config_bound_seconds * 1e3:,.1f} "
        f"| {r.decode.tpot_seconds_mean * 1e3:.2f} | {r.decode.config_bound_seconds_mean * 1e3:.2f} "
        f"| {r.decode_tokens_per_s:,.0f} | {r.memory.weights_bytes / 1e9:.1f} | {busy} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    add_write_docs(parser, PAGE)
    args = parser.parse_args()
    lines = [
        "### Tensor vs pipeline parallelism on 8 chips",
        "",
        "Written by `python benchmarks/parallelism_figures.py --write-docs`: "
        f"{MODEL} {DTYPE}, prompt {PROMPT},",
        f"{GEN} generated tokens. `floor` is the config-only bound over all 8 chips. `busy`: the least",
        "busy stage's share of TTFT / TPOT. Weights: per chip, of the fullest stage.",
        "",
        "| tp x pp | batch | TTFT ms | floor | TPOT ms | floor | decode tok/s | weights GB | busy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for batch in BATCHES:
        for tp, pp in SPLITS:
            lines.append(row(tp, pp, batch))
            print(lines[-1], flush=True)
    if args.write_docs:
        write_section(PAGE, BEGIN, END, lines, write=True)


if __name__ == "__main__":
    main()
