"""Rich tables whose every cell stays on one line, at any console width.

Rich shrinks a table that is too wide by wrapping cells over lines, or, when no cell may wrap,
by squeezing columns until some vanish. These tables instead keep every column at its widest
cell and cut the text of one elastic column (an op role, a layer list, a failed sweep point's
error) with an ellipsis to the width that is left.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from rich import box
from rich.table import Table

GAP = 3  # characters between two columns of a SIMPLE_HEAD table without edge padding
ELLIPSIS = "…"


def cut(text: str, width: int) -> str:
    """`text` in at most `width` characters, the last one an ellipsis when it was longer."""
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + ELLIPSIS if width > 0 else ""


def line_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    elastic: int = 0,
    left: Collection[str] = (),
    caption: str | None = None,
    elastic_max: int | None = None,
) -> Table:
    """A borderless table of `rows` that fits `width` characters: the `elastic` column's cells are
    cut to what the others leave (at most `elastic_max`); columns named in `left` align left,
    the others (numbers) right."""
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    others = sum(w for i, w in enumerate(widths) if i != elastic) + GAP * (len(columns) - 1)
    room = max(len(columns[elastic]), width - others, 1)
    if elastic_max is not None:
        room = min(room, max(elastic_max, len(columns[elastic])))
    table = Table(
        title=title, caption=caption, title_justify="left", caption_justify="left", box=box.SIMPLE_HEAD,
        pad_edge=False, show_edge=False,
    )  # fmt: skip
    for i, column in enumerate(columns):
        table.add_column(
            column, justify="left" if column in left else "right", no_wrap=True,
            width=min(widths[i], room) if i == elastic else widths[i],
        )  # fmt: skip
    for row in rows:
        table.add_row(*(cut(cell, room) if i == elastic else cell for i, cell in enumerate(row)))
    return table
