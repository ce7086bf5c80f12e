"""Phi-1 / Phi-1.5 / Phi-2: one LayerNorm feeding attention and MLP in parallel (x + attn + mlp),
RoPE on the first partial_rotary_factor of each head (rotate-half pairs), biases on q, k, v, the
output `dense`, the plain GELU MLP (fc1, fc2) and the untied LM head."""

from tcp_compiler.frontend.config import (
    Attention,
    Embedding,
    Mlp,
    ModelConfig,
    Norms,
    Positions,
    RawConfig,
    Residual,
    read_rope,
)
from tcp_compiler.frontend.families.common import activation, layers, partial_rotary, saved_dtype, sizes
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"model.layers.\1."
# PhiConfig's defaults for fields a config may leave out.
DEFAULTS = {"partial_rotary_factor": 0.5, "max_position_embeddings": 2048}


@family("phi", defaults=DEFAULTS, architectures=("PhiForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    if raw.get("qk_layernorm", False, kind=bool):
        raise raw.fail("field 'qk_layernorm' = true is not supported (LayerNorm on q and k)")
    fields = sizes(raw)
    rotary = partial_rotary(raw, fields["head_dim"])  # PhiConfig's default 0.5 comes from DEFAULTS
    tensors = TensorMap(
        (
            (LAYER + r"self_attn\.o_proj\.(weight|bias)", Rename(PREFIX + r"self_attn.dense.\2")),
            (LAYER + r"mlp\.up_proj\.(weight|bias)", Rename(PREFIX + r"mlp.fc1.\2")),
            (LAYER + r"mlp\.down_proj\.(weight|bias)", Rename(PREFIX + r"mlp.fc2.\2")),
            (r"model\.norm\.(weight|bias)", Rename(r"model.final_layernorm.\1")),
        )
    )
    n = raw.require("num_hidden_layers")
    fields.update(dtype=saved_dtype(raw, "float32"))
    return ModelConfig(
        name=name,
        family="phi",
        layers=layers(raw, ["full_attention"] * n, None, {"default": read_rope(raw)}),
        norms=Norms(float(raw.get("layer_norm_eps", 1e-5, kind=(int, float))), "layer", parallel=1),
        mlp=Mlp(activation(raw, "gelu_new", "hidden_act"), "plain", bias=True),
        residual=Residual("parallel"),
        positions=Positions(rotary_dim=rotary),
        attention=Attention(qkv_bias=True, out_bias=True),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", False, kind=bool)), head_bias=True),
        tensors=tensors,
        **fields,
    )
