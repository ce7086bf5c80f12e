"""The image-text families (qwen3_vl, qwen3_vl_moe, kimi_k25) against transformers 5.23.0: the whole
...ForConditionalGeneration built from a config with a tiny vision encoder, fed text only (tcpc runs
text-only inputs). Logits of prefill and 4 decode steps within 1e-4 with greedy tokens equal, matmul
FLOPs equal to FlopCounterMode, 2 and 4 chips equal to one, and parameter counts equal to the
language model's and LM head's: the vision encoder and projector are not built or counted (each
test says how many parameters that leaves out)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch
import transformers

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.builder import build_prefill
from tcp_compiler.frontend.config import RawConfig
from tcp_compiler.frontend.families import read_model_config
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS
from tcp_compiler.runtime.generate import generate
from tests.oracle.param_counts import tcpc_params, transformers_params
from tests.oracle.test_families import PROMPT, STEPS, _einsum_flops, reference_logits
from tests.oracle.tiny_models import COMMON, DEEPSEEK

F32 = PRECISIONS["f32"]
# interleaved M-RoPE over 8 frequencies (head_dim 16): temporal, height and width sections
MROPE = {"rope_type": "default", "rope_theta": 100.0, "mrope_section": [2, 3, 3], "mrope_interleaved": True}
QWEN_VISION = dict(depth=1, hidden_size=16, intermediate_size=24, num_heads=2, out_hidden_size=32,
                   patch_size=4, num_position_embeddings=16, deepstack_visual_indexes=[0])  # fmt: skip
KIMI_VISION = dict(patch_size=4, pos_emb_height=4, pos_emb_width=4, pos_emb_time=2, num_attention_heads=2,
                   num_hidden_layers=1, hidden_size=16, intermediate_size=24)  # fmt: skip
TEXT = {k: v for k, v in COMMON.items() if k != "tie_word_embeddings"}
# name -> (config class, model class, outer fields); text configs make each family's parts bite:
# q/k norms and GQA; the MoE router renormalising its top-k although norm_topk_prob is false, a
# dense layer by mlp_only_layers; Kimi's DeepSeek-V3 text model (MLA, yarn, grouped routing)
# under model_type kimi_k2, which transformers reads as deepseek_v3; outer tie_word_embeddings
# true over a text config that says false (the outer one ties)
VL = {
    "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration", dict(
        text_config=dict(TEXT, head_dim=16, rope_parameters=MROPE), vision_config=QWEN_VISION)),
    "qwen3_vl_tied": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration", dict(
        text_config=dict(TEXT, head_dim=16, rope_parameters=MROPE, tie_word_embeddings=False),
        vision_config=QWEN_VISION, tie_word_embeddings=True)),
    "qwen3_vl_moe": ("Qwen3VLMoeConfig", "Qwen3VLMoeForConditionalGeneration", dict(
        text_config=dict(TEXT, head_dim=16, rope_parameters=MROPE, num_experts=4, num_experts_per_tok=2,
                         moe_intermediate_size=24, norm_topk_prob=False, mlp_only_layers=[1]),
        vision_config=QWEN_VISION)),
    "kimi_k25": ("Kimi_K25Config", "Kimi_K25ForConditionalGeneration", dict(
        text_config=dict(TEXT, **DEEPSEEK, model_type="kimi_k2"), vision_config=KIMI_VISION,
        projection_hidden_size=16, tie_word_embeddings=False)),
}  # fmt: skip
MOE = {"qwen3_vl_moe", "kimi_k25"}


def build(name: str, seed: int = 0) -> transformers.PreTrainedModel:
    config_cls, model_cls, fields = VL[name]
    config = getattr(transformers, config_cls)(**fields)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval().to(torch.float32)
    with torch.no_grad():
        for n, p in model.named_parameters():
            norm = n.endswith("norm.weight") and "language_model" in n
            p.copy_(0.1 * torch.randn_like(p) + (1.0 if norm else 0.0))
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.copy_(0.3 * torch.randn_like(b))
    if name in MOE:
        model.set_experts_implementation("eager")
    return model


def vision_params(model: torch.nn.Module) -> int:
    """transformers' parameters outside the language model and LM head (encoder, projector)."""
    return sum(
        p.numel()
        for n, p in model.named_parameters()
        if not n.startswith(("model.language_model.", "lm_head."))
    )


