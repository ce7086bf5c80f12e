"""Where each weight the graph builder asks for lives in a family's checkpoint, and in what layout.

The builder names weights in one canonical scheme: Llama's Hugging Face names and [out, in]
layouts (`model.layers.{i}.self_attn.q_proj.weight`, `...mlp.up_proj.weight`, ...), `.bias`
twins of each, `model.embed_positions.weight` for learned positions and `model.embed_norm.*`
for a norm after the embedding. A family whose checkpoint differs lists rules that find each
tensor: renamed, transposed from GPT-2's Conv1D [in, out], cut out of a fused QKV projection or
a fused [gate; up] (Phi-3), with leading rows dropped (OPT's position table starts at row 2),
or one expert's slice of a tensor stacking every expert (gpt-oss).
The builder stays family-blind.

Rules are small picklable records (a model config crosses process boundaries in sweeps).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

Getter = Callable[[str], np.ndarray]
Shape = tuple[int, ...]


def _same(shape: Shape) -> Shape:
    return shape


@dataclass(frozen=True)
class Source:
    """The checkpoint tensors a canonical weight is made from, and how to make it from them."""

    tensors: tuple[str, ...]
    load: Callable[[Getter], np.ndarray]
    stored: Callable[[Shape], Shape] = _same  # canonical shape -> the shape each tensor has on disk


@dataclass(frozen=True)
class Rename:
    """The tensor `target` (a regex template: \\1 is the pattern's first group), as it is."""

    target: str
    transpose: bool = False  # GPT-2's Conv1D stores [in, out]
    skip_rows: int = 0
    unit_axis: bool = False  # stored with a leading axis of 1 (ERNIE 4.5's [1, E] correction bias)

    def source(self, match: re.Match[str]) -> Source:
        name = match.expand(self.target)

        def load(get: Getter) -> np.ndarray:
            w = get(name)
            w = w[0] if self.unit_axis else w
            w = w.T if self.transpose else w
            return w[self.skip_rows :] if self.skip_rows else w

        def stored(shape: Shape) -> Shape:
            shape = (shape[0] + self.skip_rows, *shape[1:]) if shape and self.skip_rows else shape
            shape = shape[::-1] if self.transpose else shape
            return (1, *shape) if self.unit_axis else shape

        return Source((name,), load, stored)


@dataclass(frozen=True)
class FusedQkv:
    """Part `part` (q, k or v; a template like `target`) of a fused QKV projection (weight or bias),
    rows ordered by `order`:

    - "blocks": all q rows, then all k rows, then all v rows (GPT-2, Falcon multi-query);
    - "per_head": per head its q, k and v rows, (H, 3, K) (BLOOM, GPT-NeoX; needs H == Hkv);
    - "grouped": per KV head its G query heads, then its k and v rows, (Hkv, G + 2, K)
      (Falcon's new decoder architecture).
    """

    target: str
    part: str
    order: str
    heads: int
    kv_heads: int
    head_dim: int
    transpose: bool = False

    def source(self, match: re.Match[str]) -> Source:
        name, part = match.expand(self.target), "qkv".index(match.expand(self.part))

        def load(get: Getter) -> np.ndarray:
            w = get(name)
            return split_qkv(
                w.T if self.transpose else w, self.order, self.heads, self.kv_heads, self.head_dim
            )[part]

        def stored(shape: Shape) -> Shape:
            fused = ((self.heads + 2 * self.kv_heads) * self.head_dim, *shape[1:])
            return fused[::-1] if self.transpose else fused

        return Source((name,), load, stored)


@dataclass(frozen=True)
class Chunk:
    """Block `index` (a template like `target`, or a number) of `parts` equal blocks of rows of the
    tensor `target`: Phi-3's gate_up_proj is [gate; up], torch.chunk(2) of its output. With
    `interleaved`, every `parts`-th row from `index` instead: Phi-3-small's up_proj alternates
    gate and up rows."""

    target: str
    index: str
    parts: int
    interleaved: bool = False

    def source(self, match: re.Match[str]) -> Source:
        name, index = match.expand(self.target), int(match.expand(self.index))

        def load(get: Getter) -> np.ndarray:
            w = get(name)
            if self.interleaved:
                return w[index :: self.parts]
            n = w.shape[0] // self.parts
            return w[index * n : (index + 1) * n]

        def stored(shape: Shape) -> Shape:
            return (shape[0] * self.parts, *shape[1:])

        return Source((name,), load, stored)


@dataclass(frozen=True)
class Expert:
    """One expert's [out, in] weight (or [out] bias) from `target`, a tensor stacking all `experts`
    as [E, in, out] (or [E, out]), as gpt-oss and Llama 4 store them, or as [E, out, in] with
    `out_in` (Granite 4's input_linear / output_linear); with `parts` > 1 the out axis holds that
    many projections and this one is part `part`: every `parts`-th column from `part` when
    `interleaved` (gpt-oss's gate_up_proj: gate at even columns, up at odd), else the `part`-th
    block of columns (Llama 4's and Granite's: gate, then up). `expert` and `target` are templates."""

    target: str
    expert: str
    experts: int
    part: int = 0
    parts: int = 1
    interleaved: bool = True
    out_in: bool = False

    def source(self, match: re.Match[str]) -> Source:
        name, e = match.expand(self.target), int(match.expand(self.expert))

        def load(get: Getter) -> np.ndarray:
            w = get(name)[e]
            w = w.T if self.out_in else w  # now [in, out] (or [out])
            if self.interleaved:
                return w[..., self.part :: self.parts].T
            n = w.shape[-1] // self.parts
            return w[..., self.part * n : (self.part + 1) * n].T

        def stored(shape: Shape) -> Shape:
            if self.out_in:
                return (self.experts, shape[0] * self.parts, *shape[1:])
            return (self.experts, *shape[1:], shape[0] * self.parts)

        return Source((name,), load, stored)


Rule = Rename | FusedQkv | Chunk | Expert


def split_qkv(
    w: np.ndarray, order: str, heads: int, kv_heads: int, head_dim: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q [H*K, ...], k and v [Hkv*K, ...] from a fused projection's leading axis laid out by `order`."""
    H, Hkv, K, rest = heads, kv_heads, head_dim, w.shape[1:]
    if w.shape[0] != (H + 2 * Hkv) * K:
        raise ValueError(f"fused QKV has {w.shape[0]} rows, expected (H + 2 Hkv) K = {(H + 2 * Hkv) * K}")
    if order == "blocks":
        return w[: H * K], w[H * K : (H + Hkv) * K], w[(H + Hkv) * K :]
    if order == "per_head":
        x = w.reshape(H, 3, K, *rest)
        return tuple(x[:, i].reshape(H * K, *rest) for i in range(3))  # type: ignore[return-value]
    if order == "grouped":
        G = H // Hkv
        x = w.reshape(Hkv, G + 2, K, *rest)
        return (
            x[:, :G].reshape(H * K, *rest),
            x[:, G].reshape(Hkv * K, *rest),
            x[:, G + 1].reshape(Hkv * K, *rest),
        )
    raise ValueError(f"unknown fused QKV order {order!r}")


@dataclass(frozen=True)
class TensorMap:
    """Canonical weight name -> checkpoint source, by the first rule whose pattern matches the whole
    name; names no rule matches are read as they are (the Llama-style families need no rules)."""

    rules: tuple[tuple[str, Rule], ...] = ()

    def source(self, name: str) -> Source:
        for pattern, rule in self.rules:
            match = _compiled(pattern).fullmatch(name)
            if match is not None:
                return rule.source(match)
        return Source((name,), lambda get: get(name))


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


IDENTITY = TensorMap()
