"""The records a run report is made of: one phase's time, energy and settings
(:class:`PhaseRecord`), the node power trace, totals per kind of phase, and the baseline runs
a report is compared with (wu2018 Equation 2).

Why apart from :mod:`greenckpt.runtime.run_report`: these are the runtime's accounting units (the
session writes records, the report sums them); each converts to and from its JSON form here,
and the report (its totals, load and save) is built on them. Every energy figure carries its
source; definitions: docs/design/reports.md, "Run reports".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import numpy as np

from greenckpt.errors import InvalidValueError
from greenckpt.phases import IO_KINDS, RUN_KINDS, RunKind
from greenckpt.platform.meters.base import Source
from greenckpt.platform.sampler import Series
from greenckpt.runtime.settings import Settings

__all__ = [
    "BaselineRun",
    "Comparison",
    "KindTotal",
    "PhaseRecord",
    "PowerTrace",
    "PreviousLoss",
    "RunTotals",
    "combine_sources",
    "kind_total",
    "known_size",
    "opt_float",
    "percent_difference",
    "settings_from_dict",
    "settings_to_dict",
    "sum_cpu_s",
]

_SOURCES: tuple[Source, ...] = ("measured", "estimated")


class RunTotals(Protocol):
    """What a finished run's report gives a baseline (:class:`BaselineRun.from_report`):
    :class:`~greenckpt.runtime.run_report.RunReport` is one. A protocol, so that these records,
    which the report is built on, never import the report back."""

    @property
    def policy(self) -> str: ...
    @property
    def total_seconds(self) -> float: ...
    @property
    def total_energy_j(self) -> float | None: ...
    @property
    def power_source(self) -> Source | None: ...
    @property
    def observed_epe(self) -> float | None: ...
    @property
    def synthetic(self) -> bool: ...


def percent_difference(value: float, baseline: float) -> float:
    """wu2018 Equation 2: ``(value − baseline) / baseline × 100`` (NaN for a zero baseline)."""
    if baseline == 0 or not (math.isfinite(value) and math.isfinite(baseline)):
        return math.nan
    return (value - baseline) / baseline * 100.0


def combine_sources(sources: Iterable[Source | None]) -> Source | None:
    """``estimated`` when any figure is estimated, ``measured`` when all are, else None."""
    seen = list(sources)
    if not seen or any(s is None for s in seen):
        return None
    return "estimated" if "estimated" in seen else "measured"


# ---------------------------------------------------------------------------- records


def settings_to_dict(settings: Settings) -> dict[str, Any]:
    """A JSON-ready dict of every field of ``settings``, and ``levers``: the levers beyond
    the CPU frequency and C-states applied, name → value in words (derived; not read back)."""
    return {
        "io_processes": settings.io_processes,
        "source": settings.source,
        "frequency_hz": settings.frequency_hz,
        "governor": settings.governor,
        "codec": settings.codec,
        "cstates": settings.cstates,
        "notes": list(settings.notes),
        "predicted_seconds": settings.predicted_seconds,
        "predicted_energy_j": settings.predicted_energy_j,
        "predicted_power_w": settings.predicted_power_w,
        "power_source": settings.power_source,
        "waiting_ranks": settings.waiting_ranks,
        "waiting_power_w": settings.waiting_power_w,
        "waiting_source": settings.waiting_source,
        "wait_mode": settings.wait_mode,
        "waiting_frequency_hz": settings.waiting_frequency_hz,
        "uncore_khz": settings.uncore_khz,
        "power_limit_w": settings.power_limit_w,
        "gpu_memory_mhz": settings.gpu_memory_mhz,
        "gpu_clock_mhz": settings.gpu_clock_mhz,
        "gpu_power_limit_w": settings.gpu_power_limit_w,
        "writer_cpus": list(settings.writer_cpus),
        "levers": settings.levers,
    }


def settings_from_dict(doc: Mapping[str, Any]) -> Settings:
    """The inverse of :func:`settings_to_dict` (a report saved before the waiting fields or
    the levers existed loads with them ``None``)."""
    fields = dict(doc)
    fields.pop("levers", None)
    fields["notes"] = tuple(fields.get("notes", ()))
    fields["writer_cpus"] = tuple(fields.get("writer_cpus", ()))
    return Settings(**fields)


@dataclass(frozen=True)
class PhaseRecord:
    """One accounted span of a run: what it was, when, its energy and the settings applied.

    Times are seconds since the run started (the runtime's first meter reading). ``energy_j``
    holds the joules of every metered domain (``"<meter>/<domain>"``; domains overlap, e.g.
    RAPL core within package) with each domain's source in ``sources``; ``node_energy_j`` is
    the sum of the domains that stand for the node (``power_domains``; ``None`` when none
    can), and ``power_source`` its source. ``settings`` are the settings *applied* to the node
    for the phase (``None`` for compute, rework and lost, which change nothing); the notes in
    it say what the policy asked for that was not applied and why. ``notifiers``: how many
    overlapping begin notifications of this kind the span merges (reference counting);
    ``ok`` is False when any of them ended in failure. ``background``: the phase ran while the
    application went on (an asynchronous flush), so its time and energy overlap other records.
    ``gaps``: per domain, meter readings in the span that failed or were degraded.
    ``nodes``: the job's node indices whose notifiers announced the phase (empty when none
    said); ``reported_seconds``: the longest duration the notifiers reported by their own
    clocks (``None`` when none did) — ``seconds`` is always the runtime's own measurement.
    ``cpu_s``: the node's busy CPU-seconds over the span, all CPUs (the difference of
    ``/proc/stat``'s counters at its two boundaries: a measurement, not an energy estimate;
    ``None`` when they could not be read or in a report saved before it was recorded).
    ``size``: the bytes an I/O phase moved on this node, as its notifiers announced them
    (0: unknown).
    """

    kind: RunKind
    index: int
    start_s: float
    end_s: float
    energy_j: Mapping[str, float]
    sources: Mapping[str, Source]
    node_energy_j: float | None
    power_source: Source | None
    power_domains: tuple[str, ...] = ()
    level: int | None = None
    path: str | None = None
    size: int = 0
    settings: Settings | None = None
    ok: bool = True
    background: bool = False
    notifiers: int = 1
    gaps: Mapping[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    nodes: tuple[int, ...] = ()
    reported_seconds: float | None = None
    cpu_s: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in RUN_KINDS:
            raise InvalidValueError(
                f"phase kind must be one of {', '.join(RUN_KINDS)}, got {self.kind!r}"
            )
        if not (math.isfinite(self.start_s) and math.isfinite(self.end_s)):
            raise InvalidValueError("phase times must be finite")
        if self.end_s < self.start_s:
            raise InvalidValueError(f"phase ends ({self.end_s}) before it starts ({self.start_s})")
        if self.power_source is not None and self.power_source not in _SOURCES:
            raise InvalidValueError(
                f"power_source must be measured or estimated, got {self.power_source!r}"
            )

    @property
    def seconds(self) -> float:
        """Length of the span."""
        return self.end_s - self.start_s

    @property
    def mean_power_w(self) -> float | None:
        """Mean node power over the span (None without a node figure or for a zero span)."""
        if self.node_energy_j is None or self.seconds <= 0:
            return None
        return self.node_energy_j / self.seconds

    @property
    def meters(self) -> tuple[str, ...]:
        """The meters behind the node figure (every meter when there is none)."""
        keys = self.power_domains or tuple(self.energy_j)
        return tuple(sorted({k.split("/", 1)[0] for k in keys}))

    @property
    def reliable(self) -> bool:
        """True when no reading in the span failed or was degraded."""
        return not any(self.gaps.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record; every energy carries its source."""
        return {
            "index": self.index,
            "kind": self.kind,
            "level": self.level,
            "path": self.path,
            "size": self.size,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "seconds": self.seconds,
            "node_energy_j": self.node_energy_j,
            "mean_power_w": self.mean_power_w,
            "power_source": self.power_source,
            "power_domains": list(self.power_domains),
            "meters": list(self.meters),
            "domains": {
                k: {"joules": v, "source": self.sources.get(k), "gaps": self.gaps.get(k, 0)}
                for k, v in self.energy_j.items()
            },
            "background": self.background,
            "ok": self.ok,
            "notifiers": self.notifiers,
            "nodes": list(self.nodes),
            "reported_seconds": self.reported_seconds,
            "cpu_s": self.cpu_s,
            "reliable": self.reliable,
            "settings": None if self.settings is None else settings_to_dict(self.settings),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> PhaseRecord:
        """The inverse of :meth:`to_dict`."""
        domains: Mapping[str, Mapping[str, Any]] = doc.get("domains", {})
        settings = doc.get("settings")
        return cls(
            kind=doc["kind"],
            index=int(doc["index"]),
            start_s=float(doc["start_s"]),
            end_s=float(doc["end_s"]),
            energy_j={k: float(v["joules"]) for k, v in domains.items()},
            sources={k: cast(Source, v["source"]) for k, v in domains.items()},
            node_energy_j=opt_float(doc.get("node_energy_j")),
            power_source=doc.get("power_source"),
            power_domains=tuple(doc.get("power_domains", ())),
            level=doc.get("level"),
            path=doc.get("path"),
            size=int(doc.get("size") or 0),  # null: unknown, as 0
            settings=None if settings is None else settings_from_dict(settings),
            ok=bool(doc.get("ok", True)),
            background=bool(doc.get("background", False)),
            notifiers=int(doc.get("notifiers", 1)),
            nodes=tuple(int(n) for n in doc.get("nodes", ())),
            reported_seconds=opt_float(doc.get("reported_seconds")),
            cpu_s=opt_float(doc.get("cpu_s")),
            gaps={k: int(v.get("gaps", 0)) for k, v in domains.items()},
            notes=tuple(doc.get("notes", ())),
        )


def opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


# ---------------------------------------------------------------------------- trace


@dataclass(frozen=True)
class PowerTrace:
    """Node power over the run, from the sampler's series (for the plot).

    ``watts[i]`` is the mean node power over ``(t_s[i-1], t_s[i]]`` (``t_s`` are the end
    times of the intervals, seconds since the run started), computed by
    :meth:`~greenckpt.platform.sampler.Series.power_w` from counter deltas and summed over the
    node's domains. ``source`` and ``scope`` say what the watts are.
    """

    t_s: tuple[float, ...]
    watts: tuple[float, ...]
    source: Source
    scope: str

    @classmethod
    def from_series(cls, series: Series, keys: Sequence[str], scope: str) -> PowerTrace:
        """Sum the domains ``keys`` of a sampler series into one node power trace."""
        t_end, watts = series.power_w()
        columns = [series.domains.index(k) for k in keys]
        node = watts[:, columns].sum(axis=1) if t_end.size else np.empty(0)
        source = combine_sources(series.sources[k] for k in keys) or "estimated"
        return cls(tuple(float(t) for t in t_end), tuple(float(w) for w in node), source, scope)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "scope": self.scope,
            "t_s": list(self.t_s),
            "power_w": list(self.watts),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> PowerTrace:
        return cls(
            tuple(float(t) for t in doc["t_s"]),
            tuple(float(w) for w in doc["power_w"]),
            doc["source"],
            str(doc.get("scope", "")),
        )


# ---------------------------------------------------------------------------- totals


@dataclass(frozen=True)
class KindTotal:
    """Totals over the records of one kind (``level`` None) or one kind at one level.

    ``cpu_s``: the records' CPU-seconds summed (``None`` when any record has none).
    ``bytes``: for an I/O kind, the bytes of the records whose size is known, summed;
    ``bytes_unknown``: how many records' size is unknown (0 or missing: a notifier that could
    not tell); both 0 for the other kinds, which move no checkpoint data.
    """

    kind: RunKind
    level: int | None
    count: int
    failed: int
    seconds: float
    energy_j: float | None
    source: Source | None
    background: bool
    cpu_s: float | None = None
    bytes: int = 0
    bytes_unknown: int = 0

    @property
    def mean_power_w(self) -> float | None:
        """Energy / seconds (None without a node figure or for zero seconds)."""
        if self.energy_j is None or self.seconds <= 0:
            return None
        return self.energy_j / self.seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "level": self.level,
            "count": self.count,
            "failed": self.failed,
            "seconds": self.seconds,
            "energy_j": self.energy_j,
            "mean_power_w": self.mean_power_w,
            "source": self.source,
            "background": self.background,
            "cpu_s": self.cpu_s,
            "bytes": self.bytes,
            "bytes_unknown": self.bytes_unknown,
        }


