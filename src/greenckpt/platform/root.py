"""The filesystem root through which greenckpt reads and writes the machine's state.

Why: cpufreq, cpuidle, powercap and /proc are plain files. Resolving every one of them through
one root (``/`` on a real node) lets the tests hand the whole platform layer a fake tree — an
Intel node with acpi-cpufreq, an AMD node with amd-pstate, a VM with nothing — and check what
it would have written, without root and without the hardware.

A root other than ``/`` is user-supplied (``--root``, ``$GREENCKPT_SYSROOT``) and may be run
as root: every write under it (:meth:`SysRoot.open_for_write`) refuses a symbolic link as the
file written and a directory that resolves outside the tree, so a user's tree whose
``scaling_governor`` links to ``/etc/passwd`` cannot make root write there. Links that stay
inside the tree (``cpuN/cpufreq -> ../cpufreq/policyN``, as in real sysfs) are followed.

Process identity (:func:`process_start`, :func:`process_alive`) reads the machine's own
``/proc``, never a fake tree's: the processes whose liveness is checked (the holders of state
files and locks) run on this machine.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from greenckpt.errors import GreenckptError
from greenckpt.files import FileTooLargeError, NotRegularFileError, read_regular

ENV_VAR = "GREENCKPT_SYSROOT"
"""Environment variable that overrides the default root (``/``)."""


class PlatformError(GreenckptError, RuntimeError):
    """The machine cannot do what was asked; the message says what is missing and why."""


@dataclass(frozen=True)
class SysRoot:
    """A root directory standing for ``/`` (a real node) or a fake tree (tests)."""

    path: Path = Path("/")

    @classmethod
    def default(cls, path: str | os.PathLike[str] | None = None) -> SysRoot:
        """The root named by ``path``, else by ``$GREENCKPT_SYSROOT``, else ``/``."""
        chosen = path if path is not None else os.environ.get(ENV_VAR) or "/"
        return cls(Path(chosen))

    @property
    def is_real(self) -> bool:
        """True when this root is the machine's own ``/``."""
        return self.path.resolve() == Path("/")

    def __truediv__(self, rel: str) -> Path:
        """``root / "sys/devices/system/cpu"``: an absolute path under this root."""
        return self.path / rel.lstrip("/")

    def read(self, rel: str) -> str:
        """Text of a file under the root, stripped; raises ``OSError`` as the OS does."""
        return (self / rel).read_text(encoding="utf-8").strip()

    def read_or_none(self, rel: str) -> str | None:
        """Text of a file, or ``None`` when it does not exist or cannot be read."""
        try:
            return self.read(rel)
        except (OSError, UnicodeDecodeError):
            return None

    def read_int_or_none(self, rel: str) -> int | None:
        """Integer attribute of a file, or ``None`` when absent, unreadable or not an integer
        (optional sysfs attributes vary by driver and kernel; their absence is not an error)."""
        text = self.read_or_none(rel)
        if text is None:
            return None
        try:
            return int(text)
        except ValueError:
            return None

    def write(self, rel: str, value: str) -> None:
        """Write ``value`` to a sysfs-style attribute (no newline handling needed by sysfs).

        Through :meth:`open_for_write`: under a user-supplied tree, a write that would leave the
        tree raises :class:`PlatformError` and writes nothing.
        """
        fd = self.open_for_write(rel)
        with open(fd, "w", encoding="utf-8", closefd=True) as fh:
            fh.write(value)

    def open_for_write(self, rel: str, *, truncate: bool = True) -> int:
        """A descriptor open for writing ``rel``, which must stay inside this root.

        ``truncate`` (``O_TRUNC``, as ``echo VALUE > FILE``): sysfs ignores it, but a plain
        file of a fake tree would otherwise keep the tail of a longer old value.

        On the machine's own ``/`` it is a plain open. Under any other root (a tree a user
        supplied, possibly used by root) the directory is opened first and its real path,
        read back from the open descriptor (no window between check and use), must lie inside
        the root's real path; the file itself is opened with ``O_NOFOLLOW`` relative to that
        directory and must be a regular file with one link (a hard link could name a file
        outside the tree). Raises :class:`PlatformError` naming the path when refused, and
        ``OSError`` as the OS does otherwise.
        """
        path = self / rel
        mode = os.O_WRONLY | os.O_CLOEXEC
        if self.is_real:
            return os.open(path, mode | (os.O_TRUNC if truncate else 0))
        dirfd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            where = _fd_real_path(dirfd, path.parent)
            top = os.path.realpath(self.path)
            if os.path.commonpath([where, top]) != top:
                raise PlatformError(
                    f"refusing to write {path}: its directory resolves to {where}, outside the "
                    f"tree {top} (a symbolic link leaves the tree)"
                )
            try:
                fd = os.open(
                    path.name,
                    mode | os.O_NOFOLLOW | os.O_NONBLOCK,
                    dir_fd=dirfd,
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise PlatformError(
                        f"refusing to write {path}: it is a symbolic link (under a tree other "
                        "than /, files are written only where they are, never through a link)"
                    ) from None
                raise
        finally:
            os.close(dirfd)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            what = "not a regular file" if not stat.S_ISREG(info.st_mode) else "a hard link"
            raise PlatformError(
                f"refusing to write {path}: it is {what} (under a tree other than /, only "
                "plain files of the tree are written)"
            )
        if truncate:  # only now: the checks above must pass before anything changes
            try:
                os.ftruncate(fd, 0)
            except OSError:
                os.close(fd)
                raise
        return fd

    def is_inside(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path``, resolved, lies inside this root's resolved path (always True for
        the machine's own ``/``): for files greenckpt creates inside a fake tree."""
        top = os.path.realpath(self.path)
        return os.path.commonpath([os.path.realpath(path), top]) == top


def _fd_real_path(fd: int, fallback: Path) -> str:
    """The real path of an open directory (``/proc/self/fd``), else of ``fallback``."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(fallback)


def _read_proc_stat(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
        return fh.read()


def process_start(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (field 22 of ``/proc/<pid>/stat``).

    With the pid it identifies a process: pids are reused, a pid and its start time are not
    (within one boot). None where ``/proc`` cannot tell.
    """
    try:
        text = _read_proc_stat(pid)
        return int(text.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError, OverflowError):
        return None


def process_alive(pid: int, start: int | None) -> bool:
    """True when ``pid`` runs (not a zombie) and, where ``start`` is known, started then.

    ``start`` None (a record that did not save it) trusts ``kill(pid, 0)`` alone. A pid outside
    the range of pids is not alive.
    """
    if not 0 < pid < 2**31:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError:
        return False
    try:
        text = _read_proc_stat(pid)
    except OSError:
        return True  # no /proc: trust kill(0)
    fields = text.rsplit(")", 1)[-1].split()
    if fields and fields[0] in ("Z", "X"):
        return False
    return start is None or process_start(pid) == start


MAX_STATE_BYTES = 1 << 20
"""Largest state file read back: greenckpt's are a few KiB; anything bigger is not one."""


def read_state_text(path: str | os.PathLike[str]) -> str | None:
    """Text of a small state file, None when it does not exist.

    Refuses (:class:`PlatformError`) what is not a regular file: a FIFO would block the read
    forever, a device or a huge file would be read without end (see
    :func:`greenckpt.files.read_regular`).
    """
    try:
        data = read_regular(path, limit=MAX_STATE_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except NotRegularFileError as exc:
        raise PlatformError(
            f"state file {path} is {exc.strerror}; greenckpt writes plain files: remove it or "
            "name the right file"
        ) from None
    except FileTooLargeError:
        raise PlatformError(
            f"state file {path} is more than a greenckpt state file can be "
            f"({MAX_STATE_BYTES} bytes); inspect it and remove it"
        ) from None
    except OSError as exc:
        raise PlatformError(f"cannot read the state file {path}: {exc.strerror or exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlatformError(f"state file {path} is not UTF-8 text ({exc.reason})") from exc


class ClosesOnExit:
    """``with obj:`` for objects whose whole cleanup is ``close()``.

    Meters, meter selections, the DMA-latency hold and the node-settings session all release
    what they hold in ``close()``; leaving a ``with`` block, normally or by an exception, must
    call it. Subclasses whose entry does work (opening, installing handlers) override
    ``__enter__`` and keep this ``__exit__``.
    """

    def close(self) -> object:
        """Release what the object holds (subclasses implement it)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def remove_stale_temps(path: Path) -> list[Path]:
    """Remove the temporary files of ``path`` that writers killed mid-write left behind.

    A writer publishes through ``.<name>.<pid>.tmp``; a SIGKILL between creating and renaming
    it leaves that file, which nothing else would ever remove. One whose pid no longer runs is
    garbage; one whose pid runs is kept (it may be that writer at work, or a reused pid: then
    it is removed on a later start). Returns what was removed; errors are ignored (another
    user's directory).
    """
    removed: list[Path] = []
    pattern = re.compile(rf"\.{re.escape(path.name)}\.(\d{{1,10}})\.tmp")
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None:
            continue
        pid = int(m[1])
        if pid == os.getpid() or process_alive(pid, None):
            continue
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed
