"""Granite 3 MoE (`granitemoe`) and its shared-expert variant (`granitemoeshared`): Granite's
attention, residual, embedding and logits multipliers (granite.py) over a mixture of experts in
every layer, intermediate_size wide, routed as Granite 4's (granitemoehybrid.py): the top-k router
logits, a softmax over those k. granitemoeshared adds a SwiGLU MLP of shared_intermediate_size every
token runs (none when 0, its class default). Checkpoints stack the experts as Granite 4's do."""

from tcp_compiler.frontend.config import ModelConfig, RawConfig, SharedExpert, read_rope
from tcp_compiler.frontend.families.common import dense, layer_types, layers
from tcp_compiler.frontend.families.granite import multipliers
from tcp_compiler.frontend.families.granitemoehybrid import granite_moe, mlp_names, tensors
from tcp_compiler.frontend.families.registry import family

# GraniteMoeConfig's class defaults (transformers 5.23.0) that differ from what tcpc assumes
DEFAULTS = {"max_position_embeddings": 2048, "num_local_experts": 8, "num_experts_per_tok": 2}


def _read(raw: RawConfig, name: str, shared: int) -> ModelConfig:
    """Either family's model, with a shared MLP `shared` wide (none when 0)."""
    experts = raw.require("num_local_experts")
    moe = granite_moe(
        raw, experts, SharedExpert(shared, mlp_names("model.layers.{i}.shared_mlp")) if shared else None
    )
    if moe.top_k > experts:
        raise raw.fail(f"num_experts_per_tok ({moe.top_k}) exceeds num_local_experts ({experts})")
    n = raw.require("num_hidden_layers")
    every = layers(
        raw, layer_types(raw, ["full_attention"] * n), None, {"default": read_rope(raw)}, set(range(n))
    )
    return dense(raw, raw.family, name, moe=moe, layers=every, tensors=tensors(experts), **multipliers(raw))


@family("granitemoe", defaults=DEFAULTS, architectures=("GraniteMoeForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    return _read(raw, name, 0)


@family("granitemoeshared", defaults=DEFAULTS, architectures=("GraniteMoeSharedForCausalLM",))
def read_shared(raw: RawConfig, name: str) -> ModelConfig:
    return _read(raw, name, raw.get("shared_intermediate_size", 0, kind=int))
