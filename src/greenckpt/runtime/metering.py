"""The run's meter readings: one sampler, the domains summed into node energy, and records
built from two boundary readings.

Why boundary readings: every phase boundary is one synchronous reading of every meter
(:meth:`~greenckpt.platform.sampler.Sampler.mark`), and a record's energy is the counter delta
between its two readings, so the records partition the run exactly and their energies add up
to the run's (docs/design/runtime.md, "Accounting"). Every figure says whether it was measured
or estimated. Each boundary also reads the node's busy CPU time from ``/proc/stat`` (the
estimator's parser), so a record's CPU-seconds partition the run the same way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

from greenckpt.platform.meters.base import Meter, Source
from greenckpt.platform.meters.detect import Selection, select_meters
from greenckpt.platform.meters.estimator import read_cpu_times
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.sampler import Mark, Sampler
from greenckpt.profile.power import PowerChoice, choose_power_domains
from greenckpt.runtime.run_report import BaselineRun, PhaseRecord, PowerTrace, RunKind, RunReport

__all__ = ["Reading", "RunMeters", "read_cpu_seconds"]


def _clock_ticks() -> int:
    """Jiffies per second of ``/proc/stat`` (USER_HZ; 100 where it cannot be asked)."""
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100


def read_cpu_seconds(root: SysRoot) -> float | None:
    """The node's busy CPU-seconds since boot over all CPUs (user, nice, system, irq and
    softirq of ``proc/stat``'s ``cpu`` line), or None when it cannot be read."""
    try:
        busy, _idle = read_cpu_times(root)
    except (OSError, ValueError, PlatformError):
        return None
    return busy / _clock_ticks()


@dataclass(frozen=True)
class Reading(Mark):
    """A sampler mark and the node's busy CPU-seconds read with it (None: not read)."""

    cpu_s: float | None = None

    @classmethod
    def of(cls, mark: Mark, cpu_s: float | None) -> Reading:
        return cls(**{f.name: getattr(mark, f.name) for f in fields(mark)}, cpu_s=cpu_s)

    def cpu_to(self, later: Reading) -> float | None:
        """CPU-seconds between this reading and ``later`` (None when either has none)."""
        if self.cpu_s is None or later.cpu_s is None:
            return None
        return later.cpu_s - self.cpu_s


class RunMeters:
    """The sampler of one run and what its readings mean.

    ``meters``: a selection or meters the caller owns, or ``None`` to detect the best
    available through ``root`` (then owned here and closed by :meth:`stop`). ``t0`` is the
    run's first reading: record times are seconds since it.
    """

    def __init__(
        self, meters: Selection | Sequence[Meter] | None, root: SysRoot, rate_hz: float
    ) -> None:
        self._meters = meters
        self._root = root
        self.rate_hz = rate_hz
        self._owned: Selection | None = None
        self.sampler: Sampler | None = None
        self.power: PowerChoice | None = None
        self.t0 = 0.0

    def start(self, notes: list[str]) -> Reading:
        """Start sampling and return the run's first reading; say in ``notes`` when there is
        no node energy figure or it is estimated, or no CPU-seconds."""
        meters = self._meters
        if meters is None:
            self._owned = select_meters(root=self._root)
            meters = self._owned
        try:
            sampler = Sampler(meters, rate_hz=self.rate_hz)
            sampler.start()
        except BaseException:
            self._close_owned()
            raise
        self.sampler = sampler
        try:
            self.power = choose_power_domains(sampler.domains, sampler.sources)
        except ValueError as exc:
            self.power = None
            notes.append(f"no node energy figure, per-domain energy only: {exc}")
        if self.power is not None and self.power.source == "estimated":
            notes.append(
                f"power is ESTIMATED ({self.power.scope}), not measured: use the figures for "
                "orders of magnitude, not as a measured saving"
            )
        reading = self.mark()
        self.t0 = reading.t_s
        if reading.cpu_s is None:
            notes.append(f"no CPU-seconds: cannot read {self._root / 'proc/stat'}")
        return reading

    def mark(self) -> Reading:
        """One boundary: every meter (the sampler's mark), then the node's CPU time."""
        assert self.sampler is not None
        mark = self.sampler.mark()
        return Reading.of(mark, read_cpu_seconds(self._root))

    def stop(self) -> None:
        """Stop sampling and close the meters detected here."""
        if self.sampler is not None:
            self.sampler.stop()
        self._close_owned()

    def _close_owned(self) -> None:
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    @property
    def power_source(self) -> Source | None:
        """Whether the node energy figure is measured or estimated (None: no figure)."""
        if self.power is None:
            return None
        return "estimated" if self.power.source == "estimated" else "measured"

    def record(
        self, kind: RunKind, index: int, start: Reading, end: Reading, **extra: object
    ) -> PhaseRecord:
        """The record of ``kind`` between two readings, with ``extra`` fields."""
        energy = start.energy_to(end)
        power = self.power
        sampler = self.sampler
        assert sampler is not None
        return PhaseRecord(
            kind=kind,
            index=index,
            start_s=start.t_s - self.t0,
            end_s=end.t_s - self.t0,
            energy_j=energy,
            sources=dict(sampler.sources),
            node_energy_j=None if power is None else sum(energy[k] for k in power.keys),
            power_source=self.power_source,
            power_domains=() if power is None else power.keys,
            gaps=start.gaps_to(end),
            cpu_s=start.cpu_to(end),
            **extra,  # type: ignore[arg-type]
        )

    def node_energy(self, start: Mark, end: Mark) -> float | None:
        """The node's energy between two readings (None: no node figure)."""
        if self.power is None:
            return None
        delta = start.energy_to(end)
        return sum(delta[k] for k in self.power.keys)

    def trace(self) -> PowerTrace | None:
        """The node power sampled over the run, in run seconds (None: no node figure)."""
        power, sampler = self.power, self.sampler
        if power is None or sampler is None:
            return None
        raw = PowerTrace.from_series(sampler.series(), power.keys, power.scope)
        kept = [(t - self.t0, w) for t, w in zip(raw.t_s, raw.watts, strict=True)]
        kept = [(t, w) for t, w in kept if t > 0]
        return PowerTrace(
            tuple(t for t, _ in kept), tuple(w for _, w in kept), raw.source, raw.scope
        )

    def report(
        self,
        records: Iterable[PhaseRecord],
        start: Reading,
        end: Reading,
        *,
        policy: str,
        predicted_epe: float | None,
        predicted_source: str | None,
        baselines: Iterable[BaselineRun],
        synthetic: bool,
        notes: Iterable[str],
    ) -> RunReport:
        """The run's report: ``records`` and the run totals between the run's first and last
        readings, from the same meters (node energy, CPU-seconds, the power trace)."""
        power = self.power
        return RunReport.from_records(
            records,
            total_seconds=end.t_s - start.t_s,
            total_energy_j=self.node_energy(start, end),
            power_source=self.power_source,
            power_scope="" if power is None else power.scope,
            meters=None if power is None else sorted({k.split("/")[0] for k in power.keys}),
            policy=policy,
            predicted_epe=predicted_epe,
            predicted_source=predicted_source,
            baselines=baselines,
            trace=self.trace(),
            power_domains=() if power is None else power.keys,
            synthetic=synthetic,
            notes=notes,
            total_cpu_s=start.cpu_to(end),
        )
