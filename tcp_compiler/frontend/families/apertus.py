"""Apertus (swiss-ai): Llama-shaped with a plain MLP, down(xIELU(up(x))), whose xIELU has two
trainable scalars per layer (`mlp.act_fn.alpha_p`, `.alpha_n`; the IR op xielu), an RMSNorm on
each query and key head before RoPE, and llama3 RoPE scaling. Its pre-norms are named
attention_layernorm and feedforward_layernorm.

ApertusConfig's RoPE: `rope_parameters` when given, else an older file's `rope_scaling` with its
`rope_theta`; a file with neither gets the class's llama3 defaults, whatever its `rope_theta`
(transformers 5.23 drops it then)."""

from tcp_compiler.frontend.config import Attention, Mlp, ModelConfig, RawConfig, read_rope
from tcp_compiler.frontend.families.common import activation, dense, layers
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Rename, TensorMap

THETA = 12_000_000.0  # ApertusConfig.default_theta
DEFAULT_ROPE = {  # ApertusConfig.__post_init__'s when a config sets no RoPE scaling
    "rope_type": "llama3",
    "rope_theta": THETA,
    "factor": 8.0,
    "original_max_position_embeddings": 8192,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
}
LAYER = r"model\.layers\.(\d+)\."
NORMS = {"input_layernorm": "attention_layernorm", "post_attention_layernorm": "feedforward_layernorm"}
TENSORS = TensorMap(
    tuple(
        (LAYER + rf"{ours}\.weight", Rename(rf"model.layers.\1.{theirs}.weight"))
        for ours, theirs in NORMS.items()
    )
)


@family(
    "apertus",
    defaults={"rms_norm_eps": 1e-5, "max_position_embeddings": 65_536},
    architectures=("ApertusForCausalLM",),
)
def read(raw: RawConfig, name: str) -> ModelConfig:
    if not raw.has("rope_parameters") and not raw.has("rope_scaling"):
        raw = RawConfig({**raw.data, "rope_parameters": DEFAULT_ROPE}, raw.source, raw.family, raw.prefix)
    types = ["full_attention"] * raw.require("num_hidden_layers")  # ApertusModel masks causally only
    bias = bool(raw.get("attention_bias", False, kind=bool))
    act = raw.get("hidden_act", "xielu", kind=str)
    return dense(
        raw,
        "apertus",
        name,
        attention=Attention(qkv_bias=bias, out_bias=bias, qk_norm="per_head"),
        # ApertusMLP has no biases (a file's mlp_bias is not read)
        mlp=Mlp("xielu" if act == "xielu" else activation(raw, "silu", "hidden_act"), "plain"),
        layers=layers(raw, types, None, {"default": read_rope(raw, default_theta=THETA)}),
        tensors=TENSORS,
    )
