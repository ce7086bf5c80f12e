"""EXAONE 4.0 (and K-EXAONE, `exaone_moe`, below): Llama-shaped attention and gated MLP with LG's
"QK-Reorder-Norm": no norms before attention and MLP, an RMSNorm on each branch's output before it
joins the residual (as OLMo 2), and an RMSNorm on each query and key head (as Qwen 3). Hybrid
attention: sliding layers and global ones (`layer_types`, or `sliding_window_pattern`: every n-th
layer global, or a string of L and G repeated from layer 0); as transformers' Exaone4Attention
does, RoPE rotates every layer when `sliding_window` is null and only the sliding layers otherwise
(the global layers are NoPE)."""

import dataclasses

from tcp_compiler.frontend.config import Attention, Layer, ModelConfig, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers, rms_norms, sparse_mlp_layers
from tcp_compiler.frontend.families.deepseek_v3 import sigmoid_moe
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.schema import show

# Exaone4Config's defaults for the fields a published config may leave out
DEFAULTS = {
    "num_key_value_heads": 32,
    "rms_norm_eps": 1e-5,
    "sliding_window": 4096,
    "sliding_window_pattern": 4,
}
# ExaoneMoeConfig's (transformers 5.23.0)
MOE_DEFAULTS = {
    **DEFAULTS,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 1024,
    "num_shared_experts": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "n_group": 1,
    "topk_group": 1,
}


@family("exaone4", defaults=DEFAULTS, architectures=("Exaone4ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    return dense(
        raw,
        "exaone4",
        name,
        norms=rms_norms(raw, sandwich=True, pre=False),
        attention=Attention(qk_norm="per_head"),
        layers=_hybrid_layers(raw, set()),
    )


@family("exaone_moe", defaults=MOE_DEFAULTS, architectures=("ExaoneMoeForCausalLM",))
def read_moe(raw: RawConfig, name: str) -> ModelConfig:
    """K-EXAONE: EXAONE 4's attention in a pre-norm block (transformers' ExaoneMoeDecoderLayer is
    OLMoE's), and DeepSeek-V3's routing (deepseek_v3.sigmoid_moe, with `num_experts`,
    `num_shared_experts` and the correction bias at `mlp.e_score_correction_bias`) on the sparse
    layers: `mlp_layer_types`, else all but the first `first_k_dense_replace`."""
    sparse = sparse_mlp_layers(raw, raw.get("first_k_dense_replace", 1, kind=int))
    moe = sigmoid_moe(raw, "e_score_correction_bias", ("num_experts", "num_shared_experts"))
    return dense(
        raw,
        "exaone_moe",
        name,
        attention=Attention(qk_norm="per_head"),
        moe=moe,
        layers=_hybrid_layers(raw, sparse),
    )


def _hybrid_layers(raw: RawConfig, moe_layers: set[int]) -> tuple[Layer, ...]:
    """Sliding and global layers as Exaone4Config lays them out; RoPE on the sliding ones only when
    a window is set (Exaone4Attention), on every layer when sliding_window is null."""
    n = raw.require("num_hidden_layers")
    window = raw.get("sliding_window", kind=int)  # null: no sliding layers, RoPE on every layer
    types = layer_types(raw, _pattern(raw, n) if window is not None else ["full_attention"] * n)
    rope = {"default": read_rope(raw)}
    built = layers(raw, types, window if "sliding_attention" in types else None, rope, moe_layers)
    if window is None:
        return built
    return tuple(  # NoPE on the global layers
        layer if t == "sliding_attention" else dataclasses.replace(layer, rope=None)
        for layer, t in zip(built, types, strict=True)
    )


def _pattern(raw: RawConfig, n: int) -> list[str]:
    """Layer types from sliding_window_pattern: an int p makes every p-th layer global; a string of
    L (local) and G (global) repeats from layer 0, and the last layer is global whatever it says
    (Exaone4Config's documented rule)."""
    pattern = raw.data.get("sliding_window_pattern")
    if isinstance(pattern, str):  # the schema's rule is for the integer form
        if not pattern or set(pattern) - {"L", "G"}:
            raise raw.fail(f"sliding_window_pattern: expected a string of L and G, got {show(pattern)}")
        local = [pattern[i % len(pattern)] == "L" and i < n - 1 for i in range(n)]
    else:
        every = raw.get("sliding_window_pattern", kind=int)
        if every is None:
            raise raw.fail(
                "sliding_window_pattern is null but sliding_window is set; give layer_types or a pattern"
            )
        local = [(i + 1) % every != 0 for i in range(n)]
    return ["sliding_attention" if s else "full_attention" for s in local]
