"""The serving report on the terminal (`tcpc serve`): throughput, a latency table, goodput, the KV
cache's arithmetic and what the run cost to time; the JSON holds every request and iteration."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from simulator.numbers import duration
from tcp_compiler.report.serve_types import ServeReport
from tcp_compiler.report.text import chips_text, counted_text, device_noun, power_text


def print_serve_report(report: ServeReport, out: Console) -> None:
    """The summary of a report built with its run's options (`run`)."""
    r, f = report.run, report
    assert r is not None, "the terminal report names the run's options"
    out.print(
        f"[bold]{r.model}[/] on {r.hardware} ({chips_text(r.chips, r.ranks_per_card)}), {r.dtype}, KV "
        f"{r.kv_dtype}; "
        f"{r.scheduler} scheduler, {r.max_batch_tokens:,} tokens / iteration, up to {r.max_seqs} sequences"
    )
    out.print(
        f"{f.requests_completed:,} requests in {f.duration_s:.2f} s simulated: "
        f"[bold]{f.throughput_output_tokens_per_s:,.0f}[/] output tokens/s, "
        f"{f.throughput_total_tokens_per_s:,.0f} total tokens/s, "
        f"{f.throughput_requests_per_s:.2f} requests/s"
    )
    table = Table(title=None, show_edge=False, pad_edge=False)
    table.add_column("latency")
    for col in ("mean", "p50", "p90", "p99"):
        table.add_column(col, justify="right")
    for stats, name in ((f.ttft_seconds, "TTFT"), (f.tpot_seconds, "TPOT"), (f.e2e_seconds, "E2E")):
        table.add_row(name, *(duration(v, 2) for v in (stats.mean, stats.p50, stats.p90, stats.p99)))
    out.print(table)
    if f.max_rate is not None:
        m = f.max_rate
        pairs = (("TTFT", m.slo_ttft_s, m.ttft_s), ("TPOT", m.slo_tpot_s, m.tpot_s))
        met = ", ".join(f"{k} p{m.percentile:g} {duration(v, 2)} <= {duration(s, 2)}"
                        for k, s, v in pairs if s is not None)  # fmt: skip
        bracket = ("the server's capacity: a higher rate overloads it" if m.capacity_bound
                   else f"{m.failing_rate_per_s:.3g} requests/s fails (+{m.margin:.1%})")  # fmt: skip
        out.print(
            f"highest rate meeting the SLOs: [bold]{m.rate_per_s:.3g}[/] requests/s ({met}); "
            f"{bracket}; "
            f"{m.simulations} simulations of "
            f"{m.requests:,} requests, the first {m.warmup_requests:,} left out as warm-up"
        )
    if f.data_parallel is not None:
        d = f.data_parallel
        rows = ", ".join(f"{r.requests:,} requests / {duration(r.busy_s, 2)} busy" for r in d.per_replica)
        out.print(f"{d.replicas} replicas of {chips_text(d.chips_per_replica, r.ranks_per_card)} "
                  f"({d.router} router): {rows}")  # fmt: skip
    g = f.goodput
    if g.slo_ttft_s is not None or g.slo_tpot_s is not None:
        pairs = (("TTFT", g.slo_ttft_s), ("TPOT", g.slo_tpot_s))
        slos = ", ".join(f"{k} <= {v * 1e3:g} ms" for k, v in pairs if v is not None)
        out.print(f"goodput ({slos}): {g.requests_per_s:.2f} requests/s, {g.fraction:.0%} of requests")
    kv = f.kv_cache
    if kv.kv_bytes_per_token:
        blocks = f"{kv.blocks:,} blocks of {kv.block_size} tokens"
        if kv.state_bytes_per_sequence:
            blocks += f" (+ {kv.state_blocks} per sequence for its state)"
    else:
        blocks = f"{kv.blocks:,} blocks of one sequence's state ({kv.state_bytes_per_sequence / 1e6:.1f} MB)"
    out.print(
        f"KV cache: {blocks} per {device_noun(r.ranks_per_card)} "
        f"({kv.kv_bytes / 1e9:.1f} GB "
        f"beside {kv.weight_bytes / 1e9:.1f} GB of weights); peak {kv.peak_blocks_used:,} used, "
        f"mean {kv.mean_blocks_used:,.0f}; {f.preemptions:,} preemptions (recompute)"
    )
    t = f.time
    parts = (
        ("device", t.device_s), ("shape padding", t.padding_s),
        ("KV descriptor issue", t.descriptor_s), ("host scheduling", t.schedule_s),
        ("input preparation", t.prepare_s), ("kernel launch", t.launch_s), ("sampling", t.sample_s),
    )  # fmt: skip
    shares = ", ".join(f"{name} {seconds / t.busy_s:.0%}" for name, seconds in parts if t.busy_s > 0)
    out.print(
        f"where the time goes ({duration(t.busy_s, 2)} of iterations"
        f"{', host overlapping the device' if t.host_overlap else ''}): {shares}; "
        f"{t.padded_tokens:,} padded tokens, {t.padded_kv_tokens:,} padded KV positions read, "
        f"{t.kv_descriptors_per_decode:,.0f} KV descriptors per decode step"
    )
    c = f.cost_cache
    out.print(
        f"{f.iterations:,} iterations ({f.mixed_iterations:,} mixed prefill + decode), "
        f"{f.model_bound_ratio:.2f}x the model's bound; timed by {c.engine_runs:,} engine runs of "
        f"{c.decode_templates:,} decode templates and {c.prefill_compiles:,} prefill programs"
    )
    e = f.energy
    ranks, noun = r.ranks_per_card, device_noun(r.ranks_per_card)
    out.print(
        f"energy ({counted_text(e.chips, ranks)}): {e.joules:,.1f} J, mean "
        f"{power_text(e.average_power_w, ranks)}, peak {e.peak_power_w:.0f} W (idle {e.idle_power_w:.0f} W); "
        f"{e.joules_per_request:.3g} J/request, {e.output_tokens_per_joule:.3g} output tokens/J"
    )
    if e.power_cap_w is not None:
        out.print(f"--power-cap {e.power_cap_w:g} W per {noun}: clock {e.clock_hz / 1e9:.3g} GHz (DVFS)")
    if e.over_tdp_iterations:
        out.print(
            f"{e.over_tdp_iterations:,} iterations draw above the {e.tdp_w:.0f} W TDP per {noun} (chip.tdp_w)"
        )
