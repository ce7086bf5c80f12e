"""Who runs in the next iteration: one registered class per policy, each a `plan(state)` over
ServerState. A new policy is one class here with `@register`: `tcpc serve --scheduler` offers every
registered name, in the order registered.
"""

from __future__ import annotations

from typing import ClassVar

from tcp_compiler.serve.state import Plan, Sequence, ServerState


class Scheduler:
    """A batching policy; one instance per virtual engine, so it may keep state between plans."""

    name: ClassVar[str]
    # Whether a prompt may be prefilled over several iterations of at most max-batch-tokens (else
    # a prompt is prefilled whole in one iteration, so the largest prefill is the longest request).
    chunks_prompts: ClassVar[bool] = False

    def plan(self, st: ServerState) -> Plan:
        raise NotImplementedError


SCHEDULERS: dict[str, type[Scheduler]] = {}


def register(cls: type[Scheduler]) -> type[Scheduler]:
    SCHEDULERS[cls.name] = cls
    return cls


def scheduler(name: str) -> Scheduler:
    return SCHEDULERS[name]()


@register
class Static(Scheduler):
    """Today's `tcpc simulate --batch B`: up to max-seqs arrived requests, their KV reserved at
    their final lengths, prefilled together (padded to the longest prompt), then decoded together
    (padded to the longest cache) until the last finishes; only then does the next batch start."""

    name = "static"

    def __init__(self) -> None:
        self.batch: list[Sequence] = []

    def plan(self, st: ServerState) -> Plan:
        active = [s for s in self.batch if not s.done]
        if active:
            length = max(s.cached + 1 for s in active)
            return Plan(decodes=active, static_decode=(len(self.batch), length))
        self.batch = []
        while st.waiting and len(self.batch) < st.max_seqs:
            seq = st.waiting[0]
            final = seq.request.prompt_len + seq.request.output_len
            if not st.blocks.can_hold(seq, final):
                break
            st.blocks.grow(seq, final)
            st.admit(seq)
            self.batch.append(seq)
        if not self.batch:
            return Plan()
        longest = max(s.target - s.cached for s in self.batch)
        return Plan(chunks=[(s, s.target - s.cached) for s in self.batch],
                    static_prefill=(len(self.batch), longest))  # fmt: skip


@register
class Continuous(Scheduler):
    """Orca / vLLM (V0, no chunking): requests join and leave at iteration boundaries; waiting
    prompts are prefilled whole, several per iteration up to max-batch-tokens, and such an
    iteration runs no decodes; otherwise every running sequence decodes."""

    name = "continuous"

    def plan(self, st: ServerState) -> Plan:
        chunks: list[tuple[Sequence, int]] = []
        budget = st.max_batch_tokens
        while st.waiting and len(st.running) < st.max_seqs:
            seq = st.waiting[0]
            # The first prompt always fits the budget, so a prompt longer than it still runs.
            if (chunks and seq.target - seq.cached > budget) or not st.admissible(seq, seq.target):
                break
            st.blocks.grow(seq, seq.target)
            st.admit(seq)
            chunks.append((seq, seq.target - seq.cached))
            budget -= seq.target - seq.cached
        if chunks:
            return Plan(chunks=chunks)
        return Plan(decodes=st.decode_slots(len(st.running)))


@register
class Chunked(Scheduler):
    """Sarathi-Serve / vLLM V1: each iteration spends a budget of max-batch-tokens on every running
    decode first, then on prefill chunks (partly prefilled prompts first, then new ones)."""

    name = "chunked"
    chunks_prompts = True

    def plan(self, st: ServerState) -> Plan:
        budget = st.max_batch_tokens
        decodes = st.decode_slots(budget)
        budget -= len(decodes)
        chunks: list[tuple[Sequence, int]] = []
        for seq in st.running:
            if budget <= 0:
                break
            if seq.prefilling:
                take = min(seq.target - seq.cached, budget, st.holdable(seq))
                if take > 0:
                    st.blocks.grow(seq, seq.cached + take)
                    chunks.append((seq, take))
                    budget -= take
        while st.waiting and budget > 0 and len(st.running) < st.max_seqs:
            seq = st.waiting[0]
            take = min(seq.target - seq.cached, budget)  # past a cached prefix, if any
            if not st.admissible(seq, seq.cached + take):
                break
            st.blocks.grow(seq, seq.cached + take)
            st.admit(seq)
            chunks.append((seq, take))
            budget -= take
        return Plan(decodes=decodes, chunks=chunks)

