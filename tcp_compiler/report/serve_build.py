"""Builds the serving report (tcp_compiler.report.serve_types) from a serving run: the one place its
figures are assembled, for `tcpc serve`, serve sweeps and benchmarks alike."""

from __future__ import annotations

import math

import numpy as np

from simulator.energy import throttled_clock
from simulator.targets import energy_of
from tcp_compiler.report.energy import no_clock_within
from tcp_compiler.report.serve_types import (
    CostCache,
    CostGrids,
    DataParallel,
    Goodput,
    Iterations,
    KvCache,
    Percentiles,
    ReplicaRow,
    RequestRow,
    Series,
    ServeEnergy,
    ServeReport,
    ServeRun,
    ServeTime,
)
from tcp_compiler.serve.metrics import duration, iteration_energy, latencies, model_bound_cycles
from tcp_compiler.serve.server import ServeResult

# The iterations' time by part: they sum to busy_s.
TIME_PARTS = ("device_s", "padding_s", "descriptor_s", "schedule_s", "prepare_s", "launch_s", "sample_s")
MAX_SERIES = 2000  # points kept of a time series in the JSON (every iteration is in `per_iteration`)


def serve_report(
    result: ServeResult,
    slo_ttft: float | None = None,
    slo_tpot: float | None = None,
    run: ServeRun | None = None,
    power_cap_w: float | None = None,
) -> ServeReport:
    """The report of a serving run; `run` describes its options (the command line's);
    `power_cap_w`: the cap the run's clock was chosen under (`--power-cap`), if any."""
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
    it, dp = result.iterations, len(result.routed)
    cycles = it.array("cycles")
    bound = model_bound_cycles(result)
    joules, power = iteration_energy(result)
    columns = {name: tuple(values) for name, values in it.columns.items()
               if name not in ("dynamic_joules", "on_chip_joules")}  # fmt: skip
    return ServeReport(
        run=run,
        requests_completed=len(seqs),
        duration_s=span,
        throughput_output_tokens_per_s=out_tokens / span if span > 0 else 0.0,
        throughput_total_tokens_per_s=(out_tokens + in_tokens) / span if span > 0 else 0.0,
        throughput_requests_per_s=len(seqs) / span if span > 0 else 0.0,
        ttft_seconds=percentiles(lat["ttft"]),
        tpot_seconds=percentiles(lat["tpot"]),
        e2e_seconds=percentiles(lat["e2e"]),
        goodput=Goodput(
            slo_ttft_s=slo_ttft,
            slo_tpot_s=slo_tpot,
            requests_meeting_slo=int(good.sum()),
            fraction=float(good.mean()),
            requests_per_s=float(good.sum()) / span if span > 0 else 0.0,
            output_tokens_per_s=sum(s.request.output_len for s, g in zip(seqs, good, strict=True) if g)
            / span
            if span > 0
            else 0.0,
        ),
        preemptions=result.preemptions,
        preemption_mode="recompute",
        iterations=len(it),
        mixed_iterations=result.mixed_iterations,
        busy_fraction=float(it.array("duration_s").sum() / (span * dp)) if span > 0 else 0.0,
        time=_time(result),
        model_bound_ratio=float(cycles.sum() / bound.sum()) if len(it) else 0.0,
        kv_cache=_kv_cache(result),
        kv_blocks_over_time=series(it.array("start_s"), it.array("kv_blocks_used")),
        cost_cache=CostCache(**vars(result.stats), buckets=CostGrids(**vars(result.options.buckets))),
        requests=tuple(
            RequestRow(
                id=s.id, arrival_s=s.arrival_s, prompt_len=s.request.prompt_len,
                output_len=s.request.output_len, first_token_s=s.first_token_s, finish_s=s.finish_s,
                preemptions=s.preemptions,
            )
            for s in seqs
        ),  # fmt: skip
        per_iteration=Iterations(**columns, joules=tuple(joules.tolist()), power_w=tuple(power.tolist())),
        energy=_energy(result, joules, power, span, out_tokens, power_cap_w),
        data_parallel=_data_parallel(result) if dp > 1 else None,
    )


def _data_parallel(result: ServeResult) -> DataParallel:
    rows = zip(result.routed, result.replica_busy_s(), strict=True)
    return DataParallel(
        replicas=len(result.routed), router=result.options.router, chips_per_replica=result.replica_chips,
        per_replica=tuple(ReplicaRow(requests=n, busy_s=busy) for n, busy in rows),
    )  # fmt: skip


