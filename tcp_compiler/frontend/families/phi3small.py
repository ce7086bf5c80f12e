"""Phi-3-small (microsoft/Phi-3-small-8k-instruct, remote code `modeling_phi3_small.py`): GQA
attention whose q, k and v come out of one fused query_key_value laid out per KV head (its query
heads, then its key, then its value), block-sparse on all but every
`dense_attention_every_n_layers`-th layer (local blocks plus vertical stripes, each head its own
stripes); the gegelu MLP (gpt-oss's clamped SwiGLU: quick GELU of the clamped even rows of up_proj
times the clamped odd rows + 1); LayerNorm with bias; biases on every projection; muP multipliers on
the embedding, the attention scale and the logits; the LM head tied to the embedding.

With rope_scaling (the 128k models), RoPE is LongRoPE as the 128k models' `positional_embedding.py`
computes it: the short factors while the sequence (cache included) is at most
original_max_position_embeddings long, the long ones past it; cos and sin scaled by short_mscale
(else 1) and long_mscale (else sqrt(1 + ln(max / original) / ln(original))); rope_position_scale
is not applied then, as there.

Not applied: the mask of the tokenizer's unused ("dummy") token ids the published head fills with
the dtype's minimum (`dummy_token_indices` comes from the tokenizer, not config.json): those ids'
logits are what the head computes."""

import math

from tcp_compiler.frontend.config import (
    Attention,
    BlockSparse,
    Embedding,
    Layer,
    Mlp,
    ModelConfig,
    Norms,
    RawConfig,
    Rope,
)
from tcp_compiler.frontend.families.common import saved_dtype
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Chunk, FusedQkv, Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"model.layers.\1."
QUICK_GELU = 1.702  # modeling_phi3_small's quick_gelu: x * sigmoid(1.702 x)
# Phi3SmallConfig's defaults, for the fields a config may leave out
DEFAULTS = {
    "vocab_size": 100352, "max_position_embeddings": 8192, "rope_embedding_base": 10**6,
    "rope_position_scale": 1.0, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "hidden_act": "gegelu", "gegelu_limit": 20.0, "gegelu_pad_to_256": True,
    "ff_intermediate_size": 14336, "blocksparse_homo_head_pattern": False, "blocksparse_block_size": 64,
    "blocksparse_num_local_blocks": 16, "blocksparse_vert_stride": 8, "dense_attention_every_n_layers": 2,
    "layer_norm_epsilon": 1e-5, "mup_use_scaling": True, "mup_width_multiplier": 8.0,
    "mup_embedding_multiplier": 10.0, "mup_attn_multiplier": 1.0, "tie_word_embeddings": True,
}  # fmt: skip


