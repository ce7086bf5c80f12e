"""The family registry: `model_type` -> the reader of that family's config.json, its transformers
class defaults, and the `architectures` names that identify it.

A family module registers its reader with `@family("model_type", ...)`; the package imports every
module in it once, so adding a family is adding one module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tcp_compiler.frontend.config import ModelConfig, RawConfig

Reader = Callable[[RawConfig, str], ModelConfig]

FAMILIES: dict[str, Reader] = {}  # model_type -> reader, filled as the family modules load
# model_type -> the transformers Configuration class's defaults for fields a published config may
# leave out (num_key_value_heads: Mistral's class uses 8 where Llama's copies the query heads)
DEFAULTS: dict[str, Mapping[str, Any]] = {}
ARCHITECTURES: dict[str, str] = {}  # an `architectures` entry (e.g. DeepseekV3ForCausalLM) -> model_type


def family(
    *model_types: str, defaults: Mapping[str, Any] | None = None, architectures: tuple[str, ...] = ()
) -> Callable[[Reader], Reader]:
    """Registers the decorated reader for each of `model_types` (each one family's only), with
    `defaults` filling the fields a config leaves out and the `architectures` names it is known by."""

    def register(read: Reader) -> Reader:
        for model_type in model_types:
            if model_type in FAMILIES:
                raise ValueError(f"model_type '{model_type}' is registered twice")
            FAMILIES[model_type] = read
            DEFAULTS[model_type] = dict(defaults or {})
        for name in architectures:
            if name in ARCHITECTURES:
                raise ValueError(f"architecture '{name}' is registered twice")
            ARCHITECTURES[name] = model_types[0]
        return read

    return register
