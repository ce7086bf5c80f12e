"""RWKV-6 "Finch" (remote code, `model_type: rwkv6`, Rwkv6ForCausalLM of the hub's
modeling_rwkv6.py): RWKV-5's block (families/rwkv5.py) with data-dependent token shift and decay:
each of the time mixing's five inputs mixes x and the previous token by time_maa_* plus a LoRA
(time_maa_w1 / w2, 32 wide, 64 for hidden_size 4096) and the decay is time_decay plus a LoRA
(time_decay_w1 / w2, 64 wide, 128 for 4096) of the decay's input (builder/rwkv5.py); the GroupNorm
eps is 1e-5 x head_size_divisor^2. As the published code does, Rwkv6Config drops
`intermediate_size` and the heads are attention_hidden_size / head_size."""

from __future__ import annotations

from typing import Any

from tcp_compiler.frontend.config import ModelConfig, RawConfig, Ssm
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.families.rwkv5 import heads_of, multi_head_model

# Rwkv6Config's defaults (configuration_rwkv6.py), for the fields a config may leave out.
DEFAULTS: dict[str, Any] = dict(
    vocab_size=65536, hidden_size=768, num_hidden_layers=24, attention_hidden_size=None, head_size=64,
    head_size_divisor=8, layer_norm_epsilon=1e-5, tie_word_embeddings=False,
)  # fmt: skip
SEVEN_B_HIDDEN = 4096  # the published code widens both LoRAs for this hidden size (its 7B)


@family("rwkv6", defaults=DEFAULTS, architectures=("Rwkv6ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    hidden = raw.require("hidden_size")
    heads, head_size = heads_of(raw, hidden)
    wide = hidden == SEVEN_B_HIDDEN
    divisor = raw.require("head_size_divisor")
    ssm = Ssm("rwkv6", inner=hidden, state=head_size, conv_kernel=2, conv_bias=False, heads=heads,
              head_dim=head_size, token_shift=2 * hidden, norm_eps=1e-5 * divisor**2,
              mix_rank=64 if wide else 32, decay_rank=128 if wide else 64)  # fmt: skip
    return multi_head_model(raw, name, "rwkv6", ssm)
