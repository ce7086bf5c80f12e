"""EXAONE 3.0 / 3.5 (remote code, `model_type: exaone`): a Llama block (pre-RMSNorms, GQA, RoPE
with transformers' rope_scaling types, SiLU-gated MLP, no biases) under GPT-2-style names:
`transformer.wte`, `transformer.h.{i}.ln_1` / `ln_2`, `attn.attention.{q,k,v,out}_proj`,
`mlp.c_fc_0` (gate) / `c_fc_1` (up) / `c_proj` (down), `transformer.ln_f`; and its own field names
(`num_layers`, `layer_norm_epsilon`, `activation_function`). LG's own conversion of these models
to EXAONE 4 (lgai-exaone/transformers, convert_old_exaone_to_exaone4_compatible.py) is this rename
with EXAONE 4's pre-norm, no-q/k-norm setting. The head size is hidden / heads, as the published
ExaoneSelfAttention computes it."""

from tcp_compiler.frontend.config import Embedding, Mlp, ModelConfig, Norms, RawConfig, read_rope
from tcp_compiler.frontend.families.common import activation, dense, first, head_size, layers
from tcp_compiler.frontend.families.registry import family
from tcp_compiler.frontend.layout import Rename, TensorMap

LAYER = r"model\.layers\.(\d+)\."
PREFIX = r"transformer.h.\1."
NAMES = (
    (r"model\.embed_tokens\.weight", "transformer.wte.weight"),
    (LAYER + r"input_layernorm\.weight", PREFIX + "ln_1.weight"),
    (LAYER + r"post_attention_layernorm\.weight", PREFIX + "ln_2.weight"),
    (LAYER + r"self_attn\.([qkv])_proj\.weight", PREFIX + r"attn.attention.\2_proj.weight"),
    (LAYER + r"self_attn\.o_proj\.weight", PREFIX + "attn.attention.out_proj.weight"),
    (LAYER + r"mlp\.gate_proj\.weight", PREFIX + "mlp.c_fc_0.weight"),
    (LAYER + r"mlp\.up_proj\.weight", PREFIX + "mlp.c_fc_1.weight"),
    (LAYER + r"mlp\.down_proj\.weight", PREFIX + "mlp.c_proj.weight"),
    (r"model\.norm\.weight", "transformer.ln_f.weight"),
)
# ExaoneConfig's defaults (configuration_exaone.py of the EXAONE 3.x repositories); the LM head is
# tied unless the config says otherwise (PretrainedConfig's default)
DEFAULTS = {"layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "max_position_embeddings": 2048}


@family("exaone", defaults=DEFAULTS, architectures=("ExaoneForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    n = first(raw, "num_layers", "num_hidden_layers")
    hidden, heads = raw.require("hidden_size"), raw.require("num_attention_heads")
    if not raw.has("intermediate_size"):  # ExaoneConfig's default: 4 x hidden
        raw = RawConfig({**raw.data, "intermediate_size": 4 * hidden}, raw.source, raw.family, raw.prefix)
    return dense(
        raw,
        "exaone",
        name,
        head_dim=head_size(raw, hidden, heads),
        norms=Norms(float(raw.require("layer_norm_epsilon", float))),
        mlp=Mlp(activation(raw, "silu", "activation_function")),
        embedding=Embedding(tied=bool(raw.get("tie_word_embeddings", kind=bool))),
        layers=layers(raw, ["full_attention"] * n, None, {"default": read_rope(raw)}),
        tensors=TensorMap(tuple((pattern, Rename(target)) for pattern, target in NAMES)),
    )
