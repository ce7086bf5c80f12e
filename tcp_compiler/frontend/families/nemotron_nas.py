"""Nemotron-NAS (DeciLM, remote code `modeling_decilm.py`: Llama-3.3-Nemotron-Super-49B,
Llama-3.1-Nemotron-51B): a Llama stack whose layers a neural architecture search cut down, one
`block_configs` entry per layer. Attention is kept with its own KV heads (heads / n_heads_in_group),
skipped (`no_op`: no norm, no cache) or replaced by one [D, D] linear after its norm
(`replace_with_linear`); the MLP likewise, kept at its own width (from `ffn_mult`, as the
published `_ffn_mult_to_intermediate_size` computes it), skipped or replaced."""

from __future__ import annotations

import dataclasses
import math

from tcp_compiler.frontend.config import Attention, LayerPart, ModelConfig, RawConfig
from tcp_compiler.frontend.families.common import dense, dense_mlp
from tcp_compiler.frontend.families.registry import family

FFN_ROUNDING = 256  # DeciLM rounds each MLP width up to a multiple of this


def ffn_width(ffn_mult: float, hidden: int) -> int:
    """An MLP's width from its multiplier, as DeciLM computes it: 2/3 of ffn_mult x hidden (the
    multiplier rounded to 6 decimals first, as its FFNConfig stores it), truncated, then rounded
    up to a multiple of 256."""
    width = int(2 * round(ffn_mult, 6) * hidden / 3)
    return math.ceil(width / FFN_ROUNDING) * FFN_ROUNDING


@family("nemotron-nas", architectures=("DeciLMForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n, heads = raw.require("num_hidden_layers"), raw.require("num_attention_heads")
    hidden = raw.require("hidden_size")
    blocks = raw.require("block_configs", list)
    if len(blocks) != n:
        raise raw.fail(f"block_configs has {len(blocks)} entries but num_hidden_layers is {n}")
    parts = [_block(raw, k, heads, hidden) for k in range(n)]
    kv = next((p[1] for p in parts if p[1] is not None), heads)
    # the model-wide figures (what code without a layer in hand reads): the first layer's that has them
    width = next((p[3] for p in parts if p[3] is not None), 4 * hidden)
    sized = RawConfig({**raw.data, "num_key_value_heads": kv, "intermediate_size": width, "head_dim": None},
                      raw.source, raw.family, raw.prefix)  # fmt: skip
    bias = bool(raw.get("attention_bias", False, kind=bool))
    cfg = dense(
        sized,
        "nemotron-nas",
        name,
        attention=Attention(qkv_bias=bias, out_bias=bias),
        mlp=dense_mlp(raw, bias=bool(raw.get("mlp_bias", False, kind=bool))),
    )
    layers = tuple(
        dataclasses.replace(layer, attention=attn, kv_heads=kv_heads, ffn=ffn, intermediate=inter)
        for layer, (attn, kv_heads, ffn, inter) in zip(cfg.layers, parts, strict=True)
    )
    return dataclasses.replace(cfg, layers=layers)


def _block(
    raw: RawConfig, k: int, heads: int, hidden: int
) -> tuple[LayerPart, int | None, LayerPart, int | None]:
    """Layer k's (attention part, its KV heads, feed-forward part, its width) from block_configs[k]."""
    where = f"block_configs[{k}]"
    entry = raw.get("block_configs")[k]
    if not isinstance(entry, dict):
        raise raw.fail(f"{where}: expected an object with 'attention' and 'ffn', got {type(entry).__name__}")
    attention = RawConfig(entry.get("attention") or {}, raw.source, raw.family, f"{where}.attention.")
    ffn = RawConfig(entry.get("ffn") or {}, raw.source, raw.family, f"{where}.ffn.")
    for key in ("window_length", "num_sink_tokens"):
        if attention.has(key):
            raise attention.fail(f"{attention.path(key)}: windowed and sink attention are not supported, got "
                                 f"{attention.get(key)!r}")  # fmt: skip
    if attention.get("unshifted_sink", False, kind=bool):
        raise attention.fail(f"{attention.path('unshifted_sink')}: sink attention is not supported")
    attn_part = _part(attention)
    kv = None
    if attn_part == "standard":
        group = attention.require("n_heads_in_group", int)
        if heads % group:
            where = attention.path("n_heads_in_group")
            raise attention.fail(f"{where}: expected a divisor of num_attention_heads ({heads}), got {group}")
        kv = heads // group
    ffn_part = _part(ffn)
    width = ffn_width(float(ffn.require("ffn_mult", float)), hidden) if ffn_part == "standard" else None
    return attn_part, kv, ffn_part, width


def _part(sub: RawConfig) -> LayerPart:
    """A block's part: skipped (no_op), replaced by a linear, or kept; not both of the first two."""
    no_op = bool(sub.get("no_op", False, kind=bool))
    linear = bool(sub.get("replace_with_linear", False, kind=bool))
    if no_op and linear:
        raise sub.fail(f"{sub.path('no_op')} and {sub.path('replace_with_linear')} cannot both be true")
    return "skip" if no_op else "linear" if linear else "standard"

