"""OLMo 2: Llama-shaped, but each block norms its branches' outputs instead of their inputs
(x + norm(attn(x)), then x + norm(mlp(x)); no pre-norms), and q and k get an RMSNorm over all
heads at once (weights of heads x head_dim), after the projection and before RoPE."""

from tcp_compiler.frontend.config import ModelConfig, RawConfig
from tcp_compiler.frontend.families.common import dense

MODEL_TYPES = ("olmo2",)


def read(raw: RawConfig, name: str) -> ModelConfig:
    bias = bool(raw.get("attention_bias", False, kind=bool))
    return dense(
        raw,
        "olmo2",
        name,
        qk_norm=True,
        qk_norm_all_heads=True,
        sandwich_norms=True,
        pre_norms=False,
        qkv_bias=bias,
        out_bias=bias,
    )