def save(model: transformers.PreTrainedModel, directory: Path) -> None:
    """Saved as the hub's checkpoints are. transformers 5.23's reverse of Kimi-K2.5's hub renames
    also turns the text model's `layers` into `blocks` (the vision encoder's word), which no Kimi
    checkpoint has: those names are put back to the hub's language_model.model.layers. Qwen3-VL-MoE's
    hub files stack experts as gate_up_proj [E, D, 2F] and down_proj [E, F, D], which transformers
    transposes on loading (its Transpose(1, 2) converter) but saves as its modules hold them."""
    model.save_pretrained(directory)
    path = Path(directory) / "model.safetensors"
    tensors = safetensors.torch.load_file(path)
    hub = {}
    for name, tensor in tensors.items():
        if model.config.model_type == "qwen3_vl_moe" and name.endswith(
            ("experts.gate_up_proj", "experts.down_proj")
        ):
            tensor = tensor.transpose(1, 2).contiguous()
        hub[name.replace("language_model.model.blocks.", "language_model.model.layers.")] = tensor
    safetensors.torch.save_file(hub, path, metadata={"format": "pt"})


@pytest.fixture(scope="module", params=sorted(VL))
def family(request, tmp_path_factory):
    model = build(request.param)
    directory = tmp_path_factory.mktemp(request.param)
    save(model, directory)
    return request.param, model, load_model(directory)


def test_text_only_prefill_and_decode_match_transformers(family) -> None:
    name, model, loaded = family
    result = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, STEPS)
    ours = [result.prefill_logits[0]] + [d[0] for d in result.decode_logits]
    tokens = result.token_matrix[0].tolist()
    theirs = reference_logits(model, PROMPT, tokens[:STEPS])
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0, err_msg=f"{name} step {step}")
        assert int(np.argmax(a)) == tokens[step]
    assert np.abs(theirs[0]).max() > 0.05, "logits too small to tell a bug from noise"


@pytest.mark.parametrize("seq", [1, 7])
def test_matmul_flops_equal_flop_counter(family, seq: int) -> None:
    name, model, loaded = family
    counter = torch.utils.flop_counter.FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(torch.zeros((1, seq), dtype=torch.long), logits_to_keep=1)
    assert _einsum_flops(build_prefill(loaded.config, F32, 1, seq).graph) == counter.get_total_flops(), name


@pytest.mark.parametrize("chips", [2, 4])
def test_several_chips_equal_one(family, chips: int) -> None:
    name, _, loaded = family
    prompts = [PROMPT, [7, 1, 60]]
    one = generate(loaded.config, loaded.checkpoint.load, prompts, F32, 3)
    many = generate(loaded.config, loaded.checkpoint.load, prompts, F32, 3, chips=chips)
    np.testing.assert_allclose(many.prefill_logits, one.prefill_logits, atol=1e-5, rtol=0, err_msg=name)
    for a, b in zip(many.decode_logits, one.decode_logits, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=name)
    assert many.token_matrix.tolist() == one.token_matrix.tolist()


def test_parameters_are_the_language_model_and_lm_head(family) -> None:
    """tcpc counts what it builds: transformers' total less the vision encoder and projector."""
    name, model, loaded = family
    left_out = vision_params(model)
    assert left_out > 0
    assert tcpc_params(loaded.config) == transformers_params(model) - left_out, name
    assert loaded.config.embedding.tied == (name == "qwen3_vl_tied")


