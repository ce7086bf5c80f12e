"""The serving runtime's device costs around one static batch's generation, as `tcpc simulate` runs
it: the padding up to the static shapes and the paged-KV descriptors' issue.

`tcpc simulate` times its own programs at their own shapes (batch B, prompt P, each decode step at
its KV length); a server on the card runs graphs compiled for buckets and reads the cache block by
block. What that adds is taken from the serving simulation's costs (IterationCosts), so both
commands pay the same: the prefill padded as a static batch's (`static_prefill`: batch and prompt
up to their buckets), each decode step padded and its descriptors issued as a decode iteration's
(`timed_decode`: the step at the batch's bucket and its context's, every sequence's block table
that long). The padded shapes are compiled and timed by the engine; the own shapes are simulate's
runs, so nothing is compiled twice when no shape is padded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.spec import Spec
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.pipeline import CompileOptions, Lowered
from tcp_compiler.serve.costs import IterationCosts, kv_token_bytes
from tcp_compiler.serve.options import Buckets, Shapes, pad


@dataclass(frozen=True)
class StaticCosts:
    """What the runtime adds to a generation's programs, in cycles: the prefill's padding (all its
    chunks) and, per decode step, its padding and its descriptors' issue; the padded tokens (prompt
    tokens of the prefill, batch slots of a step), the KV positions a step reads past the caches,
    and the descriptors a step reads on one chip."""

    shapes: Shapes
    block_size: int
    prefill_padding_cycles: float
    prefill_padded_tokens: int
    decode_padding_cycles: np.ndarray
    decode_descriptor_cycles: np.ndarray
    decode_descriptors: np.ndarray
    decode_padded_tokens: int
    decode_padded_kv: np.ndarray


def static_costs(
    config: ModelConfig,
    hw: Spec,
    precision: Precision,
    options: CompileOptions,
    pp: int,
    shapes: Shapes,
    block_size: int,
    decodes: list[Lowered],
    prefill: tuple[int, int, int],
    lengths: range,
    decode_cycles: np.ndarray,
) -> StaticCosts:
    """The runtime's costs around a generation: `decodes` each stage's lowered decode step (its
    cache's bytes per position), `prefill` (programs run in turn, each's batch, the prompt), the
    decode steps' KV `lengths` and their simulated `decode_cycles` at their own shapes."""
    costs = IterationCosts(config, hw, precision, options, Buckets.exact(), pp=pp, shapes=shapes,
                           block_size=block_size, kv_token_bytes=[kv_token_bytes(d, hw) for d in decodes])
    runs, batch, prompt = prefill
    padded = pad(shapes.batch, batch) != batch or pad(shapes.prefill, prompt) != prompt
    piece = costs.static_prefill(batch, prompt) if padded else None
    steps = len(lengths)
    padding, issue = np.zeros(steps), np.zeros(steps)
    descriptors, padded_kv = np.zeros(steps, np.int64), np.zeros(steps, np.int64)
    sequences = options.batch
    for k, (length, cycles) in enumerate(zip(lengths, decode_cycles.tolist(), strict=True)):
        step = costs.timed_decode([length] * sequences, cycles)
        padding[k], issue[k] = step.padding_cycles, step.descriptor_cycles
        descriptors[k], padded_kv[k] = step.descriptors, step.padded_kv
    return StaticCosts(
        shapes, block_size, runs * piece.padding_cycles if piece else 0.0,
        runs * piece.padded_tokens if piece else 0, padding, issue, descriptors,
        pad(shapes.batch, sequences) - sequences if steps else 0, padded_kv,
    )  # fmt: skip
