"""Guaranteed restoration of a node's frequency, governor and C-state settings.

Why: greenckpt changes node-wide kernel settings (cpufreq governor and limits, cpuidle disable
flags) that outlive the process. A job that dies leaving its node pinned at 1.2 GHz, or with deep
C-states disabled, wastes energy or performance for every later job, silently. So, following
GEOPM's save files, every change goes through :class:`NodeSettings`, which:

1. **refuses to start** while a state file from an earlier session exists: that file may be the
   only record of the node's original settings, and it is never overwritten;
2. **saves before changing**: before the first write it reads the original value of every
   attribute it is about to change and writes them to a JSON state file, atomically (temporary
   file, ``fsync``, then a hard link/rename into place, then ``fsync`` of the directory), so a
   crash at any instant leaves either no file (nothing changed yet) or a complete one;
3. **restores** on normal exit, on exception and on SIGTERM/SIGINT/SIGHUP (handlers installed in
   the main thread restore, put the previous handlers back, then re-deliver the signal so the
   process ends with the conventional status, or the previous Python handler runs);
4. after SIGKILL, a power-cut-free crash or an OOM kill, :func:`restore_from_state_file` (called
   by the next start of greenckpt after :func:`pending_state` reports a file) puts the original
   values back from the state file and removes it.

Signals and writes. Python runs a signal handler between any two bytecodes, so a handler could
restore the node, remove the state file and return (an application's own SIGTERM handler that
only sets a flag) just before a write of the change it interrupted, which would then leave the
node changed with no record. So each write of a change is one step with signals deferred: inside
it the session checks that no signal has closed it, then writes; a signal that arrived meanwhile
is handled right after that one write (restoring it too), and the next step finds the session
closed. Saving, restoring (:meth:`NodeSettings.close` and :meth:`NodeSettings.restore`) defer
signals the same way and handle the deferred one when they are done.

A session whose final restore fails (a write refused) ends anyway: the state file is kept and
marked ``"ended": true``, so :func:`pending_state` no longer counts its still-running process as
a live session and ``greenckpt restore`` retries without ``--force``. The session forgets the
record at that point, so it can never act on a file that someone else has since replaced.

Concurrent starts (every MPI rank of a job runs greenckpt, and so the restoration at start, at
once). An advisory lock (``flock``) on ``.<state file name>.lock`` next to the state file makes
"read the record, restore, remove it" one step between processes: the record is read only while
holding the lock, so a slower restorer can never act on a record another one has already
restored, nor remove the file a new session has published since (it reads that one instead and
finds its owner alive). A session takes the same lock while it reads the originals and
publishes its first record, and waits for it (shared) before starting, so it never saves
values that a restorer is halfway through putting back. The kernel drops the lock when its
holder dies, so a crashed restorer blocks nobody and its record stays in place for the next
one; waiting is bounded (30 s), then a one-line error names the holder's pid. The lock file
itself stays (removing a lock file lets two processes lock different files); on a file system
without ``flock`` (some network mounts) the lock is skipped and the old behaviour applies.

Restore order (per cpufreq policy, then the cpuidle flags), reading current values first and
writing only what differs:

1. **governor** first: switching governors can have side effects on the other attributes
   (the userspace governor re-targets, intel_pstate re-applies its limits and EPP), so the
   explicit limits written afterwards win;
2. **limits** in the safe order computed from the *current* values
   (:func:`~greenckpt.platform.cpufreq.limit_writes`): if the original minimum is above the
   current maximum, write the maximum first, otherwise the minimum first. So "max before min" when
   the limits go up and "min before max" when they go down, and min ≤ max holds after every write
   (old kernels refuse anything else with EINVAL);
3. **scaling_setspeed** (only if the original governor was userspace): it needs the userspace
   governor in place and is clamped by the limits, so it comes last;
4. **energy_performance_preference** where the driver has one and it differs (switching the
   governor can change it);
5. **cpuidle disable flags**, which are independent of the above.

Values are saved and written back as the raw sysfs text (kHz, governor names, 0/1) — no unit
conversion round trip — so a restored tree is byte-for-byte the original.

Default state file location (:func:`default_state_file`): the file must live exactly as long as
the kernel settings it describes, and be node-local:

* running as root: ``/run/greenckpt/node-state.json`` — one node-wide record that every root
  session sees (settings are node-wide), on a tmpfs that a reboot clears together with the
  settings;
* otherwise ``$XDG_RUNTIME_DIR/greenckpt/node-state.json`` (per user, tmpfs, node-local);
* otherwise ``$XDG_CACHE_HOME`` (or ``~/.cache``) ``/greenckpt/node-state-<host>.json``: the host
  name is in the file name because home directories are often shared between cluster nodes, and
  because this location survives reboots the file records the kernel's boot id — a file from an
  earlier boot is stale (the reboot already reset the settings) and is discarded, not applied.

A root other than ``/`` (a fake tree) gets ``node-state-<hash of the root>.json`` in the same
directory, so tests and real sessions never share a record. Tests pass an explicit path.

Only one session may hold a node at a time, whatever its state file. Two sessions with
different state files (another user, another ``XDG_RUNTIME_DIR``, another ``--state-file``)
would otherwise both change the node: the second saves the first's changes as "originals" and
puts them back after the first has restored, leaving the node changed with no record. So every
session holds the **node lock** (:func:`node_lock_file`: ``/run/greenckpt-node.lock``, one file
for every user; beside the tree for a fake root) from ``__enter__`` to its end, and restorers
take it while they write. It is an ``flock``, which the kernel drops when its holder dies. A
second session in another process is refused at once, naming the holder (pid, user, start,
state file, as the holder recorded them in the lock file); a restorer at work is waited for
(bounded, as above); a second session in the same process nests (a count; ``flock`` would
refuse a second open even within one process). A clean end clears the lock's record; a holder
killed with its record in place leaves the record naming its state file, and new sessions with
another state file are refused until that file is restored. A process that may not create the
lock file and finds none needs no lock when it cannot write any setting (it cannot change the
node), and is refused otherwise. Within one state file, the file is also created with a hard
link, which fails if it exists, so two sessions racing to their first change cannot both win.

State files are untrusted input that root reads at every start: anything at their name that is
not a small regular file of valid, bounded JSON (a FIFO, deeply nested JSON, a number longer
than ``int()`` takes) is one PlatformError, never a hang or another exception; their temporary
files are created exclusively without following links, and those of writers killed mid-write
are removed by :func:`pending_state`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import pwd
import re
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Self

from greenckpt.durable import fsync_directory, write_atomic
from greenckpt.platform.cpufreq import (
    CPU_DIR,
    CPUFREQ_DIR,
    USERSPACE,
    CpufreqController,
    CpufreqPlan,
    CpufreqResult,
    Method,
    SysfsWrite,
    limit_writes,
    write_attributes,
)
from greenckpt.platform.cpuidle import CpuDmaLatency, CpuidleController, CstatePlan, CstateResult
from greenckpt.platform.root import (
    ClosesOnExit,
    PlatformError,
    SysRoot,
    process_alive,
    process_start,
    read_state_text,
    remove_stale_temps,
)

__all__ = [
    "DEFAULT_SIGNALS",
    "STATE_FORMAT",
    "NodeSettings",
    "PendingState",
    "RestoreReport",
    "default_state_file",
    "node_lock_file",
    "pending_state",
    "restore_from_state_file",
]

STATE_FORMAT = "greenckpt-node-state"
STATE_VERSION = 1
BOOT_ID = "proc/sys/kernel/random/boot_id"
"""Read through the root, so a fake tree can carry its own boot id."""

DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Signals after which the node is restored: batch systems send SIGTERM before SIGKILL, users
press Ctrl-C, a lost terminal sends SIGHUP."""

