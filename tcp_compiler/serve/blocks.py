"""Paged KV cache accounting: HBM left after the weights, cut into blocks of `block_size` tokens.

A sequence holds ceil(tokens / block_size) blocks, so the cache is charged at the sequences'
actual lengths (not their final ones); the last block of each is partly empty, as in vLLM.
Only counts are kept: which physical block holds what does not change any time tcpc reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class KvBudget:
    """Where the block count comes from, per chip, so reports can show the arithmetic."""

    hbm_bytes: int  # the chip's HBM
    weight_bytes: int  # the compiled weights on one chip (the target's recipes: capacity)
    activation_bytes: int  # the largest spill of the programs the run may execute
    kv_bytes_per_token: int  # every layer's K and V of one token, on one chip
    block_size: int

    @property
    def kv_bytes(self) -> int:
        return max(0, self.hbm_bytes - self.weight_bytes - self.activation_bytes)

    @property
    def blocks(self) -> int:
        return self.kv_bytes // (self.kv_bytes_per_token * self.block_size)


class Holder(Protocol):
    blocks: int  # KV blocks the sequence holds


class BlockManager:
    """Used and free block counts; each sequence keeps the count of its own (`blocks`)."""

    def __init__(self, blocks: int, block_size: int) -> None:
        self.total, self.block_size = blocks, block_size
        self.used = 0

    @property
    def free(self) -> int:
        return self.total - self.used

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def can_hold(self, seq: Holder, tokens: int, reserve: int = 0) -> bool:
        """Whether `seq` can hold `tokens` tokens, leaving `reserve` blocks free."""
        return self.blocks_for(tokens) - seq.blocks <= self.free - reserve

    def grow(self, seq: Holder, tokens: int) -> None:
        """Gives `seq` the blocks for `tokens` tokens (the caller checked can_hold)."""
        extra = self.blocks_for(tokens) - seq.blocks
        if extra <= 0:
            return
        if extra > self.free:
            raise RuntimeError(f"a sequence needs {extra} KV blocks, {self.free} are free")
        seq.blocks += extra
        self.used += extra

    def release(self, seq: Holder) -> None:
        self.used -= seq.blocks
        seq.blocks = 0
