"""Falcon: RoPE, LayerNorm, plain GELU MLP, and a fused QKV in one of three layouts: multi-query
(Falcon-7B: one KV head, q rows then k then v), grouped (new_decoder_architecture, Falcon-40B/180B:
per KV head its query heads then k and v) or per head (neither). Attention and MLP run in parallel
off one shared norm (parallel_attn, 7B) or two (new_decoder_architecture), else in sequence.

With alibi = true (the Falcon-RW models) positions are ALiBi biases instead of RoPE, scaled with the
scores: softmax((q k + slope * k_pos) / sqrt(head_dim)), as the original model and transformers'
SDPA path compute it. transformers' eager path adds the bias a second time (once in the scores,
once more in the mask), so the oracle test checks against SDPA for these configs.
"""

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
from tcp_compiler.frontend.families.common import (
    activation,
    first,
    head_size,
    layers,
    saved_dtype,
    without_rope,
)
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import FusedQkv, Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"transformer.h.\1."


@family("falcon", architectures=("FalconForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    alibi = bool(raw.get("alibi", False, kind=bool))
    hidden = raw.require("hidden_size")
    heads = first(raw, "num_attention_heads", "n_head")
    head_dim = head_size(raw, hidden, heads)
    new_arch = bool(raw.get("new_decoder_architecture", False, kind=bool))
    multi_query = bool(raw.get("multi_query", True, kind=bool))
    if new_arch:
        kv_heads, order = raw.require("num_kv_heads"), "grouped"
        if heads % kv_heads:
            raise raw.fail(f"num_attention_heads ({heads}) must be a multiple of num_kv_heads ({kv_heads})")
    else:
        kv_heads, order = (1, "blocks") if multi_query else (heads, "per_head")
    parallel = new_arch or bool(raw.get("parallel_attn", True, kind=bool))
    norms = raw.get("num_ln_in_parallel_attn", 2, kind=int) if new_arch else 1
    if parallel and norms == 2:
        norm_names = (r"ln_attn", r"ln_mlp")
    else:
        norm_names = (r"input_layernorm", r"post_attention_layernorm")
    bias = bool(raw.get("bias", False, kind=bool))
    tensors = TensorMap(
        (
            (r"model\.embed_tokens\.weight", Rename("transformer.word_embeddings.weight")),
            (LAYER + r"input_layernorm\.(weight|bias)", Rename(PREFIX + norm_names[0] + r".\2")),
            (LAYER + r"post_attention_layernorm\.(weight|bias)", Rename(PREFIX + norm_names[1] + r".\2")),
            (
                LAYER + r"self_attn\.([qkv])_proj\.(weight|bias)",
                FusedQkv(
                    PREFIX + r"self_attention.query_key_value.\3", r"\2", order, heads, kv_heads, head_dim
                ),
            ),
            (LAYER + r"self_attn\.o_proj\.(weight|bias)", Rename(PREFIX + r"self_attention.dense.\2")),
            (LAYER + r"mlp\.up_proj\.(weight|bias)", Rename(PREFIX + r"mlp.dense_h_to_4h.\2")),
            (LAYER + r"mlp\.down_proj\.(weight|bias)", Rename(PREFIX + r"mlp.dense_4h_to_h.\2")),
            (r"model\.norm\.(weight|bias)", Rename(r"transformer.ln_f.\1")),
        )
    )
    n = first(raw, "num_hidden_layers", "n_layer")
    ropes = {} if alibi else {"default": read_rope(raw)}
    return ModelConfig(
        name=name,
        family="falcon",
        vocab=raw.require("vocab_size"),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=raw.get("ffn_hidden_size", 4 * hidden, kind=int),
        layers=without_rope(n) if alibi else layers(raw, ["full_attention"] * n, None, ropes),
        norms=Norms(float(raw.get("layer_norm_epsilon", 1e-5, kind=(int, float))), "layer", parallel=norms),
        mlp=Mlp(activation(raw, "gelu", "activation"), "plain", bias),
        positions=Positions("alibi", alibi_scale=head_dim**-0.5) if alibi else Positions(),
        residual=Residual("parallel" if parallel else "pre"),
        attention=Attention(qkv_bias=bias, out_bias=bias),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", True, kind=bool))),
        max_positions=raw.get("max_position_embeddings", 0, kind=int),
        dtype=saved_dtype(raw, "bfloat16"),
        tensors=tensors,
    )
