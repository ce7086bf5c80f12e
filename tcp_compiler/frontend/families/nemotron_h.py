"""Nemotron-H (NVIDIA): a stack of single-purpose pre-norm blocks, x + f(norm(x)), each f one of a
Mamba-2 mixer (M), attention without positions (*, no RoPE) or a plain MLP with relu^2 (-), as
`hybrid_override_pattern` (or transformers 5's `layers_block_type`) lists them; the layer count is
the pattern's length. The Mamba-2 mixer's inner width is mamba_num_heads x mamba_head_dim, its
in_proj and out_proj biases are `use_bias`, and its chunked (prefill) scan clamps dt to
[time_step_min, inf) whatever time_step_limit says. A MoE block (E, Nemotron 3) routes as
DeepSeek-V3 does (sigmoid scores, the selection-only e_score_correction_bias, top-k within the
topk_group best of n_group groups, norm_topk_prob, routed_scaling_factor) to n_routed_experts
non-gated relu^2 experts of moe_intermediate_size, beside one relu^2 shared expert of
moe_shared_expert_intermediate_size (n_shared_experts plays no part in transformers' model); with
moe_latent_size (Nemotron 3 Super) the routed experts run in that width, between a projection
from the hidden size and one back (fc1_latent_proj, fc2_latent_proj). Checkpoint names
(`backbone.*`, as published and as transformers saves them) put every block's f under `mixer`
(experts one by one) and its norm at `norm`; `embeddings` and `norm_f` at the ends."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tcp_compiler.frontend.config import (
    Layer,
    Mlp,
    ModelConfig,
    Moe,
    Norms,
    Positions,
    RawConfig,
    SharedExpert,
)
from tcp_compiler.frontend.families.common import activation, dense, listed_layer_types
from tcp_compiler.frontend.families.deepseek_parts import PREFIX
from tcp_compiler.frontend.families.deepseek_v3 import sigmoid_moe
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
    layer_norm_epsilon=1e-5, n_routed_experts=8, moe_intermediate_size=7688,
    moe_shared_expert_intermediate_size=7688, num_experts_per_tok=2, routed_scaling_factor=1.0, n_group=1,
    topk_group=1, norm_topk_prob=True,
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
    "mlp": dict(attention="skip"), "moe": dict(attention="skip", moe=True),
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
            types = listed_layer_types(raw, key, LAYERS)
            break
    else:
        pattern = raw.get("hybrid_override_pattern", "ME*-", kind=str)
        unknown = sorted(set(pattern) - set(PATTERN))
        if unknown or not pattern:
            key = raw.path("hybrid_override_pattern")
            raise raw.fail(f"{key}: expected letters M, *, - or E, got {pattern!r}")
        types = [PATTERN[c] for c in pattern]
    return types


@family("nemotron_h", defaults=DEFAULTS, architectures=("NemotronHForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    data = dict(raw.data)
    for old, new in ALIASES.items():
        if old in data:
            data[new] = data.pop(old)
    raw = RawConfig(data, raw.source, raw.family, raw.prefix)
    types = block_types(raw)
    layers = tuple(Layer(None, None, "rope", **{"moe": False, **LAYERS[t]}) for t in types)
    return dense(
        raw,
        "nemotron_h",
        name,
        head_dim_default=128,
        layers=layers,
        ssm=mamba2_mixer(raw, MAMBA_KEYS),
        norms=Norms(float(raw.require("layer_norm_epsilon", (int, float)))),
        mlp=Mlp(activation(raw, "relu2", "mlp_hidden_act"), "plain", bool(raw.get("mlp_bias", kind=bool))),
        moe=experts(raw) if "moe" in types else None,
        positions=Positions("none"),
        tensors=TENSORS,
    )


def experts(raw: RawConfig) -> Moe:
    """The MoE blocks' experts: DeepSeek-V3's routing (their checks too), non-gated, in the latent
    width where there is one, and the one shared expert of its own width."""
    if raw.get("mlp_bias", kind=bool):
        raise raw.fail(f"{raw.path('mlp_bias')}: expected false with MoE blocks (the shared expert's and the "
                       f"latent projections' biases are not supported)")  # fmt: skip
    names = tuple(f"{PREFIX}.shared_experts.{p}_proj.weight" for p in ("gate", "up", "down"))
    shared = SharedExpert(raw.require("moe_shared_expert_intermediate_size"), names)
    latent = (f"{PREFIX}.fc1_latent_proj.weight", f"{PREFIX}.fc2_latent_proj.weight")
    return replace(sigmoid_moe(raw), shared=shared, gated=False, latent=raw.get("moe_latent_size", kind=int),
                   latent_names=latent)  # fmt: skip
