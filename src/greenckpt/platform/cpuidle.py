"""CPU idle-state (C-state) control through cpuidle sysfs and ``/dev/cpu_dma_latency``.

Why: deep C-states save power while a CPU waits, but waking from them takes tens to hundreds of
microseconds. During a checkpoint the CPUs mostly wait for I/O completions, so the wake-up
latency lands on the I/O path; the profiler measures both ways and the runtime picks one. Two
mechanisms are offered, because they trade off differently:

* **sysfs disable flags** (``cpu*/cpuidle/state*/disable``): per CPU and per state, exact, visible
  to every tool, but they *stay* set if the process dies, which is why
  :mod:`greenckpt.platform.restore` saves them in a state file before the first change.
* **``/dev/cpu_dma_latency``** (PM QoS): write a 32-bit latency bound in microseconds and keep the
  file open; the kernel avoids states whose exit latency exceeds it on every CPU, and drops the
  request when the file is closed — including when the process is killed. Nothing to restore,
  but it is all-or-nothing across CPUs and only by latency, not by name.

States are selected by exit latency ("everything deeper than 10 µs": ``latency`` is in µs in
sysfs, seconds here) or by name (``C6``, ``C1E``); the plan is validated on every CPU before the
first write, and a name no CPU has is refused with the available names (the closest ones when
there are many).
"""

from __future__ import annotations

import errno
import math
import os
import re
import struct
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from greenckpt.platform.cpufreq_info import CPU_DIR
from greenckpt.platform.cpunotation import format_cpus, name_choices
from greenckpt.platform.root import ClosesOnExit, PlatformError, SysRoot
from greenckpt.platform.sysfs_writes import SysfsWrite, WriteGuard, write_attributes

__all__ = [
    "CPUIDLE_DIR",
    "DMA_LATENCY_DEVICE",
    "CpuDmaLatency",
    "CpuidleController",
    "CpuidleInfo",
    "CstatePlan",
    "CstateResult",
    "IdleState",
]

CPUIDLE_DIR = f"{CPU_DIR}/cpuidle"
"""Global cpuidle directory (``current_driver``, ``current_governor``)."""
DMA_LATENCY_DEVICE = "dev/cpu_dma_latency"
"""The PM QoS device (a plain file in fake trees)."""

_CPU_RE = re.compile(r"cpu(\d+)")
_STATE_RE = re.compile(r"state(\d+)")
_MAX_QOS_US = 2**31 - 1


@dataclass(frozen=True)
class IdleState:
    """One idle state of one CPU, as read from sysfs."""

    cpu: int
    index: int
    """``N`` of ``stateN``: 0 is the shallowest (often POLL)."""
    name: str
    desc: str
    latency_s: float
    """Exit latency (sysfs ``latency``, µs, converted to seconds)."""
    residency_s: float | None
    """Target residency: how long an idle period must last for the state to pay off."""
    disabled: bool
    path: str
    """The ``stateN`` directory relative to the root."""

    @property
    def disable_path(self) -> str:
        """The ``disable`` attribute of this state (relative to the root)."""
        return f"{self.path}/disable"


@dataclass(frozen=True)
class CpuidleInfo:
    """The idle driver and every CPU's idle states."""

    root: str
    driver: str | None
    governor: str | None
    states: tuple[IdleState, ...]

    @property
    def cpus(self) -> tuple[int, ...]:
        """CPUs that have idle states."""
        return tuple(sorted({s.cpu for s in self.states}))

    def for_cpu(self, cpu: int) -> tuple[IdleState, ...]:
        """The states of one CPU, shallowest first."""
        return tuple(s for s in self.states if s.cpu == cpu)

    def names(self) -> tuple[str, ...]:
        """Distinct state names in index order (the first CPU that has a name decides)."""
        seen: dict[str, int] = {}
        for s in self.states:
            seen.setdefault(s.name, s.index)
        return tuple(sorted(seen, key=lambda n: seen[n]))


@dataclass(frozen=True)
class CstatePlan:
    """A validated request: the ``disable`` writes to make and the states they touch."""

    action: str
    states: tuple[IdleState, ...]
    """Every selected state (as before the change), including those already as requested."""
    writes: tuple[SysfsWrite, ...]
    """Only the states whose flag changes."""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CstateResult:
    """What was written and the selected states as read back afterwards."""

    plan: CstatePlan
    written: tuple[SysfsWrite, ...]
    states: tuple[IdleState, ...]


def _read_state(root: SysRoot, cpu: int, index: int, path: str) -> IdleState:
    latency = root.read_int_or_none(f"{path}/latency")
    if latency is None:
        raise PlatformError(f"cannot read the exit latency of {root / path}")
    residency = root.read_int_or_none(f"{path}/residency")
    return IdleState(
        cpu=cpu,
        index=index,
        name=root.read_or_none(f"{path}/name") or f"state{index}",
        desc=root.read_or_none(f"{path}/desc") or "",
        latency_s=latency * 1e-6,
        residency_s=None if residency is None else residency * 1e-6,
        disabled=(root.read_int_or_none(f"{path}/disable") or 0) != 0,
        path=path,
    )


