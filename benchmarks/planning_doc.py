"""The worked plans of docs/planning.md: Llama-3.1-8B and Llama-3.1-70B on up to 8 RNGD chips under
an interactive SLO (TTFT p90 <= 1 s, TPOT p90 <= 50 ms) and a relaxed one (5 s, 200 ms).

Each model's plan is `tcpc plan MODEL --chips 8 --slo-ttft S --slo-tpot S` with the defaults (every
layout of 1 to 8 chips, bf16, max sequences 64 and 256, prefill chunks 512 and 2048 tokens, 120
requests per run: the fewest p90 takes, 100 measured and 20 warm-up), run here through the same
planner with both SLOs in one pass, so each layout's iteration costs are compiled once for both
(each SLO's ranking is the one its own command gives: tests/test_plan.py). Prints the page; with
--write-docs writes it to docs/planning.md and its plots to docs/planning/.

Each model's plans can run apart (--model NAME --save FILE) and the page be written from them
(--write-docs --load FILE ...).

Run: python benchmarks/planning_doc.py [--write-docs] [--model NAME ...] [--save FILE] [--load FILE ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from doc_sections import add_write_docs, write_page
from plan_speed import CHIPS, PERCENTILE, SPACE, measure

from tcp_compiler.planner import MISSES, NO_FIT, OK
from tcp_compiler.serve.max_rate import searched
from tcp_compiler.serve.workload import Workload
from tcp_compiler.sweep.plots import plan_figures, save_all

DOCS = Path(__file__).parents[1] / "docs"
MODELS = ("llama-3.1-8b", "llama-3.1-70b")
SLOS = {"interactive": (1.0, 0.05), "relaxed": (5.0, 0.2)}
TOP = 5
LAYOUTS = 12  # layouts listed by their best candidate


def _listed(values: tuple[int, ...]) -> str:
    return " and ".join(map(str, values))


def command(model: str, ttft: float, tpot: float) -> str:
    return f"tcpc plan {model} --chips {CHIPS} --slo-ttft {ttft:g} --slo-tpot {tpot:g} --plot DIR"


def setting(r: dict) -> str:
    return f"tp {r['tp']} pp {r['pp']} dp {r['dp']}, {r['max_seqs']} seqs, chunk {r['max_batch_tokens']}"


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| rank | tp | pp | dp | chips | seqs | chunk | rate/s | TTFT p90 ms | TPOT p90 ms | goodput/s per "
        "card | output tok/s per card | bound |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for rank, r in enumerate([r for r in rows if r["status"] == OK][:TOP], 1):
        bound = "capacity" if r["capacity_bound"] else f"SLO (+{r['margin']:.1%} fails)"
        lines.append(
            f"| {rank} | {r['tp']} | {r['pp']} | {r['dp']} | {r['chips']} | {r['max_seqs']} "
            f"| {r['max_batch_tokens']} | {r['rate_per_s']:.3g} | {r['ttft_s'] * 1e3:.0f} "
            f"| {r['tpot_s'] * 1e3:.1f} "
            f"| {r['goodput_per_card']:.3g} | {r['output_tokens_per_s_per_card']:,.0f} | {bound} |"
        )
    return lines


def findings(rows: list[dict]) -> list[str]:
    """What decided the ranking, as figures of this plan."""
    ok = [r for r in rows if r["status"] == OK]
    counts = {s: sum(r["status"] == s for r in rows) for s in (OK, MISSES, NO_FIT)}
    lines = [
        f"- {len(rows)} candidates: {counts[OK]} meet the SLOs at some rate, {counts[MISSES]} at none, "
        f"{counts[NO_FIT]} do not fit (or cannot be built: heads that do not split over tp)."
    ]
    if not ok:
        return lines
    best = ok[0]
    bound = (
        "bound by the server's capacity (the SLOs hold up to it)."
        if best["capacity_bound"]
        else f"bound by the SLOs (TTFT p90 {best['ttft_s'] * 1e3:.0f} ms, TPOT p90 "
        f"{best['tpot_s'] * 1e3:.1f} ms at the found rate)."
    )
    lines.append(
        f"- Best: {setting(best)} ({_chips(best['chips'])}), {best['goodput_per_card']:.3g} goodput "
        f"requests/s per card at {best['rate_per_s']:.3g} requests/s, {bound}"
    )
    for chips in sorted({r["chips"] for r in ok}):
        top = next(r for r in ok if r["chips"] == chips)
        lines.append(
            f"- Best on {_chips(chips)}: {setting(top)}, {top['goodput_per_card']:.3g} per card "
            f"({top['goodput_requests_per_s']:.3g} requests/s in all)."
        )
    return lines


def by_layout(rows: list[dict]) -> list[str]:
    """Each layout's best candidate (the first ranked of its tp, pp, dp), against the plan's best:
    what the layout itself costs per card."""
    best: dict[tuple[int, int, int], dict] = {}
    for r in rows:
        if r["status"] == OK:
            best.setdefault((r["tp"], r["pp"], r["dp"]), r)
    if not best:
        return []
    top = next(iter(best.values()))["goodput_per_card"]
    lines = [
        "| tp | pp | dp | chips | its best seqs, chunk | goodput/s per card | of the best | TPOT p90 ms "
        "| bound |",
        "|---:|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for (tp, pp, dp), r in list(best.items())[:LAYOUTS]:
        bound = "capacity" if r["capacity_bound"] else "SLO"
        lines.append(
            f"| {tp} | {pp} | {dp} | {r['chips']} | {r['max_seqs']}, {r['max_batch_tokens']} "
            f"| {r['goodput_per_card']:.3g} | {r['goodput_per_card'] / top:.0%} | {r['tpot_s'] * 1e3:.1f} "
            f"| {bound} |"
        )
    bound = sum(r["capacity_bound"] for r in rows if r["status"] == OK)
    meeting = sum(r["status"] == OK for r in rows)
    return [
        *lines,
        "",
        f"{bound} of the {meeting} candidates meeting the SLOs are capacity-bound (the SLOs hold "
        "up to the server's capacity, so no looser SLO raises their rate).",
    ]


def _chips(n: int) -> str:
    return f"{n} chip{'s' * (n > 1)}"


def planned(model: str, jobs: int) -> dict:
    """The model's plan under each SLO (rows by SLO name) and how long it took."""
    slos = tuple(searched(Workload(), ttft, tpot, PERCENTILE)[1] for ttft, tpot in SLOS.values())
    timed = measure(model, slos, jobs)
    return {
        "model": model,
        "jobs": jobs,
        "wall_s": timed.wall_s,
        "cpu_s": timed.cpu_s,
        "rows": {name: [r.row() for r in ranked] for name, ranked in zip(SLOS, timed.rankings, strict=True)},
    }


