"""Request-level metrics of a serving run, defined as vLLM's serving benchmark defines them.

- TTFT: first token time - arrival (queueing included); TPOT: (e2e - TTFT) / (output - 1), for
  requests of more than one output token; e2e: last token time - arrival.
- Throughput: tokens over the run's duration, from the first arrival to the last completion.
- Goodput: requests per second that met every SLO given (DistServe's definition).
- Bound: each iteration's time beside an independent floor from the model alone (every weight
  read once at peak HBM bandwidth; 2 x parameters x tokens FLOPs at peak compute): their ratio
  shows how far the compiled programs are from the machine's limits.
"""

from __future__ import annotations

import math

import numpy as np

from tcp_compiler.config_bound import matmul_weights
from tcp_compiler.serve.server import ServeResult

PERCENTILES = (50, 90, 99)
MAX_SERIES = 2000  # points kept of a time series in the JSON (every iteration is in `iterations`)


def stats(values: np.ndarray) -> dict:
    """mean, p50, p90, p99 (and count): NaN-free, zeros for an empty sample."""
    if len(values) == 0:
        return {"count": 0, "mean": 0.0, **{f"p{p}": 0.0 for p in PERCENTILES}}
    return {
        "count": int(len(values)),
        "mean": float(np.mean(values)),
        **{f"p{p}": float(np.percentile(values, p)) for p in PERCENTILES},
    }


def latencies(result: ServeResult) -> dict[str, np.ndarray]:
    seqs = result.sequences
    arrival = np.array([s.arrival_s for s in seqs])
    first = np.array([s.first_token_s for s in seqs])
    finish = np.array([s.finish_s for s in seqs])
    outputs = np.array([s.request.output_len for s in seqs])
    several = outputs > 1
    return {
        "ttft": first - arrival,
        "e2e": finish - arrival,
        "tpot": (finish - first)[several] / (outputs[several] - 1),
        "tpot_all": np.where(several, (finish - first) / np.maximum(outputs - 1, 1), 0.0),
    }


def duration(result: ServeResult) -> float:
    start = min(s.arrival_s for s in result.sequences)
    return max(s.finish_s for s in result.sequences) - start  # type: ignore[type-var,operator]


def model_bound_cycles(result: ServeResult) -> np.ndarray:
    """Per iteration, the independent floor (module docstring), in cycles of one chip."""
    hw, it = result.hardware, result.iterations
    tokens = it.array("decodes") + it.array("prefill_tokens")
    params = matmul_weights(result.config)[0] / result.chips  # weights each token multiplies by
    peak_flops = (
        max(hw.macs_per_cycle(d) for d in (result.precision.operand.name, result.precision.act.name)) * 2
    )
    compute = 2.0 * params * tokens / peak_flops
    memory = result.budget.weight_bytes / hw.hbm.peak_bytes_per_cycle
    return np.maximum(compute, memory)


def summary(result: ServeResult, slo_ttft: float | None = None, slo_tpot: float | None = None) -> dict:
    """The run's figures as the JSON report carries them (docs/serving.md lists every key)."""
    lat = latencies(result)
    seqs = result.sequences
    span = duration(result)
    out_tokens = sum(s.request.output_len for s in seqs)
    in_tokens = sum(s.request.prompt_len for s in seqs)
    good = np.ones(len(seqs), bool)
    if slo_ttft is not None:
        good &= lat["ttft"] <= slo_ttft
    if slo_tpot is not None:
        good &= lat["tpot_all"] <= slo_tpot
    it = result.iterations
    cycles = it.array("cycles")
    bound = model_bound_cycles(result)
    return {
        "requests_completed": len(seqs),
        "duration_s": span,
        "throughput_output_tokens_per_s": out_tokens / span if span > 0 else 0.0,
        "throughput_total_tokens_per_s": (out_tokens + in_tokens) / span if span > 0 else 0.0,
        "throughput_requests_per_s": len(seqs) / span if span > 0 else 0.0,
        "ttft_seconds": stats(lat["ttft"]),
        "tpot_seconds": stats(lat["tpot"]),
        "e2e_seconds": stats(lat["e2e"]),
        "goodput": {
            "slo_ttft_s": slo_ttft,
            "slo_tpot_s": slo_tpot,
            "requests_meeting_slo": int(good.sum()),
            "fraction": float(good.mean()),
            "requests_per_s": float(good.sum()) / span if span > 0 else 0.0,
            "output_tokens_per_s": sum(s.request.output_len for s, g in zip(seqs, good, strict=True) if g)
            / span
            if span > 0
            else 0.0,
        },
        "preemptions": result.preemptions,
        "preemption_mode": "recompute",
        "iterations": len(it),
        "mixed_iterations": result.mixed_iterations,
        "busy_fraction": float(it.array("duration_s").sum() / span) if span > 0 else 0.0,
        "model_bound_ratio": float(cycles.sum() / bound.sum()) if len(it) else 0.0,
        "kv_cache": {
            **result.budget.to_dict(),
            "peak_blocks_used": int(it.array("kv_blocks_used").max()) if len(it) else 0,
            "mean_blocks_used": float(np.average(it.array("kv_blocks_used"), weights=it.array("duration_s")))
            if len(it) and it.array("duration_s").sum() > 0
            else 0.0,
        },
        "kv_blocks_over_time": series(it.array("start_s"), it.array("kv_blocks_used")),
        "cost_cache": vars(result.stats) | {"buckets": vars(result.options.buckets)},
    }


def series(t: np.ndarray, v: np.ndarray) -> dict:
    """At most MAX_SERIES (time, value) points: every k-th iteration, so the JSON stays small."""
    step = max(1, math.ceil(len(t) / MAX_SERIES))
    return {"time_s": t[::step].tolist(), "value": v[::step].tolist(), "every_nth_iteration": step}


def requests_table(result: ServeResult) -> list[dict]:
    return [
        {
            "id": s.id,
            "arrival_s": s.arrival_s,
            "prompt_len": s.request.prompt_len,
            "output_len": s.request.output_len,
            "first_token_s": s.first_token_s,
            "finish_s": s.finish_s,
            "preemptions": s.preemptions,
        }
        for s in result.sequences
    ]


def iterations_table(result: ServeResult) -> dict[str, list]:
    """Every iteration's batch composition and time, one list per column."""
    return {name: list(values) for name, values in result.iterations.columns.items()}
