"""GPT-J: attention and a plain GELU-tanh MLP in parallel off one LayerNorm (with bias), RoPE on
the first `rotary_dim` dims of each head, rotating interleaved pairs (x0, x1), (x2, x3), ... with
base 10000 (no config field), no attention biases, MLP biases, and an untied LM head with a bias."""

from tcp_compiler.frontend.config import (
    Attention,
    Embedding,
    Mlp,
    ModelConfig,
    Norms,
    Positions,
    RawConfig,
    Residual,
    Rope,
)
from tcp_compiler.frontend.families.common import activation, first, head_size, layers, saved_dtype
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"transformer.h.\1."
THETA = 10000.0  # create_sinusoidal_positions' base in transformers' modeling_gptj, fixed


@family("gptj")
def read(raw: RawConfig, name: str) -> ModelConfig:
    hidden = first(raw, "n_embd", "hidden_size")
    heads = first(raw, "n_head", "num_attention_heads")
    head_dim = head_size(raw, hidden, heads, "n_embd", "n_head")
    if "rotary_dim" in raw.data and raw.data["rotary_dim"] is None:
        raise raw.fail("rotary_dim: null is not supported (transformers' GPT-J then rotates n_embd dims)")
    rotary = raw.get("rotary_dim", 64, kind=int)
    if rotary % 2 or rotary > head_dim:
        raise raw.fail(f"rotary_dim: expected an even count up to the head size {head_dim}, got {rotary}")
    if raw.get("tie_word_embeddings", False, kind=bool):
        raise raw.fail(
            "tie_word_embeddings: true is not supported for gptj (its LM head has a bias of its own)"
        )
    tensors = TensorMap(
        (
            (r"model\.embed_tokens\.weight", Rename("transformer.wte.weight")),
            (LAYER + r"input_layernorm\.(weight|bias)", Rename(PREFIX + r"ln_1.\2")),
            (LAYER + r"self_attn\.([qkv])_proj\.weight", Rename(PREFIX + r"attn.\2_proj.weight")),
            (LAYER + r"self_attn\.o_proj\.weight", Rename(PREFIX + r"attn.out_proj.weight")),
            (LAYER + r"mlp\.up_proj\.(weight|bias)", Rename(PREFIX + r"mlp.fc_in.\2")),
            (LAYER + r"mlp\.down_proj\.(weight|bias)", Rename(PREFIX + r"mlp.fc_out.\2")),
            (r"model\.norm\.(weight|bias)", Rename(r"transformer.ln_f.\1")),
        )
    )
    n = first(raw, "n_layer", "num_hidden_layers")
    inner = raw.get("n_inner", kind=int)
    return ModelConfig(
        name=name,
        family="gptj",
        vocab=raw.require("vocab_size"),
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        head_dim=head_dim,
        intermediate=4 * hidden if inner is None else inner,
        layers=layers(raw, ["full_attention"] * n, None, {"default": Rope(THETA)}),
        norms=Norms(float(raw.get("layer_norm_epsilon", 1e-5, kind=(int, float))), "layer", parallel=1),
        mlp=Mlp(activation(raw, "gelu_new", "activation_function"), "plain", bias=True),
        residual=Residual("parallel"),
        positions=Positions(rotary_dim=rotary, interleave=True),
        attention=Attention(),
        embedding=Embedding(head_bias=True),
        max_positions=first(raw, "n_positions", "max_position_embeddings", default=2048),
        dtype=saved_dtype(raw, "float32"),
        tensors=tensors,
    )
