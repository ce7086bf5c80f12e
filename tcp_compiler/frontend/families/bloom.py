"""BLOOM: ALiBi position biases (no position embeddings), a LayerNorm right after the embedding,
pre-LayerNorm blocks, plain GELU (tanh) MLP 4x wide, fused per-head QKV, biases everywhere, tied
embeddings. `apply_residual_connection_post_layernorm` takes the residual from the norm's output."""

from tcp_compiler.frontend.config import (
    Attention,
    Embedding,
    Mlp,
    ModelConfig,
    Norms,
    Positions,
    RawConfig,
    Residual,
)
from tcp_compiler.frontend.families.common import first, head_size, saved_dtype, without_rope
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import FusedQkv, Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"transformer.h.\1."


@family("bloom", architectures=("BloomForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    hidden = first(raw, "hidden_size", "n_embed")
    heads = first(raw, "n_head", "num_attention_heads")
    head_dim = head_size(raw, hidden, heads, "hidden_size", "n_head")
    tensors = TensorMap(
        (
            (r"model\.embed_tokens\.weight", Rename("transformer.word_embeddings.weight")),
            (r"model\.embed_norm\.(weight|bias)", Rename(r"transformer.word_embeddings_layernorm.\1")),
            (LAYER + r"(input_layernorm|post_attention_layernorm)\.(weight|bias)", Rename(PREFIX + r"\2.\3")),
            (
                LAYER + r"self_attn\.([qkv])_proj\.(weight|bias)",
                FusedQkv(
                    PREFIX + r"self_attention.query_key_value.\3", r"\2", "per_head", heads, heads, head_dim
                ),
            ),
            (LAYER + r"self_attn\.o_proj\.(weight|bias)", Rename(PREFIX + r"self_attention.dense.\2")),
            (LAYER + r"mlp\.up_proj\.(weight|bias)", Rename(PREFIX + r"mlp.dense_h_to_4h.\2")),
            (LAYER + r"mlp\.down_proj\.(weight|bias)", Rename(PREFIX + r"mlp.dense_4h_to_h.\2")),
            (r"model\.norm\.(weight|bias)", Rename(r"transformer.ln_f.\1")),
        )
    )
    return ModelConfig(
        name=name,
        family="bloom",
        vocab=raw.require("vocab_size"),
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        head_dim=head_dim,
        intermediate=4 * hidden,
        layers=without_rope(first(raw, "n_layer", "num_hidden_layers")),
        norms=Norms(float(raw.get("layer_norm_epsilon", 1e-5, kind=(int, float))), "layer", embed=True),
        # bloom_gelu_forward: the tanh approximation, no config field
        mlp=Mlp("gelu_tanh", "plain", bias=True),
        residual=Residual(
            from_norm=bool(raw.get("apply_residual_connection_post_layernorm", False, kind=bool))
        ),
        positions=Positions("alibi"),
        attention=Attention(qkv_bias=True, out_bias=True),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", True, kind=bool))),
        dtype=saved_dtype(raw, "bfloat16"),
        tensors=tensors,
    )