_RESTORE_HINT = "`greenckpt restore` (or greenckpt.platform.restore.restore_from_state_file())"

_POLICY_KEY = re.compile(r"policy\d{1,6}")
_IDLE_KEY = re.compile(rf"{CPU_DIR}/cpu\d{{1,6}}/cpuidle/state\d{{1,4}}/disable")
_WORD = re.compile(r"[A-Za-z0-9_\-]{1,64}")
_DIGITS = re.compile(r"\d{1,19}")
"""Bounded: a state file is untrusted text, and ``int()`` of thousands of digits raises."""
_HOST_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")
_LIMIT_KEYS = ("scaling_governor", "scaling_min_freq", "scaling_max_freq")

_FORCE_HINT = "`greenckpt restore --force` (force=True from Python)"

_LOCK_WAIT_S = 30.0
"""How long to wait for another process holding the state file's lock before giving up."""
_LOCK_POLL_S = 0.02

NODE_LOCK = Path("/run/greenckpt-node.lock")
"""The node lock of the machine's own root (see :func:`node_lock_file`)."""
_SESSION = "session"
"""The purpose a session records in the node lock (restorers record theirs in words)."""

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


# --------------------------------------------------------------------------------------------
# State file location and I/O
# --------------------------------------------------------------------------------------------


def default_state_file(
    root: SysRoot | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    euid: int | None = None,
) -> Path:
    """Where a session on ``root`` keeps its state file (see the module docstring for why)."""
    env = os.environ if environ is None else environ
    uid = os.geteuid() if euid is None else euid
    name = "node-state.json"
    if uid == 0:
        base = Path("/run/greenckpt")
    elif env.get("XDG_RUNTIME_DIR"):
        base = Path(env["XDG_RUNTIME_DIR"]) / "greenckpt"
    else:
        cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")) / ".cache")
        base = Path(cache).expanduser() / "greenckpt"
        name = f"node-state-{_HOST_SAFE.sub('_', socket.gethostname()) or 'host'}.json"
    chosen = root if root is not None else SysRoot.default()
    if not chosen.is_real:
        digest = hashlib.sha256(str(chosen.path.resolve()).encode()).hexdigest()[:12]
        name = name.removesuffix(".json") + f"-{digest}.json"
    return base / name


