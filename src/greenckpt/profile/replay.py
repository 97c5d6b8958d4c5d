"""Replaying a recorded full-grid profile as if measuring it.

Why: the adaptive mode must be judged against the full grid on real recorded profiles
(``benchmarks/bench_adaptive.py``) — re-measuring a node for every variant of the algorithm
would take hours and would not be repeatable. :class:`ReplayMeasurer` answers every run of a
cell with the recorded point (its median throughput and power) and charges the time that run
took when it was recorded (``size / throughput``), so "measurement time" is comparable between
a full and an adaptive sweep over the same recording.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from greenckpt.errors import MissingEntryError
from greenckpt.optimize.profile_data import Operation, PowerSource, Profile, ProfilePoint
from greenckpt.optimize.waiting import WaitMode
from greenckpt.profile.grid import Cell, CpuSetting, SweepSpec
from greenckpt.profile.lever_cells import LeverAxes, Levers
from greenckpt.profile.measure import RunResult
from greenckpt.profile.power import PowerChoice
from greenckpt.profile.waiting import Waiters, WaitingRun

DEFAULT_SIZE = 2 << 30
T = TypeVar("T", int, float, tuple[int, int])


def _cell_key(p: ProfilePoint, default_size: int) -> tuple[object, ...]:
    levers = Levers.of_point(p)
    return (p.setting_key, p.cstates, p.size or default_size, p.codec, p.processes, levers, p.op)


def _axes(recorded: Profile) -> LeverAxes:
    """The lever values the recording has points at (each axis's "as found" is implied)."""
    levers = [Levers.of_point(p) for p in recorded.points]

    def values(pick: Callable[[Levers], T | None]) -> tuple[T, ...]:
        return tuple(dict.fromkeys(v for lv in levers if (v := pick(lv)) is not None))

    return LeverAxes(
        uncore_khz=tuple(sorted(values(lambda lv: lv.uncore_khz))),
        power_limits_w=tuple(sorted(values(lambda lv: lv.power_limit_w))),
        gpu_clocks=tuple(sorted(values(lambda lv: lv.gpu_clocks))),
        gpu_power_limits_w=tuple(sorted(values(lambda lv: lv.gpu_power_limit_w))),
    )


def spec_of(
    recorded: Profile,
    path: str = "/replay",
    default_size: int = DEFAULT_SIZE,
    *,
    repetitions: int = 3,
    warmup: int = 1,
) -> SweepSpec:
    """The sweep whose grid is exactly the recorded profile's cells (CPU settings, lever
    values, process counts, sizes, codecs, C-states), with ``greenckpt profile``'s default
    repetitions and warm-up (every run replays the recorded median)."""
    keys = sorted({p.setting_key for p in recorded.points}, key=_setting_order)
    return SweepSpec(
        path=path,
        settings=tuple(CpuSetting.from_key(k) for k in keys),
        processes=recorded.process_counts,
        ops=tuple(op for op in ("write", "read") if recorded.for_op(op)),
        sizes=recorded.sizes or (default_size,),
        codecs=tuple(sorted({p.codec for p in recorded.points}, key=lambda c: c or "")),
        cstates=tuple(sorted({p.cstates for p in recorded.points}, key=repr)),
        block_size=1,
        repetitions=repetitions,
        warmup=warmup,
        idle_seconds=0.0,
        levers=_axes(recorded),
    )


def _setting_order(key: str) -> tuple[int, float, str]:
    if key.isdigit():
        return (0, float(key), key)
    return (1, 0.0, key)


@dataclass
class ReplayMeasurer:
    """A :class:`~greenckpt.profile.measure.Measurer` that answers from a recorded profile."""

    recorded: Profile
    default_size: int = DEFAULT_SIZE
    runs: int = 0
    seconds: float = 0.0
    _index: dict[tuple[object, ...], ProfilePoint] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._index = {_cell_key(p, self.default_size): p for p in self.recorded.points}
        sources = self.recorded.power_sources
        source: PowerSource = (
            "synthetic"
            if "synthetic" in sources
            else "estimated"
            if "estimated" in sources
            else "measured"
        )
        self._choice = PowerChoice(keys=("replay",), scope="replayed", source=source)

    @property
    def power_choice(self) -> PowerChoice:
        return self._choice

    def configure(self, cell: Cell) -> None:
        return None

    def run(self, op: Operation, cell: Cell) -> RunResult:
        key = (
            cell.setting.key,
            cell.cstates,
            cell.size,
            cell.codec,
            cell.processes,
            cell.levers,
            op,
        )
        p = self._index.get(key)
        if p is None:
            raise MissingEntryError(f"the recording has no {op} point for {cell.label}")
        seconds = cell.size / p.throughput
        self.runs += 1
        self.seconds += seconds
        return RunResult(op, p.throughput, seconds, p.power, p.reliable, p.read_method)

    def cleanup(self, cell: Cell) -> None:
        return None

    def idle(self, seconds: float) -> tuple[float, float]:
        return (self.recorded.idle_power or 0.0, 0.0)

    def waiting(self, waiters: Waiters, mode: WaitMode, seconds: float) -> WaitingRun:
        raise MissingEntryError(
            "a replay does not replay waiting power: replay with waiting_seconds=0"
        )
