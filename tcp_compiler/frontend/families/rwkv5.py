"""RWKV-5 "Eagle" (remote code, `model_type: rwkv5`, Rwkv5ForCausalLM of the hub's
modeling_rwkv5.py): RWKV-4's block layout and names (rwkv.embeddings, block 0's pre_ln, ln1 / ln2,
attention.*, feed_forward.*, rwkv.ln_out, head) with multi-head time mixing: heads of `head_size`
channels (hidden_size / head_size of them), each a matrix-valued state decayed per key channel
(time_decay), a bonus for the current token (time_faaaa), a GroupNorm per head (ln_x) and a
silu gate (builder/rwkv5.py). Channel mixing as RWKV-4's, its width int(3.5 hidden / 32) x 32.

As the published code does: Rwkv5Config drops `intermediate_size` (it always sets None), the heads
are hidden_size / head_size whatever `num_attention_heads` says (the config's 64 is the head size,
which the code does not read for the heads), ln_x normalises hidden_size channels (so the time
mixing's width must be hidden_size), and the hidden state is rescaled only for fp16 / bf16 weights
(no rescaling in the float32 forward this builds: a range guard, not part of the model)."""

from __future__ import annotations

from typing import Any

from tcp_compiler.frontend.config import Embedding, Layer, Mlp, ModelConfig, Norms, Positions, RawConfig, Ssm
from tcp_compiler.frontend.families.common import saved_dtype
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.families.rwkv import TORCH_LAYER_NORM_EPS, rwkv_tensors

# Rwkv5Config's defaults (configuration_rwkv5.py), for the fields a config may leave out.
DEFAULTS: dict[str, Any] = dict(
    vocab_size=65536, hidden_size=768, num_hidden_layers=24, attention_hidden_size=None, head_size=64,
    layer_norm_epsilon=1e-5, tie_word_embeddings=False,
)  # fmt: skip


def channel_mix_width(hidden: int) -> int:
    """RwkvFeedForward's width when the config gives none (and Rwkv5Config never passes one)."""
    return int((hidden * 3.5) // 32 * 32)


def heads_of(raw: RawConfig, hidden: int) -> tuple[int, int]:
    """(heads, head_size), checked: the time mixing is hidden_size wide (ln_x, a GroupNorm over
    hidden_size channels, normalises its output) in heads of head_size."""
    head_size = raw.require("head_size")
    if hidden % head_size:
        raise raw.fail(
            f"head_size: {head_size} does not divide hidden_size {hidden} (heads: hidden / head_size)"
        )
    inner = raw.get("attention_hidden_size", kind=int) or hidden
    if inner != hidden:
        raise raw.fail(f"attention_hidden_size: {inner} is not hidden_size {hidden} (ln_x spans hidden_size)")
    return hidden // head_size, head_size


@family("rwkv5", defaults=DEFAULTS, architectures=("Rwkv5ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    hidden = raw.require("hidden_size")
    heads, head_size = heads_of(raw, hidden)
    ssm = Ssm("rwkv5", inner=hidden, state=head_size, conv_kernel=2, conv_bias=False, heads=heads,
              head_dim=head_size, token_shift=2 * hidden)  # fmt: skip
    return multi_head_model(raw, name, "rwkv5", ssm)


def multi_head_model(raw: RawConfig, name: str, family_name: str, ssm: Ssm) -> ModelConfig:
    """An RWKV-5/6 model around its time mixing `ssm`: the blocks, norms, channel mixing and
    checkpoint names the two versions share."""
    hidden, n = raw.require("hidden_size"), raw.require("num_hidden_layers")
    return ModelConfig(
        name=name,
        family=family_name,
        vocab=raw.require("vocab_size"),
        hidden=hidden,
        heads=ssm.heads,
        kv_heads=ssm.heads,
        head_dim=ssm.head_dim,
        intermediate=channel_mix_width(hidden),
        layers=tuple(Layer(None, None, "rope", False, mixer="rwkv") for _ in range(n)),
        norms=Norms(
            float(raw.require("layer_norm_epsilon", (int, float))),
            "layer",
            embed=True,
            final_eps=TORCH_LAYER_NORM_EPS,
        ),  # fmt: skip
        mlp=Mlp("relu2", kind="plain"),  # channel mixing: relu(key)^2
        positions=Positions("none"),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", kind=bool))),
        ssm=ssm,
        max_positions=raw.get("context_length", 0, kind=int),
        dtype=saved_dtype(raw, "float32"),
        tensors=rwkv_tensors(),
    )
