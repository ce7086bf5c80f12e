"""Mamba-2 (Dao & Gu, 2024, state space duality): Mamba blocks whose mixer has one scalar decay per
head of head_dim channels. in_proj gives the gate z, x with B and C (all three through the causal
convolution and SiLU) and dt per head; B and C are shared by the heads of each of n_groups groups;
the scan's output plus D x goes through a gated RMSNorm (rms over each group's channels of
y * silu(z)) and out_proj. dt is softplus(dt + dt_bias), clamped to time_step_limit in the chunked
(prefill) scan only, as transformers and mamba_ssm do. Untied embeddings by default."""

from __future__ import annotations

import math

from tcp_compiler.frontend.config import ModelConfig, RawConfig, Ssm
from tcp_compiler.frontend.families.mamba import inner_width, ssm_model
from tcp_compiler.frontend.families.registry import family

# Mamba2Config's class defaults (transformers 5.23.0), for the fields a config may leave out.
DEFAULTS = dict(
    num_heads=128, head_dim=64, vocab_size=32768, hidden_size=4096, state_size=128, num_hidden_layers=64,
    layer_norm_epsilon=1e-5, expand=2, conv_kernel=4, n_groups=8, use_bias=False, use_conv_bias=True,
    hidden_act="silu", time_step_limit=[0.0, math.inf], chunk_size=256, tie_word_embeddings=False,
)  # fmt: skip


@family("mamba2", defaults=DEFAULTS, architectures=("Mamba2ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    inner, heads, head_dim = inner_width(raw), raw.require("num_heads"), raw.require("head_dim")
    if inner != heads * head_dim:
        raise raw.fail(
            f"hidden_size x expand ({inner}) must equal num_heads x head_dim ({heads} x {head_dim})"
        )
    groups = raw.require("n_groups")
    if heads % groups:
        raise raw.fail(f"num_heads ({heads}) must be a multiple of n_groups ({groups})")
    dt_min, dt_max = dt_limit(raw)
    ssm = Ssm(
        "mamba2",
        inner=inner,
        state=raw.require("state_size"),
        conv_kernel=raw.require("conv_kernel"),
        heads=heads,
        head_dim=head_dim,
        groups=groups,
        conv_bias=bool(raw.get("use_conv_bias", kind=bool)),
        proj_bias=bool(raw.get("use_bias", kind=bool)),
        dt_min=dt_min,
        dt_max=dt_max,
        norm_eps=float(raw.require("layer_norm_epsilon", (int, float))),
        chunk=raw.require("chunk_size"),
    )
    return ssm_model(raw, name, ssm)


# transformers 5 writes a float JSON cannot hold as {"__float__": "Infinity"} (PreTrainedConfig.
# _encode_special_floats); Python's json writes Infinity bare. Both are read.
SPECIAL_FLOATS = {"Infinity": math.inf}


def dt_limit(raw: RawConfig) -> tuple[float, float]:
    """time_step_limit [min, max]: numbers with 0 <= min <= max (max may be Infinity)."""
    limit = [
        SPECIAL_FLOATS.get(x.get("__float__"), x) if isinstance(x, dict) and len(x) == 1 else x
        for x in raw.require("time_step_limit", list)
    ]
    ok = len(limit) == 2 and all(isinstance(x, int | float) and not isinstance(x, bool) for x in limit)
    if not ok or not 0 <= limit[0] <= limit[1] or math.isnan(limit[0]) or math.isinf(limit[0]):
        raise raw.fail(
            f"{raw.path('time_step_limit')}: expected [min, max] with 0 <= min <= max, got {limit!r}"
        )
    return float(limit[0]), float(limit[1])
