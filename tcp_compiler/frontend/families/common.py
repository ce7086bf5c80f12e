"""What the decoder-only families share: sizes, norms, activations, per-layer attention windows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tcp_compiler.frontend.config import Embedding, Layer, Mlp, ModelConfig, Norms, RawConfig, Rope, read_rope

ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
    "relu2": "relu2",
}


def activation(raw: RawConfig, default: str, *keys: str) -> str:
    """The MLP activation from the first of `keys` present; transformers' default when none is."""
    for key in keys:
        if raw.has(key):
            name = raw.get(key, kind=str)
            if name not in ACTIVATIONS:
                supported = ", ".join(sorted(ACTIVATIONS))
                raise raw.fail(f"field '{key}' = {name!r} is not supported (supported: {supported})")
            return ACTIVATIONS[name]
    return ACTIVATIONS[default]


def sizes(raw: RawConfig, head_dim_default: int | None = None) -> dict[str, Any]:
    """The fields every family has, checked for consistency."""
    hidden = raw.require("hidden_size")
    heads = raw.require("num_attention_heads")
    kv_heads = raw.get("num_key_value_heads", heads, kind=int)
    if heads % kv_heads:
        raise raw.fail(
            f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})"
        )
    if head_dim_default is None and not raw.has("head_dim"):  # GLM-4.5-Air: 96 heads of 128 in 4096
        if hidden % heads:
            raise raw.fail(
                f"hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads}); set head_dim"
            )
        head_dim_default = hidden // heads
    head_dim = raw.get("head_dim", head_dim_default, kind=int)
    if head_dim % 2:
        raise raw.fail(f"head_dim must be even for rotary embeddings, got {head_dim}")
    return {
        "vocab": raw.require("vocab_size"),
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate": raw.require("intermediate_size"),
        "max_positions": raw.get("max_position_embeddings", 0, kind=int),
        "dtype": saved_dtype(raw, "bfloat16"),
    }


def partial_rotary(raw: RawConfig, head_dim: int, default: float = 1.0, top_level: bool = True) -> int | None:
    """RoPE's dims per head from partial_rotary_factor (transformers 5 keeps it in
    rope_parameters, older files at the top level; `default` when neither has it, or when
    `top_level` is off: Bamba's config overwrites a top-level one with its 0.5), as transformers
    computes them, int(head_dim * factor); None when RoPE rotates the whole head."""
    outer = raw.get("partial_rotary_factor", default, kind=(int, float)) if top_level else default
    fraction = raw.nested("rope_parameters").get("partial_rotary_factor", outer, kind=(int, float))
    rotary = int(head_dim * fraction)
    if rotary <= 0 or rotary % 2 or rotary > head_dim:
        raise raw.fail(
            f"partial_rotary_factor {fraction} gives {rotary} rotary dims of {head_dim}; "
            "expected an even count > 0"
        )
    return None if rotary == head_dim else rotary


# the older layer-type names transformers 5 reads as the current ones, in every config
# (configuration_utils.remap_legacy_layer_types)
LEGACY_LAYER_TYPES = {"mamba": "linear_attention", "attention": "full_attention"}


def listed_layer_types(
    raw: RawConfig, key: str, allowed: Iterable[str], fallback: list[str] | None = None
) -> list[str] | None:
    """The config's list of layer types under `key` (else `fallback`; None without either), each
    one of `allowed`, older names read as transformers 5 reads them; an entry that is not is
    refused naming what the config wrote."""
    types = raw.get(key, fallback, kind=list)
    if types is None:
        return None
    allowed = tuple(allowed)
    names = [old for old, new in LEGACY_LAYER_TYPES.items() if new in allowed] + list(allowed)
    read = []
    for i, t in enumerate(types):
        current = LEGACY_LAYER_TYPES.get(t, t) if isinstance(t, str) else t
        if current not in allowed:
            raise raw.fail(f"{raw.path(key)}[{i}]: expected one of {', '.join(names)}, got {t!r}")
        read.append(current)
    return read


def layer_types(raw: RawConfig, fallback: list[str]) -> list[str]:
    """`layer_types` when the config has it (transformers 5), else the family's own rule."""
    n = raw.require("num_hidden_layers")
    types = listed_layer_types(raw, "layer_types", ("full_attention", "sliding_attention"), fallback)
    if len(types) != n:
        raise raw.fail(f"layer_types has {len(types)} entries but num_hidden_layers is {n}")
    return types


def qwen_windows(raw: RawConfig) -> tuple[list[str], int | None]:
    """Qwen-style layer types and window: with use_sliding_window, layers from max_window_layers on
    slide; `layer_types` (transformers 5) overrides that rule."""
    n = raw.require("num_hidden_layers")
    enabled = bool(raw.get("use_sliding_window", False, kind=bool))
    first = raw.get("max_window_layers", n, kind=int) if enabled else n
    types = layer_types(
        raw, ["sliding_attention" if enabled and i >= first else "full_attention" for i in range(n)]
    )
    window = raw.get("sliding_window", kind=int) if enabled or "sliding_attention" in types else None
    return types, window


