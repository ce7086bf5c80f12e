"""A lower bound on each phase's time from the model config and the spec alone, never from the
program: the report's roofline uses the program's own FLOPs and bytes, so waste in the lowering
(a weight read twice, an activation spilled) would hide inside it. This bound cannot see the
lowering at all.

Per chip of a tensor-parallel group of `chips`:
- compute: the model's matmul FLOPs (every projection and MLP weight, the top-k experts, the LM
  head on the tokens that need logits, and attention over the keys each query sees: causal,
  capped by a sliding window or cut to the query's chunk, or by index_topk under sparse attention,
  whose indexers score every key seen), each at the peak contraction rate of
  the dtype its operands are multiplied in (projections in the precision's operand dtype, or the
  activation dtype where a weight format does not apply; the head in the table dtype when tied;
  attention in the KV dtype): a bf16 run with an fp8 cache multiplies its weights no faster;
- memory: the weights read once (the top-k experts of each MoE layer: any routing reads at least
  those; in a weight format, its codes plus scales and zero points), the KV cache written once
  (prefill) or read once and written one position (decode), of a windowed layer only the keys
  the last position sees, each Mamba layer's recurrent state and convolution window written once
  (prefill) or read and written once (decode), at
  the published peak HBM bandwidth (MLA's latent cache whole on every chip: the roofs are
  tcp_compiler.analysis.roofline's, HBM at its peak rather than its sustained rate);
- links: the all-reduces tensor parallelism cannot avoid (one per attention or Mamba mixer and one
  per MLP, or one per parallel block), 2(n-1)/n of the hidden state each, in the collective dtype, at the
  per-direction link bandwidth; of a card split into P PE ranks (Spec.ranks_per_card), only the
  all-reduce across its n cards uses the links (1/P of the state per rank at 1/P of the card's link),
  and the PE-to-PE reductions within a card are left out (a bound: they take at least no time).
The bound is the largest of the three; no simulated phase may beat it (tests/test_config_bound.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ir import DType
from simulator.spec import Spec
from tcp_compiler.analysis.roofline import Roofline, peak_flops
from tcp_compiler.frontend.config import Layer, ModelConfig, Window
from tcp_compiler.frontend.precision import Precision
from tcp_compiler.frontend.weight_shapes import canonical_shapes, unrun_shapes, uses


@dataclass(frozen=True)
class PhaseBound:
    compute_seconds: float
    memory_seconds: float
    link_seconds: float

    @property
    def seconds(self) -> float:
        return max(self.compute_seconds, self.memory_seconds, self.link_seconds)


def phase_bound(
    cfg: ModelConfig, precision: Precision, hw: Spec, chips: int, batch: int, phase: str, length: int,
    pp: int = 1,
) -> PhaseBound:
    """The bound of a prefill of `length` tokens per sequence, or of one decode step whose cache
    holds `length` positions (the new one included), on `chips` tensor-parallel chips per each of
    `pp` pipeline stages: the work spread over all of them, each stage's all-reduces among its
    chips for its layers, and one hidden state sent on per stage boundary."""
    return _Fixed.of(cfg, precision, hw, chips, batch, pp).bound(phase, length)


def decode_bound_seconds(
    cfg: ModelConfig, precision: Precision, hw: Spec, chips: int, batch: int, lengths: Iterable[int],
    pp: int = 1,
) -> list[float]:
    """`phase_bound(..., "decode", n, pp).seconds` for each n of `lengths` (the report asks once
    per decode step): what does not depend on the length is worked out once, the rest by the same
    float operations in the same order, so each value is the same to the bit."""
    fixed = _Fixed.of(cfg, precision, hw, chips, batch, pp)
    return [fixed.bound("decode", n).seconds for n in lengths]


@dataclass(frozen=True)
class _Fixed:
    """The parts of a bound that do not depend on the phase's length."""

    cfg: ModelConfig
    batch: int
    per_token: dict[DType, float]  # weights each token multiplies by, per dtype they multiply in
    head: DType  # the dtype the LM head multiplies in
    head_flops: float  # the logits: one token per row
    kv: DType  # the dtype attention multiplies in
    attention_scale: float  # batch x heads x FLOPs per query, head and key
    caches: tuple[tuple[Window | None, float], ...]  # each attending layer's window or chunk, KV B/token
    state_bytes: float  # every Mamba layer's state and convolution window, one sequence
    indexers: tuple[int, float, float]  # sparse attention's indexers: layers, FLOPs per key, B/token
    roofline: Roofline  # HBM at its peak, the links
    weight_bytes: float
    kv_split: int
    collective_bits: int
    link_scale: float | None  # the tensor-parallel all-reduces' bytes per hidden state's (chips > 1)
    pp: int
    everywhere: int
    rate: Callable[[DType], float]  # the peak FLOP/s of a dtype

    @classmethod
    def of(
        cls, cfg: ModelConfig, precision: Precision, hw: Spec, chips: int, batch: int, pp: int
    ) -> _Fixed:
        link_scale = None
        # Ranks that share a card reduce among themselves PE to PE, off the chip links: only the
        # cards' all-reduce crosses them, 1/per_card of the hidden state from each rank (at its
        # share of the card's link); the PE-to-PE part is left out of the bound (taken as free).
        per_card = hw.ranks_per_card
        cards, share = (chips // per_card, per_card) if chips % per_card == 0 else (chips, 1)
        if cards > 1:
            all_reduces = sum(_all_reduces(cfg, layer) for layer in cfg.layers)
            link_scale = all_reduces / pp * 2 * (cards - 1) / cards / share
        return cls(
            cfg=cfg, batch=batch, per_token=_weights_by_operand(cfg, precision),
            head=_head_operand(cfg, precision), head_flops=2.0 * cfg.hidden * cfg.vocab * batch,
            kv=precision.kv, attention_scale=batch * cfg.heads * _per_key(cfg),
            rate=functools.partial(peak_flops, hw),
            caches=tuple((_attended(cfg, layer), kv_elements_per_token(cfg, layer) * precision.kv.bits / 8)
                         for layer in cfg.layers if layer.attends),
            indexers=_indexers(cfg, precision, batch),
            state_bytes=cfg.state_elements() * precision.kv.bits / 8,
            roofline=Roofline.published_peak(hw, precision.operand),
            weight_bytes=matmul_weight_bytes(cfg, precision) + head_bytes(cfg, precision),
            kv_split=1 if cfg.mla is not None else chips,  # every chip holds MLA's whole latent cache
            collective_bits=precision.collective.bits, link_scale=link_scale,
            pp=pp, everywhere=chips * pp,
        )  # fmt: skip

    def bound(self, phase: str, length: int) -> PhaseBound:
        queries = length if phase == "prefill" else 1
        batch, caches = self.batch, self.caches
        tokens = batch * queries
        flops = {dtype: 2.0 * n * tokens for dtype, n in self.per_token.items()}
        flops[self.head] = flops.get(self.head, 0.0) + self.head_flops
        # Layers of one window see the same keys: each distinct window's term once, summed per layer.
        first, scale = length - queries, self.attention_scale
        distinct = set(caches)
        attention = {w: scale * visible_keys(w, first, queries) for w, _ in distinct}
        flops[self.kv] = flops.get(self.kv, 0.0) + sum([attention[w] for w, _ in caches])
        # prefill writes the cache once; decode reads it, the new position included
        kv = {(w, token): batch * _kept(w, length) * token for w, token in distinct}
        kv_bytes = sum([kv[c] for c in caches])
        layers, per_key, key_bytes = self.indexers  # each indexer scores every key the query sees
        if layers:
            flops[self.kv] += layers * per_key * visible_keys(None, first, queries)
            kv_bytes += layers * batch * length * key_bytes
        if self.state_bytes:  # prefill writes the state once; decode reads it and writes it back
            kv_bytes += (1 if phase == "prefill" else 2) * batch * self.state_bytes
        link_bytes = 0.0
        hidden = tokens * self.cfg.hidden * self.collective_bits / 8
        if self.link_scale is not None:
            link_bytes = self.link_scale * hidden
        link_bytes += hidden if self.pp > 1 else 0.0
        everywhere, pp = self.everywhere, self.pp
        memory = self.weight_bytes / everywhere + kv_bytes / self.kv_split / pp
        _, memory_seconds, link_seconds = self.roofline.terms(0.0, memory, link_bytes)
        compute = sum(f / everywhere / self.rate(dtype) for dtype, f in flops.items())
        return PhaseBound(compute, memory_seconds, link_seconds)


@functools.lru_cache(maxsize=64)
def matmul_weights(cfg: ModelConfig) -> tuple[float, float]:
    """(weights each token multiplies by, weights any forward must read), LM head and embedding
    apart: every dense projection, and of each MoE layer the router and top_k experts; a weight
    used more than once per token (Zamba2's shared blocks) multiplies at every use but must be
    read only once."""
    counts = uses(cfg)
    shapes = list(_matmul_shapes(cfg))
    read = sum(shape[0] * shape[1] * share for _, shape, share in shapes)
    return sum(shape[0] * shape[1] * share * counts.get(name, 1) for name, shape, share in shapes), read


@functools.lru_cache(maxsize=64)  # the report asks once per decode step
def matmul_weight_bytes(cfg: ModelConfig, precision: Precision) -> float:
    """Bytes of the weights `matmul_weights` counts, in the precision's weight format: each
    format's codes plus its scales and zero points (weight_format.bits_per_weight)."""
    return sum(rows * cols * share * _projection_bits(name, rows, cols, precision) / 8
               for name, (rows, cols), share in _matmul_shapes(cfg))  # fmt: skip


def _projection_bits(name: str, rows: int, cols: int, precision: Precision) -> float:
    """Bits per element of projection `name` in HBM: the weight dtype's, its format's codes plus
    scales and zero points, or the activation dtype's where the format keeps it unquantised."""
    fmt = precision.format
    if fmt is None:
        return precision.weight.bits
    return fmt.bits_per_weight(rows, cols) if fmt.applies(name) else precision.act.bits


def unrun_weights(cfg: ModelConfig, precision: Precision) -> tuple[int, float]:
    """(parameters, bytes in the precision) of the weights a checkpoint holds that generation
    neither runs nor loads (weight_shapes.unrun_shapes: MiMo's multi-token-prediction layers)."""
    params, total = 0, 0.0
    for name, shape, kind in unrun_shapes(cfg):
        elements = math.prod(shape)
        bits = _projection_bits(name, *shape, precision) if kind == "projection" else precision.table.bits
        params, total = params + elements, total + elements * bits / 8
    return params, total


@functools.lru_cache(maxsize=64)
def _weights_by_operand(cfg: ModelConfig, precision: Precision) -> dict[DType, float]:
    """The weights each token multiplies by (`matmul_weights`), by the dtype the projection
    multiplies in: the operand dtype, or the activation dtype where a weight format does not apply."""
    fmt, found, counts = precision.format, {}, uses(cfg)
    for name, (rows, cols), share in _matmul_shapes(cfg):
        dtype = precision.operand if fmt is None or fmt.applies(name) else precision.act
        found[dtype] = found.get(dtype, 0.0) + rows * cols * share * counts.get(name, 1)
    return found


def _head_operand(cfg: ModelConfig, precision: Precision) -> DType:
    """The dtype the LM head multiplies in (as `head_bytes` reads it): the table's when tied, else
    the projections' operand, or the activation dtype where a weight format does not apply."""
    fmt = precision.format
    if cfg.embedding.tied:
        return precision.table
    return precision.operand if fmt is None or fmt.applies("lm_head.weight") else precision.act


def head_bytes(cfg: ModelConfig, precision: Precision) -> float:
    """The LM head as the builder reads it: a tied head is the table (table dtype); an untied one
    a projection weight (the weight dtype, or the weight format when one applies to it, else the
    activation dtype)."""
    fmt, elements = precision.format, cfg.vocab * cfg.hidden
    if cfg.embedding.tied:
        return elements * precision.table.bits / 8
    if fmt is None:
        return elements * precision.weight.bits / 8
    if fmt.applies("lm_head.weight"):
        return elements * fmt.bits_per_weight(cfg.vocab, cfg.hidden) / 8
    return elements * precision.act.bits / 8


def _matmul_shapes(cfg: ModelConfig) -> Iterator[tuple[str, tuple[int, int], float]]:
    """(name, [out, in], share of it any forward reads) of each projection and routed expert (not
    head, embedding), by the kind canonical_shapes gives it."""
    for name, shape, kind in canonical_shapes(cfg):
        if kind in ("projection", "expert"):
            share = cfg.moe.top_k / cfg.moe.experts if kind == "expert" else 1.0
            yield name, (shape[0], shape[1]), share


def _all_reduces(cfg: ModelConfig, layer: Layer) -> int:
    """The hidden-state all-reduces a layer cannot avoid over tensor-parallel chips: one after its
    mixer (attention's o_proj, a recurrent mixer's out_proj; none where the layer skips attention or
    replaces it by DeciLM's replicated linear) and one after its MLP (likewise), or one for a
    parallel block; two more where a Zamba2 layer runs a shared block (its attention and MLP)."""
    if cfg.residual.block == "parallel" and layer.mixer == "attention":
        return 1
    shared = 2 if layer.shared is not None else 0
    return (layer.recurrent or layer.attention == "standard") + (layer.ffn == "standard") + shared


def _attended(cfg: ModelConfig, layer: Layer) -> Window | None:
    """The keys a layer's attention multiplies and reads: its window's, or with sparse attention
    (config.Dsa) at most index_topk of them per query, the most a sliding window of that size sees
    (decode reads only the picked rows of the cache)."""
    return layer.window if cfg.dsa is None else Window(cfg.dsa.topk)


def _indexers(cfg: ModelConfig, precision: Precision, batch: int) -> tuple[int, float, float]:
    """Sparse attention's indexers (config.Dsa): (layers that run one, their FLOPs per query and key
    seen: a q.k per index head and the heads' weighted sum, their index key cache's bytes per
    token); (0, 0, 0) without."""
    dsa = cfg.dsa
    if dsa is None:
        return 0, 0.0, 0.0
    layers = sum(layer.attends for i, layer in enumerate(cfg.layers) if i not in dsa.shared)
    return layers, batch * 2.0 * dsa.heads * (dsa.head_dim + 1), dsa.head_dim * precision.kv.bits / 8


def _kept(window: Window | None, length: int) -> int:
    """Cached positions the last of `length` positions sees: all, its window's, its chunk's."""
    if window is None:
        return length
    if window.chunked:
        return (length - 1) % window.size + 1
    return min(window.size, length)


def kv_elements_per_token(cfg: ModelConfig, layer: Layer | None = None) -> int:
    """One layer's cached elements per token: K and V of every KV head (`layer`'s own, else the
    model's), or MLA's latent and the rope key all heads share."""
    if cfg.mla is not None:
        return cfg.mla.kv_lora_rank + cfg.mla.rope_dim
    return 2 * (cfg.kv_heads if layer is None else cfg.kv_heads_of(layer)) * cfg.head_dim


def _attention_flops(
    cfg: ModelConfig, window: Window | None, batch: int, queries: int, length: int
) -> float:
    """Scores and weighted values: 2 x 2 x head_dim FLOPs per query, head and key it sees; MLA's
    the cheaper of its expanded form (q.k over nope + rope dims, then v_head_dim) and its absorbed
    one (q.latent + q.rope key, then the latent)."""
    return batch * cfg.heads * _per_key(cfg) * visible_keys(window, length - queries, queries)


def _per_key(cfg: ModelConfig) -> float:
    """Attention FLOPs per query, head and key it sees."""
    if cfg.mla is not None:
        m = cfg.mla
        return 2.0 * min(m.nope_dim + m.rope_dim + m.v_dim, 2 * m.kv_lora_rank + m.rope_dim)
    return 4.0 * cfg.head_dim


def visible_keys(window: Window | None, first: int, queries: int) -> float:
    """Keys seen, summed over `queries` consecutive queries from position `first`: query p sees
    p + 1 keys, at most a sliding window's size, or p mod C + 1 in chunks of C."""
    if window is not None and window.chunked:
        return float(_chunked_keys(window.size, first + queries) - _chunked_keys(window.size, first))
    last = first + queries  # keys seen by the last query, without a window
    lo = first + 1
    size = None if window is None else window.size
    if size is None or size >= last:
        return (lo + last) * queries / 2
    whole = max(0, size - lo + 1)  # the first queries, which see all their past
    return (lo + lo + whole - 1) * whole / 2 + size * (queries - whole)


def _chunked_keys(chunk: int, n: int) -> int:
    """Keys seen by queries 0 .. n-1 in chunks of `chunk`: 1 + 2 + ... + chunk per whole chunk,
    then 1 + ... + r for the r queries of the last one."""
    whole, r = divmod(n, chunk)
    return whole * chunk * (chunk + 1) // 2 + r * (r + 1) // 2
