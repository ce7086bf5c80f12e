"""How long building a model's graph from its config takes (target: Llama-3.1-70B prefill < 1 s).

Run: python benchmarks/build_graph.py [MODEL ...]
"""

from __future__ import annotations

import argparse
import time

from tcp_compiler.frontend.builder import build_decode, build_prefill
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS


def best_of(runs: int, fn) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(names: list[str]) -> None:
    print(f"{'model':18s} {'phase':8s} {'layers':>6s} {'ops':>7s} {'first s':>8s} {'best s':>8s}")
    for name in names:
        start = time.perf_counter()
        cfg = load_model(name).config
        read = time.perf_counter() - start
        for phase, build in (
            ("prefill", lambda c=cfg: build_prefill(c, PRECISIONS["bf16"], 1, 2048)),
            ("decode", lambda c=cfg: build_decode(c, PRECISIONS["bf16"], 1, 2048)),
        ):
            first = best_of(1, build) + read  # includes reading and normalising the config
            ops = len(build().graph)
            best = best_of(3, build) + read
            print(f"{name:18s} {phase:8s} {len(cfg.layers):6d} {ops:7d} {first:8.3f} {best:8.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    default = ["llama-3.1-70b", "llama-3.1-8b", "qwen3-30b-a3b", "gemma-3-27b"]
    parser.add_argument("models", nargs="*", default=default, metavar="MODEL", help=" ".join(default))
    main(parser.parse_args().models)
