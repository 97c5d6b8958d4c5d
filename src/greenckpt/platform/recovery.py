"""Putting a node's saved settings back: after a session, and after a crash from its state file.

Why: the kernel settings greenckpt changes outlive the process, so a session restores them when
it ends, and :func:`restore_from_state_file` (``greenckpt restore``, and every command at its
start after :func:`pending_state` reports a file) restores them after SIGKILL, an OOM kill or
a crash. Both write through :func:`restore_saved`, in one order: per cpufreq policy the
governor, then the limits in the safe order from the current values, then ``scaling_setspeed``,
then the EPP; then the cpuidle flags, writing only what differs and going on after a failure;
then the uncore, power-limit and GPU originals (:func:`~greenckpt.platform.lever_state.
restore_levers`).
Why this order and why the locks: docs/design/restore.md.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greenckpt.platform.lever_state import restore_levers
from greenckpt.platform.nodelock import acquire_node_lock, release_node_lock, state_lock
from greenckpt.platform.root import PlatformError, SysRoot, process_alive, remove_stale_temps
from greenckpt.platform.statefile import (
    FORCE_HINT,
    RESTORE_HINT,
    boot_id,
    default_state_file,
    load_state_file,
    remove_state_file,
)
from greenckpt.platform.sysfs_writes import SysfsWrite, write_attributes

__all__ = [
    "PendingState",
    "RestoreReport",
    "pending_state",
    "restore_from_state_file",
    "restore_saved",
]


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
    lever_files: int = 0
    """Number of saved uncore and power-limit files (the ``sysfs`` section)."""
    gpu: bool = False
    """True when GPU settings were saved (the ``gpu`` section)."""

    def describe(self) -> str:
        """One line saying what the file is and what to do about it."""
        who = f"greenckpt session pid {self.pid} on {self.host}, started {self.created}"
        n, m = len(self.policies), self.cstates
        policies = f"{n} cpufreq polic{'y' if n == 1 else 'ies'}"
        saved = f"{policies} and {m} C-state flag{'' if m == 1 else 's'}"
        if self.lever_files:
            saved += f", {self.lever_files} uncore/power-limit file"
            saved += "" if self.lever_files == 1 else "s"
        if self.gpu:
            saved += ", GPU settings"
        if self.alive and self.pid != os.getpid():
            return (
                f"another {who} is changing this node's settings (state file {self.path}); "
                "wait for it to end"
            )
        if not self.same_boot:
            return (
                f"state file {self.path} from {who} predates the last reboot (settings already "
                f"reset); {RESTORE_HINT} discards it"
            )
        if self.ended:
            return (
                f"the original node settings ({saved}) saved by {who} could not all be restored "
                f"when it ended: state file {self.path}; call {RESTORE_HINT} before starting a "
                "new session"
            )
        return (
            f"the original node settings ({saved}) saved by {who} were never restored: "
            f"state file {self.path}; call {RESTORE_HINT} before starting a new session"
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
    same_boot = doc.get("boot_id") == boot_id(root)
    start = doc.get("process_start")
    ended = doc.get("ended") is True
    alive = (
        not ended
        and same_boot
        and doc["host"] == socket.gethostname()
        and process_alive(int(doc["pid"]), start if isinstance(start, int) else None)
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
        lever_files=len(doc.get("sysfs", {})),
        gpu=bool(doc.get("gpu")),
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
    doc = load_state_file(state_path)
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
    # Imported here: every command's start imports this module to look for a state file, and
    # only a restore needs the cpufreq modules (~25 ms of imports).
    from greenckpt.platform.cpufreq import limit_writes  # noqa: PLC0415
    from greenckpt.platform.cpufreq_info import CPUFREQ_DIR  # noqa: PLC0415

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


def restore_saved(
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
    the state file's lock (:func:`~greenckpt.platform.nodelock.state_lock`), so one restores
    and the others, once it is done, find nothing to restore (an empty report naming the
    file). Restoring also takes the node lock
    (:func:`~greenckpt.platform.nodelock.node_lock_file`): while a live session of any user or
    state file controls the node, writing these settings under it would undo its changes, so
    that is refused (no ``force`` overrides it: the kernel holds the lock only for a process
    that runs).
    """
    chosen = root if root is not None else SysRoot.default()
    state_path = Path(path) if path is not None else default_state_file(chosen)
    if load_state_file(state_path) is None:
        return RestoreReport()
    lock = acquire_node_lock(chosen, "restoring the node's settings", state_path)
    try:
        with state_lock(state_path, "restoring the node's settings"):
            return _restore_locked(chosen, state_path, force)
    finally:
        release_node_lock(lock)


def _restore_locked(chosen: SysRoot, state_path: Path, force: bool) -> RestoreReport:
    """restore_from_state_file while holding the lock: read the record afresh, then act."""
    doc = load_state_file(state_path)
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
            f"{FORCE_HINT}"
        )
    if not pending.same_boot:
        remove_state_file(state_path)
        return RestoreReport(stale=True, state_file=state_path)
    report = restore_saved(chosen, doc["cpufreq"], doc["cpuidle"])
    lever_written, lever_failures = restore_levers(chosen, doc.get("sysfs", {}), doc.get("gpu"))
    report = RestoreReport((*report.written, *lever_written), (*report.failures, *lever_failures))
    if report.failures:
        raise PlatformError(
            f"could not restore every setting from {state_path} (kept for another try): "
            + "; ".join(report.failures)
        )
    remove_state_file(state_path)
    return RestoreReport(report.written, (), False, state_path)
