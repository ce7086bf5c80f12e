"""Simulating a generation on tp x pp chips: pipeline stages of layers, each a tensor-parallel group.

Each stage compiles as its own graph (tcp_compiler.frontend.stages) and the engine runs the
stages joined into one program over their chips (tcp_compiler.mapping.stage_chain), so the
bubbles, the activation sends and the overlap of micro-batches are the engine's timing, not a
formula. The prefill splits the batch into micro-batches that follow each other through the
stages (GPipe's schedule for a forward pass); a decode step sends the whole batch through the
stages in turn, so at batch sizes where one step cannot fill the pipeline the stages wait on each
other (the serving simulation's steps do the same). Per-op and per-unit totals add up over the
stages' chips.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import reduce

import numpy as np

from simulator.hardware import Hardware
from simulator.program import Program
from simulator.report import OpTotals, op_totals
from simulator.step_totals import StepTotals
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.build import check_positions
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.frontend.stages import Stage, pipeline_stages
from tcp_compiler.mapping.capacity import Capacity, capacity, check_capacity
from tcp_compiler.mapping.stage_chain import Block, chain
from tcp_compiler.mapping.steps import DecodeSteps, resize_graph
from tcp_compiler.pipeline import CompileOptions, compile_phase, larger, lower
from tcp_compiler.pipeline import run as run_program


@dataclass(frozen=True)
class StageFigures:
    """One pipeline stage: its layers, its chips' HBM use, and its work timed alone."""

    index: int
    first_layer: int
    last_layer: int
    weights_bytes: int
    kv_cache_bytes: int
    prefill_cycles: int  # one micro-batch's prefill on this stage alone
    decode_cycles: int  # the first decode step on this stage alone
    prefill_work: tuple[int, int, int]  # one micro-batch's FLOPs, HBM bytes and link bytes per chip


@dataclass(frozen=True)
class PipelineFigures:
    tp: int
    pp: int
    micro_batches: int
    stages: tuple[StageFigures, ...]

    @property
    def chips(self) -> int:
        return self.tp * self.pp


def default_micro_batches(batch: int, pp: int) -> int:
    """As many micro-batches as stages (fewer leave a stage idle), of equal size: the largest
    divisor of the batch that is at most pp."""
    return max(d for d in range(1, min(batch, pp) + 1) if batch % d == 0)


def check_micro_batches(batch: int, micro_batches: int) -> None:
    if micro_batches < 1 or batch % micro_batches:
        raise CliError(f"--micro-batches {micro_batches} must divide the batch ({batch})")


@dataclass
class StagePlan:
    """A stage's compiled prefill (one micro-batch) and decode template."""

    stage: Stage
    prefill: Program
    decode: DecodeSteps
    capacity: Capacity
    attention: list[dict]
    model_flops: int


