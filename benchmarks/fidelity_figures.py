"""The runs issue 12 asks to compare before and after its fidelity changes (MoE dispatch, rings and
bf16 collectives, chunked collectives, weight prefetch, KV rings, skipped masked blocks, the KV
store), each with the config-only floor where the code has one.

  python benchmarks/fidelity_figures.py --json now.json          # measure with this checkout
  python benchmarks/fidelity_figures.py --before before.json     # ... and print the table
  python benchmarks/fidelity_figures.py --before before.json --write-docs  # ... into docs/validation.md
  python benchmarks/fidelity_figures.py --now now.json --before before.json  # the table, measuring nothing
The "before" file comes from running the first form on an older checkout (the table says which).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from doc_sections import add_write_docs, write_section

from simulator.hardware import load_hardware
from tcp_compiler.errors import TcpcError
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions, compile_phase, run
from tcp_compiler.report.build import build_report
from tcp_compiler.simulate import simulate_generation

PAGE = Path(__file__).parents[1] / "docs" / "validation.md"
BEGIN, END = "<!-- fidelity: benchmarks/fidelity_figures.py -->", "<!-- end fidelity -->"

# (label, model, hardware, dtype, batch, prompt, generated tokens)
CASES = [
    ("Llama-3.1-70B fp8, 8 chips, batch 32", "llama-3.1-70b", "rngd-8", "fp8", 32, 2048, 8),
    ("Llama-3.1-70B fp8, 8 chips, batch 1", "llama-3.1-70b", "rngd-8", "fp8", 1, 2048, 8),
    ("Qwen3-30B-A3B fp8, 1 chip", "qwen3-30b-a3b", "rngd", "fp8", 1, 2048, 8),
    ("Mixtral-8x7B fp8, 2 chips", "mixtral-8x7b", "rngd-2", "fp8", 1, 2048, 8),
    ("Mixtral-8x7B fp8, 4 chips", "mixtral-8x7b", "rngd-4", "fp8", 1, 2048, 8),
    ("Gemma-3-27B bf16, 2 chips, 32k context (decode)", "gemma-3-27b", "rngd-2", "bf16", 1, 32768, 2),
]


def decode_only(model: str, hw_name: str, dtype: str, batch: int, past: int) -> dict:
    """One decode step against `past` cached positions: a 32k prefill is not what is asked."""
    hw, cfg, prec = load_hardware(hw_name), load_model(model).config, precision(dtype)
    compiled = compile_phase(cfg, hw, prec, "decode", past, CompileOptions(batch=batch))
    seconds = run(compiled.program, hw).cycles / hw.chip.clock_hz + hw.system.kernel_launch_s
    figures = {"tpot_ms": seconds * 1e3, "kv_mb": compiled.capacity.kv_cache / 1e6}
    try:
        from tcp_compiler.analysis.config_floor import phase_bound
    except ImportError:  # an older checkout has no floor
        return figures
    floor = (
        phase_bound(cfg, prec, hw, hw.system.chips, batch, "decode", past + 1).seconds
        + hw.system.kernel_launch_s
    )
    return {**figures, "decode_floor_ms": floor * 1e3}


def measure() -> dict[str, dict]:
    out = {}
    for label, model, hw, dtype, batch, prompt, gen in CASES:
        print(f"{label} ...", file=sys.stderr)
        if "(decode)" in label:
            out[label] = decode_only(model, hw, dtype, batch, prompt)
            continue
        try:
            sim = simulate_generation(load_model(model).config, load_hardware(hw), precision(dtype), batch,
                                      prompt, gen)  # fmt: skip
        except TcpcError as e:
            out[label] = {"error": str(e).splitlines()[0]}
            continue
        r = build_report(sim).to_dict()
        pre, dec = r["prefill"], r["decode"]
        system = ("host_seconds", "padding_seconds", "descriptor_seconds", "launch_seconds")
        out[label] = {
            "ttft_system_ms": sum(pre.get(k) or 0 for k in system) * 1e3,
            "tpot_system_ms": sum(dec.get(k) or 0 for k in system) * 1e3,
            "ttft_ms": pre["seconds"] * 1e3, "prefill_hbm_gb": pre["hbm_bytes"] / 1e9,
            "tpot_ms": dec["tpot_seconds_mean"] * 1e3, "kv_mb": r["memory"]["kv_cache_bytes"] / 1e6,
            "prefill_floor_ms": pre.get("config_bound_seconds", 0) * 1e3,
            "decode_floor_ms": (dec.get("config_bound_seconds_mean") or 0) * 1e3,
        }  # fmt: skip
    return out


def _cell(figures: dict, key: str, digits: int = 1) -> str:
    if "error" in figures:
        return "refused" if key in ("ttft_ms", "tpot_ms") else "-"
    value = figures.get(key)
    return f"{value:,.{digits}f}" if value else "-"


def write(now: dict, before: dict, before_label: str, write_docs: bool) -> None:
    rows = [
        "## Before and after issue 12's fidelity changes",
        "",
        "Written by `python benchmarks/fidelity_figures.py --before ... --write-docs`; "
        f"before = {before_label}.",
        "Prompt and batch as labelled, 8 generated tokens (the 32k case: one decode step at 32,768",
        "cached positions). `floor` is the config-only bound",
        "(tcp_compiler/analysis/config_floor.py). Assumed values that move these figures most: the chip-link",
        "latency (2 us; docs/hardware-model.md shows TPOT at 0.5-5 us) and uniform MoE routing.",
        "\"Now\" is what `tcpc simulate` reports today, the serving system's costs that issue 24 added",
        "included (host work per iteration, static-shape padding, KV descriptors, launch; \"before\" had",
        "none): the list under the table gives their part (the 32k case times the chip's step alone).",
        "",
        "| run | TTFT ms before | TTFT ms now | floor | TPOT ms before | TPOT ms now | floor "
        "| prefill HBM GB before | now | KV MB before | now |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, *_ in CASES:
        b, n = before.get(label, {"error": "not measured"}), now[label]
        rows.append(
            f"| {label} | {_cell(b, 'ttft_ms')} | {_cell(n, 'ttft_ms')} | {_cell(n, 'prefill_floor_ms')} "
            f"| {_cell(b, 'tpot_ms', 2)} | {_cell(n, 'tpot_ms', 2)} | {_cell(n, 'decode_floor_ms', 2)} "
            f"| {_cell(b, 'prefill_hbm_gb', 2)} | {_cell(n, 'prefill_hbm_gb', 2)} | {_cell(b, 'kv_mb')} "
            f"| {_cell(n, 'kv_mb')} |"
        )
    system = [
        f"- {label}, now: {n['ttft_system_ms']:,.1f} ms of the TTFT and {n['tpot_system_ms']:.2f} ms "
        "of the TPOT are the serving system's"
        for label, n in now.items()
        if "ttft_system_ms" in n
    ]
    errors = [f"- {label}, before: {b['error']}" for label, b in before.items() if "error" in b]
    write_section(PAGE, BEGIN, END, [*rows, "", *system, *errors], write_docs)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write this checkout's figures here")
    parser.add_argument("--before", help="an older checkout's figures: print the table comparing them")
    parser.add_argument("--now", help="this checkout's figures as --json wrote them (default: measure)")
    parser.add_argument("--before-label", default="commit b98a8c5, the start of issue 12's work")
    add_write_docs(parser, PAGE)
    args = parser.parse_args()
    now = json.loads(Path(args.now).read_text()) if args.now else measure()
    if args.json:
        Path(args.json).write_text(json.dumps(now, indent=1))
    if args.before:
        write(now, json.loads(Path(args.before).read_text()), args.before_label, args.write_docs)


if __name__ == "__main__":
    main()
