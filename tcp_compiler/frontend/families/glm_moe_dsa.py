"""GLM-5 (`GlmMoeDsaForCausalLM`): DeepSeek-V3.2's sparse latent attention (families.deepseek_v32)
with GLM's sizes and two indexer changes, as transformers 5.23.0 reads them: the indexer's RoPE
pairs are interleaved, and a layer may run no indexer of its own ("shared" in `indexer_types`),
reusing the selection of the last layer before it that does. Without `indexer_types` the pattern
comes from `index_topk_pattern` ("F"ull / "S"hared per layer) or, failing that, layer i runs its
indexer when max(i - index_skip_topk_offset + 1, 0) is a multiple of index_topk_freq (defaults 2
and 1: every layer)."""

from __future__ import annotations

from tcp_compiler.frontend.config import Dsa, ModelConfig, RawConfig
from tcp_compiler.frontend.families.common import listed_layer_types
from tcp_compiler.frontend.families.deepseek_v32 import DEFAULTS as V32_DEFAULTS
from tcp_compiler.frontend.families.deepseek_v32 import indexer_sizes, sparse_mla
from tcp_compiler.frontend.families.registry import family

# GlmMoeDsaConfig's defaults for the fields a config may leave out (transformers 5.23.0).
DEFAULTS = {
    **V32_DEFAULTS,
    "vocab_size": 154880,
    "hidden_size": 6144,
    "intermediate_size": 12288,
    "num_hidden_layers": 78,
    "num_attention_heads": 64,
    "q_lora_rank": 2048,
    "v_head_dim": 256,
    "qk_nope_head_dim": 192,
    "n_group": 1,
    "topk_group": 1,
    "max_position_embeddings": 202752,
    "rms_norm_eps": 1e-5,
    "index_n_heads": 32,
}


@family("glm_moe_dsa", defaults=DEFAULTS, architectures=("GlmMoeDsaForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    topk, heads, head_dim = indexer_sizes(raw)
    kinds = _indexer_types(raw)
    if kinds[0] != "full":
        raise raw.fail(
            "indexer_types[0]: expected 'full' (a shared layer reuses an earlier layer's selection)"
        )
    shared = frozenset(i for i, kind in enumerate(kinds) if kind == "shared")
    return sparse_mla(raw, "glm_moe_dsa", name, Dsa(topk, heads, head_dim, interleave=True, shared=shared))


def _indexer_types(raw: RawConfig) -> list[str]:
    """Each layer's indexer, "full" or "shared", as GlmMoeDsaConfig derives it (module docstring)."""
    n = raw.require("num_hidden_layers")
    pattern = raw.get("index_topk_pattern", kind=(str, list))
    if isinstance(pattern, str):
        letters = {"F": "full", "S": "shared"}
        if set(pattern) - set(letters):
            raise raw.fail(f"index_topk_pattern: expected letters F and S, got {pattern!r}")
        fallback = [letters[c] for c in pattern]
    elif pattern is not None:
        fallback = list(pattern)
    else:
        freq = max(raw.get("index_topk_freq", 1, kind=int), 1)
        offset = raw.get("index_skip_topk_offset", 2, kind=int)
        fallback = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n)]
    kinds = listed_layer_types(raw, "indexer_types", ("full", "shared"), fallback)
    assert kinds is not None
    if len(kinds) != n:
        raise raw.fail(f"indexer_types has {len(kinds)} entries but num_hidden_layers is {n}")
    return kinds
