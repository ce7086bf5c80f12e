"""Parameter counts both ways, one home for every family's count test: tcpc's (the tensors its
prefill graph binds from a checkpoint) and transformers' own (its model class built on the meta
device from a bundled config.json: no weights allocated)."""

from __future__ import annotations

import json
import math

import torch
import transformers

from tcp_compiler.frontend.builder import build_prefill
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.model import BUNDLED
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.frontend.weight_shapes import canonical_shapes


def tcpc_params(cfg: ModelConfig) -> int:
    """Elements of every checkpoint tensor the model's graph binds, each counted once as the
    checkpoint stores it (`canonical_shapes`' stored shape: a fused QKV once, OPT's position table
    with the 2 offset rows the graph never reads); params built from several tensors (stacked
    experts, MLA's split projections) count as the graph holds them."""
    bound = {p.name: p.type.numel for p in build_prefill(cfg, PRECISIONS["bf16"], 1, 1).checkpoint_params()}
    stored: dict[str, int] = {}
    for name, shape, _ in canonical_shapes(cfg):
        if bound.pop(name, None) is not None:
            source = cfg.tensors.source(name)
            stored.update({tensor: math.prod(source.stored(shape)) for tensor in source.tensors})
    return sum(stored.values()) + sum(bound.values())


def transformers_params(model: torch.nn.Module) -> int:
    """transformers' parameters, plus the MoE router's correction bias: a checkpoint tensor that
    transformers holds as a buffer (GLM-4.5's, DeepSeek-V3's e_score_correction_bias)."""
    bias = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    return sum(p.numel() for p in model.parameters()) + bias


def bundled_on_meta(name: str, config_cls: str, model_cls: str) -> torch.nn.Module:
    """The bundled config `name` as transformers' `model_cls`, on the meta device."""
    data = json.loads((BUNDLED / f"{name}.json").read_text())
    config = getattr(transformers, config_cls)(**{k: v for k, v in data.items() if k != "model_type"})
    with torch.device("meta"):
        return getattr(transformers, model_cls)(config)
