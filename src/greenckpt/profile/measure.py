"""Measuring one cell on the node: set the CPU and the levers, run the I/O engine, charge the
I/O window.

Why the window: a run's energy is taken between two synchronous meter readings
(:meth:`~greenckpt.platform.sampler.Sampler.mark`) — the first when the engine releases its
workers to move data (``on_start``), the second when the last worker has finished — so the
power of a point is the power *while the I/O runs*, not diluted by spawning processes or
inflated by Python start-up. Throughput is the engine's own (common start to last fsync).

The node is configured through :class:`~greenckpt.platform.restore.NodeSettings`, which saves
every attribute before changing it and restores it whatever happens; every cell gets the node
restored to how it was found first, then its CPU setting, C-states and levers (uncore
frequency, package power limit, GPU clocks and power limit) applied, so a lever a cell leaves
as found is as found.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from greenckpt.errors import UsageError
from greenckpt.io import IOJobError, IOResult, Layout, job_files, remove_files, run_io
from greenckpt.optimize.profile_data import Operation
from greenckpt.optimize.waiting import WaitMode
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.sampler import Mark, Sampler
from greenckpt.profile.grid import Cell, CpuSetting, SweepSpec
from greenckpt.profile.lever_cells import Levers
from greenckpt.profile.power import PowerChoice
from greenckpt.profile.waiting import Waiters, WaitingRun, waiting_run

FILE_PREFIX = "greenckpt-profile"
IDLE_WINDOWS = 5
"""Idle power is the median of this many equal windows (their range is the spread)."""


@dataclass(frozen=True)
class RunResult:
    """One I/O job as measured."""

    op: Operation
    throughput: float
    """Logical bytes per second (the engine's timing)."""
    seconds: float
    """Length of the metered window (workers released → last worker done)."""
    power: float
    """Mean node power over the window (W), from :class:`PowerChoice`'s domains."""
    reliable: bool
    """False when a reading in the window failed or was degraded."""
    read_method: str | None
    compression_ratio: float | None = None
    """Logical bytes per stored byte when the cell compresses; ``None`` uncompressed."""


class Measurer(Protocol):
    """What the sweep needs from the node; the real one is :class:`NodeMeasurer`."""

    @property
    def power_choice(self) -> PowerChoice:
        """The domains every power figure sums, their scope and source."""
        ...

    def configure(self, cell: Cell) -> None:
        """Put the node in the cell's CPU setting, C-state configuration and levers."""
        ...

    def run(self, op: Operation, cell: Cell) -> RunResult:
        """Write (keeping the files) or read back the cell's files once."""
        ...

    def cleanup(self, cell: Cell) -> None:
        """Remove the cell's files."""
        ...

    def idle(self, seconds: float) -> tuple[float, float]:
        """Median node power and its spread (max − min) over ``seconds`` of idling."""
        ...

    def waiting(self, waiters: Waiters, mode: WaitMode, seconds: float) -> WaitingRun:
        """One metered window of ``waiters`` waiting in ``mode`` (the waiting power)."""
        ...


class IORunner(Protocol):
    """:func:`greenckpt.io.run_io`'s signature, as far as the profiler uses it (tests fake it)."""

    def __call__(
        self,
        op: Operation,
        path: str | os.PathLike[str],
        *,
        total_bytes: int,
        workers: int,
        block_size: int,
        layout: Any,
        read_method: Any,
        name: str,
        keep: bool,
        on_start: Callable[[], None] | None,
        codec: str | None,
        data: Any,
    ) -> IOResult: ...


class NodeMeasurer:
    """Measures cells on this node with a running sampler and an open NodeSettings session.

    ``node`` may be ``None`` when every setting of the sweep is "as found" and C-states are
    left alone (nothing will be changed, so no session is needed).
    """

    def __init__(
        self,
        spec: SweepSpec,
        sampler: Sampler,
        power_choice: PowerChoice,
        node: NodeSettings | None,
        *,
        io: IORunner = run_io,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.spec = spec
        self.sampler = sampler
        self._power = power_choice
        self.node = node
        self._io = io
        self._sleep = sleep
        self._configured: tuple[CpuSetting, bool | None, Levers] | None = None

    @property
    def power_choice(self) -> PowerChoice:
        return self._power

    def configure(self, cell: Cell) -> None:
        want = (cell.setting, cell.cstates, cell.levers)
        if want == self._configured:
            return
        needs_node = (
            cell.setting.kind != "uncontrolled"
            or cell.cstates is not None
            or not cell.levers.as_found
        )
        if self.node is None:
            if needs_node:
                raise UsageError("changing CPU settings or levers needs a NodeSettings session")
        else:
            self.node.restore()  # back to how the node was found, then this cell's settings
            if cell.setting.kind == "frequency":
                assert cell.setting.hz is not None
                self.node.set_frequency(cell.setting.hz)
            elif cell.setting.kind == "governor":
                assert cell.setting.governor is not None
                self.node.set_governor(cell.setting.governor)
            if cell.cstates is True:
                self.node.enable_cstates()
            elif cell.cstates is False:
                self.node.disable_cstates(deeper_than_s=0.0)
            apply_levers(self.node, cell.levers)
        self._configured = want

    def run(self, op: Operation, cell: Cell) -> RunResult:
        marks: list[Mark] = []
        result = self._io(
            op,
            self.spec.path,
            total_bytes=cell.size,
            workers=cell.processes,
            block_size=self.spec.block_size,
            layout=self.spec.layout,
            read_method=self.spec.read_method,
            name=FILE_PREFIX,
            keep=True,
            on_start=lambda: marks.append(self.sampler.mark()),
            codec=cell.codec,
            data=self.spec.data,
        )
        end = self.sampler.mark()
        if not marks:
            raise IOJobError("the I/O engine did not report the start of its workers")
        start = marks[0]
        seconds = max(end.monotonic_s - start.monotonic_s, 1e-9)
        gaps = start.gaps_to(end)
        return RunResult(
            op=op,
            throughput=result.throughput,
            seconds=seconds,
            power=self._power.power(start.energy_to(end), seconds),
            reliable=not any(gaps[k] for k in self._power.keys),
            read_method=result.read_method,
            compression_ratio=result.compression_ratio if cell.codec else None,
        )

    def cleanup(self, cell: Cell) -> None:
        layout = cast(Layout, self.spec.layout)
        remove_files(job_files(self.spec.path, FILE_PREFIX, layout, cell.processes))

    def idle(self, seconds: float) -> tuple[float, float]:
        marks = [self.sampler.mark()]
        for _ in range(IDLE_WINDOWS):
            self._sleep(seconds / IDLE_WINDOWS)
            marks.append(self.sampler.mark())
        powers = [
            self._power.power(a.energy_to(b), max(b.monotonic_s - a.monotonic_s, 1e-9))
            for a, b in itertools.pairwise(marks)
        ]
        return statistics.median(powers), max(powers) - min(powers)

    def waiting(self, waiters: Waiters, mode: WaitMode, seconds: float) -> WaitingRun:
        return waiting_run(self.sampler.mark, self._power, waiters, mode, seconds, self._sleep)


def apply_levers(node: NodeSettings, levers: Levers) -> None:
    """Set every lever ``levers`` gives (the node session validates each value first and
    saves the originals; a lever left as found is not touched)."""
    if levers.uncore_khz is not None:
        node.set_uncore(levers.uncore_khz)
    if levers.power_limit_w is not None:
        node.set_power_limit(levers.power_limit_w, domain="package")
    if levers.gpu_clocks is not None:
        node.set_gpu_clocks(*levers.gpu_clocks)
    if levers.gpu_power_limit_w is not None:
        node.set_gpu_power_limit(levers.gpu_power_limit_w)


def median_and_range(values: Sequence[float]) -> tuple[float, float]:
    """The median of repetitions and their range (max − min), the profile's "spread"."""
    return statistics.median(values), max(values) - min(values)
