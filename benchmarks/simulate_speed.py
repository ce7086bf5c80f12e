"""Wall time of `tcpc simulate` for Llama-3.1-8B, batch 1, prompt 2048, gen 2048 (every step
simulated), start-up included (target: under 10 s).

Run: python benchmarks/simulate_speed.py [GEN_LEN]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time


def main(gen_len: int) -> None:
    cmd = [sys.executable, "-m", "tcp_compiler", "simulate", "llama-3.1-8b", "--prompt-len", "2048",
           "--gen-len", str(gen_len), "--top", "3"]  # fmt: skip
    start = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if result.returncode:
        sys.exit(result.stderr)
    summary = next(line for line in result.stdout.splitlines() if line.startswith("TPOT first"))
    print(f"tcpc simulate llama-3.1-8b, prompt 2048, gen {gen_len}: {seconds:.2f} s wall, start-up included")
    print(summary)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("gen_len", nargs="?", type=int, default=2048, help="generated tokens (default 2048)")
    main(parser.parse_args().gen_len)
