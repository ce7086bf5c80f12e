"""`tcpc_decoder`: a decoder-only transformer described variant by variant, for architectures that
have no Hugging Face family (DeepNet's scaled residual, sinusoidal positions) or to try a mix that
no published model uses. Weights use the canonical (Llama-style) names: see tcp_compiler.frontend.layout.

Fields beyond the usual sizes (hidden_size, num_attention_heads, num_key_value_heads, head_dim,
intermediate_size, num_hidden_layers, vocab_size, max_position_embeddings):

- norm: "rms_norm" (default) or "layer_norm" (with bias); norm_eps (default 1e-5)
- block: "pre_norm" (default), "post_norm" or "parallel"; final_norm (default: not post_norm)
- residual_scale: alpha in alpha * x + f(x); a number or "deepnet" for DeepNet's (2 N)^(1/4),
  N the number of layers (default 1)
- position: "rope" (default; rope_theta / rope_parameters, rotary_pct), "learned",
  "alibi", "sinusoidal" or "none"
- mlp: "gated" (default) or "plain"; hidden_act (default "silu")
- attention_bias (q, k, v and output), mlp_bias, tie_word_embeddings (all default false)
"""

from typing import get_args

from tcp_compiler.frontend.config import (
    Attention,
    Embedding,
    Mlp,
    MlpKind,
    ModelConfig,
    Norms,
    PositionKind,
    Positions,
    RawConfig,
    Residual,
    read_rope,
)
from tcp_compiler.frontend.families.common import activation, layers, sizes
from tcp_compiler.frontend.families.registry import family

NORMS = {"rms_norm": "rms", "layer_norm": "layer"}
BLOCKS = {"pre_norm": "pre", "post_norm": "post", "parallel": "parallel"}
POSITIONS = get_args(PositionKind)
MLPS = get_args(MlpKind)


@family("tcpc_decoder")
def read(raw: RawConfig, name: str) -> ModelConfig:
    fields = sizes(raw)
    n = raw.require("num_hidden_layers")
    norm = NORMS[_choice(raw, "norm", tuple(NORMS), "rms_norm")]
    block = BLOCKS[_choice(raw, "block", tuple(BLOCKS), "pre_norm")]
    position = _choice(raw, "position", POSITIONS, "rope")
    alpha = raw.get("residual_scale", 1.0, kind=(int, float, str))
    if alpha == "deepnet":
        alpha = (2.0 * n) ** 0.25
    elif isinstance(alpha, str):
        raise raw.fail(f"field 'residual_scale' must be a number or \"deepnet\", got {alpha!r}")
    rope = read_rope(raw) if position == "rope" else None
    rotary = int(fields["head_dim"] * raw.get("rotary_pct", 1.0, kind=(int, float)))
    if position == "rope" and (rotary <= 0 or rotary % 2):
        raise raw.fail(
            f"rotary_pct gives {rotary} rotary dims of {fields['head_dim']}; expected an even count > 0"
        )
    if position == "learned" and not fields["max_positions"]:
        raise raw.fail("position 'learned' needs max_position_embeddings (the table's rows)")
    bias = bool(raw.get("attention_bias", False, kind=bool))
    eps = float(raw.get("norm_eps", 1e-5, kind=(int, float)))
    return ModelConfig(
        name=name,
        family="tcpc_decoder",
        layers=layers(raw, ["full_attention"] * n, None, {"default": rope}),
        norms=Norms(eps, norm, final=bool(raw.get("final_norm", block != "post", kind=bool))),
        mlp=Mlp(
            activation(raw, "silu", "hidden_act"),
            _choice(raw, "mlp", MLPS, "gated"),
            bool(raw.get("mlp_bias", False, kind=bool)),
        ),
        residual=Residual(block, float(alpha)),
        positions=Positions(position, rotary if position == "rope" else None),
        attention=Attention(qkv_bias=bias, out_bias=bias),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", False, kind=bool))),
        **fields,
    )


def _choice(raw: RawConfig, key: str, choices: tuple[str, ...], default: str) -> str:
    value = raw.get(key, default, kind=str)
    if value not in choices:
        raise raw.fail(f"field '{key}' = {value!r} is not one of {', '.join(choices)}")
    return value
