"""The bundled gpt-oss-120b (issue 24): its parameters counted by tcpc equal transformers' own
count of GptOssForCausalLM built from the same config.json on the meta device, and the model card's
116.83B total (OpenAI's gpt-oss model card, arXiv 2508.10925, Table 1)."""

from __future__ import annotations

import json
from pathlib import Path

from tcp_compiler.frontend.model import BUNDLED, load_model
from tests.oracle.param_counts import bundled_on_meta, tcpc_params, transformers_params

PUBLISHED = Path(__file__).parents[1] / "fixtures/published_configs/gpt_oss/openai_gpt-oss-120b.json"


def test_the_bundled_config_is_the_published_one() -> None:
    """Value for value the copy named in tests/fixtures/published_configs/index.toml."""
    bundled = json.loads((BUNDLED / "gpt-oss-120b.json").read_text())
    assert bundled == json.loads(PUBLISHED.read_text())


def test_gpt_oss_120b_counts_as_transformers_and_the_card_do() -> None:
    model = bundled_on_meta("gpt-oss-120b", "GptOssConfig", "GptOssForCausalLM")
    counted = tcpc_params(load_model("gpt-oss-120b").config)
    assert counted == transformers_params(model) == 116_829_156_672
    assert round(counted / 1e9, 2) == 116.83
