"""Builds the simulation report (tcp_compiler.report.types) from a simulation. Seconds come from
cycles at the spec's clock plus what a server pays around each program: the runtime's padding up to
its static shapes and its paged-KV descriptors' issue (tcp_compiler.serve.static_costs) and the
host's work (tcp_compiler.serve.host: one kernel launch, scheduling, input preparation and sampling
of the batch); every roofline from tcp_compiler.analysis.roofline. The renderers live beside it:
tcp_compiler.report.markdown, tcp_compiler.report.terminal."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import fields

from simulator.report import OpTotals
from simulator.utilisation import totals_busy_cycles, utilisation
from tcp_compiler.analysis.config_floor import decode_bound_seconds, phase_bound, unrun_weights
from tcp_compiler.analysis.limiter import Limiter, PhaseTime, limiter
from tcp_compiler.analysis.op_roles import OpRoleRow, op_roles
from tcp_compiler.analysis.roofline import Roofline, bound
from tcp_compiler.recipes import recipes
from tcp_compiler.report.energy import energy, op_joules
from tcp_compiler.report.types import (
    Attention,
    AttentionNote,
    DecodePhase,
    HardwareSummary,
    LayerRow,
    Layers,
    Memory,
    OpRoles,
    OpRow,
    Ops,
    Pipeline,
    PrefillPhase,
    Report,
    StageRow,
    UnitRow,
    Units,
)
from tcp_compiler.serve.host import HostWork, host_work
from tcp_compiler.simulate import Simulation


def _roofline(sim: Simulation) -> Roofline:
    """One chip's roofs, compute at the contraction engine's operand dtype in this precision
    (formats dequantise, but w8a8)."""
    return Roofline.of(sim.hardware, sim.precision.operand)


Terms = tuple[float, float, float]  # an op's compute, memory and communication seconds at the roofs
# An op's figures as OpRow has them, before the report keeps it: a long prefill has ~10^5 ops, of
# which the report keeps the `top` as OpRows (records check every field); the roles sum them all.
_OpFigures = namedtuple("_OpFigures", [f.name for f in fields(OpRow)])  # type: ignore[misc]


def _ops(
    totals: OpTotals, steps: int, sim: Simulation
) -> tuple[tuple[_OpFigures, ...], tuple[str, ...], tuple[Terms, ...]]:
    """Every op, averaged per program run (per decode step for decode), heaviest first, the role
    of each and its roofline terms, compute at the peak of the dtype its contraction multiplies in
    (attention's operands in a bf16 cache on an fp8 run go at bf16's rate)."""
    clock, hw, default = sim.hardware.chip.clock_hz, sim.hardware, sim.precision.operand.name
    rooflines = {d: Roofline.of(hw, d) for d in {*totals.operands, default} - {""}}
    rows, all_terms = [], []
    # Python floats (the same doubles): a long prefill has ~10^5 ops, and numpy scalars are slow.
    busy, main, layers = totals.busy_cycles.tolist(), totals.main_cycles.tolist(), totals.layers.tolist()
    all_flops, all_hbm = totals.flops.tolist(), totals.hbm_bytes.tolist()
    all_link, all_dm = totals.link_bytes.tolist(), totals.dm_bytes.tolist()
    joules = op_joules(sim, totals).tolist()
    for i, name in enumerate(totals.names):
        seconds = busy[i] / clock / steps
        flops, hbm = all_flops[i] / steps, all_hbm[i] / steps
        link, dm = all_link[i] / steps, all_dm[i] / steps
        terms = rooflines[totals.operands[i] or default].terms(flops, hbm, link)
        all_terms.append(terms)
        moved = hbm + dm
        rows.append(
            _OpFigures(
                name=name, kind=totals.kinds[i], layer=int(layers[i]), placement=totals.placements[i],
                seconds=seconds, tensor_unit_seconds=main[i] / clock / steps, flops=flops,
                hbm_bytes=hbm, dm_bytes=dm, link_bytes=link, intensity=flops / moved if moved else 0.0,
                hbm_intensity=flops / hbm if hbm else 0.0,
                roofline_seconds=max(terms), bound=bound(seconds, *terms), joules=joules[i] / steps,
            )
        )  # fmt: skip
    order = sorted(range(len(rows)), key=lambda i: -rows[i].seconds)
    return (tuple(rows[i] for i in order), tuple(totals.roles[i] for i in order),
            tuple(all_terms[i] for i in order))  # fmt: skip


def _kept(ops: tuple[_OpFigures, ...], top: int | None) -> tuple[OpRow, ...]:
    """The heaviest `top` ops (None or 0: every op) as the report's rows."""
    return tuple(OpRow(**op._asdict()) for op in ops[: top or None])


