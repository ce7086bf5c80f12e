"""The compile pipeline, assembled once: config -> graph -> passes -> attention form -> capacity ->
Program. `tcpc compile`, `tcpc simulate`, sweeps and benchmarks all call it, so the program that
`tcpc compile --emit program` prints is the one `tcpc simulate` times.

`lower` builds the graph, runs the passes, chooses the attention form (prefill) and measures
capacity, keeping what each step decided; `compile_phase` adds the capacity check and the
schedule; `run` times a Program on the engine with the spec's bandwidths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ir import Graph, analyze
from simulator.hardware import Hardware
from simulator.program import Program, ProgramBlock
from simulator.timeline import Timeline
from tcp_compiler.frontend.build import ModelGraph, build_decode, build_prefill
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.frontend.stages import Stage
from tcp_compiler.mapping.attention import plan_attention, rewrite_attention
from tcp_compiler.mapping.capacity import Capacity, capacity, check_capacity
from tcp_compiler.mapping.layer_period import LayerPeriod, layer_period, stand_in
from tcp_compiler.mapping.policy import DEFAULT_POLICY, MappingPolicy
from tcp_compiler.mapping.replicate import replicate as replicate_layers
from tcp_compiler.mapping.schedule import schedule
from tcp_compiler.passes import run_passes
from tcp_compiler.passes.online_softmax import find_attention


@dataclass(frozen=True)
class CompileOptions:
    """How to compile, beyond the model, hardware, precision and phase."""

    batch: int = 1
    chips: int | None = None  # tensor-parallel chips; None: the spec's
    documents: int = 0  # prefill only: documents packed per row
    stage: Stage | None = None  # a pipeline stage's layers only (None: the whole model)
    policy: MappingPolicy = DEFAULT_POLICY

    def chips_on(self, hw: Hardware) -> int:
        return self.chips or hw.chips


@dataclass
class Lowered:
    """A phase's graph as it will be scheduled, and what the lowering decided on the way."""

    phase: str
    model: ModelGraph  # as built (names, bindings, config)
    graph: Graph  # after the passes and the attention choice; with `period`, the stand-in's
    attention: list[dict]  # per attention: its form and why
    capacity: Capacity  # HBM per chip for this phase alone
    options: CompileOptions = field(default_factory=CompileOptions)
    # A prefill's FLOPs of the model's math (the graph before the attention rewrite; 0 for a decode
    # step, whose report has no model FLOPs). What the program executes differs: online softmax
    # rescales (more), and skips the blocks a mask hides (less).
    model_flops: int = 0
    # Set when `graph` stands in for the model with repeating layers left out: its program is
    # completed by copying them (tcp_compiler.mapping.layer_period and replicate).
    period: LayerPeriod | None = None

    @property
    def weight_names(self) -> tuple[str, ...]:
        """The params that hold weights (checkpoint tensors and computed tables)."""
        return tuple(self.model.bindings)


@dataclass
class Compiled(Lowered):
    program: Program | None = None


def build(config: ModelConfig, precision: Precision, phase: str, length: int, options: CompileOptions,
          chips: int) -> ModelGraph:  # fmt: skip
    """The model graph of one phase: `length` is the prompt (prefill) or the cached tokens (decode)."""
    if phase == "prefill":
        return build_prefill(
            config, precision, options.batch, length, chips=chips, documents=options.documents,
            stage=options.stage,
        )  # fmt: skip
    return build_decode(config, precision, options.batch, length, chips=chips, stage=options.stage)


