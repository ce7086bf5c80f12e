"""Simulating a generation: prefill once, then every decode step at its own KV length.

Builds the graphs (tcp_compiler.frontend), runs the passes, maps them (tcp_compiler.mapping)
and runs the cycle-counting engine (simulator.engine). Decode steps share one compiled template
(tcp_compiler.mapping.steps), so long generations stay fast while each step is simulated at its
own length. Per-op and per-unit figures are summed over all steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from simulator.engine import simulate as run_engine
from simulator.hardware import Hardware
from simulator.program import Program
from simulator.reference_engine import Timeline
from simulator.report import OpTotals, op_totals
from tcp_compiler.frontend.builder import ModelGraph, build_decode, build_prefill
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.mapping.attention import choose_attention
from tcp_compiler.mapping.capacity import Capacity, check_capacity, model_capacity
from tcp_compiler.mapping.capacity import capacity as capacity_of  # the name `capacity` is taken below
from tcp_compiler.mapping.machine import Machine, machine_from
from tcp_compiler.mapping.schedule import schedule
from tcp_compiler.mapping.steps import DecodeSteps
from tcp_compiler.passes import run_passes


@dataclass
class Run:
    """One simulated program (the prefill, or one decode step) and its timeline."""

    name: str
    program: Program
    timeline: Timeline

    @property
    def cycles(self) -> int:
        return self.timeline.cycles


@dataclass
class Simulation:
    config: ModelConfig
    hardware: Hardware
    machine: Machine
    precision: Precision
    chips: int
    batch: int
    prompt_len: int
    gen_len: int
    prefill: Run
    prefill_ops: OpTotals
    capacity: Capacity
    decode_cycles: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    decode_flops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    decode_hbm: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    decode_ops: OpTotals | None = None  # summed over every step
    traced_steps: list[Run] = field(default_factory=list)  # the first few steps, for traces
    attention: list[dict] = field(default_factory=list)  # the prefill's attention form per layer, and why


def simulate_generation(
    config: ModelConfig,
    hardware: Hardware,
    precision: Precision,
    batch: int,
    prompt_len: int,
    gen_len: int,
    chips: int | None = None,
    trace_steps: int = 2,
    progress: Callable[[int, int], None] | None = None,
) -> Simulation:
    """Prefill of `prompt_len` tokens, then gen_len - 1 decode steps (the prefill gives token 1)."""
    machine = machine_from(hardware)
    chips = chips or hardware.chips
    final_past = prompt_len + max(gen_len - 1, 0)
    built_prefill = build_prefill(config, precision, batch, prompt_len, chips=chips)
    # Both phases must fit: the decode step with the cache at its final length, and the prefill
    # as it will run, whose spilled activations can be the larger. The decode step is checked
    # first: it is cheap, and a prompt too long for HBM should not first be cut into key blocks.
    decode_cap = _capacity_at(config, precision, batch, final_past, chips, machine)
    check_capacity(decode_cap, config.name, machine, chips)
    prefill_graph, attention = choose_attention(run_passes(built_prefill.graph), machine)
    weights = sum(built_prefill.graph[n].type.nbytes for n in built_prefill.bindings)
    prefill_kv = sum(prefill_graph[o].type.nbytes for o in prefill_graph.outputs if o != "logits")
    prefill_cap = capacity_of(prefill_graph, machine, weights, prefill_kv)
    capacity = Capacity(  # the final KV cache with the larger phase's spills: conservative
        decode_cap.weights,
        max(decode_cap.kv_cache, prefill_cap.kv_cache),
        max(decode_cap.activations, prefill_cap.activations),
        decode_cap.available,
    )
    check_capacity(capacity, config.name, machine, chips)
    prefill = _run("prefill", schedule(prefill_graph, machine), machine)
    result = Simulation(
        config, hardware, machine, precision, chips, batch, prompt_len, gen_len, prefill,
        op_totals(prefill.program, prefill.timeline), capacity, attention=attention,
    )  # fmt: skip
    steps = max(gen_len - 1, 0)
    if steps == 0:
        return result
    template = DecodeSteps(
        run_passes(build_decode(config, precision, batch, prompt_len, chips=chips).graph), machine
    )
    cycles, flops, hbm = (np.zeros(steps, np.int64) for _ in range(3))
    totals: OpTotals | None = None
    for t in range(steps):
        past = prompt_len + t
        run = _run(f"decode {t}", template.at(past + 1), machine)
        cycles[t], flops[t], hbm[t] = run.cycles, run.program.flops.sum(), run.program.hbm_bytes.sum()
        step_totals = op_totals(run.program, run.timeline)
        totals = step_totals if totals is None else totals + step_totals
        if t < trace_steps:
            result.traced_steps.append(run)
        if progress is not None:
            progress(t + 1, steps)
    result.decode_cycles, result.decode_flops, result.decode_hbm, result.decode_ops = (
        cycles,
        flops,
        hbm,
        totals,
    )
    return result


def _run(name: str, program: Program, machine: Machine) -> Run:
    return Run(name, program, run_engine(program, machine.hbm_bytes_per_cycle, machine.dma_bytes_per_cycle))


def _capacity_at(config, precision, batch, past, chips, machine) -> Capacity:
    """HBM use with the KV cache at its final length (weights and cache of one chip)."""
    built: ModelGraph = build_decode(config, precision, batch, past, chips=chips)
    return model_capacity(built, machine)