def page(plans: list[dict], write: bool) -> str:
    work = searched(Workload(), 1.0, 0.05, PERCENTILE)[0]
    lines = [
        f"# Planning a deployment: {' and '.join(p['model'] for p in plans)} on up to {CHIPS} RNGD chips",
        "",
        "Produced by `python benchmarks/planning_doc.py --write-docs` (every figure below is its output; it",
        "runs the planner exactly as the `tcpc plan` commands shown, both SLOs in one pass so each layout's",
        "costs compile once). `tcpc plan` (docs/serving.md) lays the chips out every tp x pp x dp way, on",
        f"{CHIPS} chips or fewer,",
        f"crosses each layout with max sequences {_listed(SPACE.max_seqs)}"
        f" and prefill chunks {_listed(SPACE.max_batch_tokens)} tokens (bf16),",
        "prunes what does not fit HBM, finds each survivor's highest Poisson rate whose p90 TTFT and TPOT",
        "meet the SLOs and ranks by goodput per card (requests/s meeting both SLOs, per chip), so fewer",
        f"chips win when they serve as much per chip. Requests: prompts {work.prompt_len}, outputs "
        f"{work.gen_len} tokens, {work.requests} per run and replica",
        "(the fewest a p90 takes: 100 measured after 20 of warm-up), seed 0. A small sample on a busy",
        "2-core machine: the margins (how far above a found rate the search saw a failure) say how sharp",
        "each rate is.",
        "",
    ]
    missing = [m for m in MODELS if m not in {p["model"] for p in plans}]
    if missing:
        lines += [
            f"Not planned in this page's run: {', '.join(missing)} (its plan did not finish in the session",
            "that wrote the page; `python benchmarks/planning_doc.py --write-docs` plans every model).",
            "",
        ]
    for p in plans:
        model = p["model"]
        lines += [
            f"## {model}",
            "",
            f"Planned for both SLOs in {p['wall_s']:.0f} s wall with {p['jobs']} worker "
            f"process{'es' if p['jobs'] != 1 else ''} on a busy "
            f"2-core machine ({p['cpu_s']:.0f} s CPU; `python benchmarks/plan_speed.py` times one SLO).",
            "",
        ]
        for name, (ttft, tpot) in SLOS.items():
            rows = p["rows"][name]
            png = f"{model.removeprefix('llama-3.1-')}-{name}.png"
            if write:
                (DOCS / "planning").mkdir(parents=True, exist_ok=True)
                figures = plan_figures(rows, f"{model}, {name} SLO", PERCENTILE, tpot)
                save_all({png: figures["plan.png"]}, DOCS / "planning")
            lines += [
                f"### {name.capitalize()}: TTFT p90 <= {ttft:g} s, TPOT p90 <= {tpot * 1e3:g} ms",
                "",
                "```sh",
                command(model, ttft, tpot),
                "```",
                "",
                f"![{model} {name}](planning/{png})",
                "",
                *table(rows),
                "",
                *findings(rows),
                "",
                "Each layout at its best server settings:",
                "",
                *by_layout(rows),
                "",
            ]
    lines += [
        "## What decides the ranking",
        "",
        "Goodput per card rewards the layout that turns each chip's HBM bandwidth into tokens with the",
        "least lost. A decode step reads the weights once whatever the batch, so the ceiling per card is",
        "the smallest replica that holds the weights and a full batch of KV cache, copied with dp:",
        "replicas share nothing, so dp copies of it keep its goodput per card (each replica serves the",
        "requests a one-replica run does). Tensor parallelism splits each step's weight reads over the",
        "chips but adds two all-reduces per layer whose link latency does not shrink with the chips",
        "(docs/study-70b-chips.md), so it pays per card only where the SLO needs the shorter TPOT or the",
        "weights need the room. Pipeline stages each hold a layer range and hand every iteration on, and",
        "their virtual engines split the KV blocks and the batch, so a stage waits on the others. The",
        "tables above give each layout's best per card against the plan's best; the plots show all",
        "candidates, throughput per card against TPOT, with the frontier that trades one for the other.",
        "",
        "Where every candidate is capacity-bound, the SLO does not bind and a looser one changes nothing:",
        "the ranking is that of the servers' capacities for these requests. A tighter TPOT SLO, or longer",
        "prompts, would bind and move the ranking toward tensor parallelism.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    add_write_docs(parser, DOCS / "planning.md", DOCS / "planning")
    parser.add_argument("--model", action="append", choices=MODELS, help="only these (default: both)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--save", metavar="FILE", help="write the plans planned (rows and timings) as JSON")
    parser.add_argument(
        "--load",
        metavar="FILE",
        action="append",
        default=[],
        help="plans a --save wrote (one model each or more), instead of planning them again",
    )
    args = parser.parse_args()
    plans = [p for path in args.load for p in json.loads(Path(path).read_text())]
    done = {p["model"] for p in plans}
    plans += [planned(model, args.jobs) for model in args.model or MODELS if model not in done]
    if args.save:
        Path(args.save).write_text(json.dumps(plans, indent=1) + "\n")
    plans.sort(key=lambda p: MODELS.index(p["model"]))
    write_page(DOCS / "planning.md", page(plans, args.write_docs), args.write_docs)


if __name__ == "__main__":
    main()