def lower(
    config: ModelConfig,
    hw: Hardware,
    precision: Precision,
    phase: str,
    length: int,
    options: CompileOptions = CompileOptions(),
    check: bool = False,
    fits_with: Capacity | None = None,
    planned: Callable[[list[dict]], None] | None = None,
    replicate: bool = False,
) -> Lowered:
    """The LOWERING steps on one phase's graph (no schedule). With `check`, a prefill that cannot
    fit HBM (alone, or beside `fits_with`: another phase's use) is refused before the attention
    rewrite, whose cost grows with the prompt: what it does not replace already spills that much.
    With `replicate`, repeating layers are left out of the rewritten graph when they can be
    (`period` says so); its capacity is still the whole model's."""
    model = build(config, precision, phase, length, options, options.chips_on(hw))
    graph = run_passes(model.graph)
    model_flops = analyze(graph).total.flops if phase == "prefill" else 0
    attention: list[dict] = []
    weights = tuple(model.bindings)
    period = layer_period(graph) if replicate else None
    lowered = stand_in(graph, period) if period is not None else None
    if lowered is None:
        period = None
    if phase == "prefill":
        if check:
            replaced = frozenset().union(*(m.nodes for m in find_attention(graph)))
            bound = capacity(graph, weights, hw, options.policy, ignore=replaced)
            bound = bound if fits_with is None else larger(bound, fits_with)
            check_capacity(bound, config.name, hw, options.chips_on(hw), at_least=True)
        attention, tiles = plan_attention(graph, hw, options.policy)
        if planned is not None:
            planned(attention)
        lowered = rewrite_attention(graph if lowered is None else lowered, tiles)
    if lowered is None:
        cap = capacity(graph, weights, hw, options.policy)
        return Lowered(phase, model, graph, attention, cap, options, model_flops)
    # The stand-in's spill peak is the model's: each left-out layer repeats a kept one's values and
    # lifetimes (layer_period), and values shared by all layers live to the same phase's last one.
    cap = capacity(graph, weights, hw, options.policy, spills=lowered)
    return Lowered(phase, model, lowered, attention, cap, options, model_flops, period)


def compile_phase(
    config: ModelConfig,
    hw: Hardware,
    precision: Precision,
    phase: str,
    length: int,
    options: CompileOptions = CompileOptions(),
    fits_with: Capacity | None = None,
    planned: Callable[[list[dict]], None] | None = None,
    replicate: bool = True,
) -> Compiled:
    """Lowered, checked against HBM (with `fits_with`, another phase's use: the larger of each
    part must fit), and scheduled into the Program of one chip. With `replicate` (the fast path),
    repeating decoder layers are compiled once per phase of their period and copied; the program
    is the one compiling every layer gives (tests/test_layer_replication.py), and when the copies
    cannot be shown to repeat, every layer is compiled after all."""
    lowered = lower(config, hw, precision, phase, length, options, check=True, fits_with=fits_with,
                    planned=planned, replicate=replicate)  # fmt: skip
    cap = lowered.capacity if fits_with is None else larger(lowered.capacity, fits_with)
    check_capacity(cap, config.name, hw, options.chips_on(hw))
    program = schedule(lowered.graph, hw, options.policy)
    if lowered.period is not None:
        full = replicate_layers(program, lowered.period)
        if full is None:  # the stand-in's layers do not repeat as the graph's do: compile them all
            return compile_phase(config, hw, precision, phase, length, options, fits_with, replicate=False)
        program = full
    return Compiled(**{f: getattr(lowered, f) for f in Lowered.__dataclass_fields__}, program=program)


def larger(a: Capacity, b: Capacity) -> Capacity:
    """Each part at the larger of two phases' use: conservative, as both must fit one after another."""
    return Capacity(max(a.weights, b.weights), max(a.kv_cache, b.kv_cache),
                    max(a.activations, b.activations), a.available)  # fmt: skip


def run_block(block: ProgramBlock, hw: Hardware) -> Timeline:
    """The timelines of a block's programs ([programs, commands] arrays), as `run` gives each."""
    from simulator.engine import simulate_block  # numba: imported when a program runs, not for --help

    return simulate_block(block, hw.hbm_sustained_bytes_per_cycle, hw.dma_bytes_per_cycle)


def run(program: Program, hw: Hardware) -> Timeline:
    """The Program's timeline on the engine, at the spec's sustained HBM and aggregate DMA rates."""
    from simulator.engine import simulate as run_engine  # numba: imported when a program runs, not for --help

    return run_engine(program, hw.hbm_sustained_bytes_per_cycle, hw.dma_bytes_per_cycle)
