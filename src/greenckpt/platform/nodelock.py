"""The locks that keep node settings to one writer: the state file's lock and the node lock.

Why: every MPI rank runs greenckpt, and so the restoration at start, at once; and two sessions
with different state files (another user, another ``--state-file``) would each save the
other's changes as "originals". The state file's ``flock`` makes "read the record, restore,
remove it" one step between processes; the node lock (:func:`node_lock_file`) admits one
session per node whatever its state file, and restorers take it while they write. The kernel
drops an ``flock`` when its holder dies, so a crashed holder blocks nobody; waiting is bounded
(:data:`LOCK_WAIT_S`). The full reasoning: docs/design/restore.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pwd
import stat
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from greenckpt.platform.cpufreq_info import CPU_DIR
from greenckpt.platform.root import PlatformError, SysRoot, process_alive, process_start
from greenckpt.platform.statefile import make_state_dir
from greenckpt.units import UnitError, parse_duration

__all__ = [
    "LOCK_WAIT_S",
    "NODE_LOCK",
    "SESSION",
    "SESSION_WAIT_ENV",
    "NodeHeldError",
    "acquire_node_lock",
    "keep_lock_record",
    "node_lock_file",
    "release_node_lock",
    "session_wait_s",
    "state_lock",
]

LOCK_WAIT_S = 30.0
"""How long to wait for another process holding the state file's lock before giving up."""
SESSION_WAIT_ENV = "GREENCKPT_NODE_LOCK_WAIT"
"""How long a new session waits for another live session to let the node go (a duration;
default 0: refused at once). For job scripts whose steps each run under ``greenckpt run`` and
may start while the last one is still restoring the node, and for test runs in parallel."""
_LOCK_POLL_S = 0.02

NODE_LOCK = Path("/run/greenckpt-node.lock")
"""The node lock of the machine's own root (see :func:`node_lock_file`)."""
SESSION = "session"
"""The purpose a session records in the node lock (restorers record theirs in words)."""


# --------------------------------------------------------------------------------------------
# The state file's lock: one restorer of a record at a time
# --------------------------------------------------------------------------------------------


def _lock_path(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


def _lock_holder(lock: Path) -> str:
    """`` (pid 123, restoring the node's settings)`` as recorded by the holder, or ``""``."""
    try:
        pid, _, purpose = lock.read_text(encoding="utf-8").strip().partition(" ")
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (pid {pid}, {purpose})" if pid.isdigit() and purpose else ""


@contextlib.contextmanager
def state_lock(path: Path, purpose: str, *, shared: bool = False) -> Iterator[None]:
    """Hold the advisory lock of the state file ``path`` (see the module docstring).

    Exclusive (restoring; a session's first publication) creates the lock file; shared (a
    session starting: wait until no one restores) does not, and skips waiting when there is no
    lock file. Waits at most ``LOCK_WAIT_S``, then raises a PlatformError naming the holder.
    """
    lock = _lock_path(path)
    fd = -1
    # Non-blocking open: a FIFO planted at the lock's name must not hang every start.
    flags = os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW
    if shared:
        with contextlib.suppress(OSError):  # no lock file: nobody ever held it
            fd = os.open(lock, os.O_RDONLY | flags)
    else:
        make_state_dir(path)
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | flags, 0o600)
        except OSError as exc:
            raise PlatformError(
                f"cannot open the lock file {lock}: {exc.strerror or exc}; nothing was changed"
            ) from exc
    try:
        if fd >= 0 and _acquire(fd, shared, lock, path) and not shared:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()} {purpose}\n".encode(), 0)
        yield
    finally:
        if fd >= 0:
            os.close(fd)  # releases the lock


def _acquire(fd: int, shared: bool, lock: Path, path: Path) -> bool:
    """flock ``fd``, polling until ``LOCK_WAIT_S``; False where the file system has no locks."""
    operation = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, operation)
            return True
        except BlockingIOError:
            pass
        except OSError as exc:
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL):
                return False
            raise PlatformError(f"cannot lock {lock}: {exc.strerror or exc}") from exc
        if time.monotonic() >= deadline:
            raise PlatformError(
                f"another greenckpt process{_lock_holder(lock)} has held the lock of the state "
                f"file {path} for more than {LOCK_WAIT_S:g} s; try again when it has finished"
            )
        time.sleep(_LOCK_POLL_S)


# --------------------------------------------------------------------------------------------
# The node lock: one session per node, whatever its state file
# --------------------------------------------------------------------------------------------


def node_lock_file(root: SysRoot | None = None) -> Path:
    """Where every session and every restorer of ``root``'s settings takes the node lock.

    The settings are node-wide, so the lock must be one file that every user and every session
    finds, whatever its state file, ``XDG_RUNTIME_DIR`` or user: ``/run/greenckpt-node.lock``
    on the machine's own root (``/run`` is node-local, root-owned and a tmpfs; a file directly
    in it needs no directory that a state directory's 0700 mode could hide). Another root (a
    fake tree) gets ``.<tree name>.greenckpt-node.lock`` beside the tree: shared by everyone
    using that tree, never shared with the real node, and outside the tree so it is never
    mistaken for one of its files.
    """
    chosen = root if root is not None else SysRoot.default()
    if chosen.is_real:
        return NODE_LOCK
    top = chosen.path.resolve()
    return top.parent / f".{top.name}.greenckpt-node.lock"


