"""The decode-first plan of a generation, per pipeline stage (pp = 1: one stage, the whole model).

A stage's decode step is compiled first and checked against HBM with its cache at the final
length; then its prefill, as it will run, checked beside it (whose spilled activations can be the
larger). The decode step goes first: it is cheap, and a prompt too long for HBM should not first
be cut into key blocks. Serving uses the same pieces: `stage_options` for its stages,
`decode_capacity` for its KV budget, `lower_decode` for its decode templates.
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
from tcp_compiler.pipeline import Compiled, CompileOptions, Lowered, compile_phase, larger, lower
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
    last decode step, its new position included; the prefill runs one of `micro_batches`."""
    plans = []
    for options in stages:
        s, tp = options.stage, options.chips_on(hw)
        stage = "" if s is None else f"stage {s.index} (layers {s.layers.start}-{s.layers.stop - 1})"
        where = f" of {stage}" if stage else ""
        observer.stage(f"compiling the decode step{where}")
        decode = lower_decode(config, hw, precision, options, prompt_len, observer)
        check_positions(config, final_positions)  # the last step is costed by resizing, not building
        decode_cap = decode_capacity(decode, final_positions, hw)
        what = f"{config.name} {stage} on --tp {tp}" if stage else config.name
        recipes(hw).check_capacity(decode_cap, what, hw, tp)
        batch = options.batch // micro_batches
        observer.stage(f"compiling the prefill{where} ({prompt_len:,} tokens x {batch})")
        prefill = compile_phase(config, hw, precision, "prefill", prompt_len, replace(options, batch=batch),
                                fits_with=decode_cap, observer=observer)  # fmt: skip
        plans.append(StagePlan(hw, decode, prefill, larger(prefill.capacity, decode_cap)))
    return plans
