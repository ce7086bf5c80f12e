"""A long hostile-input run: `python benchmarks/fuzz_inputs.py [--cases 20000] [--seed S]`.

Generates cases over .tir graphs, config.json files, hardware TOML, safetensors checkpoints and
flags (tests/hostile_inputs.py; tests/test_fuzz_inputs.py runs a short seeded part of the same
generator in CI), runs each through `tcpc` in this process, and prints the number of cases, the
exit-code histogram per kind, the slowest case, and every finding: a traceback, a warning, an
invalid input accepted, an error that is not one line or that left an output or temporary file
behind. Exits 1 if there was any finding.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.hostile_inputs import KINDS, generate, materialise, problems, run_in_process  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20_000, help="cases to run (default 20,000)")
    parser.add_argument("--seed", default="0", help="seed of the generator (default 0)")
    args = parser.parse_args()
    import random

    rng = random.Random(args.seed)
    codes: collections.Counter[tuple[str, int | None]] = collections.Counter()
    findings: dict[tuple[str, str], list] = {}
    tracebacks = 0
    slowest = (0.0, [])
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tcpc-fuzz-") as root:
        for i in range(args.cases):
            kind = KINDS[i % len(KINDS)]
            case = generate(rng, kind)
            folder = Path(root) / str(i)
            folder.mkdir()
            argv = materialise(case, folder)
            t = time.monotonic()
            outcome = run_in_process(argv)
            slowest = max(slowest, (time.monotonic() - t, argv))
            codes[kind, outcome.code] += 1
            tracebacks += outcome.traceback is not None
            for problem in problems(case, outcome, folder):
                last = (outcome.traceback or "").strip().splitlines()[-1:] or [outcome.stderr.strip()[:160]]
                key = (kind, f"{problem[:100]} | {last[0][:160]}")
                findings.setdefault(key, [0, argv, outcome.traceback])[0] += 1
            for path in sorted(folder.rglob("*"), reverse=True):  # keep the disk use flat
                path.rmdir() if path.is_dir() else path.unlink()
            folder.rmdir()
    elapsed = time.monotonic() - start
    print(f"cases: {args.cases:,} (seed {args.seed}) in {elapsed:.0f} s")
    print("exit codes:")
    for kind in KINDS:
        counts = ", ".join(f"{code}: {n:,}" for (k, code), n in sorted(codes.items(), key=str) if k == kind)
        print(f"  {kind:<11} {counts}")
    print(f"tracebacks: {tracebacks}")
    print(f"slowest case: {slowest[0]:.2f} s: tcpc {' '.join(a[:60] for a in slowest[1])}")
    print(f"findings: {sum(n for n, _, _ in findings.values())} in {len(findings)} classes")
    for (kind, what), (n, argv, tb) in sorted(findings.items()):
        print(f"- {n} x {kind}: {what}\n    e.g. tcpc {' '.join(a[:80] for a in argv)}")
        if tb:
            print("    " + tb.strip().replace("\n", "\n    ")[-3000:])
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
