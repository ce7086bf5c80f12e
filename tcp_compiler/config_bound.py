"""A lower bound on each phase's time from the model config and the spec alone, never from the
program: the report's roofline uses the program's own FLOPs and bytes, so waste in the lowering
(a weight read twice, an activation spilled) would hide inside it. This bound cannot see the
lowering at all.

Per chip of a tensor-parallel group of `chips`:
- compute: the model's matmul FLOPs (every projection and MLP weight, the top-k experts, the LM
  head on the tokens that need logits, and attention over the keys each query sees: causal,
  capped by a sliding window) at the fastest contraction rate of the precision's dtypes;
- memory: the weights read once (the top-k experts of each MoE layer: any routing reads at least
  those; in a weight format, its codes plus scales and zero points), the KV cache written once
  (prefill) or read once and written one position (decode), at
  the published peak HBM bandwidth (MLA's latent cache whole on every chip);
- links: the all-reduces tensor parallelism cannot avoid (one per attention and one per MLP, or
  one per parallel block), 2(n-1)/n of the hidden state each, in the collective dtype, at the
  per-direction link bandwidth.
The bound is the largest of the three; no simulated phase may beat it (tests/test_config_bound.py).
"""

from __future__ import annotations

from collections.abc import Iterator
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
    cfg: ModelConfig, precision: Precision, hw: Hardware, chips: int, batch: int, phase: str, length: int,
    pp: int = 1,
) -> PhaseBound:
    """The bound of a prefill of `length` tokens per sequence, or of one decode step whose cache
    holds `length` positions (the new one included), on `chips` tensor-parallel chips per each of
    `pp` pipeline stages: the work spread over all of them, each stage's all-reduces among its
    chips for its layers, and one hidden state sent on per stage boundary."""
    queries = length if phase == "prefill" else 1
    tokens = batch * queries
    per_token, _ = matmul_weights(cfg)
    flops = 2.0 * per_token * tokens + 2.0 * cfg.hidden * cfg.vocab * batch  # logits: one token per row
    flops += sum(_attention_flops(cfg, layer.sliding_window, batch, queries, length) for layer in cfg.layers)
    rate = max(hw.flops_per_second(d.name) for d in (precision.operand, precision.act, precision.kv))
    weight_bytes = matmul_weight_bytes(cfg, precision) + head_bytes(cfg, precision)
    kv_token = kv_elements_per_token(cfg) * precision.kv.bits / 8
    if phase == "prefill":
        kv_bytes = sum(batch * _kept(layer.sliding_window, length) * kv_token for layer in cfg.layers)
    else:  # the cache read once, the new position included
        kv_bytes = sum(batch * _kept(layer.sliding_window, length) * kv_token for layer in cfg.layers)
    kv_split = 1 if cfg.mla is not None else chips  # every chip holds MLA's whole latent cache
    link_bytes = 0.0
    hidden = tokens * cfg.hidden * precision.collective.bits / 8
    if chips > 1:
        per_layer = 1 if cfg.block == "parallel" else 2
        link_bytes = len(cfg.layers) / pp * per_layer * 2 * (chips - 1) / chips * hidden
    link_bytes += hidden if pp > 1 else 0.0
    everywhere = chips * pp
    return PhaseBound(
        compute_seconds=flops / everywhere / rate,
        memory_seconds=(weight_bytes / everywhere + kv_bytes / kv_split / pp) / hw.hbm_peak_bytes_per_second,
        link_seconds=link_bytes / hw.link_bytes_per_s,
    )


@lru_cache(maxsize=64)
def matmul_weights(cfg: ModelConfig) -> tuple[float, float]:
    """(weights each token multiplies by, weights any forward must read), LM head and embedding
    apart: every dense projection, and of each MoE layer the router and top_k experts."""
    read = sum(shape[0] * shape[1] * share for _, shape, share in _matmul_shapes(cfg))
    return read, read


@lru_cache(maxsize=64)  # the report asks once per decode step
def matmul_weight_bytes(cfg: ModelConfig, precision: Precision) -> float:
    """Bytes of the weights `matmul_weights` counts, in the precision's weight format: each
    format's codes plus its scales and zero points (weight_format.bits_per_weight)."""
    fmt = precision.format
    total = 0.0
    for name, (rows, cols), share in _matmul_shapes(cfg):
        bits = precision.weight.bits
        if fmt is not None:
            bits = fmt.bits_per_weight(rows, cols) if fmt.applies(name) else precision.act.bits
        total += rows * cols * share * bits / 8
    return total


def head_bytes(cfg: ModelConfig, precision: Precision) -> float:
    """The LM head as the builder reads it: a tied head is the table (table dtype); an untied one
    a projection weight (the weight dtype, or the weight format when one applies to it, else the
    activation dtype)."""
    fmt, elements = precision.format, cfg.vocab * cfg.hidden
    if cfg.tie_embeddings:
        return elements * precision.table.bits / 8
    if fmt is None:
        return elements * precision.weight.bits / 8
    if fmt.applies("lm_head.weight"):
        return elements * fmt.bits_per_weight(cfg.vocab, cfg.hidden) / 8
    return elements * precision.act.bits / 8


def _matmul_shapes(cfg: ModelConfig) -> Iterator[tuple[str, tuple[int, int], float]]:
    """(name, [out, in], share of it any forward reads) of each projection (not head, embedding)."""
    for name, shape in canonical_shapes(cfg):
        if len(shape) != 2 or name.startswith(("model.embed", "lm_head")):
            continue
        if cfg.mlp == "plain" and ".mlp.gate_proj." in name:
            continue  # a plain MLP has no gate
        share = cfg.moe.top_k / cfg.moe.experts if cfg.moe is not None and ".experts." in name else 1.0
        yield name, (shape[0], shape[1]), share


def _kept(window: int | None, length: int) -> int:
    return length if window is None else min(window, length)


def kv_elements_per_token(cfg: ModelConfig) -> int:
    """One layer's cached elements per token: K and V of every KV head, or MLA's latent and the
    rope key all heads share."""
    if cfg.mla is not None:
        return cfg.mla.kv_lora_rank + cfg.mla.rope_dim
    return 2 * cfg.kv_heads * cfg.head_dim


def _attention_flops(cfg: ModelConfig, window: int | None, batch: int, queries: int, length: int) -> float:
    """Scores and weighted values: 2 x 2 x head_dim FLOPs per query, head and key it sees; MLA's
    the cheaper of its expanded form (q.k over nope + rope dims, then v_head_dim) and its absorbed
    one (q.latent + q.rope key, then the latent)."""
    per_key = 4.0 * cfg.head_dim
    if cfg.mla is not None:
        m = cfg.mla
        per_key = 2.0 * min(m.nope_dim + m.rope_dim + m.v_dim, 2 * m.kv_lora_rank + m.rope_dim)
    return batch * cfg.heads * per_key * visible_keys(window, length - queries, queries)


def visible_keys(window: int | None, first: int, queries: int) -> float:
    """Keys seen, summed over `queries` consecutive queries from position `first`: query p sees
    p + 1 keys, at most `window`."""
    last = first + queries  # keys seen by the last query, without a window
    lo = first + 1
    if window is None or window >= last:
        return (lo + last) * queries / 2
    whole = max(0, window - lo + 1)  # the first queries, which see all their past
    return (lo + lo + whole - 1) * whole / 2 + window * (queries - whole)
