"""The serving policy a run takes (ServeOptions, its cost grids Buckets): each option declared once,
with its flag (tcp_compiler.option_fields), so `tcpc serve`'s flags are generated from here."""

from __future__ import annotations

from dataclasses import dataclass

from tcp_compiler.option_fields import MAX_SEQUENCES, MAX_TOKENS, option
from tcp_compiler.serve.schedulers import SCHEDULERS

ATTENTION_MODES = ("paged", "padded")


@dataclass(frozen=True)
class Buckets:
    """Grid steps for the shapes an iteration can have; 1 is exact (every shape compiled)."""

    kv: int = option(64, "decode KV length grid step (default %(default)s)", "N", bounds=(1, MAX_TOKENS))
    batch: int = option(16, "decode batch grid step (default %(default)s)", "N", bounds=(1, MAX_TOKENS))
    tokens: int = option(256, "prefill tokens grid step (default %(default)s)", "N", bounds=(1, MAX_TOKENS))

    @staticmethod
    def exact() -> Buckets:
        return Buckets(1, 1, 1)


@dataclass(frozen=True)
class ServeOptions:
    """The serving policy; defaults follow vLLM's (256 sequences, 16-token blocks, 1% watermark)."""

    scheduler: str = option("chunked", "batching policy (default %(default)s)", choices=SCHEDULERS)
    max_batch_tokens: int = option(
        2048, "tokens per iteration (prefill budget; default %(default)s)", "T", bounds=(1, MAX_TOKENS)
    )
    max_seqs: int = option(
        256, "sequences running at once (default %(default)s)", "S", bounds=(1, MAX_SEQUENCES)
    )
    block_size: int = option(16, "tokens per KV block (default %(default)s)", "B", bounds=(1, 4096))
    attention: str = option(
        "paged",
        "decode attention reads each sequence's length (paged) or the longest (padded)",
        choices=ATTENTION_MODES,
    )
    buckets: Buckets = Buckets()
    watermark: float = 0.01
    concurrency: int | None = None  # closed loop: clients, each sending its next request when one ends
