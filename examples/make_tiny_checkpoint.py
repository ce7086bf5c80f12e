"""Writes a tiny Llama checkpoint with random weights (config.json + model.safetensors) that
`tcpc run` can load, for trying `tcpc run` without downloading a model:

    python examples/make_tiny_checkpoint.py tiny-llama
    tcpc run tiny-llama --prompt-ids 1,2,3 --decode-steps 4

Its tokens mean nothing (the weights are random); a real checkpoint comes from the Hugging Face
Hub, e.g. `huggingface-cli download meta-llama/Llama-3.2-1B --local-dir llama-3.2-1b`. Needs
numpy only: the safetensors file (an 8-byte header length, a JSON header, the raw tensors) is
written directly.
"""

from __future__ import annotations

import argparse
import json
import struct
from pathlib import Path

import numpy as np

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}


def weights(config: dict, seed: int) -> dict[str, np.ndarray]:
    """Every weight of a Llama model of `config`, by its Hugging Face name: random normal
    projections scaled by 1/sqrt(fan-in), norms at one."""
    rng = np.random.default_rng(seed)
    d, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]

    def dense(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    tensors = {"model.embed_tokens.weight": dense(v, d), "model.norm.weight": np.ones(d, np.float32),
               "lm_head.weight": dense(v, d)}  # fmt: skip
    for i in range(config["num_hidden_layers"]):
        layer = f"model.layers.{i}"
        shapes = {"self_attn.q_proj": (q, d), "self_attn.k_proj": (kv, d), "self_attn.v_proj": (kv, d),
                  "self_attn.o_proj": (d, q), "mlp.gate_proj": (f, d), "mlp.up_proj": (f, d),
                  "mlp.down_proj": (d, f)}  # fmt: skip
        tensors.update({f"{layer}.{name}.weight": dense(*shape) for name, shape in shapes.items()})
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"{layer}.{norm}.weight"] = np.ones(d, np.float32)
    return tensors


def safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    """The safetensors file of float32 `tensors`."""
    header: dict[str, dict] = {}
    offset = 0
    for name, array in tensors.items():
        span = [offset, offset + array.nbytes]
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": span}
        offset += array.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text + b"".join(a.astype("<f4").tobytes() for a in tensors.values())


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="where to write config.json and model.safetensors")
    parser.add_argument("--seed", type=int, default=0, help="for the random weights (default 0)")
    args = parser.parse_args()
    args.directory.mkdir(parents=True, exist_ok=True)
    (args.directory / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    (args.directory / "model.safetensors").write_bytes(safetensors_bytes(weights(CONFIG, args.seed)))
    print(f"wrote {args.directory}: config.json, model.safetensors (a tiny Llama with random weights)")


if __name__ == "__main__":
    main()
