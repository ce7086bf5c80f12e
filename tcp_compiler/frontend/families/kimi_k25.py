"""Kimi-K2.5 (`KimiK25ForConditionalGeneration`): a MoonViT image encoder in front of Kimi-K2's text
model, which the config nests in `text_config` (model_type kimi_k2 or deepseek_v3: DeepSeek-V3's
latent attention and sigmoid-routed experts, read by the deepseek_v3 reader with DeepseekV3Config's
defaults, as transformers' Kimi_K25Config builds it). Some published copies are flattened, the text
model's fields at the top level: those are read from there. tcpc runs text-only inputs: the vision
encoder and projector are neither built nor counted."""

from tcp_compiler.frontend.config import ModelConfig, RawConfig
from tcp_compiler.frontend.families import deepseek_v3
from tcp_compiler.frontend.families.common import text_model
from tcp_compiler.frontend.families.registry import family


@family("kimi_k25", architectures=("KimiK25ForConditionalGeneration",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    text = text_model(raw, tied_default=True, flat=True)  # Kimi_K25Config ties by default
    text = RawConfig({**deepseek_v3.DEFAULTS, **text.data}, text.source, text.family, text.prefix)
    return deepseek_v3.read(text, name)
