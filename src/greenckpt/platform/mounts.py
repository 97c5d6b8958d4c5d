"""The mount table, and paths resolved inside a :class:`~greenckpt.platform.root.SysRoot`.

Why its own module: finding the mount that holds a checkpoint directory is the first step of
storage identification (:mod:`greenckpt.platform.storage`) and needs two things a plain
``os.path.realpath`` cannot give — symbolic links resolved *inside* a fake root (so tests hand
it fake trees), and ``proc/self/mountinfo`` parsed with its ``major:minor`` and bind-mount
``root`` fields, which ``/proc/mounts`` lacks. The whole procedure is in
docs/design/measurement.md ("Storage identification").
"""

from __future__ import annotations

import os
import re
import stat
from collections import deque
from dataclasses import dataclass

from greenckpt.errors import GreenckptError, InvalidValueError
from greenckpt.platform.root import PlatformError, SysRoot

__all__ = [
    "MOUNTINFO",
    "MountEntry",
    "PathNotFoundError",
    "find_mount",
    "parse_mountinfo",
    "path_components",
    "read_mountinfo",
    "resolve_in_root",
    "resolve_or_none",
]

MOUNTINFO = "proc/self/mountinfo"
"""Where the mount table of the calling process's mount namespace lives, under the root."""
MAX_SYMLINKS = 40
"""Like the kernel's limit: a longer chain of links is a loop."""

_OCTAL = re.compile(r"\\([0-7]{3})")


class PathNotFoundError(GreenckptError):
    """A path component does not exist under the root (raised by :func:`resolve_in_root`)."""


@dataclass(frozen=True)
class MountEntry:
    """One line of ``/proc/<pid>/mountinfo``, escapes decoded (see proc(5))."""

    mount_id: int
    parent_id: int
    major: int
    minor: int
    root: str
    """The directory of the filesystem mounted here: ``/`` normally, a subdirectory for a
    bind mount of part of a filesystem."""
    mount_point: str
    mount_options: tuple[str, ...]
    """Per-mount options (``rw``, ``noatime``, ``nosuid``)."""
    optional_fields: tuple[str, ...]
    """Propagation tags before the ``-`` separator (``shared:1``, ``master:2``)."""
    fstype: str
    source: str | None
    """The mount source (``/dev/sda1``, ``server:/export``, ``tmpfs``); ``None`` when empty."""
    super_options: tuple[str, ...]
    """Per-superblock options: ``rw``/``ro``, ``sync`` when mounted synchronous, then the
    filesystem's own options (``vers=4.2,rsize=...``, ``upperdir=...``)."""

    @property
    def major_minor(self) -> str:
        """``"MAJ:MIN"`` as in ``sys/dev/block``."""
        return f"{self.major}:{self.minor}"

    def option(self, name: str) -> str | None:
        """The value of ``name=value`` in the super options, else in the mount options."""
        prefix = name + "="
        for opt in (*self.super_options, *self.mount_options):
            if opt.startswith(prefix):
                return opt[len(prefix) :]
        return None

    def has_flag(self, name: str) -> bool:
        """Whether the bare option ``name`` (e.g. ``sync``) is in either option list."""
        return name in self.super_options or name in self.mount_options


def _unescape(field: str) -> str:
    """Undo the kernel's octal escapes (``\\040`` space, ``\\011`` tab, ``\\012``, ``\\134``)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def _split_options(field: str) -> tuple[str, ...]:
    return tuple(_unescape(opt) for opt in field.split(",") if opt)


def _parse_line(line: str) -> MountEntry:
    fields = line.split(" ")
    try:
        sep = fields.index("-", 6)
    except ValueError:
        raise InvalidValueError("no ' - ' separator") from None
    if len(fields) < sep + 3:
        raise InvalidValueError("missing fields after the separator")
    major, _, minor = fields[2].partition(":")
    source = _unescape(fields[sep + 2])
    return MountEntry(
        mount_id=int(fields[0]),
        parent_id=int(fields[1]),
        major=int(major),
        minor=int(minor),
        root=_unescape(fields[3]),
        mount_point=_unescape(fields[4]),
        mount_options=_split_options(fields[5]),
        optional_fields=tuple(f for f in fields[6:sep] if f),
        fstype=_unescape(fields[sep + 1]),
        source=source if source and source != "none" else None,
        super_options=_split_options(fields[sep + 3]) if len(fields) > sep + 3 else (),
    )


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Parse the text of a mountinfo file (proc(5)).

    Why a parser of its own: ``/proc/mounts`` lacks ``major:minor`` (needed to find the block
    device without trusting ``/dev`` names) and the bind-mount ``root``. Fields are separated
    by single spaces (the kernel escapes spaces inside them), so an empty source stays a field.
    A malformed line raises :class:`PlatformError` naming the line.
    """
    entries: list[MountEntry] = []
    # Only "\n" ends a line: the kernel escapes it in names, but not "\r", "\x85" or "\u2028",
    # which str.splitlines() would also split on.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip(" "):
            continue
        try:
            entries.append(_parse_line(line))
        except (ValueError, IndexError) as exc:
            raise PlatformError(f"mountinfo line {number} is malformed ({exc}): {line!r}") from None
    return entries


