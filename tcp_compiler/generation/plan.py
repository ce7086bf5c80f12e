"""The decode-first plan of a generation, per pipeline stage (pp = 1: one stage, the whole model).

A stage's decode step is lowered first, its cache costed at the final length, and checked
against HBM beside its prefill's spilled activations before the prefill's attention rewrite
(`needs`: every part counted by one function, `footprint`, whichever is too large); then the
prefill is compiled as it will run and checked again with its exact activations. Both checks come
before any key block is cut, so a prompt too long for HBM is refused cheaply. Serving uses the
same pieces: `stage_options` for its stages, `decode_capacity` and `footprint` for its KV budget,
`lower_decode` for its decode templates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from simulator.spec import Spec
from tcp_compiler.errors import OptionError
from tcp_compiler.frontend.builder import check_positions
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.frontend.stages import pipeline_stages
from tcp_compiler.observer import QUIET, Observer
from tcp_compiler.pipeline import (
    Compiled,
    CompileOptions,
    Lowered,
    compile_phase,
    larger,
    lower,
    prefill_bound,
    subject,
)
from tcp_compiler.recipes import Footprint, Steps, recipes


def stage_options(config: ModelConfig, options: CompileOptions, pp: int) -> list[CompileOptions]:
    """The compile options of each pipeline stage; pp = 1 is one stage, the whole model."""
    if pp == 1:
        return [options]
    return [replace(options, stage=s) for s in pipeline_stages(config, pp)]


def default_micro_batches(batch: int, pp: int) -> int:
    """As many micro-batches as stages (fewer leave a stage idle), of equal size: the largest
    divisor of the batch that is at most pp."""
    return max(d for d in range(1, min(batch, pp) + 1) if batch % d == 0)


def check_micro_batches(batch: int, micro_batches: int) -> None:
    if micro_batches < 1 or batch % micro_batches:
        raise OptionError("{micro_batches} {value} must divide the batch ({sequences})", value=micro_batches,
                          sequences=batch)  # fmt: skip


def lower_decode(
    config: ModelConfig, hw: Spec, precision: Precision, options: CompileOptions, past: int,
    observer: Observer = QUIET,
) -> Lowered:  # fmt: skip
    """The decode step's graph with `past` cached positions: the template of every later length."""
    return lower(config, hw, precision, "decode", past, options, observer=observer)


def decode_capacity(decode: Lowered, positions: int, hw: Spec) -> Footprint:
    """HBM use of the decode step whose cache holds `positions`, costed by resizing the graph."""
    book = recipes(hw)
    graph = book.resize_graph(decode.graph, decode.graph.meta.kv_sizes(positions))
    return book.capacity(graph, decode.weight_names, hw, decode.options.policy_on(hw))


def state_bytes(config: ModelConfig, precision: Precision, options: CompileOptions, hw: Spec) -> int:
    """Cache bytes one sequence holds whatever its length, on one chip of the stage `options` run
    (the whole model without one): its Mamba layers' recurrent states and convolution windows,
    split over the tensor-parallel chips as their channels are (RWKV's token shifts whole on each),
    kept in the KV dtype (a KV cache grows per token beside it)."""
    layers = None if options.stage is None else options.stage.layers
    return config.state_elements(layers, options.chips_on(hw)) * precision.kv.bits // 8


def footprint(decode: Footprint, prefill: Footprint) -> Footprint:
    """HBM per chip of a generation, the one accounting simulate checks and serve budgets: the
    weights (each phase's tables sized by its positions: the larger), the decode step's KV cache
    (at the length it is costed for) and the larger of the phases' spilled activations, all held at
    once (the prefill's activations beside the cache the decode steps fill)."""
    return larger(decode, prefill)


def needs(config: ModelConfig, hw: Spec, precision: Precision, options: CompileOptions, prompt_len: int,
          final_positions: int, prefill_batch: int,
          observer: Observer = QUIET) -> tuple[Lowered, Footprint, Footprint]:  # fmt: skip
    """A stage's decode step (lowered at the prompt), its use with the cache at `final_positions`,
    and the generation's footprint with the prefill of `prefill_batch` sequences, whose activations
    are bounded before the attention rewrite (cheap at any length: no key block is cut)."""
    decode = lower_decode(config, hw, precision, options, prompt_len, observer)
    check_positions(config, final_positions)  # the last step is costed by resizing, not building
    decode_cap = decode_capacity(decode, final_positions, hw)
    bound = prefill_bound(config, hw, precision, prompt_len, replace(options, batch=prefill_batch))
    return decode, decode_cap, footprint(decode_cap, bound)


@dataclass
class StagePlan:
    """A stage's decode step (its template) and prefill (one micro-batch), compiled and checked."""

    hw: Spec
    decode: Lowered
    prefill: Compiled
    capacity: Footprint  # each part at the larger of the prefill's and the last decode step's

    @cached_property
    def steps(self) -> Steps:
        """Programs of the decode step at any length (compiled when first asked for)."""
        hw, decode = self.hw, self.decode
        return recipes(hw).DecodeSteps(decode.graph, hw, decode.options.policy_on(hw))


def plan_stages(
    config: ModelConfig, hw: Spec, precision: Precision, prompt_len: int, final_positions: int,
    stages: Sequence[CompileOptions], micro_batches: int = 1, observer: Observer = QUIET,
) -> list[StagePlan]:  # fmt: skip
    """Each stage planned decode first (module docstring); `final_positions`: the cache of the
    last decode step, its new position included; the prefill runs one of `micro_batches`. Every
    stage is checked before any is compiled."""
    batch = stages[0].batch // micro_batches
    planned = []
    for options in stages:
        s = options.stage
        where = "" if s is None else f" of stage {s.index} (layers {s.layers.start}-{s.layers.stop - 1})"
        observer.stage(f"compiling the decode step{where}")
        decode, decode_cap, need = needs(config, hw, precision, options, prompt_len, final_positions, batch,
                                         observer)  # fmt: skip
        recipes(hw).check_capacity(need, subject(config, options), hw, at_least=True)
        planned.append((options, decode, decode_cap, where))
    plans = []
    for options, decode, decode_cap, where in planned:
        observer.stage(f"compiling the prefill{where} ({prompt_len:,} tokens x {batch})")
        prefill = compile_phase(config, hw, precision, "prefill", prompt_len, replace(options, batch=batch),
                                fits_with=decode_cap, observer=observer)  # fmt: skip
        plans.append(StagePlan(hw, decode, prefill, footprint(decode_cap, prefill.capacity)))
    return plans
