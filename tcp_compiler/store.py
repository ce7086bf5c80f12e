"""A sweep's result store: one Parquet file, one row per point (its configuration, its hash, every
figure of its report), that grows across sweeps.

A sweep opens the store, skips the points whose hash it holds, and saves each finished row as it
completes: the file is rewritten beside itself and renamed into place (at most every
`SAVE_INTERVAL_S`, and always when the sweep ends or is interrupted), so a reader or an interrupted
sweep never sees half a file and no finished point is lost.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from simulator.files import atomic_output
from tcp_compiler.errors import StoreError

SAVE_INTERVAL_S = 1.0
RETRIED = "crashed"  # rows of this status (a worker died, a bug) are run again, not skipped


class Store:
    """The rows of a Parquet store, in the order they were added; a context manager that saves on
    exit, whatever the exit."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.rows: list[dict[str, Any]] = read_rows(self.path) if self.path.exists() else []
        self._saved_at, self._unsaved = time.monotonic(), False

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.save()

    def hashes(self) -> set[str]:
        """The points the store holds, so a sweep skips them."""
        return {r["hash"] for r in self.rows if r.get("status") != RETRIED and r.get("hash")}

    def rows_of(self, hashes: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The stored row of each hash held."""
        wanted = set(hashes)
        return {r["hash"]: r for r in self.rows if r.get("hash") in wanted}

    def add(self, row: dict[str, Any]) -> None:
        """A finished point's row (replacing a row of its hash), saved within SAVE_INTERVAL_S."""
        row = {k: None if v == "" else v for k, v in row.items()}
        self.rows = [r for r in self.rows if r.get("hash") != row["hash"]] + [row]
        self._unsaved = True
        if time.monotonic() - self._saved_at >= SAVE_INTERVAL_S:
            self.save()

    def save(self) -> None:
        if not self._unsaved:
            return
        import pyarrow.parquet as pq

        table = _table(self.rows)
        try:
            with atomic_output(self.path) as tmp:
                pq.write_table(table, tmp)
        except OSError as e:
            raise StoreError(f"{self.path}: cannot write: {e.strerror}") from None
        self._saved_at, self._unsaved = time.monotonic(), False


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """A store's rows, or a StoreError naming the file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except (OSError, pa.ArrowException) as e:
        raise StoreError(f"{path}: not a result store: {e}") from None
    if rows and "hash" not in rows[0]:
        raise StoreError(f"{path}: not a result store: it has no hash column")
    return rows


def _table(rows: list[dict[str, Any]]) -> Any:
    """The rows as an Arrow table: columns in first-seen order, absent values null, a column of
    integers and floats stored as floats, and one of text and numbers as text (a simulation's prompt
    length 2048 beside a serving run's uniform:64:512)."""
    import pyarrow as pa

    names = list(dict.fromkeys(k for r in rows for k in r))
    columns = {}
    for name in names:
        values = [r.get(name) for r in rows]
        if any(isinstance(v, str) for v in values):
            values = [v if v is None else str(v) for v in values]
        elif any(isinstance(v, float) for v in values):
            values = [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in values]
        columns[name] = values
    return pa.table(columns)
