"""The serving loop: requests arrive, a scheduler picks each iteration, tcpc's compiler and engine
time it (tcp_compiler.serve.costs), and the clock advances by exactly that time.

Nothing here computes a device time of its own: an iteration takes the cycles of its compiled
programs at the runtime's padded shapes, plus the host's work around them (tcp_compiler.serve.host).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from simulator.spec import Spec
from tcp_compiler.errors import TcpcError
from tcp_compiler.frontend.builder import check_positions
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.generation.plan import (
    decode_capacity,
    footprint,
    lower_decode,
    stage_options,
    state_bytes,
)
from tcp_compiler.observer import QUIET, Observer
from tcp_compiler.pipeline import CompileOptions, lower
from tcp_compiler.serve.blocks import KvBudget
from tcp_compiler.serve.costs import Cost, CostStats, IterationCosts, Piece
from tcp_compiler.serve.host import HostWork, host_work
from tcp_compiler.serve.options import ServeOptions
from tcp_compiler.serve.routers import Router, router
from tcp_compiler.serve.schedulers import SCHEDULERS, Scheduler, scheduler
from tcp_compiler.serve.state import Plan, Sequence, ServerState
from tcp_compiler.serve.workload import Request

COLUMNS = (
    "start_s",
    "duration_s",
    "cycles",
    "device_s",
    "padding_s",
    "descriptor_s",
    "schedule_s",
    "prepare_s",
    "launch_s",
    "sample_s",
    "padded_tokens",
    "padded_kv_tokens",
    "kv_descriptors",
    "flops",
    "hbm_bytes",
    "dynamic_joules",
    "on_chip_joules",
    "decodes",
    "prefill_tokens",
    "prefill_sequences",
    "kv_blocks_used",
    "preemptions",
)


@dataclass
class Iterations:
    """Per iteration, one column each (COLUMNS); preemptions are those the iteration's planning made."""

    columns: dict[str, list] = field(default_factory=lambda: {c: [] for c in COLUMNS})
    replica: list[int] = field(default_factory=list)  # the data-parallel replica each ran on

    def add(self, replica: int, **values: float) -> None:
        self.replica.append(replica)
        for c in COLUMNS:
            self.columns[c].append(values[c])

    def array(self, name: str) -> np.ndarray:
        return np.asarray(self.columns[name])

    def __len__(self) -> int:
        return len(self.columns["start_s"])


@dataclass
class ServeResult:
    config: ModelConfig
    hardware: Spec
    precision: Precision
    chips: int  # in all: data-parallel replicas x tensor-parallel chips x pipeline stages
    pp: int  # pipeline stages (an iteration's figures are one chip per stage)
    options: ServeOptions
    sequences: list[Sequence]  # every request, finished
    iterations: Iterations
    budget: KvBudget
    stats: CostStats
    mixed_iterations: int  # iterations that ran a decode program and a prefill program back to back
    preemptions: int
    routed: tuple[int, ...]  # requests each data-parallel replica took (an iteration runs on one)

    @property
    def replica_chips(self) -> int:
        """The chips one iteration runs on: one replica's tensor-parallel chips x stages."""
        return self.chips // len(self.routed)

    def replica_busy_s(self) -> list[float]:
        """Each replica's iterations' time, in seconds."""
        replica, seconds = np.asarray(self.iterations.replica), self.iterations.array("duration_s")
        return [float(seconds[replica == r].sum()) for r in range(len(self.routed))]


def kv_budget(
    config: ModelConfig,
    hw: Spec,
    precision: Precision,
    options: CompileOptions,
    serve: ServeOptions,
    longest: int,
    longest_prefill: int,
    pp: int = 1,
) -> KvBudget:
    """Blocks that fit one chip: HBM minus the weights and the largest prefill's spilled
    activations, as simulate counts them (generation.plan.footprint; the position tables at the
    longest sequence). With pipeline stages, every stage holds every sequence's cache for its
    layers: the stage with the fewest blocks sets the count. A request that cannot fit even beside
    the weights alone is refused as soon as the decode plan gives the cache's size, before the
    (long) prefill is lowered."""
    check_positions(config, longest)
    decodes = []
    for opts in stage_options(config, CompileOptions(chips=options.chips), pp):
        decode = lower_decode(config, hw, precision, opts, max(longest - 1, 1))
        per_token = [decode_capacity(decode, n, hw).kv_cache for n in (1, 2)]
        state = state_bytes(config, precision, opts, hw)
        budget = KvBudget(hw.hbm.capacity_bytes, decode.capacity.weights, 0, per_token[1] - per_token[0],
                          serve.block_size, state)  # fmt: skip
        decodes.append((opts, decode, budget))
    check_fits(min((b for _, _, b in decodes), key=lambda b: b.blocks), longest, hw, pp)
    budgets = []
    for opts, decode, budget in decodes:  # the generation's footprint, its KV cache left to the blocks
        prefill = lower(config, hw, precision, "prefill", longest_prefill, opts)
        use = footprint(decode_capacity(decode, longest, hw), prefill.capacity)
        budgets.append(dataclasses.replace(budget, weight_bytes=use.weights,
                                           activation_bytes=use.activations))  # fmt: skip
    return min(budgets, key=lambda b: b.blocks)


