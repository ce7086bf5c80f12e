"""StarCoder 2: LayerNorm with bias (norm_epsilon), biases on every projection (use_bias), a plain
GELU-tanh MLP (c_fc, then c_proj), GQA with RoPE, a sliding window on every layer when set, tied
embeddings."""

from tcp_compiler.frontend.config import Attention, Embedding, Mlp, ModelConfig, Norms, RawConfig, read_rope
from tcp_compiler.frontend.families.common import activation, dense, layer_types, layers
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
TENSORS = TensorMap(
    (
        (LAYER + r"mlp\.up_proj\.(weight|bias)", Rename(r"model.layers.\1.mlp.c_fc.\2")),
        (LAYER + r"mlp\.down_proj\.(weight|bias)", Rename(r"model.layers.\1.mlp.c_proj.\2")),
    )
)


@family("starcoder2", defaults={"num_key_value_heads": 2}, architectures=("Starcoder2ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    window = raw.get("sliding_window", kind=int)
    types = layer_types(raw, ["sliding_attention" if window else "full_attention"] * n)
    bias = bool(raw.get("use_bias", True, kind=bool))
    return dense(
        raw,
        "starcoder2",
        name,
        layers=layers(raw, types, window, {"default": read_rope(raw)}),
        norms=Norms(float(raw.get("norm_epsilon", 1e-5, kind=(int, float))), "layer"),
        mlp=Mlp(activation(raw, "gelu_pytorch_tanh", "hidden_act"), "plain", bias),
        attention=Attention(qkv_bias=bias, out_bias=bias),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", True, kind=bool))),
        tensors=TENSORS,
    )
