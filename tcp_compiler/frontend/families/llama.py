"""Llama 2 / 3 / 3.1 / 3.2: the reference family (llama3 RoPE scaling included); attention_bias
puts biases on q, k, v and o, mlp_bias on the MLP's three projections."""

from tcp_compiler.frontend.config import Attention, ModelConfig, RawConfig
from tcp_compiler.frontend.families.common import dense, dense_mlp
from tcp_compiler.frontend.families.registry import family


@family("llama", architectures=("LlamaForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    bias = bool(raw.get("attention_bias", False, kind=bool))
    return dense(
        raw,
        "llama",
        name,
        attention=Attention(qkv_bias=bias, out_bias=bias),
        mlp=dense_mlp(raw, bias=bool(raw.get("mlp_bias", False, kind=bool))),
    )
