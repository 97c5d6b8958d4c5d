"""The power of waiting ranks: measured per CPU setting, C-state setting and wait mode.

Why: a profile point's power is the node's with ``n`` I/O processes busy and every other core
idle, but during a phase with ``n`` I/O processes of ``R`` ranks the other ``R − n`` ranks wait,
and how much they draw depends on how they wait: politely (the checkpoint library sleeps
between tests) or spinning (``GREENCKPT_WAIT=spin``, or a native code in its MPI's waits). The
planner adds ``(R − n) × w`` to each point's power (docs/model.md, section 4), so the profile
measures ``w``.

How: ``k`` waiter processes (default the CPUs this process may use, at most
:data:`MAX_WAITING_RANKS`) wait on a stand-in request with the checkpoint library's own wait
loop (:mod:`greenckpt.profile.waiters`), for each mode, at each CPU setting, over a metered
window taken with the sampler's marks as a point's I/O window is; the node's idle power at the
same setting, metered just before, is subtracted, and the rest divided by ``k``. The window is
split into :data:`WAITING_WINDOWS` sub-windows: the median is the figure, the range its
spread. The CPU time the waiters used comes from the OS (``getrusage`` in each waiter around
its wait), per waiting rank as a fraction of one core. What the stand-in leaves out:
docs/design/profiler.md.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Protocol

from greenckpt.errors import GreenckptError
from greenckpt.optimize.profile_data import PowerSource
from greenckpt.optimize.waiting import WAIT_MODES, WaitingPower, WaitMode
from greenckpt.platform.root import ClosesOnExit
from greenckpt.platform.sampler import Mark
from greenckpt.profile.grid import Cell, CpuSetting, SweepSpec
from greenckpt.profile.power import PowerChoice
from greenckpt.profile.waiters import WaitLoop, waiter_main

__all__ = [
    "DEFAULT_WAITING_SECONDS",
    "MAX_WAITING_RANKS",
    "WAITING_TAIL",
    "WAITING_WINDOWS",
    "WAIT_ENV",
    "ProcessWaiters",
    "Waiters",
    "WaitersError",
    "WaitingRun",
    "default_waiting_ranks",
    "measure_waiting",
    "waiting_run",
]

WAIT_ENV = "GREENCKPT_WAIT"
"""The variable the checkpoint library's wait loop reads its mode from
(:data:`greenckpt.ckpt.wait.WAIT_ENV`, which this layer may not import; a test checks they
agree)."""
DEFAULT_WAITING_SECONDS = 2.0
"""``greenckpt profile run``'s window per CPU setting and mode (``--waiting-seconds``)."""
MAX_WAITING_RANKS = 64
"""At most this many waiters: the figure is per rank, and more Python processes would only
cost memory and start-up time (each is an interpreter)."""
WAITING_WINDOWS = 5
"""Sub-windows of the metered window (median and range), as the idle power has."""
WAITING_TAIL = 0.1
"""The waiters wait this fraction longer than the metered window, so the window's last
reading (a BMC through IPMI takes a tenth of a second) is taken while they still wait."""
START_TIMEOUT_S = 120.0
"""How long the waiters may take to start (a node's worth of interpreters on a busy node)."""


class WaitersError(GreenckptError, RuntimeError):
    """A waiter process did not start, died, or did not report: the measurement stopped."""


class Waiters(Protocol):
    """``ranks`` processes ready to wait; the real ones are :class:`ProcessWaiters`."""

    @property
    def ranks(self) -> int:
        """How many waiters there are (``k``)."""
        ...

    def release(self, mode: WaitMode, seconds: float) -> None:
        """Every waiter starts waiting in ``mode`` now, until ``seconds`` from now."""
        ...

    def collect(self) -> float:
        """After their wait: the CPU-seconds all waiters used during it."""
        ...


WaitersFactory = Callable[[], AbstractContextManager[Waiters]]
"""Opens the waiters for the waiting phase of a sweep (and closes them after it)."""


