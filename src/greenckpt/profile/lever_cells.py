"""The levers beyond the core clock as sweep axes: the values one cell sets, and the axes.

Why apart from :mod:`greenckpt.profile.grid`: the uncore frequency, the package power limit,
the GPU application clocks and the GPU power limit are each an axis of the sweep, and the
grid, the measurer, the adaptive mode, the resume journal and the flags all need the same
answer to "which levers does this cell set, and what is its key?"; a pure module keeps that in
one place without touching the machine.

Every axis always includes "as found" (``None``): the planner's baselines and its
frequency-only plan need points with every lever as found, so a sweep of ``--uncore`` values
also measures the uncore as the node had it. A lever left as found is not written at all.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from greenckpt.errors import GreenckptError
from greenckpt.optimize.lever_fields import LeverPoint

__all__ = ["AS_FOUND", "LEVER_FLAGS", "NO_AXES", "LeverAxes", "LeverSweepError", "Levers"]

LEVER_FLAGS: Mapping[str, str] = {
    "uncore frequency": "--uncore",
    "power limit": "--power-limit",
    "gpu clocks": "--gpu-clocks",
    "gpu power limit": "--gpu-power-limit",
}
"""The lever names of :func:`greenckpt.platform.levers.node_levers` an axis sweeps, and the
``greenckpt profile run`` flag of each axis (messages name both)."""


class LeverSweepError(GreenckptError, ValueError):
    """A lever axis is invalid; the message names the axis, the value and what is valid."""


def _watts_key(watts: float) -> str:
    return repr(float(watts))


@dataclass(frozen=True)
class Levers:
    """What one cell sets beyond the CPU setting and C-states; ``None`` leaves a lever as found.

    ``gpu_clocks`` is ``(memory MHz, graphics MHz)``, the pair NVML's application clocks take.
    """

    uncore_khz: int | None = None
    power_limit_w: float | None = None
    gpu_clocks: tuple[int, int] | None = None
    gpu_power_limit_w: float | None = None

    @property
    def as_found(self) -> bool:
        """True when the cell leaves every lever as found (the grid before the lever axes)."""
        return self == AS_FOUND

    @property
    def key(self) -> str:
        """The cell key's suffix: empty when as found (so the keys of sweeps without lever
        axes, and of their resume journals, are unchanged), else ``|name=value,...``."""
        parts = []
        if self.uncore_khz is not None:
            parts.append(f"uncore={self.uncore_khz}")
        if self.power_limit_w is not None:
            parts.append(f"pl={_watts_key(self.power_limit_w)}")
        if self.gpu_clocks is not None:
            parts.append(f"gpuclk={self.gpu_clocks[0]}:{self.gpu_clocks[1]}")
        if self.gpu_power_limit_w is not None:
            parts.append(f"gpupl={_watts_key(self.gpu_power_limit_w)}")
        return "|" + ",".join(parts) if parts else ""

    @property
    def label(self) -> str:
        """Short human description for progress lines (empty when as found)."""
        parts = []
        if self.uncore_khz is not None:
            parts.append(f"uncore {self.uncore_khz / 1e6:.2f} GHz")
        if self.power_limit_w is not None:
            parts.append(f"package limit {self.power_limit_w:g} W")
        if self.gpu_clocks is not None:
            parts.append(f"GPU clocks {self.gpu_clocks[0]}:{self.gpu_clocks[1]} MHz")
        if self.gpu_power_limit_w is not None:
            parts.append(f"GPU limit {self.gpu_power_limit_w:g} W")
        return ", ".join(parts)

    def point_fields(self) -> dict[str, Any]:
        """The profile point's lever fields (docs/formats.md) for a point of this cell."""
        mem, gr = self.gpu_clocks if self.gpu_clocks is not None else (None, None)
        return {
            "uncore_khz": self.uncore_khz,
            "power_limit_w": self.power_limit_w,
            "gpu_clock_mhz": gr,
            "gpu_memory_mhz": mem,
            "gpu_power_limit_w": self.gpu_power_limit_w,
        }

    @classmethod
    def of_point(cls, point: LeverPoint) -> Levers:
        """The levers a profile point was measured under (inverse of :meth:`point_fields`)."""
        mem, gr = point.gpu_memory_mhz, point.gpu_clock_mhz
        return cls(
            uncore_khz=point.uncore_khz,
            power_limit_w=point.power_limit_w,
            gpu_clocks=None if mem is None or gr is None else (mem, gr),
            gpu_power_limit_w=point.gpu_power_limit_w,
        )