def _make_state_dir(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise PlatformError(
            f"cannot create the state file directory {path.parent}: {exc.strerror or exc}"
        ) from exc


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
def _state_lock(path: Path, purpose: str, *, shared: bool = False) -> Iterator[None]:
    """Hold the advisory lock of the state file ``path`` (see the module docstring).

    Exclusive (restoring; a session's first publication) creates the lock file; shared (a
    session starting: wait until no one restores) does not, and skips waiting when there is no
    lock file. Waits at most ``_LOCK_WAIT_S``, then raises a PlatformError naming the holder.
    """
    lock = _lock_path(path)
    fd = -1
    # Non-blocking open: a FIFO planted at the lock's name must not hang every start.
    flags = os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW
    if shared:
        with contextlib.suppress(OSError):  # no lock file: nobody ever held it
            fd = os.open(lock, os.O_RDONLY | flags)
    else:
        _make_state_dir(path)
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
    """flock ``fd``, polling until ``_LOCK_WAIT_S``; False where the file system has no locks."""
    operation = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
    deadline = time.monotonic() + _LOCK_WAIT_S
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
                f"file {path} for more than {_LOCK_WAIT_S:g} s; try again when it has finished"
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
_held_guard = threading.Lock()


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
    what = "session" if purpose == _SESSION else f"process ({purpose})"
    state = doc.get("state_file")
    return (
        f"greenckpt {what} pid {pid} of user {doc.get('user', '?')}, started "
        f"{doc.get('since', '?')} (process start {start}, state file {state})",
        purpose == _SESSION,
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


def _acquire_node_lock(root: SysRoot, purpose: str, state_file: Path) -> Path | None:
    """Take the node lock of ``root`` (nested when this process holds it already).

    Returns the lock file to pass to :func:`_release_node_lock`, or None when no lock was taken
    (none needed, or a file system without ``flock``). A session holding it refuses at once;
    a restorer at work (it holds the lock for a moment) is waited for up to ``_LOCK_WAIT_S``.
    Raises PlatformError naming the holder: pid, user, start, and its state file.
    """
    lock = node_lock_file(root)
    with _held_guard:
        held = _held_node_locks.get(lock)
        if held is not None and held.pid == os.getpid():
            held.count += 1
            return lock
        fd = _open_node_lock(lock, root)
        if fd is None:
            return None
        deadline = time.monotonic() + _LOCK_WAIT_S
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
                if is_session or time.monotonic() >= deadline:
                    raise PlatformError(
                        f"another {who} controls this node's settings (node lock {lock}); "
                        "wait for it to end, or stop it"
                    )
                time.sleep(_LOCK_POLL_S)
            left = _left_unrestored(_holder_record(fd), state_file)
            if left is not None and purpose == _SESSION:
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


def _keep_lock_record(lock: Path | None) -> None:
    """Leave this process's record in the node lock when it releases the lock: its session
    ends with settings it could not restore, and the next session must find that record (and
    the state file it names) rather than save the unrestored settings as the node's own."""
    if lock is None:
        return
    with _held_guard:
        held = _held_node_locks.get(lock)
        if held is not None and held.pid == os.getpid():
            held.keep_record = True


def _release_node_lock(lock: Path | None) -> None:
    """Undo one :func:`_acquire_node_lock`; the last one clears the record and unlocks."""
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


def _write_state_file(path: Path, doc: Mapping[str, Any], *, exclusive: bool) -> None:
    """Atomically publish ``doc`` at ``path``: temp file + fsync + link/rename + dir fsync.

    ``exclusive`` (the first save of a session) publishes with a hard link, which fails when the
    file exists: another session's record is never replaced. The temporary name is predictable
    (``temp="pid"``), so it is created exclusively and never through a link; one left by an
    earlier process with this pid (killed mid-write) is this pid's to replace.
    """
    data = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")
    _make_state_dir(path)
    try:
        published = write_atomic(path, data, temp="pid", exclusive=exclusive, sync_directory=False)
    except OSError as exc:
        raise PlatformError(
            f"cannot write the state file {path}: {exc.strerror or exc}; nothing was changed"
        ) from exc
    if not published:
        raise PlatformError(
            f"state file {path} appeared: another greenckpt session is changing this "
            "node's settings; nothing was changed by this one"
        )
    fsync_directory(path.parent, best_effort=True)


def _remove_state_file(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fsync_directory(path.parent, best_effort=True)


def _check_doc(doc: object, path: Path) -> dict[str, Any]:
    """Validate a state document strictly: it tells a root process which files to write."""

    def bad(why: str) -> PlatformError:
        return PlatformError(
            f"state file {path} is not a valid greenckpt node state ({why}); inspect it and "
            "restore the settings by hand, then remove it"
        )

    if not isinstance(doc, dict):
        raise bad("not a JSON object")
    if doc.get("format") != STATE_FORMAT or doc.get("format_version") != STATE_VERSION:
        raise bad(f"format must be {STATE_FORMAT!r} version {STATE_VERSION}")
    for key, kinds in (("pid", int), ("host", str), ("root", str), ("created", str)):
        if not isinstance(doc.get(key), kinds):
            raise bad(f"{key!r} missing or of the wrong type")
    if isinstance(doc["pid"], bool) or not 0 < doc["pid"] < 2**31:
        raise bad("'pid' out of range")
    for key in ("boot_id", "process_start"):
        if doc.get(key) is not None and not isinstance(doc[key], str | int):
            raise bad(f"{key!r} of the wrong type")
    if "ended" in doc and not isinstance(doc["ended"], bool):
        raise bad("'ended' must be true or false")
    cpufreq = doc.get("cpufreq")
    cpuidle = doc.get("cpuidle")
    if not isinstance(cpufreq, dict) or not isinstance(cpuidle, dict):
        raise bad("'cpufreq' and 'cpuidle' must be objects")
    for name, attrs in cpufreq.items():
        if not _POLICY_KEY.fullmatch(name) or not isinstance(attrs, dict):
            raise bad(f"bad cpufreq entry {name!r}")
        gov, lo, hi = (attrs.get(k) for k in _LIMIT_KEYS)
        if not (isinstance(gov, str) and _WORD.fullmatch(gov)):
            raise bad(f"{name}: bad scaling_governor")
        if not (isinstance(lo, str) and isinstance(hi, str)):
            raise bad(f"{name}: bad limits")
        if not (_DIGITS.fullmatch(lo) and _DIGITS.fullmatch(hi)) or int(lo) > int(hi):
            raise bad(f"{name}: bad limits {lo!r}..{hi!r}")
        speed, epp = attrs.get("scaling_setspeed"), attrs.get("energy_performance_preference")
        if speed is not None and not (isinstance(speed, str) and _DIGITS.fullmatch(speed)):
            raise bad(f"{name}: bad scaling_setspeed")
        if epp is not None and not (isinstance(epp, str) and _WORD.fullmatch(epp)):
            raise bad(f"{name}: bad energy_performance_preference")
    for key, value in cpuidle.items():
        if not _IDLE_KEY.fullmatch(key) or value not in ("0", "1"):
            raise bad(f"bad cpuidle entry {key!r}")
    return doc


def _load_state_file(path: Path) -> dict[str, Any] | None:
    """The validated record at ``path``, None when there is none.

    Every way a file can be wrong ends in one PlatformError (never a hang or another
    exception, which would stop every command at its start): not a regular file (a FIFO would
    block the read), too large, not UTF-8, not JSON, nested too deeply for the parser
    (RecursionError), or not a record :func:`_check_doc` accepts.
    """
    text = read_state_text(path)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlatformError(
            f"state file {path} is not valid JSON ({exc.msg} at line {exc.lineno}); inspect it "
            "and restore the settings by hand, then remove it"
        ) from exc
    except RecursionError:
        raise PlatformError(
            f"state file {path} is not a valid greenckpt node state (JSON nested too deeply); "
            "inspect it and restore the settings by hand, then remove it"
        ) from None
    return _check_doc(doc, path)


# --------------------------------------------------------------------------------------------
# Process identity
# --------------------------------------------------------------------------------------------


_process_start = process_start
_process_alive = process_alive


def _boot_id(root: SysRoot) -> str | None:
    return root.read_or_none(BOOT_ID)


# --------------------------------------------------------------------------------------------
# Pending state and restoration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PendingState:
    """A state file left by a session that did not restore (crash, SIGKILL) or still runs."""

    path: Path
    host: str
    pid: int
    created: str
    root: str
    same_boot: bool
    """False when the node rebooted since: the kernel already reset the settings."""
    alive: bool
    """True when the session that wrote it still runs (then it restores by itself)."""
    policies: tuple[str, ...]
    cstates: int
    """Number of saved cpuidle disable flags."""
    ended: bool = False
    """The session ended but could not restore everything: its process may still run, but no
    session owns the file any more (``alive`` is False), so it may be restored now."""

    def describe(self) -> str:
        """One line saying what the file is and what to do about it."""
        who = f"greenckpt session pid {self.pid} on {self.host}, started {self.created}"
        n, m = len(self.policies), self.cstates
        policies = f"{n} cpufreq polic{'y' if n == 1 else 'ies'}"
        saved = f"{policies} and {m} C-state flag{'' if m == 1 else 's'}"
        if self.alive and self.pid != os.getpid():
            return (
                f"another {who} is changing this node's settings (state file {self.path}); "
                "wait for it to end"
            )
        if not self.same_boot:
            return (
                f"state file {self.path} from {who} predates the last reboot (settings already "
                f"reset); {_RESTORE_HINT} discards it"
            )
        if self.ended:
            return (
                f"the original node settings ({saved}) saved by {who} could not all be restored "
                f"when it ended: state file {self.path}; call {_RESTORE_HINT} before starting a "
                "new session"
            )
        return (
            f"the original node settings ({saved}) saved by {who} were never restored: "
            f"state file {self.path}; call {_RESTORE_HINT} before starting a new session"
        )


@dataclass(frozen=True)
class RestoreReport:
    """What a restoration wrote, what failed, and whether the record was stale."""

    written: tuple[SysfsWrite, ...] = ()
    failures: tuple[str, ...] = ()
    stale: bool = False
    """The state file predated the last reboot and was discarded without writing."""
    state_file: Path | None = None

    @property
    def ok(self) -> bool:
        """True when every saved attribute is back (or there was nothing to restore)."""
        return not self.failures


def _pending_from_doc(path: Path, doc: Mapping[str, Any], root: SysRoot) -> PendingState:
    same_boot = doc.get("boot_id") == _boot_id(root)
    start = doc.get("process_start")
    ended = doc.get("ended") is True
    alive = (
        not ended
        and same_boot
        and doc["host"] == socket.gethostname()
        and _process_alive(int(doc["pid"]), start if isinstance(start, int) else None)
    )
    return PendingState(
        path=path,
        host=str(doc["host"]),
        pid=int(doc["pid"]),
        created=str(doc["created"]),
        root=str(doc["root"]),
        same_boot=same_boot,
        alive=alive,
        policies=tuple(sorted(doc["cpufreq"], key=lambda n: int(n[6:]))),
        cstates=len(doc["cpuidle"]),
        ended=ended,
    )


def pending_state(
    root: SysRoot | None = None, path: str | os.PathLike[str] | None = None
) -> PendingState | None:
    """The state file left for ``root`` (None when there is none): call at every start.

    Raises PlatformError when the file exists but is unreadable or malformed. Also removes the
    temporary files that writers killed mid-write left next to it (every start calls this, and
    nothing else would ever remove them).
    """
    chosen = root if root is not None else SysRoot.default()
    state_path = Path(path) if path is not None else default_state_file(chosen)
    remove_stale_temps(state_path)
    doc = _load_state_file(state_path)
    if doc is None:
        return None
    return _pending_from_doc(state_path, doc, chosen)


def _restore_policy(
    root: SysRoot, name: str, saved: Mapping[str, str | None], written: list[SysfsWrite]
) -> list[str]:
    """Put one policy back in the documented order, writing only what differs.

    Every attribute is attempted, still in that order, even after one fails: a refused governor
    write must not also leave the limits or the EPP changed. Returns the failures, one line each.
    """
    path = f"{CPUFREQ_DIR}/{name}"
    what = "the cpufreq files"
    failures: list[str] = []

    def current(attr: str) -> str:
        try:
            return root.read(f"{path}/{attr}")
        except (OSError, UnicodeDecodeError) as exc:
            raise PlatformError(f"cannot read {root / path}/{attr}: {exc}") from exc

    def attempt(step: Callable[[], None]) -> None:
        try:
            step()
        except PlatformError as exc:
            failures.append(str(exc))

    def put(w: SysfsWrite) -> None:
        written.extend(write_attributes(root, [w], what=what))

    def governor() -> None:
        gov = str(saved["scaling_governor"])
        if current("scaling_governor") != gov:
            put(SysfsWrite(f"{path}/scaling_governor", gov))

    def limits() -> None:
        try:
            cur_min, cur_max = int(current("scaling_min_freq")), int(current("scaling_max_freq"))
        except ValueError as exc:
            raise PlatformError(f"{root / path}: unreadable limits") from exc
        lo, hi = int(str(saved["scaling_min_freq"])), int(str(saved["scaling_max_freq"]))
        for w in limit_writes(path, cur_min, cur_max, lo, hi):
            try:  # the second limit is attempted even when the first is refused
                put(w)
            except PlatformError as exc:
                failures.append(str(exc))

    def setspeed() -> None:
        speed = saved.get("scaling_setspeed")
        if speed is not None and current("scaling_setspeed") != speed:
            put(SysfsWrite(f"{path}/scaling_setspeed", speed))

    def epp() -> None:
        value = saved.get("energy_performance_preference")
        epp_path = f"{path}/energy_performance_preference"
        if value is not None and root.read_or_none(epp_path) != value:
            put(SysfsWrite(epp_path, value))

    for step in (governor, limits, setspeed, epp):
        attempt(step)
    return failures


def _restore_saved(
    root: SysRoot, cpufreq: Mapping[str, Mapping[str, str | None]], cpuidle: Mapping[str, str]
) -> RestoreReport:
    """Restore every saved attribute; go on after a failure and report them all."""
    written: list[SysfsWrite] = []
    failures: list[str] = []
    for name in sorted(cpufreq, key=lambda n: int(n[6:])):
        failures += _restore_policy(root, name, cpufreq[name], written)
    for rel in sorted(cpuidle, key=_idle_sort_key):
        try:
            now = root.read_or_none(rel)
            if now is None:
                raise PlatformError(f"cannot read {root / rel}")
            if now != cpuidle[rel]:
                written += write_attributes(
                    root, [SysfsWrite(rel, cpuidle[rel])], what="the cpuidle files"
                )
        except PlatformError as exc:
            failures.append(str(exc))
    return RestoreReport(tuple(written), tuple(failures))


def _idle_sort_key(rel: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", rel))


def restore_from_state_file(
    root: SysRoot | None = None,
    path: str | os.PathLike[str] | None = None,
    *,
    force: bool = False,
) -> RestoreReport:
    """Put back the settings recorded in a state file (after a crash) and remove the file.

    Nothing to do when the file does not exist. Refuses (PlatformError) when the file belongs
    to another host or root, or to a session that is still running (it restores by itself;
    ``force=True`` overrides, e.g. when that pid was reused by an unrelated process). A file from
    before the last reboot is discarded without writing. When a write fails, the others are still
    attempted, the file is kept for another try, and PlatformError lists the failures.

    Safe to call from many processes at once: the record is read, restored and removed under
    the state file's lock (module docstring), so one restores and the others, once it is done,
    find nothing to restore (an empty report naming the file). Restoring also takes the node
    lock (:func:`node_lock_file`): while a live session of any user or state file controls the
    node, writing these settings under it would undo its changes, so that is refused (no
    ``force`` overrides it: the kernel holds the lock only for a process that runs).
    """
    chosen = root if root is not None else SysRoot.default()
    state_path = Path(path) if path is not None else default_state_file(chosen)
    if _load_state_file(state_path) is None:
        return RestoreReport()
    lock = _acquire_node_lock(chosen, "restoring the node's settings", state_path)
    try:
        with _state_lock(state_path, "restoring the node's settings"):
            return _restore_locked(chosen, state_path, force)
    finally:
        _release_node_lock(lock)


def _restore_locked(chosen: SysRoot, state_path: Path, force: bool) -> RestoreReport:
    """restore_from_state_file while holding the lock: read the record afresh, then act."""
    doc = _load_state_file(state_path)
    if doc is None:  # another process restored it while this one waited for the lock
        return RestoreReport(state_file=state_path)
    pending = _pending_from_doc(state_path, doc, chosen)
    if pending.host != socket.gethostname():
        raise PlatformError(
            f"state file {state_path} was written on host {pending.host}, not "
            f"{socket.gethostname()}: restore it there"
        )
    if pending.root != str(chosen.path.resolve()):
        raise PlatformError(
            f"state file {state_path} records root {pending.root}, not {chosen.path.resolve()}"
        )
    if pending.alive and pending.pid != os.getpid() and not force:
        raise PlatformError(
            f"{pending.describe()}; if pid {pending.pid} is not greenckpt (a reused pid), use "
            f"{_FORCE_HINT}"
        )
    if not pending.same_boot:
        _remove_state_file(state_path)
        return RestoreReport(stale=True, state_file=state_path)
    report = _restore_saved(chosen, doc["cpufreq"], doc["cpuidle"])
    if report.failures:
        raise PlatformError(
            f"could not restore every setting from {state_path} (kept for another try): "
            + "; ".join(report.failures)
        )
    _remove_state_file(state_path)
    return RestoreReport(report.written, (), False, state_path)


# --------------------------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------------------------


class NodeSettings(ClosesOnExit):
    """A session that changes node settings and always puts them back.

    ::

        with NodeSettings(root, state_file=path) as node:
            node.set_frequency(1.2e9)
            node.disable_cstates(deeper_than_s=10e-6)
            ...  # checkpoint
        # original governor, limits, setspeed and C-state flags are back here

    Every change is validated first (nothing written on a bad request), then the originals of the
    attributes it touches are added to the state file, then it is applied. :meth:`restore` puts
    everything back mid-session (e.g. between checkpoint and compute phases). Use a session from
    one thread; signal handlers are installed only when it is entered in the main thread (Python
    delivers signals there), elsewhere restoration happens on exit and exception only.
    """

    def __init__(
        self,
        root: SysRoot | None = None,
        state_file: str | os.PathLike[str] | None = None,
        *,
        signals: Iterable[int] = DEFAULT_SIGNALS,
    ) -> None:
        self.root = root if root is not None else SysRoot.default()
        self.state_file = (
            Path(state_file) if state_file is not None else default_state_file(self.root)
        )
        self.cpufreq = CpufreqController(self.root)
        self.cpuidle = CpuidleController(self.root)
        self._signals = tuple(signals)
        self._previous: dict[int, _Handler] = {}
        self._saved_cpufreq: dict[str, dict[str, str | None]] = {}
        self._saved_cpuidle: dict[str, str] = {}
        self._state_written = False
        self._entered = False
        self._closed_reason: str | None = None
        self._defer_signals = 0
        self._pending_signal: int | None = None
        self._dma: CpuDmaLatency | None = None
        self._created = ""
        self._node_lock: Path | None = None

    # context manager ---------------------------------------------------------------------------

    def __enter__(self) -> Self:
        if self._entered:
            raise PlatformError("a NodeSettings session cannot be entered twice")
        # One session per node, whatever its state file: another one's changes would be saved
        # here as "originals" and put back after it restored (the node left changed).
        lock = _acquire_node_lock(self.root, _SESSION, self.state_file)
        try:
            # Wait for a restorer at work (it holds the lock until the record is gone), look.
            with _state_lock(self.state_file, "starting a session", shared=True):
                pending = pending_state(self.root, self.state_file)
            if pending is not None:
                raise PlatformError(pending.describe())
        except BaseException:
            _release_node_lock(lock)
            raise
        self._node_lock = lock
        self._entered = True
        self._created = datetime.now(UTC).isoformat(timespec="seconds")
        self._install_handlers()
        return self

    def close(self) -> RestoreReport:
        """Restore everything, end the session, put the previous signal handlers back.

        Raises PlatformError when something could not be restored: the state file is kept,
        marked as ended so that ``greenckpt restore`` retries it while this process lives on.
        A signal that arrived while restoring is delivered afterwards.
        """
        try:
            report = self._restore_now()
            marked = self._end_with_failures() if report.failures else True
        finally:
            self._closed_reason = self._closed_reason or "the session has ended"
            self._uninstall_handlers()
            self._release_node_lock()
        self._deliver_pending_signal()
        if report.failures:
            retry = (
                f"{_RESTORE_HINT} retries"
                if marked
                else f"it still names this process: retry with {_FORCE_HINT}"
            )
            raise PlatformError(
                f"could not restore every node setting (state file {self.state_file} kept; "
                f"{retry}): " + "; ".join(report.failures)
            )
        return report

    # changes -----------------------------------------------------------------------------------

    def set_frequency(
        self, hz: float, cpus: Iterable[int] | None = None, method: Method = "auto"
    ) -> CpufreqResult:
        """Request ``hz`` on ``cpus`` (all when None); see CpufreqController.plan_frequency."""
        self._check_open()
        return self._apply_cpufreq(self.cpufreq.plan_frequency(hz, cpus, method))

    def set_governor(self, governor: str, cpus: Iterable[int] | None = None) -> CpufreqResult:
        """Switch the governor of the policies covering ``cpus`` (all when None)."""
        self._check_open()
        return self._apply_cpufreq(self.cpufreq.plan_governor(governor, cpus))

    def disable_cstates(
        self,
        *,
        deeper_than_s: float | None = None,
        names: Iterable[str] | None = None,
        cpus: Iterable[int] | None = None,
    ) -> CstateResult:
        """Disable the C-states deeper than a latency and/or by name, on ``cpus`` (all)."""
        self._check_open()
        plan = self.cpuidle.plan_disable(deeper_than_s=deeper_than_s, names=names, cpus=cpus)
        return self._apply_cstates(plan)

    def enable_cstates(
        self,
        *,
        deeper_than_s: float | None = None,
        names: Iterable[str] | None = None,
        cpus: Iterable[int] | None = None,
    ) -> CstateResult:
        """Enable the selected C-states (every state when no criterion is given)."""
        self._check_open()
        plan = self.cpuidle.plan_enable(deeper_than_s=deeper_than_s, names=names, cpus=cpus)
        return self._apply_cstates(plan)

    def hold_dma_latency(self, latency_s: float) -> None:
        """Hold a ``/dev/cpu_dma_latency`` bound until the session ends (or the next call).

        Nothing is saved for it: the kernel drops the request when the descriptor closes, which
        also happens when the process is killed.
        """
        self._check_open()
        new = CpuDmaLatency(latency_s, self.root)
        new.open()
        old, self._dma = self._dma, new
        if old is not None:
            old.close()

    def restore(self) -> RestoreReport:
        """Put every saved setting back now and keep the session open for further changes.

        A signal that arrived while restoring is handled once everything is back (it then
        closes the session, as any signal does).
        """
        self._check_open()
        try:
            report = self._restore_now()
        finally:
            self._deliver_pending_signal()
        if report.failures:
            raise PlatformError(
                f"could not restore every node setting (state file {self.state_file} kept): "
                + "; ".join(report.failures)
            )
        return report

    # internals ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self._entered:
            raise PlatformError("use NodeSettings as a context manager: 'with NodeSettings(...)'")
        if self._closed_reason is not None:
            raise PlatformError(
                f"node settings were restored ({self._closed_reason}); this session makes no "
                "further changes"
            )

    @contextlib.contextmanager
    def _guarded_write(self, _write: SysfsWrite) -> Iterator[None]:
        """Every write of a change runs inside: check and write form one step.

        Signals are deferred, so no handler can restore (and remove the state file) between
        the check that the session is still open and the write; a signal that arrived is
        handled right after this one write, which it then restores as well.
        """
        try:
            with self._signals_deferred():
                self._check_open()
                yield
        finally:
            self._deliver_pending_signal()

    def _apply_cpufreq(self, plan: CpufreqPlan) -> CpufreqResult:
        touched = {w.path.rsplit("/", 1)[0] for w in plan.writes}
        self._save(policies=[p.name for p in plan.policies if p.path in touched])
        return self.cpufreq.apply(plan, around_each=self._guarded_write)

    def _apply_cstates(self, plan: CstatePlan) -> CstateResult:
        self._save(idle_paths=[w.path for w in plan.writes])
        return self.cpuidle.apply(plan, around_each=self._guarded_write)

    def _save(self, policies: Iterable[str] = (), idle_paths: Iterable[str] = ()) -> None:
        """Record the originals not yet saved, then publish the state file before any write.

        The first publication of a session holds the state file's lock while it reads the
        originals, so it never records values that a restorer is halfway through putting back.
        """
        names = [n for n in policies if n not in self._saved_cpufreq]
        paths = [r for r in idle_paths if r not in self._saved_cpuidle]
        if not names and not paths:
            return
        lock = (
            _state_lock(self.state_file, "saving the node's original settings")
            if not self._state_written
            else contextlib.nullcontext()
        )
        try:
            with lock:
                self._publish(names, paths)
        finally:
            self._deliver_pending_signal()  # handled now, before any write of this change

    def _publish(self, names: Iterable[str], paths: Iterable[str]) -> None:
        new_cpufreq = {name: self._read_policy_originals(name) for name in names}
        new_cpuidle: dict[str, str] = {}
        for rel in paths:
            value = self.root.read_or_none(rel)
            if value is None:
                raise PlatformError(f"cannot read {self.root / rel}; nothing was changed")
            new_cpuidle[rel] = value
        cpufreq = {**self._saved_cpufreq, **new_cpufreq}
        cpuidle = {**self._saved_cpuidle, **new_cpuidle}
        doc = self._document(cpufreq, cpuidle)
        _check_doc(doc, self.state_file)
        # The file on disk and the record in memory must change together: a signal handler
        # that ran in between would restore from (or remove) an out-of-date record. And a
        # session a signal has already restored and closed publishes nothing more.
        with self._signals_deferred():
            self._check_open()
            _write_state_file(self.state_file, doc, exclusive=not self._state_written)
            self._state_written = True
            self._saved_cpufreq, self._saved_cpuidle = cpufreq, cpuidle

    def _read_policy_originals(self, name: str) -> dict[str, str | None]:
        path = f"{CPUFREQ_DIR}/{name}"
        originals: dict[str, str | None] = {}
        for attr in _LIMIT_KEYS:
            value = self.root.read_or_none(f"{path}/{attr}")
            if value is None:
                raise PlatformError(f"cannot read {self.root / path}/{attr}; nothing was changed")
            originals[attr] = value
        speed = self.root.read_or_none(f"{path}/scaling_setspeed")
        is_userspace = originals["scaling_governor"] == USERSPACE
        originals["scaling_setspeed"] = (
            speed if is_userspace and speed and _DIGITS.fullmatch(speed) else None
        )
        originals["energy_performance_preference"] = self.root.read_or_none(
            f"{path}/energy_performance_preference"
        )
        originals["scaling_driver"] = self.root.read_or_none(f"{path}/scaling_driver")
        return originals

    def _end_with_failures(self) -> bool:
        """The session ends with settings it could not restore: mark its state file as ended
        (so ``greenckpt restore`` retries it although this process lives on) and forget the
        record, which from now on belongs to whoever restores it. False when the file could
        not be rewritten (it then still names this process as a live session)."""
        doc = self._document(self._saved_cpufreq, self._saved_cpuidle)
        doc["ended"] = True
        _keep_lock_record(self._node_lock)
        with self._signals_deferred():
            try:
                _write_state_file(self.state_file, doc, exclusive=False)
                marked = True
            except PlatformError:
                marked = False
            self._saved_cpufreq, self._saved_cpuidle = {}, {}
            self._state_written = False
        return marked

    def _document(
        self, cpufreq: Mapping[str, Mapping[str, str | None]], cpuidle: Mapping[str, str]
    ) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "format_version": STATE_VERSION,
            "note": (
                "Original node settings saved by greenckpt before changing them. If this file "
                f"exists, a session ended without restoring them: call {_RESTORE_HINT}."
            ),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "process_start": _process_start(os.getpid()),
            "boot_id": _boot_id(self.root),
            "root": str(self.root.path.resolve()),
            "created": self._created,
            "cpufreq": {k: dict(v) for k, v in cpufreq.items()},
            "cpuidle": dict(cpuidle),
        }

    def _restore_now(self) -> RestoreReport:
        """Close the DMA latency request and restore every saved attribute (idempotent)."""
        with self._signals_deferred():
            if self._dma is not None:
                self._dma.close()
                self._dma = None
            if not self._saved_cpufreq and not self._saved_cpuidle:
                return RestoreReport()
            report = _restore_saved(self.root, self._saved_cpufreq, self._saved_cpuidle)
            if report.failures:
                return RestoreReport(report.written, report.failures, False, self.state_file)
            if self._state_written:
                _remove_state_file(self.state_file)
                self._state_written = False
            self._saved_cpufreq, self._saved_cpuidle = {}, {}
            return RestoreReport(report.written, (), False, self.state_file)

    @contextlib.contextmanager
    def _signals_deferred(self) -> Iterator[None]:
        """While inside, a signal is only recorded; the caller delivers it afterwards."""
        self._defer_signals += 1
        try:
            yield
        finally:
            self._defer_signals -= 1

    # signals -----------------------------------------------------------------------------------

    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in self._signals:
            previous = signal.getsignal(sig)
            if previous == signal.SIG_IGN:  # the process was meant to ignore it: keep it so
                continue
            self._previous[sig] = previous
            signal.signal(sig, self._on_signal)

    def _release_node_lock(self) -> None:
        """The session makes no more changes: let the next one have the node (idempotent)."""
        lock, self._node_lock = self._node_lock, None
        _release_node_lock(lock)

    def _uninstall_handlers(self) -> None:
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """Restore, put the previous handlers back, then let the signal take its usual course."""
        if self._defer_signals:  # restoring or saving: finish, deliver the signal afterwards
            self._pending_signal = signum
            return
        previous = self._previous.get(signum)
        self._closed_reason = f"after {signal.Signals(signum).name}"
        try:
            report = self._restore_now()
            if report.failures:
                marked = self._end_with_failures()
                retry = _RESTORE_HINT if marked else _FORCE_HINT
                print(
                    f"greenckpt: could not restore every node setting after "
                    f"{signal.Signals(signum).name} (state file {self.state_file} kept; retry "
                    f"with {retry}): " + "; ".join(report.failures),
                    file=sys.stderr,
                )
        except Exception as exc:  # never let a restore error hide the signal
            print(f"greenckpt: restoring node settings failed: {exc}", file=sys.stderr)
        finally:
            self._uninstall_handlers()
            self._release_node_lock()
        if callable(previous):
            previous(signum, frame)
        else:  # SIG_DFL (or a handler Python cannot see): die by the signal, status 128 + n
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        self._deliver_pending_signal()

    def _deliver_pending_signal(self) -> None:
        """Send a signal held back during a write again, to the main thread.

        Why the main thread: Python runs signal handlers there only, and a signal raised in
        another thread (the runtime's notification thread, which writes settings for a
        phase) reaches that thread alone — the main thread, blocked in a system call such as
        waiting for the application, would not run the handler until the call returned,
        so ``greenckpt run`` would neither restore nor forward a batch system's SIGTERM.
        """
        if self._defer_signals:
            return
        pending, self._pending_signal = self._pending_signal, None
        if pending is None:
            return
        main = threading.main_thread()
        if threading.current_thread() is main or main.ident is None:
            signal.raise_signal(pending)
        else:
            signal.pthread_kill(main.ident, pending)