def known_size(size: int | None) -> int | None:
    """A record's bytes when known: None for a size that is missing or below 1 (a notifier
    that could not tell)."""
    return size if size is not None and size >= 1 else None


def kind_total(kind: RunKind, level: int | None, records: Sequence[PhaseRecord]) -> KindTotal:
    energies = [r.node_energy_j for r in records]
    return KindTotal(
        kind=kind,
        level=level,
        count=len(records),
        failed=sum(not r.ok for r in records),
        seconds=sum(r.seconds for r in records),
        energy_j=None if any(e is None for e in energies) else sum(e for e in energies if e),
        source=combine_sources(r.power_source for r in records),
        background=all(r.background for r in records),
        cpu_s=sum_cpu_s(records),
        bytes=sum(known_size(r.size) or 0 for r in records) if kind in IO_KINDS else 0,
        bytes_unknown=(sum(known_size(r.size) is None for r in records) if kind in IO_KINDS else 0),
    )


def sum_cpu_s(records: Iterable[PhaseRecord]) -> float | None:
    """The records' CPU-seconds summed; ``None`` when any (or every) record has none."""
    values = [r.cpu_s for r in records]
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


# ---------------------------------------------------------------------------- baselines


@dataclass(frozen=True)
class BaselineRun:
    """The figures of a baseline run (wu2018's "Original"): run time and node energy.

    ``source``: where its energy came from; ``synthetic``: made on a fake platform.
    """

    label: str
    seconds: float
    energy_j: float
    source: Source
    epe_w: float | None = None
    synthetic: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise InvalidValueError(f"a baseline run lasts > 0 seconds, got {self.seconds!r}")
        if not (math.isfinite(self.energy_j) and self.energy_j >= 0):
            raise InvalidValueError(
                f"a baseline energy is a finite number >= 0, got {self.energy_j!r}"
            )

    @property
    def mean_power_w(self) -> float:
        return self.energy_j / self.seconds

    @classmethod
    def from_report(cls, report: RunTotals, label: str | None = None) -> BaselineRun:
        """A finished run's report as a baseline (its run totals and observed EPE)."""
        if report.total_energy_j is None or report.power_source is None:
            raise InvalidValueError("that run has no node energy figure: it cannot be a baseline")
        return cls(
            label=label or report.policy or "baseline",
            seconds=report.total_seconds,
            energy_j=report.total_energy_j,
            source=report.power_source,
            epe_w=report.observed_epe,
            synthetic=report.synthetic,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "seconds": self.seconds,
            "energy_j": self.energy_j,
            "mean_power_w": self.mean_power_w,
            "source": self.source,
            "epe_w": self.epe_w,
            "synthetic": self.synthetic,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> BaselineRun:
        return cls(
            label=str(doc["label"]),
            seconds=float(doc["seconds"]),
            energy_j=float(doc["energy_j"]),
            source=doc["source"],
            epe_w=opt_float(doc.get("epe_w")),
            synthetic=bool(doc.get("synthetic", False)),
        )


@dataclass(frozen=True)
class Comparison:
    """This run against one baseline, in percent by wu2018 Equation 2 (negative: less).

    ``source`` is ``estimated`` when either run's energy is; ``synthetic`` when either was
    made on a fake platform.
    """

    baseline: str
    runtime_pct: float
    power_pct: float | None
    energy_pct: float | None
    epe_pct: float | None
    source: Source | None
    synthetic: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "equation": "wu2018 Eq. 2: (value - baseline) / baseline * 100",
            "runtime_pct": self.runtime_pct,
            "node_power_pct": self.power_pct,
            "energy_pct": self.energy_pct,
            "epe_pct": self.epe_pct,
            "source": self.source,
            "synthetic": self.synthetic,
        }