def path_components(path: str) -> list[str]:
    """The non-empty components of a ``/``-separated path (``//a/./b``: ``a``, ``.``, ``b``)."""
    return [c for c in path.split("/") if c]


def find_mount(entries: list[MountEntry], path: str) -> MountEntry | None:
    """The mount holding absolute, resolved ``path``: longest component-wise mount-point prefix.

    ``/mnt/data`` is under ``/mnt`` but not under ``/mnt/dat``. When several mounts sit on the
    same point (mounted over each other), the visible one is the one that is not the parent of
    another mount on that point; if that is ambiguous, the last listed (mountinfo lists mounts
    in the order they were mounted).
    """
    target = path_components(path)
    best: list[MountEntry] = []
    best_len = -1
    for entry in entries:
        mp = path_components(entry.mount_point)
        if len(mp) <= len(target) and target[: len(mp)] == mp:
            if len(mp) > best_len:
                best, best_len = [entry], len(mp)
            elif len(mp) == best_len:
                best.append(entry)
    if not best:
        return None
    same_point = [e for e in best if e.mount_point == best[-1].mount_point]
    parents = {e.parent_id for e in same_point}
    on_top = [e for e in same_point if e.mount_id not in parents]
    return on_top[-1] if on_top else same_point[-1]


def read_mountinfo(root: SysRoot) -> list[MountEntry]:
    """The calling process's mount table under ``root``; raises :class:`PlatformError`."""
    try:
        raw = (root / MOUNTINFO).read_bytes()
    except OSError as exc:
        raise PlatformError(
            f"cannot read {root / MOUNTINFO}: {exc.strerror or exc}; "
            "storage cannot be identified without the mount table"
        ) from None
    # Names are bytes to the kernel: keep undecodable ones round-trippable, as os does.
    return parse_mountinfo(raw.decode("utf-8", "surrogateescape"))


# --------------------------------------------------------------------------- paths in the root


def resolve_in_root(root: SysRoot, path: str) -> str:
    """Resolve symbolic links of absolute ``path`` inside ``root`` (``realpath`` in a chroot).

    Absolute link targets are taken relative to the root, ``..`` applies to the already
    resolved prefix (physical semantics, as the kernel does). Raises :class:`PathNotFoundError`
    when a component is missing and :class:`PlatformError` for loops or unreadable components.
    """
    pending = deque(path_components(path))
    done: list[str] = []
    hops = 0
    while pending:
        part = pending.popleft()
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        rel = "/".join([*done, part])
        try:
            st = os.lstat(root / rel)
        except (FileNotFoundError, NotADirectoryError):
            raise PathNotFoundError("/" + rel) from None
        except OSError as exc:
            raise PlatformError(f"cannot look at /{rel}: {exc.strerror or exc}") from None
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > MAX_SYMLINKS:
                raise PlatformError(f"too many levels of symbolic links resolving {path}")
            target = os.readlink(root / rel)
            if target.startswith("/"):
                done = []
            pending.extendleft(reversed(path_components(target)))
        else:
            done.append(part)
    return "/" + "/".join(done)


def resolve_or_none(root: SysRoot, path: str) -> str | None:
    """:func:`resolve_in_root`, or ``None`` where that raises (sysfs links that may be absent)."""
    try:
        return resolve_in_root(root, path)
    except (PathNotFoundError, PlatformError):
        return None
