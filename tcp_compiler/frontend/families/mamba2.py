"""Mamba-2 (Dao & Gu, 2024, state space duality): Mamba blocks whose mixer has one scalar decay per
head of head_dim channels. in_proj gives the gate z, x with B and C (all three through the causal
convolution and SiLU) and dt per head; B and C are shared by the heads of each of n_groups groups;
the scan's output plus D x goes through a gated RMSNorm (rms over each group's channels of
y * silu(z)) and out_proj. dt is softplus(dt + dt_bias), clamped to time_step_limit in the chunked
(prefill) scan only, as transformers and mamba_ssm do. Untied embeddings by default."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tcp_compiler.frontend.config import ModelConfig, RawConfig, Ssm
from tcp_compiler.frontend.families.mamba import conv_activation, inner_width, ssm_model
from tcp_compiler.frontend.families.registry import family

# Mamba2Config's class defaults (transformers 5.23.0), for the fields a config may leave out.
DEFAULTS = dict(
    num_heads=128, head_dim=64, vocab_size=32768, hidden_size=4096, state_size=128, num_hidden_layers=64,
    layer_norm_epsilon=1e-5, expand=2, conv_kernel=4, n_groups=8, use_bias=False, use_conv_bias=True,
    hidden_act="silu", time_step_limit=[0.0, math.inf], chunk_size=256, tie_word_embeddings=False,
)  # fmt: skip


@dataclass(frozen=True)
class Mamba2Keys:
    """The config fields a family spells Mamba-2's sizes with (Mamba2Config's own by default; the
    hybrids prefix most with `mamba_`)."""

    heads: str = "num_heads"
    head_dim: str = "head_dim"  # a number, or "auto" for inner / heads (Bamba, Granite 4)
    groups: str = "n_groups"
    state: str = "state_size"
    conv_kernel: str = "conv_kernel"
    expand: str | None = "expand"  # None: the inner width is heads x head_dim (Nemotron-H)
    chunk: str = "chunk_size"
    conv_bias: str = "use_conv_bias"
    proj_bias: str = "use_bias"
    norm_eps: str = "layer_norm_epsilon"  # the gated RMSNorm's
    activation: str = "hidden_act"  # after the convolution
    dt_floor: str | None = None  # Nemotron-H clamps dt to [this field, inf), not to time_step_limit
    inner: str | None = None  # a field giving the inner width itself when set (Falcon-H1's mamba_d_ssm)


def mamba2_mixer(raw: RawConfig, keys: Mamba2Keys = Mamba2Keys()) -> Ssm:
    """Mamba-2's mixer from the fields `keys` names, checked as transformers checks them."""
    heads, head_dim = raw.require(keys.heads), raw.require(keys.head_dim, (int, str))
    given = keys.inner is not None and raw.has(keys.inner)
    if given:
        inner = raw.require(keys.inner)
    elif keys.expand is None:
        if not isinstance(head_dim, int):
            raise raw.fail(f"{raw.path(keys.head_dim)}: expected an integer, got {head_dim!r}")
        inner = heads * head_dim
    else:
        inner = inner_width(raw, keys.expand)
    if head_dim == "auto":
        head_dim = inner // heads
    if not isinstance(head_dim, int) or inner != heads * head_dim:
        width = keys.inner if given else f"hidden_size x {keys.expand}"
        raise raw.fail(f"{width} ({inner}) must equal {keys.heads} x {keys.head_dim} ({heads} x {head_dim})")
    groups = raw.require(keys.groups)
    if heads % groups:
        raise raw.fail(f"{keys.heads} ({heads}) must be a multiple of {keys.groups} ({groups})")
    if keys.dt_floor is None:
        dt_min, dt_max = dt_limit(raw)
    else:
        dt_min, dt_max = float(raw.require(keys.dt_floor, (int, float))), math.inf
    return Ssm(
        "mamba2",
        inner=inner,
        state=raw.require(keys.state),
        conv_kernel=raw.require(keys.conv_kernel),
        heads=heads,
        head_dim=head_dim,
        groups=groups,
        conv_bias=bool(raw.get(keys.conv_bias, kind=bool)),
        proj_bias=bool(raw.get(keys.proj_bias, kind=bool)),
        dt_min=dt_min,
        dt_max=dt_max,
        norm_eps=float(raw.require(keys.norm_eps, (int, float))),
        chunk=raw.require(keys.chunk),
        activation=conv_activation(raw, keys.activation),
    )


@family("mamba2", defaults=DEFAULTS, architectures=("Mamba2ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    return ssm_model(raw, name, mamba2_mixer(raw))


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
