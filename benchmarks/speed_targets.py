"""CPU time and peak memory of the runs users make (issue 14's targets), one `tcpc` process each.

Prints one line per run: CPU seconds (user + system of the process), wall seconds, peak RSS, and
the target. Nothing is asserted: figures depend on the machine (docs/performance.md records them).

Run: python benchmarks/speed_targets.py [--quick] [--repeat N] [--only TEXT]
  --quick skips the runs that take minutes; --repeat N prints the median CPU of N runs (the
  machine is shared: CPU time is steadier than wall time, the median steadier than one run);
  --only runs the targets whose arguments contain TEXT.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

# (arguments to tcpc, target as issue 14 states it, takes minutes today)
RUNS = [
    (["--help"], "< 0.5 s", False),
    (["compile", "llama-3.1-70b"], "< 1 s", False),
    (["simulate"], "-", False),
    (["simulate", "--gen-len", "2048", "--top", "1"], "< 2 s CPU (stretch 1 s)", False),
    (["simulate", "--batch", "64", "--prompt-len", "2048", "--gen-len", "128", "--top", "1"],
     "< 10 s CPU, or a capacity error within 2 s", False),
    (["simulate", "llama-3.1-70b", "--hw", "rngd-8", "--dtype", "fp8", "--batch", "32",
      "--prompt-len", "2048", "--gen-len", "128", "--top", "1"], "< 5 s CPU", False),
    (["simulate", "--prompt-len", "32768", "--gen-len", "2", "--top", "1"],
     "< 15 s CPU and < 1 GB RSS", True),
    (["sweep", "llama-3.1-8b", "--batch", "1,8,32", "--prompt-len", "128,2048", "--gen-len", "128",
      "--dtype", "bf16,fp8"], "< 60 s wall on 2 cores (the README's sweep)", False),
]  # fmt: skip


def measure(args: list[str]) -> tuple[float, float, int, int]:
    """(CPU s, wall s, peak RSS in bytes, exit code) of one `tcpc` process."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tcp_compiler", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status)


def main(quick: bool, repeat: int, only: str) -> None:
    for args, target, slow in RUNS:
        if (quick and slow) or only not in " ".join(args):
            continue
        runs = sorted((measure(args) for _ in range(repeat)), key=lambda r: r[0])
        cpu, wall, rss, code = runs[len(runs) // 2]
        print(f"tcpc {' '.join(args)}: {cpu:.2f} s CPU, {wall:.2f} s wall, {rss / 1e6:,.0f} MB peak RSS, "
              f"exit {code} (target {target})")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the runs that take minutes")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="print the median CPU of N runs")
    parser.add_argument("--only", default="", metavar="TEXT", help="the targets whose arguments contain TEXT")
    args = parser.parse_args()
    main(args.quick, args.repeat, args.only)
