"""Granite 4 hybrids (GraniteMoeHybrid): Mamba-2 and attention layers by `layer_types` (mamba /
attention, or transformers 5's linear_attention / full_attention), each followed by a mixture of
experts plus a shared SwiGLU MLP every token runs (or the shared MLP alone with no experts), with
Granite's four multipliers (granite.py). The router takes the top-k of its logits and a softmax
over those k; RoPE only when position_embedding_type is "rope". The mixer's sizes are Bamba's
`mamba_*` fields. Checkpoints stack the experts: input_linear [E, 2F, D] (gate rows, then up
rows), output_linear [E, D, F]; the shared MLP's input_linear is [gate; up] too."""

from __future__ import annotations

import math

from tcp_compiler.frontend.config import (
    Layer,
    ModelConfig,
    Moe,
    Positions,
    RawConfig,
    SharedExpert,
    read_rope,
)
from tcp_compiler.frontend.families.bamba import MAMBA_KEYS
from tcp_compiler.frontend.families.common import dense, dense_mlp, listed_layer_types
from tcp_compiler.frontend.families.granite import multipliers
from tcp_compiler.frontend.families.mamba2 import mamba2_mixer
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Chunk, Expert, Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PRE = r"model.layers.\1."

# GraniteMoeHybridConfig's class defaults (transformers 5.23.0), for the fields a config may leave out.
DEFAULTS = dict(
    vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
    num_attention_heads=32, hidden_act="silu", max_position_embeddings=2048, rms_norm_eps=1e-6,
    tie_word_embeddings=False, attention_bias=False, embedding_multiplier=1.0, logits_scaling=1.0,
    residual_multiplier=1.0, attention_multiplier=1.0, num_local_experts=8, num_experts_per_tok=2,
    shared_intermediate_size=1024, position_embedding_type=None, mamba_n_heads=128, mamba_n_groups=1,
    mamba_d_state=256, mamba_d_head="auto", mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256,
    mamba_conv_bias=True, mamba_proj_bias=False,
    time_step_limit=[0.0, math.inf],
)  # fmt: skip

# a layer type (the published spelling, or transformers 5's) -> its mixer
MIXERS = {"linear_attention": "mamba", "full_attention": "attention"}


def tensors(experts: int) -> TensorMap:
    """The Mamba mixer under `mamba`; each expert's gate, up and down cut out of the stacks; the
    shared MLP (the dense MLP without experts) from its fused input_linear."""
    expert = LAYER + r"block_sparse_moe\.experts\.(\d+)\."
    stacked = PRE + "block_sparse_moe."
    shared = {"gate": Chunk(PRE + "shared_mlp.input_linear.weight", "0", 2),
              "up": Chunk(PRE + "shared_mlp.input_linear.weight", "1", 2),
              "down": Rename(PRE + "shared_mlp.output_linear.weight")}  # fmt: skip
    rules = [(LAYER + r"mixer\.(.+)", Rename(r"model.layers.\1.mamba.\2"))]
    for proj, rule in shared.items():
        rules += [(LAYER + rf"(?:shared_mlp|mlp)\.{proj}_proj\.weight", rule)]
    fused, down = stacked + "input_linear.weight", stacked + "output_linear.weight"
    rules += [
        (expert + r"gate_proj\.weight", Expert(fused, r"\2", experts, 0, 2, False, out_in=True)),
        (expert + r"up_proj\.weight", Expert(fused, r"\2", experts, 1, 2, False, out_in=True)),
        (expert + r"down_proj\.weight", Expert(down, r"\2", experts, out_in=True)),
    ]
    return TensorMap(tuple(rules))


def granite_moe(raw: RawConfig, experts: int, shared: SharedExpert | None) -> Moe:
    """Granite's MoE block (Granite 3 MoE and Granite 4): `experts` of `intermediate_size`, the top
    k router logits softmaxed, beside `shared`."""
    return Moe(
        experts=experts,
        top_k=raw.require("num_experts_per_tok"),
        intermediate=raw.require("intermediate_size"),
        normalize_top_k=False,
        router_name="model.layers.{i}.block_sparse_moe.router.layer.weight",
        expert_names=mlp_names("model.layers.{i}.block_sparse_moe.experts.{e}"),
        softmax_after_top_k=True,
        shared=shared,
    )


def mlp_names(pre: str) -> tuple[str, str, str]:
    """The gate, up and down weights' canonical names under `pre` (a template)."""
    return f"{pre}.gate_proj.weight", f"{pre}.up_proj.weight", f"{pre}.down_proj.weight"


@family("granitemoehybrid", defaults=DEFAULTS, architectures=("GraniteMoeHybridForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = raw.require("num_hidden_layers")
    types = listed_layer_types(raw, "layer_types", MIXERS) or ["linear_attention"] * n
    if len(types) != n:
        raise raw.fail(f"layer_types has {len(types)} entries but num_hidden_layers is {n}")
    roped = raw.get("position_embedding_type", kind=str) == "rope"
    rope = read_rope(raw) if roped else None
    # 0 experts (Granite-4.0-H-1B): the shared MLP alone; the schema's range starts at 1
    experts = 0 if raw.data.get("num_local_experts") == 0 else raw.require("num_local_experts")
    shared = raw.require("shared_intermediate_size")
    moe = None
    if experts > 0:
        moe = granite_moe(raw, experts, SharedExpert(shared, mlp_names("model.layers.{i}.shared_mlp")))
        if moe.top_k > experts:
            raise raw.fail(f"num_experts_per_tok ({moe.top_k}) exceeds num_local_experts ({experts})")
    layers = tuple(
        Layer(None, rope if MIXERS[t] == "attention" else None, "rope", moe is not None, mixer=MIXERS[t])
        for t in types
    )
    fields = dict(
        layers=layers,
        ssm=mamba2_mixer(raw, MAMBA_KEYS),
        moe=moe,
        mlp=dense_mlp(raw),
        positions=Positions("rope" if roped else "none"),
        tensors=tensors(max(experts, 0)),
        **multipliers(raw),
    )
    if moe is None:  # the shared MLP is the layer's dense MLP
        fields["intermediate"] = shared
    return dense(raw, "granitemoehybrid", name, **fields)