def _layers(
    totals: OpTotals, steps: int, sim: Simulation, forms: dict[int, str] | None = None
) -> tuple[LayerRow, ...]:
    """Per decoder layer (-1: embedding, final norm and LM head), per step for decode; `forms`
    gives the prefill's attention form per layer."""
    clock, roofline = sim.hardware.chip.clock_hz, _roofline(sim)
    joules = op_joules(sim, totals)
    rows = []
    for index, layer in enumerate(totals.layer_ids.tolist()):
        pick = totals.layers == layer
        seconds = float(totals.layer_span_cycles[index]) / clock / steps
        flops = float(totals.flops[pick].sum()) / steps
        hbm = float(totals.hbm_bytes[pick].sum()) / steps
        link = float(totals.link_bytes[pick].sum()) / steps
        moved = hbm + float(totals.dm_bytes[pick].sum()) / steps
        terms = roofline.terms(flops, hbm, link)
        rows.append(
            LayerRow(
                layer=int(layer), seconds=seconds,
                tensor_unit_seconds=float(totals.main_cycles[pick].sum()) / clock / steps,
                flops=flops, hbm_bytes=hbm, intensity=flops / moved if moved else 0.0,
                hbm_intensity=flops / hbm if hbm else 0.0,
                roofline_seconds=max(terms), bound=bound(seconds, *terms),
                attention=(forms or {}).get(int(layer)), joules=float(joules[pick].sum()) / steps,
            )
        )  # fmt: skip
    return tuple(rows)


def _attention_forms(sim: Simulation) -> dict[int, str]:
    """The prefill's attention form per layer: each note names its attention's output value, whose
    layer the graph's metadata gave."""
    return {sim.attention_layers[note["op"]]: note["form"] for note in sim.attention}


def _host(sim: Simulation, phase: str) -> HostWork:
    """The host's work around one program of the phase: the prefill schedules, prepares and samples
    the batch's prompts; a decode step its one token per sequence."""
    tokens = sim.batch * (sim.prompt_len if phase == "prefill" else 1)
    return host_work(sim.hardware, sim.batch, tokens, sim.batch, programs=1)


def _limiter(
    totals: OpTotals, steps: int, seconds: float, terms: tuple, sim: Simulation, host: HostWork,
    runtime: dict[str, float],
) -> Limiter | None:
    """What a phase's time beyond its roofline is made of (per step for decode). None for a
    pipeline: the activity states are one chip's, while its stages wait on one another by design
    (the per-stage table's busy shares say how much)."""
    if sim.pipeline:
        return None
    clock = sim.hardware.chip.clock_hz
    busy = totals.unit_busy.sum(axis=0)[totals.sites.unit(totals.sites.compute)]
    phase = PhaseTime(
        seconds=seconds, host_seconds=host.as_dict(), runtime_seconds=runtime,
        terms=tuple(float(t) for t in terms),
        state_seconds=totals.state_cycles / clock / steps,
        compute_busy_seconds=float(busy) / clock / steps, cycle_seconds=1 / clock, sites=totals.sites,
    )  # fmt: skip
    return limiter(phase)


def _roles(
    ops: tuple[tuple[_OpFigures, ...], tuple[str, ...], tuple[Terms, ...]], seconds: float
) -> tuple[OpRoleRow, ...]:
    return op_roles(*ops, seconds, bound)


def _units(totals: OpTotals, cycles: float, sim: Simulation) -> tuple[UnitRow, ...]:
    """Busy cycles and utilisation per unit, by simulator.utilisation's definition (the timeline
    plot uses the same one): moved bytes at full bandwidth for DMA and links, else busy cycles."""
    busy = totals_busy_cycles(totals, sim.hardware)
    return tuple(
        UnitRow(unit=unit.name, busy_cycles=float(busy[u]), utilisation=float(utilisation(busy[u], cycles)))
        for u, unit in enumerate(totals.sites.units)
    )


