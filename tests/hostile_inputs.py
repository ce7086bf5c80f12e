"""Hostile inputs for `tcpc`, generated from a seed, and the rules every run of one must obey.

Each case is a command line plus the files it reads (a mutated .tir graph, config.json, hardware
TOML, safetensors checkpoint, pre-quantised checkpoint (AWQ, GPTQ, compressed-tensors, DeepSeek fp8)
with a part, a field or its values broken, or bad flag values, including prefixes of long flags).
Whatever the input, a run must end with exit code 0 or 2, never a traceback; an exit 2 prints
exactly one line on stderr (`tcpc: error: ...`) and writes no output file; no run leaves a
temporary behind or raises a Python warning; and a `hw show --json` that succeeds prints strict JSON.
Cases marked `invalid` must be refused (exit 2).

Used by tests/test_fuzz_inputs.py (a few thousand cases, in process) and benchmarks/fuzz_inputs.py
(a longer run that reports every finding).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import struct
import subprocess
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tcp_compiler.frontend.model import BUNDLED

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("tir", "config", "hardware", "checkpoint", "quantised", "flags", "trace", "measured")
RNGD_TOML = (ROOT / "simulator" / "specs" / "rngd.toml").read_text()
TIR_SEEDS = [p.read_text() for p in sorted((ROOT / "examples" / "ir").glob("*.tir"))]
BASES = ("llama-3.2-1b", "qwen3-30b-a3b", "gemma-3-1b", "gpt2", "pythia-1.4b", "falcon-7b", "opt-1.3b",
         "bloom-560m", "mixtral-8x7b", "mistral-7b-v0.1", "qwen2.5-7b", "deepseek-v3")  # fmt: skip
SHRINK = {  # small sizes so a config that survives its mutation compiles in milliseconds
    "hidden_size": 64, "n_embd": 64, "n_embed": 64, "num_attention_heads": 4, "n_head": 4,
    "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "ffn_dim": 128,
    "moe_intermediate_size": 32, "num_hidden_layers": 2, "n_layer": 2, "vocab_size": 256,
    "num_experts": 4, "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 512,
    "n_positions": 512, "sliding_window": 16, "max_window_layers": 1, "word_embed_proj_dim": 64,
}  # fmt: skip
TINY = {
    "model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
    "head_dim": 4, "intermediate_size": 16, "num_hidden_layers": 1, "vocab_size": 16,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": True, "torch_dtype": "float32",
}  # fmt: skip
TINY_TENSORS = {
    "model.embed_tokens.weight": [16, 8], "model.norm.weight": [8],
    "model.layers.0.input_layernorm.weight": [8], "model.layers.0.post_attention_layernorm.weight": [8],
    "model.layers.0.self_attn.q_proj.weight": [8, 8], "model.layers.0.self_attn.k_proj.weight": [4, 8],
    "model.layers.0.self_attn.v_proj.weight": [4, 8], "model.layers.0.self_attn.o_proj.weight": [8, 8],
    "model.layers.0.mlp.gate_proj.weight": [16, 8], "model.layers.0.mlp.up_proj.weight": [16, 8],
    "model.layers.0.mlp.down_proj.weight": [8, 16],
}  # fmt: skip

# JSON texts a config field may be replaced by (raw JSON, so NaN, Infinity and huge integers appear).
HOSTILE_JSON = [
    '"two"', '["llama"]', "{}", "[]", "NaN", "Infinity", "-Infinity", "0", "-1", "1e20", "-0.0",
    "100000000000000000000", "1" + "0" * 400, "1e-300", "1e300", "0.5", "true", "false", '""',
    '"\\ud800"', "[" * 2000 + "]" * 2000, '{"a": ' * 50 + "1" + "}" * 50, "3", "7", "129", "4096",
    "2048", "1025", '"8k"', '"big"', "1.5", "2",
]  # fmt: skip
HOSTILE_TOML = [
    "1e-300", "1e300", str(2**64), str(2**200), "-1", "0", "1", "nan", "inf", "-inf", '"x"', "true",
    "[1]", "{ a = 1 }", "0.5", "3", "1e-3", "65536", "1099511627776", "1e9", "1e12", str(2**62),
]  # fmt: skip
BAD_INTS = ["0", "-1", "x", "", "1.5", "9" * 30, "1e3", "9" * 5000, "99999999", "0x10", " ", "-0",
            "\uff11\uff12", "1_000", "\u0663", "12\n", "\u00a012", "\u20038", "\U0001d7d1"]  # fmt: skip


@dataclass
class Case:
    """One run: `argv` (with {d} for the work folder), the files to create there, and whether the
    input is certainly invalid (then exit 2 is the only right answer)."""

    kind: str
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    invalid: bool = False
    note: str = ""


@dataclass
class Outcome:
    code: int | None
    stdout: str
    stderr: str
    traceback: str | None = None
    warning: str | None = None


# -- generating cases --------------------------------------------------------------------------


def generate(rng: random.Random, kind: str) -> Case:
    return {"tir": _tir, "config": _config, "hardware": _hardware, "checkpoint": _checkpoint,
            "quantised": _quantised, "flags": _flags, "trace": _trace,
            "measured": _measured}[kind](rng)  # fmt: skip


def _mutate_text(rng: random.Random, text: str, tokens: list[str]) -> str:
    for _ in range(rng.randint(1, 4)):
        i = rng.randint(0, len(text))
        j = min(len(text), i + rng.randint(0, 40))
        how = rng.choice(("delete", "insert", "replace", "duplicate"))
        if how == "delete":
            text = text[:i] + text[j:]
        elif how == "insert":
            text = text[:i] + rng.choice(tokens) + text[i:]
        elif how == "replace":
            text = text[:i] + "".join(chr(rng.randint(1, 0x2FF)) for _ in range(rng.randint(0, 4))) + text[j:]
        else:
            text = text[:j] + text[i:j] + text[j:]
    return text


TIR_TOKENS = ["=", "(", ")", "{", "}", "[", "]", ",", ":", "%x", '"', "\\", "\n", "graph", "return",
              "einsum", "f32", "A=0", "A=" + "9" * 400, "1" + "0" * 5000, '"\\ud800"', '"\\udfff x"',
              "inf", "nan", "-", "1e999", "[[[[", "S=4294967297", "i4",
              "k = 99999999999999999999"]  # fmt: skip


def _tir(rng: random.Random) -> Case:
    text = rng.choice(TIR_SEEDS)
    roll = rng.random()
    if roll < 0.15:  # a huge axis size or integer in an otherwise valid graph
        digits = rng.choice((21, 40, 400, 4301, 6000))
        text = re.sub(r"=(\d+)", lambda m: "=" + "9" * digits if rng.random() < 0.3 else m.group(0), text)
    elif roll < 0.25:  # a lone surrogate in the graph's name
        text = re.sub(
            r"^graph \S+", lambda m: f'graph "g\\ud8{rng.randint(0, 255):02x}"', text, count=1, flags=re.M
        )
    else:
        text = _mutate_text(rng, text, TIR_TOKENS)
    argv = ["inspect", "{d}/g.tir", "--dot", "{d}/out.dot"] + rng.choice(([], ["--json"], ["--top", "3"]))
    return Case("tir", argv, {"g.tir": text.encode("utf-8", "surrogatepass")})


def _base_config(name: str) -> dict:
    data = json.loads((BUNDLED / f"{name}.json").read_text())
    data.pop("layer_types", None)
    for key, value in SHRINK.items():
        if data.get(key) is not None:
            data[key] = value
    return data


def _config(rng: random.Random) -> Case:
    data = _base_config(rng.choice(BASES))
    keys = [k for k, v in data.items() if not isinstance(v, list | dict)] + ["rope_scaling", "model_type"]
    invalid, values = False, []
    for n in range(rng.randint(1, 2)):
        hostile, marker = rng.choice(HOSTILE_JSON), f"__HOSTILE_{n}__"
        values.append((marker, hostile))
        if rng.random() < 0.3 and isinstance(data.get("rope_scaling"), dict):  # inside rope_scaling
            sub = rng.choice(["factor", "low_freq_factor", "high_freq_factor",
                              "original_max_position_embeddings", "rope_type"])  # fmt: skip
            data["rope_scaling"] = {**data["rope_scaling"], sub: marker}
        else:
            key = rng.choice(keys)
            data[key] = marker
            invalid |= hostile in ('["llama"]', "NaN", "Infinity", "-Infinity") and key in _CHECKED_NUMBERS
    text = json.dumps(data)
    for marker, hostile in values:
        text = text.replace(f'"{marker}"', hostile)
    if rng.random() < 0.1:
        text = "[" * rng.choice((40, 5000)) + text + "]" * 3
        invalid = True
    argv = ["compile", "{d}/config.json", "--seq", str(rng.choice((4, 8))), "-o", "{d}/out.tir"]
    if rng.random() < 0.3:
        argv += ["--phase", "decode", "--past", "4"]
    return Case("config", argv, {"config.json": text.encode()}, invalid)


_CHECKED_NUMBERS = {"num_hidden_layers", "hidden_size", "rms_norm_eps", "rope_theta", "vocab_size",
                    "num_attention_heads", "intermediate_size", "layer_norm_epsilon", "n_embd"}  # fmt: skip


def _hardware(rng: random.Random) -> Case:
    from simulator.targets.rngd.spec import Hardware

    params = Hardware.params()

    text, files = RNGD_TOML, {}
    roll = rng.random()
    invalid = False
    if roll < 0.08:  # an extends chain, too long or a cycle
        depth = rng.choice((3, 14, 17, 40))
        for i in range(depth):
            files[f"s{i}.toml"] = f'extends = "s{i + 1}.toml"\n'.encode()
        last = 0 if rng.random() < 0.5 else None
        end = f'extends = "s{last}.toml"\n' if last is not None else 'extends = "rngd"\n'
        files[f"s{depth}.toml"] = end.encode()
        invalid = depth > 15 or last is not None
        spec = "{d}/s0.toml"
    else:
        lines = text.splitlines()
        for _ in range(rng.randint(1, 2)):
            candidates = [i for i, line in enumerate(lines) if "value = " in line]
            i = rng.choice(candidates)
            key = _dotted_key(lines, i)
            if rng.random() < 0.5 and key in params:  # a value at, just inside or beyond its range
                lo, hi = params[key].lo, params[key].hi
                value = rng.choice((lo, hi, lo * 2, hi / 2, hi * 2, lo / 2))
                value = int(value) if isinstance(lo, int) and float(value).is_integer() else value
                new = repr(value) if isinstance(value, int) else f"{value!r}"
            else:
                new = rng.choice(HOSTILE_TOML)
            lines[i] = re.sub(r"value = [^,]*,", f"value = {new},", lines[i])
        files["spec.toml"] = ("\n".join(lines) + "\n").encode()
        spec = "{d}/spec.toml"
    if rng.random() < 0.85:
        argv = ["hw", "show", spec] + rng.choice(([], ["--json"]))
    else:
        files["tiny.json"] = json.dumps(TINY).encode()
        argv = ["compile", "{d}/tiny.json", "--seq", "4", "--emit", "program", "--hw", spec]
        argv += ["-o", "{d}/out.txt"]
    return Case("hardware", argv, files, invalid)


def _dotted_key(lines: list[str], i: int) -> str:
    table = ""
    for line in lines[:i]:
        m = re.match(r"\[([a-z_.]+)\]", line.strip())
        if m:
            table = m.group(1)
    return f"{table}.{lines[i].split('=')[0].strip()}" if table else lines[i].split("=")[0].strip()


def safetensors(tensors: dict[str, list[int]], rng: random.Random | None = None) -> tuple[dict, bytes]:
    """A header and data section for float32 tensors of these shapes (random values with `rng`)."""
    header, blobs, offset = {}, [], 0
    for name, shape in tensors.items():
        n = int(np.prod(shape)) if shape else 1
        values = np.random.default_rng(rng.randint(0, 9999) if rng else 0).standard_normal(n)
        data = (values * 0.1).astype("<f4")
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + data.nbytes]}
        blobs.append(data.tobytes())
        offset += data.nbytes
    return header, b"".join(blobs)


def overwrite(header: dict, data: bytes, name: str, value: float, everywhere: bool = False) -> bytes:
    """`data` with the float32 tensor `name`'s first value (or every value) set to `value`."""
    begin, end = header[name]["data_offsets"]
    count = (end - begin) // 4 if everywhere else 1
    return data[:begin] + np.full(count, value, "<f4").tobytes() + data[begin + 4 * count :]