# ---------------------------------------------------------------------------- previous run


@dataclass(frozen=True)
class PreviousLoss:
    """The work an earlier run lost, accounted in the run that restarted from its checkpoint.

    Why apart from the ``lost`` records: those are spans of this run; this span was spent by
    the earlier run (a job that died and was resubmitted), so it is shown beside this run's
    figures, never added to them. ``source``: ``"previous run <report>"`` (or ``"previous job
    <report>, node <k>"``); ``report``: that report's path. ``from_s``/``to_s``: the lost span
    in the earlier run's own clock (from the end of the state this run's restart read back
    — its newest checkpoint that committed, of the level the restart read when named — or
    from its start when it committed none, to its end); ``seconds`` their difference.
    ``energy_j`` with ``energy_source`` (``measured``/``estimated``) and ``energy_basis`` (how
    it was obtained: the earlier run's phase records, its power trace, or an estimate from its
    mean power; ``None`` when nothing allows one). ``restart_level``: the level this run's
    restart read (``None``: not named); ``checkpoint_level``: the level of the earlier run's
    checkpoint the span starts at (``None``: none); ``read_previous``: whether the restart
    read a checkpoint the earlier run committed (``None``: cannot be told). ``ended``: how the
    earlier run ended (``completed``: nothing lost; ``failed``, ``cancelled`` or ``unknown``).
    ``note``: the account in one sentence.
    """

    source: str
    report: str
    seconds: float
    from_s: float
    to_s: float
    energy_j: float | None
    energy_source: Source | None
    energy_basis: str
    ended: str
    note: str
    restart_level: int | None = None
    checkpoint_level: int | None = None
    read_previous: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "report": self.report,
            "seconds": self.seconds,
            "from_s": self.from_s,
            "to_s": self.to_s,
            "energy_j": self.energy_j,
            "energy_source": self.energy_source,
            "energy_basis": self.energy_basis,
            "ended": self.ended,
            "restart_level": self.restart_level,
            "checkpoint_level": self.checkpoint_level,
            "read_previous_checkpoint": self.read_previous,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> PreviousLoss:
        read = doc.get("read_previous_checkpoint")
        return cls(
            source=str(doc["source"]),
            report=str(doc["report"]),
            seconds=float(doc["seconds"]),
            from_s=float(doc["from_s"]),
            to_s=float(doc["to_s"]),
            energy_j=opt_float(doc.get("energy_j")),
            energy_source=doc.get("energy_source"),
            energy_basis=str(doc.get("energy_basis", "")),
            ended=str(doc.get("ended", "unknown")),
            note=str(doc.get("note", "")),
            restart_level=_opt_int(doc.get("restart_level")),
            checkpoint_level=_opt_int(doc.get("checkpoint_level")),
            read_previous=None if read is None else bool(read),
        )


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)
