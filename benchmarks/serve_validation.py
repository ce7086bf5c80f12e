"""Published RNGD serving figures against `tcpc serve`, each run the way it was measured: writes the
serving section of docs/validation.md (between its `serving` markers; benchmarks/validation.py
writes the page's top).

The vendor's benchmark method (furiosa-perf, a public repository: furiosa_perf/utils/config.py and
benchmark/vllm.py) is vLLM `bench serve` with fixed random lengths (`--random-range-ratio 0`),
`--ignore-eos`, `--request-rate inf`, `--max-concurrency C` and `--num-prompts 3 x C`. Each point
here is that run: a measured run holding the published figure alone
(tcp_compiler.validation.measured.MeasuredRun) replayed through the serving simulation as
`tcpc validate` replays a measured file (tcp_compiler.validation.replay): 3 x C requests of the
published lengths in a closed loop of C clients. Where a publication does not state C, the KV
dtype or the parallel layout, the table shows the plausible settings, each labelled.

Run: python benchmarks/serve_validation.py [--quick] [--write-docs]
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from doc_sections import add_write_docs, write_section

from simulator.hardware import load_hardware
from tcp_compiler.errors import TcpcError
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.serve import ServeOptions
from tcp_compiler.validation.measured import MeasuredRun
from tcp_compiler.validation.metrics import RunMetrics, Stat
from tcp_compiler.validation.replay import replay

PAGE = Path(__file__).parents[1] / "docs" / "validation.md"
BEGIN, END = "<!-- serving: benchmarks/serve_validation.py -->", "<!-- end serving -->"
ROUNDS = 3  # requests per client (furiosa-perf: --num-prompts 3 x --max-concurrency)
PRODUCT_PAGE = "furiosa.ai/rngd product page (via a third-party copy, b-lab.team, 2025-04); FuriosaSDK, FP8"


@dataclass(frozen=True)
class Published:
    """A published throughput and the settings it was measured with (those not stated: assumed)."""

    what: str
    source: str
    model: str
    dtype: str
    prompt: int
    gen: int
    output_tokens_per_s: float


@dataclass(frozen=True)
class Layout:
    """How the cards run the model: pp stages of tp cards each, dp replicas (`tcpc serve --dp`,
    behind a least-outstanding router)."""

    name: str
    tp: int = 1
    pp: int = 1
    dp: int = 1


LLAMA_8B = Published("Llama 3.1 8B, FP8, 1 card, 128 in / 4,096 out", PRODUCT_PAGE, "llama-3.1-8b", "fp8",
                     128, 4096, 3935.25)  # fmt: skip
SDK_2024_2 = 3300.0  # developer.furiosa.ai v2024.2.0 release notes, "3300 tokens/sec on 8B model"
LLAMA_70B = Published("Llama 3.1 70B, FP8, 8 cards, 2,048 in / 128 out", PRODUCT_PAGE, "llama-3.1-70b", "fp8",
                      2048, 128, 957.05)  # fmt: skip
# Before SDK 2025.3.0 (2025-08, inter-card tensor parallelism) a model spanned cards by pipeline
# parallelism, replicated by data parallelism (SDK 2024.1.0 release notes); 70B FP8 needs 2 cards.
LAYOUTS_70B = (Layout("pp 8", pp=8), Layout("pp 4 x dp 2", pp=4, dp=2), Layout("pp 2 x dp 4", pp=2, dp=4))


def point(figure: Published, kv: str, concurrency: int, layout: Layout = Layout("1 card")) -> dict | str:
    """The simulated figures of the vendor's method at `concurrency`, or why it cannot run."""
    n = ROUNDS * concurrency
    run = MeasuredRun(
        source=figure.source, concurrency=concurrency, rate=math.inf, input_tokens=np.full(n, figure.prompt),
        output_tokens=np.full(n, figure.gen), ttft_s=None, tpot_s=None, itl_s=None, latency_s=None,
        arrival_s=None, metrics=RunMetrics(Stat(), Stat(), Stat(), Stat(), figure.output_tokens_per_s, None),
        power_w=None,
    )  # fmt: skip
    config = load_model(figure.model).config
    hw = load_hardware("rngd", layout.tp * layout.pp)
    prec = precision(figure.dtype, kv_dtype=kv)
    try:
        options = ServeOptions(dp=layout.dp, router="least-outstanding")
        done = replay(run, config, hw, prec, options, CompileOptions(chips=layout.tp), pp=layout.pp)
    except TcpcError as e:
        return str(e)
    r, m = done.report, done.metrics
    return {"tokens_per_s": m.output_tokens_per_s or 0.0, "ttft_p50": m.ttft.p50,
            "tpot_p50": m.tpot.p50, "power_w": r.energy.average_power_w, "preemptions": r.preemptions,
            "peak_blocks": r.kv_cache.peak_blocks_used, "blocks": r.kv_cache.blocks}  # fmt: skip


