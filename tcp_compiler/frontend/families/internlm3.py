"""InternLM3: the Llama block as transformers runs it (InternLM3Config over LlamaForCausalLM), with
InternLM's field names for the biases: `qkv_bias` is attention_bias (q, k, v and o) and `bias` is
mlp_bias, as the config's attribute_map reads them; InternLM3Config's defaults (2 KV heads,
head_dim 128, ...) for the fields a config leaves out."""

from tcp_compiler.frontend.config import Attention, ModelConfig, RawConfig
from tcp_compiler.frontend.families.common import dense, dense_mlp, first
from tcp_compiler.frontend.families.registry import family

# InternLM3Config's defaults (transformers 5.23.0)
DEFAULTS = {
    "vocab_size": 128512,
    "hidden_size": 4096,
    "intermediate_size": 10240,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-5,
    "head_dim": 128,
}


@family("internlm3", defaults=DEFAULTS, architectures=("InternLM3ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    bias = bool(first(raw, "qkv_bias", "attention_bias", default=False, kind=bool))
    mlp_bias = bool(first(raw, "bias", "mlp_bias", default=False, kind=bool))
    return dense(
        raw,
        "internlm3",
        name,
        attention=Attention(qkv_bias=bias, out_bias=bias),
        mlp=dense_mlp(raw, bias=mlp_bias),
    )
