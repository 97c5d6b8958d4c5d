"""One sysfs attribute write, and the one place its OS errors become one-line messages.

Why: cpufreq, cpuidle and the restore session all write kernel attributes; a refused write must
read the same everywhere (permission, read-only sysfs, the kernel's EINVAL) and say how much of
a request was already written, and a session must be able to wrap each single write (it defers
signals there, see docs/design/restore.md). So every sysfs write in greenckpt goes through
:func:`write_attributes`.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from greenckpt.platform.root import PlatformError, SysRoot

__all__ = ["SysfsWrite", "WriteGuard", "write_attributes"]


@dataclass(frozen=True)
class SysfsWrite:
    """One attribute write: ``value`` (no newline) into ``path`` (relative to the root)."""

    path: str
    value: str


WriteGuard = Callable[[SysfsWrite], AbstractContextManager[object]]
"""Makes the context every single write runs in (see :func:`write_attributes`)."""


def write_attributes(
    root: SysRoot,
    writes: Iterable[SysfsWrite],
    *,
    what: str = "the cpufreq/cpuidle files",
    around_each: WriteGuard | None = None,
) -> list[SysfsWrite]:
    """Write ``writes`` in order; return those written. OS errors become one-line PlatformErrors.

    Values are written with a trailing newline, exactly as ``echo VALUE > FILE`` does: the kernel
    accepts it for every attribute used here, and it keeps a fake tree byte-identical to what
    sysfs shows. Each write runs inside ``around_each(write)`` when given: the check that the
    write may still happen and the write itself then form one step that nothing can split (the
    restore session defers signals there, re-checks that no signal has restored it, and handles
    a signal that arrived only once the write is done). On failure the writes already done are
    counted in the error so the caller knows the tree is half-changed.
    """
    done: list[SysfsWrite] = []
    for w in writes:
        with around_each(w) if around_each is not None else contextlib.nullcontext():
            _write_one(root, w, what, done)
            done.append(w)
    return done


def _write_one(root: SysRoot, w: SysfsWrite, what: str, done: Sequence[SysfsWrite]) -> None:
    try:
        root.write(w.path, w.value + "\n")
    except PermissionError as exc:
        raise PlatformError(
            f"cannot write {root / w.path}: permission denied; root (or write access to "
            f"{what}) is needed{_partial(done)}"
        ) from exc
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise PlatformError(
                f"cannot write {root / w.path}: read-only file system (sysfs mounted "
                f"read-only, e.g. in a container){_partial(done)}"
            ) from exc
        reason = exc.strerror or str(exc)
        raise PlatformError(
            f"writing {w.value!r} to {root / w.path} failed: {reason}{_partial(done)}"
        ) from exc


def _partial(done: Sequence[SysfsWrite]) -> str:
    if not done:
        return " (nothing was written)"
    return f" (after {len(done)} earlier write(s) of this request)"