def check_request_positions(config: ModelConfig, requests: list[Request]) -> None:
    """A TcpcError for the first request whose prompt and output pass the model's positions
    (max_position_embeddings), as vLLM refuses one longer than its max_model_len: before any work."""
    limit = config.max_positions
    over = next((r for r in requests if limit and r.prompt_len + r.output_len > limit), None)
    if over is not None:
        raise TcpcError(
            f"request {over.id} (prompt {over.prompt_len:,} + output {over.output_len:,} tokens) passes "
            f"{config.name}'s {limit:,} positions (max_position_embeddings)"
        )


def check_fits(budget: KvBudget, longest: int, hw: Spec, pp: int) -> None:
    """A TcpcError when a request of `longest` tokens needs more KV blocks than one (virtual)
    engine's share of `budget` holds."""
    blocks, total = budget.blocks_for(longest), budget.blocks // pp
    if blocks > total:
        raise TcpcError(
            f"a request of {longest:,} tokens needs {blocks:,} KV blocks of "
            f"{budget.block_size} tokens but {hw.name} holds {total:,}"
            f"{f' per virtual engine ({pp} engines)' if pp > 1 else ''} beside the weights "
            f"({budget.weight_bytes:,} bytes per chip): use more chips or shorter requests"
        )


def serving_costs(config: ModelConfig, hw: Spec, precision: Precision, compile_options: CompileOptions,
                  options: ServeOptions, pp: int) -> IterationCosts:  # fmt: skip
    """The iteration costs a server with `options` runs on (its grids, attention, shapes, blocks)."""
    return IterationCosts(config, hw, precision, compile_options, options.buckets, options.attention, pp,
                          options.shapes, options.block_size)  # fmt: skip


