"""ChatGLM2 / ChatGLM3 / GLM-4-9B-chat (remote code, `model_type: chatglm`, THUDM's
modeling_chatglm.py): pre-norm RMSNorm (LayerNorm with `rmsnorm` false) blocks; attention with
`multi_query_group_num` KV heads when `multi_query_attention` (else one per query head) and
`kv_channels`-wide heads, q, k and v fused in one `query_key_value` (all q rows, then k, then v;
per head (q, k, v) without multi-query) with a bias when `add_qkv_bias` or `add_bias_linear`;
RoPE on the first half of each head in interleaved pairs, base 10000 x `rope_ratio`; a SwiGLU MLP
of `ffn_hidden_size` with gate and up fused in `dense_h_to_4h`; biases on the output and MLP
projections when `add_bias_linear`; residuals from the norm's output when
`apply_residual_connection_post_layernorm`; a final norm when `post_layer_norm`; an LM head
(`output_layer`) of its own over `padded_vocab_size` rows; positions up to `seq_length`.

The first ChatGLM-6B (GLM-130B's 2-d positions, `position_encoding_2d`) has the same model_type
and another architecture: it is refused."""

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
from tcp_compiler.frontend.families.common import head_size, layers, saved_dtype
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Chunk, FusedQkv, Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"transformer.encoder.layers.\1."
# ChatGLMConfig's defaults (configuration_chatglm.py) for fields a config may leave out.
DEFAULTS = {
    "num_layers": 28,
    "padded_vocab_size": 65024,
    "hidden_size": 4096,
    "ffn_hidden_size": 13696,
    "kv_channels": 128,
    "num_attention_heads": 32,
    "seq_length": 2048,
    "layernorm_epsilon": 1e-5,
    "rmsnorm": True,
    "apply_residual_connection_post_layernorm": False,
    "post_layer_norm": True,
    "add_bias_linear": False,
    "add_qkv_bias": False,
    "multi_query_attention": False,
    "multi_query_group_num": 1,
    "rope_ratio": 1,
}
ROPE_BASE = 10000.0  # modeling_chatglm.py's RotaryEmbedding base, scaled by rope_ratio


@family("chatglm", defaults=DEFAULTS, architectures=("ChatGLMModel", "ChatGLMForConditionalGeneration"))
def read(raw: RawConfig, name: str) -> ModelConfig:
    if raw.has("position_encoding_2d") or raw.has("inner_hidden_size"):
        raise raw.fail(
            "the first ChatGLM-6B (position_encoding_2d, inner_hidden_size) is not supported; "
            "ChatGLM2, ChatGLM3 and GLM-4 chatglm configs are (multi_query_group_num, padded_vocab_size)"
        )
    if raw.has("pre_seq_len"):
        raise raw.fail("pre_seq_len: P-tuning prefixes are not supported; expected null")
    hidden, heads = raw.require("hidden_size"), raw.require("num_attention_heads")
    head_dim = raw.get("kv_channels", kind=int) or head_size(raw, hidden, heads)
    if head_dim % 4:
        raise raw.fail(
            f"kv_channels: expected a multiple of 4 (RoPE turns pairs in half a head), got {head_dim}"
        )
    multi_query = bool(raw.get("multi_query_attention", kind=bool))
    kv_heads = raw.require("multi_query_group_num") if multi_query else heads
    if heads % kv_heads:
        raise raw.fail(
            f"num_attention_heads ({heads}) must be a multiple of multi_query_group_num ({kv_heads})"
        )
    bias = bool(raw.get("add_bias_linear", kind=bool))
    rope = Rope(ROPE_BASE * float(raw.get("rope_ratio", kind=(int, float))))
    rms = bool(raw.get("rmsnorm", kind=bool))
    return ModelConfig(
        name=name,
        family="chatglm",
        vocab=raw.require("padded_vocab_size"),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=raw.require("ffn_hidden_size"),
        layers=layers(raw, ["full_attention"] * raw.require("num_layers"), None, {"default": rope}),
        norms=Norms(
            float(raw.get("layernorm_epsilon", kind=float)),
            "rms" if rms else "layer",
            final=bool(raw.get("post_layer_norm", kind=bool)),
        ),
        mlp=Mlp("silu", bias=bias),  # MLP's swiglu: silu(first half) x second half, whatever hidden_act says
        residual=Residual(from_norm=bool(raw.get("apply_residual_connection_post_layernorm", kind=bool))),
        positions=Positions(rotary_dim=head_dim // 2, interleave=True),
        attention=Attention(qkv_bias=bias or bool(raw.get("add_qkv_bias", kind=bool)), out_bias=bias),
        embedding=Embedding(tied=False),  # output_layer is a Linear of its own, never tied
        max_positions=raw.require("seq_length"),
        dtype=saved_dtype(raw, "float16"),
        # SelfAttention splits q, k, v in blocks with multi_query_attention, per head without
        tensors=_layout(heads, kv_heads, head_dim, "blocks" if multi_query else "per_head"),
    )


def _layout(heads: int, kv_heads: int, head_dim: int, order: str) -> TensorMap:
    """The canonical names in modeling_chatglm.py's module tree (ChatGLMForConditionalGeneration:
    transformer.embedding / encoder / output_layer)."""
    attention = PREFIX + "self_attention."
    rules = [
        (r"model\.embed_tokens\.weight", Rename("transformer.embedding.word_embeddings.weight")),
        (r"model\.norm\.(weight|bias)", Rename(r"transformer.encoder.final_layernorm.\1")),
        (r"lm_head\.weight", Rename("transformer.output_layer.weight")),
        (LAYER + r"(input_layernorm|post_attention_layernorm)\.(weight|bias)", Rename(PREFIX + r"\2.\3")),
        (LAYER + r"self_attn\.o_proj\.(weight|bias)", Rename(attention + r"dense.\2")),
        (LAYER + r"mlp\.down_proj\.(weight|bias)", Rename(PREFIX + r"mlp.dense_4h_to_h.\2")),
    ]
    for kind in ("weight", "bias"):
        fused = FusedQkv(attention + f"query_key_value.{kind}", r"\2", order, heads, kv_heads, head_dim)
        rules.append((LAYER + rf"self_attn\.([qkv])_proj\.{kind}", fused))
        for index, proj in enumerate(("gate", "up")):
            chunk = Chunk(PREFIX + f"mlp.dense_h_to_4h.{kind}", str(index), 2)
            rules.append((LAYER + rf"mlp\.{proj}_proj\.{kind}", chunk))
    return TensorMap(tuple(rules))