@dataclass(frozen=True)
class LeverAxes:
    """The values a sweep tries for each lever (each axis also tries "as found")."""

    uncore_khz: tuple[int, ...] = ()
    power_limits_w: tuple[float, ...] = ()
    gpu_clocks: tuple[tuple[int, int], ...] = ()
    gpu_power_limits_w: tuple[float, ...] = ()

    @property
    def empty(self) -> bool:
        """True when no lever is swept (the grid is the CPU settings' alone)."""
        return self == NO_AXES

    def asked(self) -> tuple[str, ...]:
        """The names (as :data:`LEVER_FLAGS` has them) of the levers with values to try."""
        given = (self.uncore_khz, self.power_limits_w, self.gpu_clocks, self.gpu_power_limits_w)
        return tuple(name for name, vals in zip(LEVER_FLAGS, given, strict=True) if vals)

    def combinations(self) -> int:
        """How many lever combinations a cell of a fixed CPU setting is measured with."""
        return math.prod(
            1 + len(v)
            for v in (
                self.uncore_khz,
                self.power_limits_w,
                self.gpu_clocks,
                self.gpu_power_limits_w,
            )
        )

    def combos(self) -> Iterator[Levers]:
        """Every combination, "as found" first, then the values in the order given."""
        for uncore, limit, clocks, gpu_limit in itertools.product(
            (None, *self.uncore_khz),
            (None, *self.power_limits_w),
            (None, *self.gpu_clocks),
            (None, *self.gpu_power_limits_w),
        ):
            yield Levers(uncore, limit, clocks, gpu_limit)

    def validate(self) -> None:
        """Raise :class:`LeverSweepError` for the first malformed value (nothing about the
        node: whether it has the lever and its range are checked by the pre-flight)."""
        _distinct(self.uncore_khz, "--uncore")
        for khz in self.uncore_khz:
            if isinstance(khz, bool) or not isinstance(khz, int) or khz <= 0:
                raise LeverSweepError(f"--uncore: {khz!r} is not a positive whole number of kHz")
        for flag, values in (
            ("--power-limit", self.power_limits_w),
            ("--gpu-power-limit", self.gpu_power_limits_w),
        ):
            _distinct(values, flag)
            for w in values:
                if isinstance(w, bool) or not isinstance(w, int | float):
                    raise LeverSweepError(f"{flag}: {w!r} is not a number of watts")
                if not (math.isfinite(w) and w > 0):
                    raise LeverSweepError(f"{flag}: {w!r} W is not a positive, finite power")
        _distinct(self.gpu_clocks, "--gpu-clocks")
        for pair in self.gpu_clocks:
            if not (
                isinstance(pair, tuple)
                and len(pair) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair)
            ):
                raise LeverSweepError(
                    f"--gpu-clocks: {pair!r} is not a (memory MHz, graphics MHz) pair of "
                    "positive whole numbers, e.g. 877:1410"
                )

    def to_json(self) -> dict[str, Any]:
        """The ``levers`` object of a sweep's recorded spec (compared on resume)."""
        return {
            "uncore_khz": list(self.uncore_khz),
            "power_limit_W": list(self.power_limits_w),
            "gpu_clocks_MHz": [list(p) for p in self.gpu_clocks],
            "gpu_power_limit_W": list(self.gpu_power_limits_w),
        }

    @classmethod
    def from_json(cls, obj: Any) -> LeverAxes:
        """Inverse of :meth:`to_json` (``None``: no lever axes, as in files made before them);
        raises ``KeyError`` or ``ValueError`` (:class:`LeverSweepError`) on anything malformed."""
        if obj is None:
            return cls()
        if not isinstance(obj, Mapping):
            raise LeverSweepError("sweep.spec.levers is not an object")
        axes = cls(
            uncore_khz=tuple(_int(v) for v in obj.get("uncore_khz", [])),
            power_limits_w=tuple(float(v) for v in obj.get("power_limit_W", [])),
            gpu_clocks=tuple(_pair(p) for p in obj.get("gpu_clocks_MHz", [])),
            gpu_power_limits_w=tuple(float(v) for v in obj.get("gpu_power_limit_W", [])),
        )
        axes.validate()
        return axes


AS_FOUND = Levers()
"""Every lever as found (a cell of the grid before the lever axes)."""
NO_AXES = LeverAxes()
"""No lever swept."""


def _distinct(values: tuple[Any, ...], flag: str) -> None:
    if len(set(values)) != len(values):
        raise LeverSweepError(f"{flag}: a value is listed twice")


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LeverSweepError(f"{value!r} is not a whole number")
    return value


def _pair(value: Any) -> tuple[int, int]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise LeverSweepError(f"{value!r} is not a [memory MHz, graphics MHz] pair")
    return _int(value[0]), _int(value[1])
