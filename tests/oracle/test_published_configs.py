"""Published config.json files (tests/fixtures/published_configs, each from a public repository:
index.toml names the repository, path and commit) read by tcpc's config reader, and, where
transformers 5.23.0 ships the family, tcpc's parameter count equal to transformers' own on the
meta device (no weights allocated). Remote-code families (MiMo, DeciLM) are only read here: their
counts are checked against numpy references from their modelling code in their own tests. A config
the index marks `refused` is one transformers refuses too (a trimmed test config whose layer_types
disagree with num_hidden_layers): tcpc refuses it with a one-line error naming the field."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import torch
from huggingface_hub.errors import StrictDataclassClassValidationError
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.families import ARCHITECTURES
from tcp_compiler.frontend.model import load_model
from tests.oracle.param_counts import tcpc_params, transformers_params

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "published_configs"
INDEX = tomllib.loads((ROOT / "index.toml").read_text())["config"]


def transformers_type(data: dict) -> str | None:
    """The transformers model type that reads `data`: its own, or (Kimi-K2's kimi_k2) that of the
    supported architecture it declares; None for remote-code families transformers does not ship."""
    if data["model_type"] in CONFIG_MAPPING:
        return data["model_type"]
    declared = [ARCHITECTURES[a] for a in data.get("architectures") or [] if a in ARCHITECTURES]
    return next((t for t in declared if t in CONFIG_MAPPING), None)


def transformers_count(data: dict, model_type: str) -> int:
    """transformers' causal LM for the config's text model (a multimodal config's text_config), on
    meta; for a text model with no causal LM class of its own (Qwen3-VL's), the image-text model's
    language model and LM head (its vision encoder and projector are not what tcpc builds)."""
    fields = {k: v for k, v in data.items() if k not in ("model_type", "auto_map")}
    whole = AutoConfig.for_model(model_type, **fields)
    config = whole.get_text_config()
    with torch.device("meta"):
        if type(config) in MODEL_FOR_CAUSAL_LM_MAPPING:
            return transformers_params(AutoModelForCausalLM.from_config(config))
        model = AutoModelForImageTextToText.from_config(whole)
    text = ("model.language_model.", "lm_head.")
    vision = sum(p.numel() for n, p in model.named_parameters() if not n.startswith(text))
    return transformers_params(model) - vision


def test_index_lists_every_fixture_with_its_source() -> None:
    listed = {entry["file"] for entry in INDEX}
    assert listed == {str(p.relative_to(ROOT)) for p in ROOT.glob("*/*.json")}
    assert len(INDEX) >= 80
    for entry in INDEX:
        assert entry["repository"].count("/") == 1 and entry["path"].endswith(".json"), entry
        assert len(entry["commit"]) == 40 and int(entry["commit"], 16) >= 0, entry


@pytest.mark.parametrize("entry", INDEX, ids=[e["file"] for e in INDEX])
def test_published_config_is_read_with_transformers_parameter_count(entry: dict) -> None:
    path = ROOT / entry["file"]
    data = json.loads(path.read_text())
    if "refused" in entry:
        with pytest.raises(FrontendError) as refusal:
            load_model(path)
        assert str(refusal.value) == f"{path}: {entry['refused']}"
        with pytest.raises(StrictDataclassClassValidationError):
            transformers_count(data, transformers_type(data))
        return
    ours = tcpc_params(load_model(path).config)
    model_type = transformers_type(data)
    if model_type is None:
        assert ours > 0
        return
    assert ours == transformers_count(data, model_type)
