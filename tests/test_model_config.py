"""ModelConfig's modes are typed: a value the builder does not know fails where a config is read."""

from __future__ import annotations

import pytest

from tcp_compiler.errors import FrontendError
from tcp_compiler.frontend.config import Attention, Mlp, Moe, Norms, Positions, Residual, Rope
from tcp_compiler.frontend.model import load_model


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Norms(1e-5, "batch"), "norm 'batch' is not one of rms, layer"),
        (lambda: Norms(1e-5, parallel=3), "parallel block norms 3 is not one of 1, 2"),
        (lambda: Residual("sandwich"), "block 'sandwich' is not one of pre, post, parallel"),
        (lambda: Positions("relative"), "position 'relative' is not one of rope, learned, alibi"),
        (lambda: Attention(qk_norm="yes"), "q/k norm 'yes' is not one of none, per_head, all_heads"),
        (lambda: Mlp("gelu_new"), "activation 'gelu_new' is not one of silu, gelu_tanh, gelu, relu"),
        (lambda: Mlp("silu", "swiglu"), "mlp 'swiglu' is not one of gated, plain"),
        (lambda: Rope(10000.0, "ntk"), "rope_type 'ntk' is not one of default, linear"),
        (lambda: Moe(8, 2, 64, True, "r", ("g", "u", "d"), scoring="relu"), "expert scoring 'relu'"),
    ],
)
def test_an_unknown_mode_is_refused_where_it_is_made(make, message: str) -> None:
    with pytest.raises(FrontendError, match=message.replace("(", r"\(")):
        make()


def test_families_fill_the_groups() -> None:
    bloom = load_model("bloom-560m").config
    assert (bloom.norms.kind, bloom.norms.embed, bloom.positions.kind, bloom.mlp.kind) == (
        "layer", True, "alibi", "plain"
    )  # fmt: skip
    olmo = load_model("olmo-2-1124-7b").config
    assert olmo.attention.qk_norm == "all_heads" and olmo.norms.sandwich and not olmo.norms.pre
    gemma = load_model("gemma-2-2b").config
    assert (gemma.embedding.logits_softcap, gemma.attention.softcap, gemma.norms.offset) == (30.0, 50.0, 1.0)
