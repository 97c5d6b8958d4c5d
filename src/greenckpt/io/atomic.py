"""Replace a small file atomically: what profiles and checkpoint manifests are written with.

Why one helper: a crash must leave either the old file or the complete new one, never a torn
file, and both the profiler (a partial profile after every cell) and the checkpoint library
(the manifest inside a checkpoint) depend on it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["fsync_directory", "write_atomic", "write_durable"]


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries (new, renamed or removed files) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` with ``text`` atomically (temp file + fsync + rename + dir fsync)."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(directory)


def write_durable(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` (created or truncated) and fsync it; the directory entry is
    the caller's to make durable.

    For a file in a directory nobody reads until it is renamed into place (a checkpoint's
    staging directory): a torn file there is never seen, so the temporary name, rename and
    extra directory fsync of :func:`write_atomic` would buy nothing.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
