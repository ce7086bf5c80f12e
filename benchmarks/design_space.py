"""The worked study of docs/design-space.md: HBM bandwidth x DM size x clock for Llama-3.1-8B on
one RNGD and Llama-3.1-70B on four, prefill (TTFT) and decode (TPOT), then a search under an SLO.
Small enough to run in a few minutes on 2 cores.

Run: python benchmarks/design_space.py [--jobs N] [--write-docs]
     (--write-docs: the plots into docs/design-space/ and the tables into docs/design-space.md)
"""

from __future__ import annotations

import argparse
import itertools
import re
import tempfile
from pathlib import Path

from doc_sections import add_write_docs

from simulator.targets.rngd.spec import Hardware
from tcp_compiler.search.front import feasible, front_rows, pareto_front, plot_front
from tcp_compiler.search.goals import parse_constraint, parse_objective
from tcp_compiler.search.space import parse_range
from tcp_compiler.search.study import Search, run_search
from tcp_compiler.search.trials import DesignPoint, Workload, cost
from tcp_compiler.sweep import run_sweep

DOCS = Path(__file__).resolve().parent.parent / "docs"
PLOTS = DOCS / "design-space"
MODELS = {"8B": Workload("llama-3.1-8b", "rngd", 1, 2048, 16, "bf16"),
          "70B": Workload("llama-3.1-70b", "rngd-4", 1, 2048, 16, "bf16")}  # fmt: skip
PEAK = ("hbm.peak_bytes_per_cycle", 4000.0)  # a ceiling above every sustained rate studied
BANDWIDTHS = (720.0, 1440.0, 2880.0)  # sustained HBM B/cycle: half, RNGD's, double
DM_SIZES = (256 * 1024, 512 * 1024, 1024 * 1024)  # DM per slice: half, RNGD's, double
CLOCKS = (0.8e9, 1.0e9, 1.2e9)
SLO = ("decode.tpot_seconds_mean<=0.009", "ttft_seconds<=0.3")


def grid() -> list[tuple[str, DesignPoint]]:
    return [
        (name, DesignPoint(w, (PEAK, ("hbm.sustained_bytes_per_cycle", bw), ("memory.dm_bytes_per_slice", dm),
                               ("chip.clock_hz", clock))))
        for name, w in MODELS.items()
        for bw, dm, clock in itertools.product(BANDWIDTHS, DM_SIZES, CLOCKS)
    ]  # fmt: skip


def study(jobs: int) -> list[dict]:
    points = grid()
    rows = run_sweep([p for _, p in points], jobs, run=cost)
    out = []
    for (name, point), row in zip(points, rows, strict=True):
        settings = dict(point.settings)
        figures = row.get("figures", {})
        out.append({
            "model": name, "bw": settings["hbm.sustained_bytes_per_cycle"],
            "dm_kib": settings["memory.dm_bytes_per_slice"] // 1024,
            "clock_ghz": settings["chip.clock_hz"] / 1e9,
            "ttft_ms": 1e3 * figures.get("ttft_seconds", float("nan")),
            "tpot_ms": 1e3 * figures.get("decode.tpot_seconds_mean", float("nan")),
            "area": figures.get("hardware.area_mm2", float("nan")), "error": row.get("error", ""),
        })  # fmt: skip
    return out


def slo_search(folder: Path, jobs: int) -> tuple[Search, object]:
    ranges = tuple(parse_range(t, Hardware) for t in (
        "hbm.sustained_bytes_per_cycle=500:3000:log", "memory.dm_bytes_per_slice=131072:1048576",
        "chip.clock_hz=0.8e9:1.4e9"))  # fmt: skip
    objectives = (parse_objective("tokens_per_s_per_chip:max"), parse_objective("hardware.area_mm2:min"))
    search = Search(MODELS["8B"], ranges, objectives, tuple(parse_constraint(c) for c in SLO), (PEAK,),
                    seed=0, population=8)  # fmt: skip
    return search, run_search(search, folder, 48, jobs).study


