"""Reading a file the user names without ever hanging on it: regular files only.

Why one helper, at the bottom: profiles, run reports, state files and power logs are all
files a user (or a batch script) names, and a FIFO at such a name blocks a plain ``open`` or
``read`` until a writer comes — forever, in a batch job — while a device such as /dev/zero
never ends. Every reader of such a file goes through :func:`read_regular`: it opens the path
non-blocking (opening a FIFO then returns at once), checks the type on the open descriptor (so
nothing can swap the file between the check and the read), and reads at most ``limit`` bytes.
A leaf module like :mod:`greenckpt.units`: it imports nothing of greenckpt but the exception
base (:mod:`greenckpt.errors`), so every layer may use it.
"""

from __future__ import annotations

import errno
import os
import stat

from greenckpt.errors import GreenckptError

__all__ = [
    "FileTooLargeError",
    "NotRegularFileError",
    "file_kind",
    "open_regular",
    "read_regular",
]

_KINDS = {
    stat.S_IFDIR: "directory",
    stat.S_IFIFO: "FIFO (named pipe)",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
}


class NotRegularFileError(GreenckptError, OSError):
    """The path names a directory, FIFO, socket or device, not a regular file.

    An :class:`OSError` whose ``strerror`` reads "not a regular file (it is a FIFO (named
    pipe))", so callers that already report ``exc.strerror`` say the right thing."""


class FileTooLargeError(GreenckptError, OSError):
    """The file holds more bytes than its reader accepts (``strerror`` says how many)."""


def file_kind(mode: int) -> str:
    """What ``mode`` (an ``st_mode``) is, in words: "FIFO (named pipe)", "directory", ..."""
    return "regular file" if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "special file")


def open_regular(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of the regular file at ``path`` (symlinks to one are fine).

    Raises :class:`NotRegularFileError` for anything else, and the usual :class:`OSError`
    (``FileNotFoundError``, ``PermissionError``, ...) when it cannot be opened. The descriptor
    is blocking again when returned, so a caller may keep it for tailing a growing file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(
                errno.EINVAL, f"not a regular file (it is a {file_kind(mode)})", os.fspath(path)
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], *, limit: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (see :func:`open_regular`); with ``limit``,
    :class:`FileTooLargeError` for a file longer than ``limit`` bytes instead of reading it."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        if limit is None:
            return fh.read()
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise FileTooLargeError(
            errno.EFBIG, f"longer than the {limit} bytes such a file can be", os.fspath(path)
        )
    return data
