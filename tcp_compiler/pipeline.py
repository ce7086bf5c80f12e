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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from ir import Graph, analyze
from simulator.program import Program, ProgramBlock
from simulator.spec import Spec
from simulator.timeline import Timeline
from tcp_compiler.frontend.builder import ModelGraph, build_decode, build_prefill
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.frontend.stages import Stage
from tcp_compiler.observer import QUIET, Observer
from tcp_compiler.passes import run_passes
from tcp_compiler.passes.online_softmax import find_attention
from tcp_compiler.recipes import Footprint, recipes


@dataclass(frozen=True)
class CompileOptions:
    """How to compile, beyond the model, hardware, precision and phase."""

    batch: int = 1
    chips: int | None = None  # tensor-parallel chips; None: the spec's
    documents: int = 0  # prefill only: documents packed per row
    stage: Stage | None = None  # a pipeline stage's layers only (None: the whole model)
    policy: Any = None  # the target's mapping policy (RNGD: MappingPolicy); None: its recipe book's default

    def chips_on(self, hw: Spec) -> int:
        return self.chips or hw.system.chips

    def policy_on(self, hw: Spec) -> Any:
        return recipes(hw).DEFAULT_POLICY if self.policy is None else self.policy


@dataclass
class Lowered:
    """A phase's graph as it will be scheduled, and what the lowering decided on the way."""

    phase: str
    model: ModelGraph  # as built (names, bindings, config)
    graph: Graph  # after the passes and the attention choice; with `period`, the stand-in's
    attention: list[dict]  # per attention: its form and why
    capacity: Footprint  # HBM per chip for this phase alone
    options: CompileOptions = field(default_factory=CompileOptions)
    # A prefill's FLOPs of the model's math (the graph before the attention rewrite; 0 for a decode
    # step, whose report has no model FLOPs). What the program executes differs: online softmax
    # rescales (more), and skips the blocks a mask hides (less).
    model_flops: int = 0
    # Set when `graph` stands in for the model with repeating layers left out: its program is
    # completed by copying them (the target's recipes: layer_period, replicate).
    period: Any | None = None

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
    hw: Spec
    precision: Precision
    phase: str
    length: int
    options: CompileOptions
    check: bool
    fits_with: Footprint | None
    replicate: bool
    observer: Observer
    model: ModelGraph | None = None
    graph: Graph | None = None  # the model's math, after the passes
    scheduled: Graph | None = None  # what will be scheduled when it is not `graph` (stand-in, rewrite)
    period: Any | None = None  # the recipe book's layer period
    attention: list[dict] = field(default_factory=list)
    model_flops: int = 0
    capacity: Footprint | None = None


def _build(s: _Lowering) -> None:
    s.model = build(s.config, s.precision, s.phase, s.length, s.options, s.options.chips_on(s.hw))
    s.graph = s.model.graph


def _passes(s: _Lowering) -> None:
    s.graph = run_passes(s.graph, observer=s.observer)
    s.model_flops = analyze(s.graph).total.flops if s.phase == "prefill" else 0


def _layer_period(s: _Lowering) -> None:
    """With `replicate`, the repeating layers left out of the graph to schedule, when they can be."""
    book = recipes(s.hw)
    period = book.layer_period(s.graph) if s.replicate else None
    s.scheduled = book.stand_in(s.graph, period) if period is not None else None
    s.period = period if s.scheduled is not None else None


def _attention(s: _Lowering) -> None:
    """A prefill's attention form per layer, and its scans' (chunked or step by step: the same
    notes), and the runs of ops that hold their activations a token tile at a time; with `check`,
    a prefill that cannot fit HBM (alone, or beside `fits_with`) is refused first: what the rewrite
    does not replace already spills."""
    if s.phase != "prefill":
        return
    if s.check:
        bound = _bound(s)
        bound = bound if s.fits_with is None else larger(bound, s.fits_with)
        recipes(s.hw).check_capacity(bound, subject(s.config, s.options), s.hw, at_least=True)
    book, policy = recipes(s.hw), s.options.policy_on(s.hw)
    s.attention, tiles = book.plan_attention(s.graph, s.hw, policy)
    scans, chunks = book.plan_scans(s.graph, s.hw, policy)
    s.attention += scans
    s.observer.planned(s.attention)
    s.scheduled = book.rewrite_attention(s.graph if s.scheduled is None else s.scheduled, tiles)
    s.scheduled = book.rewrite_scans(s.scheduled, chunks)
    tiled = book.plan_token_tiles(s.scheduled, s.hw, policy, s.period)  # held a token tile at a time
    order = {node.name: i for i, node in enumerate(s.graph.nodes)}  # the model's order
    s.attention += sorted(tiled, key=lambda note: order.get(note["op"], len(order)))


def _bound(s: _Lowering) -> Footprint:
    """A prefill's HBM use before its attention rewrite, the values the rewrite replaces left out:
    a lower bound of its use after it (the rest already spills), cheap at any length."""
    replaced = frozenset().union(*(m.nodes for m in find_attention(s.graph)))
    policy = s.options.policy_on(s.hw)
    return recipes(s.hw).capacity(s.graph, tuple(s.model.bindings), s.hw, policy, ignore=replaced)


