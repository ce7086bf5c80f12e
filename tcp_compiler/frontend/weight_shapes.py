"""The shape each checkpoint tensor must have, as the model's config implies, checked from the
safetensors headers alone when a checkpoint is opened.

Binding a weight is a reshape, which checks only the element count: a q_proj stored [16, 64] where
the config implies [32, 32], or a gate stored transposed, would load and run with scrambled values.
So every tensor the config names is compared, by its header, with the shape the config implies,
and a mismatch is a one-line error naming the tensor, its file and the config.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tcp_compiler.frontend.checkpoint import Checkpoint, CheckpointError
from tcp_compiler.frontend.config import ModelConfig

Shape = tuple[int, ...]
_NORMS = (
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
)


def canonical_shapes(cfg: ModelConfig) -> Iterator[tuple[str, Shape]]:
    """(canonical name, whole unsharded shape in the canonical [out, in] layout) of every weight
    the config can ask for; a checkpoint need not hold all of them (biases, untied heads)."""
    V, D, H, Hkv, K, F = cfg.vocab, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.intermediate
    yield "model.embed_tokens.weight", (V, D)
    yield "lm_head.weight", (V, D)
    if cfg.position == "learned":
        yield "model.embed_positions.weight", (cfg.max_positions, D)
    for part in ("weight", "bias"):
        yield f"model.embed_norm.{part}", (D,)
        yield f"model.norm.{part}", (D,)
    for i, layer in enumerate(cfg.layers):
        pre = f"model.layers.{i}"
        for norm in _NORMS:
            yield f"{pre}.{norm}.weight", (D,)
            yield f"{pre}.{norm}.bias", (D,)
        for proj, rows in (("q_proj", H * K), ("k_proj", Hkv * K), ("v_proj", Hkv * K)):
            yield f"{pre}.self_attn.{proj}.weight", (rows, D)
            yield f"{pre}.self_attn.{proj}.bias", (rows,)
        yield f"{pre}.self_attn.o_proj.weight", (D, H * K)
        yield f"{pre}.self_attn.o_proj.bias", (D,)
        all_heads = cfg.qk_norm_all_heads  # OLMo 2 norms all heads at once
        yield f"{pre}.self_attn.q_norm.weight", (H * K,) if all_heads else (K,)
        yield f"{pre}.self_attn.k_norm.weight", (Hkv * K,) if all_heads else (K,)
        if layer.moe and cfg.moe is not None:
            moe = cfg.moe
            yield moe.router_name.format(i=i), (moe.experts, D)
            gate, up, down = moe.expert_names
            for e in range(moe.experts):
                yield gate.format(i=i, e=e), (moe.intermediate, D)
                yield up.format(i=i, e=e), (moe.intermediate, D)
                yield down.format(i=i, e=e), (D, moe.intermediate)
            continue
        for proj in ("gate_proj", "up_proj"):
            yield f"{pre}.mlp.{proj}.weight", (F, D)
            yield f"{pre}.mlp.{proj}.bias", (F,)
        yield f"{pre}.mlp.down_proj.weight", (D, F)
        yield f"{pre}.mlp.down_proj.bias", (D,)


def check_shapes(cfg: ModelConfig, checkpoint: Checkpoint, config_path: Path) -> None:
    """Raises CheckpointError for the first tensor whose header shape is not the one `cfg` implies."""
    for name, shape in canonical_shapes(cfg):
        source = cfg.tensors.source(name)
        want = source.stored(shape)
        for stored in source.tensors:
            info = checkpoint.find(stored)  # absent: the builder reports it if the graph needs it
            if info is not None and info.shape != want:
                raise CheckpointError(
                    f"{info.file}: tensor {stored!r} has shape {list(info.shape)}, but {config_path} "
                    f"implies {list(want)} for {name}"
                )
