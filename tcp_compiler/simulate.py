"""Simulating a generation: prefill once, then every decode step at its own KV length.

Compiles each phase through the one pipeline (tcp_compiler.pipeline) and runs the
cycle-counting engine (simulator.engine). Decode steps share one compiled template
(tcp_compiler.mapping.steps), so long generations stay fast while each step is simulated at its
own length. Per-op and per-unit figures are summed over all steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from simulator.hardware import Hardware
from simulator.program import Program
from simulator.report import OpTotals, op_totals
from simulator.step_totals import StepTotals
from simulator.timeline import Timeline
from tcp_compiler.frontend.build import check_positions
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.mapping.capacity import Capacity, capacity, check_capacity
from tcp_compiler.mapping.steps import DecodeSteps, resize_graph
from tcp_compiler.pipeline import CompileOptions, compile_phase, larger, lower, run_block
from tcp_compiler.pipeline import run as run_program
from tcp_compiler.simulate_pipeline import PipelineFigures, simulate_pipelined


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
    prefill_model_flops: int = 0  # the model's math; the prefill program executes prefill.program.flops
    # Pipeline parallelism: `chips` is then each stage's tensor-parallel group, and the programs
    # run the stages on chips 0..pp-1 (tcp_compiler.simulate_pipeline).
    pipeline: PipelineFigures | None = None

    @property
    def stages(self) -> int:
        return self.pipeline.pp if self.pipeline else 1


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
    options: CompileOptions | None = None,
    stage: Callable[[str], None] | None = None,
    planned: Callable[[list[dict]], None] | None = None,
    pp: int = 1,
    micro_batches: int | None = None,
) -> Simulation:
    """Prefill of `prompt_len` tokens, then gen_len - 1 decode steps (the prefill gives token 1).
    `stage` hears what is under way (for a status line), `planned` the prefill's attention plan
    before its rewrite, `progress` each decode step. With `pp` > 1 the layers split into pipeline
    stages of `chips` each (tcp_compiler.simulate_pipeline)."""
    if pp > 1:
        return simulate_pipelined(
            config, hardware, precision, batch, prompt_len, gen_len, chips or hardware.chips // pp, pp,
            micro_batches, trace_steps, progress, options, stage,
        )  # fmt: skip
    stage = stage or (lambda what: None)
    options = options or CompileOptions(batch=batch, chips=chips)
    chips = options.chips_on(hardware)
    steps = max(gen_len - 1, 0)
    # Both phases must fit: the decode step with the cache at its final length, and the prefill
    # as it will run, whose spilled activations can be the larger. The decode step is checked
    # first: it is cheap, and a prompt too long for HBM should not first be cut into key blocks.
    stage("compiling the decode step")
    decode = lower(config, hardware, precision, "decode", prompt_len, options)
    # The last step writes position prompt_len + steps - 1: its cache holds prompt_len + steps
    # positions (the last generated token is sampled, never written back).
    final_positions = prompt_len + steps
    check_positions(config, final_positions)  # the last step is costed by resizing, not building
    final = resize_graph(decode.graph, decode.graph.meta.kv_sizes(final_positions))
    decode_cap = capacity(final, decode.weight_names, hardware, options.policy)
    check_capacity(decode_cap, config.name, hardware, chips)
    stage(f"compiling the prefill ({prompt_len:,} tokens x {options.batch})")
    prefill = compile_phase(config, hardware, precision, "prefill", prompt_len, options, fits_with=decode_cap,
                            planned=planned)  # fmt: skip
    cap = larger(prefill.capacity, decode_cap)
    stage(f"simulating the prefill ({len(prefill.program):,} commands)")
    run = _run("prefill", prefill.program, hardware)
    result = Simulation(
        config, hardware, precision, chips, batch, prompt_len, gen_len, run,
        op_totals(run.program, run.timeline), cap, attention=prefill.attention,
        prefill_model_flops=prefill.model_flops,
    )  # fmt: skip
    if steps == 0:
        return result
    stage("simulating the decode steps")
    template = DecodeSteps(decode.graph, hardware, options.policy)
    cycles, flops, hbm = (np.zeros(steps, np.int64) for _ in range(3))
    totals = StepTotals()  # what adding every step's op_totals gives, summed as integers where exact
    # Step t's cache holds prompt_len + t + 1 positions (past + the new one).
    done = 0
    for block in template.blocks(range(prompt_len + 1, prompt_len + steps + 1)):
        timeline = run_block(block, hardware)
        taken = slice(done, done + len(block))
        cycles[taken] = [timeline.row(k).cycles for k in range(len(block))]
        flops[taken], hbm[taken] = block.sums("flops"), block.sums("hbm_bytes")
        totals.add_block(block, timeline)
        for k in range(min(len(block), trace_steps - done)):
            result.traced_steps.append(Run(f"decode {done + k}", block.program(k), timeline.row(k)))
        done += len(block)
        if progress is not None:
            progress(done, steps)
    result.decode_cycles, result.decode_flops, result.decode_hbm = cycles, flops, hbm
    result.decode_ops = totals.totals()
    return result


def _run(name: str, program: Program, hw: Hardware) -> Run:
    return Run(name, program, run_program(program, hw))
