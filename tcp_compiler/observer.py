"""One object hears a compile and a simulation as they go, instead of a callback per event.

The library announces what it is doing; what to show (a status line, a progress bar, a note that
a long prompt will take a while) is the caller's. Library callers attach none: QUIET hears nothing.
"""

from __future__ import annotations


class Observer:
    """Every event a long run announces; each method does nothing unless a subclass overrides it."""

    def stage(self, what: str) -> None:
        """Work under way, in words ("compiling the decode step", "simulating the prefill ...")."""

    def step(self, name: str) -> None:
        """A named step of the lowering pipeline begins (pipeline.LOWERING, passes.PIPELINE)."""

    def planned(self, attention: list[dict]) -> None:
        """A prefill's attention plan (a note per attention: its form, tiles and why), heard before
        the rewrite, whose cost grows with the tiles (mapping.attention)."""

    def progress(self, done: int, total: int) -> None:
        """`done` of `total` units of the long part done (decode steps, served requests)."""


QUIET = Observer()
