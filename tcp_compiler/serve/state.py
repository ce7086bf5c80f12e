"""The server's state between iterations: sequences waiting and running, and the KV blocks they hold.

Token bookkeeping follows the generation loop tcpc simulate times: the prefill of a prompt gives
the first output token; each decode step writes the previous token into the cache (its KV length
is then cached + 1) and gives the next. A sequence preempted by recompute (vLLM's default) drops
its cache and later prefills prompt + output so far, which gives its next token.
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass, field

from tcp_compiler.serve.blocks import BlockManager
from tcp_compiler.serve.workload import Request


@dataclass(eq=False)
class Sequence:
    request: Request
    arrival_s: float
    target: int  # tokens the (re)prefill puts in the cache
    cached: int = 0
    generated: int = 0
    first_token_s: float | None = None
    finish_s: float | None = None
    preemptions: int = 0
    blocks: int = 0  # KV blocks held (tcp_compiler.serve.blocks)
    replica: int = 0  # the data-parallel replica the router sent it to
    last_token_s: float | None = None  # kept, with `itl`, only when the server records token gaps
    itl: array = field(default_factory=lambda: array("d"))  # seconds between its successive tokens

    @property
    def id(self) -> int:
        return self.request.id

    @property
    def prefilling(self) -> bool:
        return self.cached < self.target

    @property
    def done(self) -> bool:
        return self.generated >= self.request.output_len


@dataclass
class Plan:
    """One iteration: decodes, prefill chunks (sequence, tokens), and for a static batch the
    shapes its padded programs run at (they override the per-sequence shapes)."""

    decodes: list[Sequence] = field(default_factory=list)
    chunks: list[tuple[Sequence, int]] = field(default_factory=list)
    static_prefill: tuple[int, int] | None = None  # (batch, longest prompt)
    static_decode: tuple[int, int] | None = None  # (batch, longest KV length)

    @property
    def empty(self) -> bool:
        return not (self.decodes or self.chunks)


@dataclass
class ServerState:
    blocks: BlockManager
    max_seqs: int
    max_batch_tokens: int
    watermark: int  # blocks kept free when admitting, so running sequences can grow (vLLM: 1%)
    waiting: deque[Sequence] = field(default_factory=deque)
    running: list[Sequence] = field(default_factory=list)
    preemptions: int = 0

    def admit(self, seq: Sequence) -> None:
        """Moves the first waiting sequence (`seq`) to the running ones."""
        assert self.waiting[0] is seq
        self.running.append(self.waiting.popleft())

    def admissible(self, seq: Sequence, tokens: int) -> bool:
        """Blocks for `tokens` of `seq` are free, keeping the watermark unless nothing runs."""
        reserve = self.watermark if self.running else 0
        return self.blocks.can_hold(seq, tokens, reserve)

    def preempt(self, seq: Sequence) -> None:
        """Recompute: drop the cache; the sequence waits first in line to prefill its tokens again."""
        self.running.remove(seq)
        self.blocks.release(seq)
        seq.target = seq.request.prompt_len + seq.generated
        seq.cached = 0
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def decode_slots(self, budget: int) -> list[Sequence]:
        """Running sequences past their prefill that get a decode this iteration (at most `budget`),
        in admission order; when a cache cannot grow, the latest admitted sequence is preempted."""
        decodes: list[Sequence] = []
        k = 0
        while k < len(self.running) and len(decodes) < budget:
            seq = self.running[k]
            k += 1
            if seq.prefilling:
                continue
            if seq.cached < self.blocks.tokens_in(seq.blocks):  # room in its last block: the common case
                decodes.append(seq)
                continue
            while self.blocks.free == 0 and self.running[-1] is not seq:
                self.preempt(self.running[-1])
            if self.blocks.free:
                self.blocks.grow(seq, seq.cached + 1)
                decodes.append(seq)
            else:
                self.preempt(seq)
                k -= 1
        return decodes

    def holdable(self, seq: Sequence) -> int:
        """Tokens `seq` can add with the blocks it holds plus every free one."""
        return self.blocks.tokens_in(seq.blocks + self.blocks.free) - seq.cached
