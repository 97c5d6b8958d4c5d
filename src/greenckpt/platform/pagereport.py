"""Free page reporting: a VM guest handing freed memory back to its host, and holding it off.

Why: with virtio-balloon free page reporting, a guest kernel tells the host which free memory
blocks it may discard, and their next use faults them back in from the host. I/O through the
page cache allocates and frees memory constantly, so on such a guest the throughput of the
*same* read depends on whether its memory was reported in the meantime (measured: about half,
see docs/design/restore.md). Benchmarks that compare tools hold reporting off and say so, and
:func:`read_page_reporting` lets a report point out that a profile describes such a guest.
Holding off raises ``min_free_ms`` (VM kernels that have it); where only the upstream knob
exists nothing is changed and the holder says so. The original value is recorded in a state
file before it is changed and written back on close (also on SIGTERM and SIGHUP); a holder
that died without closing is undone like the node's other settings (``greenckpt restore``,
the start of every command, the next holder). Records name their holder by pid *and*
process start time, since pids are reused.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from greenckpt.durable import fsync_directory, write_atomic
from greenckpt.errors import InvalidValueError
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
    "DEFAULT_HOLD_MS",
    "PARAMS_DIR",
    "HoldRecord",
    "PageReporting",
    "PageReportingHold",
    "default_state_file",
    "pending_page_reporting",
    "read_page_reporting",
    "restore_page_reporting",
]

PARAMS_DIR = "sys/module/page_reporting/parameters"
DEFAULT_HOLD_MS = 60_000
"""Long enough that memory freed by one operation of a benchmark is reused by the next one
before it is reported (operations take well under a minute each)."""


@dataclass(frozen=True)
class PageReporting:
    """What a node's kernel does with free memory, as its sysfs says."""

    present: bool
    """The page_reporting module is there (a virtio-balloon guest that can report)."""
    order: int | None
    """Blocks of ``2**order`` pages are reported (``page_reporting_order``)."""
    min_free_ms: int | None
    """How long a block stays free before it is reported; None where the kernel has no knob
    (upstream: a fixed 2 s)."""
    reported_kib: int | None
    """Memory reported to the host since boot, where the kernel counts it."""

    def describe(self) -> str:
        """One line for a benchmark's or probe's header."""
        if not self.present:
            return "no free page reporting (freed memory stays with this kernel)"
        if self.min_free_ms is None:
            delay = "2 s after it is freed (upstream kernel, no delay knob)"
        elif self.min_free_ms == 0:
            delay = "as soon as it is freed (min_free_ms 0)"
        else:
            delay = f"after it stays free {self.min_free_ms} ms (min_free_ms)"
        block = "" if self.order is None else f" in blocks of 2^{self.order} pages"
        return f"free page reporting on: freed memory goes back to the host{block} {delay}"


def read_page_reporting(root: SysRoot | None = None) -> PageReporting:
    """The node's free page reporting settings (all None/False where absent)."""
    r = root if root is not None else SysRoot.default()
    present = (r / PARAMS_DIR).is_dir()
    return PageReporting(
        present=present,
        order=r.read_int_or_none(f"{PARAMS_DIR}/page_reporting_order"),
        min_free_ms=r.read_int_or_none(f"{PARAMS_DIR}/min_free_ms"),
        reported_kib=r.read_int_or_none(f"{PARAMS_DIR}/reported_kib"),
    )


def default_state_file(root: SysRoot) -> Path:
    """``/run/greenckpt/page-reporting.json`` for the real root (only root can change the knob;
    /run is node-local and cleared with the setting at reboot); inside a fake root, the same
    path under it."""
    return root / "run/greenckpt/page-reporting.json"