def _numbered(base: os.PathLike[str] | str, pattern: re.Pattern[str]) -> list[int]:
    try:
        names = os.listdir(base)
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := pattern.fullmatch(n)))


class CpuidleController:
    """Lists idle states and plans/applies disabling or enabling them on a set of CPUs."""

    def __init__(self, root: SysRoot | None = None) -> None:
        self.root = root if root is not None else SysRoot.default()

    def available(self) -> bool:
        """True when at least one CPU has a ``cpuidle/state*`` directory."""
        return any(
            _numbered(self.root / f"{CPU_DIR}/cpu{cpu}/cpuidle", _STATE_RE)
            for cpu in _numbered(self.root / CPU_DIR, _CPU_RE)
        )

    def detect(self) -> CpuidleInfo:
        """Every CPU's idle states; PlatformError when there are none."""
        root = self.root
        states: list[IdleState] = []
        for cpu in _numbered(root / CPU_DIR, _CPU_RE):
            base = f"{CPU_DIR}/cpu{cpu}/cpuidle"
            for index in _numbered(root / base, _STATE_RE):
                states.append(_read_state(root, cpu, index, f"{base}/state{index}"))
        driver = root.read_or_none(f"{CPUIDLE_DIR}/current_driver")
        if not states:
            raise PlatformError(
                "cpuidle not available: no idle states under "
                f"{root / CPU_DIR}/cpu*/cpuidle (driver: {driver or 'none'})"
            )
        governor = root.read_or_none(f"{CPUIDLE_DIR}/current_governor") or root.read_or_none(
            f"{CPUIDLE_DIR}/current_governor_ro"
        )
        return CpuidleInfo(str(root.path), driver, governor, tuple(states))

    def _select(
        self,
        info: CpuidleInfo,
        *,
        deeper_than_s: float | None,
        names: Iterable[str] | None,
        cpus: Iterable[int] | None,
        require_criterion: bool,
    ) -> tuple[list[IdleState], str]:
        wanted_names = None if names is None else list(dict.fromkeys(names))
        if require_criterion and deeper_than_s is None and not wanted_names:
            raise PlatformError("say which C-states: deeper_than_s (a latency) and/or names")
        if deeper_than_s is not None and (not math.isfinite(deeper_than_s) or deeper_than_s < 0):
            raise PlatformError(
                f"a latency must be a non-negative number of seconds, got {deeper_than_s!r}"
            )
        if wanted_names is not None:
            _check_names(info, wanted_names)
        chosen_cpus = _check_cpus(info, cpus)
        # Compare in whole-ish microseconds so 10e-6 s selects "> 10 µs" exactly.
        threshold_us = None if deeper_than_s is None else round(deeper_than_s * 1e6, 3)
        select_all = not require_criterion and deeper_than_s is None and wanted_names is None
        chosen: list[IdleState] = []
        for s in info.states:
            if s.cpu not in chosen_cpus:
                continue
            by_latency = threshold_us is not None and round(s.latency_s * 1e6, 3) > threshold_us
            by_name = wanted_names is not None and s.name in wanted_names
            if select_all or by_latency or by_name:
                chosen.append(s)
        parts = []
        if threshold_us is not None:
            parts.append(f"deeper than {threshold_us:g} µs")
        if wanted_names:
            parts.append("named " + ", ".join(wanted_names))
        what = " or ".join(parts) if parts else "all"
        return chosen, f"{what} on CPUs {format_cpus(chosen_cpus)}"

    def plan_disable(
        self,
        *,
        deeper_than_s: float | None = None,
        names: Iterable[str] | None = None,
        cpus: Iterable[int] | None = None,
    ) -> CstatePlan:
        """Plan disabling the states whose exit latency exceeds ``deeper_than_s`` and/or the
        states called ``names``, on ``cpus`` (every CPU when None)."""
        info = self.detect()
        chosen, what = self._select(
            info, deeper_than_s=deeper_than_s, names=names, cpus=cpus, require_criterion=True
        )
        notes: list[str] = []
        if not chosen:
            notes.append(f"no C-state matches ({what}): nothing to disable")
        writes = tuple(SysfsWrite(s.disable_path, "1") for s in chosen if not s.disabled)
        return CstatePlan(f"disable C-states {what}", tuple(chosen), writes, tuple(notes))

    def plan_enable(
        self,
        *,
        deeper_than_s: float | None = None,
        names: Iterable[str] | None = None,
        cpus: Iterable[int] | None = None,
    ) -> CstatePlan:
        """Plan enabling the selected states (every state when no criterion is given)."""
        info = self.detect()
        chosen, what = self._select(
            info, deeper_than_s=deeper_than_s, names=names, cpus=cpus, require_criterion=False
        )
        writes = tuple(SysfsWrite(s.disable_path, "0") for s in chosen if s.disabled)
        return CstatePlan(f"enable C-states {what}", tuple(chosen), writes)

    def apply(self, plan: CstatePlan, *, around_each: WriteGuard | None = None) -> CstateResult:
        """Write a plan in order (each write inside ``around_each``, see
        :func:`~greenckpt.platform.cpufreq.write_attributes`) and read the selected states back."""
        written = write_attributes(
            self.root, plan.writes, what="the cpuidle files", around_each=around_each
        )
        states = tuple(_read_state(self.root, s.cpu, s.index, s.path) for s in plan.states)
        return CstateResult(plan, tuple(written), states)

    def disable(
        self,
        *,
        deeper_than_s: float | None = None,
        names: Iterable[str] | None = None,
        cpus: Iterable[int] | None = None,
    ) -> CstateResult:
        """Plan and apply :meth:`plan_disable` (no restoration: use NodeSettings for that)."""
        return self.apply(self.plan_disable(deeper_than_s=deeper_than_s, names=names, cpus=cpus))

    def enable(
        self,
        *,
        deeper_than_s: float | None = None,
        names: Iterable[str] | None = None,
        cpus: Iterable[int] | None = None,
    ) -> CstateResult:
        """Plan and apply :meth:`plan_enable` (no restoration: use NodeSettings for that)."""
        return self.apply(self.plan_enable(deeper_than_s=deeper_than_s, names=names, cpus=cpus))