def table(figure: Published, points: list[tuple[str, int, Layout]], also: float | None = None) -> list[str]:
    published = figure.output_tokens_per_s
    extra = f" | vs {also:,.0f}" if also else ""
    lines = [
        f"### {figure.what}: published {published:,.0f} tokens/s",
        "",
        f"Source: {figure.source}.",
        "",
        f"| layout | KV dtype | concurrency | output tokens/s | vs {published:,.0f}{extra} | TTFT p50 ms | "
        "TPOT p50 ms | W per chip | peak KV blocks used | preemptions |",
        "|---|---|---:|---:|---:|" + ("---:|" if also else "") + "---:|---:|---:|---:|---:|",
    ]
    for kv, c, layout in points:
        f = point(figure, kv, c, layout)
        if isinstance(f, str):
            lines.append(f"| {layout.name} | {kv} | {c} | does not run: {f} |" + " |" * (7 + bool(also)))
            print(lines[-1], flush=True)
            continue
        tps = f["tokens_per_s"]
        vs = f"{tps / published:.2f}x" + (f" | {tps / also:.2f}x" if also else "")
        power = f"{f['power_w']:.0f}" if layout.pp == 1 else "-"
        lines.append(
            f"| {layout.name} | {kv} | {c} | {tps:,.0f} | {vs} | {f['ttft_p50'] * 1e3:,.1f} | "
            f"{f['tpot_p50'] * 1e3:.2f} | {power} | {f['peak_blocks']:,} of {f['blocks']:,} | "
            f"{f['preemptions']:,} |"
        )
        print(lines[-1], flush=True)
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one point per table (a quick look)")
    add_write_docs(parser, PAGE)
    args = parser.parse_args()
    one = Layout("1 card")
    if args.quick:
        small, big = [("bf16", 64, one)], [("bf16", 32, LAYOUTS_70B[-1])]
    else:
        small = [("bf16", c, one) for c in (32, 64, 128, 256)] + [("fp8", c, one) for c in (64, 128, 256)]
        big = [("bf16", c, layout) for layout in LAYOUTS_70B for c in (32, 128)]
    body = [
        "## Serving: published figures against `tcpc serve`, the vendor's method",
        "",
        "Produced by `python benchmarks/serve_validation.py --write-docs`. Each point is the vendor's "
        "benchmark method (furiosa-perf: vLLM `bench serve`, fixed lengths, EOS ignored, request rate inf, "
        f"`--max-concurrency C`, `--num-prompts {ROUNDS} x C`) replayed through the serving simulation as "
        "`tcpc validate` replays a measured file: a closed loop of C clients, chunked prefill (2,048 tokens "
        "per iteration), paged KV (16-token blocks, recompute preemption), up to 256 sequences, default "
        "cost grids. `vs` is simulated / published. Assumed where unstated: the figure is output tokens/s "
        "(vLLM's `output_throughput`), and the concurrency, KV dtype and layout are each row's.",
        "",
        *table(LLAMA_8B, small, SDK_2024_2),
        f"The second ratio is against the SDK 2024.2.0 release notes' {SDK_2024_2:,.0f} tokens/s on the 8B "
        "model (developer.furiosa.ai, 2024-12-23; settings unstated, assumed the product page's).",
        "",
        *table(LLAMA_70B, big),
        "Layouts: the figure predates inter-card tensor parallelism (SDK 2025.3.0, 2025-08), so the cards "
        "ran pipeline stages (`--pp`) and data-parallel replicas (SDK 2024.1.0 release notes): `--dp` "
        "replicas behind a least-outstanding router, the C clients shared among them. KV cache in bf16 (the "
        "SDK's FP8 quantizes weights and activations). Power is left out with pipeline stages: the serving "
        "report counts running power per iteration, and a pipeline's iterations overlap in time.",
        "",
    ]
    write_section(PAGE, BEGIN, END, body, args.write_docs)


if __name__ == "__main__":
    main()