def pack(header: dict | str, data: bytes) -> bytes:
    raw = (header if isinstance(header, str) else json.dumps(header)).encode("utf-8", "surrogatepass")
    return struct.pack("<Q", len(raw)) + raw + data


def _checkpoint(rng: random.Random) -> Case:
    tensors = {k: list(v) for k, v in TINY_TENSORS.items()}
    invalid = True
    roll = rng.random()
    name = rng.choice(sorted(tensors))
    files: dict[str, bytes] = {"config.json": json.dumps(TINY).encode()}
    header, data = safetensors(tensors, rng)
    if roll < 0.25 and len(tensors[name]) == 2:  # same element count, wrong shape
        a, b = tensors[name]
        tensors[name] = rng.choice(([b, a], [a * b // 2, 2] if a * b % 2 == 0 else [b, a], [a * b]))
        invalid = tensors[name] != TINY_TENSORS[name]
        header, data = safetensors(tensors, rng)
    elif roll < 0.4:  # a header field broken
        entry = header[name]
        what = rng.choice(("dtype", "shape", "data_offsets"))
        entry[what] = rng.choice(("F99", [-1], [10**30], [1, 2, 3], None, "x", [0, 10**20], [[1]]))
    elif roll < 0.5:  # the header length word lies
        blob = pack(header, data)
        length = rng.choice((0, 1, 2**63, len(blob), 200_000_000))
        files["model.safetensors"] = struct.pack("<Q", length) + blob[8:]
    elif roll < 0.6:  # the header is not JSON, too deep or repeats a name
        header = rng.choice(("{not json", "[" * 5000, '{"a": 1, "a": 2}', "\udcff", "{}", '{"x": {}}'))
    elif roll < 0.7:  # truncated data
        files["model.safetensors"] = pack(header, data)[: rng.randint(8, len(pack(header, data)) - 1)]
    elif roll < 0.85:  # a sharded index pointing at a missing or wrong shard
        weight_map = {n: "model-00001.safetensors" for n in tensors}
        shards = ("model-00002.safetensors", "../x.safetensors", "model-00001.safetensors")
        weight_map[name] = rng.choice(shards)
        files["model-00001.safetensors"] = pack(header, data)
        broken = rng.choice(({"weight_map": [1]}, [], {}))
        index = {"weight_map": weight_map} if rng.random() < 0.8 else broken
        files["model.safetensors.index.json"] = json.dumps(index).encode()
        invalid = weight_map[name] != "model-00001.safetensors" or "weight_map" not in index
    elif roll < 0.93:  # non-finite numbers: NaN or infinite weights, values that overflow, RoPE extremes
        how = rng.choice(("nan", "inf", "overflow", "rope"))
        if how == "rope":
            factor = rng.choice((1e-300, 1e-30, 1e30, 1e300))
            scaling = {"rope_type": "linear", "factor": factor}
            files["config.json"] = json.dumps({**TINY, "rope_scaling": scaling}).encode()
            invalid = False  # a tiny factor fails at run time, a huge one still computes finite numbers
        else:
            value = {"nan": np.nan, "inf": np.inf, "overflow": 3e38}[how]
            data = overwrite(header, data, name, value, everywhere=how == "overflow")
            invalid = how != "overflow"  # 3e38 everywhere overflows in most tensors, not certainly in all
    else:  # a missing tensor
        del header[name]
    if "model.safetensors" not in files and "model-00001.safetensors" not in files:
        files["model.safetensors"] = pack(header, data)
    steps = rng.choice(("0", "1"))
    argv = ["run", "{d}", "--prompt-ids", rng.choice(("1,2", "3")), "--decode-steps", steps,
            "--logits-out", "{d}/out.npz"]  # fmt: skip
    return Case("checkpoint", argv, files, invalid)


# A model whose projections pack into int32 words (out and in multiples of 8) for the int4 formats.
QTINY = {**TINY, "hidden_size": 16, "head_dim": 8, "intermediate_size": 32}
QLINEARS = {"q_proj": (16, 16), "k_proj": (8, 16), "v_proj": (8, 16), "o_proj": (16, 16),
            "gate_proj": (32, 16), "up_proj": (32, 16), "down_proj": (16, 32)}  # fmt: skip
QGROUP, QBLOCK = 8, 8
_SCALES, _PACKED = ("F32", "BF16", "F16"), ("I32",)  # dtypes a part may have (checked by tcpc)
NUMPY_DTYPES = {"F32": "<f4", "F16": "<f2", "I32": "<i4", "I64": "<i8", "I8": "i1", "U8": "u1"}


def _ct(weights: dict, kind: str = "float", acts: dict | None = None) -> dict:
    group = {"targets": ["Linear"], "weights": {"num_bits": 8, "type": kind, "symmetric": True, **weights}}
    if acts is not None:
        group["input_activations"] = acts
    fmt = "float-quantized" if kind == "float" else "int-quantized"
    return {"quant_method": "compressed-tensors", "format": fmt, "config_groups": {"group_0": group},
            "ignore": ["lm_head"]}  # fmt: skip


_TOKEN = {"num_bits": 8, "type": "int", "symmetric": True, "dynamic": True, "strategy": "token"}
QSCHEMES = {  # name -> quantization_config
    "ct-fp8-tensor": _ct({"strategy": "tensor"}),
    "ct-fp8-channel": _ct({"strategy": "channel"}),
    "ct-fp8-block": _ct({"strategy": "block", "block_structure": [QBLOCK, QBLOCK]}),
    "deepseek-fp8": {"quant_method": "fp8", "weight_block_size": [QBLOCK, QBLOCK]},
    "ct-w8a16": _ct({"strategy": "channel"}, "int"),
    "ct-w8a8": _ct({"strategy": "channel"}, "int", _TOKEN),
    "awq": {"quant_method": "awq", "bits": 4, "group_size": QGROUP, "zero_point": True, "version": "gemm"},
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": QGROUP, "checkpoint_format": "gptq"},
}


def _stored_parts(scheme: str, out: int, inputs: int, rng: np.random.Generator) -> dict[str, tuple]:
    """suffix -> (safetensors dtype, values, the dtypes tcpc must accept) of one quantised Linear."""
    import ml_dtypes

    def scale(shape: tuple) -> np.ndarray:
        return (0.01 + 0.01 * rng.random(shape)).astype(np.float32)

    if scheme.startswith(("ct-fp8", "deepseek")):
        codes = rng.standard_normal((out, inputs)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        block = {"tensor": (out, inputs), "channel": (1, inputs)}.get(scheme.split("-")[-1], (QBLOCK, QBLOCK))
        grid = (out // block[0], inputs // block[1])
        name = "weight_scale_inv" if scheme == "deepseek-fp8" else "weight_scale"
        return {"weight": ("F8_E4M3", codes, ("F8_E4M3",)), name: ("F32", scale(grid), _SCALES)}
    if scheme.startswith("ct-w8"):
        codes = rng.integers(-127, 128, (out, inputs)).astype(np.int8)
        return {"weight": ("I8", codes, ("I8",)), "weight_scale": ("F32", scale((out, 1)), _SCALES)}
    words = rng.integers(-(2**31), 2**31, (inputs, out // 8) if scheme == "awq" else (inputs // 8, out))
    groups = inputs // QGROUP
    parts = {
        "qweight": ("I32", words.astype(np.int32), _PACKED),
        "qzeros": ("I32", np.full((groups, out // 8), 0x77777777, np.int32), _PACKED),
        "scales": ("F16", scale((groups, out)).astype(np.float16), _SCALES),
    }
    if scheme == "gptq":
        parts["g_idx"] = ("I32", (np.arange(inputs) // QGROUP).astype(np.int32), ("I32", "I64"))
    return parts


def pack_arrays(arrays: dict[str, tuple[str, np.ndarray]]) -> bytes:
    """A safetensors file of (dtype, values) by name; values already in the dtype's storage."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, values) in arrays.items():
        raw = np.ascontiguousarray(values).tobytes()
        entry = {"dtype": dtype, "shape": list(values.shape), "data_offsets": [offset, offset + len(raw)]}
        header[name] = entry
        blobs.append(raw)
        offset += len(raw)
    return pack(header, b"".join(blobs))


def _as_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    """`values` stored as `dtype` (BF16 and F8 by their bits)."""
    import ml_dtypes

    if dtype == "BF16":
        return values.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    if dtype == "F8_E4M3":
        return values.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    with np.errstate(over="ignore"):  # int32 words as f16: infinite, and refused for the dtype anyway
        return values.astype(NUMPY_DTYPES[dtype])


def _quantised(rng: random.Random) -> Case:
    """A tiny pre-quantised checkpoint in one of the stored formats, one part or field broken."""
    scheme = rng.choice(sorted(QSCHEMES))
    quant = json.loads(json.dumps(QSCHEMES[scheme]))
    values = np.random.default_rng(rng.randint(0, 9999))
    arrays: dict[str, tuple[str, np.ndarray]] = {}
    accepted: dict[str, tuple] = {}
    for name, shape in TINY_TENSORS.items():
        module, proj = name.removesuffix(".weight"), name.split(".")[-2]
        if proj in QLINEARS:
            for suffix, (dtype, part, ok) in _stored_parts(scheme, *QLINEARS[proj], values).items():
                arrays[f"{module}.{suffix}"], accepted[f"{module}.{suffix}"] = (dtype, part), ok
        else:
            width = [16 if n == 8 else n for n in shape]
            arrays[name] = ("F32", (0.1 * values.standard_normal(width)).astype(np.float32))
    parts = sorted(accepted)
    part = rng.choice(parts)
    dtype, value = arrays[part]
    invalid = True
    roll = rng.random()
    if roll < 0.1:  # untouched: must run
        invalid = False
    elif roll < 0.35:  # a part's shape: transposed, a row short, flattened, an axis more
        how = rng.choice(("T", "short", "flat", "axis"))
        changed = {"T": value.T, "short": value[:-1], "flat": value.reshape(-1), "axis": value[None]}[how]
        same_order = [n for n in changed.shape if n != 1] == [n for n in value.shape if n != 1]
        scale = part.endswith(("scale", "scale_inv"))  # a grid may be stored with axes of 1 dropped
        invalid = changed.shape != value.shape and not (scale and same_order)
        arrays[part] = (dtype, np.ascontiguousarray(changed))
    elif roll < 0.55:  # a part's dtype
        new = rng.choice(("F32", "F16", "BF16", "I32", "I64", "I8", "U8", "F8_E4M3"))
        floats = new.startswith(("F", "B"))
        arrays[part] = (new, _as_dtype(value.astype(np.float32) if floats else value, new))
        invalid = new not in accepted[part]
    elif roll < 0.65:  # a part missing (GPTQ's g_idx may be)
        del arrays[part]
        invalid = not part.endswith("g_idx")
    elif roll < 0.75:  # NaN or inf scales
        if not part.endswith(("scale", "scale_inv", "scales")):
            part = next(p for p in parts if p.endswith(("scale", "scale_inv", "scales")))
        dtype, value = arrays[part]
        broken = value.copy()
        broken.reshape(-1)[0] = rng.choice((np.nan, np.inf))
        arrays[part] = (dtype, broken)
    elif roll < 0.82:  # no quantization_config: the scales would be ignored
        quant = None
    else:  # a quantization_config field no checkpoint of these parts can have
        family = "ct" if scheme.startswith("ct") else scheme.split("-")[0]
        field, new = rng.choice(_BAD_QUANT_FIELDS[family] + _BAD_QUANT_FIELDS["any"])
        if field == "ignore" and family != "ct":
            field = "modules_to_not_convert"
        if field.startswith("acts."):  # int activations on fp8 weights are as wrong as these values
            group = quant["config_groups"]["group_0"]
            group["input_activations"] = {**group.get("input_activations", _TOKEN), field[5:]: new}
        else:
            quant[field] = new
    config = {**QTINY, **({"quantization_config": quant} if quant is not None else {})}
    files = {"config.json": json.dumps(config).encode(), "model.safetensors": pack_arrays(arrays)}
    argv = ["run", "{d}", "--prompt-ids", "1,2", "--decode-steps", rng.choice(("0", "1")),
            "--logits-out", "{d}/out.npz"]  # fmt: skip
    return Case("quantised", argv, files, invalid, note=f"{scheme} {part}")


_BAD_QUANT_FIELDS: dict[str, list[tuple[str, object]]] = {  # scheme family -> (field, value) pairs
    "awq": [("group_size", 16), ("group_size", 4), ("bits", 8), ("version", "gemv")],
    "gptq": [("group_size", 16), ("group_size", 4), ("checkpoint_format", "marlin")],
    "deepseek": [("weight_block_size", [16, 8]), ("weight_block_size", [8, 16]), ("fmt", "e5m2")],
    "ct": [("acts.strategy", "tensor"), ("acts.dynamic", False), ("acts.symmetric", False),
           ("acts.num_bits", 4), ("acts.type", "mx"), ("ignore", ["re:(lm_head"]), ("format", "pack")],
    "any": [("ignore", ["re:[a-"]), ("ignore", ["re:*"]), ("quant_method", "bitsandbytes")],
}  # fmt: skip


FLAGS = {  # command -> base arguments and integer flags it takes
    "simulate": (["{d}/tiny.json", "--prompt-len", "8", "--gen-len", "2"],
                 ["--chips", "--batch", "--prompt-len", "--gen-len", "--group-size", "--trace-steps"]),
    "compile": (["{d}/tiny.json", "--seq", "8"], ["--batch", "--chips", "--seq", "--past", "--documents",
                                                 "--group-size"]),
    "sweep": (["{d}/tiny.json", "--prompt-len", "8", "--gen-len", "2", "--jobs", "1"],
              ["--batch", "--prompt-len", "--gen-len", "--chips", "--jobs"]),
    "run": (["{d}/ckpt", "--prompt-ids", "1,2"], ["--decode-steps", "--group-size"]),
    "inspect": ([str(ROOT / "examples" / "ir" / "gemm.tir")], ["--top"]),
}  # fmt: skip
CROSS = {  # combinations of valid values that are invalid together
    "compile": [["--documents", "100", "--seq", "8"], ["--documents", "2", "--phase", "decode"],
                ["--group-size", "64"], ["--chips", "3"], ["-o", "{d}/nodir/x.tir"], ["-o", "{d}"]],
    "simulate": [["--group-size", "32"], ["--json", "{d}/a.json", "--markdown", "{d}/no/r.md"],
                 ["--trace", "{d}"], ["--chips", "3"], ["--plot", "{d}/tiny.json"]],
    "sweep": [["--batch", ",".join(str(i) for i in range(1, 65)), "--prompt-len",
               ",".join(str(i) for i in range(1, 65)), "--gen-len", "1,2"], ["--csv", "{d}/none/x.csv"],
              ["--dtype", "bf17"]],
    # (70 ids past the tiny model's 64 positions run, as transformers runs RoPE past them: not here)
    "run": [["--prompt-ids", "99"], ["--prompt-ids", "-1"], ["--logits-out", "{d}/no/x.npz"],
            ["--dtype", "bf17"]],
    "inspect": [["--dot", "{d}/no/x.dot"]],
}  # fmt: skip


def _flags(rng: random.Random) -> Case:
    command = rng.choice(sorted(FLAGS))
    base, numeric = FLAGS[command]
    argv = [command, *base]
    if rng.random() < 0.6:
        for flag in rng.sample(numeric, rng.randint(1, min(2, len(numeric)))):
            zero_ok = flag in ("--decode-steps", "--trace-steps", "--documents")
            argv += [flag, rng.choice([b for b in BAD_INTS if not (zero_ok and b in ("0", "-0"))])]
    elif rng.random() < 0.3:
        argv += [long_flag_prefix(rng, command), "1"]
    else:
        argv += rng.choice(CROSS[command])
    files = {"tiny.json": json.dumps(TINY).encode()}
    if command == "run":
        header, data = safetensors(TINY_TENSORS)
        files["ckpt/config.json"] = json.dumps(TINY).encode()
        files["ckpt/model.safetensors"] = pack(header, data)
    return Case("flags", argv, files, invalid=True)


# Cells a request file's field may hold: too long, out of range, fractions, absurd times, nesting.
HOSTILE_CELLS = [
    "1" * 5000, "9" * 30, "1e300", "1e-300", "-1", "0", "8.5", "1e3", "nan", "inf", "", '"8', "[" * 3000,
    '{"a": [1]}', "1" * 200 + ".5", "70", "1000000", "0x10", "true",
]  # fmt: skip


def _trace(rng: random.Random) -> Case:
    """A request file (JSONL or CSV) for the tiny model (64 positions) with a field replaced by a
    hostile cell, a quote left open, or a cell beyond the CSV module's limit."""
    rows = [{"arrival_s": i * 0.01, "prompt_len": 8, "output_len": 4} for i in range(3)]
    bad, key = rng.choice(HOSTILE_CELLS), rng.choice(("arrival_s", "prompt_len", "output_len"))
    if rng.random() < 0.5:
        name = "r.jsonl"
        lines = [json.dumps(r) for r in rows]
        lines[1] = lines[1].replace(f'"{key}": {json.dumps(rows[1][key])}', f'"{key}": {bad}')
    else:
        name = "r.csv"
        lines = ["arrival_s,prompt_len,output_len"]
        lines += [f"{r['arrival_s']},{r['prompt_len']},{r['output_len']}" for r in rows]
        cells = lines[2].split(",")
        cells[("arrival_s", "prompt_len", "output_len").index(key)] = rng.choice((bad, "1" * 200_000))
        lines[2] = ",".join(cells)
    argv = ["serve", "{d}/tiny.json", "--trace-file", "{d}/" + name, "--json", "{d}/out.json"]
    files = {"tiny.json": json.dumps(TINY).encode(), name: ("\n".join(lines) + "\n").encode()}
    return Case("trace", argv, files)


MEASURED_KEYS = ("max_concurrency", "request_rate", "duration", "completed", "output_throughput",
                 "input_lens", "output_lens", "ttfts", "itls", "latencies", "errors", "mean_ttft_ms",
                 "p99_tpot_ms")  # fmt: skip


def _measured(rng: random.Random) -> Case:
    """A measured run for `tcpc validate` on the tiny model: a vLLM result with a key, or one entry
    of a per-request array, replaced by a hostile cell (or the key dropped), or a per-request CSV
    with a hostile cell."""
    n = 3
    doc: dict[str, Any] = {
        "request_rate": "inf", "max_concurrency": 2, "duration": 0.5, "completed": n,
        "output_throughput": 24.0, "input_lens": [8] * n, "output_lens": [4] * n, "ttfts": [0.01] * n,
        "itls": [[0.02] * 3] * n,
        "latencies": [0.07] * n, "errors": [""] * n, "mean_ttft_ms": 10.0, "p99_tpot_ms": 20.0,
    }  # fmt: skip
    bad = rng.choice(HOSTILE_CELLS)
    if rng.random() < 0.6:
        name, key = "run.json", rng.choice(MEASURED_KEYS)
        if rng.random() < 0.15:
            del doc[key]
            text = json.dumps(doc)
        elif isinstance(doc[key], list) and rng.random() < 0.7:
            marker = "__BAD__"
            entry = doc[key]
            target = entry[1] if key != "itls" else list(entry[1])
            if key == "itls":
                target[rng.randrange(3)] = marker
                entry = [entry[0], target, entry[2]]
            else:
                entry = [entry[0], marker, entry[2]]
            doc[key] = entry
            text = json.dumps(doc).replace(f'"{marker}"', bad)
        else:
            doc[key] = "__BAD__"
            text = json.dumps(doc).replace('"__BAD__"', bad)
    else:
        name = "run.csv"
        columns = ["input_tokens", "output_tokens", "ttft_s", "tpot_s", "arrival_s"]
        rows = [["8", "4", "0.01", "0.02", str(i * 0.1)] for i in range(n)]
        rows[1][rng.randrange(len(columns))] = rng.choice((bad, "1" * 200_000))
        text = "\n".join([",".join(columns), *(",".join(r) for r in rows)]) + "\n"
    argv = ["validate", "{d}/" + name, "--model", "{d}/tiny.json", "--json", "{d}/out.json"]
    files = {"tiny.json": json.dumps(TINY).encode(), name: text.encode()}
    return Case("measured", argv, files)


def long_flags(command: str) -> set[str]:
    """Every long flag of `tcpc command`."""
    from tcp_compiler.cli import build_parser

    parser = subcommand_parsers(build_parser())[command]
    return {o for action in parser._actions for o in action.option_strings if o.startswith("--")}


def subcommand_parsers(parser: Any, prefix: str = "") -> dict[str, Any]:
    """The parsers under `parser` by their command words ("simulate", "hw show"), `parser` included."""
    found = {prefix: parser}
    for action in parser._actions:
        if isinstance(action.choices, dict):
            for word, sub in action.choices.items():
                found.update(subcommand_parsers(sub, f"{prefix} {word}".strip()))
    return found


def long_flag_prefix(rng: random.Random, command: str) -> str:
    """A prefix of one of the command's long flags that is no flag itself (argparse's abbreviation)."""
    flags = long_flags(command)
    flag = rng.choice(sorted(flags))
    prefixes = [flag[:n] for n in range(3, len(flag)) if flag[:n] not in flags]
    return rng.choice(prefixes) if prefixes else "--no-such-flag"


# -- running and judging -----------------------------------------------------------------------


def materialise(case: Case, folder: Path) -> list[str]:
    """Writes the case's files into `folder`; returns argv with {d} filled in."""
    for name, data in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return [a.replace("{d}", str(folder)) for a in case.argv]


def run_in_process(argv: list[str]) -> Outcome:
    """`tcpc argv` in this process, its output captured; an exception escaping main is a traceback."""
    from tcp_compiler.cli import main

    out, err = io.StringIO(), io.StringIO()
    code, tb, warned = None, None, None
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):  # fmt: skip
        warnings.simplefilter("always")
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001 - any escape is the finding
            tb = traceback.format_exc()
    if caught:
        warned = f"{caught[0].category.__name__}: {caught[0].message}"
    return Outcome(code, out.getvalue(), err.getvalue(), tb, warned)


def run_subprocess(argv: list[str], timeout: float = 120) -> Outcome:
    proc = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "tcp_compiler", *argv],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          errors="backslashreplace")  # fmt: skip
    tb = proc.stderr if "Traceback" in proc.stderr else None
    return Outcome(proc.returncode, proc.stdout, proc.stderr, tb)


def problems(case: Case, outcome: Outcome, folder: Path) -> list[str]:
    """What the run did wrong, if anything (an empty list: it behaved)."""
    found = []
    if outcome.traceback is not None or outcome.code not in (0, 2):
        found.append(f"traceback / exit {outcome.code}")
    if outcome.warning is not None:
        found.append(f"warning: {outcome.warning}")
    leftovers = [p.name for p in folder.rglob("*.tmp")] + [p.name for p in folder.rglob(".tcpc-probe.*")]
    if leftovers:
        found.append(f"temporaries left: {leftovers}")
    if case.invalid and outcome.code == 0:
        found.append("invalid input accepted")
    if outcome.code == 2:
        lines = outcome.stderr.splitlines()
        if len(lines) != 1 or not lines[0].startswith("tcpc: error: "):
            found.append(f"exit 2 with {len(lines)} stderr lines: {outcome.stderr[:300]!r}")
        written = [p.name for p in folder.rglob("out.*")] + [p.name for p in folder.rglob("a.json")]
        if written:
            found.append(f"exit 2 but wrote {written}")
    if outcome.code == 0 and case.argv[:2] == ["hw", "show"] and "--json" in case.argv:
        try:
            json.loads(outcome.stdout, parse_constant=_no_constant)
        except ValueError as e:
            found.append(f"hw show --json printed invalid JSON: {e}")
    return found


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")
