"""A simulated serving run in the keys vLLM's `bench serve --save-result --save-detailed` writes
(`tcpc serve --result-format vllm`), so tools that read vLLM results, `tcpc validate` among them,
read simulated runs: the run's setup (`request_rate`, `max_concurrency`, ...), its totals and
throughputs, the per-request arrays (`input_lens`, `output_lens`, `ttfts`, `itls`, `latencies`,
`start_times`) and each latency's mean, median, std and p90 / p99 in milliseconds (vLLM's
`{mean,median,std,p99}_{ttft,tpot,itl,e2el}_ms`). Times are the simulation's, in seconds as
vLLM writes them."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import numpy as np

from tcp_compiler.report.serve_types import ServeReport
from tcp_compiler.serve.metrics import latencies
from tcp_compiler.serve.server import ServeResult

PERCENTILES = (90, 99)  # written as p90_*_ms, p99_*_ms (vLLM: --metric-percentiles 90,99)


def vllm_result(result: ServeResult, report: ServeReport) -> dict[str, Any]:
    """The vLLM keys of a run served with token gaps recorded (serve(token_gaps=True)); `report`
    is its serving report, built with its options (`run`)."""
    run, seqs = report.run, result.sequences
    assert run is not None, "the rate and concurrency are the run's options"
    lat = latencies(result)
    itls = [np.frombuffer(s.itl, float) for s in seqs]
    arrival = np.array([s.arrival_s for s in seqs])
    rate: float | str = "inf"  # all at once, a closed loop (vLLM's rate inf) or a trace's own times
    if run.rate_per_s is not None and math.isfinite(run.rate_per_s):
        rate = run.rate_per_s
    outputs = [s.request.output_len for s in seqs]
    doc: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "tcpc",
        "backend": "tcpc",
        "label": "tcpc serve",
        "model_id": run.model,
        "tokenizer_id": run.model,
        "num_prompts": len(seqs),
        "request_rate": rate,
        "burstiness": 1.0,
        "max_concurrency": run.concurrency,
        "duration": report.duration_s,
        "completed": len(seqs),
        "failed": 0,
        "total_input_tokens": sum(s.request.prompt_len for s in seqs),
        "total_output_tokens": sum(outputs),
        "request_throughput": report.throughput_requests_per_s,
        "request_goodput": None,
        "output_throughput": report.throughput_output_tokens_per_s,
        "total_token_throughput": report.throughput_total_tokens_per_s,
        "input_lens": [s.request.prompt_len for s in seqs],
        "output_lens": outputs,
        "ttfts": lat["ttft"].tolist(),
        "itls": [g.tolist() for g in itls],
        "latencies": lat["e2e"].tolist(),
        "start_times": arrival.tolist(),
        "generated_texts": [""] * len(seqs),
        "errors": [""] * len(seqs),
        **_peaks(lat["ttft"] + arrival, itls, arrival, arrival + lat["e2e"]),
    }
    pooled = np.concatenate(itls) if itls else np.zeros(0)
    for name, values in (("ttft", lat["ttft"]), ("tpot", lat["tpot"]), ("itl", pooled), ("e2el", lat["e2e"])):
        doc.update(_stats(name, values))
    return doc


def _stats(name: str, seconds: np.ndarray) -> dict[str, float]:
    """vLLM's mean, median, std and percentiles of a latency, in ms (0 for an empty sample)."""
    ms = seconds * 1e3 if len(seconds) else np.zeros(1)
    stats = {f"mean_{name}_ms": float(np.mean(ms)), f"median_{name}_ms": float(np.median(ms)),
             f"std_{name}_ms": float(np.std(ms))}  # fmt: skip
    stats.update({f"p{p}_{name}_ms": float(np.percentile(ms, p)) for p in PERCENTILES})
    return stats


def _peaks(first: np.ndarray, itls: list[np.ndarray], start: np.ndarray, end: np.ndarray) -> dict[str, float]:
    """vLLM's peak figures: the most output tokens out in one second (tokens binned by the whole
    second since the first request) and the most requests in flight at once then."""
    times = [f + np.concatenate([[0.0], np.cumsum(g)]) for f, g in zip(first, itls, strict=True)]
    tokens = np.concatenate(times)
    origin = float(start.min())
    seconds = np.floor(tokens - origin).astype(np.int64)
    counts = np.bincount(seconds)
    peak = int(np.argmax(counts))
    in_flight = int(((start - origin < peak + 1) & (end - origin > peak)).sum())
    return {"max_output_tokens_per_s": float(counts[peak]), "max_concurrent_requests": in_flight}
