"""Simulating a generation: prefill once, then every decode step at its own KV length.

The generation driver (tcp_compiler.generation) plans each pipeline stage decode first, then the
engine (simulator.engine) times the prefill and every decode step. With `pp` stages of `chips`
each, the stages run joined into one program over their chips (the target's recipes: chain),
so bubbles, activation sends and the overlap of micro-batches are the engine's timing, not a
formula: the prefill splits the batch into micro-batches that follow each other through the
stages (GPipe's schedule for a forward pass); a decode step sends the whole batch through the
stages in turn (the serving simulation's iterations do the same). One stage (pp = 1) is the
degenerate pipeline. Per-op and per-unit figures are summed over all steps and stages' chips.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import reduce

import numpy as np

from simulator.report import OpTotals, op_totals
from simulator.spec import Spec
from tcp_compiler.errors import CapacityError, OptionError
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.generation.decode import Run, run_decode
from tcp_compiler.generation.figures import PipelineFigures, stage_figures
from tcp_compiler.generation.fit import Asked, with_ways_out
from tcp_compiler.generation.plan import (
    check_micro_batches,
    default_micro_batches,
    plan_stages,
    stage_options,
    state_bytes,
)
from tcp_compiler.observer import QUIET, Observer
from tcp_compiler.pipeline import CompileOptions, larger
from tcp_compiler.pipeline import run as run_program
from tcp_compiler.recipes import Footprint, recipes
from tcp_compiler.serve.options import BLOCK_SIZE, Shapes
from tcp_compiler.serve.static_costs import StaticCosts, static_costs


@dataclass
class Simulation:
    config: ModelConfig
    hardware: Spec
    precision: Precision
    chips: int
    batch: int
    prompt_len: int
    gen_len: int
    prefill: Run
    prefill_ops: OpTotals
    capacity: Footprint
    decode_cycles: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    decode_flops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    decode_hbm: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    decode_ops: OpTotals | None = None  # summed over every step
    traced_steps: list[Run] = field(default_factory=list)  # the first few steps, for traces
    attention: list[dict] = field(default_factory=list)  # the prefill's attention form per layer, and why
    attention_layers: dict[str, int] = field(default_factory=dict)  # each note's op -> its layer (graph.meta)
    prefill_model_flops: int = 0  # the model's math; the prefill program executes prefill.program.flops
    # Pipeline parallelism: `chips` is then each stage's tensor-parallel group, and the programs
    # run the stages on chips 0..pp-1.
    pipeline: PipelineFigures | None = None
    prefill_chunks: int | None = None  # with a prefill chunk: the programs the prefill runs in turn
    state_bytes_per_sequence: int = 0  # cache a sequence holds at any length, per chip (Mamba layers)
    runtime: StaticCosts | None = None  # what the serving runtime adds: shape padding, KV descriptors

    @property
    def stages(self) -> int:
        return self.pipeline.pp if self.pipeline else 1


def prefill_chunks(batch: int, prompt_len: int, chunk: int) -> int:
    """How many chunks a prefill of `batch` prompts runs in, each of at most `chunk` tokens: whole
    prompts, as many per chunk as fit and divide the batch (each chunk is one prefill program of
    those sequences, run in turn: its activations are the chunk's, and each reads the weights
    again). A chunk shorter than a prompt, which serving runs by difference of prefills
    (serve.costs), is an OptionError: a generation's report is of the programs it runs."""
    if chunk < prompt_len:
        raise OptionError("{prefill_chunk} {value:,} is shorter than the prompt ({prompt_len} {prompt:,}): "
                          "chunks hold whole prompts", value=chunk, prompt=prompt_len)  # fmt: skip
    per_chunk = max(d for d in range(1, min(batch, chunk // prompt_len) + 1) if batch % d == 0)
    return batch // per_chunk


def simulate_generation(
    config: ModelConfig,
    hardware: Spec,
    precision: Precision,
    batch: int,
    prompt_len: int,
    gen_len: int,
    chips: int | None = None,
    trace_steps: int = 2,
    options: CompileOptions | None = None,
    pp: int = 1,
    micro_batches: int | None = None,
    observer: Observer = QUIET,
    prefill_chunk: int | None = None,
    advise: bool = False,
    shapes: Shapes | None = None,
    block_size: int = BLOCK_SIZE,
) -> Simulation:
    """Prefill of `prompt_len` tokens, then gen_len - 1 decode steps (the prefill gives token 1),
    the first `trace_steps` of them kept for traces. With `pp` > 1 the layers split into pipeline
    stages of `chips` each (default: the spec's chips over pp). With `prefill_chunk`, the prefill
    runs in chunks of at most that many prompt tokens (prefill_chunks). A run that does not fit HBM
    is a CapacityError with the figures; with `advise`, also what would fit (generation.fit: a few
    more lowerings, which a sweep's failed points need not pay for). The observer hears what is under way,
    each prefill's attention plan before its rewrite, and the decode steps done. The serving
    runtime's costs around the programs (serve.static_costs: padding up to `shapes`, default the
    runtime's as `tcpc serve` has them, and paged-KV descriptors of `block_size` tokens) are in
    `runtime`."""
    options = options or CompileOptions(batch=batch, chips=chips)
    if pp > 1:
        tp = chips or hardware.system.chips // pp
        if tp * pp > hardware.system.chips:
            raise OptionError(
                "{tp} {tp_value} x {pp} {pp_value} needs {chips} chips but '{hw}' has {has}",
                tp_value=tp, pp_value=pp, chips=tp * pp, hw=hardware.name, has=hardware.system.chips,
            )  # fmt: skip
        options = replace(options, chips=tp, batch=batch)
    if prefill_chunk is not None:
        if micro_batches is not None:
            raise OptionError("{prefill_chunk} sets the prefill's chunks: give no {micro_batches} with it")
        micro_batches = prefill_chunks(batch, prompt_len, prefill_chunk)
    micro_batches = micro_batches or default_micro_batches(batch, pp)
    check_micro_batches(batch, micro_batches)
    steps = max(gen_len - 1, 0)
    # Step t's cache holds prompt_len + t + 1 positions (past + the new one); the last generated
    # token is sampled, never written back.
    lengths = range(prompt_len + 1, prompt_len + steps + 1)
    try:
        plans = plan_stages(config, hardware, precision, prompt_len, prompt_len + steps,
                            stage_options(config, options, pp), micro_batches, observer)  # fmt: skip
    except CapacityError as e:
        if not advise:
            raise
        asked = Asked(config, hardware, precision, batch, prompt_len, prompt_len + steps,
                      options.chips_on(hardware), pp, batch // micro_batches)  # fmt: skip
        raise with_ways_out(e, asked) from None
    received = [p.prefill.graph.meta.received for p in plans]
    book = recipes(hardware)
    program = book.chain([p.prefill.program for p in plans], book.micro_batched(pp, micro_batches), received)
    observer.stage(f"simulating the prefill ({len(program):,} commands)")
    run = Run("prefill", program, run_program(program, hardware))
    pipeline = None
    if pp > 1:
        pipeline = PipelineFigures(options.chips_on(hardware), pp, micro_batches,
                                   stage_figures(plans, hardware, prompt_len))  # fmt: skip
    result = Simulation(
        config, hardware, precision, options.chips_on(hardware), batch, prompt_len, gen_len, run,
        op_totals(program, run.timeline), reduce(larger, [p.capacity for p in plans]),
        attention=[note for p in plans for note in p.prefill.attention],
        attention_layers={note["op"]: p.prefill.graph.meta.layer_of(note["op"])
                          for p in plans for note in p.prefill.attention},
        prefill_model_flops=sum(p.prefill.model_flops for p in plans) * micro_batches, pipeline=pipeline,
        prefill_chunks=micro_batches if prefill_chunk is not None else None,
        state_bytes_per_sequence=max(state_bytes(config, precision, p.decode.options, hardware)
                                     for p in plans),  # fmt: skip
    )  # fmt: skip
    if steps:
        observer.stage("simulating the decode steps")
        decode = run_decode([p.steps for p in plans], hardware, lengths, trace_steps, observer)
        result.decode_cycles, result.decode_flops, result.decode_hbm = decode.cycles, decode.flops, decode.hbm
        result.decode_ops, result.traced_steps = decode.totals, decode.traced
    observer.stage("timing the runtime's static shapes and KV descriptors")
    runs = micro_batches if prefill_chunk is not None else 1
    result.runtime = static_costs(config, hardware, precision, options, pp, shapes or Shapes(), block_size,
                                  [p.decode for p in plans], (runs, batch // runs, prompt_len), lengths,
                                  result.decode_cycles)  # fmt: skip
    return result
