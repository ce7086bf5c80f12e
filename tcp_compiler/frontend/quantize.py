"""Where a weight's quantisation groups fall on its named axes (weight_format.py quantises)."""

from __future__ import annotations

from collections.abc import Sequence

from tcp_compiler.errors import OptionError


def group_split(name: str, axes: dict[str, int], contract: Sequence[str], group: int) -> tuple[str, int]:
    """Which contracted axis a group boundary cuts, and how many of its elements one group holds."""
    inner = group
    for a in reversed(contract):
        size = axes[a]
        if inner <= size:
            if size % inner:
                break
            return a, inner
        if inner % size:
            break
        inner //= size
    shape = " x ".join(f"{a}={axes[a]}" for a in contract)
    raise OptionError(
        "{name}: group size {group} does not tile its input axes {shape}; choose a {group_size} that "
        "divides them", name=name, group=group, shape=shape,
    )  # fmt: skip

