"""Families register themselves: a module with `@family(...)` is found without being listed."""

from __future__ import annotations

import json
import pkgutil
import re
from pathlib import Path

import pytest

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend import families
from tcp_compiler.frontend.config import RawConfig
from tcp_compiler.frontend.families import FAMILIES, read_model_config, supported
from tcp_compiler.frontend.families.registry import ARCHITECTURES, DEFAULTS, family
from tcp_compiler.frontend.model import BUNDLED


def test_every_family_module_registers_its_reader() -> None:
    helpers = {"common", "registry", "deepseek_parts"}  # deepseek_parts: what the DeepSeek families share
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
        DEFAULTS.pop("toy_family", None)


def test_an_unknown_model_type_is_read_by_its_supported_architecture(tmp_path: Path) -> None:
    """Kimi-K2 publishes DeepSeek-V3's architecture under its own model_type: read as deepseek_v3,
    and the model's name (every report's model line) says so."""
    deepseek = json.loads((BUNDLED / "deepseek-v3.json").read_text())
    assert deepseek["architectures"] == ["DeepseekV3ForCausalLM"]
    kimi = read_model_config(RawConfig({**deepseek, "model_type": "kimi_k2"}, "config.json"), "kimi-k2")
    reference = read_model_config(RawConfig(deepseek, "config.json"), "kimi-k2")
    assert kimi.family == "deepseek_v3" and ARCHITECTURES["DeepseekV3ForCausalLM"] == "deepseek_v3"
    assert kimi.name == "kimi-k2 (kimi_k2 read as deepseek_v3: DeepseekV3ForCausalLM)"
    assert kimi.layers == reference.layers and kimi.moe == reference.moe and kimi.mla == reference.mla


@pytest.mark.parametrize("architectures", [None, [], ["XLSTMForCausalLM"], [7]])
def test_an_unknown_model_type_without_a_known_architecture_is_one_error(architectures) -> None:
    data = {"model_type": "kimi_k2", "hidden_size": 64}
    if architectures is not None:
        data["architectures"] = architectures
    with pytest.raises(
        FrontendError,
        match=r"^config.json: model_type 'kimi_k2' is not supported and no entry "
        r"of 'architectures' is \(supported model types: " + re.escape(", ".join(supported())) + r"\)$",
    ):
        read_model_config(RawConfig(data, "config.json"), "m")