def subject(config: ModelConfig, options: CompileOptions) -> str:
    """What a capacity message is about: the model, or one pipeline stage of it."""
    stage = options.stage
    if stage is None:
        return config.name
    return f"{config.name} stage {stage.index} (layers {stage.layers.start}-{stage.layers.stop - 1})"


def _capacity(s: _Lowering) -> None:
    # A stand-in's spill peak is the model's: each left-out layer repeats a kept one's values and
    # lifetimes (layer_period), and values shared by all layers live to the same phase's last one.
    policy = s.options.policy_on(s.hw)
    s.capacity = recipes(s.hw).capacity(s.graph, tuple(s.model.bindings), s.hw, policy, spills=s.scheduled)


# The lowering's named steps, in order: an observer hears each name as it starts. The first three
# read nothing of the spec but the chip count and its target, so `lower` reuses what they made
# (_FRONTS) across specs that differ in anything else: a sweep over bandwidths, clocks or memory
# sizes builds and simplifies each graph once per worker. The steps after them read the spec and
# always run.
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
_FRONTS_KEPT = [8]  # graphs of a large model take tens of MB each; a sweep revisits a few


@contextmanager
def keeping_fronts(kept: int) -> Iterator[None]:
    """Within it, the spec-free steps' results of up to `kept` phases are kept: a calibration
    replays the same serving runs, a few dozen shapes, for every spec it tries."""
    before, _FRONTS_KEPT[0] = _FRONTS_KEPT[0], kept
    try:
        yield
    finally:
        _FRONTS_KEPT[0] = before
        while len(_FRONTS) > before:
            _FRONTS.popitem(last=False)


def _front_key(s: _Lowering) -> tuple:
    """Everything the spec-free steps read: the model, precision, phase, length, options, the
    chips the graph is split over, whether repeating layers are left out, and the spec's class (its
    target, whose recipe book finds the layer period)."""
    return (s.config, s.precision, s.phase, s.length, s.options, s.options.chips_on(s.hw), s.replicate,
            type(s.hw))  # fmt: skip


def _front(s: _Lowering) -> None:
    """The spec-free steps (LOWERING[:SPEC_FREE_STEPS]), or what they made for the same key."""
    key = _front_key(s)
    front = _FRONTS.get(key)
    for name, step in LOWERING[:SPEC_FREE_STEPS]:
        s.observer.step(name)
        if front is None:
            step(s)
    if front is None:
        _FRONTS[key] = tuple(getattr(s, f) for f in _FRONT_FIELDS)
        while len(_FRONTS) > _FRONTS_KEPT[0]:
            _FRONTS.popitem(last=False)
        return
    _FRONTS.move_to_end(key)
    for f, v in zip(_FRONT_FIELDS, front, strict=True):
        setattr(s, f, v)


def _run_steps(s: _Lowering) -> None:
    _front(s)
    for name, step in LOWERING[SPEC_FREE_STEPS:]:
        s.observer.step(name)
        step(s)


def prefill_bound(config: ModelConfig, hw: Spec, precision: Precision, length: int,
                  options: CompileOptions = CompileOptions()) -> Footprint:  # fmt: skip
    """A prefill's HBM use before its attention rewrite (a lower bound of its use, _bound): what
    capacity checks and advice read without cutting a long prompt into key blocks."""
    s = _Lowering(config, hw, precision, "prefill", length, options, False, None, False, QUIET)
    _front(s)
    return _bound(s)


def lower(
    config: ModelConfig,
    hw: Spec,
    precision: Precision,
    phase: str,
    length: int,
    options: CompileOptions = CompileOptions(),
    check: bool = False,
    fits_with: Footprint | None = None,
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
    hw: Spec,
    precision: Precision,
    phase: str,
    length: int,
    options: CompileOptions = CompileOptions(),
    fits_with: Footprint | None = None,
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
    book = recipes(hw)
    book.check_capacity(cap, subject(config, options), hw)
    observer.step("schedule")
    program = book.schedule(lowered.graph, hw, options.policy_on(hw))
    if lowered.period is not None:
        full = book.replicate(program, lowered.period, lowered.graph.meta.origins)
        if full is None:  # the stand-in's layers do not repeat as the graph's do: compile them all
            return compile_phase(config, hw, precision, phase, length, options, fits_with, False, observer)
        program = full
    return Compiled(**{f: getattr(lowered, f) for f in Lowered.__dataclass_fields__}, program=program)


def larger(a: Footprint, b: Footprint) -> Footprint:
    """Each part at the larger of two phases' use: conservative, as both must fit one after another."""
    return replace(a, weights=max(a.weights, b.weights), kv_cache=max(a.kv_cache, b.kv_cache),
                   activations=max(a.activations, b.activations))  # fmt: skip


def run_block(block: ProgramBlock, hw: Spec) -> Timeline:
    """The timelines of a block's programs ([programs, commands] arrays), as `run` gives each."""
    from simulator.engine import simulate_block  # numba: imported when a program runs, not for --help

    return simulate_block(block, hw.hbm.sustained_bytes_per_cycle, hw.dma_bytes_per_cycle)


def run(program: Program, hw: Spec) -> Timeline:
    """The Program's timeline on the engine, at the spec's sustained HBM and aggregate DMA rates."""
    from simulator.engine import simulate as run_engine  # numba: imported when a program runs, not for --help

    return run_engine(program, hw.hbm.sustained_bytes_per_cycle, hw.dma_bytes_per_cycle)
