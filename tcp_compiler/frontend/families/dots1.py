"""dots.llm1 (`dots1`): Qwen 3's attention (an RMSNorm on each query and key head, q/k/v/o biases
when attention_bias) with Qwen 2's window rule (layers from max_window_layers on slide, when
sliding_window is set), the first `first_k_dense_replace` layers dense, the rest DeepSeek-V3's MoE
(sigmoid scores, a selection-only correction bias, top-k within the topk_group best of n_group
groups, routed_scaling_factor, n_shared_experts shared experts). Unlike DeepSeek-V3, norm_topk_prob
is off unless set, and the correction bias is always there."""

from tcp_compiler.frontend.config import Attention, ModelConfig, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers
from tcp_compiler.frontend.families.deepseek_v3 import sigmoid_moe
from tcp_compiler.frontend.families.registry import family

# Dots1Config's class defaults (transformers 5.23.0) for the fields a config may leave out
DEFAULTS = {
    "num_key_value_heads": 32,
    "max_position_embeddings": 2048,
    "moe_intermediate_size": 1408,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 0,
    "norm_topk_prob": False,
    "routed_scaling_factor": 1.0,
    "sliding_window": 4096,
    "max_window_layers": 62,
}


@family("dots1", defaults=DEFAULTS, architectures=("Dots1ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    window = raw.get("sliding_window", kind=int)
    first_sliding = raw.get("max_window_layers", kind=int)
    if window is not None and first_sliding is None:
        raise raw.fail("max_window_layers: expected a layer index when sliding_window is set, got null")
    fallback = [
        "full_attention" if window is None or i < first_sliding else "sliding_attention" for i in range(n)
    ]
    raw.require("n_shared_experts")  # Dots1MoE sizes its shared MLP from it: no class default
    bias = bool(raw.get("attention_bias", False, kind=bool))
    return dense(
        raw,
        "dots1",
        name,
        attention=Attention(qkv_bias=bias, out_bias=bias, qk_norm="per_head"),
        moe=sigmoid_moe(raw),
        layers=layers(
            raw,
            layer_types(raw, fallback),
            window,
            {"default": read_rope(raw)},
            set(range(raw.get("first_k_dense_replace", kind=int), n)),
        ),
    )
