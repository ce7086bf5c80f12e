"""The serving loop: requests arrive, a scheduler picks each iteration, tcpc's compiler and engine
time it (tcp_compiler.serve.costs), and the clock advances by exactly that time.

Nothing here computes a time of its own: an iteration takes the cycles of its compiled programs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from simulator.hardware import Hardware
from tcp_compiler.errors import TcpcError
from tcp_compiler.frontend.builder import check_positions
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.mapping.capacity import capacity
from tcp_compiler.mapping.steps import resize_graph
from tcp_compiler.pipeline import CompileOptions, lower
from tcp_compiler.serve.blocks import BlockManager, KvBudget
from tcp_compiler.serve.costs import ZERO, Buckets, Cost, CostStats, IterationCosts
from tcp_compiler.serve.schedulers import scheduler
from tcp_compiler.serve.state import Plan, Sequence, ServerState
from tcp_compiler.serve.workload import Request

COLUMNS = (
    "start_s",
    "duration_s",
    "cycles",
    "flops",
    "hbm_bytes",
    "decodes",
    "prefill_tokens",
    "prefill_sequences",
    "kv_blocks_used",
    "preemptions",
)


@dataclass(frozen=True)
class ServeOptions:
    """The serving policy; defaults follow vLLM's (256 sequences, 16-token blocks, 1% watermark)."""

    scheduler: str = "chunked"
    max_seqs: int = 256
    max_batch_tokens: int = 2048
    block_size: int = 16
    buckets: Buckets = Buckets()
    attention: str = "paged"
    watermark: float = 0.01
    concurrency: int | None = None  # closed loop: clients, each sending its next request when one ends


@dataclass
class Iterations:
    """Per iteration, one column each (COLUMNS); preemptions are those the iteration's planning made."""

    columns: dict[str, list] = field(default_factory=lambda: {c: [] for c in COLUMNS})

    def add(self, **values: float) -> None:
        for c in COLUMNS:
            self.columns[c].append(values[c])

    def array(self, name: str) -> np.ndarray:
        return np.asarray(self.columns[name])

    def __len__(self) -> int:
        return len(self.columns["start_s"])


@dataclass
class ServeResult:
    config: ModelConfig
    hardware: Hardware
    precision: Precision
    chips: int
    options: ServeOptions
    sequences: list[Sequence]  # every request, finished
    iterations: Iterations
    budget: KvBudget
    stats: CostStats
    mixed_iterations: int  # iterations that ran a decode program and a prefill program back to back
    preemptions: int


def kv_budget(
    config: ModelConfig,
    hw: Hardware,
    precision: Precision,
    options: CompileOptions,
    serve: ServeOptions,
    longest: int,
    longest_prefill: int,
) -> KvBudget:
    """Blocks that fit one chip: HBM minus the weights (capacity's figure, with the position tables
    at the longest sequence) minus the largest prefill's spilled activations."""
    check_positions(config, longest)
    decode = lower(config, hw, precision, "decode", max(longest - 1, 1), CompileOptions(chips=options.chips))
    per_token = [
        capacity(resize_graph(decode.graph, decode.graph.meta.kv_sizes(n)), (), hw).kv_cache for n in (1, 2)
    ]
    prefill = lower(config, hw, precision, "prefill", longest_prefill, CompileOptions(chips=options.chips))
    return KvBudget(
        hw.hbm_capacity_bytes,
        decode.capacity.weights,
        prefill.capacity.activations,
        per_token[1] - per_token[0],
        serve.block_size,
    )


