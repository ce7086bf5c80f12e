"""MiniCPM (remote code, `model_type: minicpm`: MiniCPM-1B / 2B and MiniCPM-MoE-8x2B): a Llama
block with muP-style multipliers, the ones Granite has under other names: embeddings times
`scale_emb`, each branch's output times scale_depth / sqrt(num_hidden_layers) before the residual,
the final hidden state divided by hidden_size / dim_model_base before the LM head (so the logits
are). With `num_experts` every layer's MLP is a top-`num_experts_per_tok` mixture of SwiGLU
experts (`experts.{e}.w1` gate, `w3` up, `w2` down) under a softmax router, the chosen weights
renormalised."""

import math

from tcp_compiler.frontend.config import (
    Attention,
    Embedding,
    ModelConfig,
    Moe,
    RawConfig,
    Residual,
    read_rope,
)
from tcp_compiler.frontend.families.common import dense, head_size, layers
from tcp_compiler.frontend.families.registry import family

# MiniCPMConfig's defaults (configuration_minicpm.py of the MiniCPM-2B repositories)
DEFAULTS = {
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
    "scale_emb": 1,
    "dim_model_base": 1,
    "scale_depth": 1,
}


@family("minicpm", defaults=DEFAULTS, architectures=("MiniCPMForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    bias = bool(raw.get("attention_bias", False, kind=bool))
    moe = None
    experts = raw.data.get("num_experts")  # 0: dense, as in MiniCPM's configs (the schema wants >= 1)
    if experts is not None and (experts != 0 or isinstance(experts, bool)):
        pre = "model.layers.{i}.mlp"
        moe = Moe(
            experts=raw.require("num_experts"),
            top_k=raw.require("num_experts_per_tok"),
            intermediate=raw.require("intermediate_size"),
            normalize_top_k=True,
            router_name=f"{pre}.gate.weight",
            expert_names=tuple(f"{pre}.experts.{{e}}.{w}.weight" for w in ("w1", "w3", "w2")),
        )
        if moe.top_k > moe.experts:
            raise raw.fail(f"num_experts_per_tok ({moe.top_k}) exceeds num_experts ({moe.experts})")
    return dense(
        raw,
        "minicpm",
        name,
        head_dim=head_size(raw, raw.require("hidden_size"), raw.require("num_attention_heads")),
        attention=Attention(qkv_bias=bias, out_bias=bias),
        moe=moe,
        layers=layers(
            raw, ["full_attention"] * n, None, {"default": read_rope(raw)}, set(range(n)) if moe else set()
        ),
        **multipliers(raw),
    )


def multipliers(raw: RawConfig, scale_in_table_dtype: bool = False) -> dict[str, Residual | Embedding]:
    """MiniCPM's muP multipliers as the ModelConfig groups that carry them (MiniCPM 3 has them too):
    `scale_emb` on the embeddings, scale_depth / sqrt(layers) on each branch, the logits over
    hidden / dim_model_base."""
    embed = float(raw.require("scale_emb", float))
    depth = float(raw.require("scale_depth", float)) / math.sqrt(raw.require("num_hidden_layers"))
    return {
        "residual": Residual(branch_scale=depth),
        "embedding": Embedding(
            scale=None if embed == 1.0 else embed,
            scale_in_table_dtype=scale_in_table_dtype,
            tied=bool(raw.get("tie_word_embeddings", kind=bool)),
            logits_divisor=raw.require("hidden_size") / float(raw.require("dim_model_base", float)),
        ),
    }
