"""CPU seconds of a serving run of 1,000 requests of 128 in / 4,096 out on Llama-3.1-8B (fp8, one
RNGD chip, all arriving at once, chunked prefill; target: under 60 s CPU), and the error the cost
grids introduce, each measured against exact costs:

- decode: the grid's interpolated cost vs the engine's exact cost at sampled (batch, KV length);
- prefill: the same at sampled token counts;
- a whole run: a smaller serving run (64 requests, 128 in / 512 out) with the default grids vs
  exact costs (every shape compiled and timed): throughput, TTFT and TPOT.

Run: python benchmarks/serve_speed.py [REQUESTS] [--errors-only | --speed-only]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from simulator.hardware import load_hardware
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve import IterationCosts, ServeOptions, serve, synthetic
from tcp_compiler.serve.costs import bucket_error, prefill_bucket_error
from tcp_compiler.serve.options import Buckets
from tcp_compiler.serve.workload import lengths

MODEL, DTYPE = "llama-3.1-8b", "fp8"


def speed(count: int) -> None:
    cfg, hw, prec = load_model(MODEL).config, load_hardware("rngd"), precision(DTYPE)
    requests = synthetic(count, lengths("128"), lengths("4096"), None, False, 0)
    start = time.process_time()
    result = serve(cfg, hw, prec, requests, ServeOptions())
    cpu = time.process_time() - start
    f = serve_report(result).to_dict()
    print(f"{count} requests of 128 in / 4,096 out, {MODEL} {DTYPE} on rngd: {cpu:.1f} s CPU")
    print(
        f"  {f['throughput_output_tokens_per_s']:,.0f} output tokens/s, {f['iterations']:,} iterations, "
        f"{f['preemptions']:,} preemptions, cost cache {f['cost_cache']}"
    )


def errors() -> None:
    cfg, hw, prec = load_model(MODEL).config, load_hardware("rngd"), precision(DTYPE)
    rng = np.random.default_rng(0)
    costs = IterationCosts(cfg, hw, prec, CompileOptions(), Buckets())
    points = [
        (int(b), int(n)) for b, n in zip(rng.integers(1, 257, 24), rng.integers(2, 4225, 24), strict=True)
    ]
    print("decode grid:", bucket_error(costs, points))
    print("prefill grid:", prefill_bucket_error(costs, [int(n) for n in rng.integers(2, 4097, 12)]))
    requests = synthetic(64, lengths("128"), lengths("512"), None, False, 0)
    runs = {}
    for name, buckets in (("grids", Buckets()), ("exact", Buckets.exact())):
        start = time.process_time()
        runs[name] = serve_report(serve(cfg, hw, prec, requests, ServeOptions(buckets=buckets))).to_dict()
        print(f"  64 x 128/512 with {name}: {time.process_time() - start:.1f} s CPU")
    for key in ("throughput_output_tokens_per_s", "ttft_seconds", "tpot_seconds"):
        a, b = runs["grids"][key], runs["exact"][key]
        a, b = (a["mean"], b["mean"]) if isinstance(a, dict) else (a, b)
        print(f"whole run, {key}: grids {a:.6g}, exact {b:.6g}, error {(a - b) / b:+.3%}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("requests", nargs="?", type=int, default=1000, help="timed requests (default 1000)")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--errors-only", action="store_true", help="measure the cost grids' error only")
    only.add_argument("--speed-only", action="store_true", help="time the serving run only")
    args = parser.parse_args()
    if not args.errors_only:
        speed(args.requests)
    if not args.speed_only:
        errors()
