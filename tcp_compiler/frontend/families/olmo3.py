"""OLMo 3: OLMo 2's block (branch outputs normed, q and k RMSNormed over all heads before RoPE)
with sliding-window and full-attention layers (`layer_types`; by default every 4th layer is full),
each layer type with its own RoPE (`rope_parameters.full_attention` / `.sliding_attention`).

Olmo3Config reads an older file's `rope_theta` and `rope_scaling` into the full-attention layers
only; the sliding ones keep the class's default RoPE (base 500,000), as does a layer type that a
`rope_parameters` object leaves out."""

from tcp_compiler.frontend.config import Attention, ModelConfig, RawConfig, Rope, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers, rms_norms
from tcp_compiler.frontend.families.registry import family

THETA = 500_000.0  # Olmo3Config.default_theta


@family("olmo3", defaults={"rms_norm_eps": 1e-5}, architectures=("Olmo3ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    types = layer_types(raw, ["sliding_attention" if (i + 1) % 4 else "full_attention" for i in range(n)])
    bias = bool(raw.get("attention_bias", False, kind=bool))
    return dense(
        raw,
        "olmo3",
        name,
        norms=rms_norms(raw, sandwich=True, pre=False),
        attention=Attention(qkv_bias=bias, out_bias=bias, qk_norm="all_heads"),
        layers=layers(raw, types, raw.get("sliding_window", 4096, kind=int), _ropes(raw)),
    )


def _ropes(raw: RawConfig) -> dict[str, Rope]:
    """Each layer type's RoPE as Olmo3Config sets it (see the module docstring)."""
    if not raw.has("rope_parameters"):
        return {"full_attention": read_rope(raw, default_theta=THETA), "sliding_attention": Rope(THETA)}
    params = raw.nested("rope_parameters")
    return {
        kind: read_rope(raw, kind, default_theta=THETA) if params.has(kind) else Rope(THETA)
        for kind in ("full_attention", "sliding_attention")
    }
