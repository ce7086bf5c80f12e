"""Gemma 1: a Llama-shaped decoder with (1 + w) RMSNorms, embeddings scaled by sqrt(hidden) (in the
table's dtype), a GELU-tanh gated MLP, head_dim set on its own (256 by default, not hidden / heads)
and tied embeddings. transformers reads the published configs' legacy `hidden_act: "gelu"` as the
tanh approximation (GemmaConfig.__post_init__), and so does this reader."""

from tcp_compiler.frontend.config import Attention, Embedding, Mlp, ModelConfig, RawConfig
from tcp_compiler.frontend.families.common import activation, dense, rms_norms
from tcp_compiler.frontend.families.registry import family


@family("gemma")
def read(raw: RawConfig, name: str) -> ModelConfig:
    legacy_gelu = raw.get("hidden_act", kind=str) == "gelu"
    bias = bool(raw.get("attention_bias", False, kind=bool))
    return dense(
        raw,
        "gemma",
        name,
        head_dim_default=256,
        norms=rms_norms(raw, offset=1.0),
        mlp=Mlp("gelu_tanh" if legacy_gelu else activation(raw, "gelu_pytorch_tanh", "hidden_act")),
        attention=Attention(qkv_bias=bias, out_bias=bias),
        embedding=Embedding(
            scale=float(raw.require("hidden_size")) ** 0.5,
            scale_in_table_dtype=True,
            tied=bool(raw.get("tie_word_embeddings", True, kind=bool)),
        ),
    )
