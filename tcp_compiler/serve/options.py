"""The serving policy a run takes (ServeOptions, its cost grids Buckets, the runtime's static shapes
Shapes): each option declared once, with its flag (tcp_compiler.option_fields), so `tcpc serve`'s
flags are generated from here."""

from __future__ import annotations

from dataclasses import dataclass

from tcp_compiler.option_fields import MAX_SEQUENCES, MAX_TOKENS, option
from tcp_compiler.serve.routers import ROUTERS
from tcp_compiler.serve.schedulers import SCHEDULERS

ATTENTION_MODES = ("paged", "padded")
BLOCK_SIZE = 16  # tokens per KV block: vLLM's default (its --block-size)
MAX_SHAPES = 64  # buckets listed for one dimension
MAX_REPLICAS = 1024  # data-parallel replicas: as many as tcpc's chips (cli.arg_types.MAX_CHIPS)


def ladder(text: str) -> str:
    """A bucket ladder as typed: `pow2` (the next power of two), `none` (every shape exact) or
    ascending sizes `64,128,512` (a shape past the last runs exact); a ValueError otherwise."""
    spelled = text.strip(" \t").lower()
    if spelled in ("pow2", "none"):
        return spelled
    try:
        sizes = [int(part, 10) for part in spelled.split(",")] if spelled.isascii() else []
    except ValueError:
        sizes = []
    if not sizes or len(sizes) > MAX_SHAPES or any(not 1 <= n <= MAX_TOKENS for n in sizes):
        raise ValueError(
            f"expected pow2, none or up to {MAX_SHAPES} sizes 1..{MAX_TOKENS} like 64,128, got {text!r}"
        )
    if sizes != sorted(set(sizes)):
        raise ValueError(f"expected ascending sizes, got {text!r}")
    return ",".join(map(str, sizes))


def pad(rule: str, x: int) -> int:
    """x padded up to its bucket under a ladder (`ladder`)."""
    if rule == "none" or x <= 1:
        return x
    if rule == "pow2":
        return 1 << (x - 1).bit_length()
    return next((n for n in map(int, rule.split(",")) if n >= x), x)


@dataclass(frozen=True)
class Shapes:
    """The static shapes the runtime compiled its graphs for (the vendor's prefill and decode
    buckets: batch, prefill length, context length): an iteration's inputs are padded up to them
    and the padded work is what runs. Defaults assumed: the vendor documents buckets but not the
    preset it picks (developer.furiosa.ai, ArtifactBuilder prefill_buckets / decode_buckets)."""

    batch: str = option("pow2", "decode batch buckets: pow2, none or sizes N,N,... (default %(default)s)",
                        "L", parse=ladder)  # fmt: skip
    prefill: str = option("pow2", "prefill length buckets, as --batch-shapes (default %(default)s)", "L",
                          parse=ladder)  # fmt: skip
    context: str = option("pow2", "decode context (KV) length buckets, as --batch-shapes (default "
                          "%(default)s)", "L", parse=ladder)  # fmt: skip

    @staticmethod
    def exact() -> Shapes:
        return Shapes("none", "none", "none")


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
    block_size: int = option(BLOCK_SIZE, "tokens per KV block (default %(default)s)", "B", bounds=(1, 4096))
    attention: str = option(
        "paged",
        "decode attention reads each sequence's length (paged) or the longest (padded)",
        choices=ATTENTION_MODES,
    )
    host_overlap: bool = option(
        False, "the host schedules and prepares the next iteration while the device runs this one "
        "(default: serial, as a decode step's inputs are the tokens the one before sampled)"
    )
    prefix_cache: bool = option(
        False, "reuse cached KV of the prompts' shared prefix (--shared-prefix): not recomputed in prefill"
    )
    dp: int = option(
        1, "data-parallel replicas of the --tp x --pp layout, each with its own KV cache and scheduler, "
        "behind --router (chips: dp x tp x pp; default %(default)s)", "R", bounds=(1, MAX_REPLICAS)
    )
    router: str = option("round-robin", "which replica an arriving request joins, with --dp (default "
                         "%(default)s)", choices=ROUTERS)  # fmt: skip
    buckets: Buckets = Buckets()
    shapes: Shapes = Shapes()
    watermark: float = 0.01
    concurrency: int | None = None  # closed loop: clients, each sending its next request when one ends
