"""Hash-once for frozen dataclasses that are dictionary keys on hot paths.

Types, op views and hardware specs key the compiler's caches; hashing their nested tuples on every
lookup dominated compile time. The hash is computed on first use and kept in the instance; it is
dropped when pickling, because string hashes differ between processes (a spawned sweep worker
must compute its own).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any


class HashOnce:
    """Mixin for a frozen dataclass. Its class body must say `__hash__ = HashOnce.__hash__`
    (a dataclass with eq and frozen otherwise generates its own)."""

    def __hash__(self) -> int:
        cached = self.__dict__.get("_hash_once")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))
            self.__dict__["_hash_once"] = cached  # frozen: bypass __setattr__, as cached_property does
        return cached

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_hash_once", None)
        return state