def plot_grid(rows: list[dict], figure: str, label: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), dpi=110)
    for ax, model in zip(axes, MODELS, strict=True):
        for dm in DM_SIZES:
            for clock in CLOCKS:
                line = [r for r in rows if r["model"] == model and r["dm_kib"] == dm // 1024
                        and r["clock_ghz"] == clock / 1e9]  # fmt: skip
                style = {256: ":", 512: "-", 1024: "--"}[dm // 1024]
                ax.plot([r["bw"] for r in line], [r[figure] for r in line], style, marker="o", markersize=3,
                        color={0.8: "#d62728", 1.0: "#1f77b4", 1.2: "#2ca02c"}[clock / 1e9],
                        label=f"{clock / 1e9:g} GHz, DM {dm // 1024} KiB/slice")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xticks(BANDWIDTHS, [f"{b:g}" for b in BANDWIDTHS])
        ax.set_xlabel("sustained HBM bandwidth (B/cycle)")
        ax.set_ylabel(label)
        ax.set_title(f"Llama-3.1-{model} ({MODELS[model].hw})")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=6, ncol=1, loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def grid_table(rows: list[dict]) -> str:
    lines = ["| model | HBM B/cycle | DM KiB/slice | clock GHz | TTFT ms | TPOT ms | area mm^2 |",
             "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        if r["error"]:
            lines.append(
                f"| {r['model']} | {r['bw']:g} | {r['dm_kib']} | {r['clock_ghz']:g} | {r['error']} | | |"
            )
            continue
        where = f"| {r['model']} | {r['bw']:g} | {r['dm_kib']} | {r['clock_ghz']:g} |"
        lines.append(f"{where} {r['ttft_ms']:.1f} | {r['tpot_ms']:.2f} | {r['area']:.0f} |")
    return "\n".join(lines)


def _at(rows: list[dict], model: str, bw: float = 1440.0, dm: int = 512, clock: float = 1.0) -> dict:
    """The grid row of `model` at one point (RNGD's values unless given)."""
    (row,) = [r for r in rows if (r["model"], r["bw"], r["dm_kib"], r["clock_ghz"]) == (model, bw, dm, clock)]
    return row


def _dm_changes(rows: list[dict], model: str, dm: int, figure: str) -> list[float]:
    """The relative change of `figure` at every bandwidth and clock when DM is `dm` KiB instead of 512."""
    return [_at(rows, model, bw, dm, c)[figure] / _at(rows, model, bw, 512, c)[figure] - 1
            for bw in BANDWIDTHS for c in (clock / 1e9 for clock in CLOCKS)]  # fmt: skip


def _span(changes: list[float]) -> str:
    low, high = min(changes), max(changes)
    if f"{low:.3f}" == f"{high:.3f}":
        return f"{100 * low:+.1f}%"
    return f"{100 * low:+.1f}% to {100 * high:+.1f}%"


def prefill_reading(rows: list[dict]) -> str:
    """The prefill section's reading of the grid: clock, bandwidth and DM size, each from its rows."""
    eight = {c: _at(rows, "8B", clock=c)["ttft_ms"] for c in (0.8, 1.0, 1.2)}
    slow, fast = _at(rows, "8B", bw=720.0)["ttft_ms"], _at(rows, "8B", bw=2880.0)["ttft_ms"]
    seventy = _at(rows, "70B")["ttft_ms"], _at(rows, "70B", clock=1.2)["ttft_ms"]
    half, double = _dm_changes(rows, "70B", 256, "ttft_ms"), _dm_changes(rows, "70B", 1024, "ttft_ms")
    small = max(abs(x) for dm in (256, 1024) for x in _dm_changes(rows, "8B", dm, "ttft_ms"))
    doubled = _at(rows, "70B", dm=1024)["ttft_ms"]
    text = (
        f"The 8B prefill is compute-bound: TTFT follows the clock (8B at 1440 B/cycle: {eight[1.0]:.0f} ms "
        f"at 1 GHz, {eight[1.2]:.0f} ms at 1.2 GHz, {eight[0.8]:.0f} ms at 0.8 GHz) and barely moves with "
        f"HBM bandwidth (at 1 GHz: {slow:.0f} ms at 720 B/cycle, {fast:.0f} ms at 2880). 70B on four chips "
        f"is less clean: its prefill also waits on the tensor-parallel collectives over the chip links, "
        f"whose bandwidth is given in bytes per second and does not speed up with the clock, so 1.2 GHz buys "
        f"{100 * (1 - seventy[1] / seventy[0]):.0f}% ({seventy[0]:.0f} -> {seventy[1]:.0f} ms) rather than "
        f"{100 * (1 - 1 / 1.2):.0f}%.\n\n"
        f"DM size: halving it to 256 KiB per slice moves the 70B prefill by {_span(half)} over the grid's "
        f"bandwidths and clocks, doubling it to 1 MiB by {_span(double)} ({seventy[0]:.0f} -> {doubled:.0f} "
        f"ms at 1 GHz, 1440 B/cycle); the 8B prefill moves by at most {100 * small:.1f}%."
    )
    if max(double) > 0:
        text += (" A larger DM buying no prefill time is the mapper's choice given the spec, not physics: "
                 "larger tiles overlap their loads with less compute at the ends of each pass. "
                 "It is a lead for the mapping, and a reason not to buy "
                 "SRAM on this workload.")  # fmt: skip
    return text


def decode_reading(rows: list[dict]) -> str:
    """The decode section's reading of the grid: bandwidth's returns, the 70B's, DM size."""
    t = [_at(rows, "8B", bw=bw)["tpot_ms"] for bw in BANDWIDTHS]
    s = [_at(rows, "70B", bw=bw)["tpot_ms"] for bw in BANDWIDTHS]
    dm = max(abs(x) for m in MODELS for d in (256, 1024) for x in _dm_changes(rows, m, d, "tpot_ms"))
    return (
        f"Decode is memory-bound: every step reads all weights. 8B at 1 GHz: {t[0]:.1f} ms per token at 720 "
        f"B/cycle, {t[1]:.1f} ms at 1440, {t[2]:.1f} ms at 2880. Doubling bandwidth from RNGD's halves "
        f"neither: the first doubling buys {t[0] / t[1]:.2f}x, the second {t[1] / t[2]:.2f}x, as the step's "
        f"fixed costs (the host's work per iteration, kernel launch, DMA start-up, the vector work) become "
        f"its larger share. The clock helps decode as much as bandwidth here only because HBM is rated per "
        f"cycle (see above). DM size moves decode by at most {100 * dm:.1f}%. For 70B on four chips the "
        f"second doubling buys {s[1] / s[2]:.2f}x ({s[1]:.1f} -> {s[2]:.1f} ms at 1 GHz), as the per-layer "
        f"all-reduces' link latency stays."
    )


def front_table(search: Search, study) -> str:
    rows = front_rows(search, pareto_front(search, feasible(study)))
    lines = [f"{len(study.trials)} trials, {len(feasible(study))} within the SLO; the front:", "",
             "| trial | hash | HBM B/cycle | DM KiB/slice | clock GHz | tokens/s per chip | area mm^2 |",
             "|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['trial']} | `{r['hash']}` | {r['hbm.sustained_bytes_per_cycle']:.0f} | "
                     f"{r['memory.dm_bytes_per_slice'] / 1024:.0f} | {r['chip.clock_hz'] / 1e9:.3f} | "
                     f"{r['tokens_per_s_per_chip']:.1f} | {r['hardware.area_mm2']:.0f} |")  # fmt: skip
    if rows:
        lines += ["", "The first front point, reproduced:", "", "```sh", rows[0]["command"], "```"]
    return "\n".join(lines)


def fill(text: str, name: str, body: str) -> str:
    """Replaces what stands between `<!-- design-space: NAME -->` and `<!-- end -->`."""
    pattern = re.compile(rf"(<!-- design-space: {name} -->\n).*?(<!-- end -->)", re.S)
    assert pattern.search(text), name
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--jobs", type=int, default=2)
    add_write_docs(parser, DOCS / "design-space.md")
    args = parser.parse_args()
    rows = study(args.jobs)
    print(grid_table(rows), prefill_reading(rows), decode_reading(rows), sep="\n\n")
    with tempfile.TemporaryDirectory() as folder:
        search, found = slo_search(Path(folder), args.jobs)
        front = front_table(search, found)
        print(front)
        if args.write_docs:
            PLOTS.mkdir(exist_ok=True)
            plot_grid(rows, "ttft_ms", "TTFT (ms)", PLOTS / "prefill.png")
            plot_grid(rows, "tpot_ms", "TPOT (ms)", PLOTS / "decode.png")
            plot_front(search, found, PLOTS / "front.png")
            doc = DOCS / "design-space.md"
            text = fill(doc.read_text(), "grid", grid_table(rows))
            text = fill(text, "prefill", prefill_reading(rows))
            text = fill(text, "decode", decode_reading(rows))
            doc.write_text(fill(text, "front", front))
            print(f"wrote {doc} and {PLOTS}/*.png")


if __name__ == "__main__":
    main()
