"""Falcon-Mamba: Mamba-1's blocks with weightless RMSNorms (mixer_rms_eps) on dt's low-rank
projection, B and C before the scan (transformers' FalconMambaMixer)."""

from tcp_compiler.frontend.config import ModelConfig, RawConfig
from tcp_compiler.frontend.families.mamba import DEFAULTS, mamba1
from tcp_compiler.frontend.families.registry import family


@family(
    "falcon_mamba", defaults={**DEFAULTS, "mixer_rms_eps": 1e-6}, architectures=("FalconMambaForCausalLM",)
)
def read(raw: RawConfig, name: str) -> ModelConfig:
    return mamba1(raw, name, bcdt_norm_eps=float(raw.require("mixer_rms_eps", float)))
