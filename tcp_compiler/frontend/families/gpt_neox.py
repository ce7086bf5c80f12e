"""GPT-NeoX / Pythia: RoPE on the first rotary_pct of each head (partial rotary), parallel attention
and MLP residual (use_parallel_residual) with a LayerNorm each, plain GELU MLP, fused per-head QKV,
biases, untied LM head (`embed_out`)."""

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
from tcp_compiler.frontend.families.common import activation, head_size, layers, saved_dtype
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import FusedQkv, Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"gpt_neox.layers.\1."


@family("gpt_neox", architectures=("GPTNeoXForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    hidden, heads = raw.require("hidden_size"), raw.require("num_attention_heads")
    head_dim = head_size(raw, hidden, heads)
    fraction = raw.nested("rope_parameters").get(
        "partial_rotary_factor", raw.get("rotary_pct", 0.25, kind=(int, float))
    )
    rotary = int(head_dim * fraction)
    if rotary <= 0 or rotary % 2 or rotary > head_dim:
        raise raw.fail(
            f"rotary_pct {fraction} gives {rotary} rotary dims of {head_dim}; expected an even count > 0"
        )
    bias = bool(raw.get("attention_bias", True, kind=bool))
    tensors = TensorMap(
        (
            (r"model\.embed_tokens\.weight", Rename("gpt_neox.embed_in.weight")),
            (LAYER + r"(input_layernorm|post_attention_layernorm)\.(weight|bias)", Rename(PREFIX + r"\2.\3")),
            (
                LAYER + r"self_attn\.([qkv])_proj\.(weight|bias)",
                FusedQkv(PREFIX + r"attention.query_key_value.\3", r"\2", "per_head", heads, heads, head_dim),
            ),
            (LAYER + r"self_attn\.o_proj\.(weight|bias)", Rename(PREFIX + r"attention.dense.\2")),
            (LAYER + r"mlp\.up_proj\.(weight|bias)", Rename(PREFIX + r"mlp.dense_h_to_4h.\2")),
            (LAYER + r"mlp\.down_proj\.(weight|bias)", Rename(PREFIX + r"mlp.dense_4h_to_h.\2")),
            (r"model\.norm\.(weight|bias)", Rename(r"gpt_neox.final_layer_norm.\1")),
            (r"lm_head\.weight", Rename("embed_out.weight")),
        )
    )
    n = raw.require("num_hidden_layers")
    rope = read_rope(raw, default_theta=raw.get("rotary_emb_base", 10000.0, kind=(int, float)))
    return ModelConfig(
        name=name,
        family="gpt_neox",
        vocab=raw.require("vocab_size"),
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        head_dim=head_dim,
        intermediate=raw.require("intermediate_size"),
        layers=layers(raw, ["full_attention"] * n, None, {"default": rope}),
        norms=Norms(float(raw.get("layer_norm_eps", 1e-5, kind=(int, float))), "layer"),
        mlp=Mlp(activation(raw, "gelu", "hidden_act"), "plain", bias=True),
        residual=Residual("parallel" if raw.get("use_parallel_residual", True, kind=bool) else "pre"),
        positions=Positions(rotary_dim=rotary),
        attention=Attention(qkv_bias=bias, out_bias=bias),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", False, kind=bool))),
        max_positions=raw.get("max_position_embeddings", 0, kind=int),
        dtype=saved_dtype(raw, "float16"),
        tensors=tensors,
    )
