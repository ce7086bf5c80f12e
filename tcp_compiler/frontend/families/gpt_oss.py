"""gpt-oss: GQA with a learned sink logit per head in every softmax, sliding (even) and full (odd)
layers, biases on q/k/v/o, yarn RoPE; every MLP a mixture of experts whose router is a linear with
a bias (top-k of its logits, softmax over those k) and whose experts run gpt-oss's clamped SwiGLU
with biases. The experts are stored stacked, [E, in, out], gate and up interleaved in one
gate_up_proj; layout rules cut each expert's canonical [out, in] tensors out of them."""

from tcp_compiler.frontend.config import Attention, Mlp, ModelConfig, Moe, RawConfig, read_rope
from tcp_compiler.frontend.families.common import activation, dense, layer_types, layers
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Expert, TensorMap

EXPERT = r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\."
STACKED = r"model.layers.\1.mlp.experts."
# GptOssConfig's defaults where a config leaves a field out (its RoPE is yarn unless given).
DEFAULTS = {
    "num_key_value_heads": 8,
    "head_dim": 64,
    "sliding_window": 128,
    "rms_norm_eps": 1e-5,
    "attention_bias": True,
}
YARN = {
    "rope_type": "yarn",
    "rope_theta": 150000.0,
    "factor": 32.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 4096,
}


@family("gpt_oss", defaults=DEFAULTS, architectures=("GptOssForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    data = dict(raw.data)
    if "rope_parameters" not in data and "rope_scaling" not in data:
        data["rope_parameters"] = {**YARN, "rope_theta": data.get("rope_theta", YARN["rope_theta"])}
    raw = RawConfig(data, raw.source, raw.family, raw.prefix)
    n = raw.require("num_hidden_layers")
    experts = raw.require("num_local_experts")
    moe = Moe(
        experts=experts,
        top_k=raw.require("num_experts_per_tok"),
        intermediate=raw.require("intermediate_size"),
        normalize_top_k=False,
        router_name="model.layers.{i}.mlp.router.weight",
        expert_names=(  # canonical per-expert names: _expert_layout finds them in the stacked tensors
            "model.layers.{i}.mlp.experts.{e}.gate_proj.weight",
            "model.layers.{i}.mlp.experts.{e}.up_proj.weight",
            "model.layers.{i}.mlp.experts.{e}.down_proj.weight",
        ),
        router_bias=True,
        softmax_after_top_k=True,
        expert_bias=True,
    )
    if moe.top_k > moe.experts:
        raise raw.fail(f"num_experts_per_tok ({moe.top_k}) exceeds num_local_experts ({moe.experts})")
    types = layer_types(raw, ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)])
    bias = bool(raw.get("attention_bias", kind=bool))
    return dense(
        raw,
        "gpt_oss",
        name,
        attention=Attention(qkv_bias=bias, out_bias=bias, sinks=True),
        mlp=Mlp(
            activation(raw, "silu", "hidden_act"),
            swiglu_limit=float(raw.get("swiglu_limit", 7.0, kind=float)),
            swiglu_alpha=float(raw.get("swiglu_alpha", 1.702, kind=float)),
        ),
        moe=moe,
        layers=layers(
            raw, types, raw.get("sliding_window", kind=int), {"default": read_rope(raw)}, set(range(n))
        ),
        tensors=_expert_layout(experts),
    )


def _expert_layout(experts: int) -> TensorMap:
    """Each expert's gate, up and down weight and bias, cut out of the stacked tensors."""
    rules = []
    for proj, stacked, part, parts in (("gate", "gate_up_proj", 0, 2), ("up", "gate_up_proj", 1, 2),
                                       ("down", "down_proj", 0, 1)):  # fmt: skip
        for kind, suffix in (("weight", ""), ("bias", "_bias")):
            rule = Expert(STACKED + stacked + suffix, r"\2", experts, part, parts)
            rules.append((EXPERT + rf"{proj}_proj\.{kind}", rule))
    return TensorMap(tuple(rules))
