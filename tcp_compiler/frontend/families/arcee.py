"""Arcee (AFM-4.5B): Llama-shaped with a plain MLP, down(act(up(x))), whose activation defaults to
ReLU squared (ArceeConfig's hidden_act "relu2"); attention_bias on q, k, v and o, mlp_bias on up
and down; the published model uses yarn RoPE."""

from tcp_compiler.frontend.config import Attention, Mlp, ModelConfig, RawConfig
from tcp_compiler.frontend.families.common import activation, dense
from tcp_compiler.frontend.families.registry import family


@family("arcee", defaults={"rms_norm_eps": 1e-5}, architectures=("ArceeForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    bias = bool(raw.get("attention_bias", False, kind=bool))
    return dense(
        raw,
        "arcee",
        name,
        attention=Attention(qkv_bias=bias, out_bias=bias),
        mlp=Mlp(activation(raw, "relu2", "hidden_act"), "plain", bool(raw.get("mlp_bias", False, kind=bool))),
    )