def default_waiting_ranks() -> int:
    """The CPUs this process may run on (its affinity: a batch system's allocation), at most
    :data:`MAX_WAITING_RANKS`: the ranks an application would put on the node."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_WAITING_RANKS))


class ProcessWaiters(ClosesOnExit):
    """``ranks`` spawned processes that wait with ``loop`` (see :mod:`.waiters`), kept for a
    whole waiting phase (started once, released once per window, stopped on leaving).

    Why per-window CPU time from inside each waiter: the processes live across windows, so
    ``wait4``'s rusage at exit would sum every window and the start-up; each waiter reports
    ``getrusage(RUSAGE_SELF)`` taken just around its wait instead.
    """

    def __init__(self, loop: WaitLoop, ranks: int, *, env_name: str = WAIT_ENV) -> None:
        if ranks < 1:
            raise WaitersError(f"the waiting measurement needs at least 1 waiter, got {ranks}")
        self._loop = loop
        self._ranks = ranks
        self._env = env_name
        self._procs: list[multiprocessing.process.BaseProcess] = []
        self._conns: list[Connection] = []
        self._round_s = 0.0

    @property
    def ranks(self) -> int:
        return self._ranks

    def __enter__(self) -> ProcessWaiters:
        ctx = multiprocessing.get_context("spawn")  # no fork beside the sampler's thread
        try:
            for i in range(self._ranks):
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(
                    target=waiter_main,
                    args=(self._loop, self._env, theirs),
                    name=f"greenckpt-waiter-{i}",
                    daemon=True,
                )
                proc.start()
                theirs.close()
                self._procs.append(proc)
                self._conns.append(mine)
            self._receive_all(START_TIMEOUT_S, "start")
        except BaseException:
            self.close()
            raise
        return self

    def release(self, mode: WaitMode, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        self._round_s = seconds
        for i, (conn, proc) in enumerate(zip(self._conns, self._procs, strict=True)):
            try:
                conn.send((mode, deadline))
            except OSError:  # BrokenPipeError: it died since the last window
                proc.join(1.0)
                raise WaitersError(
                    f"waiter {i} of {self._ranks} died before a {mode} window (exit code "
                    f"{proc.exitcode}): the waiting power was not measured"
                ) from None

    def collect(self) -> float:
        reports = self._receive_all(self._round_s + START_TIMEOUT_S, "report its wait")
        return float(sum(reports))

    def _receive_all(self, timeout: float, what: str) -> list[float]:
        """One message from every waiter within ``timeout`` seconds, in order."""
        until = time.monotonic() + timeout
        out: list[float] = []
        for i, (conn, proc) in enumerate(zip(self._conns, self._procs, strict=True)):
            message: object = None
            try:
                if conn.poll(max(0.0, until - time.monotonic())):
                    message = conn.recv()
            except (EOFError, OSError):
                message = None
            if message is None:
                proc.join(1.0)  # a waiter that closed its end is exiting: let it
                state = "died" if proc.exitcode is not None else "did not answer"
                raise WaitersError(
                    f"waiter {i} of {self._ranks} {state} when asked to {what} "
                    f"(exit code {proc.exitcode}): the waiting power was not measured"
                )
            out.append(float(message) if isinstance(message, int | float) else 0.0)
        return out

    def close(self) -> None:
        """Ask every waiter to end, then stop those that do not (idempotent)."""
        for conn in self._conns:
            with contextlib.suppress(OSError):  # it is gone already
                conn.send(None)
        for proc in self._procs:
            proc.join(2.0)
            if proc.is_alive():
                proc.terminate()
                proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []


@dataclass(frozen=True)
class WaitingRun:
    """One metered window with the waiters waiting."""

    power: float
    """Median node power over the sub-windows (W)."""
    spread: float
    """Range (max − min) of the sub-windows' powers (W)."""
    cpu_seconds: float
    """CPU-seconds all waiters used (from the OS)."""
    waiters_seconds: float
    """How long the waiters waited (the window plus :data:`WAITING_TAIL`)."""
    seconds: float
    """Length of the metered window."""
    reliable: bool
    """False when a meter reading in the window failed or was degraded."""


