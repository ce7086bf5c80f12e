"""Schedule quality: simulated time as a ratio of its roofline, for the targets of issue 6.

Where a target is missed, it prints the ops that hold the phase back (longest first) and what
bounds each of them. Run: python benchmarks/schedule_quality.py
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from simulator.hardware import load_hardware
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.report.build import build_report
from tcp_compiler.report.types import OpRow
from tcp_compiler.simulate import simulate_generation

TARGETS = [  # (what, model, hardware, prompt, gen, phase, target ratio)
    ("Llama-3.1-8B bf16, 1 chip, batch 1 decode (TPOT)", "llama-3.1-8b", "rngd", 2048, 33, "decode", 1.15),
    ("Llama-3.1-8B bf16, 1 chip, prompt 2048 prefill", "llama-3.1-8b", "rngd", 2048, 1, "prefill", 1.4),
    (
        "Llama-3.1-70B bf16, 4 chips, batch 1 decode (TPOT)",
        "llama-3.1-70b",
        "rngd-4",
        2048,
        33,
        "decode",
        1.3,
    ),
]


def _by_kind(ops: Sequence[OpRow]) -> dict[str, list[float]]:
    """Per kind of op (the same op of every layer together): Tensor Unit time, HBM time at full
    bandwidth, and how many there are."""
    groups: dict[str, list[float]] = {}
    for op in ops:
        name = op.name.split(".", 1)[1] if op.layer >= 0 else op.name
        entry = groups.setdefault(name, [0.0, 0.0, 0])
        entry[0] += op.tensor_unit_seconds
        entry[1] += op.hbm_bytes
        entry[2] += 1
    return groups


def _explain(ops: Sequence[OpRow], hbm_rate: float, seconds: float) -> None:
    """Where the phase's time goes: is the Tensor Unit busy, and if not, what is HBM moving?"""
    busy = sum(op.tensor_unit_seconds for op in ops)
    print(
        f"  the Tensor Unit is busy {busy * 1e3:.3f} ms of {seconds * 1e3:.3f} ms; the rest it waits for HBM."
    )
    print("  HBM traffic by op (all layers), largest first:")
    groups = sorted(_by_kind(ops).items(), key=lambda kv: -kv[1][1])
    for name, (tensor_unit, hbm, count) in groups[:6]:
        hbm_ms, unit_ms = hbm / hbm_rate * 1e3, tensor_unit * 1e3
        print(f"    {name:<16s} x{count:<3d} HBM {hbm / 1e9:7.3f} GB = {hbm_ms:8.3f} ms at full bandwidth; "
              f"Tensor Unit {unit_ms:8.3f} ms")  # fmt: skip


def main() -> None:
    for what, model, hw, prompt, gen, phase, target in TARGETS:
        sim = simulate_generation(
            load_model(model).config, load_hardware(hw), PRECISIONS["bf16"], 1, prompt, gen
        )
        report = build_report(sim, top=None)
        pre, dec = report.prefill, report.decode
        if phase == "decode":
            seconds, roofline, ops = dec.tpot_seconds_mean, dec.roofline_seconds_mean, report.ops.decode
        else:
            seconds, roofline, ops = pre.seconds, pre.roofline_seconds, report.ops.prefill
        ratio = seconds / roofline
        verdict = "meets" if ratio <= target else "MISSES"
        print(f"{what}: {seconds * 1e3:.3f} ms, roofline {roofline * 1e3:.3f} ms, "
              f"ratio {ratio:.3f} ({verdict} target {target})")  # fmt: skip
        if ratio > target:
            _explain(ops, report.hardware.hbm_bytes_per_s, seconds)


if __name__ == "__main__":
    argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0]).parse_args()
    main()
