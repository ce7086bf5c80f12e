"""MiMo (XiaomiMiMo/MiMo-7B, remote code `modeling_mimo.py`): Qwen 2's decoder, whose forward it
inherits unchanged, plus `num_nextn_predict_layers` multi-token-prediction layers the checkpoint
holds beside it. Generation does not run them (the published forward never calls them; vLLM skips
their weights unless it speculates with them): they are counted and reported, not built."""

import dataclasses

from tcp_compiler.frontend.config import ModelConfig, RawConfig
from tcp_compiler.frontend.families import qwen2
from tcp_compiler.frontend.families.registry import family


# MiMoConfig subclasses Qwen2Config (so its 32 KV heads by default) with num_nextn_predict_layers 0
@family(
    "mimo",
    defaults={"num_key_value_heads": 32, "num_nextn_predict_layers": 0},
    architectures=("MiMoForCausalLM",),
)
def read(raw: RawConfig, name: str) -> ModelConfig:
    mtp = raw.get("num_nextn_predict_layers", 0)
    return dataclasses.replace(qwen2.read(raw, name), family="mimo", mtp_layers=mtp)
