"""What the sampler records: energy per phase, marks, and the sampled time series.

Why its own module: these are the figures the runtime and the profiler keep and report, and
their arithmetic must not depend on the sampling thread — a phase's energy is the difference
of two cumulative counter readings at its boundaries, power is derived from energy deltas so it
integrates back to the same joules, and every figure keeps its source (measured or estimated).
The sampling thread that produces them is :mod:`greenckpt.platform.sampler`; design notes in
docs/design/measurement.md ("Power sampling").
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from greenckpt.platform.meters.base import Source

__all__ = ["FloatArray", "Mark", "PhaseEnergy", "SampleBuffer", "Series"]

_CHUNK = 4096
"""Rows per block of the sample buffer: it grows by blocks, never by copying."""

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PhaseEnergy:
    """Energy per domain over one phase, from counter deltas at its boundaries.

    ``energy_j`` is inclusive of nested phases; ``exclusive_energy_j`` is what remains after
    subtracting them (filled in when the parent closes; equal to ``energy_j`` for a leaf).
    Times: ``start_s``/``end_s`` on the sampler's monotonic clock (seconds since the sampler
    started), ``start_unix``/``end_unix`` Unix time. ``truncated``: the sampler stopped before
    the phase ended, so the phase ends at the sampler's final reading. ``samples``: the readings
    strictly between the two boundaries.

    ``gaps``: per domain, the readings in the phase (boundaries included) that are not plain
    measurements — a failed read whose last value was carried forward, or a degraded reading
    the meter reported (a held power after a failed query, a counter read too late to rule out
    a lost wrap). A figure with gaps is still the best the sampler has, but
    :attr:`reliable` is False and reports must say so.
    """

    name: str
    index: int
    parent: int | None
    depth: int
    thread: str
    start_s: float
    end_s: float
    start_unix: float
    end_unix: float
    energy_j: Mapping[str, float]
    exclusive_energy_j: Mapping[str, float]
    sources: Mapping[str, Source]
    samples: int
    truncated: bool = False
    gaps: Mapping[str, int] = field(default_factory=dict)

    @property
    def reliable(self) -> bool:
        """True when no figure of this phase rests on a failed or degraded reading."""
        return not any(self.gaps.values())

    @property
    def duration_s(self) -> float:
        """Seconds between the two boundary readings."""
        return self.end_s - self.start_s

    @property
    def mean_power_w(self) -> dict[str, float]:
        """Average watts per domain over the phase (NaN for a zero-length phase)."""
        d = self.duration_s
        return {k: (e / d if d > 0 else math.nan) for k, e in self.energy_j.items()}

    @property
    def estimated(self) -> bool:
        """True when any domain's figure is an estimate."""
        return any(s == "estimated" for s in self.sources.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record; every energy carries its source."""
        return {
            "name": self.name,
            "index": self.index,
            "parent": self.parent,
            "depth": self.depth,
            "thread": self.thread,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "start_unix": self.start_unix,
            "end_unix": self.end_unix,
            "duration_s": self.duration_s,
            "samples": self.samples,
            "truncated": self.truncated,
            "reliable": self.reliable,
            "energy": {
                k: {
                    "joules": v,
                    "exclusive_joules": self.exclusive_energy_j.get(k, v),
                    "source": self.sources[k],
                    "gaps": self.gaps.get(k, 0),
                }
                for k, v in self.energy_j.items()
            },
        }


@dataclass(frozen=True)
class Mark:
    """A synchronous reading of every meter at one instant (see :meth:`Sampler.mark`).

    Two marks bracket a window whose energy is :meth:`energy_to`; that is how the profiler
    charges exactly the I/O window of a run (from the workers' release to their end) instead of
    a phase that also holds process start-up. ``t_s`` is seconds since the sampler started,
    ``monotonic_s`` the same instant on the sampler's clock.
    """

    t_s: float
    monotonic_s: float
    unix: float
    energy_j: Mapping[str, float]
    gaps: Mapping[str, int]

    def energy_to(self, later: Mark) -> dict[str, float]:
        """Joules per domain between this mark and ``later``."""
        return {k: later.energy_j[k] - v for k, v in self.energy_j.items()}

    def gaps_to(self, later: Mark) -> dict[str, int]:
        """Failed or degraded readings per domain between the two marks (boundaries included)."""
        return {k: later.gaps[k] - v for k, v in self.gaps.items()}


@dataclass(frozen=True)
class Series:
    """The sampled time series: cumulative joules per domain since the sampler started.

    ``t_s``: monotonic seconds since start; ``unix``: Unix time of the same reads;
    ``energy_j[i, j]``: joules of ``domains[j]`` at read ``i`` (the first row is 0);
    ``boundary[i]``: the read was a phase boundary (or start/stop), not a timer tick;
    ``held[i, j]``: ``domains[j]``'s meter failed at read ``i`` (its last value was carried
    forward) or reported a degraded reading (see ``PhaseEnergy.gaps``).
    """

    domains: tuple[str, ...]
    sources: Mapping[str, Source]
    t_s: FloatArray
    unix: FloatArray
    energy_j: FloatArray
    boundary: npt.NDArray[np.bool_]
    held: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return int(self.t_s.size)

    def power_w(self) -> tuple[FloatArray, FloatArray]:
        """``(t_end, watts)``: mean power per domain between consecutive reads (energy deltas).

        ``watts[i, j]`` is domain ``j``'s average over ``(t_s[i], t_s[i+1]]``, stamped at
        ``t_end[i] = t_s[i+1]``; reads at the same instant are merged first.
        """
        if self.t_s.size < 2:
            return np.empty(0), np.empty((0, len(self.domains)))
        keep = np.concatenate(([True], np.diff(self.t_s) > 0))
        t = self.t_s[keep]
        e = self.energy_j[keep]
        dt = np.diff(t)
        return t[1:], np.diff(e, axis=0) / dt[:, None]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready columns, each domain labelled with its source."""
        t_end, watts = self.power_w()
        return {
            "t_s": self.t_s.tolist(),
            "unix": self.unix.tolist(),
            "domains": {
                d: {
                    "source": self.sources[d],
                    "energy_j": self.energy_j[:, j].tolist(),
                    "power_w": watts[:, j].tolist(),
                    "held_rows": np.flatnonzero(self.held[:, j]).tolist(),
                }
                for j, d in enumerate(self.domains)
            },
            "power_t_s": t_end.tolist(),
        }


class SampleBuffer:
    """Growable (optionally bounded) rows of ``(t, unix, boundary, energy..., held...)``."""

    def __init__(self, width: int, max_rows: int | None) -> None:
        self.width = width + 3
        self.max_rows = max_rows
        self.chunks: deque[FloatArray] = deque()
        self.fill = _CHUNK  # rows used in the last chunk
        self.appended = 0  # rows ever appended (indices for phases)
        self.dropped = 0

    def append(self, t: float, unix: float, boundary: bool, values: Sequence[float]) -> None:
        if self.fill == _CHUNK:
            self.chunks.append(np.empty((_CHUNK, self.width)))
            self.fill = 0
        row = self.chunks[-1][self.fill]
        row[0] = t
        row[1] = unix
        row[2] = 1.0 if boundary else 0.0
        row[3:] = values
        self.fill += 1
        self.appended += 1
        if self.max_rows is not None:
            while len(self.chunks) > 1 and self.rows - _CHUNK >= self.max_rows:
                self.chunks.popleft()
                self.dropped += _CHUNK

    @property
    def rows(self) -> int:
        return max(0, (len(self.chunks) - 1) * _CHUNK + self.fill) if self.chunks else 0

    def array(self) -> FloatArray:
        if not self.chunks:
            return np.empty((0, self.width))
        parts = list(self.chunks)
        parts[-1] = parts[-1][: self.fill]
        out = np.concatenate(parts)
        if self.max_rows is not None and out.shape[0] > self.max_rows:
            out = out[-self.max_rows :]
        return out
