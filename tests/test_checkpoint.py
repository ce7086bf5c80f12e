"""The safetensors checkpoint reader: exact round trips against the real writers, header-only opening,
and a one-line CheckpointError naming the file for each way a checkpoint can be broken."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

import tcp_compiler.frontend.checkpoint as checkpoint_module
from tcp_compiler.frontend.checkpoint import Checkpoint, CheckpointError


def write_raw(path: Path, header: dict | bytes, data: bytes = b"") -> Path:
    """A safetensors file built by hand, so headers can be as broken as a test needs."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def header_length(path: Path) -> int:
    with open(path, "rb") as f:
        return struct.unpack("<Q", f.read(8))[0]


def assert_same_bits(got: np.ndarray, expected: np.ndarray) -> None:
    """Equal dtype, shape and bytes, so -0.0 vs 0.0 or a rounded value would fail."""
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()


def check_message(error: pytest.ExceptionInfo[CheckpointError], *names: str) -> None:
    message = str(error.value)
    assert "\n" not in message
    for name in names:
        assert name in message


# -- round trips against the real writers -------------------------------------------------------------


def test_torch_written_tensors_load_bit_exactly(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    floats = torch.randn(3, 5, generator=g) * 4
    tensors = {
        "f32": floats,
        "bf16": floats.to(torch.bfloat16),
        "f16": floats.to(torch.float16),
        "f8": floats.to(torch.float8_e4m3fn),
        "f8_e5m2": floats.to(torch.float8_e5m2),
        "neg_zero": torch.tensor([-0.0, 0.0]).to(torch.bfloat16),
        "i32": torch.randint(-(2**31), 2**31 - 1, (4, 2), dtype=torch.int32, generator=g),
        "i8": torch.randint(-128, 127, (7,), dtype=torch.int8, generator=g),
        "bool": torch.rand(2, 3, generator=g) > 0.5,
        "scalar": torch.tensor(7, dtype=torch.int32),
        "empty": torch.zeros(0, 4),
    }
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})

    ckpt = Checkpoint.open(tmp_path)
    assert sorted(ckpt.names()) == sorted(tensors)
    for name, t in tensors.items():
        expected = t.to(torch.float32).numpy() if t.is_floating_point() else t.numpy()
        assert_same_bits(ckpt.load(name), expected)
        assert ckpt.info(name).shape == tuple(t.shape)
    assert ckpt.info("bf16").dtype == "BF16" and ckpt.info("f8").dtype == "F8_E4M3"
    assert ckpt.total_bytes == sum(t.numel() * t.element_size() for t in tensors.values())


