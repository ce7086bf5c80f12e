"""Paged KV cache accounting: HBM left after the weights, cut into blocks of `block_size` tokens.

A sequence holds ceil(tokens / block_size) blocks, so the cache is charged at the sequences'
actual lengths (not their final ones); the last block of each is partly empty, as in vLLM.
A model with Mamba layers also keeps a fixed state per sequence (their recurrent states and
convolution windows): it takes whole blocks of its own from the sequence's first token to its
release, as vLLM's hybrid allocator gives each request's state a page; a model with no per-token
cache at all (pure Mamba) has blocks of one state each, and its tokens take none.
Only counts are kept: which physical block holds what does not change any time tcpc reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

UNBOUNDED = 1 << 62  # tokens a sequence can cache when tokens take no blocks (a pure Mamba model)


@dataclass(frozen=True)
class KvBudget:
    """Where the block count comes from, per chip, so reports can show the arithmetic."""

    hbm_bytes: int  # the chip's HBM
    weight_bytes: int  # the compiled weights on one chip (the target's recipes: capacity)
    activation_bytes: int  # the largest spill of the programs the run may execute
    kv_bytes_per_token: int  # every layer's K and V of one token, on one chip
    block_size: int
    state_bytes_per_sequence: int = 0  # every Mamba layer's state and conv window, on one chip

    @property
    def kv_bytes(self) -> int:
        return max(0, self.hbm_bytes - self.weight_bytes - self.activation_bytes)

    @property
    def block_bytes(self) -> int:
        """One block: block_size tokens' K and V, or one sequence's state without a per-token cache."""
        return self.kv_bytes_per_token * self.block_size or self.state_bytes_per_sequence

    @property
    def state_blocks(self) -> int:
        """Whole blocks a sequence's fixed state takes (0 without one)."""
        return -(-self.state_bytes_per_sequence // self.block_bytes)

    @property
    def blocks(self) -> int:
        return self.kv_bytes // self.block_bytes

    def manager(self, blocks: int) -> BlockManager:
        """A block manager of `blocks` of these blocks."""
        return BlockManager(blocks, self.block_size, self.state_blocks, self.kv_bytes_per_token > 0)

    def blocks_for(self, tokens: int) -> int:
        """Blocks a sequence of `tokens` tokens holds."""
        return self.manager(0).blocks_for(tokens)


class Holder(Protocol):
    blocks: int  # KV blocks the sequence holds


class BlockManager:
    """Used and free block counts; each sequence keeps the count of its own (`blocks`): its fixed
    state's `state_blocks` and, when tokens take blocks (`token_blocks`), one per block_size tokens."""

    def __init__(
        self, blocks: int, block_size: int, state_blocks: int = 0, token_blocks: bool = True
    ) -> None:
        self.total, self.block_size = blocks, block_size
        self.state_blocks, self.token_blocks = state_blocks, token_blocks
        self.used = 0

    @property
    def free(self) -> int:
        return self.total - self.used

    def blocks_for(self, tokens: int) -> int:
        if tokens <= 0:
            return 0
        return self.state_blocks + (-(-tokens // self.block_size) if self.token_blocks else 0)

    def tokens_in(self, blocks: int) -> int:
        """Tokens a sequence holding `blocks` blocks can cache (any number when tokens take none)."""
        if not self.token_blocks:
            return UNBOUNDED if blocks else 0
        return max(0, blocks - self.state_blocks) * self.block_size

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
