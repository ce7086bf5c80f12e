"""The mapping's policy knobs in one place: how much of DM and the TRF each decision may take.

These are choices of this compiler, not facts about the chip (those are in the hardware spec), so
they live here, each with its reason, and travel as one object through the pipeline
(tcp_compiler.pipeline.CompileOptions) to residency, tiling, placement and the attention choice.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MappingPolicy:
    # An intermediate stays in DM if it fits 1/dm_share of the chip's DM; the rest holds the
    # double-buffered tiles of the passes that produce and read it.
    dm_share: int = 4
    # A pass's HBM inputs stream in tiles of DM / tile_divisor (16 MiB on RNGD): large enough that
    # DMA start-ups cost a few per cent, small enough that the tiles in flight use a fraction of DM.
    tile_divisor: int = 16
    max_tiles: int = 16
    # One einsum tile (operands + result) takes at most 1/einsum_dm_share of each slice's DM, so the
    # next tile's operands can arrive while it runs.
    einsum_dm_share: int = 2
    # The stationary operand uses 1/trf_share of the TRF (half-file mode: the next tile loads into
    # the other half while this one is used).
    trf_share: int = 2
    # An online-softmax tile's scores, and its query rows' accumulator, each take at most
    # 1/attention_share of the DM budget of one intermediate.
    attention_share: int = 2
    # One chunk of a chunked scan (its L x L decay mask and weights, and the state it carries) takes
    # at most 1/scan_share of the DM budget of one intermediate, as an online-softmax tile does.
    scan_share: int = 2


DEFAULT_POLICY = MappingPolicy()