def waiting_run(
    mark: Callable[[], Mark],
    choice: PowerChoice,
    waiters: Waiters,
    mode: WaitMode,
    seconds: float,
    sleep: Callable[[float], None],
) -> WaitingRun:
    """Release the waiters, meter ``seconds`` in :data:`WAITING_WINDOWS` sub-windows with
    ``mark`` (the sampler's synchronous reading), collect their CPU time.

    Each sub-window sleeps to its planned end from the previous reading, so slow readings do
    not stretch the window beyond the waiters' wait.
    """
    run_for = seconds * (1 + WAITING_TAIL)
    waiters.release(mode, run_for)
    marks = [mark()]
    step = seconds / WAITING_WINDOWS
    for i in range(1, WAITING_WINDOWS + 1):
        sleep(max(0.0, marks[0].monotonic_s + i * step - marks[-1].monotonic_s))
        marks.append(mark())
    cpu = waiters.collect()
    powers = [
        choice.power(a.energy_to(b), max(b.monotonic_s - a.monotonic_s, 1e-9))
        for a, b in itertools.pairwise(marks)
    ]
    gaps = marks[0].gaps_to(marks[-1])
    return WaitingRun(
        power=statistics.median(powers),
        spread=max(powers) - min(powers),
        cpu_seconds=cpu,
        waiters_seconds=run_for,
        seconds=max(marks[-1].monotonic_s - marks[0].monotonic_s, 1e-9),
        reliable=not any(gaps[k] for k in choice.keys),
    )


def entry_of(
    setting: CpuSetting,
    cstates: bool | None,
    mode: WaitMode,
    ranks: int,
    run: WaitingRun,
    idle: float,
    source: PowerSource,
) -> WaitingPower:
    """The profile's waiting entry from one window and the idle power at the same setting."""
    return WaitingPower(
        mode=mode,
        ranks=ranks,
        power_per_rank=(run.power - idle) / ranks,
        power_source=source,
        frequency=None if setting.hz is None else float(setting.hz),
        governor=setting.governor,
        cstates=cstates,
        power_spread=run.spread / ranks,
        cpu_fraction=run.cpu_seconds / (ranks * run.waiters_seconds),
        seconds=run.seconds,
        idle_power=idle,
        reliable=run.reliable,
    )


WaitingKey = tuple[str, bool | None, str]
"""``(setting_key, cstates, mode)``, as :func:`greenckpt.optimize.profile_data.waiting_key`."""


class WaitingMeasurer(Protocol):
    """What the waiting phase needs from the node (:class:`~.measure.NodeMeasurer`)."""

    @property
    def power_choice(self) -> PowerChoice:
        """The domains every power figure sums, their scope and source."""
        ...

    def configure(self, cell: Cell) -> None:
        """Put the node in the cell's CPU setting and C-state configuration."""
        ...

    def idle(self, seconds: float) -> tuple[float, float]:
        """Median node power and its spread over ``seconds`` of idling."""
        ...

    def waiting(self, waiters: Waiters, mode: WaitMode, seconds: float) -> WaitingRun:
        """One metered window of the waiters waiting in ``mode``."""
        ...


def wanted(spec: SweepSpec) -> Iterator[tuple[CpuSetting, bool | None, WaitMode]]:
    """Every (CPU setting, C-states, mode) a sweep measures the waiting power of, in order."""
    for setting in spec.settings:
        for cstates in spec.cstates:
            for mode in WAIT_MODES:
                yield setting, cstates, mode


def measure_waiting(
    spec: SweepSpec,
    measurer: WaitingMeasurer,
    open_waiters: WaitersFactory,
    have: Mapping[WaitingKey, WaitingPower],
    on_entry: Callable[[WaitingPower], None],
) -> None:
    """Measure every entry of :func:`wanted` that ``have`` lacks (a resumed sweep keeps what
    its file recorded); ``on_entry`` hears each new entry. Per CPU setting and C-states: the
    node is configured, its idle power metered for ``spec.waiting_seconds``, then each
    missing mode's window."""
    missing = [(s, c, m) for s, c, m in wanted(spec) if (s.key, c, m) not in have]
    if not missing:
        return
    seconds = spec.waiting_seconds
    with open_waiters() as waiters:
        for (setting, cstates), group in itertools.groupby(missing, key=lambda t: t[:2]):
            measurer.configure(
                Cell(setting, cstates, spec.sizes[0], spec.codecs[0], spec.processes[0])
            )
            idle, _ = measurer.idle(seconds)
            for _, _, mode in group:
                run = measurer.waiting(waiters, mode, seconds)
                source = measurer.power_choice.source
                on_entry(entry_of(setting, cstates, mode, waiters.ranks, run, idle, source))
