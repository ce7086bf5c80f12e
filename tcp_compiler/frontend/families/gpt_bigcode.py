"""GPTBigCode (SantaCoder, StarCoder 1): GPT-2's block (learned absolute positions, pre-LayerNorm,
plain GELU-tanh MLP, biases on every projection, tied embeddings) with multi-query attention (one
K/V head for all query heads, `multi_query`, the default). q, k and v are fused in one `c_attn`, a
Linear ([out, in], not GPT-2's Conv1D): all q rows then k then v when multi-query, per head
(q, k, v) otherwise."""

from tcp_compiler.frontend.config import ModelConfig, RawConfig
from tcp_compiler.frontend.families.common import first
from tcp_compiler.frontend.families.gpt2 import gpt2_block
from tcp_compiler.frontend.families.registry import family


@family("gpt_bigcode", architectures=("GPTBigCodeForCausalLM",))
def read(raw: RawConfig, name: str) -> ModelConfig:
    multi_query = raw.get("multi_query", True, kind=bool)
    kv_heads = 1 if multi_query else first(raw, "n_head", "num_attention_heads")
    order = "blocks" if multi_query else "per_head"
    return gpt2_block(raw, name, "gpt_bigcode", kv_heads, order, conv1d=False, act="gelu_pytorch_tanh",
                      positions=1024)  # fmt: skip
