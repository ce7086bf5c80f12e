"""JSON read with a depth bound: deep nesting is refused as invalid, not left to overflow the stack.

config.json files, checkpoint index files and safetensors headers are all JSON someone else wrote;
none legitimately nests deeper than a few levels, so MAX_DEPTH levels is plenty.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 32


def loads(
    data: bytes | str,
    max_depth: int = MAX_DEPTH,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """The JSON value in `data` (UTF-8 if bytes); ValueError with a one-line reason otherwise."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        value = json.loads(text, object_pairs_hook=object_pairs_hook)
    except RecursionError:
        raise ValueError(f"nested deeper than {max_depth} levels") from None
    except json.JSONDecodeError as e:
        raise ValueError(str(e)) from None
    if _depth(value) > max_depth:
        raise ValueError(f"nested deeper than {max_depth} levels")
    return value


def _depth(value: Any) -> int:
    """Levels of arrays and objects, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest
