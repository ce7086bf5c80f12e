"""Tencent HunYuan v1, dense (Hunyuan-0.5B to 7B) and MoE (Hunyuan-A13B), as transformers 5.23.0
runs them: the Llama block with an RMSNorm (with a weight) on each query and key head after RoPE
(query_layernorm, key_layernorm), and RoPE's "dynamic" type with an `alpha`, which transformers
reads as a fixed NTK stretch of the base, theta * alpha^(d / (d - 2)), whatever the length.
The MoE layer adds a shared MLP of intermediate_size to softmax-routed experts of the same width
(renormalised over the top k); transformers ignores moe_intermediate_size, num_shared_expert and
use_mixed_mlp_moe, and so does tcpc."""

from tcp_compiler.frontend.config import (
    Attention,
    ModelConfig,
    Moe,
    RawConfig,
    Rope,
    SharedExpert,
    read_rope,
)
from tcp_compiler.frontend.families.common import dense, head_size, layer_types, layers
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\.self_attn\."
PREFIX = r"model.layers.\1.self_attn."
# the per-head norms under HunYuan's names
TENSORS = TensorMap(
    (
        (LAYER + r"q_norm\.weight", Rename(PREFIX + "query_layernorm.weight")),
        (LAYER + r"k_norm\.weight", Rename(PREFIX + "key_layernorm.weight")),
    )
)

# HunYuanDenseV1Config's defaults (transformers 5.23.0); HunYuanMoEV1Config's add the MoE fields
DEFAULTS = {
    "vocab_size": 290943,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "attention_bias": False,
}
MOE_DEFAULTS = {**DEFAULTS, "num_experts": 1, "moe_topk": 1}


def head_dim(raw: RawConfig) -> int:
    """head_dim as given; hidden / heads without it (transformers 5.23's HunYuan attention cannot
    build a model without one: getattr(config, "head_dim", ...) finds the class's None)."""
    if raw.has("head_dim"):
        return raw.get("head_dim", kind=int)
    return head_size(raw, raw.require("hidden_size"), raw.require("num_attention_heads"))


def rope(raw: RawConfig, dim: int) -> Rope:
    """RoPE "dynamic" with an alpha: the fixed base theta * alpha^(dim / (dim - 2)) (transformers'
    ntk_alpha, computed in double as there); any other RoPE as every family reads it."""
    params = raw.nested("rope_parameters" if raw.has("rope_parameters") else "rope_scaling")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "dynamic" or not params.data.get("alpha"):  # no alpha, or 0: transformers' own dynamic
        return read_rope(raw)
    alpha = float(params.get("alpha", kind=(int, float)))
    if dim <= 2:
        raise raw.fail(f"head_dim: NTK-alpha RoPE needs more than 2 dims, got {dim}")
    theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))  # schema-checked
    return Rope(theta * alpha ** (dim / (dim - 2)))


def _model(raw: RawConfig, family_name: str, name: str, moe: Moe | None = None) -> ModelConfig:
    """The block both variants share; with `moe`, every layer's MLP is it."""
    dim = head_dim(raw)
    n = raw.require("num_hidden_layers")
    types = layer_types(raw, ["full_attention"] * n)
    bias = bool(raw.get("attention_bias", kind=bool))
    return dense(
        raw,
        family_name,
        name,
        head_dim_default=dim,
        attention=Attention(qkv_bias=bias, out_bias=bias, qk_norm="rotated"),
        layers=layers(raw, types, None, {"default": rope(raw, dim)}, set(range(n)) if moe else set()),
        moe=moe,
        tensors=TENSORS,
    )


@family("hunyuan_v1_dense", defaults=DEFAULTS, architectures=("HunYuanDenseV1ForCausalLM",))
def read_dense(raw: RawConfig, name: str) -> ModelConfig:
    return _model(raw, "hunyuan_v1_dense", name)


@family("hunyuan_v1_moe", defaults=MOE_DEFAULTS, architectures=("HunYuanMoEV1ForCausalLM",))
def read_moe(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    width = raw.require("intermediate_size")
    pre = "model.layers.{i}.mlp"
    parts = ("gate", "up", "down")
    moe = Moe(
        experts=raw.require("num_experts"),
        top_k=_top_k(raw, n),
        intermediate=width,
        normalize_top_k=True,
        router_name=f"{pre}.gate.wg.weight",
        expert_names=tuple(f"{pre}.experts.{{e}}.{p}_proj.weight" for p in parts),
        shared=SharedExpert(width, tuple(f"{pre}.shared_mlp.{p}_proj.weight" for p in parts)),
    )
    if moe.top_k > moe.experts:
        raise raw.fail(f"moe_topk ({moe.top_k}) exceeds num_experts ({moe.experts})")
    return _model(raw, "hunyuan_v1_moe", name, moe)


def _top_k(raw: RawConfig, n: int) -> int:
    """moe_topk: one count, or one per layer (A13B lists 8 for each); tcpc routes every layer alike,
    so a list must hold one value throughout."""
    value = raw.require("moe_topk", kind=(int, list))
    counts = [value] if isinstance(value, int) else value
    if not isinstance(value, int) and len(value) != n:
        raise raw.fail(f"moe_topk has {len(value)} entries but num_hidden_layers is {n}")
    for i, k in enumerate(counts):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            where = "moe_topk" if isinstance(value, int) else f"moe_topk[{i}]"
            raise raw.fail(f"{where}: expected an integer >= 1, got {k!r}")
    if len(set(counts)) > 1:
        raise raw.fail(f"moe_topk: per-layer counts that differ ({sorted(set(counts))}) are not supported")
    return counts[0]
