"""Cycle counts of a fixed set of simulations, the regression fingerprint of the mapping and engine.

Each point's prefill and decode-step cycles, commands, FLOPs and HBM bytes are printed (and with
`--write` stored in tests/golden/cycles.json). tests/test_golden_cycles.py recomputes them, so a
refactor that changes any cycle count fails; a fidelity fix that changes them on purpose rewrites the
file in the same commit and says so.

Run: python benchmarks/cycle_fingerprint.py [--write]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from simulator.hardware import load_hardware
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.simulate import simulate_generation

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden" / "cycles.json"

# (model, hardware, dtype, batch, prompt, gen): every bundled model on the smallest preset it fits,
# the default run's prompt (online softmax), the quantised precisions, MoE and multi-chip.
POINTS = [
    ("llama-3.2-1b", "rngd", "bf16", 1, 128, 4),
    ("llama-3.1-8b", "rngd", "bf16", 1, 2048, 3),
    ("llama-3.1-8b", "rngd", "fp8", 4, 256, 3),
    ("llama-3.1-8b", "rngd", "w4", 1, 256, 3),
    ("llama-3.1-8b", "rngd-2", "bf16", 2, 128, 3),
    ("llama-3.1-70b", "rngd-8", "fp8", 8, 256, 3),
    ("mistral-7b-v0.1", "rngd", "bf16", 1, 128, 3),
    ("mixtral-8x7b", "rngd-8", "fp8", 1, 64, 3),
    ("qwen2.5-7b", "rngd", "bf16", 1, 128, 3),
    ("qwen3-8b", "rngd", "bf16", 1, 128, 3),
    ("qwen3-32b", "rngd-2", "bf16", 1, 128, 3),
    ("qwen3-30b-a3b", "rngd-2", "fp8", 1, 64, 3),
    ("gemma-3-1b", "rngd", "bf16", 1, 128, 3),
    ("gemma-3-27b", "rngd-2", "bf16", 1, 128, 3),
    ("gpt2", "rngd", "bf16", 1, 128, 3),
    ("opt-1.3b", "rngd", "bf16", 1, 128, 3),
    ("bloom-560m", "rngd", "bf16", 1, 128, 3),
    ("pythia-1.4b", "rngd-2", "bf16", 1, 128, 3),
    ("falcon-7b", "rngd", "bf16", 1, 128, 3),
]


def key(point: tuple) -> str:
    return " ".join(str(v) for v in point)


def fingerprint(point: tuple) -> dict:
    """The figures of one point that any change to mapping or engine would move."""
    model, hw, dtype, batch, prompt, gen = point
    sim = simulate_generation(
        load_model(model).config, load_hardware(hw), precision(dtype), batch, prompt, gen
    )
    p = sim.prefill.program
    return {
        "prefill_cycles": sim.prefill.cycles,
        "prefill_commands": len(p),
        "prefill_flops": int(p.flops.sum()),
        "prefill_hbm_bytes": int(p.hbm_bytes.sum()),
        "decode_cycles": [int(c) for c in sim.decode_cycles],
        "decode_flops": [int(f) for f in sim.decode_flops],
        "decode_hbm_bytes": [int(b) for b in sim.decode_hbm],
    }


def main(write: bool) -> None:
    results = {}
    for point in POINTS:
        start = time.process_time()
        results[key(point)] = fingerprint(point)
        r = results[key(point)]
        print(f"{key(point):40s} prefill {r['prefill_cycles']:>12,} decode {r['decode_cycles']} "
              f"({time.process_time() - start:.1f} s CPU)")  # fmt: skip
    if write:
        GOLDEN.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the counts in tests/golden/cycles.json")
    main(parser.parse_args().write)
