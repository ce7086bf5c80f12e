"""The compile pipeline, assembled once: config -> graph -> passes -> attention form -> capacity ->
Program. `tcpc compile`, `tcpc simulate`, sweeps and benchmarks all call it, so the program that
`tcpc compile --emit program` prints is the one `tcpc simulate` times.

`lower` runs the named steps of LOWERING (build the graph, run the passes, leave repeating layers
out, choose a prefill's attention form, measure capacity), keeping what each step decided;
`compile_phase` adds the capacity check and the schedule; `run` times a Program on the engine
with the spec's bandwidths. One Observer hears the steps' names and the attention plan.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ir import Graph, analyze
from simulator.program import Program, ProgramBlock
from simulator.targets.rngd.spec import Hardware
from simulator.timeline import Timeline
from tcp_compiler.frontend.builder import ModelGraph, build_decode, build_prefill
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.frontend.stages import Stage
from tcp_compiler.mapping.attention import plan_attention, rewrite_attention
from tcp_compiler.mapping.capacity import Capacity, capacity, check_capacity
from tcp_compiler.mapping.layer_period import LayerPeriod, layer_period, stand_in
from tcp_compiler.mapping.policy import DEFAULT_POLICY, MappingPolicy
from tcp_compiler.mapping.replicate import replicate as replicate_layers
from tcp_compiler.mapping.schedule import schedule
from tcp_compiler.observer import QUIET, Observer
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
        return self.chips or hw.system.chips


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


@dataclass
class _Lowering:
    """One phase's lowering under way: each step of LOWERING reads what the ones before decided."""

    config: ModelConfig
    hw: Hardware
    precision: Precision
    phase: str
    length: int
    options: CompileOptions
    check: bool
    fits_with: Capacity | None
    replicate: bool
    observer: Observer
    model: ModelGraph | None = None
    graph: Graph | None = None  # the model's math, after the passes
    scheduled: Graph | None = None  # what will be scheduled when it is not `graph` (stand-in, rewrite)
    period: LayerPeriod | None = None
    attention: list[dict] = field(default_factory=list)
    model_flops: int = 0
    capacity: Capacity | None = None


def _build(s: _Lowering) -> None:
    s.model = build(s.config, s.precision, s.phase, s.length, s.options, s.options.chips_on(s.hw))
    s.graph = s.model.graph


def _passes(s: _Lowering) -> None:
    s.graph = run_passes(s.graph, observer=s.observer)
    s.model_flops = analyze(s.graph).total.flops if s.phase == "prefill" else 0


def _layer_period(s: _Lowering) -> None:
    """With `replicate`, the repeating layers left out of the graph to schedule, when they can be."""
    period = layer_period(s.graph) if s.replicate else None
    s.scheduled = stand_in(s.graph, period) if period is not None else None
    s.period = period if s.scheduled is not None else None


def _attention(s: _Lowering) -> None:
    """A prefill's attention form per layer; with `check`, a prefill that cannot fit HBM (alone,
    or beside `fits_with`) is refused first: what the rewrite does not replace already spills."""
    if s.phase != "prefill":
        return
    weights, policy = tuple(s.model.bindings), s.options.policy
    if s.check:
        replaced = frozenset().union(*(m.nodes for m in find_attention(s.graph)))
        bound = capacity(s.graph, weights, s.hw, policy, ignore=replaced)
        bound = bound if s.fits_with is None else larger(bound, s.fits_with)
        check_capacity(bound, s.config.name, s.hw, s.options.chips_on(s.hw), at_least=True)
    s.attention, tiles = plan_attention(s.graph, s.hw, policy)
    s.observer.planned(s.attention)
    s.scheduled = rewrite_attention(s.graph if s.scheduled is None else s.scheduled, tiles)


def _capacity(s: _Lowering) -> None:
    # A stand-in's spill peak is the model's: each left-out layer repeats a kept one's values and
    # lifetimes (layer_period), and values shared by all layers live to the same phase's last one.
    s.capacity = capacity(s.graph, tuple(s.model.bindings), s.hw, s.options.policy, spills=s.scheduled)


# The lowering's named steps, in order: an observer hears each name as it starts. The first three
# read nothing of the spec but the chip count, so `lower` reuses what they made (_FRONTS) across
# specs that differ in anything else: a sweep over bandwidths, clocks or memory sizes builds and
# simplifies each graph once per worker. The steps after them read the spec and always run.
LOWERING: tuple[tuple[str, Callable[[_Lowering], None]], ...] = (
    ("build", _build),
    ("passes", _passes),
    ("layer period", _layer_period),
    ("attention", _attention),
    ("capacity", _capacity),
)
SPEC_FREE_STEPS = 3  # LOWERING[:3] depend only on _front_key's parts

