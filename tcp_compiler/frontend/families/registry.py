"""The family registry: `model_type` -> the reader of that family's config.json.

A family module registers its reader with `@family("model_type", ...)`; the package imports every
module in it once, so adding a family is adding one module.
"""

from __future__ import annotations

from collections.abc import Callable

from tcp_compiler.frontend.config import ModelConfig, RawConfig

Reader = Callable[[RawConfig, str], ModelConfig]

FAMILIES: dict[str, Reader] = {}  # model_type -> reader, filled as the family modules load


def family(*model_types: str) -> Callable[[Reader], Reader]:
    """Registers the decorated reader for each of `model_types` (each one family's only)."""

    def register(read: Reader) -> Reader:
        for model_type in model_types:
            if model_type in FAMILIES:
                raise ValueError(f"model_type '{model_type}' is registered twice")
            FAMILIES[model_type] = read
        return read

    return register
