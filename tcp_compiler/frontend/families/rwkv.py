"""RWKV-4 (Peng et al., 2023), as transformers' RwkvForCausalLM: a LayerNorm after the embedding
(block 0's pre_ln), then blocks of time mixing (token shift, key / value / receptance, the WKV
recurrence, sigmoid(receptance) * wkv, output) and channel mixing (token shift, relu(key)^2,
value, sigmoid(receptance) gate), each after its LayerNorm; ln_out; an untied head by default.
No attention and no positions: builder/rwkv.py."""

from __future__ import annotations

from typing import Any

from tcp_compiler.frontend.config import Embedding, Layer, Mlp, ModelConfig, Norms, Positions, RawConfig, Ssm
from tcp_compiler.frontend.families.common import saved_dtype
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Rename, TensorMap

# RwkvConfig's class defaults (transformers 5.23.0), for the fields a config may leave out.
DEFAULTS: dict[str, Any] = dict(
    vocab_size=50277, context_length=1024, hidden_size=4096, num_hidden_layers=32, attention_hidden_size=None,
    intermediate_size=None, layer_norm_epsilon=1e-5, rescale_every=6, tie_word_embeddings=False,
)  # fmt: skip


TORCH_LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default eps


def rwkv_tensors() -> TensorMap:
    """transformers' names: `rwkv.embeddings`, block 0's `pre_ln` (the embedding norm), each
    block's `rwkv.blocks.{i}.*`, `rwkv.ln_out`, the LM head `head`."""
    return TensorMap(
        (
            (r"model\.embed_tokens\.weight", Rename("rwkv.embeddings.weight")),
            (r"model\.embed_norm\.(weight|bias)", Rename(r"rwkv.blocks.0.pre_ln.\1")),
            (r"model\.layers\.(\d+)\.(.+)", Rename(r"rwkv.blocks.\1.\2")),
            (r"model\.norm\.(weight|bias)", Rename(r"rwkv.ln_out.\1")),
            (r"lm_head\.weight", Rename("head.weight")),
        )
    )


@family("rwkv", defaults=DEFAULTS, architectures=("RwkvForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    hidden, n = raw.require("hidden_size"), raw.require("num_hidden_layers")
    inner = raw.get("attention_hidden_size", kind=int) or hidden
    intermediate = raw.get("intermediate_size", kind=int) or 4 * hidden
    rescale = raw.require("rescale_every")  # 0: no rescaling (the schema's rule)
    ssm = Ssm("rwkv4", inner=inner, state=1, conv_kernel=2, conv_bias=False, token_shift=2 * hidden,
              rescale_every=rescale)  # fmt: skip
    return ModelConfig(
        name=name,
        family="rwkv",
        vocab=raw.require("vocab_size"),
        hidden=hidden,
        heads=1,
        kv_heads=1,
        head_dim=2,
        intermediate=intermediate,
        layers=tuple(Layer(None, None, "rope", False, mixer="rwkv") for _ in range(n)),
        # ln_out is built without layer_norm_epsilon: torch's LayerNorm default
        norms=Norms(float(raw.require("layer_norm_epsilon", (int, float))), "layer", embed=True,
                    final_eps=TORCH_LAYER_NORM_EPS),  # fmt: skip
        mlp=Mlp("relu2", kind="plain"),  # channel mixing: relu(key)^2
        positions=Positions("none"),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", kind=bool))),
        ssm=ssm,
        max_positions=raw.get("context_length", 0, kind=int),
        dtype=saved_dtype(raw, "float32"),
        tensors=rwkv_tensors(),
    )
