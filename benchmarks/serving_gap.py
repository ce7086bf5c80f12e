"""Issue 24's gap, replayed: Llama-3.1-8B bf16 on one card served in a closed loop at concurrencies
1-128 with chat-like lengths, by the checkout the issue was filed against ("before") and by this one
(as it stands, and with the card run as 8 PE ranks). The issue states how the measured card compares
with "before" (its TPOT about 1.4x at concurrency 1 and about 2x at 128); the measured runs
themselves are held back, so this is the nearest check of the 20 % goal that can be made here.

  python benchmarks/serving_gap.py --json now.json          # measure with this checkout
  PYTHONPATH=<old checkout> python benchmarks/serving_gap.py --variant card --json before.json
  python benchmarks/serving_gap.py --before before.json --now now.json --write-docs  # the table
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

from doc_sections import add_write_docs, write_section

from tcp_compiler.cli import main as tcpc

PAGE = Path(__file__).parents[1] / "docs" / "validation.md"
BEGIN, END = "<!-- serving gap: benchmarks/serving_gap.py -->", "<!-- end serving gap -->"
CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128)
LENGTHS = ("--prompt-len", "uniform:64:1024", "--gen-len", "uniform:64:1024", "--seed", "0")
VARIANTS = {"card": (), "8 PE ranks": ("--set", "system.pe_partitions=8")}
# What the issue states of the measured card against the "before" simulation (TPOT ratios).
STATED = {1: 1.4, 128: 2.0}


def serve(concurrency: int, extra: tuple[str, ...]) -> dict:
    """TPOT p50 (ms) and output tokens/s of one closed-loop run of 3 x C requests."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run.json"
        args = ["serve", "llama-3.1-8b", "--concurrency", str(concurrency),
                "--requests", str(3 * concurrency), *LENGTHS, *extra, "--json", str(out)]  # fmt: skip
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = tcpc(args)
        if code:
            sys.exit(f"tcpc {' '.join(args)} exited {code}")
        result = json.loads(out.read_text())
    tpot, rate = result["tpot_seconds"]["p50"], result["throughput_output_tokens_per_s"]
    return {"tpot_ms": tpot * 1e3, "output_tps": rate}


def measure(variants: dict[str, tuple[str, ...]]) -> dict[str, dict[str, dict]]:
    return {name: {str(c): serve(c, extra) for c in CONCURRENCIES} for name, extra in variants.items()}


def table(before: dict, now: dict) -> list[str]:
    old = before["card"]
    names = list(now)
    lines = [
        "| concurrency | TPOT p50 ms before | " + " | ".join(f"{n} now | / before" for n in names)
        + " | output tok/s before | " + " | ".join(f"{n} now" for n in names) + " |",
        "|---:|---:|" + "---:|---:|" * len(names) + "---:|" + "---:|" * len(names),
    ]  # fmt: skip
    for c in CONCURRENCIES:
        key, base = str(c), old[str(c)]
        ratios = " | ".join(f"{now[n][key]['tpot_ms']:.2f} | {now[n][key]['tpot_ms'] / base['tpot_ms']:.2f}x"
                            for n in names)  # fmt: skip
        rates = " | ".join(f"{now[n][key]['output_tps']:,.0f}" for n in names)
        lines.append(f"| {c} | {base['tpot_ms']:.2f} | {ratios} | {base['output_tps']:,.0f} | {rates} |")
    return lines


def reading(before: dict, now: dict) -> list[str]:
    """Each stated end of the issue's gap against what this checkout gives there."""
    lines = []
    for name, runs in now.items():
        parts = []
        for c, stated in STATED.items():
            ratio = runs[str(c)]["tpot_ms"] / before["card"][str(c)]["tpot_ms"]
            parts.append(f"{ratio:.2f}x at concurrency {c} against the stated {stated:.1f}x, so about "
                         f"{ratio / stated:.2f} of the measured TPOT")  # fmt: skip
        lines.append(f"- {name}: TPOT now / before is " + "; ".join(parts) + ".")
    return lines


def write(before: dict, now: dict, label: str, write_docs: bool) -> None:
    lines = [
        "## Issue 24's gap, replayed",
        "",
        f"Written by `python benchmarks/serving_gap.py --before ... --write-docs`; before = {label}. "
        "Llama-3.1-8B bf16 on one card, `tcpc serve --concurrency C --requests 3C --prompt-len "
        "uniform:64:1024 --gen-len uniform:64:1024 --seed 0`, as it stands (`card`) and with the card run "
        "as the vendor runtime's 8 PE ranks (`--set system.pe_partitions=8`). The issue measured a real card "
        "at nine concurrencies from 1 to 128 with chat-like lengths and states its TPOT as about 1.4x the "
        "before simulation's at concurrency 1 and about 2x at 128; those runs are held back, so the ratios "
        "below are the nearest check of its 20 % goal that can be made here (lengths assumed, only the two "
        "ends stated).",
        "",
        *table(before, now),
        "",
        *reading(before, now),
    ]
    write_section(PAGE, BEGIN, END, lines, write_docs)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="measure this checkout and write its figures here")
    parser.add_argument("--variant", action="append", choices=VARIANTS,
                        help="measure only these (default all; an old checkout has only 'card')")  # fmt: skip
    parser.add_argument("--before", help="the old checkout's figures (from --json there)")
    parser.add_argument("--now", help="this checkout's figures as --json wrote them (default: measure)")
    parser.add_argument("--before-label", default="commit 2b10820, the last before issue 24's work")
    add_write_docs(parser, PAGE)
    args = parser.parse_args()
    if args.now:
        now = json.loads(Path(args.now).read_text())
    else:
        now = measure({name: VARIANTS[name] for name in args.variant or VARIANTS})
    if args.json:
        Path(args.json).write_text(json.dumps(now, indent=1))
    if args.before:
        write(json.loads(Path(args.before).read_text()), now, args.before_label, args.write_docs)


if __name__ == "__main__":
    main()
