"""OLMo 2: Llama-shaped, but each block norms its branches' outputs instead of their inputs
(x + norm(attn(x)), then x + norm(mlp(x)); no pre-norms), and q and k get an RMSNorm over all
heads at once (weights of heads x head_dim), after the projection and before RoPE."""

from tcp_compiler.frontend.config import Attention, ModelConfig, RawConfig
from tcp_compiler.frontend.families.common import dense, rms_norms
from tcp_compiler.frontend.families.registry import family


@family("olmo2", architectures=("Olmo2ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    bias = bool(raw.get("attention_bias", False, kind=bool))
    return dense(
        raw,
        "olmo2",
        name,
        norms=rms_norms(raw, sandwich=True, pre=False),
        attention=Attention(qkv_bias=bias, out_bias=bias, qk_norm="all_heads"),
    )