def serve(
    config: ModelConfig,
    hw: Spec,
    precision: Precision,
    requests: list[Request],
    options: ServeOptions = ServeOptions(),
    compile_options: CompileOptions | None = None,
    costs: IterationCosts | None = None,
    pp: int = 1,
    observer: Observer = QUIET,
    token_gaps: bool = False,
) -> ServeResult:
    """Runs every request to completion and returns what happened, iteration by iteration.

    With `pp` pipeline stages (of compile_options.chips each) the server runs pp virtual engines,
    as vLLM does: each has its own scheduler and 1/pp of the KV blocks, an arriving request joins
    the one with the fewest unfinished requests, and an engine's iteration passes the stages in
    turn, each stage taking it when it has finished the iteration before (of any engine). So up to
    pp iterations are in flight, one per stage; an engine's next iteration starts once its last
    one's tokens are out. An iteration's time through the stages is the engine's, its stages'
    programs joined as `tcpc simulate --pp` joins them (`costs`, for pp stages). With
    `options.dp` replicas, each is such a server on its own chips, its own KV cache and engines;
    an arriving request joins the replica `options.router` picks, and the replicas advance in
    one simulated time (the iteration that can start first runs first). The observer
    hears the requests finished. With `token_gaps`, each sequence keeps the time between its
    successive tokens (`Sequence.itl`, vLLM's inter-token latencies), which a long run holds
    8 bytes per token for."""
    if not requests:
        raise TcpcError("no requests to serve")
    compile_options = compile_options or CompileOptions()
    check_request_positions(config, requests)
    longest = max(r.prompt_len + r.output_len for r in requests)
    chunk = options.max_batch_tokens if SCHEDULERS[options.scheduler].chunks_prompts else longest
    longest_prefill = min(max(r.prompt_len + r.output_len - 1 for r in requests), max(chunk, 1))
    budget = kv_budget(config, hw, precision, compile_options, options, longest, longest_prefill, pp)
    # Each replica's engines, sharing its stages.
    replicas: list[list[_Engine]] = [[] for _ in range(options.dp)]
    for home, engines in enumerate(replicas):
        stage_free = [0.0] * pp  # when each stage is done with the iterations it has taken
        engines.extend(
            _Engine(ServerState(budget.manager(budget.blocks // pp), options.max_seqs,
                                options.max_batch_tokens, int(options.watermark * budget.blocks // pp)),
                    scheduler(options.scheduler), home, stage_free)
            for _ in range(pp)
        )  # fmt: skip
    engines = [e for r in replicas for e in r]
    route = router(options.router)
    routed = [0] * options.dp
    check_fits(budget, longest, hw, pp)
    if costs is None:
        costs = serving_costs(config, hw, precision, compile_options, options, pp)
    if len(costs.stages) != pp:
        raise ValueError(f"the iteration costs are of {len(costs.stages)} stages, the server's of {pp}")
    closed = options.concurrency is not None
    arrivals: list[tuple[float, int, Request]] = []  # a heap: closed-loop arrivals come out of order
    unissued = deque(requests)
    if closed:
        for _ in range(min(options.concurrency or 0, len(requests))):
            request = unissued.popleft()
            heapq.heappush(arrivals, (0.0, request.id, request))
    else:
        arrivals = sorted(((r.arrival_s or 0.0, r.id, r) for r in requests), key=lambda a: (a[0], a[1]))
        unissued.clear()
    finished: list[Sequence] = []
    iterations = Iterations()
    mixed = 0
    while len(finished) < len(requests):
        # The engine with work that can start first; an arrival before then joins first (it may
        # wake an idle engine that starts earlier).
        busy = [e for e in engines if e.has_work]
        engine = min(busy, key=lambda e: max(e.ready, e.stage_free[0]), default=None)
        now = max(engine.ready, engine.stage_free[0]) if engine else math.inf
        if arrivals and arrivals[0][0] < now:
            _admit(arrivals, replicas, route, routed, arrivals[0][0])
            continue
        if engine is None:
            raise TcpcError("the scheduler cannot run any waiting request (KV cache too small?)")
        _admit(arrivals, replicas, route, routed, now)
        home = engine.replica
        st = engine.state
        preempted = st.preemptions
        plan = engine.policy.plan(st)
        if plan.empty:  # work it can never start: nothing runs to free its blocks
            raise TcpcError("the scheduler cannot run any waiting request (KV cache too small?)")
        piece = iteration_cost(plan, costs)
        cost = piece.cost
        mixed += bool(plan.decodes and plan.chunks)
        host = iteration_host_work(plan, st, hw)
        host = host.exposed(engine.last_device if options.host_overlap else 0.0)
        device_start = now + host.schedule + host.prepare + host.launch
        end = _through_stages(cost, device_start, engine.stage_free, hw) + host.sample
        engine.last_device = hw.seconds(cost.cycles)
        iterations.add(
            home,
            start_s=now,
            duration_s=end - now,
            cycles=cost.cycles,
            device_s=end - now - host.total - hw.seconds(piece.padding_cycles + piece.descriptor_cycles),
            padding_s=hw.seconds(piece.padding_cycles),
            descriptor_s=hw.seconds(piece.descriptor_cycles),
            schedule_s=host.schedule,
            prepare_s=host.prepare,
            launch_s=host.launch,
            sample_s=host.sample,
            padded_tokens=piece.padded_tokens,
            padded_kv_tokens=piece.padded_kv,
            kv_descriptors=piece.descriptors,
            flops=cost.flops,
            hbm_bytes=cost.hbm_bytes,
            dynamic_joules=cost.joules,
            on_chip_joules=cost.on_chip_joules,
            decodes=len(plan.decodes),
            prefill_tokens=sum(c for _, c in plan.chunks),
            prefill_sequences=len(plan.chunks),
            kv_blocks_used=sum(e.state.blocks.used for e in replicas[home]),
            preemptions=st.preemptions - preempted,
        )
        engine.ready = end
        finishing = _advance(plan, end, token_gaps)
        if options.prefix_cache:  # kept once a prefill has passed it (it then stays cached)
            engine.prefix_cached |= any(0 < s.request.shared_prefix <= s.cached for s, _ in plan.chunks)
        for seq in finishing:
            seq.finish_s = end
            st.running.remove(seq)
            st.blocks.release(seq)
            finished.append(seq)
            if unissued:
                request = unissued.popleft()
                heapq.heappush(arrivals, (end, request.id, request))
        observer.progress(len(finished), len(requests))
    finished.sort(key=lambda s: s.id)
    return ServeResult(
        config,
        hw,
        precision,
        compile_options.chips_on(hw) * pp * options.dp,
        pp,
        options,
        finished,
        iterations,
        budget,
        costs.stats,
        mixed,
        sum(e.state.preemptions for e in engines),
        tuple(routed),
    )


@dataclass(eq=False)
class _Engine:
    """A virtual engine: its own scheduler state, and when its next iteration may start."""

    state: ServerState
    policy: Scheduler
    replica: int  # the data-parallel replica it belongs to
    stage_free: list[float]  # its replica's stages: when each is done with the iterations it took
    ready: float = 0.0
    last_device: float = 0.0  # seconds its last iteration ran on the device (host overlap hides under it)
    prefix_cached: bool = False  # with --prefix-cache: a prompt's shared prefix is in the cache

    @property
    def has_work(self) -> bool:
        return bool(self.state.waiting or self.state.running)

    @property
    def unfinished(self) -> int:
        return len(self.state.waiting) + len(self.state.running)


def _admit(arrivals: list[tuple[float, int, Request]], replicas: list[list[_Engine]], route: Router,
           routed: list[int], now: float) -> None:  # fmt: skip
    """Requests that have arrived by `now` join the replica `route` picks (counted in `routed`),
    there the engine with the fewest unfinished ones (an idle engine wakes at the arrival); with
    the shared prefix in its cache, a request starts past it."""
    while arrivals and arrivals[0][0] <= now:
        at, _, request = heapq.heappop(arrivals)
        home = route.pick([sum(e.unfinished for e in r) for r in replicas])
        routed[home] += 1
        engine = min(replicas[home], key=lambda e: e.unfinished)
        if not engine.has_work:
            engine.ready = max(engine.ready, at)
        seq = Sequence(request, at, request.prompt_len, replica=home)
        if engine.prefix_cached:  # the prefix's KV is reused; the last prompt token is always computed
            seq.cached = min(request.shared_prefix, request.prompt_len - 1)
        engine.state.waiting.append(seq)


def _through_stages(cost: Cost, start: float, stage_free: list[float], hw: Spec) -> float:
    """When an iteration that may start at `start` is out of the last stage. Each stage holds it
    from one hand-off of its joined program's timeline to the next (all of it, with one stage),
    starting once the stage is done with the iteration before it, of any engine; `stage_free`
    becomes when each stage is done with this one."""
    end, handed = start, 0.0
    for k, handoff in enumerate(cost.handoffs):
        end = max(end, stage_free[k]) + hw.seconds(handoff - handed)
        stage_free[k], handed = end, handoff
    return end


def iteration_cost(plan: Plan, costs: IterationCosts) -> Piece:
    """The iteration's programs back to back, at the runtime's shapes: its prefill (chunks) then
    its decode step."""
    total = Piece(costs.zero)
    if plan.static_prefill is not None:
        total = costs.static_prefill(*plan.static_prefill)
    elif plan.chunks:
        total = costs.prefill([(c, s.cached) for s, c in plan.chunks], alone=not plan.decodes)
    if plan.static_decode is not None:
        total = total + costs.padded_decode(*plan.static_decode)
    elif plan.decodes:
        total = total + costs.decode([s.cached + 1 for s in plan.decodes])
    return total


def iteration_host_work(plan: Plan, st: ServerState, hw: Spec) -> HostWork:
    """The host's work for a planned iteration: scheduling every running sequence, preparing its
    tokens, launching its programs (a prefill and a decode one) and sampling a token for each
    decode and each chunk that ends a prompt (its cache then holds the whole target)."""
    sampled = len(plan.decodes) + sum(1 for s, c in plan.chunks if s.cached + c >= s.target)
    tokens = len(plan.decodes) + sum(c for _, c in plan.chunks)
    programs = int(bool(plan.chunks)) + int(bool(plan.decodes))
    return host_work(hw, len(st.running), tokens, sampled, programs)


def _advance(plan: Plan, now: float, token_gaps: bool) -> list[Sequence]:
    """Applies the iteration's tokens (recording each one's gap since the sequence's last with
    `token_gaps`); returns the sequences it finished."""
    done, tokened = [], []
    for seq, tokens in plan.chunks:
        seq.cached += tokens
        if not seq.prefilling:  # the prefill's last chunk gives a token
            seq.generated += 1
            tokened.append(seq)
            if seq.first_token_s is None:
                seq.first_token_s = now
            if seq.done:
                done.append(seq)
    for seq in plan.decodes:
        seq.cached += 1
        seq.generated += 1
        if seq.done:
            done.append(seq)
    if token_gaps:
        for seq in (*tokened, *plan.decodes):
            if seq.last_token_s is not None:
                seq.itl.append(now - seq.last_token_s)
            seq.last_token_s = now
    return done