HOLD_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals after which a holder puts the knob back before the process ends: the batch
system's SIGTERM and a lost terminal's SIGHUP (SIGINT raises KeyboardInterrupt, which leaves
the ``with`` block and closes the hold)."""


@dataclass(frozen=True)
class HoldRecord:
    """The state file of a holder: what it changed and whether it still runs."""

    path: Path
    pid: int
    process_start: int | None
    """The holder's start time (clock ticks since boot); None in files written before it was
    recorded, whose liveness then rests on the pid alone."""
    original: int
    """The ``min_free_ms`` to put back."""
    held_ms: int | None
    alive: bool
    """The holder still runs (same pid and start time): it restores by itself."""

    def describe(self) -> str:
        """One line: who holds (or held) reporting off and what would be restored."""
        state = "still runs" if self.alive else "has ended"
        return (
            f"free page reporting held off (min_free_ms {self.held_ms}) by process {self.pid}, "
            f"which {state}; original min_free_ms {self.original} ({self.path})"
        )


def _load_record(path: Path) -> HoldRecord | None:
    """The record at ``path`` (None when there is none); PlatformError for anything else.

    Refuses non-regular files (a FIFO would block), oversized and deeply nested JSON, and
    values out of range, each in one line, so that no state file can stop a command's start.
    """

    def bad(why: str) -> PlatformError:
        return PlatformError(
            f"{path} is not a valid page-reporting record ({why}); check "
            f"min_free_ms under /{PARAMS_DIR} and remove the file"
        )

    text = read_state_text(path)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise bad(f"not JSON: {exc}") from None
    except RecursionError:
        raise bad("JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise bad("not a JSON object")
    pid, original, held, start = (
        doc.get(k) for k in ("pid", "min_free_ms", "held_ms", "process_start")
    )

    def is_int(v: object, hi: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < hi

    if not (is_int(pid, 2**31) and pid):
        raise bad("'pid' missing or out of range")
    if not is_int(original, 2**32):
        raise bad("'min_free_ms' missing or out of range")
    if held is not None and not is_int(held, 2**32):
        raise bad("'held_ms' out of range")
    if start is not None and not is_int(start, 2**63):
        raise bad("'process_start' out of range")
    assert isinstance(pid, int) and isinstance(original, int)  # checked above, for mypy
    return HoldRecord(path, pid, start, original, held, process_alive(pid, start))


def pending_page_reporting(
    root: SysRoot | None = None, state_file: Path | None = None
) -> HoldRecord | None:
    """The record a holder left for ``root`` (None when there is none); also removes the
    temporary files of writers killed mid-write. Raises PlatformError for a malformed file.

    None as well when this user may not read the record (root's, in root's 0700 state
    directory): only root can write the knob back, and root's next start of greenckpt does;
    a warning at every command of every other user would help no one.
    """
    r = root if root is not None else SysRoot.default()
    path = state_file if state_file is not None else default_state_file(r)
    remove_stale_temps(path)
    try:
        os.stat(path)
    except PermissionError:
        return None
    except OSError:
        pass  # absent (None below) or unreadable (the loader says why)
    else:
        if not os.access(path, os.R_OK):
            return None
    return _load_record(path)


def restore_page_reporting(
    root: SysRoot | None = None, state_file: Path | None = None, *, force: bool = False
) -> HoldRecord | None:
    """Put back the ``min_free_ms`` that a holder which died left raised, and remove its
    record; return that record (None when there was none).

    Called by ``greenckpt restore`` and at the start of every command, like the node's other
    settings. A holder that still runs (same pid *and* start time) is refused with a
    PlatformError (it restores by itself; ``force=True`` overrides); so is a failed write, the
    record then kept for another try.
    """
    r = root if root is not None else SysRoot.default()
    path = state_file if state_file is not None else default_state_file(r)
    record = pending_page_reporting(r, path)
    if record is None:
        return None
    if record.alive and record.pid != os.getpid() and not force:
        raise PlatformError(
            f"free page reporting is held off by process {record.pid}, which still runs "
            f"({path}); wait for it to end (or force it if that pid is not greenckpt)"
        )
    try:
        r.write(f"{PARAMS_DIR}/min_free_ms", str(record.original))
    except (OSError, PlatformError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise PlatformError(
            f"cannot restore min_free_ms {record.original} left by process {record.pid} "
            f"({path} kept): {why}"
        ) from None
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise PlatformError(
            f"restored min_free_ms {record.original}, but cannot remove {path}: "
            f"{exc.strerror or exc}"
        ) from None
    return record


def _write_json(path: Path, doc: dict[str, Any], root: SysRoot | None = None) -> None:
    """Atomically: temporary file, fsync, rename, fsync of the directory.

    The temporary name is predictable, so it is created exclusively and never through a link.
    ``root`` (a state file inside a user-supplied tree): its directory must resolve inside
    that tree, so a link in the tree cannot make root write the file elsewhere.
    """

    def check_inside() -> None:
        if root is not None and not root.is_inside(path.parent):
            raise PlatformError(
                f"refusing to write {path}: its directory resolves outside the tree "
                f"{root.path} (a symbolic link leaves the tree); nothing was changed"
            )

    check_inside()  # before creating any directory (realpath resolves the existing part)
    path.parent.mkdir(parents=True, exist_ok=True)
    check_inside()
    try:
        write_atomic(path, json.dumps(doc), mode=0o644, temp="pid", sync_directory=False)
    except OSError as exc:
        raise PlatformError(
            f"cannot write {path}: {exc.strerror or exc}; nothing was changed"
        ) from None
    fsync_directory(path.parent)  # outside: the file is in place, "nothing changed" is untrue


class PageReportingHold(ClosesOnExit):
    """Hold free page reporting off (``min_free_ms`` raised) until :meth:`close`.

    ``with PageReportingHold(min_free_ms=60000) as hold: print(hold.note)``. Nothing is
    changed where reporting is absent, where the kernel has no ``min_free_ms`` knob, or where
    it is already at least ``min_free_ms``; :attr:`note` says which. A knob that cannot be
    written (not root) raises :class:`PlatformError` before anything is changed.
    """

    def __init__(
        self,
        min_free_ms: int = DEFAULT_HOLD_MS,
        *,
        root: SysRoot | None = None,
        state_file: Path | None = None,
    ) -> None:
        if min_free_ms <= 0:
            raise InvalidValueError(f"min_free_ms must be > 0 ms, not {min_free_ms}")
        self.root = root if root is not None else SysRoot.default()
        self.state_file = state_file if state_file is not None else default_state_file(self.root)
        self.min_free_ms = min_free_ms
        self.original: int | None = None
        self._previous_handlers: dict[int, Any] = {}
        self._in_tree = state_file is None and not self.root.is_real
        self._undo_stale()
        info = read_page_reporting(self.root)
        self.before = info
        if not info.present:
            self.note = info.describe()
            return
        if info.min_free_ms is None:
            self.note = info.describe() + "; not held: nothing to change on this kernel"
            return
        if info.min_free_ms >= min_free_ms:
            self.note = info.describe() + "; already held off long enough, left as it is"
            return
        knob = self.root / f"{PARAMS_DIR}/min_free_ms"
        if not os.access(knob, os.W_OK):
            raise PlatformError(
                f"{knob} is not writable: run as root to hold free page reporting off, or "
                "leave it as it is"
            )
        doc = {
            "format": "greenckpt-page-reporting",
            "pid": os.getpid(),
            "process_start": process_start(os.getpid()),
            "min_free_ms": info.min_free_ms,
            "held_ms": min_free_ms,
        }
        _write_json(self.state_file, doc, self.root if self._in_tree else None)
        self.original = info.min_free_ms
        self._install_handler()
        try:
            self.root.write(f"{PARAMS_DIR}/min_free_ms", str(min_free_ms))
        except (OSError, PlatformError) as exc:
            self.close()
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise PlatformError(f"cannot write {knob}: {why}") from None
        self.note = (
            f"{info.describe()}; held off for this run: min_free_ms {info.min_free_ms} -> "
            f"{min_free_ms} (restored at the end)"
        )

    @property
    def held(self) -> bool:
        """Whether this holder changed the knob and has not put it back yet."""
        return self.original is not None

    def close(self) -> None:
        """Put the original ``min_free_ms`` back and remove the state file (idempotent)."""
        if self.original is None:
            return
        original, self.original = self.original, None
        try:
            self.root.write(f"{PARAMS_DIR}/min_free_ms", str(original))
        finally:
            self._remove_handler()
        self.state_file.unlink(missing_ok=True)

    def _undo_stale(self) -> None:
        """A state file left by a holder that died: put its original back; a live one: refuse
        (two holders would restore each other's values)."""
        record = pending_page_reporting(self.root, self.state_file)
        if record is not None and record.alive and record.pid != os.getpid():
            raise PlatformError(
                f"free page reporting is already held by process {record.pid} "
                f"({self.state_file}); wait for it to end"
            )
        restore_page_reporting(self.root, self.state_file)

    def _install_handler(self) -> None:
        """SIGTERM and SIGHUP close the hold, then end the process as they would."""
        if threading.current_thread() is not threading.main_thread():
            return

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.close()
            raise SystemExit(128 + signum)

        for sig in HOLD_SIGNALS:
            previous = signal.getsignal(sig)
            if previous == signal.SIG_IGN:  # the process was meant to ignore it: keep it so
                continue
            self._previous_handlers[sig] = signal.signal(sig, on_signal)

    def _remove_handler(self) -> None:
        previous, self._previous_handlers = self._previous_handlers, {}
        if threading.current_thread() is threading.main_thread():
            for sig, handler in previous.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)
