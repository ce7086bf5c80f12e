"""What one serving iteration costs, from tcpc's own compiler and cycle-counting engine.

An iteration runs decodes (one token per sequence, each at its own KV length) and prefill chunks
(C new tokens after P cached ones). Each piece is a compiled Program timed by the engine:

- decodes: the decode graph at batch B (a template per B, the target's DecodeSteps patches it
  per KV length). The graph has one KV length for the batch. `paged` (default) gives it the
  batch's mean length, so the KV bytes and attention FLOPs are the sum of the sequences' own
  lengths, as a paged-attention kernel reads them; `padded` gives it the longest, as a kernel over
  a padded cache does.
- fresh prefill chunks (P = 0): the prefill graph of one row of all their tokens, flattened as
  vLLM runs them. Its causal mask spans the whole row, so attention is charged over the sum of
  the chunks rather than each alone (a packed-document mask, whose segment ids are run-time
  inputs, could not skip more blocks either); the projections and MLP, which dominate short
  prompts, are exact.
- chunks that continue a prompt (P > 0): the builder has no prefill over a past cache, so such a
  chunk costs prefill(P + C) - prefill(P): the same compiled graphs' difference, which holds the
  chunk's projections and MLP for C tokens and its attention over P + C keys, with the weights
  read once in each and so cancelled (the iteration's other program reads them).

The pieces of a mixed iteration run back to back (their cycles add): conservative by one read of
the weights per extra piece, which the report counts (`mixed_iterations`). With pipeline stages,
each piece is the stages' programs joined as `tcpc simulate --pp` joins a decode step's
(the target's recipes: chain), timed by the engine in one run: the cost keeps when each
stage hands the piece on, which the server needs to overlap the iterations of its engines.

The runtime's static shapes (Shapes) pad an iteration up to the buckets its graphs were compiled
for: the decode batch and context length, the prefill's tokens; the padded work is what runs, and
`Piece.padding_cycles` is how much of it the padding costs. A decode step reads each sequence's
paged KV as one DMA descriptor per block (block_size tokens, all of a chip's KV heads of a layer,
K and V apart: kv_descriptors), where the compiled decode graph reads the cache as one command per
tensor. The descriptors are independent moves in the engine's DMA pool: their start-ups overlap
each other and the transfers (one start-up per step, the compiled step's own), and they share the
pool's bandwidth, which the compiled step already spends on the same bytes. What they add is the
engines' issue time where it outlasts that transfer (kv_issue_cycles, `Piece.descriptor_cycles`).

Costs are cached by shape. Shapes may be put on grids (Buckets: powers of two up to a step, then
multiples of it) for batch, KV length and prefill tokens: between grid points the cost is
interpolated linearly between the engine's exact costs. Step 1 is exact. The error each grid
introduces is measured (bucket_error, benchmarks/serve_speed.py) and reported in docs/serving.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from simulator.energy import Work
from simulator.program import Program
from simulator.spec import Spec
from simulator.targets import energy_of
from tcp_compiler.frontend.builder import check_positions
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.generation.plan import decode_capacity, lower_decode, stage_options
from tcp_compiler.pipeline import CompileOptions, Lowered, compile_phase
from tcp_compiler.pipeline import run as run_program
from tcp_compiler.recipes import Steps, recipes
from tcp_compiler.serve.options import ATTENTION_MODES, BLOCK_SIZE, Buckets, Shapes, pad


@dataclass(frozen=True)
class Cost:
    """An iteration piece timed by the engine: `handoffs[k]`, when pipeline stage k has done its
    part, in cycles from the start (the stages' programs joined by the target's `chain`;
    the last is the piece's cycles, and one stage has just that), and the work timed: FLOPs and
    HBM bytes of one chip per stage. Pieces add stage by stage: each stage runs both parts before
    it hands the iteration on. `joules`: the dynamic energy of that work (simulator.energy), from
    the same program sums; `on_chip_joules` the part of it DVFS scales (a power cap's clock)."""

    handoffs: tuple[float, ...]
    flops: float
    hbm_bytes: float
    joules: float
    on_chip_joules: float

    @property
    def cycles(self) -> float:
        return self.handoffs[-1]

    def __add__(self, other: Cost) -> Cost:
        return self._combine(other, lambda a, b: a + b)

    def __sub__(self, other: Cost) -> Cost:
        return self._combine(other, lambda a, b: a - b)

    def toward(self, other: Cost, w: float) -> Cost:
        """The point a fraction `w` of the way from self to other."""
        return self._combine(other, lambda a, b: a + (b - a) * w)

    def delayed(self, cycles: list[float]) -> Cost:
        """The piece with `cycles[k]` more in stage k (each later hand-off moves by all before it)."""
        handoffs, added = [], 0.0
        for h, extra in zip(self.handoffs, cycles, strict=True):
            added += extra
            handoffs.append(h + added)
        return Cost(tuple(handoffs), self.flops, self.hbm_bytes, self.joules, self.on_chip_joules)

    def _combine(self, other: Cost, f: Callable[[float, float], float]) -> Cost:
        handoffs = tuple(f(a, b) for a, b in zip(self.handoffs, other.handoffs, strict=True))
        return Cost(handoffs, f(self.flops, other.flops), f(self.hbm_bytes, other.hbm_bytes),
                    f(self.joules, other.joules), f(self.on_chip_joules, other.on_chip_joules))  # fmt: skip


@dataclass(frozen=True)
class Piece:
    """An iteration (or a piece of it) as the runtime runs it: its cost at the padded shapes, the
    cycles of that the padding accounts for, the padded tokens (prefill tokens and decode batch
    slots), the KV positions its decode reads past the caches, its paged-KV descriptors and the
    cycles their issue adds beyond the compiled step (kv_issue_cycles)."""

    cost: Cost
    padding_cycles: float = 0.0
    padded_tokens: int = 0
    padded_kv: int = 0
    descriptors: int = 0
    descriptor_cycles: float = 0.0

    def __add__(self, other: Piece) -> Piece:
        return Piece(self.cost + other.cost, self.padding_cycles + other.padding_cycles,
                     self.padded_tokens + other.padded_tokens, self.padded_kv + other.padded_kv,
                     self.descriptors + other.descriptors,
                     self.descriptor_cycles + other.descriptor_cycles)  # fmt: skip


def kv_descriptors(lengths: list[int], block_size: int, layers: int) -> int:
    """DMA descriptors a decode step's attention reads on one chip: one per KV block (all the chip's
    KV heads of a layer sit in one block) per sequence, for K and for V, in each of `layers`."""
    return 2 * layers * sum(-(-n // block_size) for n in lengths)


def kv_token_bytes(decode: Lowered, hw: Spec) -> float:
    """K and V of one position of one sequence on one chip, in the compiled decode step's cache
    (the compiler's cache, as kv_budget has it)."""
    cache = [decode_capacity(decode, n, hw).kv_cache for n in (1, 2)]
    return (cache[1] - cache[0]) / decode.options.batch


def kv_issue_cycles(hw: Spec, descriptors: int, kv_bytes: float) -> float:
    """Cycles a stage's paged-KV read takes beyond its bytes at bandwidth. The descriptors are
    independent moves in the DMA pool (rule 5 of docs/hardware-model.md): their start-ups overlap
    each other and the transfers, and the first one's is in the compiled step already; what is
    left is the engines issuing them (`dma.issue_cycles` each, `dma.engines` at once), which shows
    only where it outlasts the transfer it overlaps, read from HBM at the pool's rate."""
    rate = min(hw.dma_bytes_per_cycle, hw.hbm.sustained_bytes_per_cycle)
    return max(0.0, descriptors * hw.dma.issue_cycles / hw.dma.engines - kv_bytes / rate)


@dataclass
class CostStats:
    """How much compiling and simulating the cache saved: shown in reports and the benchmark."""

    engine_runs: int = 0
    decode_templates: int = 0  # one per stage
    prefill_compiles: int = 0  # one per stage
    lookups: int = 0


def grid_points(x: int, step: int) -> tuple[int, int]:
    """The grid points around x: powers of two up to `step`, then multiples of it (step 1: x)."""
    if step <= 1 or x <= 1:
        return x, x
    if x < step:
        low = 1 << (x.bit_length() - 1)
        return low, (low if low == x else min(low * 2, step))
    low = x - x % step
    return low, (low if low == x else low + step)


def interpolate(x: int, step: int, exact: Callable[[int], Cost]) -> Cost:
    """exact(x) on the grid; between grid points, linear between the two around x."""
    low, high = grid_points(x, step)
    if low == high:
        return exact(x)
    return exact(low).toward(exact(high), (x - low) / (high - low))


class IterationCosts:
    """Costs of iteration pieces for one model, hardware, precision and chip count: with `pp`
    pipeline stages, each piece is the stages' programs joined, the batch through them in turn."""

    def __init__(
        self,
        config: ModelConfig,
        hw: Spec,
        precision: Precision,
        options: CompileOptions,
        buckets: Buckets = Buckets(),
        attention: str = "paged",
        pp: int = 1,
        shapes: Shapes | None = None,
        block_size: int = BLOCK_SIZE,
        kv_token_bytes: list[float] | None = None,
    ) -> None:
        if attention not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {ATTENTION_MODES}, got {attention!r}")
        self.config, self.hw, self.precision, self.options = config, hw, precision, options
        self.buckets, self.attention, self.block_size = buckets, attention, block_size
        self.shapes = shapes or Shapes.exact()  # none given: every shape compiled, nothing padded
        self.book, self.energy = recipes(hw), energy_of(hw)  # the target's recipe book and energy recipe
        self.stats = CostStats()
        self.stages = stage_options(config, CompileOptions(chips=options.chips, policy=options.policy), pp)
        self.zero = Cost((0.0,) * pp, 0.0, 0.0, 0.0, 0.0)
        # each stage's layers with a paged KV cache (a recurrent layer's fixed state has no block
        # table, a layer whose attention is skipped or replaced no cache)
        self.layers = [sum(config.layers[i].attends for i in (o.stage.layers if o.stage else
                           range(len(config.layers)))) for o in self.stages]  # fmt: skip
        self._templates: dict[int, list[Steps]] = {}
        # each stage's K and V of one position on one chip: given by a caller that has lowered the
        # decode already (tcpc simulate's plans), else read off the first template compiled
        self._kv_token_bytes: list[float] = list(kv_token_bytes or [])
        self._decodes: dict[tuple[int, int], Cost] = {}
        self._prefills: dict[tuple[int, int, int], Cost] = {}

    # -- decodes -------------------------------------------------------------------------------
    def kv_length(self, lengths: list[int]) -> int:
        """The one KV length the batch's graph gets (`lengths`: each sequence's cache after the step)."""
        if self.attention == "padded":
            return max(lengths)
        return -(-sum(lengths) // len(lengths))

    def decode(self, lengths: list[int]) -> Piece:
        """A decode step of len(lengths) sequences whose caches hold `lengths` positions after it,
        at the runtime's shapes: the batch and the context padded up (the context to the longest's
        bucket, every sequence's block table that long), with its paged-KV descriptors."""
        self.stats.lookups += 1
        own = self.paged_decode(len(lengths), self.kv_length(lengths), lengths)
        if self.shapes.batch == "none" and self.shapes.context == "none":
            return own
        return self.padded_decode(len(lengths), max(lengths), own, sum(lengths))

    def padded_decode(self, batch: int, longest: int, own: Piece | None = None, read: int = 0) -> Piece:
        """`batch` sequences padded to the batch and context buckets (`longest`: the longest cache);
        `own`: the step at its own shapes, whose cost the padding is measured against, and `read`
        the KV positions it reads (default: `longest` each, a static batch's). A model without a KV
        cache (recurrent layers only) has no context to pad: its step is one shape at any length."""
        attends = any(self.layers)
        context = pad(self.shapes.context, longest) if attends else longest
        padded = self.paged_decode(pad(self.shapes.batch, batch), context, [context] * batch)
        own = own or self.paged_decode(batch, longest, [longest] * batch)
        issue = padded.descriptor_cycles - own.descriptor_cycles  # the descriptors' part: their own line
        padded_kv = context * batch - (read or longest * batch) if attends else 0
        return Piece(padded.cost, padded.cost.cycles - own.cost.cycles - issue,
                     pad(self.shapes.batch, batch) - batch, padded_kv,
                     padded.descriptors, padded.descriptor_cycles)  # fmt: skip

    def paged_decode(self, batch: int, length: int, lengths: list[int]) -> Piece:
        """The compiled step at (batch, length) plus what issuing its sequences' KV descriptors adds
        in each stage (kv_issue_cycles; the stage reads its layers' K and V of every position)."""
        step = self.decode_at(batch, length)
        descriptors, extra = self.descriptor_issue(lengths)
        return Piece(step.delayed(extra), descriptors=descriptors, descriptor_cycles=sum(extra))

    def descriptor_issue(self, lengths: list[int]) -> tuple[int, list[float]]:
        """The paged-KV descriptors a decode of sequences with caches of `lengths` reads on one chip,
        and the cycles their issue adds in each stage (kv_issue_cycles; a stage reads its layers'
        K and V of every position)."""
        per_stage = [kv_descriptors(lengths, self.block_size, n) for n in self.layers]
        read = [sum(lengths) * token for token in self._kv_token_bytes]
        return sum(per_stage), [kv_issue_cycles(self.hw, d, b) for d, b in zip(per_stage, read, strict=True)]

    def timed_decode(self, lengths: list[int], cycles: float) -> Piece:
        """A decode step the caller has timed itself at its own shapes (`cycles`: the compiled step
        of len(lengths) sequences at the longest's KV length, as tcpc simulate runs it), as decode()
        gives a step: with its descriptors' issue, padded up to the shapes. Only the piece's cycles
        and the padding's and descriptors' figures are meant to be read: the cost's other fields are
        zero, since the caller has the step's work."""
        descriptors, extra = self.descriptor_issue(lengths)
        own = Piece(Cost((cycles + sum(extra),), 0.0, 0.0, 0.0, 0.0), descriptors=descriptors,
                    descriptor_cycles=sum(extra))  # fmt: skip
        if self.shapes.batch == "none" and self.shapes.context == "none":
            return own
        return self.padded_decode(len(lengths), max(lengths), own, sum(lengths))

    def decode_at(self, batch: int, length: int) -> Cost:
        """Batch `batch` at KV length `length`, interpolated on the grids (bilinear)."""
        return interpolate(
            batch,
            self.buckets.batch,
            lambda b: interpolate(length, self.buckets.kv, lambda n: self.exact_decode(b, n)),
        )

    def exact_decode(self, batch: int, length: int) -> Cost:
        """The engine's cost of the compiled decode step (no bucketing), cached."""
        key = (batch, length)
        found = self._decodes.get(key)
        if found is None:
            templates = self._template(batch, length)
            received = [t.graph.meta.received for t in templates]
            found = self._decodes[key] = self._time([t.at(length) for t in templates], received)
        return found

    def _template(self, batch: int, length: int) -> list[Steps]:
        """Each stage's decode template at `batch`, compiled at the first length asked for."""
        templates = self._templates.get(batch)
        if templates is None:
            check_positions(self.config, length)
            templates = self._templates[batch] = []
            for options in self.stages:
                options = replace(options, batch=batch)
                decode = lower_decode(self.config, self.hw, self.precision, options, max(length - 1, 1))
                templates.append(self.book.DecodeSteps(decode.graph, self.hw, options.policy_on(self.hw)))
                self.stats.decode_templates += 1
                if len(self._kv_token_bytes) < len(self.stages):
                    self._kv_token_bytes.append(kv_token_bytes(decode, self.hw))
        return templates

    # -- prefills ------------------------------------------------------------------------------
    def prefill(self, parts: list[tuple[int, int]], alone: bool = False) -> Piece:
        """Prefill chunks (C new tokens after P cached ones) of one iteration at the runtime's
        shapes: the fresh chunks' row and each continued chunk padded up to the prefill buckets."""
        self.stats.lookups += 1
        own = self.unpadded_prefill(parts, alone)
        if self.shapes.prefill == "none":
            return Piece(own)
        fresh = sum(c for c, p in parts if p == 0)
        padded = [(pad(self.shapes.prefill, fresh), 0)] if fresh else []
        padded += [(pad(self.shapes.prefill, c), p) for c, p in parts if p > 0]
        cost = self.unpadded_prefill(padded, alone)
        return Piece(cost, cost.cycles - own.cycles, sum(c for c, _ in padded) - sum(c for c, _ in parts))

    def unpadded_prefill(self, parts: list[tuple[int, int]], alone: bool = False) -> Cost:
        """Prefill chunks (C new tokens after P cached ones) of one iteration, back to back.
        Fresh chunks (P = 0) run as one row of their tokens (flattened, as vLLM runs them);
        continued ones by difference (module docstring). `alone`: nothing else runs in the
        iteration; continued chunks, whose difference leaves out the weights' read, then cost at
        least the prefill of their tokens on its own."""
        fresh = sum(c for c, p in parts if p == 0)
        total = self.prefill_at(fresh) if fresh else self.zero
        for c, p in parts:
            if p > 0:
                total = total + self.continued_chunk(c, p)
        if alone and not fresh:
            own = self.prefill_at(sum(c for c, _ in parts))
            total = own if own.cycles > total.cycles else total
        return total

    def static_prefill(self, batch: int, seq: int) -> Piece:
        """A static batch's prefill (batch x its longest prompt) padded up to the shapes: the batch
        to the batch buckets, the prompt to the prefill ones."""
        own = self.exact_prefill(batch, seq)
        padded_batch, padded_seq = pad(self.shapes.batch, batch), pad(self.shapes.prefill, seq)
        cost = self.exact_prefill(padded_batch, padded_seq)
        return Piece(cost, cost.cycles - own.cycles, padded_batch * padded_seq - batch * seq)

    def continued_chunk(self, chunk: int, past: int) -> Cost:
        """C tokens after P cached ones: prefill(P + C) - prefill(P) (see the module docstring)."""
        return self.prefill_at(past + chunk) - self.prefill_at(past)

    def prefill_at(self, tokens: int) -> Cost:
        """One row of `tokens` prompt tokens, interpolated on the token grid."""
        return interpolate(tokens, self.buckets.tokens, lambda n: self.exact_prefill(1, n))

    def exact_prefill(self, batch: int, seq: int, documents: int = 0) -> Cost:
        """The engine's cost of the compiled prefill (batch x seq, or `documents` packed in one row)."""
        key = (batch, seq, documents)
        found = self._prefills.get(key)
        if found is None:
            programs, received = [], []
            for options in self.stages:
                options = replace(options, batch=batch, documents=documents)
                compiled = compile_phase(self.config, self.hw, self.precision, "prefill", seq, options)
                programs.append(compiled.program)
                received.append(compiled.graph.meta.received)
                self.stats.prefill_compiles += 1
            found = self._prefills[key] = self._time(programs, received)
        return found

    def _time(self, stages: list[Program], received: list[str | None]) -> Cost:
        """The stages' programs joined (`received`: the input each receives), the batch through
        them in turn, timed by the engine."""
        self.stats.engine_runs += 1
        program = self.book.chain(stages, self.book.in_turn(len(stages)), received)
        timeline = run_program(program, self.hw)
        dtype, work = self.hw.dtype_key(self.precision.operand), Work.of_program(program)
        return Cost(tuple(float(h) for h in self.book.handoffs(program, timeline, len(stages))),
                    float(program.flops.sum()), float(program.hbm_bytes.sum()),
                    self.energy.dynamic_joules(self.hw, work, dtype),
                    self.energy.on_chip_joules(self.hw, work, dtype))  # fmt: skip

    def seconds(self, cost: Cost) -> float:
        return self.hw.seconds(cost.cycles)


def bucket_error(costs: IterationCosts, points: list[tuple[int, int]]) -> dict:
    """Interpolated vs exact decode cost at (batch, KV length) points: the error the grids introduce."""
    errors = []
    for batch, n in points:
        exact = costs.exact_decode(batch, n).cycles
        errors.append((costs.decode_at(batch, n).cycles - exact) / exact)
    return {
        "buckets": {"kv": costs.buckets.kv, "batch": costs.buckets.batch},
        "samples": len(points),
        "max_abs_relative_error": max((abs(e) for e in errors), default=0.0),
        "mean_relative_error": math.fsum(errors) / len(errors) if errors else 0.0,
    }


def prefill_bucket_error(costs: IterationCosts, tokens: list[int]) -> dict:
    """Interpolated vs exact prefill cost at each token count."""
    errors = []
    for n in tokens:
        exact = costs.exact_prefill(1, n).cycles
        errors.append((costs.prefill_at(n).cycles - exact) / exact)
    return {
        "buckets": {"tokens": costs.buckets.tokens},
        "samples": len(tokens),
        "max_abs_relative_error": max((abs(e) for e in errors), default=0.0),
        "mean_relative_error": math.fsum(errors) / len(errors) if errors else 0.0,
    }
