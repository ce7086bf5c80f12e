"""Files in and out: inputs are read with a size bound (never a device, FIFO or folder), outputs are
written whole or not at all, so a report, trace or plot is never left half-written."""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
import time
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

    The file gets the permissions a plain open() would give it (mkstemp's are owner-only). Its name
    carries this process's pid, so a later write of the same target can tell a killed writer's
    leftover (removed first, see remove_stale_temporaries) from a live one's.
    """
    target = Path(path)
    remove_stale_temporaries(target)
    try:
        fd, name = tempfile.mkstemp(
            prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent or "."
        )
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


STALE_AFTER_S = 60.0  # a temporary without a readable pid is stale once this old


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Removes the temporaries earlier writes of `target` left behind when killed (kill -9 skips
    the cleanup in `atomic_output`): only files named as `atomic_output` names them for this very
    target, `.NAME.PID.<random>.tmp`, and only when that PID is no longer running; a name without
    a pid (older releases: `.NAME.<random>.tmp`) goes once it is older than STALE_AFTER_S. A live
    writer's temporary is never touched. Returns what was removed; failures are ignored (the folder
    may be read-only, another run may have removed the file first)."""
    folder = target.parent if str(target.parent) else Path(".")
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(?:(\d+)\.)?[A-Za-z0-9_]{{8}}\.tmp")
    removed = []
    try:
        names = [e.name for e in os.scandir(folder) if e.name.startswith(f".{target.name}.")]
    except OSError:
        return removed
    for name in names:
        match = pattern.fullmatch(name)
        if match is None:
            continue
        path = folder / name
        try:
            stale = (
                not _running(int(match.group(1)))
                if match.group(1)
                else time.time() - path.lstat().st_mtime > STALE_AFTER_S
            )
            if stale and path.is_file() and not path.is_symlink():
                path.unlink()
                removed.append(path)
        except OSError:
            continue
    return removed


def _running(pid: int) -> bool:
    """Whether a process `pid` exists on this machine (one we may not signal still exists)."""
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def read_input(path: str | os.PathLike, limit: int, what: str) -> bytes:
    """The bytes of an input file of at most `limit` bytes: a device (/dev/zero), FIFO or folder is
    refused before any read (a FIFO would block, a device never end), and the read itself stops at
    limit + 1 bytes, so a file that grows meanwhile cannot make it unbounded. Raises OSError, whose
    strerror says why, like any other read failure."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise OSError(errno.EISDIR, "it is a folder, not a file", str(path))
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a device, FIFO or socket)", str(path))
        if info.st_size > limit:
            raise OSError(errno.EFBIG, _too_large(info.st_size, limit, what), str(path))
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise OSError(errno.EFBIG, _too_large(size, limit, what), str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _too_large(size: int, limit: int, what: str) -> str:
    return f"{size:,} bytes is over the {limit:,}-byte limit for {what}"
