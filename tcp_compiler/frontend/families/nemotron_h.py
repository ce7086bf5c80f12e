"""Nemotron-H (NVIDIA): a stack of single-purpose pre-norm blocks, x + f(norm(x)), each f one of a
Mamba-2 mixer (M), attention without positions (*, no RoPE) or a plain MLP with relu^2 (-), as
`hybrid_override_pattern` (or transformers 5's `layers_block_type`) lists them; the layer count is
the pattern's length. The Mamba-2 mixer's inner width is mamba_num_heads x mamba_head_dim, its
in_proj and out_proj biases are `use_bias`, and its chunked (prefill) scan clamps dt to
[time_step_min, inf) whatever time_step_limit says. MoE blocks (E) are refused. Checkpoint names
(`backbone.*`, as published and as transformers saves them) put every block's f under `mixer` and
its norm at `norm`; `embeddings` and `norm_f` at the ends."""

from __future__ import annotations

from typing import Any

from tcp_compiler.frontend.config import Layer, Mlp, ModelConfig, Norms, Positions, RawConfig
from tcp_compiler.frontend.families.common import activation, dense
from tcp_compiler.frontend.families.mamba2 import Mamba2Keys, mamba2_mixer
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."

# NemotronHConfig's class defaults (transformers 5.23.0), for the fields a config may leave out.
DEFAULTS = dict(
    vocab_size=131072, hidden_size=4096, tie_word_embeddings=False, num_attention_heads=32,
    num_key_value_heads=8, head_dim=128, max_position_embeddings=4096, intermediate_size=21504,
    mlp_hidden_act="relu2", mlp_bias=False,
    ssm_state_size=128, mamba_num_heads=128, mamba_head_dim=64, mamba_hidden_act="silu", n_groups=8,
    conv_kernel=4, time_step_min=0.001, use_conv_bias=True, chunk_size=128, use_bias=False,
    layer_norm_epsilon=1e-5,
)  # fmt: skip

# transformers' NemotronHConfig takes these older spellings for its own fields
ALIASES = {
    "mamba_n_groups": "n_groups", "mamba_d_conv": "conv_kernel", "mamba_expand": "expand",
    "mamba_dt_min": "time_step_min", "mamba_conv_bias": "use_conv_bias", "mamba_chunk_size": "chunk_size",
}  # fmt: skip

MAMBA_KEYS = Mamba2Keys(
    heads="mamba_num_heads", head_dim="mamba_head_dim", state="ssm_state_size", expand=None,
    proj_bias="use_bias", activation="mamba_hidden_act", dt_floor="time_step_min",
)  # fmt: skip

PATTERN = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
LAYERS: dict[str, dict[str, Any]] = {  # layer type -> its Layer fields: one part each
    "linear_attention": dict(mixer="mamba", ffn="skip"), "full_attention": dict(ffn="skip"),
    "mlp": dict(attention="skip"),
}  # fmt: skip

TENSORS = TensorMap(
    (
        (r"model\.embed_tokens\.(.+)", Rename(r"backbone.embeddings.\1")),
        (LAYER + r"(?:input|post_attention)_layernorm\.(.+)", Rename(r"backbone.layers.\1.norm.\2")),
        (LAYER + r"(?:self_attn|mlp|mixer)\.(.+)", Rename(r"backbone.layers.\1.mixer.\2")),
        (r"model\.norm\.(.+)", Rename(r"backbone.norm_f.\1")),
    )
)


def block_types(raw: RawConfig) -> list[str]:
    """Each block's type: `layers_block_type` (or `layer_types`), else the letters of
    `hybrid_override_pattern`, else transformers' default of four blocks."""
    for key in ("layers_block_type", "layer_types"):
        if raw.has(key):
            types = raw.get(key, kind=list)
            break
    else:
        pattern = raw.get("hybrid_override_pattern", "ME*-", kind=str)
        unknown = sorted(set(pattern) - set(PATTERN))
        if unknown or not pattern:
            key = raw.path("hybrid_override_pattern")
            raise raw.fail(f"{key}: expected letters M, *, - or E, got {pattern!r}")
        key, types = "hybrid_override_pattern", [PATTERN[c] for c in pattern]
    for i, t in enumerate(types):
        if t == "moe":
            raise raw.fail(f"{raw.path(key)}: MoE blocks (E, 'moe') are not supported yet (block {i})")
        if t not in LAYERS:
            raise raw.fail(f"{raw.path(key)}[{i}]: expected one of {', '.join(LAYERS)}, got {t!r}")
    return types


@family("nemotron_h", defaults=DEFAULTS, architectures=("NemotronHForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    data = dict(raw.data)
    for old, new in ALIASES.items():
        if old in data:
            data[new] = data.pop(old)
    raw = RawConfig(data, raw.source, raw.family, raw.prefix)
    layers = tuple(Layer(None, None, "rope", False, **LAYERS[t]) for t in block_types(raw))
    return dense(
        raw,
        "nemotron_h",
        name,
        head_dim_default=128,
        layers=layers,
        ssm=mamba2_mixer(raw, MAMBA_KEYS),
        norms=Norms(float(raw.require("layer_norm_epsilon", (int, float)))),
        mlp=Mlp(activation(raw, "relu2", "mlp_hidden_act"), "plain", bool(raw.get("mlp_bias", kind=bool))),
        positions=Positions("none"),
        tensors=TENSORS,
    )