@dataclass
class _HeldLock:
    fd: int
    pid: int
    count: int
    keep_record: bool = False
    """The record names another state file left unrestored: leave it for the next one."""


_held_node_locks: dict[Path, _HeldLock] = {}
"""Node locks this process holds, by lock file: a second session in the same process nests
(``flock`` would refuse a second open of the file even within one process)."""
_held_guard = threading.RLock()
"""Guards :data:`_held_node_locks`. Re-entrant: a handler that restores the node on a signal
(it releases its lock) runs in the main thread, possibly while that thread waits in
:func:`acquire_node_lock` for another lock file with this guard held."""


def _may_change_node(root: SysRoot) -> bool:
    """Whether this process could write any cpufreq or cpuidle attribute of ``root``."""
    cpu = root / CPU_DIR
    patterns = (
        "cpufreq/policy*/scaling_governor",
        "cpufreq/policy*/scaling_max_freq",
        "cpufreq/policy*/scaling_min_freq",
        "cpu*/cpuidle/state*/disable",
    )
    return any(os.access(f, os.W_OK) for pattern in patterns for f in cpu.glob(pattern))


def _open_node_lock(lock: Path, root: SysRoot) -> int | None:
    """Open (creating it where allowed) the node lock; None when no lock is needed.

    A process that may not create the lock file and finds none may still lock one that root
    created (``flock`` needs only a read-only descriptor). One that finds none and cannot write
    any setting needs no lock: it cannot change the node. One that can change the node but
    cannot create the lock is refused, with what root must do once.
    """
    flags = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        if os.geteuid() == 0:
            lock.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | flags, 0o644)
    except OSError as exc:
        try:
            fd = os.open(lock, os.O_RDONLY | flags)
        except OSError:
            if not _may_change_node(root):
                return None
            raise PlatformError(
                f"cannot create the node lock {lock} ({exc.strerror or exc}): this user can "
                "change the node's settings, so it must take the lock every greenckpt session "
                f"takes; have root create it once (install -m 644 /dev/null {lock})"
            ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise PlatformError(
            f"the node lock {lock} is not a plain file (a FIFO, device or hard link): remove "
            "it; nothing was changed"
        )
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) != 0o644:
        with contextlib.suppress(OSError):  # every user must be able to open it to lock it
            os.fchmod(fd, 0o644)
    return fd


def _holder_record(fd: int) -> dict[str, Any] | None:
    """The record the lock's last holder wrote (None when empty or unreadable)."""
    try:
        doc = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def _describe_holder(doc: Mapping[str, Any] | None) -> tuple[str, bool]:
    """One phrase naming the lock's holder, and whether that holder is a session.

    The record is only a hint: a process that could not write it (a user locking root's
    read-only lock file) leaves the previous holder's. A record whose pid and start time no
    longer run names nobody.
    """
    if doc is None:
        return "greenckpt process (it did not record itself)", False
    pid, start = doc.get("pid"), doc.get("process_start")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return "greenckpt process (it did not record itself)", False
    if not process_alive(pid, start if isinstance(start, int) else None):
        return (
            "greenckpt process (it did not record itself; the last recorded, "
            f"pid {pid}, has ended)",
            False,
        )
    purpose = str(doc.get("purpose", ""))
    what = "session" if purpose == SESSION else f"process ({purpose})"
    state = doc.get("state_file")
    return (
        f"greenckpt {what} pid {pid} of user {doc.get('user', '?')}, started "
        f"{doc.get('since', '?')} (process start {start}, state file {state})",
        purpose == SESSION,
    )


def _record_holder(fd: int, purpose: str, state_file: Path) -> None:
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = str(os.geteuid())
    doc = {
        "pid": os.getpid(),
        "process_start": process_start(os.getpid()),
        "user": user,
        "uid": os.geteuid(),
        "since": datetime.now(UTC).isoformat(timespec="seconds"),
        "purpose": purpose,
        "state_file": str(state_file),
    }
    with contextlib.suppress(OSError):  # a read-only descriptor cannot record: a hint only
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(doc) + "\n").encode(), 0)


def session_wait_s() -> float:
    """Seconds a new session waits for a live one (:data:`SESSION_WAIT_ENV`); refuses a value
    that is not a duration in one line."""
    text = os.environ.get(SESSION_WAIT_ENV, "").strip()
    if not text or text == "0":
        return 0.0
    try:
        return float(parse_duration(text, allow_zero=True))
    except (UnitError, ValueError):
        raise PlatformError(
            f"{SESSION_WAIT_ENV} must be a duration such as 30s or 5min (0 to refuse at once), "
            f"got {text!r}"
        ) from None


