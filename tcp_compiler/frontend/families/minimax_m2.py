"""MiniMax-M2 (`minimax_m2`): full attention in every layer, GQA without biases, an RMSNorm over
each token's whole query projection and whole key projection (weights of heads x head_dim, as
OLMo 2's), RoPE on the first `rotary_dim` dims of each head in rotate-half pairs, and a mixture of
intermediate_size-wide experts in every layer (Mixtral's w1 / w3 / w2 names) routed by sigmoid
scores plus a selection-only correction bias, the chosen k weights renormalised to sum to 1; no
shared expert. The multi-token-prediction modules (use_mtp) are neither loaded by transformers nor
counted here."""

from tcp_compiler.frontend.config import Attention, ModelConfig, Moe, Positions, RawConfig, read_rope
from tcp_compiler.frontend.families.common import dense, first, layer_types, layers, partial_rotary
from tcp_compiler.frontend.families.registry import family

PREFIX = "model.layers.{i}.block_sparse_moe"

# MiniMaxM2Config's class defaults (transformers 5.23.0) for the fields a config may leave out
DEFAULTS = {
    "vocab_size": 200064,
    "hidden_size": 3072,
    "intermediate_size": 1536,
    "num_hidden_layers": 62,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 196608,
    "num_experts_per_tok": 8,
    "num_local_experts": 256,
}


@family("minimax_m2", defaults=DEFAULTS, architectures=("MiniMaxM2ForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    if raw.get("scoring_func", "sigmoid", kind=str) != "sigmoid":
        raise raw.fail(
            f"scoring_func: expected 'sigmoid' (transformers' router), got {raw.get('scoring_func')!r}"
        )
    n = raw.require("num_hidden_layers")
    head_dim = raw.require("head_dim")
    # MiniMaxM2Config turns rotary_dim into partial_rotary_factor unless the config sets that
    rotary_dim = raw.get("rotary_dim", head_dim, kind=int)
    moe = Moe(
        experts=first(
            raw, "num_experts", "num_local_experts"
        ),  # the config class maps the first to the second
        top_k=raw.require("num_experts_per_tok"),
        intermediate=raw.require("intermediate_size"),
        normalize_top_k=True,
        router_name=f"{PREFIX}.gate.weight",
        expert_names=tuple(f"{PREFIX}.experts.{{e}}.{w}.weight" for w in ("w1", "w3", "w2")),
        scoring="sigmoid",
        correction_bias_name=f"{PREFIX}.e_score_correction_bias",
    )
    if moe.top_k > moe.experts:
        raise raw.fail(f"num_experts_per_tok ({moe.top_k}) exceeds num_local_experts ({moe.experts})")
    return dense(
        raw,
        "minimax_m2",
        name,
        positions=Positions(rotary_dim=partial_rotary(raw, head_dim, rotary_dim / head_dim)),
        attention=Attention(qk_norm="all_heads"),
        moe=moe,
        layers=layers(
            raw,
            layer_types(raw, ["full_attention"] * n),
            None,
            {"default": read_rope(raw, default_theta=5_000_000.0)},
            set(range(n)),
        ),
    )
