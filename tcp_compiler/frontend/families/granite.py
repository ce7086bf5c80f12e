"""Granite (3.x): Llama-shaped with four multipliers: embeddings times embedding_multiplier,
attention scores times attention_multiplier (instead of 1/sqrt(head_dim)), each branch's output
times residual_multiplier before it joins the residual, logits divided by logits_scaling."""

from typing import Any

from tcp_compiler.frontend.config import Attention, Embedding, ModelConfig, RawConfig, Residual
from tcp_compiler.frontend.families.common import dense, dense_mlp
from tcp_compiler.frontend.families.registry import family


def multipliers(raw: RawConfig) -> dict[str, Any]:
    """The attention, residual and embedding groups of a Granite model (3.x and 4's hybrids): its
    four multipliers, attention_bias on q, k, v and o, tie_word_embeddings (default untied)."""
    bias = bool(raw.get("attention_bias", False, kind=bool))
    embed = float(raw.get("embedding_multiplier", 1.0, kind=(int, float)))
    return dict(
        attention=Attention(
            qkv_bias=bias, out_bias=bias, scale=float(raw.get("attention_multiplier", 1.0, kind=(int, float)))
        ),
        residual=Residual(branch_scale=float(raw.get("residual_multiplier", 1.0, kind=(int, float)))),
        embedding=Embedding(
            scale=None if embed == 1.0 else embed,
            tied=bool(raw.get("tie_word_embeddings", False, kind=bool)),
            logits_divisor=float(raw.get("logits_scaling", 1.0, kind=(int, float))),
        ),
    )


@family("granite", architectures=("GraniteForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    mlp = dense_mlp(raw, bias=bool(raw.get("mlp_bias", False, kind=bool)))
    return dense(raw, "granite", name, mlp=mlp, **multipliers(raw))