def serve(
    config: ModelConfig,
    hw: Hardware,
    precision: Precision,
    requests: list[Request],
    options: ServeOptions = ServeOptions(),
    compile_options: CompileOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
    costs: IterationCosts | None = None,
) -> ServeResult:
    """Runs every request to completion and returns what happened, iteration by iteration."""
    if not requests:
        raise TcpcError("no requests to serve")
    compile_options = compile_options or CompileOptions()
    longest = max(r.prompt_len + r.output_len for r in requests)
    chunk = options.max_batch_tokens if options.scheduler == "chunked" else longest
    longest_prefill = min(max(r.prompt_len + r.output_len - 1 for r in requests), max(chunk, 1))
    budget = kv_budget(config, hw, precision, compile_options, options, longest, longest_prefill)
    blocks = BlockManager(budget.blocks, options.block_size)
    if blocks.blocks_for(longest) > blocks.total:
        raise TcpcError(
            f"a request of {longest:,} tokens needs {blocks.blocks_for(longest):,} KV blocks of "
            f"{options.block_size} tokens but {hw.name} holds {blocks.total:,} beside the weights "
            f"({budget.weight_bytes:,} bytes per chip): use more chips or shorter requests"
        )
    costs = costs or IterationCosts(
        config, hw, precision, compile_options, options.buckets, options.attention
    )
    st = ServerState(
        blocks, options.max_seqs, options.max_batch_tokens, int(options.watermark * blocks.total)
    )
    policy = scheduler(options.scheduler)
    closed = options.concurrency is not None
    arrivals: deque[tuple[float, Request]] = deque()
    unissued = deque(requests)
    if closed:
        for _ in range(min(options.concurrency or 0, len(requests))):
            arrivals.append((0.0, unissued.popleft()))
    else:
        arrivals.extend((r.arrival_s or 0.0, r) for r in sorted(requests, key=lambda r: (r.arrival_s, r.id)))
        unissued.clear()
    finished: list[Sequence] = []
    iterations = Iterations()
    now, mixed = 0.0, 0
    while len(finished) < len(requests):
        while arrivals and arrivals[0][0] <= now:
            at, request = arrivals.popleft()
            st.waiting.append(Sequence(request, at, request.prompt_len))
        preempted = st.preemptions
        plan = policy.plan(st)
        if plan.empty:
            if not arrivals:
                raise TcpcError("the scheduler cannot run any waiting request (KV cache too small?)")
            now = max(now, arrivals[0][0])
            continue
        cost = iteration_cost(plan, costs)
        mixed += bool(plan.decodes and plan.chunks)
        duration = hw.seconds(cost.cycles)
        iterations.add(
            start_s=now,
            duration_s=duration,
            cycles=cost.cycles,
            flops=cost.flops,
            hbm_bytes=cost.hbm_bytes,
            decodes=len(plan.decodes),
            prefill_tokens=sum(c for _, c in plan.chunks),
            prefill_sequences=len(plan.chunks),
            kv_blocks_used=st.blocks.used,
            preemptions=st.preemptions - preempted,
        )
        now += duration
        for seq in _advance(plan, now):
            seq.finish_s = now
            st.running.remove(seq)
            st.blocks.release(seq)
            finished.append(seq)
            if unissued:
                arrivals.append((now, unissued.popleft()))
        if progress is not None:
            progress(len(finished), len(requests))
    finished.sort(key=lambda s: s.id)
    return ServeResult(
        config,
        hw,
        precision,
        compile_options.chips_on(hw),
        options,
        finished,
        iterations,
        budget,
        costs.stats,
        mixed,
        st.preemptions,
    )


def iteration_cost(plan: Plan, costs: IterationCosts) -> Cost:
    """The iteration's programs back to back: its prefill (chunks) then its decode step."""
    total = ZERO
    if plan.static_prefill is not None:
        total = costs.exact_prefill(*plan.static_prefill)
    elif plan.chunks:
        total = costs.prefill([(c, s.cached) for s, c in plan.chunks], alone=not plan.decodes)
    if plan.static_decode is not None:
        total = total + costs.decode_at(*plan.static_decode)
    elif plan.decodes:
        total = total + costs.decode([s.cached + 1 for s in plan.decodes])
    return total


def _advance(plan: Plan, now: float) -> list[Sequence]:
    """Applies the iteration's tokens; returns the sequences it finished."""
    done = []
    for seq, tokens in plan.chunks:
        seq.cached += tokens
        if not seq.prefilling:  # the prefill's last chunk gives a token
            seq.generated += 1
            if seq.first_token_s is None:
                seq.first_token_s = now
            if seq.done:
                done.append(seq)
    for seq in plan.decodes:
        seq.cached += 1
        seq.generated += 1
        if seq.done:
            done.append(seq)
    return done