def test_mrope_is_ordinary_rope_only_for_text_positions(tmp_path) -> None:
    """The equality above is not vacuous: transformers' interleaved M-RoPE moves the logits when the
    temporal, height and width rows differ (as image tokens' do), and equals tcpc's RoPE when all
    three rows are the token's index."""
    model = build("qwen3_vl")
    save(model, tmp_path)
    loaded = load_model(tmp_path)
    ours = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 0).prefill_logits[0]
    seq = torch.arange(len(PROMPT))
    with torch.no_grad():
        text = model(torch.tensor([PROMPT]), position_ids=seq.expand(3, 1, -1)).logits[0, -1].numpy()
        image = torch.stack([seq, seq // 2, seq % 3])[:, None, :]
        grid = model(torch.tensor([PROMPT]), position_ids=image).logits[0, -1].numpy()
    np.testing.assert_allclose(ours, text, atol=1e-4, rtol=0)
    assert np.abs(grid - text).max() > 1e-2


def test_moe_router_renormalises_whatever_norm_topk_prob_says(tmp_path) -> None:
    """Qwen3VLMoeTextTopKRouter divides its top-k by their sum unconditionally: the tiny model says
    norm_topk_prob false, and read that way the logits would differ."""
    model = build("qwen3_vl_moe")
    save(model, tmp_path)
    loaded = load_model(tmp_path)
    assert loaded.config.moe.normalize_top_k
    assert [layer.moe for layer in loaded.config.layers] == [True, False, True]
    unnormalised = dataclasses.replace(
        loaded.config, moe=dataclasses.replace(loaded.config.moe, normalize_top_k=False)
    )
    a = generate(loaded.config, loaded.checkpoint.load, [PROMPT], F32, 0).prefill_logits[0]
    b = generate(unnormalised, loaded.checkpoint.load, [PROMPT], F32, 0).prefill_logits[0]
    assert np.abs(a - b).max() > 1e-3


def _kimi_text() -> dict:
    return {**VL["kimi_k25"][2]["text_config"], "rope_parameters": DEEPSEEK["rope_parameters"]}


def test_kimi_flattened_copy_reads_as_the_nested_one() -> None:
    nested = {"model_type": "kimi_k25", "text_config": _kimi_text(), "tie_word_embeddings": False}
    flat = {
        **_kimi_text(),
        "model_type": "kimi_k25",
        "vision_config": {"patch_size": 14},
        "tie_word_embeddings": False,
    }
    a = read_model_config(RawConfig(nested, "nested.json", "kimi_k25"), "k")
    b = read_model_config(RawConfig(flat, "flat.json", "kimi_k25"), "k")
    assert a == b and a.mla is not None and a.moe.routed_scale == DEEPSEEK["routed_scaling_factor"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"model_type": "qwen3_vl"},
            "missing field 'text_config' (a qwen3_vl config nests the text model there)",
        ),
        (
            {"model_type": "kimi_k25", "vision_config": {}},
            "missing field 'text_config' (a kimi_k25 config nests the text model there)",
        ),
        ({"model_type": "qwen3_vl", "text_config": []}, "text_config: expected an object, got []"),
        (
            {"model_type": "qwen3_vl_moe", "text_config": {"num_experts": 2, "num_experts_per_tok": 3}},
            "num_experts_per_tok (3) exceeds num_experts (2)",
        ),
        (
            {"model_type": "qwen3_vl", "text_config": {"num_hidden_layers": -1}},
            "text_config.num_hidden_layers",
        ),
        ({"model_type": "qwen3_vl", "text_config": {}, "tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ],
)
def test_bad_image_text_configs_are_one_line_errors(data: dict, message: str) -> None:
    with pytest.raises(FrontendError) as e:
        read_model_config(RawConfig(data, "vl.json"), "vl")
    assert str(e.value).startswith("vl.json: ") and message in str(e.value) and "\n" not in str(e.value)
