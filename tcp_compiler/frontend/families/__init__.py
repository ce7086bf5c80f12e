"""Model families: each module here reads one family's config.json into a ModelConfig and
registers its reader (`registry.family`); every module of the package is imported here, so a new
family is one new module.
"""

from __future__ import annotations

import importlib
import pkgutil

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.config import ModelConfig, RawConfig
from tcp_compiler.frontend.families.registry import ARCHITECTURES, DEFAULTS, FAMILIES

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def supported() -> list[str]:
    """Every registered model_type, sorted."""
    return sorted(FAMILIES)


def read_model_config(raw: RawConfig, name: str) -> ModelConfig:
    """The config read by its family's reader, with the family's transformers class defaults for the
    fields it leaves out. A `model_type` tcpc does not know is read by the family of a supported
    `architectures` entry (Kimi-K2 is `kimi_k2` over DeepseekV3ForCausalLM); the model's name then
    says so, as every report's model line shows it."""
    model_type = raw.get("model_type", kind=str)
    if model_type is None:
        raise FrontendError(f"{raw.source}: missing field 'model_type' (supported: {', '.join(supported())})")
    if model_type not in FAMILIES:
        declared = raw.get("architectures", [], kind=list)
        known = [a for a in declared if isinstance(a, str) and a in ARCHITECTURES]
        if not known:
            raise FrontendError(
                f"{raw.source}: model_type '{model_type}' is not supported and no entry of 'architectures' "
                f"is (supported model types: {', '.join(supported())})"
            )
        name = f"{name} ({model_type} read as {ARCHITECTURES[known[0]]}: {known[0]})"
        model_type = ARCHITECTURES[known[0]]
    data = {**DEFAULTS[model_type], **raw.data, "model_type": model_type}
    raw = RawConfig(data, raw.source, str(model_type))
    config = FAMILIES[model_type](raw, name)
    for layer in config.layers:
        if layer.rope is not None:
            layer.rope.check_factors(raw, config.rotary)
    return config
