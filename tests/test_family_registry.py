"""Families register themselves: a module with `@family(...)` is found without being listed."""

from __future__ import annotations

import pkgutil

import pytest

from tcp_compiler.frontend import families
from tcp_compiler.frontend.config import RawConfig
from tcp_compiler.frontend.families import FAMILIES, read_model_config, supported
from tcp_compiler.frontend.families.registry import family


def test_every_family_module_registers_its_reader() -> None:
    helpers = {"common", "registry"}
    modules = {m.name for m in pkgutil.iter_modules(families.__path__)} - helpers
    registered = {FAMILIES[t].__module__.rsplit(".", 1)[-1] for t in FAMILIES}
    assert registered == modules
    assert supported() == sorted(FAMILIES) and {"llama", "gemma3_text", "tcpc_decoder"} <= set(FAMILIES)


def test_a_registered_family_is_read_and_a_second_registration_refused() -> None:
    llama = FAMILIES["llama"]
    try:
        family("toy_family")(lambda raw, name: llama(raw, name))
        sizes = {"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}
        raw = RawConfig({"model_type": "toy_family", "num_hidden_layers": 2, **sizes}, "toy")
        assert read_model_config(raw, "toy").hidden == 64 and "toy_family" in supported()
        with pytest.raises(ValueError, match="'toy_family' is registered twice"):
            family("toy_family")(llama)
    finally:
        FAMILIES.pop("toy_family", None)
