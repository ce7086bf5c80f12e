"""The graph builder: prefill and decode graphs from a ModelConfig.

`build_prefill`, `build_decode` (model), `check_positions` and `past_context` (positions) and the
`ModelGraph` they return (core) are the package's public entry points, imported from here.
Inside, `core` holds the graph under construction (sizes, sharding, constants, naming, metadata)
and each block is a module of functions over it: `weights` (projection weights and formats),
`positions` (RoPE, learned and sinusoidal positions, ALiBi), `norms`, `masks`, `kv_cache`,
`attention` (with `mla`), `ffn` (dense MLP, MoE experts, shared experts) with `routing` (every MoE
routing), and `model` (layers, embedding, LM head). Blocks import the core and one another's
public functions only.
"""

from tcp_compiler.frontend.builder.core import ModelGraph
from tcp_compiler.frontend.builder.model import build_decode, build_prefill
from tcp_compiler.frontend.builder.positions import check_positions, past_context

__all__ = ["ModelGraph", "build_decode", "build_prefill", "check_positions", "past_context"]