def layers(
    raw: RawConfig,
    types: list[str],
    window: int | None,
    ropes: dict[str, Rope],
    moe_layers: set[int] = frozenset(),
) -> tuple[Layer, ...]:
    """One Layer per entry of `types`; `ropes` maps a layer type (or "default") to its RoPE."""
    if "sliding_attention" in types and window is None:
        raise raw.fail("layer_types has sliding_attention layers but sliding_window is not set")
    result = []
    for i, t in enumerate(types):
        key = t if t in ropes else "default"
        sliding = window if t == "sliding_attention" else None
        result.append(
            Layer(sliding, ropes[key], "rope" if len(ropes) == 1 else f"rope.{key}", i in moe_layers)
        )
    return tuple(result)


def dense(raw: RawConfig, family: str, name: str, **overrides: Any) -> ModelConfig:
    """A Llama-shaped model: RMSNorm, RoPE, GQA, gated MLP; `overrides` set the fields and groups
    that differ (a group given is given whole: `mlp=dense_mlp(raw, bias=True)`)."""
    fields = sizes(raw, overrides.pop("head_dim_default", None))
    defaults = {  # read only where not overridden (Apertus's xielu is no hidden_act dense_mlp reads)
        "norms": lambda: rms_norms(raw),
        "mlp": lambda: dense_mlp(raw),
        "embedding": lambda: Embedding(tied=bool(raw.get("tie_word_embeddings", False, kind=bool))),
    }
    fields.update({key: make() for key, make in defaults.items() if key not in overrides})
    fields.update(overrides)
    if "layers" not in fields:
        types = layer_types(raw, ["full_attention"] * raw.require("num_hidden_layers"))
        fields["layers"] = layers(
            raw, types, raw.get("sliding_window", kind=int), {"default": read_rope(raw)}
        )
    return ModelConfig(name=name, family=family, **fields)


def rms_norms(raw: RawConfig, **options: Any) -> Norms:
    """RMSNorm with rms_norm_eps (default 1e-6) and the `options` of Norms that differ."""
    return Norms(float(raw.get("rms_norm_eps", 1e-6, kind=(int, float))), **options)


def dense_mlp(raw: RawConfig, bias: bool = False) -> Mlp:
    """The gated MLP of a Llama-shaped model: hidden_act (default silu)."""
    return Mlp(activation(raw, "silu", "hidden_act"), bias=bias)


def first(raw: RawConfig, *keys: str, default: Any = None, kind: type | tuple[type, ...] = int) -> Any:
    """The first of `keys` the config has (families spell one field several ways, e.g. n_embd,
    n_embed, hidden_size); `default` when none is there, an error naming them all when no default."""
    for key in keys:
        if raw.has(key):
            return raw.get(key, kind=kind)
    if default is None:
        raise raw.fail(
            f"missing field '{keys[0]}' (or {', '.join(keys[1:])}; needed for {raw.family} models)"
        )
    return default


def without_rope(n: int) -> tuple[Layer, ...]:
    """n full-attention layers for models whose positions are not rotary."""
    return tuple(Layer(None, None, "rope", False) for _ in range(n))


def saved_dtype(raw: RawConfig, default: str) -> str:
    """The dtype the checkpoint was saved in (`torch_dtype`, or transformers 5's `dtype`)."""
    return raw.get("torch_dtype") or raw.get("dtype") or default


def head_size(
    raw: RawConfig,
    hidden: int,
    heads: int,
    hidden_key: str = "hidden_size",
    heads_key: str = "num_attention_heads",
) -> int:
    """hidden / heads for families without a head_dim field, named by the family's own field names."""
    if hidden % heads:
        raise raw.fail(f"{hidden_key} ({hidden}) must be a multiple of {heads_key} ({heads})")
    return hidden // heads


def sparse_layers(raw: RawConfig) -> set[int]:
    """Qwen MoE's expert layers: every decoder_sparse_step-th layer not in mlp_only_layers."""
    n = raw.require("num_hidden_layers")
    step = raw.get("decoder_sparse_step", 1, kind=int)
    dense_only = layer_indices(raw, "mlp_only_layers")
    return {i for i in range(n) if i not in dense_only and (i + 1) % step == 0}


def layer_indices(raw: RawConfig, key: str) -> set[int]:
    """The layer indices listed in `key` (none when absent or null), each checked to be a layer."""
    n = raw.require("num_hidden_layers")
    chosen = raw.get(key, kind=list) or []
    for i, layer in enumerate(chosen):
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n:
            raise raw.fail(f"{raw.path(key)}[{i}]: expected a layer index from 0 to {n - 1}")
    return set(chosen)
