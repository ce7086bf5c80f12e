"""DeepSeek-V3.2 (`DeepseekV32ForCausalLM`): DeepSeek-V3 (latent attention, always with the q LoRA
pair and interleaved RoPE; its MoE) plus DeepSeek Sparse Attention: a lightning indexer in every
layer picks each query's index_topk keys (config.Dsa, frontend/builder/dsa.py). The indexer's RoPE
pairs rotate-half (transformers 5.23's apply_rotary_pos_emb), unlike the attention's."""

from __future__ import annotations

import dataclasses

from tcp_compiler.frontend.config import Attention, Dsa, ModelConfig, Positions, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, layers, listed_layer_types
from tcp_compiler.frontend.families.deepseek_parts import mla_scale, read_mla
from tcp_compiler.frontend.families.deepseek_v3 import DEFAULTS as V3_DEFAULTS
from tcp_compiler.frontend.families.deepseek_v3 import sigmoid_moe
from tcp_compiler.frontend.families.registry import family

# DeepseekV32Config's defaults for the fields a config may leave out (transformers 5.23.0).
DEFAULTS = {
    **V3_DEFAULTS,
    "max_position_embeddings": 163840,
    "index_topk": 2048,
    "index_head_dim": 128,
    "index_n_heads": 64,
}


@family("deepseek_v32", defaults=DEFAULTS, architectures=("DeepseekV32ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    return sparse_mla(raw, "deepseek_v32", name, Dsa(*indexer_sizes(raw), interleave=False))


def sparse_mla(raw: RawConfig, family_name: str, name: str, dsa: Dsa) -> ModelConfig:
    """A DeepSeek-V3-shaped model with the indexer `dsa` (V3.2's and GLM-5's shared reader)."""
    n = raw.require("num_hidden_layers")
    if raw.get("attention_bias", False, kind=bool):
        raise raw.fail(f"attention_bias: true is not supported for {family_name} (released models have none)")
    if raw.get("scoring_func", "sigmoid", kind=str) != "sigmoid":
        raise raw.fail(f"scoring_func: expected 'sigmoid', got {raw.get('scoring_func')!r}")
    mla = read_mla(raw)
    if mla.q_lora_rank is None:
        raise raw.fail("q_lora_rank: expected a rank (the indexer's queries come from the q LoRA), got null")
    if dsa.head_dim < mla.rope_dim:
        raise raw.fail(
            f"index_head_dim ({dsa.head_dim}) is smaller than qk_rope_head_dim ({mla.rope_dim}), "
            "which the indexer rotates"
        )
    listed_layer_types(raw, "layer_types", ("indexed_attention",))
    heads = raw.require("num_attention_heads")
    first = min(raw.get("first_k_dense_replace", 3, kind=int), n)
    mlp = listed_layer_types(
        raw, "mlp_layer_types", ("dense", "sparse"), ["dense"] * first + ["sparse"] * (n - first)
    )
    assert mlp is not None
    if len(mlp) != n:
        raise raw.fail(f"mlp_layer_types has {len(mlp)} entries but num_hidden_layers is {n}")
    cfg = dense(
        raw,
        family_name,
        name,
        head_dim_default=mla.nope_dim + mla.rope_dim,
        head_dim=mla.nope_dim + mla.rope_dim,
        kv_heads=heads,  # every head reads the one latent; num_key_value_heads plays no part
        positions=Positions(rotary_dim=mla.rope_dim, interleave=True),  # the attention's, always
        attention=Attention(scale=mla_scale(raw, mla)),
        mla=mla,
        moe=sigmoid_moe(raw),
        layers=layers(
            raw,
            ["full_attention"] * n,
            None,
            {"default": read_rope(raw)},
            {i for i, kind in enumerate(mlp) if kind == "sparse"},
        ),  # fmt: skip
    )
    return dataclasses.replace(cfg, dsa=dsa)


def indexer_sizes(raw: RawConfig) -> tuple[int, int, int]:
    """(index_topk, index_n_heads, index_head_dim)."""
    return raw.require("index_topk"), raw.require("index_n_heads"), raw.require("index_head_dim")