_FRONT_FIELDS = ("model", "graph", "scheduled", "period", "model_flops")
_FRONTS: OrderedDict[tuple, tuple] = OrderedDict()  # _front_key -> _FRONT_FIELDS' values
_FRONTS_KEPT = 8  # graphs of a large model take tens of MB each; a sweep revisits a few


def _front_key(s: _Lowering) -> tuple:
    """Everything the spec-free steps read: the model, precision, phase, length, options, the
    chips the graph is split over and whether repeating layers are left out."""
    return (s.config, s.precision, s.phase, s.length, s.options, s.options.chips_on(s.hw), s.replicate)


def _run_steps(s: _Lowering) -> None:
    key = _front_key(s)
    front = _FRONTS.get(key)
    for number, (name, step) in enumerate(LOWERING):
        s.observer.step(name)
        if number < SPEC_FREE_STEPS and front is not None:
            continue
        if number == SPEC_FREE_STEPS and front is None:
            _FRONTS[key] = front = tuple(getattr(s, f) for f in _FRONT_FIELDS)
            while len(_FRONTS) > _FRONTS_KEPT:
                _FRONTS.popitem(last=False)
        if number == SPEC_FREE_STEPS:
            _FRONTS.move_to_end(key)
            for f, v in zip(_FRONT_FIELDS, front, strict=True):
                setattr(s, f, v)
        step(s)


def lower(
    config: ModelConfig,
    hw: Hardware,
    precision: Precision,
    phase: str,
    length: int,
    options: CompileOptions = CompileOptions(),
    check: bool = False,
    fits_with: Capacity | None = None,
    replicate: bool = False,
    observer: Observer = QUIET,
) -> Lowered:
    """The LOWERING steps on one phase's graph (no schedule). With `check`, a prefill that cannot
    fit HBM (alone, or beside `fits_with`: another phase's use) is refused before the attention
    rewrite, whose cost grows with the prompt. With `replicate`, repeating layers are left out of
    the rewritten graph when they can be (`period` says so); its capacity is still the whole model's."""
    s = _Lowering(config, hw, precision, phase, length, options, check, fits_with, replicate, observer)
    _run_steps(s)
    graph = s.graph if s.scheduled is None else s.scheduled
    return Lowered(phase, s.model, graph, s.attention, s.capacity, options, s.model_flops, s.period)


def compile_phase(
    config: ModelConfig,
    hw: Hardware,
    precision: Precision,
    phase: str,
    length: int,
    options: CompileOptions = CompileOptions(),
    fits_with: Capacity | None = None,
    replicate: bool = True,
    observer: Observer = QUIET,
) -> Compiled:
    """Lowered, checked against HBM (with `fits_with`, another phase's use: the larger of each
    part must fit), and scheduled into the Program of one chip. With `replicate` (the fast path),
    repeating decoder layers are compiled once per phase of their period and copied; the program
    is the one compiling every layer gives (tests/test_layer_replication.py), and when the copies
    cannot be shown to repeat, every layer is compiled after all."""
    lowered = lower(config, hw, precision, phase, length, options, check=True, fits_with=fits_with,
                    replicate=replicate, observer=observer)  # fmt: skip
    cap = lowered.capacity if fits_with is None else larger(lowered.capacity, fits_with)
    check_capacity(cap, config.name, hw, options.chips_on(hw))
    observer.step("schedule")
    program = schedule(lowered.graph, hw, options.policy)
    if lowered.period is not None:
        full = replicate_layers(program, lowered.period, lowered.graph.meta.origins)
        if full is None:  # the stand-in's layers do not repeat as the graph's do: compile them all
            return compile_phase(config, hw, precision, phase, length, options, fits_with, False, observer)
        program = full
    return Compiled(**{f: getattr(lowered, f) for f in Lowered.__dataclass_fields__}, program=program)


def larger(a: Capacity, b: Capacity) -> Capacity:
    """Each part at the larger of two phases' use: conservative, as both must fit one after another."""
    return Capacity(max(a.weights, b.weights), max(a.kv_cache, b.kv_cache),
                    max(a.activations, b.activations), a.available)  # fmt: skip


def run_block(block: ProgramBlock, hw: Hardware) -> Timeline:
    """The timelines of a block's programs ([programs, commands] arrays), as `run` gives each."""
    from simulator.engine import simulate_block  # numba: imported when a program runs, not for --help

    return simulate_block(block, hw.hbm.sustained_bytes_per_cycle, hw.dma_bytes_per_cycle)


def run(program: Program, hw: Hardware) -> Timeline:
    """The Program's timeline on the engine, at the spec's sustained HBM and aggregate DMA rates."""
    from simulator.engine import simulate as run_engine  # numba: imported when a program runs, not for --help

    return run_engine(program, hw.hbm.sustained_bytes_per_cycle, hw.dma_bytes_per_cycle)