def _decode(sim: Simulation, roofline: Roofline) -> DecodePhase:
    steps = len(sim.decode_cycles)
    if not steps:
        return DecodePhase(steps=0)
    host, rt, clock = _host(sim, "decode"), sim.runtime, sim.hardware.chip.clock_hz
    padding, issue = rt.decode_padding_cycles / clock, rt.decode_descriptor_cycles / clock
    tpot = sim.decode_cycles / clock + padding + issue + host.total
    mean = float(tpot.mean())
    runtime = {"padding": float(padding.mean()), "descriptors": float(issue.mean())}
    flops, hbm = sim.decode_flops.mean(), sim.decode_hbm.mean()
    # a step passes the stages in turn: the summed work of one chip per stage at one chip's roofs
    terms = roofline.terms(flops, hbm, sim.decode_ops.link_bytes.sum() / steps)
    return DecodePhase(
        steps=steps, tpot_seconds_mean=mean, tpot_seconds_first=float(tpot[0]),
        tpot_seconds_last=float(tpot[-1]), seconds_total=float(tpot.sum()), flops_per_step_mean=float(flops),
        hbm_bytes_per_step_mean=float(hbm), bound=bound(mean, *terms), roofline_seconds_mean=max(terms),
        limiter=_limiter(sim.decode_ops, steps, mean, terms, sim, host, runtime),
        host_seconds=host.total - host.launch,
        padding_seconds=runtime["padding"], descriptor_seconds=runtime["descriptors"],
        kv_descriptors_per_step=float(rt.decode_descriptors.mean()), padded_sequences=rt.decode_padded_tokens,
        padded_kv_tokens_per_step=float(rt.decode_padded_kv.mean()),
        config_bound_seconds_mean=_decode_config_bound(sim, steps),
    )  # fmt: skip


def _decode_config_bound(sim: Simulation, steps: int) -> float:
    """The mean over the decode steps of their config-only floors (the kernel launch included)."""
    lengths = range(sim.prompt_len + 1, sim.prompt_len + steps + 1)  # step t's cache holds prompt + t + 1
    hw = sim.hardware
    floors = decode_bound_seconds(sim.config, sim.precision, hw, sim.chips, sim.batch, lengths, sim.stages)
    launch = hw.system.kernel_launch_s
    return sum(floor + launch for floor in floors) / steps


def _config_bound(sim: Simulation, phase: str, length: int) -> float:
    """The config-only floor of a phase, in seconds (the kernel launch included, as in the phase)."""
    cfg, p = sim.config, sim.precision
    floor = phase_bound(cfg, p, sim.hardware, sim.chips, sim.batch, phase, length, sim.stages)
    return floor.seconds + sim.hardware.system.kernel_launch_s


