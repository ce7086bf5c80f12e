"""Cohere (Command-R) and Cohere 2 (Command R7B, Command A, Aya Expanse's successors): attention and
a gated SiLU MLP in parallel off one LayerNorm without bias, RoPE on interleaved pairs (x0, x1),
(x2, x3), ..., logits times `logit_scale`, tied embeddings. Cohere optionally norms q and k
(`use_qk_norm`: a LayerNorm over each head with a weight per head). Cohere 2 alternates sliding
layers with global ones (every `sliding_window_pattern`-th, 4 by default) and, as transformers'
Cohere2Attention does, rotates queries and keys on the sliding layers only."""

import dataclasses

from tcp_compiler.frontend.config import (
    Attention,
    Embedding,
    Layer,
    ModelConfig,
    Norms,
    Positions,
    RawConfig,
    Residual,
    read_rope,
)
from tcp_compiler.frontend.families.common import dense_mlp, head_size, layer_types, layers, sizes
from tcp_compiler.frontend.families.registry import family


@family("cohere")
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    qk_norm = "each_head" if raw.get("use_qk_norm", False, kind=bool) else "none"
    return _model(
        raw, name, "cohere", layers(raw, ["full_attention"] * n, None, {"default": read_rope(raw)}), qk_norm
    )


@family("cohere2")
def read2(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    pattern = raw.get("sliding_window_pattern", raw.get("_sliding_window_pattern", 4), kind=int)
    types = layer_types(
        raw, ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    )
    built = layers(raw, types, raw.get("sliding_window", 4096, kind=int), {"default": read_rope(raw)})
    # global layers attend without positions (NoPE)
    nope = tuple(
        dataclasses.replace(layer, rope=None) if t == "full_attention" else layer
        for layer, t in zip(built, types, strict=True)
    )
    # Cohere2Config sets head_dim to hidden / heads whatever the file says
    return _model(
        raw,
        name,
        "cohere2",
        nope,
        "none",
        head_dim=head_size(raw, raw.require("hidden_size"), raw.require("num_attention_heads")),
    )


def _model(
    raw: RawConfig, name: str, family_name: str, built: tuple[Layer, ...], qk_norm: str, **fixed: int
) -> ModelConfig:
    bias = bool(raw.get("attention_bias", False, kind=bool))
    return ModelConfig(
        name=name,
        family=family_name,
        layers=built,
        norms=Norms(
            float(raw.get("layer_norm_eps", 1e-5, kind=(int, float))), "layer", bias=False, parallel=1
        ),
        mlp=dense_mlp(raw),
        residual=Residual("parallel"),
        positions=Positions(interleave=True),
        attention=Attention(qkv_bias=bias, out_bias=bias, qk_norm=qk_norm),
        embedding=Embedding(
            tied=bool(raw.get("tie_word_embeddings", True, kind=bool)),
            logits_divisor=1.0 / float(raw.get("logit_scale", 0.0625, kind=(int, float))),
        ),
        **{**sizes(raw), **fixed},
    )