def _time(result: ServeResult) -> ServeTime:
    """The iterations' time by part (their columns summed) and the padding and descriptors."""
    it = result.iterations
    total = {name: float(it.array(name).sum()) for name in TIME_PARTS}
    decoding = it.array("decodes") > 0
    descriptors = it.array("kv_descriptors")[decoding]
    return ServeTime(
        busy_s=float(it.array("duration_s").sum()), **total, host_overlap=result.options.host_overlap,
        padded_tokens=int(it.array("padded_tokens").sum()),
        padded_kv_tokens=int(it.array("padded_kv_tokens").sum()),
        kv_descriptors_per_decode=float(descriptors.mean()) if len(descriptors) else 0.0,
    )  # fmt: skip


def capped_clock(result: ServeResult, cap_w: float) -> float:
    """The highest clock (at its DVFS voltage) at which no iteration of `result` draws more than
    `cap_w` per chip while it runs, taking each iteration's cycles as fixed: its time stretches
    with 1 / clock and its on-chip energy falls with V^2 (simulator.energy.throttled_clock). The
    batches a slower server forms differ, so the caller serves again and checks."""
    hw, it = result.hardware, result.iterations
    point, clock, chips = energy_of(hw).point(hw), hw.chip.clock_hz, result.replica_chips
    mirrored = chips // result.pp  # each iteration's work runs on every tensor-parallel chip
    _, power = iteration_energy(result)
    lowest = clock
    over = np.flatnonzero(power > cap_w)
    columns = [it.array(c)[over].tolist() for c in ("dynamic_joules", "on_chip_joules", "duration_s")]
    for dyn, on, s in zip(*columns, strict=True):
        found = throttled_clock(point, on * mirrored, (dyn - on) * mirrored, s * clock, cap_w, chips)
        if found is None:
            raise no_clock_within(cap_w, hw)
        lowest = min(lowest, found)
    return lowest


def _energy(
    result: ServeResult, joules: np.ndarray, power: np.ndarray, span: float, out_tokens: int,
    power_cap_w: float | None,
) -> ServeEnergy:  # fmt: skip
    """The run's energy: its iterations', plus idle power on every chip of a replica while none of
    its iterations runs."""
    point, chips = energy_of(result.hardware).point(result.hardware), result.chips
    idle = sum(max(span - min(busy, span), 0.0) for busy in result.replica_busy_s())
    total = float(joules.sum()) + result.replica_chips * point.idle_power_w * idle
    return ServeEnergy(
        chips=chips, joules=total, average_power_w=total / (span * chips) if span > 0 else 0.0,
        peak_power_w=float(power.max()) if len(power) else 0.0, idle_power_w=point.idle_power_w,
        joules_per_request=total / len(result.sequences) if result.sequences else 0.0,
        output_tokens_per_joule=out_tokens / total if total > 0 else 0.0, tdp_w=point.tdp_w,
        over_tdp_iterations=int((power > point.tdp_w).sum()), power_cap_w=power_cap_w,
        clock_hz=point.clock_hz if power_cap_w is not None else None,
    )  # fmt: skip


def percentiles(values: np.ndarray) -> Percentiles:
    """mean, p50, p90, p99 (and count): NaN-free, zeros for an empty sample."""
    if len(values) == 0:
        return Percentiles(count=0, mean=0.0, p50=0.0, p90=0.0, p99=0.0)
    p50, p90, p99 = (float(np.percentile(values, p)) for p in (50, 90, 99))
    return Percentiles(count=int(len(values)), mean=float(np.mean(values)), p50=p50, p90=p90, p99=p99)


def _kv_cache(result: ServeResult) -> KvCache:
    budget, it = result.budget, result.iterations
    used, times = it.array("kv_blocks_used"), it.array("duration_s")
    return KvCache(
        hbm_bytes=budget.hbm_bytes, weight_bytes=budget.weight_bytes,
        activation_bytes=budget.activation_bytes,
        kv_bytes=budget.kv_bytes, kv_bytes_per_token=budget.kv_bytes_per_token,
        state_bytes_per_sequence=budget.state_bytes_per_sequence, state_blocks=budget.state_blocks,
        block_size=budget.block_size,
        blocks=budget.blocks, tokens=budget.blocks * budget.block_size,
        peak_blocks_used=int(used.max()) if len(it) else 0,
        mean_blocks_used=float(np.average(used, weights=times)) if len(it) and times.sum() > 0 else 0.0,
    )  # fmt: skip


def series(t: np.ndarray, v: np.ndarray) -> Series:
    """At most MAX_SERIES (time, value) points: every k-th iteration, so the JSON stays small."""
    step = max(1, math.ceil(len(t) / MAX_SERIES))
    return Series(time_s=tuple(t[::step].tolist()), value=tuple(v[::step].tolist()), every_nth_iteration=step)
