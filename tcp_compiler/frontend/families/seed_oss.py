"""Seed-OSS (ByteDance): the Llama block with biases on q, k and v (`attention_bias`, on by default)
but on o only with `attention_out_bias`, the MLP's biases with `mlp_bias`, and head_dim 128 by
default (not hidden / heads). Its attention and residual dropouts act in training only."""

from tcp_compiler.frontend.config import Attention, ModelConfig, RawConfig
from tcp_compiler.frontend.families.common import dense, dense_mlp
from tcp_compiler.frontend.families.registry import family

# SeedOssConfig's defaults (transformers 5.23.0), for the fields a config leaves out
DEFAULTS = {
    "vocab_size": 155136,
    "hidden_size": 4096,
    "intermediate_size": 27648,
    "num_hidden_layers": 64,
    "num_attention_heads": 80,
    "num_key_value_heads": 8,
    "max_position_embeddings": 524288,
    "rms_norm_eps": 1e-6,
    "head_dim": 128,
    "attention_bias": True,
    "attention_out_bias": False,
    "mlp_bias": False,
}


@family("seed_oss", defaults=DEFAULTS, architectures=("SeedOssForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    return dense(
        raw,
        "seed_oss",
        name,
        attention=Attention(
            qkv_bias=bool(raw.get("attention_bias", kind=bool)),
            out_bias=bool(raw.get("attention_out_bias", kind=bool)),
        ),
        mlp=dense_mlp(raw, bias=bool(raw.get("mlp_bias", kind=bool))),
    )
