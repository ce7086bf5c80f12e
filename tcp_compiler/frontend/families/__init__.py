"""Model families: each module here reads one family's config.json into a ModelConfig and
registers its reader (`registry.family`); every module of the package is imported here, so a new
family is one new module.
"""

from __future__ import annotations

import importlib
import pkgutil

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.config import ModelConfig, RawConfig
from tcp_compiler.frontend.families.registry import FAMILIES

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def supported() -> list[str]:
    """Every registered model_type, sorted."""
    return sorted(FAMILIES)


def read_model_config(raw: RawConfig, name: str) -> ModelConfig:
    model_type = raw.get("model_type", kind=str)
    if model_type is None:
        raise FrontendError(f"{raw.source}: missing field 'model_type' (supported: {', '.join(supported())})")
    if model_type not in FAMILIES:
        raise FrontendError(
            f"{raw.source}: model_type '{model_type}' is not supported (supported: {', '.join(supported())})"
        )
    raw.family = str(model_type)
    config = FAMILIES[model_type](raw, name)
    for layer in config.layers:
        if layer.rope is not None:
            layer.rope.check_factors(raw, config.rotary)
    return config
