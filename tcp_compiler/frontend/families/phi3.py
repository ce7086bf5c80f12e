"""Phi-3 / Phi-3.5 / Phi-4-mini: Llama-shaped, with the q, k and v projections fused into one
qkv_proj (all q rows, then k, then v) and gate and up fused into one gate_up_proj ([gate; up]),
both split at load; longrope RoPE (older configs spell it "su" or "yarn", which transformers reads
as longrope), partial rotary (partial_rotary_factor), a sliding window on every layer when set."""

from tcp_compiler.frontend.config import ModelConfig, Positions, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers, partial_rotary, sizes
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Chunk, FusedQkv, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"model.layers.\1."
# Phi3Config's defaults: original_max_position_embeddings is always set, so it always decides
# longrope's switch from short to long factors.
DEFAULTS = {"max_position_embeddings": 4096, "original_max_position_embeddings": 4096}
ROPE_ALIASES = {"su": "longrope", "yarn": "longrope"}


@family("phi3", defaults=DEFAULTS, architectures=("Phi3ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    fields = sizes(raw)
    heads, kv_heads, head_dim = fields["heads"], fields["kv_heads"], fields["head_dim"]
    rotary = partial_rotary(raw, head_dim)
    tensors = TensorMap(
        (
            (
                LAYER + r"self_attn\.([qkv])_proj\.weight",
                FusedQkv(PREFIX + "self_attn.qkv_proj.weight", r"\2", "blocks", heads, kv_heads, head_dim),
            ),
            (LAYER + r"mlp\.gate_proj\.weight", Chunk(PREFIX + "mlp.gate_up_proj.weight", "0", 2)),
            (LAYER + r"mlp\.up_proj\.weight", Chunk(PREFIX + "mlp.gate_up_proj.weight", "1", 2)),
        )
    )
    n = raw.require("num_hidden_layers")
    window = raw.get("sliding_window", kind=int)
    types = layer_types(raw, ["sliding_attention" if window else "full_attention"] * n)
    rope = read_rope(raw, aliases=ROPE_ALIASES)
    return dense(
        raw,
        "phi3",
        name,
        layers=layers(raw, types, window, {"default": rope}),
        positions=Positions(rotary_dim=rotary),
        tensors=tensors,
    )
