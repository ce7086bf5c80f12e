"""OPT: learned positions (the table's first 2 rows are unused: positions start at offset 2),
LayerNorm before (do_layer_norm_before, most sizes) or after (post-LN, e.g. OPT-350m) each block,
plain ReLU MLP, biases everywhere, tied embeddings."""

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
from tcp_compiler.frontend.families.common import activation, head_size, saved_dtype, without_rope
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"model.decoder.layers.\1."
POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding's offset


@family("opt", architectures=("OPTForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    hidden, heads = raw.require("hidden_size"), raw.require("num_attention_heads")
    if raw.get("word_embed_proj_dim", hidden, kind=int) != hidden:
        raise raw.fail(
            f"word_embed_proj_dim ({raw.get('word_embed_proj_dim')}) differs from hidden_size ({hidden}); "
            f"the project_in / project_out layers (OPT-350m) are not supported"
        )
    if raw.get("layer_norm_elementwise_affine", True, kind=bool) is False:
        raise raw.fail("field 'layer_norm_elementwise_affine' = false is not supported")
    head_dim = head_size(raw, hidden, heads)
    before = bool(raw.get("do_layer_norm_before", True, kind=bool))
    bias = bool(raw.get("enable_bias", True, kind=bool))
    tensors = TensorMap(
        (
            (r"model\.embed_tokens\.weight", Rename("model.decoder.embed_tokens.weight")),
            (
                r"model\.embed_positions\.weight",
                Rename("model.decoder.embed_positions.weight", skip_rows=POSITION_OFFSET),
            ),
            (LAYER + r"input_layernorm\.(weight|bias)", Rename(PREFIX + r"self_attn_layer_norm.\2")),
            (LAYER + r"post_attention_layernorm\.(weight|bias)", Rename(PREFIX + r"final_layer_norm.\2")),
            (LAYER + r"self_attn\.([qkv])_proj\.(weight|bias)", Rename(PREFIX + r"self_attn.\2_proj.\3")),
            (LAYER + r"self_attn\.o_proj\.(weight|bias)", Rename(PREFIX + r"self_attn.out_proj.\2")),
            (LAYER + r"mlp\.up_proj\.(weight|bias)", Rename(PREFIX + r"fc1.\2")),
            (LAYER + r"mlp\.down_proj\.(weight|bias)", Rename(PREFIX + r"fc2.\2")),
            (r"model\.norm\.(weight|bias)", Rename(r"model.decoder.final_layer_norm.\1")),
        )
    )
    return ModelConfig(
        name=name,
        family="opt",
        vocab=raw.require("vocab_size"),
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        head_dim=head_dim,
        intermediate=raw.require("ffn_dim"),
        layers=without_rope(raw.require("num_hidden_layers")),
        norms=Norms(
            1e-5,  # nn.LayerNorm's default; OPT configs have no field for it
            "layer",
            final=before and not raw.get("_remove_final_layer_norm", False, kind=bool),
        ),
        mlp=Mlp(activation(raw, "relu", "activation_function"), "plain", bias),
        residual=Residual("pre" if before else "post"),
        positions=Positions("learned"),
        attention=Attention(qkv_bias=bias, out_bias=bias),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", True, kind=bool))),
        max_positions=raw.require("max_position_embeddings"),
        dtype=saved_dtype(raw, "float16"),
        tensors=tensors,
    )