def test_numpy_written_tensors_load_bit_exactly(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    tensors = {
        "f64": rng.standard_normal((2, 3)),
        "f32": rng.standard_normal((4,)).astype(np.float32),
        "f16": rng.standard_normal((3, 3)).astype(np.float16),
        "i64": rng.integers(-(2**62), 2**62, (5,)),
        "i16": rng.integers(-(2**15), 2**15, (2, 2)).astype(np.int16),
        "u8": rng.integers(0, 256, (9,)).astype(np.uint8),
        "bool": rng.random((3, 1)) > 0.5,
    }
    save_file(tensors, str(tmp_path / "weights.safetensors"))

    ckpt = Checkpoint.open(tmp_path)  # no model.safetensors and no index: every *.safetensors
    for name, a in tensors.items():
        expected = a.astype(np.float32) if a.dtype.kind == "f" else a
        assert_same_bits(ckpt.load(name), expected)


@pytest.fixture
def transformers(monkeypatch):
    """transformers, kept off the network: a model built from a config needs nothing from the hub."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import transformers

    return transformers


def test_sharded_llama_checkpoint_loads_by_name(tmp_path: Path, transformers) -> None:

    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=48,
        tie_word_embeddings=True,
    )
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    shards = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "model.safetensors.index.json").is_file()

    ckpt = Checkpoint.open(tmp_path)
    state = model.state_dict()
    assert set(ckpt.names()) <= set(state)
    assert set(state) - set(ckpt.names()) <= {"lm_head.weight"}  # tied to embed_tokens, stored once
    for name in ckpt.names():
        assert_same_bits(ckpt.load(name), state[name].numpy())
    assert {ckpt.info(name).file.name for name in ckpt.names()} == set(shards)
    assert ckpt.info("model.layers.1.self_attn.k_proj.weight").shape == (16, 32)  # 2 KV heads x 8


def test_untied_llama_keeps_lm_head(tmp_path: Path, transformers) -> None:

    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=48,
        tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    ckpt = Checkpoint.open(tmp_path)
    assert set(ckpt.names()) == set(model.state_dict())
    assert_same_bits(ckpt.load("lm_head.weight"), model.lm_head.weight.detach().numpy())


# -- headers without data ---------------------------------------------------------------------------------


def test_header_only_file_gives_shapes_but_not_data(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    path = tmp_path / "model.safetensors"
    save_file({"w": np.ones((64, 32), np.float32), "b": np.zeros(32, np.int8)}, str(path))
    with open(path, "r+b") as f:
        f.truncate(8 + header_length(path))

    ckpt = Checkpoint.open(tmp_path)
    assert sorted(ckpt.names()) == ["b", "w"]
    assert ckpt.info("w").shape == (64, 32) and ckpt.info("w").dtype == "F32"
    assert ckpt.total_bytes == 64 * 32 * 4 + 32
    with pytest.raises(CheckpointError, match="truncated") as e:
        ckpt.load("w")
    check_message(e, "model.safetensors", "'w'")


def test_partly_truncated_file_still_loads_what_it_holds(tmp_path: Path) -> None:
    path = write_raw(
        tmp_path / "model.safetensors",
        {
            "first": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]},
            "second": {"dtype": "I32", "shape": [2], "data_offsets": [8, 16]},
        },
        struct.pack("<4i", 1, 2, 3, 4)[:12],  # "second" is cut short
    )
    ckpt = Checkpoint.open(path.parent)
    assert ckpt.load("first").tolist() == [1, 2]
    with pytest.raises(CheckpointError, match="truncated") as e:
        ckpt.load("second")
    check_message(e, "model.safetensors")


class CountingFile:
    """A file object that counts the bytes read through it."""

    def __init__(self, f, counter: list[int]) -> None:
        self._f, self._counter = f, counter

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._counter[0] += len(data)
        return data

    def __enter__(self) -> CountingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()

    def __getattr__(self, name: str):
        return getattr(self._f, name)


def test_open_reads_only_headers_of_a_huge_sparse_file(tmp_path: Path, monkeypatch) -> None:
    huge = 2**29  # 2 GiB of float32, never written: the file is sparse
    path = write_raw(
        tmp_path / "model.safetensors",
        {
            "small": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
            "huge": {"dtype": "F32", "shape": [huge], "data_offsets": [16, 16 + 4 * huge]},
        },
    )
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size + 16 + 4 * huge)

    read = [0]
    real_open = open

    def counting_open(*args, **kwargs) -> CountingFile:
        return CountingFile(real_open(*args, **kwargs), read)

    # the reader's module-level `open` now counts every byte it reads
    monkeypatch.setattr(checkpoint_module, "open", counting_open, raising=False)

    def no_memmap(*args, **kwargs):
        raise AssertionError("opening a checkpoint must not map data")

    with monkeypatch.context() as m:
        m.setattr(np, "memmap", no_memmap)
        ckpt = Checkpoint.open(tmp_path)
        assert ckpt.info("huge").shape == (huge,)
        assert ckpt.total_bytes == 16 + 4 * huge
    assert read[0] == 8 + header_length(path)
    # and loading one tensor maps only that tensor, leaving the 2 GiB alone
    assert_same_bits(ckpt.load("small"), np.zeros(4, np.float32))


# -- malformed checkpoints --------------------------------------------------------------------------------


GOOD = {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"\x01\x02\x03", "too short"),
        (b"\xff" * 8 + b"{}", "absurd"),
        (struct.pack("<Q", 4096) + b"{}", "runs past the end"),
        (struct.pack("<Q", 0), "too small"),
        (struct.pack("<Q", 8) + b"not json", "not valid JSON"),
        (struct.pack("<Q", 4) + b"\xff\xfe{}", "not UTF-8"),
        (struct.pack("<Q", 2) + b"[]", "not an object"),
    ],
)
def test_bad_header_bytes(tmp_path: Path, content: bytes, match: str) -> None:
    (tmp_path / "model.safetensors").write_bytes(content)
    with pytest.raises(CheckpointError, match=match) as e:
        Checkpoint.open(tmp_path)
    check_message(e, "model.safetensors")


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}, "out of range"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}, "out of range"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}, "not \\[begin, end\\]"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [0]}, "not \\[begin, end\\]"),
        ({"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 8]}, "shape"),
        ({"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}, "shape"),
        ({"dtype": "C64", "shape": [2], "data_offsets": [0, 8]}, "unknown dtype 'C64'"),
        ({"shape": [2], "data_offsets": [0, 8]}, "unknown dtype None"),
        ([1, 2], "not an object"),
    ],
)
def test_bad_tensor_entry(tmp_path: Path, entry: object, match: str) -> None:
    write_raw(tmp_path / "model.safetensors", {"__metadata__": {"format": "pt"}, "layer.w": entry}, bytes(16))
    with pytest.raises(CheckpointError, match=match) as e:
        Checkpoint.open(tmp_path)
    check_message(e, "model.safetensors", "'layer.w'")


def test_offsets_past_the_end_of_the_file(tmp_path: Path) -> None:
    header = {"w": {"dtype": "F32", "shape": [1000], "data_offsets": [0, 4000]}}
    write_raw(tmp_path / "model.safetensors", header, bytes(8))
    ckpt = Checkpoint.open(tmp_path)  # a header alone is enough for shapes; data is checked on load
    with pytest.raises(CheckpointError, match="out of range") as e:
        ckpt.load("w")
    check_message(e, "model.safetensors", "'w'")


def test_overlapping_tensors(tmp_path: Path) -> None:
    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
    }
    write_raw(tmp_path / "model.safetensors", header, bytes(12))
    with pytest.raises(CheckpointError, match="overlap") as e:
        Checkpoint.open(tmp_path)
    check_message(e, "model.safetensors", "'a'", "'b'")


def test_duplicate_tensor_name(tmp_path: Path) -> None:
    entry = json.dumps(GOOD["w"])
    write_raw(tmp_path / "model.safetensors", f'{{"w": {entry}, "w": {entry}}}'.encode(), bytes(8))
    with pytest.raises(CheckpointError, match="twice") as e:
        Checkpoint.open(tmp_path)
    check_message(e, "model.safetensors", "'w'")


def write_index(directory: Path, weight_map: dict[str, str]) -> Path:
    path = directory / "model.safetensors.index.json"
    path.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return path


def test_missing_shard_named_in_the_index(tmp_path: Path) -> None:
    write_raw(tmp_path / "model-00001-of-00002.safetensors", GOOD, bytes(8))
    write_index(tmp_path, {"w": "model-00001-of-00002.safetensors", "v": "model-00002-of-00002.safetensors"})
    with pytest.raises(CheckpointError, match="missing") as e:
        Checkpoint.open(tmp_path)
    check_message(e, "model.safetensors.index.json", "model-00002-of-00002.safetensors")


def test_index_names_a_tensor_its_shard_lacks(tmp_path: Path) -> None:
    write_raw(tmp_path / "shard.safetensors", GOOD, bytes(8))
    write_index(tmp_path, {"w": "shard.safetensors", "v": "shard.safetensors"})
    with pytest.raises(CheckpointError, match="no such tensor") as e:
        Checkpoint.open(tmp_path)
    check_message(e, "model.safetensors.index.json", "'v'", "shard.safetensors")


@pytest.mark.parametrize("content", ["{not json", '{"metadata": {}}', '{"weight_map": {"w": 3}}'])
def test_bad_index(tmp_path: Path, content: str) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(content)
    with pytest.raises(CheckpointError) as e:
        Checkpoint.open(tmp_path)
    check_message(e, "model.safetensors.index.json")


def test_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no model.safetensors") as e:
        Checkpoint.open(tmp_path)
    check_message(e, str(tmp_path))


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not a checkpoint directory") as e:
        Checkpoint.open(tmp_path / "nowhere")
    check_message(e, "nowhere")


def test_same_name_in_two_loose_files(tmp_path: Path) -> None:
    write_raw(tmp_path / "a.safetensors", GOOD, bytes(8))
    write_raw(tmp_path / "b.safetensors", GOOD, bytes(8))
    with pytest.raises(CheckpointError, match="also in a.safetensors") as e:
        Checkpoint.open(tmp_path)
    check_message(e, "b.safetensors", "'w'")


def test_missing_tensor_name_suggests_close_ones(tmp_path: Path) -> None:
    header = {
        "model.layers.0.mlp.up_proj.weight": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "model.norm.weight": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
    }
    write_raw(tmp_path / "model.safetensors", header, bytes(16))
    ckpt = Checkpoint.open(tmp_path)
    assert "model.norm.weight" in ckpt and "model.layers.0.mlp.up_proj" not in ckpt
    with pytest.raises(CheckpointError, match="did you mean 'model.layers.0.mlp.up_proj.weight'") as e:
        ckpt.load("model.layers.0.mlp.up_proj")
    check_message(e, str(tmp_path), "'model.layers.0.mlp.up_proj'")


@pytest.mark.parametrize("spell", [
    lambda n: n.replace("model.", "model.language_model.", 1),  # transformers 5's multimodal class
    lambda n: "language_model." + n,  # transformers 4's
])  # fmt: skip
def test_gemma3_saved_from_the_multimodal_class_loads(tmp_path, spell) -> None:
    """Gemma 3 checkpoints saved from Gemma3ForConditionalGeneration keep the text model under
    `language_model`: the same weights load and give the same logits."""
    from safetensors.numpy import load_file, save_file

    from tcp_compiler.frontend.model import load_model
    from tcp_compiler.frontend.precision import PRECISIONS
    from tcp_compiler.runtime.generate import generate
    from tests.oracle.tiny_models import build, save

    plain = save(build("gemma3"), tmp_path / "plain")
    multi = tmp_path / "multi"
    multi.mkdir()
    (multi / "config.json").write_text((plain / "config.json").read_text())
    (path,) = plain.glob("*.safetensors")
    save_file({spell(k): v for k, v in load_file(path).items()}, multi / path.name, metadata={"format": "pt"})
    runs = []
    for directory in (plain, multi):
        model = load_model(directory)
        runs.append(generate(model.config, model.checkpoint.load, [[5, 17, 3]], PRECISIONS["f32"], 2))
    saved = load_file(multi / path.name)
    assert any(k.startswith(("model.language_model.", "language_model.")) for k in saved)
    np.testing.assert_array_equal(runs[0].prefill_logits, runs[1].prefill_logits)
    np.testing.assert_array_equal(runs[0].decode_logits[-1], runs[1].decode_logits[-1])
