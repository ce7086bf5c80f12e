"""A lower bound on each phase's time from the model config and the spec alone, never from the
program: the report's roofline uses the program's own FLOPs and bytes, so waste in the lowering
(a weight read twice, an activation spilled) would hide inside it. This bound cannot see the
lowering at all.

Per chip of a tensor-parallel group of `chips`:
- compute: the model's matmul FLOPs (every projection and MLP weight, the top-k experts, the LM
  head on the tokens that need logits, and attention over the keys each query sees: causal,
  capped by a sliding window) at the fastest contraction rate of the precision's dtypes;
- memory: the weights read once (the top-k experts of each MoE layer: any routing reads at least
  those), the KV cache written once (prefill) or read once and written one position (decode), at
  the published peak HBM bandwidth;
- links: the all-reduces tensor parallelism cannot avoid (one per attention and one per MLP, or
  one per parallel block), 2(n-1)/n of the hidden state each, in the collective dtype, at the
  per-direction link bandwidth.
The bound is the largest of the three; no simulated phase may beat it (tests/test_config_bound.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from simulator.hardware import Hardware
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.frontend.weight_shapes import canonical_shapes


@dataclass(frozen=True)
class PhaseBound:
    compute_seconds: float
    memory_seconds: float
    link_seconds: float

    @property
    def seconds(self) -> float:
        return max(self.compute_seconds, self.memory_seconds, self.link_seconds)


def phase_bound(
    cfg: ModelConfig, precision: Precision, hw: Hardware, chips: int, batch: int, phase: str, length: int
) -> PhaseBound:
    """The bound of a prefill of `length` tokens per sequence, or of one decode step whose cache
    holds `length` positions (the new one included)."""
    queries = length if phase == "prefill" else 1
    tokens = batch * queries
    per_token, weight_elements = matmul_weights(cfg)
    flops = 2.0 * per_token * tokens + 2.0 * cfg.hidden * cfg.vocab * batch  # logits: one token per row
    flops += sum(_attention_flops(cfg, layer.sliding_window, batch, queries, length) for layer in cfg.layers)
    rate = max(hw.flops_per_second(d.name) for d in (precision.weight, precision.act, precision.kv)
               if d.is_float)  # fmt: skip
    head_bytes = cfg.vocab * cfg.hidden * precision.table.bits / 8  # the LM head (or tied table)
    weight_bytes = weight_elements * precision.weight.bits / 8 + head_bytes
    kv_token = 2 * cfg.kv_heads * cfg.head_dim * precision.kv.bits / 8  # K and V, one layer
    if phase == "prefill":
        kv_bytes = sum(batch * _kept(layer.sliding_window, length) * kv_token for layer in cfg.layers)
    else:  # the cache read once, the new position included
        kv_bytes = sum(batch * _kept(layer.sliding_window, length) * kv_token for layer in cfg.layers)
    link_bytes = 0.0
    if chips > 1:
        per_layer = 1 if cfg.block == "parallel" else 2
        hidden = tokens * cfg.hidden * precision.collective.bits / 8
        link_bytes = len(cfg.layers) * per_layer * 2 * (chips - 1) / chips * hidden
    return PhaseBound(
        compute_seconds=flops / chips / rate,
        memory_seconds=(weight_bytes + kv_bytes) / chips / hw.hbm_peak_bytes_per_second,
        link_seconds=link_bytes / hw.link_bytes_per_s,
    )


@lru_cache(maxsize=64)
def matmul_weights(cfg: ModelConfig) -> tuple[float, float]:
    """(weights each token multiplies by, weights any forward must read), LM head and embedding
    apart: every dense projection, and of each MoE layer the router and top_k experts."""
    per_token = read = 0.0
    for name, shape in canonical_shapes(cfg):
        if len(shape) != 2 or name.startswith(("model.embed", "lm_head")):
            continue
        elements = shape[0] * shape[1]
        if cfg.moe is not None and ".experts." in name:
            elements *= cfg.moe.top_k / cfg.moe.experts
        if cfg.mlp == "plain" and ".mlp.gate_proj." in name:
            continue  # a plain MLP has no gate
        per_token += elements
        read += elements
    return per_token, read


def _kept(window: int | None, length: int) -> int:
    return length if window is None else min(window, length)


def _attention_flops(cfg: ModelConfig, window: int | None, batch: int, queries: int, length: int) -> float:
    """Scores and weighted values: 2 x 2 x head_dim FLOPs per query, head and key it sees."""
    return 4.0 * batch * cfg.heads * cfg.head_dim * visible_keys(window, length - queries, queries)


def visible_keys(window: int | None, first: int, queries: int) -> float:
    """Keys seen, summed over `queries` consecutive queries from position `first`: query p sees
    p + 1 keys, at most `window`."""
    last = first + queries  # keys seen by the last query, without a window
    lo = first + 1
    if window is None or window >= last:
        return (lo + last) * queries / 2
    whole = max(0, window - lo + 1)  # the first queries, which see all their past
    return (lo + lo + whole - 1) * whole / 2 + window * (queries - whole)
