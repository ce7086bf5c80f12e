"""GPTBigCode (SantaCoder, StarCoder 1): GPT-2's block (learned absolute positions, pre-LayerNorm,
plain GELU-tanh MLP, biases on every projection, tied embeddings) with multi-query attention (one
K/V head for all query heads, `multi_query`, the default). q, k and v are fused in one `c_attn`, a
Linear ([out, in], not GPT-2's Conv1D): all q rows then k then v when multi-query, per head
(q, k, v) otherwise."""

from tcp_compiler.frontend.config import Attention, Embedding, Mlp, ModelConfig, Norms, Positions, RawConfig
from tcp_compiler.frontend.families.common import activation, first, head_size, saved_dtype, without_rope
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import FusedQkv, Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"transformer.h.\1."


@family("gpt_bigcode", architectures=("GPTBigCodeForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    if raw.get("add_cross_attention", False, kind=bool):
        raise raw.fail("field 'add_cross_attention' = true is not supported (decoder-only models)")
    hidden, heads = first(raw, "n_embd", "hidden_size"), first(raw, "n_head", "num_attention_heads")
    head_dim = head_size(raw, hidden, heads, "n_embd", "n_head")
    multi_query = bool(raw.get("multi_query", True, kind=bool))
    kv_heads, order = (1, "blocks") if multi_query else (heads, "per_head")
    tensors = TensorMap(
        (
            (r"model\.embed_tokens\.weight", Rename("transformer.wte.weight")),
            (r"model\.embed_positions\.weight", Rename("transformer.wpe.weight")),
            (LAYER + r"input_layernorm\.(weight|bias)", Rename(PREFIX + r"ln_1.\2")),
            (LAYER + r"post_attention_layernorm\.(weight|bias)", Rename(PREFIX + r"ln_2.\2")),
            (
                LAYER + r"self_attn\.([qkv])_proj\.(weight|bias)",
                FusedQkv(PREFIX + r"attn.c_attn.\3", r"\2", order, heads, kv_heads, head_dim),
            ),
            (LAYER + r"self_attn\.o_proj\.(weight|bias)", Rename(PREFIX + r"attn.c_proj.\2")),
            (LAYER + r"mlp\.up_proj\.(weight|bias)", Rename(PREFIX + r"mlp.c_fc.\2")),
            (LAYER + r"mlp\.down_proj\.(weight|bias)", Rename(PREFIX + r"mlp.c_proj.\2")),
            (r"model\.norm\.(weight|bias)", Rename(r"transformer.ln_f.\1")),
        )
    )
    return ModelConfig(
        name=name,
        family="gpt_bigcode",
        vocab=raw.require("vocab_size"),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=raw.get("n_inner", 4 * hidden, kind=int),
        layers=without_rope(first(raw, "n_layer", "num_hidden_layers")),
        norms=Norms(float(raw.get("layer_norm_epsilon", 1e-5, kind=(int, float))), "layer"),
        mlp=Mlp(activation(raw, "gelu_pytorch_tanh", "activation_function"), "plain", bias=True),
        positions=Positions("learned"),
        attention=Attention(
            qkv_bias=True,
            out_bias=True,
            scale=None if raw.get("scale_attn_weights", True, kind=bool) else 1.0,
        ),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", True, kind=bool))),
        max_positions=first(raw, "n_positions", "max_position_embeddings", default=1024),
        dtype=saved_dtype(raw, "float32"),
        tensors=tensors,
    )
