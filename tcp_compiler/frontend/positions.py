"""Position tables that are computed, not trained: ALiBi slopes and sinusoidal embeddings.

(RoPE's rotation table lives with its parameters on `config.Rope`.)
"""

from __future__ import annotations

import math

import numpy as np


def alibi_slopes(heads: int) -> np.ndarray:
    """ALiBi's per-head slopes (Press et al.): a geometric sequence from 2^(-8/n) for the largest
    power of two n <= heads, then every other term of the sequence for 2n for the heads left over."""
    n = 2 ** math.floor(math.log2(heads))
    slopes = [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]
    extra = [2.0 ** (-8.0 * (i + 1) / (2 * n)) for i in range(0, 2 * (heads - n), 2)]
    return np.array(slopes + extra, dtype=np.float32)


def sinusoidal_table(positions: int, dim: int, base: float = 10000.0) -> np.ndarray:
    """Vaswani et al.'s [positions, dim] embedding: sin in even columns, cos in odd, wavelengths
    from 2 pi to base * 2 pi."""
    if dim % 2:
        raise ValueError(f"sinusoidal positions need an even width, got {dim}")
    angle = np.arange(positions, dtype=np.float64)[:, None] / base ** (np.arange(0, dim, 2) / dim)[None, :]
    table = np.empty((positions, dim), dtype=np.float32)
    table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
    return table