def _check_names(info: CpuidleInfo, wanted_names: list[str]) -> None:
    """Refuse names no CPU has, with the available names (the closest ones when many)."""
    known = info.names()
    unknown = [n for n in wanted_names if n not in known]
    hints = {n: name_choices(n, known) for n in unknown}
    if len(set(hints.values())) == 1:  # few states: one list serves every name
        raise PlatformError(
            f"no C-state named {', '.join(map(repr, unknown))}: {hints[unknown[0]]}"
        )
    if hints:  # many states: the closest ones for each unknown name
        raise PlatformError(
            "no C-state named " + "; ".join(f"{n!r}: {h}" for n, h in hints.items())
        )


def _check_cpus(info: CpuidleInfo, cpus: Iterable[int] | None) -> set[int]:
    """The CPUs asked for (all with idle states when None); refuse ones without idle states."""
    if cpus is None:
        return set(info.cpus)
    chosen_cpus = set(cpus)
    missing = sorted(chosen_cpus - set(info.cpus))
    if missing:
        raise PlatformError(
            f"CPU {format_cpus(missing)} has no idle states (offline or nonexistent): "
            f"CPUs with idle states are {format_cpus(info.cpus)}"
        )
    return chosen_cpus


class CpuDmaLatency(ClosesOnExit):
    """Hold a PM QoS CPU latency bound through ``/dev/cpu_dma_latency`` while open.

    The request lives exactly as long as the file descriptor: the kernel drops it when the file
    is closed, by :meth:`close`, by leaving the ``with`` block, or by the process dying (even by
    SIGKILL). That is why this mechanism needs no state file. The value is written as a native
    32-bit integer in microseconds, the format the device documents; 0 keeps every CPU out of
    all but the shallowest state.
    """

    def __init__(self, latency_s: float, root: SysRoot | None = None) -> None:
        if not math.isfinite(latency_s) or latency_s < 0:
            raise PlatformError(
                f"a latency must be a non-negative number of seconds, got {latency_s!r}"
            )
        latency_us = round(latency_s * 1e6)
        if latency_us > _MAX_QOS_US:
            raise PlatformError(
                f"latency {latency_s!r} s exceeds the 32-bit microsecond range of "
                f"{DMA_LATENCY_DEVICE}"
            )
        self.root = root if root is not None else SysRoot.default()
        self.latency_us = latency_us
        self._fd: int | None = None

    @property
    def active(self) -> bool:
        """True while the request is held."""
        return self._fd is not None

    def open(self) -> None:
        """Open the device and write the bound; idempotent while already open."""
        if self._fd is not None:
            return
        path = self.root / DMA_LATENCY_DEVICE
        try:
            # Never through a link out of a user's tree; a device is not truncated.
            fd = self.root.open_for_write(DMA_LATENCY_DEVICE, truncate=False)
        except FileNotFoundError as exc:
            raise PlatformError(
                f"{path} not available: the kernel offers no PM QoS latency device"
            ) from exc
        except PermissionError as exc:
            raise PlatformError(
                f"cannot open {path}: permission denied; root (or write access to it) is needed"
            ) from exc
        except OSError as exc:
            raise PlatformError(f"cannot open {path}: {exc.strerror or exc}") from exc
        try:
            os.write(fd, struct.pack("=i", self.latency_us))
        except OSError as exc:
            os.close(fd)
            raise PlatformError(f"writing to {path} failed: {exc.strerror or exc}") from exc
        self._fd = fd

    def close(self) -> None:
        """Close the device, which drops the request; idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError as exc:  # EBADF after fork/exec games: nothing left to drop
                if exc.errno != errno.EBADF:
                    print(f"greenckpt: closing {DMA_LATENCY_DEVICE}: {exc}", file=sys.stderr)

    def __enter__(self) -> CpuDmaLatency:
        self.open()
        return self
