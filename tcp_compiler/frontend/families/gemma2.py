"""Gemma 2: Gemma 3's sandwich (1 + w) RMSNorms, scaled embeddings, GELU-tanh MLP and
query_pre_attn_scalar, without its q/k norms; sliding and global layers alternating (even layers
slide) under one RoPE; attention scores and the final logits soft-capped as cap * tanh(x / cap)."""

from tcp_compiler.frontend.config import Attention, Embedding, Mlp, ModelConfig, RawConfig, read_rope
from tcp_compiler.frontend.families.common import activation, layer_types, layers, rms_norms, sizes
from tcp_compiler.frontend.families.registry import family

# Gemma2Config's defaults for the caps: a config that leaves them out is capped, one that sets
# them to null is not.
CAPS = {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}


@family(
    "gemma2",
    defaults={"num_attention_heads": 8, "num_key_value_heads": 4},
    architectures=("Gemma2ForCausalLM",),
)
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    types = layer_types(raw, ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)])
    fields = sizes(raw, head_dim_default=256)
    bias = bool(raw.get("attention_bias", False, kind=bool))
    attn_cap, final_cap = (_cap(raw, key) for key in CAPS)
    return ModelConfig(
        name=name,
        family="gemma2",
        norms=rms_norms(raw, offset=1.0, sandwich=True),
        mlp=Mlp(activation(raw, "gelu_pytorch_tanh", "hidden_activation", "hidden_act")),
        layers=layers(raw, types, raw.get("sliding_window", 4096, kind=int), {"default": read_rope(raw)}),
        attention=Attention(
            qkv_bias=bias,
            out_bias=bias,
            scale=float(raw.get("query_pre_attn_scalar", 256, kind=(int, float))) ** -0.5,
            softcap=attn_cap,
        ),
        embedding=Embedding(
            scale=float(fields["hidden"]) ** 0.5,
            scale_in_table_dtype=True,
            tied=bool(raw.get("tie_word_embeddings", True, kind=bool)),
            logits_softcap=final_cap,
        ),
        **fields,
    )


def _cap(raw: RawConfig, key: str) -> float | None:
    """The cap under `key`: its default when the key is absent, None (no capping) when null."""
    if key not in raw.data:
        return CAPS[key]
    value = raw.get(key, kind=float)
    return None if value is None else float(value)