def build_report(sim: Simulation, top: int | None = None) -> Report:
    """The report of a simulation; `top` keeps only the heaviest ops in `ops` (None: every op, as
    `--json` writes; op roles are always complete)."""
    hw, clock, stages = sim.hardware, sim.hardware.chip.clock_hz, sim.stages
    unrun_params, unrun_bytes = unrun_weights(sim.config, sim.precision)
    roofline = _roofline(sim)  # one chip's: a pipelined program adds one chip's work per stage
    host = _host(sim, "prefill")
    p = sim.prefill.program
    padding = sim.runtime.prefill_padding_cycles / clock
    prefill_seconds = sim.prefill.cycles / clock + padding + host.total
    if sim.pipeline:
        work = [s.prefill_work for s in sim.pipeline.stages]
        terms = roofline.pipeline_terms(work, sim.pipeline.micro_batches)
    else:
        terms = roofline.terms(p.flops.sum(), p.hbm_bytes.sum(), p.link_bytes.sum())
    prefill = PrefillPhase(
        cycles=sim.prefill.cycles, seconds=prefill_seconds, launch_seconds=host.launch,
        host_seconds=host.total - host.launch, padding_seconds=padding,
        padded_tokens=sim.runtime.prefill_padded_tokens, flops=int(p.flops.sum()),
        model_flops=sim.prefill_model_flops,
        model_flops_utilisation=sim.prefill_model_flops / (prefill_seconds * roofline.flops_per_s * stages),
        hbm_bytes=int(p.hbm_bytes.sum()), roofline_seconds=max(terms), bound=bound(prefill_seconds, *terms),
        limiter=_limiter(sim.prefill_ops, 1, prefill_seconds, terms, sim, host, {"padding": padding}),
        config_bound_seconds=_config_bound(sim, "prefill", sim.prompt_len), chunks=sim.prefill_chunks,
    )  # fmt: skip
    decode = _decode(sim, roofline)
    steps = decode.steps
    total = prefill_seconds + (decode.seconds_total if steps else 0.0)
    cap = sim.capacity
    state = sim.state_bytes_per_sequence
    cached = sim.batch * (sim.prompt_len + max(sim.gen_len - 1, 0))
    kv_per_token = (cap.kv_cache - sim.batch * state) / max(1, cached)
    prefill_ops = _ops(sim.prefill_ops, 1, sim)
    decode_ops = _ops(sim.decode_ops, steps, sim) if steps else None
    return Report(
        model=sim.config.name,
        family=sim.config.family,
        hardware=HardwareSummary(
            name=hw.name, chips=sim.chips * stages, ranks_per_card=hw.system.ranks_per_card, clock_hz=clock,
            peak_flops_per_s=roofline.flops_per_s, hbm_bytes_per_s=roofline.hbm_bytes_per_s,
            area_mm2=hw.area_mm2, assumed=tuple(hw.assumed_keys),
        ),
        batch=sim.batch, prompt_len=sim.prompt_len, gen_len=sim.gen_len, dtype=sim.precision.name,
        kv_dtype=sim.precision.kv.name,
        prefill=prefill,
        decode=decode,
        ttft_seconds=prefill_seconds,
        throughput_tokens_per_s=sim.batch * sim.gen_len / total if total else 0.0,
        decode_tokens_per_s=sim.batch / decode.tpot_seconds_mean if steps else 0.0,
        units=Units(
            prefill=_units(sim.prefill_ops, sim.prefill.cycles * stages, sim),
            decode=_units(sim.decode_ops, float(sim.decode_cycles.sum()) * stages, sim) if steps else None,
        ),
        layers=Layers(
            prefill=_layers(sim.prefill_ops, 1, sim, _attention_forms(sim)),
            decode=_layers(sim.decode_ops, steps, sim) if steps else None,
        ),
        ops=Ops(
            prefill=_kept(prefill_ops[0], top), decode=_kept(decode_ops[0], top) if decode_ops else None
        ),
        op_roles=OpRoles(
            prefill=_roles(prefill_ops, prefill_seconds),
            decode=_roles(decode_ops, decode.tpot_seconds_mean) if decode_ops else None,
        ),
        attention=Attention(prefill=tuple(AttentionNote(**note) for note in sim.attention)),
        memory=Memory(
            hbm_capacity_bytes=cap.available, weights_bytes=cap.weights, kv_cache_bytes=cap.kv_cache,
            kv_cache_bytes_per_token=kv_per_token, state_bytes_per_sequence=state,
            activations_bytes=cap.activations, free_bytes=cap.free,
            unrun_params=unrun_params, unrun_weights_bytes=round(unrun_bytes),
        ),
        pipeline=_pipeline(sim, prefill_seconds, decode) if sim.pipeline else None,
        energy=energy(sim, prefill_seconds, decode.seconds_total if steps else 0.0),
    )  # fmt: skip


def _pipeline(sim: Simulation, ttft: float, decode: DecodePhase) -> Pipeline:
    """Each stage's work timed alone against the phase: what share of it the stage is busy."""
    pipe, clock = sim.pipeline, sim.hardware.chip.clock_hz
    assert pipe is not None
    tpot = decode.tpot_seconds_mean if decode.steps else 0.0
    sent = 0.0
    if decode.steps:
        sent = recipes(sim.hardware).SENT
        sends = [k for k, kind in enumerate(sim.decode_ops.kinds) if kind == sent]
        sent = float(sim.decode_ops.link_bytes[sends].sum()) / decode.steps
    rows = []
    for s in pipe.stages:
        prefill, step = s.prefill_cycles / clock, s.decode_cycles / clock
        rows.append(
            StageRow(
                stage=s.index, first_layer=s.first_layer, last_layer=s.last_layer,
                weights_bytes=s.weights_bytes, kv_cache_bytes=s.kv_cache_bytes, prefill_seconds=prefill,
                prefill_busy_share=pipe.micro_batches * prefill / ttft, decode_seconds=step,
                decode_busy_share=step / tpot if tpot else 0.0,
            )
        )  # fmt: skip
    return Pipeline(tp=pipe.tp, pp=pipe.pp, micro_batches=pipe.micro_batches, link_bytes_per_step=sent,
                    stages=tuple(rows))  # fmt: skip