def _wait_limit(
    start: float, patience: float, other: tuple[str, float] | None
) -> tuple[float, str]:
    """Until when :func:`acquire_node_lock` waits for the holder now seen, and the words
    saying so. A session: ``patience`` from the start of the wait. Anyone else (a restorer
    at work, or a record being rewritten as the lock changes hands; ``other`` = (who, first
    seen)): :data:`LOCK_WAIT_S` from when it appeared, so a restorer that follows a long
    session gets its own allowance."""
    if other is None:
        return start + patience, f" after {patience:g} s ({SESSION_WAIT_ENV})" if patience else ""
    return other[1] + LOCK_WAIT_S, f" after {LOCK_WAIT_S:g} s"


class NodeHeldError(PlatformError):
    """Another live session holds the node lock (``holder`` names it: what, pid, user,
    since): a session may not change the node's settings, but may still run and account
    with control off (a node shared between jobs)."""

    def __init__(self, message: str, *, holder: str = "") -> None:
        super().__init__(message)
        self.holder = holder or message

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle by the message, the holder restored with the rest of the state."""
        return (type(self), (str(self),), self.__dict__)


def acquire_node_lock(root: SysRoot, purpose: str, state_file: Path) -> Path | None:
    """Take the node lock of ``root`` (nested when this process holds it already).

    Returns the lock file to pass to :func:`release_node_lock`, or None when no lock was taken
    (none needed, or a file system without ``flock``). A session holding it refuses at once
    (or after :data:`SESSION_WAIT_ENV`, when that says to wait); a restorer at work (it holds
    the lock for a moment) is waited for up to ``LOCK_WAIT_S``.
    Raises PlatformError naming the holder: pid, user, start, and its state file.
    """
    lock = node_lock_file(root)
    with _held_guard:
        held = _held_node_locks.get(lock)
        if held is not None and held.pid == os.getpid():
            held.count += 1
            return lock
        patience = session_wait_s() if purpose == SESSION else 0.0
        fd = _open_node_lock(lock, root)
        if fd is None:
            return None
        start = time.monotonic()
        other: tuple[str, float] | None = None  # a holder that is not a session: since when
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    pass
                except OSError as exc:
                    if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL):
                        os.close(fd)
                        return None
                    raise PlatformError(f"cannot lock {lock}: {exc.strerror or exc}") from exc
                who, is_session = _describe_holder(_holder_record(fd))
                now = time.monotonic()
                other = None if is_session else other if other and other[0] == who else (who, now)
                limit, waited = _wait_limit(start, patience, other)
                if now >= limit:
                    raise NodeHeldError(
                        f"another {who} controls this node's settings (node lock {lock})"
                        f"{waited}; wait for it to end, or stop it",
                        holder=who,
                    )
                time.sleep(_LOCK_POLL_S)
            left = _left_unrestored(_holder_record(fd), state_file)
            if left is not None and purpose == SESSION:
                raise PlatformError(
                    f"this node's settings were left changed by a {left[1]} that ended without "
                    f"restoring them (state file {left[0]}, node lock {lock}); restore them "
                    f"first: greenckpt restore --state-file {left[0]}, as that user"
                )
        except BaseException:
            os.close(fd)
            raise
        if left is None:
            _record_holder(fd, purpose, state_file)
        _held_node_locks[lock] = _HeldLock(fd, os.getpid(), 1, keep_record=left is not None)
        return lock


def _left_unrestored(doc: Mapping[str, Any] | None, state_file: Path) -> tuple[str, str] | None:
    """(state file, who) when the lock's last holder, now gone, recorded a state file other
    than ``state_file`` that still exists: a session (or a restorer) killed with the node
    changed, whose record lives where this process would not look (another user's
    ``XDG_RUNTIME_DIR``, another ``--state-file``). A clean end clears the lock's record."""
    if doc is None or not isinstance(doc.get("state_file"), str):
        return None
    other = doc["state_file"]
    if other == str(state_file) or not _may_exist(other):
        return None
    who = f"greenckpt process pid {doc.get('pid', '?')} of user {doc.get('user', '?')}"
    return other, f"{who}, started {doc.get('since', '?')}"


def _may_exist(path: str) -> bool:
    """False only when ``path`` is certainly gone. A path this process cannot look at —
    another user's private ``XDG_RUNTIME_DIR`` — counts as present: its owner may have left
    the node changed there, and only that user (or root) can tell."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True


def keep_lock_record(lock: Path | None) -> None:
    """Leave this process's record in the node lock when it releases the lock: its session
    ends with settings it could not restore, and the next session must find that record (and
    the state file it names) rather than save the unrestored settings as the node's own."""
    if lock is None:
        return
    with _held_guard:
        held = _held_node_locks.get(lock)
        if held is not None and held.pid == os.getpid():
            held.keep_record = True


def release_node_lock(lock: Path | None) -> None:
    """Undo one :func:`acquire_node_lock`; the last one clears the record and unlocks."""
    if lock is None:
        return
    with _held_guard:
        held = _held_node_locks.get(lock)
        if held is None or held.pid != os.getpid():
            return
        held.count -= 1
        if held.count > 0:
            return
        del _held_node_locks[lock]
        if not held.keep_record:
            with contextlib.suppress(OSError):
                os.ftruncate(held.fd, 0)
        os.close(held.fd)  # releases the lock
