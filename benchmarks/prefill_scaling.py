"""Prefill scaling with the prompt (issue 7): Llama-3.1-8B, bf16, one rngd chip, batch 1, prompts
2048, 8192 and 32768, the prefill only (one generated token, so no decode step is simulated).

Per prompt: the simulated prefill (TTFT), the report's roofline (max of FLOPs / peak and HBM bytes /
bandwidth, the HBM bytes being those of the program as mapped, spills included) and, beside it,
the compute roofline (FLOPs / peak alone); total FLOPs, the FLOPs of the ops that hold the S x S
einsums of attention (QK^T and PV, plain or per tile, with the element-wise work fused into them)
and their share; the attention form the mapper chose, with its reason; and the op kinds that keep
the Tensor Unit busy longest, with the fraction of peak each reaches.

Then, per 4x step in the prompt, the scaling check: the linear part's FLOPs grow 4x, the S x S
part's 16x, and if the prefill stays compute-bound at the same efficiency its time grows as its
total FLOPs do. A step passes when time ratio / FLOP ratio is within 15 % of 1: over the
compute-bound prompts 1024-8192 the simulated / compute-roofline factor moves between 1.10 and
1.23 with the tile shapes (about +-10 %), so a larger departure means something other than FLOPs
(spilled intermediates, passes that cost time but few FLOPs, a worse placement) grows with the
prompt.

Wall time on 2 cores (Python 3.11, numba cache warm), measured: 4 min 18 s in all; 2048 takes
1.5 s, 8192 15 s and 32768 4 min (3.2 GB peak memory), most of it compiling the 64 x 64 tiles per
layer of its online softmax. `--layers N` simulates only the first N decoder layers (the 8B's 32
layers are alike): `--layers 1` runs all three prompts in 11 s.

Run: python benchmarks/prefill_scaling.py [--layers N] [--prompts 2048,8192,32768] [--write-docs]
(`--write-docs` also writes docs/prefill-scaling.md.)
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from doc_sections import add_write_docs, write_page

from simulator.hardware import load_hardware
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.report.build import build_report
from tcp_compiler.report.text import attention_lines
from tcp_compiler.report.types import OpRow
from tcp_compiler.simulate import simulate_generation

MODEL, HARDWARE, DTYPE, BATCH = "llama-3.1-8b", "rngd", "bf16", 1
PROMPTS = (2048, 8192, 32768)
TOLERANCE = 0.15  # |time ratio / FLOP ratio - 1| within this: time grows as FLOPs predict
DOC = Path(__file__).parents[1] / "docs" / "prefill-scaling.md"
# The ops holding the S x S einsums: plain `l{i}.scores` (QK^T) and `l{i}.attn` (PV), or online
# `l{i}.attn[.Sq{lo}].blk{j}.scores` and `.out`, one pair per tile of queries x keys.
SCORE_OPS = re.compile(r"l\d+\.(scores|attn|attn(\.[A-Z]\w*?\d+)?\.blk\d+\.(scores|out))")
# Every op whose work grows with S x S: those, the softmax around them (plain `shifted`, `probs`;
# online the rest of each tile, the division and the join) and the causal mask.
SQUARE_OPS = re.compile(r"l\d+\.(scores|shifted|probs|attn(\..+)?)|mask\..+")
TILE_INDEX = re.compile(r"\.(blk|[A-Z]\w*?)\d+(?=\.|$)")  # .blk3, .Sq512, .Sk1024


@dataclasses.dataclass
class Kind:
    """One op of every layer and tile together (`l*.attn.Sq*.blk*.out`)."""

    name: str
    count: int = 0
    tensor_unit: float = 0.0  # seconds the Tensor Unit works on it
    flops: float = 0.0
    hbm_bytes: float = 0.0


@dataclasses.dataclass
class Point:
    prompt: int
    seconds: float
    roofline: float
    compute_roofline: float
    bound: str
    flops: float
    score_flops: float  # the S x S einsums
    square_flops: float  # everything that grows with S x S, the einsums included
    hbm_bytes: float
    peak: float  # FLOP/s
    forms: list[str]
    kinds: list[Kind]  # longest on the Tensor Unit first
    wall: float


def measure(prompt: int, layers: int | None) -> Point:
    config = load_model(MODEL).config
    if layers:
        config = dataclasses.replace(config, layers=config.layers[:layers])
    start = time.perf_counter()
    sim = simulate_generation(config, load_hardware(HARDWARE), PRECISIONS[DTYPE], BATCH, prompt, 1)
    report = build_report(sim, top=None)
    wall = time.perf_counter() - start
    pre, ops, peak = report.prefill, report.ops.prefill, report.hardware.peak_flops_per_s
    return Point(
        prompt, pre.seconds, pre.roofline_seconds, pre.flops / peak, pre.bound, pre.flops,
        sum(op.flops for op in ops if SCORE_OPS.fullmatch(op.name)),
        sum(op.flops for op in ops if SQUARE_OPS.fullmatch(op.name)),
        pre.hbm_bytes, peak, [n.removeprefix("prefill attention: ") for n in attention_lines(report)],
        by_kind(ops), wall,
    )  # fmt: skip


def by_kind(ops: Sequence[OpRow]) -> list[Kind]:
    kinds: dict[str, Kind] = {}
    for op in ops:
        name = TILE_INDEX.sub(r".\1*", re.sub(r"^l\d+\.", "l*.", op.name))
        kind = kinds.setdefault(name, Kind(name))
        kind.count += 1
        kind.tensor_unit += op.tensor_unit_seconds
        kind.flops += op.flops
        kind.hbm_bytes += op.hbm_bytes
    return sorted(kinds.values(), key=lambda k: -k.tensor_unit)


def render(points: list[Point], layers: int | None, command: str, top: int = 8) -> list[str]:
    what = f"the first {layers} decoder layer(s) of " if layers else ""
    lines = [
        f"# Prefill scaling: {what}{MODEL}, {DTYPE}, 1 {HARDWARE} chip, batch {BATCH}",
        "",
        f"Produced by `{command}`; every figure comes from the simulator",
        "(`simulate_generation` with one generated token, i.e. `tcpc simulate --gen-len 1`).",
        "Roofline = the report's: max of FLOPs / peak and HBM bytes / bandwidth, the bytes being those",
        "of the program as mapped (spills included); compute roofline = FLOPs / peak alone.",
        "S x S einsum FLOPs = those of the ops that hold attention's S x S einsums (QK^T and PV),",
        "element-wise work fused into them included.",
        "",
        "| prompt | prefill s | roofline s | x roof | compute roofline s | x compute | bound | FLOPs "
        "| S x S einsum FLOPs | share | HBM bytes |",
        "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for p in points:
        lines.append(
            f"| {p.prompt} | {p.seconds:.4f} | {p.roofline:.4f} | {p.seconds / p.roofline:.2f} "
            f"| {p.compute_roofline:.4f} | {p.seconds / p.compute_roofline:.2f} | {p.bound} | {p.flops:.4g} "
            f"| {p.score_flops:.4g} | {100 * p.score_flops / p.flops:.1f} % | {p.hbm_bytes:.4g} |"
        )
    lines += ["", "Attention form per prompt:", ""]
    for p in points:
        lines += [f"- {p.prompt}: {form}" for form in p.forms]
    lines += [
        "",
        f"Where the time goes: the {top} op kinds that keep the Tensor Unit busy longest (every layer",
        "and tile together); efficiency = FLOPs / (Tensor Unit seconds x peak).",
        "",
        "| prompt | op kind | ops | Tensor Unit s | share of prefill | FLOPs | efficiency | HBM bytes |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        for k in p.kinds[:top]:
            efficiency = k.flops / (k.tensor_unit * p.peak) if k.tensor_unit else 0.0
            lines.append(
                f"| {p.prompt} | `{k.name}` | {k.count} | {k.tensor_unit:.4f} "
                f"| {100 * k.tensor_unit / p.seconds:.1f} % | {k.flops:.4g} | {efficiency:.2f} "
                f"| {k.hbm_bytes:.4g} |"
            )
    lines += [
        "",
        f"## Scaling: time ratio vs FLOP ratio (within {TOLERANCE:.0%} = as FLOPs predict)",
        "",
        "Linear = every op but those whose work grows with S x S (the score einsums, the softmax around",
        "them and the causal mask, which together make the S x S column).",
        "",
        "| step | linear FLOPs x | S x S FLOPs x | total FLOPs x | time x | time x / FLOPs x "
        "| HBM bytes x | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for a, b in zip(points, points[1:], strict=False):
        linear = (b.flops - b.square_flops) / (a.flops - a.square_flops)
        square = b.square_flops / a.square_flops
        flops, seconds = b.flops / a.flops, b.seconds / a.seconds
        off = seconds / flops
        verdict = (
            "as FLOPs predict"
            if abs(off - 1) <= TOLERANCE
            else f"NOT as FLOPs predict: time grows {off:.2f}x as fast as FLOPs"
        )
        lines.append(
            f"| {a.prompt} -> {b.prompt} | {linear:.2f} | {square:.2f} | {flops:.2f} "
            f"| {seconds:.2f} | {off:.2f} | {b.hbm_bytes / a.hbm_bytes:.2f} | {verdict} |"
        )
    lines += ["", "Simulation wall time: " + ", ".join(f"{p.prompt}: {p.wall:.1f} s" for p in points) + "."]
    return lines


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, help="simulate only the first N decoder layers")
    parser.add_argument("--prompts", default=",".join(map(str, PROMPTS)), help="comma-separated")
    add_write_docs(parser, DOC)
    args = parser.parse_args(argv)
    points = []
    for prompt in (int(p) for p in args.prompts.split(",")):
        points.append(measure(prompt, args.layers))
        print(f"simulated prompt {prompt} in {points[-1].wall:.1f} s", file=sys.stderr, flush=True)
    command = " ".join(["python benchmarks/prefill_scaling.py", *argv])
    text = "\n".join(render(points, args.layers, command)) + "\n"
    print(text, end="")
    if args.write_docs:
        write_page(DOC, text, write=True)


if __name__ == "__main__":
    main(sys.argv[1:])
