"""GLM (GLM-4-9B-0414 and the other `GlmForCausalLM` checkpoints) and GLM-4 (`Glm4ForCausalLM`,
GLM-4-0414): Llama-shaped with RoPE on the first partial_rotary_factor of each head (0.5 by
default) in interleaved pairs (x0, x1), (x2, x3), ...; biases on q, k and v (`attention_bias`, on by
default) but not on o; gate and up fused into one gate_up_proj ([gate; up]), split at load.
GLM-4 adds a norm after attention and one after the MLP (Gemma's sandwich), its four norms named
input_layernorm, post_self_attn_layernorm, post_attention_layernorm (before the MLP) and
post_mlp_layernorm."""

from tcp_compiler.frontend.config import Attention, ModelConfig, Positions, RawConfig
from tcp_compiler.frontend.families.common import dense, partial_rotary, rms_norms, sizes
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Chunk, Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"model.layers.\1."
# GlmConfig's and Glm4Config's defaults for fields a config may leave out: head_dim is 128 whatever
# hidden_size / num_attention_heads is.
DEFAULTS = {
    "num_key_value_heads": 2,
    "head_dim": 128,
    "partial_rotary_factor": 0.5,
    "rms_norm_eps": 1.5625e-07,
    "attention_bias": True,
    "max_position_embeddings": 131072,
}
GATE_UP = (
    (LAYER + r"mlp\.gate_proj\.weight", Chunk(PREFIX + "mlp.gate_up_proj.weight", "0", 2)),
    (LAYER + r"mlp\.up_proj\.weight", Chunk(PREFIX + "mlp.gate_up_proj.weight", "1", 2)),
)
# the sandwich norms under the names the builder gives them (Gemma 2's) -> GLM-4's
GLM4_NORMS = (
    (LAYER + r"post_attention_layernorm\.weight", Rename(PREFIX + "post_self_attn_layernorm.weight")),
    (LAYER + r"pre_feedforward_layernorm\.weight", Rename(PREFIX + "post_attention_layernorm.weight")),
    (LAYER + r"post_feedforward_layernorm\.weight", Rename(PREFIX + "post_mlp_layernorm.weight")),
)


@family("glm", defaults=DEFAULTS, architectures=("GlmForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    return _model(raw, name, "glm", sandwich=False)


@family("glm4", defaults=DEFAULTS, architectures=("Glm4ForCausalLM",))
def read4(raw: RawConfig, name: str) -> ModelConfig:
    return _model(raw, name, "glm4", sandwich=True)


def _model(raw: RawConfig, name: str, family_name: str, sandwich: bool) -> ModelConfig:
    head_dim = sizes(raw)["head_dim"]
    return dense(
        raw,
        family_name,
        name,
        norms=rms_norms(raw, sandwich=sandwich),
        positions=Positions(rotary_dim=partial_rotary(raw, head_dim), interleave=True),
        attention=Attention(qkv_bias=bool(raw.get("attention_bias", kind=bool))),
        tensors=TensorMap(GATE_UP + (GLM4_NORMS if sandwich else ())),
    )
