"""Writing output files whole or not at all: a report, trace or plot is never left half-written."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from simulator.errors import OutputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yields a temporary path next to `path` and moves it into place only if the block succeeds.

    The file gets the permissions a plain open() would give it (mkstemp's are owner-only).
    """
    target = Path(path)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    except OSError as e:
        raise OutputError(f"{target}: cannot write: {e.strerror}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        yield tmp
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"{target}: cannot write: {e.strerror}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