@family("phi3small", defaults=DEFAULTS, architectures=("Phi3SmallForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    hidden, heads = raw.require("hidden_size"), raw.require("num_attention_heads")
    kv_heads, n = raw.require("num_key_value_heads"), raw.require("num_hidden_layers")
    if hidden % heads or heads % kv_heads:
        raise raw.fail(f"hidden_size ({hidden}), num_attention_heads ({heads}) and num_key_value_heads "
                       f"({kv_heads}) must divide one another in turn")  # fmt: skip
    if raw.get("hidden_act", kind=str) != "gegelu":
        raise raw.fail(f"hidden_act: Phi-3-small supports only 'gegelu', got {raw.get('hidden_act')!r}")
    head_dim = hidden // heads
    rope = _rope(raw)
    pattern = BlockSparse(
        block=raw.require("blocksparse_block_size"),
        local=raw.require("blocksparse_num_local_blocks"),
        vert_stride=raw.require("blocksparse_vert_stride"),
        heads=heads,
        homo_heads=bool(raw.get("blocksparse_homo_head_pattern", kind=bool)),
    )
    dense_every = raw.get("dense_attention_every_n_layers", 0, kind=int)
    layers = tuple(
        Layer(None, rope, "rope", False,
              block_sparse=None if dense_every and (i + 1) % dense_every == 0 else pattern)
        for i in range(n)
    )  # fmt: skip
    mup_scaling = bool(raw.get("mup_use_scaling", kind=bool))
    attn_scale = float(raw.get("mup_attn_multiplier", kind=(int, float))) / head_dim if mup_scaling else None
    embed = float(raw.get("mup_embedding_multiplier", 0.0, kind=(int, float)))
    width = float(raw.get("mup_width_multiplier", 0.0, kind=(int, float)))
    return ModelConfig(
        name=name,
        family="phi3small",
        vocab=raw.require("vocab_size"),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=_intermediate(raw, hidden),
        layers=layers,
        norms=Norms(float(raw.get("layer_norm_epsilon", kind=(int, float))), kind="layer"),
        mlp=Mlp("silu", bias=True, swiglu_limit=float(raw.get("gegelu_limit", kind=(int, float))),
                swiglu_alpha=QUICK_GELU),  # fmt: skip
        attention=Attention(qkv_bias=True, out_bias=True, scale=attn_scale),
        embedding=Embedding(
            scale=embed if embed > 0 else None,
            tied=bool(raw.get("tie_word_embeddings", kind=bool)),
            logits_divisor=width if width else 1.0,
        ),
        max_positions=raw.get("max_position_embeddings", 0, kind=int),
        dtype=saved_dtype(raw, "bfloat16"),
        tensors=_layout(heads, kv_heads, head_dim),
    )


# the fields of the 128k models' LongRopeConfig, which refuses any other key
LONGROPE_FIELDS = ("long_factor", "long_mscale", "original_max_position_embeddings", "short_factor",
                   "short_mscale", "type")  # fmt: skip


def _rope(raw: RawConfig) -> Rope:
    """RoPE of base rope_embedding_base with positions x rope_position_scale, or, with rope_scaling,
    the 128k models' LongRoPE (see the module docstring)."""
    theta = float(raw.get("rope_embedding_base", kind=(int, float)))
    if not raw.has("rope_scaling"):
        scale = float(raw.get("rope_position_scale", kind=(int, float)))
        return Rope(theta) if scale == 1.0 else Rope(theta, "linear", 1.0 / scale)
    params = raw.nested("rope_scaling")
    unknown = sorted(set(params.data) - set(LONGROPE_FIELDS))
    if unknown:
        raise params.fail(f"{params.path(unknown[0])}: not a field of Phi-3-small's longrope "
                          f"(expected: {', '.join(LONGROPE_FIELDS)})")  # fmt: skip
    kind = params.get("type", "longrope", kind=str)
    if kind not in ("longrope", "su"):
        raise params.fail(f"{params.path('type')}: expected 'longrope' or 'su', got {kind!r}")
    original = int(params.require("original_max_position_embeddings"))
    if original < 2:
        raise params.fail(f"{params.path('original_max_position_embeddings')}: expected a number >= 2, "
                          f"got {original}")  # fmt: skip
    short, long = params.require("short_factor", list), params.require("long_factor", list)
    if len(short) != len(long):
        raise params.fail(f"{params.path('long_factor')}: expected {len(short)} entries like short_factor, "
                          f"got {len(long)}")  # fmt: skip
    ratio = raw.require("max_position_embeddings") / original
    long_mscale = 1.0 if ratio <= 1.0 else math.sqrt(1 + math.log(ratio) / math.log(original))
    return Rope(
        theta,
        "longrope",
        ratio,
        original_max_positions=original,
        attention_factor=float(params.get("short_mscale", 1.0, kind=float)),
        long_attention_factor=float(params.get("long_mscale", long_mscale, kind=float)),
        short_factor=tuple(float(x) for x in short),
        long_factor=tuple(float(x) for x in long),
        source="rope_scaling",
    )


def _intermediate(raw: RawConfig, hidden: int) -> int:
    """The MLP width as Phi3SmallConfig gives it: ff_intermediate_size, else ff_dim_multiplier x
    (hidden // 3) x 2, rounded up to a multiple of 256 with gegelu_pad_to_256."""
    if raw.has("ff_intermediate_size"):
        return raw.get("ff_intermediate_size", kind=int)
    width = raw.require("ff_dim_multiplier", int) * (hidden // 3) * 2
    if raw.get("gegelu_pad_to_256", kind=bool):
        width = -(-width // 256) * 256
    return width


def _layout(heads: int, kv_heads: int, head_dim: int) -> TensorMap:
    """q, k and v (weights and biases) out of query_key_value, per KV head its query heads then its
    key and value; gate and up from up_proj's even and odd rows; o_proj is `dense`, the final norm
    `final_layernorm`."""
    rules: list = []
    for kind in ("weight", "bias"):
        fused = PREFIX + f"self_attn.query_key_value.{kind}"
        qkv = FusedQkv(fused, r"\2", "grouped", heads, kv_heads, head_dim)
        up = PREFIX + f"mlp.up_proj.{kind}"
        rules += [
            (LAYER + rf"self_attn\.([qkv])_proj\.{kind}", qkv),
            (LAYER + rf"self_attn\.o_proj\.{kind}", Rename(PREFIX + f"self_attn.dense.{kind}")),
            (LAYER + rf"mlp\.gate_proj\.{kind}", Chunk(up, "0", 2, interleaved=True)),
            (LAYER + rf"mlp\.up_proj\.{kind}", Chunk(up, "1", 2, interleaved=True)),
            (rf"model\.norm\.{kind}", Rename(f"model.final_layernorm.{kind}")),
        ]
    return TensorMap(tuple(rules))