def plan_stages(
    config: ModelConfig, hw: Hardware, precision: Precision, batch: int, prompt_len: int, gen_len: int,
    tp: int, pp: int, micro_batches: int, options: CompileOptions, stage: Callable[[str], None],
) -> list[StagePlan]:  # fmt: skip
    """Every stage compiled and checked against HBM, decode first (as simulate_generation does)."""
    steps = max(gen_len - 1, 0)
    check_positions(config, prompt_len + steps)
    plans = []
    for s in pipeline_stages(config, pp):
        what = f"{config.name} stage {s.index} (layers {s.layers.start}-{s.layers.stop - 1}) on --tp {tp}"
        stage(f"compiling {what}")
        opts = replace(options, chips=tp, stage=s, batch=batch)
        decode = lower(config, hw, precision, "decode", prompt_len, opts)
        final = resize_graph(decode.graph, decode.graph.meta.kv_sizes(prompt_len + steps))
        decode_cap = capacity(final, decode.weight_names, hw, opts.policy)
        check_capacity(decode_cap, what, hw, tp)
        prefill = compile_phase(
            config, hw, precision, "prefill", prompt_len, replace(opts, batch=batch // micro_batches),
            fits_with=decode_cap,
        )  # fmt: skip
        plans.append(
            StagePlan(s, prefill.program, DecodeSteps(decode.graph, hw, opts.policy),
                      larger(prefill.capacity, decode_cap), prefill.attention, prefill.model_flops)
        )  # fmt: skip
    return plans


def pipeline_prefill(plans: list[StagePlan], micro_batches: int) -> Program:
    """Micro-batch j of stage s receives from micro-batch j of stage s - 1."""
    pp = len(plans)
    blocks = [
        Block(s, j * pp + s - 1 if s else None) for j in range(micro_batches) for s in range(pp)
    ]  # fmt: skip
    return chain([p.prefill for p in plans], blocks)


def pipeline_step(programs: list[Program]) -> Program:
    """One step (a decode, or a serving iteration's piece): the batch through the stages in turn;
    one stage's program is itself."""
    if len(programs) == 1:
        return programs[0]
    return chain(programs, [Block(s, s - 1 if s else None) for s in range(len(programs))])


def stage_figures(plans: list[StagePlan], hw: Hardware, prompt_len: int) -> tuple[StageFigures, ...]:
    return tuple(
        StageFigures(
            p.stage.index, p.stage.layers.start, p.stage.layers.stop - 1, p.capacity.weights,
            p.capacity.kv_cache, run_program(p.prefill, hw).cycles,
            run_program(p.decode.at(prompt_len + 1), hw).cycles,
            (int(p.prefill.flops.sum()), int(p.prefill.hbm_bytes.sum()), int(p.prefill.link_bytes.sum())),
        )  # fmt: skip
        for p in plans
    )


def decode_runs(
    plans: list[StagePlan], hw: Hardware, prompt_len: int, steps: int,
    progress: Callable[[int, int], None] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, OpTotals | None, list]:  # fmt: skip
    """Every decode step's cycles, FLOPs and HBM bytes (over all stages), the summed op totals and
    the first steps' (program, timeline) pairs."""
    cycles, flops, hbm = (np.zeros(steps, np.int64) for _ in range(3))
    totals = StepTotals()
    first = []
    lengths = range(prompt_len + 1, prompt_len + steps + 1)  # each step's cache, its new position included
    for t, stage_programs in enumerate(zip(*(p.decode.programs(lengths) for p in plans), strict=True)):
        program = pipeline_step(list(stage_programs))
        timeline = run_program(program, hw)
        cycles[t], flops[t], hbm[t] = timeline.cycles, program.flops.sum(), program.hbm_bytes.sum()
        totals.add(program, timeline)
        if t < 2:
            first.append((program, timeline))
        if progress is not None:
            progress(t + 1, steps)
    return cycles, flops, hbm, totals.totals(), first


def simulate_pipelined(
    config: ModelConfig, hardware: Hardware, precision: Precision, batch: int, prompt_len: int,
    gen_len: int, tp: int, pp: int, micro_batches: int | None = None, trace_steps: int = 2,
    progress: Callable[[int, int], None] | None = None, options: CompileOptions | None = None,
    stage: Callable[[str], None] | None = None,
):  # fmt: skip
    """simulate_generation over tp x pp chips (see the module docstring)."""
    from tcp_compiler.simulate import Run, Simulation  # the Simulation this fills; it imports us

    stage = stage or (lambda what: None)
    if tp * pp > hardware.chips:
        raise CliError(
            f"--tp {tp} x --pp {pp} needs {tp * pp} chips but '{hardware.name}' has {hardware.chips}"
        )
    micro_batches = micro_batches or default_micro_batches(batch, pp)
    check_micro_batches(batch, micro_batches)
    options = options or CompileOptions(batch=batch)
    plans = plan_stages(config, hardware, precision, batch, prompt_len, gen_len, tp, pp, micro_batches,
                        options, stage)  # fmt: skip
    stage(f"simulating the prefill ({pp} stages x {micro_batches} micro-batches)")
    program = pipeline_prefill(plans, micro_batches)
    run = Run("prefill", program, run_program(program, hardware))
    result = Simulation(
        config, hardware, precision, tp, batch, prompt_len, gen_len, run, op_totals(program, run.timeline),
        reduce(larger, [p.capacity for p in plans]), attention=[n for p in plans for n in p.attention],
        prefill_model_flops=sum(p.model_flops for p in plans) * micro_batches,
        pipeline=PipelineFigures(tp, pp, micro_batches, stage_figures(plans, hardware, prompt_len)),
    )  # fmt: skip
    steps = max(gen_len - 1, 0)
    if steps:
        stage("simulating the decode steps")
        cycles, flops, hbm, totals, first = decode_runs(plans, hardware, prompt_len, steps, progress)
        result.decode_cycles, result.decode_flops, result.decode_hbm = cycles, flops, hbm
        result.decode_ops = totals
        result.traced_steps = [Run(f"decode {t}", p, tl) for t, (p, tl) in enumerate(first[:trace_steps])]
    return result
