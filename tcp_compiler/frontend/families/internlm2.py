"""InternLM2 / InternLM2.5 (remote code, `model_type: internlm2`): a Llama block under its own
names (`tok_embeddings`, `attention_norm`, `ffn_norm`, `feed_forward.w1` gate / `w3` up / `w2`
down, `output`), with q, k and v fused in one `attention.wqkv` whose rows go per KV head as its
G query heads, then its key, then its value (FusedQkv "grouped"), and `bias` (InternLM2Config's
default: true) on wqkv and wo. RoPE scaling is the published code's `type` linear or dynamic
(dynamic NTK: the base grows with the sequence once it passes max_position_embeddings); the head
size is hidden / heads, as InternLM2Attention computes it."""

from tcp_compiler.frontend.config import Attention, ModelConfig, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, head_size, layers
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import FusedQkv, Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"model.layers.\1."
NAMES = (
    (r"model\.embed_tokens\.weight", "model.tok_embeddings.weight"),
    (LAYER + r"input_layernorm\.weight", PREFIX + "attention_norm.weight"),
    (LAYER + r"post_attention_layernorm\.weight", PREFIX + "ffn_norm.weight"),
    (LAYER + r"self_attn\.o_proj\.(weight|bias)", PREFIX + r"attention.wo.\2"),
    (LAYER + r"mlp\.gate_proj\.weight", PREFIX + "feed_forward.w1.weight"),
    (LAYER + r"mlp\.up_proj\.weight", PREFIX + "feed_forward.w3.weight"),
    (LAYER + r"mlp\.down_proj\.weight", PREFIX + "feed_forward.w2.weight"),
    (r"lm_head\.weight", "output.weight"),
)
# InternLM2Config's defaults (configuration_internlm2.py)
DEFAULTS = {
    "bias": True,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 2048,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}
ROPE_TYPES = ("default", "linear", "dynamic")  # the published InternLM2Attention._init_rope's


@family("internlm2", defaults=DEFAULTS, architectures=("InternLM2ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    heads = raw.require("num_attention_heads")
    kv_heads = raw.get("num_key_value_heads", heads, kind=int)
    head_dim = head_size(raw, raw.require("hidden_size"), heads)
    rope = read_rope(raw)
    if rope.kind not in ROPE_TYPES:
        raise raw.fail(f"rope_scaling: type '{rope.kind}' is not one InternLM2 has (linear, dynamic)")
    qkv = FusedQkv(PREFIX + r"attention.wqkv.\3", r"\2", "grouped", heads, kv_heads, head_dim)
    tensors = TensorMap(
        ((LAYER + r"self_attn\.([qkv])_proj\.(weight|bias)", qkv),)
        + tuple((pattern, Rename(target)) for pattern, target in NAMES)
    )
    bias = bool(raw.get("bias", kind=bool))
    return dense(
        raw,
        "internlm2",
        name,
        head_dim=head_dim,
        attention=Attention(qkv_bias=bias, out_bias=bias),
        layers=layers(raw, ["full_attention"] * raw.require("num_hidden_layers"), None, {"default": rope}),
        tensors=tensors,
    )
