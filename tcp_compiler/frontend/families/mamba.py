"""Mamba (Gu & Dao, 2023): a stack of selective state-space blocks, no attention and no MLP. Each
block is x + mixer(rmsnorm(x)); the mixer projects to x and a gate z (in_proj), runs x through a
causal depthwise convolution and SiLU, makes dt, B and C from it (x_proj, then dt_proj up from
rank time_step_rank), scans, adds D x, gates by silu(z) and projects back (out_proj). Tied
embeddings by default. Checkpoint names are transformers' `backbone.*` (`ssm_tensors`)."""

from __future__ import annotations

import math
from typing import Any

from tcp_compiler.frontend.config import Embedding, Layer, Mlp, ModelConfig, Norms, Positions, RawConfig, Ssm
from tcp_compiler.frontend.families.common import activation, saved_dtype
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."

# MambaConfig's class defaults (transformers 5.23.0), for the fields a config may leave out.
DEFAULTS: dict[str, Any] = dict(
    vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=32, layer_norm_epsilon=1e-5,
    expand=2, conv_kernel=4, use_bias=False, use_conv_bias=True, hidden_act="silu", time_step_rank="auto",
    tie_word_embeddings=True,
)  # fmt: skip


def ssm_tensors() -> TensorMap:
    """Where the canonical names live in transformers' Mamba checkpoints: `backbone.embeddings`,
    each block's `norm` and `mixer.*`, the final `norm_f`; the LM head is `lm_head` as everywhere."""
    return TensorMap(
        (
            (r"model\.embed_tokens\.weight", Rename("backbone.embeddings.weight")),
            (LAYER + r"input_layernorm\.weight", Rename(r"backbone.layers.\1.norm.weight")),
            (LAYER + r"mixer\.(.+)", Rename(r"backbone.layers.\1.mixer.\2")),
            (r"model\.norm\.weight", Rename("backbone.norm_f.weight")),
        )
    )


def ssm_model(raw: RawConfig, name: str, ssm: Ssm) -> ModelConfig:
    """A model of num_hidden_layers Mamba blocks (`ssm` their mixer): RMSNorm before each block and
    at the end (layer_norm_epsilon), no positions. The attention sizes (heads, head_dim) are unused."""
    n = raw.require("num_hidden_layers")
    return ModelConfig(
        name=name,
        family=raw.family,
        vocab=raw.require("vocab_size"),
        hidden=raw.require("hidden_size"),
        heads=1,
        kv_heads=1,
        head_dim=2,
        intermediate=0,
        layers=tuple(Layer(None, None, "rope", False, mixer="mamba", ffn="skip") for _ in range(n)),
        norms=Norms(float(raw.require("layer_norm_epsilon", (int, float)))),
        mlp=Mlp(activation(raw, "silu", "hidden_act")),
        positions=Positions("none"),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", kind=bool))),
        ssm=ssm,
        dtype=saved_dtype(raw, "float32"),
        tensors=ssm_tensors(),
    )


def inner_width(raw: RawConfig, expand: str = "expand") -> int:
    """`expand` x hidden_size, as transformers takes it (int of the product)."""
    return int(raw.require(expand, (int, float)) * raw.require("hidden_size"))


def conv_activation(raw: RawConfig, key: str) -> str:
    """The activation after a Mamba convolution (`key`, silu by default): an IR unary op."""
    act = activation(raw, "silu", key)
    if act == "relu2":
        raise raw.fail(f"{raw.path(key)}: relu2 is an MLP activation, not supported after the convolution")
    return act


def time_step_rank(raw: RawConfig, key: str = "time_step_rank") -> int:
    """dt's rank (`key`), or for "auto" ceil(hidden_size / 16) as transformers sets it."""
    rank = raw.require(key, (int, str))
    return math.ceil(raw.require("hidden_size") / 16) if rank == "auto" else rank


def mamba1(raw: RawConfig, name: str, bcdt_norm_eps: float | None = None) -> ModelConfig:
    """Mamba-1's blocks; Falcon-Mamba passes the eps of its RMSNorms on B, C and dt."""
    ssm = Ssm(
        "mamba",
        inner=inner_width(raw),
        state=raw.require("state_size"),
        conv_kernel=raw.require("conv_kernel"),
        dt_rank=time_step_rank(raw),
        conv_bias=bool(raw.get("use_conv_bias", kind=bool)),
        proj_bias=bool(raw.get("use_bias", kind=bool)),
        bcdt_norm_eps=bcdt_norm_eps,
        activation=conv_activation(raw, "hidden_act"),
    )
    return ssm_model(raw, name, ssm)


@family("mamba", defaults=DEFAULTS, architectures=("MambaForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    return mamba1(raw, name)
