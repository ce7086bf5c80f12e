"""MiniCPM 3 (MiniCPM3-4B): DeepSeek-V2's multi-head latent attention (low-rank q through
q_a / q_b, keys and values from one compressed latent plus one shared rotary key; the cache holds
those two) with RoPE on rotate_half pairs (transformers' MiniCPM3Attention keeps the cos/sin
convention) and yarn's softmax mscale as DeepSeek-V2 applies it, a Llama MLP, and MiniCPM's
multipliers: embeddings times `scale_emb` (held in the table's dtype, as
MiniCPM3ScaledWordEmbedding does), branches times scale_depth / sqrt(layers), the final hidden
state divided by hidden / dim_model_base. MiniCPM3Config's defaults apply for fields a config
leaves out (v_head_dim: hidden / heads)."""

from tcp_compiler.frontend.config import Attention, ModelConfig, Positions, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layers
from tcp_compiler.frontend.families.deepseek_parts import mla_scale, read_mla
from tcp_compiler.frontend.families.minicpm import multipliers
from tcp_compiler.frontend.families.registry import family

# MiniCPM3Config's defaults (transformers 5.23.0)
DEFAULTS = {
    "vocab_size": 73448,
    "hidden_size": 2560,
    "intermediate_size": 6400,
    "num_hidden_layers": 62,
    "num_attention_heads": 40,
    "num_key_value_heads": 40,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
    "kv_lora_rank": 256,
    "q_lora_rank": 768,
    "qk_nope_head_dim": 64,
    "qk_rope_head_dim": 32,
    "scale_emb": 12,
    "scale_depth": 1.4,
    "dim_model_base": 256,
}


@family("minicpm3", defaults=DEFAULTS, architectures=("MiniCPM3ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    hidden, heads = raw.require("hidden_size"), raw.require("num_attention_heads")
    if raw.get("attention_bias", False, kind=bool):
        raise raw.fail("attention_bias: true is not supported for minicpm3 (released models have none)")
    if not raw.has("v_head_dim"):  # MiniCPM3Config: hidden / heads
        raw = RawConfig({**raw.data, "v_head_dim": hidden // heads}, raw.source, raw.family, raw.prefix)
    mla = read_mla(raw)
    return dense(
        raw,
        "minicpm3",
        name,
        head_dim_default=mla.nope_dim + mla.rope_dim,
        head_dim=mla.nope_dim + mla.rope_dim,
        kv_heads=heads,  # every head reads the one latent
        positions=Positions(rotary_dim=mla.rope_dim),
        attention=Attention(scale=mla_scale(raw, mla)),  # yarn's mscale, as DeepSeek-V2's attention
        mla=mla,
        layers=layers(raw, ["full_attention"] * n, None, {"default": read_rope(raw)}),
        **multipliers(raw, scale_in_table_dtype=True),  # MiniCPM3ScaledWordEmbedding's dtype
    )
