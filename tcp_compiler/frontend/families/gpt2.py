"""GPT-2: learned absolute positions, pre-LayerNorm blocks, plain GELU (tanh) MLP, biases on every
projection, tied embeddings. Its Conv1D layers store weights [in, out] and fuse q, k and v in one
`c_attn`, so the tensor map transposes and splits them."""

from tcp_compiler.frontend.config import Attention, Embedding, Mlp, ModelConfig, Norms, Positions, RawConfig
from tcp_compiler.frontend.families.common import activation, first, head_size, saved_dtype, without_rope
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import FusedQkv, Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"transformer.h.\1."


@family("gpt2", architectures=("GPT2LMHeadModel",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    if raw.get("scale_attn_by_inverse_layer_idx", False, kind=bool):
        raise raw.fail("field 'scale_attn_by_inverse_layer_idx' = true is not supported")
    heads = first(raw, "n_head", "num_attention_heads")
    return gpt2_block(raw, name, "gpt2", heads, "blocks", conv1d=True, act="gelu_new", positions=None)


def gpt2_block(
    raw: RawConfig, name: str, family: str, kv_heads: int, order: str, conv1d: bool, act: str,
    positions: int | None,
) -> ModelConfig:
    """GPT-2's block as GPT-2 and its descendants (GPTBigCode) spell it: `kv_heads` K/V heads in
    `c_attn` in `order` (FusedQkv), Conv1D ([in, out]) weights when `conv1d`, `act` the default
    activation, `positions` the default position limit (None: the config must say)."""
    if raw.get("add_cross_attention", False, kind=bool):
        raise raw.fail("field 'add_cross_attention' = true is not supported (decoder-only models)")
    hidden, heads = first(raw, "n_embd", "hidden_size"), first(raw, "n_head", "num_attention_heads")
    head_dim = head_size(raw, hidden, heads, "n_embd", "n_head")
    qkv = FusedQkv(PREFIX + r"attn.c_attn.\3", r"\2", order, heads, kv_heads, head_dim, transpose=conv1d)
    tensors = TensorMap(
        (
            (r"model\.embed_tokens\.weight", Rename("transformer.wte.weight")),
            (r"model\.embed_positions\.weight", Rename("transformer.wpe.weight")),
            (LAYER + r"input_layernorm\.(weight|bias)", Rename(PREFIX + r"ln_1.\2")),
            (LAYER + r"post_attention_layernorm\.(weight|bias)", Rename(PREFIX + r"ln_2.\2")),
            (LAYER + r"self_attn\.([qkv])_proj\.(weight|bias)", qkv),
            (LAYER + r"self_attn\.o_proj\.(weight|bias)",
             Rename(PREFIX + r"attn.c_proj.\2", transpose=conv1d)),  # fmt: skip
            (LAYER + r"mlp\.up_proj\.(weight|bias)", Rename(PREFIX + r"mlp.c_fc.\2", transpose=conv1d)),
            (LAYER + r"mlp\.down_proj\.(weight|bias)", Rename(PREFIX + r"mlp.c_proj.\2", transpose=conv1d)),
            (r"model\.norm\.(weight|bias)", Rename(r"transformer.ln_f.\1")),
        )
    )
    return ModelConfig(
        name=name,
        family=family,
        vocab=raw.require("vocab_size"),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=raw.get("n_inner", 4 * hidden, kind=int),
        layers=without_rope(first(raw, "n_layer", "num_hidden_layers")),
        norms=Norms(float(raw.get("layer_norm_epsilon", 1e-5, kind=(int, float))), "layer"),
        mlp=Mlp(activation(raw, act, "activation_function"), "plain", bias=True),
        positions=Positions("learned"),
        attention=Attention(
            qkv_bias=True,
            out_bias=True,
            scale=None if raw.get("scale_attn_weights", True, kind=bool) else 1.0,
        ),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", True, kind=bool))),
        max_positions=first(raw, "n_positions", "max_position_embeddings", default=positions),
        dtype=saved_dtype(raw, "float32"),
        tensors=tensors,
    )
