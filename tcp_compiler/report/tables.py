"""Rich tables that fit a console width without cutting a header or a value.

Rich shrinks a table that is too wide by wrapping cells over lines, or, when no cell may wrap,
by squeezing columns until their text is cut with an ellipsis. These tables instead keep every
header and every number whole on one line: one elastic column (an op role, a layer list, a failed
sweep point's error) wraps its text over lines to the width the others leave, and when the
columns do not fit side by side at all, the table is stacked: the columns after the first `keys`
ones are split into groups, each printed below the last with the key columns repeated.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

GAP = 3  # characters between two columns of a SIMPLE_HEAD table without edge padding
_ELASTIC_MIN = 16  # characters an elastic column keeps before the table stacks instead


def line_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    elastic: int = 0,
    left: Collection[str] = (),
    caption: str | None = None,
    elastic_max: int | None = None,
    keys: int = 1,
) -> RenderableType:
    """A borderless table of `rows` that fits `width` characters: the `elastic` column wraps (at
    most `elastic_max` wide); columns named in `left` align left, the others (numbers) right; the
    first `keys` columns name a row and repeat in every part of a stacked table."""
    natural = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    wanted = min(natural[elastic], max(elastic_max or natural[elastic], len(columns[elastic])))
    least = max(len(columns[elastic]), min(wanted, _ELASTIC_MIN))
    widths = [least if i == elastic else w for i, w in enumerate(natural)]
    groups = _column_groups(widths, width, keys)
    parts = []
    for number, group in enumerate(groups):
        shown = [*range(keys), *group]
        used = sum(widths[i] for i in shown if i != elastic) + GAP * (len(shown) - 1)
        sizes = {i: max(least, min(wanted, width - used)) if i == elastic else widths[i] for i in shown}
        table = Table(
            title=title if number == 0 else None, caption=caption if len(groups) == 1 else None,
            title_justify="left", caption_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
            show_edge=False,
        )  # fmt: skip
        for i in shown:
            table.add_column(
                columns[i], justify="left" if columns[i] in left else "right", no_wrap=i != elastic,
                overflow="fold", width=sizes[i],
            )  # fmt: skip
        for row in rows:
            table.add_row(*("\n".join(wrap(row[i], sizes[i])) if i == elastic else row[i] for i in shown))
        parts.append(table)
    if len(parts) == 1:
        return parts[0]
    return Group(*parts, *([Text(caption)] if caption else []))  # the whole width, not the last part's


def wrap(text: str, width: int) -> list[str]:
    """Lines of at most `width` characters, broken at spaces, or after a `/` or `,` inside a word
    too long for a line (a path, a list of layers); a piece with neither is broken only when it
    alone exceeds `width`."""
    pieces: list[tuple[str, bool]] = []  # (piece, starts a new word)
    for word in text.split():
        parts = [word] if len(word) <= width else re.findall(r"[^/,]*[/,]|[^/,]+$", word)
        for index, part in enumerate(parts):
            for start in range(0, len(part), width):
                pieces.append((part[start : start + width], index == 0 and start == 0))
    lines: list[str] = []
    for piece, new_word in pieces:
        joined = (lines[-1] + (" " if new_word else "") + piece) if lines else piece
        if lines and len(joined) <= width:
            lines[-1] = joined
        else:
            lines.append(piece)
    return lines or [""]


def _column_groups(widths: Sequence[int], width: int, keys: int) -> list[list[int]]:
    """The columns after the first `keys`, in order, split into groups that each fit `width`
    beside the key columns (a column too wide even alone takes a group of its own)."""
    base = sum(widths[:keys]) + GAP * max(keys - 1, 0)
    groups: list[list[int]] = [[]]
    used = base
    for i in range(keys, len(widths)):
        need = widths[i] + (GAP if keys or groups[-1] else 0)
        if groups[-1] and used + need > width:
            groups.append([])
            used = base
            need = widths[i] + (GAP if keys else 0)
        groups[-1].append(i)
        used += need
    return groups
