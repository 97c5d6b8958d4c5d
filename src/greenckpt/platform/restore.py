"""Guaranteed restoration of a node's frequency, governor, C-state and other lever settings.

Why: greenckpt changes node-wide kernel settings (cpufreq governor and limits, cpuidle disable
flags) that outlive the process; a job that dies leaving its node pinned at 1.2 GHz, or with
deep C-states disabled, wastes energy or performance for every later job, silently. The same
holds for the uncore frequency, RAPL power limits and GPU clocks (:mod:`~greenckpt.platform.
uncore`, :mod:`~greenckpt.platform.powercap`, :mod:`~greenckpt.platform.gpu`). So, after
GEOPM's save files, every change goes through :class:`NodeSettings`, which refuses to start
while an earlier session's state file exists, saves the original values to a state file
(:mod:`~greenckpt.platform.statefile`) before the first write, holds the node lock
(:mod:`~greenckpt.platform.nodelock`) for its whole life, and restores on return, exception
and SIGTERM/SIGINT/SIGHUP. After a SIGKILL or a crash, :func:`restore_from_state_file`
(:mod:`~greenckpt.platform.recovery`) puts the originals back. Each write of a change runs with
signals deferred, so a signal handler can never restore between the check that the session is
open and the write. This module keeps the session and names the whole public API; the design
(signals and writes, restore order, state file locations, locks): docs/design/restore.md.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Self

from greenckpt.platform.cpufreq import CpufreqController, CpufreqPlan, CpufreqResult, Method
from greenckpt.platform.cpuidle import CpuDmaLatency, CpuidleController, CstatePlan, CstateResult
from greenckpt.platform.lever_state import gpu_module, read_sysfs_originals, restore_levers
from greenckpt.platform.levers import LeverResult
from greenckpt.platform.nodelock import (
    NODE_LOCK,
    SESSION,
    acquire_node_lock,
    keep_lock_record,
    node_lock_file,
    release_node_lock,
    state_lock,
)
from greenckpt.platform.powercap import apply_power_limit, plan_power_limit
from greenckpt.platform.powercap import touched_paths as power_paths
from greenckpt.platform.recovery import (
    PendingState,
    RestoreReport,
    pending_state,
    restore_from_state_file,
    restore_saved,
)
from greenckpt.platform.root import ClosesOnExit, PlatformError, SysRoot
from greenckpt.platform.statefile import (
    BOOT_ID,
    FORCE_HINT,
    RESTORE_HINT,
    STATE_FORMAT,
    STATE_VERSION,
    check_doc,
    default_state_file,
    read_policy_originals,
    remove_state_file,
    state_document,
    write_state_file,
)
from greenckpt.platform.sysfs_writes import SysfsWrite
from greenckpt.platform.uncore import apply_uncore, plan_uncore
from greenckpt.platform.uncore import touched_paths as uncore_paths

__all__ = [
    "BOOT_ID",
    "DEFAULT_SIGNALS",
    "NODE_LOCK",
    "STATE_FORMAT",
    "STATE_VERSION",
    "NodeSettings",
    "PendingState",
    "RestoreReport",
    "default_state_file",
    "node_lock_file",
    "pending_state",
    "restore_from_state_file",
]

DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Signals after which the node is restored: batch systems send SIGTERM before SIGKILL, users
press Ctrl-C, a lost terminal sends SIGHUP."""

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


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
        self._saved_sysfs: dict[str, str] = {}
        self._saved_gpu: dict[str, Any] = {}
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
        lock = acquire_node_lock(self.root, SESSION, self.state_file)
        try:
            # Wait for a restorer at work (it holds the lock until the record is gone), look.
            with state_lock(self.state_file, "starting a session", shared=True):
                pending = pending_state(self.root, self.state_file)
            if pending is not None:
                raise PlatformError(pending.describe())
        except BaseException:
            release_node_lock(lock)
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
            self.release_node_lock()
        self._deliver_pending_signal()
        if report.failures:
            retry = (
                f"{RESTORE_HINT} retries"
                if marked
                else f"it still names this process: retry with {FORCE_HINT}"
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

    def set_uncore(self, khz: int) -> LeverResult:
        """Pin every uncore frequency domain at ``khz`` (min = max; see platform.uncore)."""
        self._check_open()
        plan = plan_uncore(self.root, khz)
        self._save(sysfs_paths=uncore_paths(plan))
        result = apply_uncore(self.root, plan, around_each=self._guarded_write)
        return LeverResult("uncore frequency", f"{khz} kHz", result.notes)

    def set_power_limit(self, watts: float, domain: str = "package") -> LeverResult:
        """Set the long-term RAPL limit of every ``domain`` zone (see platform.powercap)."""
        self._check_open()
        plan = plan_power_limit(self.root, watts, domain)
        self._save(sysfs_paths=power_paths(plan))
        result = apply_power_limit(self.root, plan, around_each=self._guarded_write)
        return LeverResult("power limit", f"{domain} {watts:g} W", result.notes)

    def set_gpu_clocks(self, memory_mhz: int, graphics_mhz: int) -> LeverResult:
        """Set the application clocks of every GPU (see platform.gpu)."""
        return self._gpu_change("set_gpu_clocks", "gpu clocks", memory_mhz, graphics_mhz)

    def set_gpu_power_limit(self, watts: float) -> LeverResult:
        """Set the power management limit of every GPU (see platform.gpu)."""
        return self._gpu_change("set_gpu_power_limit", "gpu power limit", watts)

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

    def _gpu_change(self, function: str, lever: str, *args: float) -> LeverResult:
        """Call the GPU module's ``function``: it checks the request, hands its originals to
        the state file (saved before its first write), then writes; signals wait meanwhile."""
        self._check_open()
        module = gpu_module()
        change = getattr(module, function, None) if module is not None else None
        if change is None:
            raise PlatformError(f"no {lever} control: GPU lever module not available")
        try:
            with self._signals_deferred():
                self._check_open()
                result: LeverResult = change(*args, save=lambda doc: self._save(gpu=doc))
        finally:
            self._deliver_pending_signal()
        return result

    def _save(
        self,
        policies: Iterable[str] = (),
        idle_paths: Iterable[str] = (),
        sysfs_paths: Iterable[str] = (),
        gpu: Mapping[str, Any] | None = None,
    ) -> None:
        """Record the originals not yet saved, then publish the state file before any write.

        The first publication of a session holds the state file's lock while it reads the
        originals, so it never records values that a restorer is halfway through putting back.
        """
        names = [n for n in policies if n not in self._saved_cpufreq]
        paths = [r for r in idle_paths if r not in self._saved_cpuidle]
        files = [r for r in sysfs_paths if r not in self._saved_sysfs]
        new_gpu = dict(gpu) if gpu and not self._saved_gpu else {}  # the first originals hold
        if not names and not paths and not files and not new_gpu:
            return
        lock = (
            state_lock(self.state_file, "saving the node's original settings")
            if not self._state_written
            else contextlib.nullcontext()
        )
        try:
            with lock:
                self._publish(names, paths, files, new_gpu)
        finally:
            self._deliver_pending_signal()  # handled now, before any write of this change

    def _publish(
        self,
        names: Iterable[str],
        paths: Iterable[str],
        files: list[str],
        new_gpu: Mapping[str, Any],
    ) -> None:
        new_cpufreq = {name: read_policy_originals(self.root, name) for name in names}
        new_cpuidle: dict[str, str] = {}
        for rel in paths:
            value = self.root.read_or_none(rel)
            if value is None:
                raise PlatformError(f"cannot read {self.root / rel}; nothing was changed")
            new_cpuidle[rel] = value
        cpufreq = {**self._saved_cpufreq, **new_cpufreq}
        cpuidle = {**self._saved_cpuidle, **new_cpuidle}
        sysfs = {**self._saved_sysfs, **read_sysfs_originals(self.root, files)}
        gpu = {**self._saved_gpu, **new_gpu}
        doc = self._document(cpufreq, cpuidle, sysfs, gpu)
        check_doc(doc, self.state_file)
        # The file on disk and the record in memory must change together: a signal handler
        # that ran in between would restore from (or remove) an out-of-date record. And a
        # session a signal has already restored and closed publishes nothing more.
        with self._signals_deferred():
            self._check_open()
            write_state_file(self.state_file, doc, exclusive=not self._state_written)
            self._state_written = True
            self._saved_cpufreq, self._saved_cpuidle = cpufreq, cpuidle
            self._saved_sysfs, self._saved_gpu = sysfs, gpu

    def _end_with_failures(self) -> bool:
        """The session ends with settings it could not restore: mark its state file as ended
        (so ``greenckpt restore`` retries it although this process lives on) and forget the
        record, which from now on belongs to whoever restores it. False when the file could
        not be rewritten (it then still names this process as a live session)."""
        doc = self._document(
            self._saved_cpufreq, self._saved_cpuidle, self._saved_sysfs, self._saved_gpu
        )
        doc["ended"] = True
        keep_lock_record(self._node_lock)
        with self._signals_deferred():
            try:
                write_state_file(self.state_file, doc, exclusive=False)
                marked = True
            except PlatformError:
                marked = False
            self._forget()
            self._state_written = False
        return marked

    def _document(
        self,
        cpufreq: Mapping[str, Mapping[str, str | None]],
        cpuidle: Mapping[str, str],
        sysfs: Mapping[str, str],
        gpu: Mapping[str, Any],
    ) -> dict[str, Any]:
        return state_document(self.root, self._created, cpufreq, cpuidle, sysfs, gpu)

    def _forget(self) -> None:
        self._saved_cpufreq, self._saved_cpuidle = {}, {}
        self._saved_sysfs, self._saved_gpu = {}, {}

    def _restore_now(self) -> RestoreReport:
        """Close the DMA latency request and restore every saved attribute (idempotent)."""
        with self._signals_deferred():
            if self._dma is not None:
                self._dma.close()
                self._dma = None
            saved = (self._saved_cpufreq, self._saved_cpuidle, self._saved_sysfs, self._saved_gpu)
            if not any(saved):
                return RestoreReport()
            report = restore_saved(self.root, self._saved_cpufreq, self._saved_cpuidle)
            written, failures = restore_levers(self.root, self._saved_sysfs, self._saved_gpu)
            report = RestoreReport((*report.written, *written), (*report.failures, *failures))
            if report.failures:
                return RestoreReport(report.written, report.failures, False, self.state_file)
            if self._state_written:
                remove_state_file(self.state_file)
                self._state_written = False
            self._forget()
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

    def release_node_lock(self) -> None:
        """The session makes no more changes: let the next one have the node (idempotent)."""
        lock, self._node_lock = self._node_lock, None
        release_node_lock(lock)

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
                retry = RESTORE_HINT if marked else FORCE_HINT
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
            self.release_node_lock()
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
