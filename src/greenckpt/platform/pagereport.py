"""Free page reporting: a VM guest handing freed memory back to its host, and holding it off.

Why: with virtio-balloon free page reporting, a guest kernel tells the host which free memory
blocks it may discard; the next use of such a block faults the memory back in from the host.
I/O through the page cache allocates and frees memory constantly (a checkpoint's pages are
cached while written and dropped afterwards), so on such a guest the throughput of the *same*
read depends on whether the memory it lands in was reported in the meantime. Measured on the
2-CPU Firecracker guest this project is developed on (whose kernel reports every freed block at
once, ``min_free_ms = 0``): a 256 MiB write + fsync + read of one file ran at 1.4–1.6 GB/s
write / 2.0–2.6 GB/s read when the read came at once, and at 0.6–0.8 / 0.5–0.8 GB/s when it
came 2 s later, with 220–350 MiB reported in between; with reporting held off for 60 s the
2 s-later runs were back to 1.2–1.5 / 1.7–2.3 GB/s. Such a guest makes any two I/O tools
look different or alike by chance, so benchmarks that compare tools hold reporting off while
they run and say so; a profile made on such a guest describes the guest's memory as much as its
storage, which :func:`read_page_reporting` lets a report point out.

Two knobs exist. Upstream kernels (5.7+) report free blocks of ``page_reporting_order`` pages
2 s after they are freed, with no delay to tune. Some VM kernels (Firecracker's ``-fc``
builds) add ``min_free_ms``: how long a block must stay free before it is reported. Holding
off means raising ``min_free_ms``; where only the upstream knob exists nothing is changed and
the holder says so. The original value is recorded in a state file before it is changed and
written back on close (also on SIGTERM); a holder that died without closing is undone by the
next one, which finds its state file and a dead pid.
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

from greenckpt.platform.root import ClosesOnExit, PlatformError, SysRoot

__all__ = [
    "DEFAULT_HOLD_MS",
    "PARAMS_DIR",
    "PageReporting",
    "PageReportingHold",
    "default_state_file",
    "read_page_reporting",
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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    """Atomically: temporary file, fsync, rename, fsync of the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
            raise ValueError(f"min_free_ms must be > 0 ms, not {min_free_ms}")
        self.root = root if root is not None else SysRoot.default()
        self.state_file = state_file if state_file is not None else default_state_file(self.root)
        self.min_free_ms = min_free_ms
        self.original: int | None = None
        self._previous_handler: Any = None
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
        _write_json(
            self.state_file,
            {"pid": os.getpid(), "min_free_ms": info.min_free_ms, "held_ms": min_free_ms},
        )
        self.original = info.min_free_ms
        self._install_handler()
        try:
            self.root.write(f"{PARAMS_DIR}/min_free_ms", str(min_free_ms))
        except OSError as exc:
            self.close()
            raise PlatformError(f"cannot write {knob}: {exc.strerror or exc}") from None
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
        try:
            doc = json.loads(self.state_file.read_text(encoding="utf-8"))
            pid, original = int(doc["pid"]), int(doc["min_free_ms"])
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PlatformError(
                f"{self.state_file} is unreadable ({exc}); check "
                f"{self.root / PARAMS_DIR}/min_free_ms and remove the file"
            ) from None
        if pid != os.getpid() and _pid_alive(pid):
            raise PlatformError(
                f"free page reporting is already held by process {pid} ({self.state_file}); "
                "wait for it to end"
            )
        try:
            self.root.write(f"{PARAMS_DIR}/min_free_ms", str(original))
        except OSError as exc:
            raise PlatformError(
                f"cannot restore min_free_ms {original} left by process {pid}: "
                f"{exc.strerror or exc}"
            ) from None
        self.state_file.unlink(missing_ok=True)

    def _install_handler(self) -> None:
        """SIGTERM closes the hold, then ends the process as SIGTERM would."""
        if threading.current_thread() is not threading.main_thread():
            return

        def on_term(signum: int, frame: FrameType | None) -> None:
            self.close()
            raise SystemExit(128 + signum)

        self._previous_handler = signal.signal(signal.SIGTERM, on_term)

    def _remove_handler(self) -> None:
        if self._previous_handler is not None:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None
