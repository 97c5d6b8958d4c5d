"""Writing a file so that a crash leaves either the old one or the complete new one.

Why one helper, at the bottom: profiles, run reports, checkpoint manifests, the node state
file that restores frequencies after a crash, and the record of free page reporting all depend
on it, and ``platform/`` (which may import nothing above it) needs it as much as ``io/`` and
``ckpt/`` do. A leaf module: it imports nothing of greenckpt, so every layer may use it
(imported from here, under no other name).

:func:`write_atomic` is the usual recipe: temporary file in the same directory, ``fsync``,
rename over the target, ``fsync`` of the directory (the rename is durable only then). The
temporary file is created exclusively and never through a symbolic link. Two choices are the
caller's: its name (``temp="pid"``: ``.NAME.PID.tmp``, predictable, so a process killed
mid-write leaves at most one per pid and the next writer with that pid replaces it, for files
written by root in a shared directory where stray files must not pile up), and publication
without replacing (``exclusive``: a hard link, which fails when the target exists, so another
process's file is never overwritten). :func:`write_durable` skips the rename for a directory
nobody reads until it is itself renamed into place.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Literal

__all__ = ["TempName", "fsync_directory", "write_atomic", "write_durable"]

TempName = Literal["random", "pid"]
"""How :func:`write_atomic` names its temporary file (see the module docstring)."""

_CREATE_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV)


def fsync_directory(path: str | os.PathLike[str], *, best_effort: bool = False) -> None:
    """Make a directory's entries (new, renamed or removed files) durable.

    ``best_effort``: a directory that cannot be opened or fsynced (some file systems refuse)
    is passed over silently, for callers whose file is already in place and whose caller
    must not fail for want of the extra guarantee.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        if best_effort:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not best_effort:
            raise
    finally:
        os.close(fd)


def write_atomic(
    path: str | os.PathLike[str],
    data: str | bytes,
    *,
    mode: int = 0o600,
    temp: TempName = "random",
    exclusive: bool = False,
    sync_directory: bool = True,
) -> bool:
    """Replace ``path`` with ``data`` (text is UTF-8) atomically: temp file + fsync + rename.

    ``mode``: the new file's permissions (less the umask). ``temp``: the temporary file's name
    (``"pid"`` assumes one writer of ``path`` per process at a time). ``exclusive``: publish
    only if ``path`` does not exist, and return False (nothing written, nothing left) if it
    does. ``sync_directory``: fsync the directory afterwards (the caller may do it itself, e.g.
    best effort). Raises :class:`OSError` and leaves no temporary file on failure; True when
    published.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = _create_temp(target, mode, temp)
    leftover: Path | None = tmp
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            published = _link_new(tmp, target)  # the temporary name stays: removed below
        else:
            os.replace(tmp, target)
            published, leftover = True, None
    finally:
        if leftover is not None:
            with contextlib.suppress(OSError):
                leftover.unlink()
    if published and sync_directory:
        fsync_directory(target.parent)
    return published


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


def _create_temp(target: Path, mode: int, temp: TempName) -> tuple[int, Path]:
    """Create the temporary file beside ``target``, exclusively and not through a link."""
    directory = target.parent
    if temp == "pid":
        tmp = directory / f".{target.name}.{os.getpid()}.tmp"
        try:
            return os.open(tmp, _CREATE_NEW, mode), tmp
        except FileExistsError:  # left by a killed process that had this pid: ours to replace
            tmp.unlink()
            return os.open(tmp, _CREATE_NEW, mode), tmp
    for _ in range(100):
        # os.urandom, not secrets: the name only has to be unlikely to collide, and every
        # command starts through here (secrets costs ~10 ms of imports)
        tmp = directory / f".{target.name}.{os.urandom(4).hex()}.tmp"
        with contextlib.suppress(FileExistsError):
            return os.open(tmp, _CREATE_NEW, mode), tmp
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", str(directory))


def _link_new(tmp: Path, target: Path) -> bool:
    """Publish ``tmp`` at ``target`` unless that exists; False (nothing changed) if it does.

    A hard link fails on an existing name, atomically. Where the file system has no hard
    links, the check and the rename are two steps: the best such a file system offers.
    """
    try:
        os.link(tmp, target)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        if target.exists():
            return False
        os.rename(tmp, target)
    return True
