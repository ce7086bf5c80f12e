"""Serving runs against published RNGD figures: writes the serving section of docs/validation.md
(between its `serving` markers; benchmarks/validation.py writes the rest of that page).

- Llama 3.1 8B FP8, one card, 128 in / 4,096 out, published 3,935 tokens/s: the publication does
  not state its concurrency, so the run sweeps closed-loop concurrency (each client sends its
  next request when one ends: the steady load of a throughput benchmark), with the KV cache in
  bf16 and in fp8, and reports where the simulated server meets the figure.
- Llama 3.1 70B FP8 on 8 chips (tensor parallel), the same request shape.

Run: python benchmarks/serve_validation.py [--quick] [--write-docs]
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from doc_sections import add_write_docs, write_section

from ir import FP8E4M3
from simulator.hardware import load_hardware
from tcp_compiler.errors import TcpcError
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve import ServeOptions, serve, synthetic
from tcp_compiler.serve.workload import lengths

PAGE = Path(__file__).parents[1] / "docs" / "validation.md"
BEGIN, END = "<!-- serving: benchmarks/serve_validation.py -->", "<!-- end serving -->"
PUBLISHED_8B = 3935
ROUNDS = 2  # requests per client: the second round starts as the first one's requests end


def run(model: str, hw: str, kv: str, concurrency: int, attention: str = "paged") -> dict | str:
    prec = precision("fp8")
    if kv == "fp8":
        prec = replace(prec, kv=FP8E4M3)
    requests = synthetic(concurrency * ROUNDS, lengths("128"), lengths("4096"), None, True, 0)
    options = ServeOptions(concurrency=concurrency, max_seqs=concurrency, attention=attention)
    try:
        result = serve(load_model(model).config, load_hardware(hw), prec, requests, options)
        return serve_report(result).to_dict()
    except TcpcError as e:
        return str(e)


def table(title: str, model: str, hw: str, points: list[tuple[str, int]], published: int | None) -> list[str]:
    lines = [f"### {title}", "",
             "| KV dtype | concurrency | output tokens/s | vs published | TTFT p50 ms | TPOT p50 ms | "
             "peak KV blocks used | preemptions |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for kv, c in points:
        f = run(model, hw, kv, c)
        if isinstance(f, str):
            lines.append(f"| {kv} | {c} | {f} | | | | | |")
            continue
        tps = f["throughput_output_tokens_per_s"]
        vs = f"{(tps - published) / published:+.1%}" if published else ""
        k = f["kv_cache"]
        lines.append(
            f"| {kv} | {c} | {tps:,.0f} | {vs} | {f['ttft_seconds']['p50'] * 1e3:,.1f} | "
            f"{f['tpot_seconds']['p50'] * 1e3:.2f} | {k['peak_blocks_used']:,} of {k['blocks']:,} | "
            f"{f['preemptions']:,} |"
        )
        print(lines[-1], flush=True)
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one concurrency per table (a quick look)")
    add_write_docs(parser, PAGE)
    args = parser.parse_args()
    quick = args.quick
    small = [("bf16", 64)] if quick else [("bf16", 64), ("bf16", 128), ("fp8", 128), ("fp8", 256)]
    big = [("bf16", 64)] if quick else [("bf16", 64), ("bf16", 256)]
    body = [
        "## Serving: `tcpc serve` against published throughput",
        "",
        "Produced by `python benchmarks/serve_validation.py --write-docs`. "
        "Chunked prefill (2,048 tokens per iteration), "
        f"paged KV (16-token blocks, recompute preemption), {ROUNDS} requests per client in a closed loop, "
        "all at 128 in / 4,096 out; default cost grids (docs/serving.md gives their error).",
        "",
        *table(
            "Llama 3.1 8B, FP8, 1 card (published 3,935 tokens/s)",
            "llama-3.1-8b",
            "rngd",
            small,
            PUBLISHED_8B,
        ),
        *table("Llama 3.1 70B, FP8, 8 chips (tensor parallel)", "llama-3.1-70b", "rngd-8", big, None),
    ]
    write_section(PAGE, BEGIN, END, body, args.write_docs)


if __name__ == "__main__":
    main()
