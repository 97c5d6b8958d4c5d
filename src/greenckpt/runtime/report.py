"""The per-phase report of a run: time and energy per phase, EPE observed against the model's,
percentages against a baseline run, saved as JSON/CSV and drawn as power over time.

Why: saito2013's runtime (section 5) only pays off if its savings can be seen, and the
companion papers show them the same way — per-phase time and energy (mills2013's power
profiles, wu2018's Tables 5-8 of runtime, node power and energy against an original run). This
module turns the runtime's :class:`PhaseRecord` list (see :mod:`greenckpt.runtime.session`)
into those figures; it reads nothing from the machine, so a report can also be rebuilt from a
saved JSON file (:func:`load_report`) and compared with another run.

Definitions:

* **run total**: the time from the runtime's start to its close and the node energy over it
  (the session passes both, from the same meter readings as the records; a report rebuilt
  from records alone sums the records that do not run in the background).
* **useful compute**: the work that survived — the seconds of ``compute`` and ``rework``
  records. A failure costs the run twice over and is accounted once each way: the compute
  since the checkpoint the restart read back, and the downtime until the restart, did not
  survive and are ``lost`` (the runtime re-labels them at the restart, see
  :mod:`greenckpt.runtime.session`); ``rework``, the same iterations done again after the
  restart, is the copy that survived, so it is useful compute, shown apart as "of which
  rework". Counting the redone iterations as neither useful nor lost would charge a failure
  its lost work twice; counting the lost copy as useful (what format 1 did) made a run with a
  failure look *cheaper* per unit of work than the same run without. With this definition the
  useful compute of a run with failures matches that of the same run without, and its
  observed EPE is never lower. **Observed EPE** = run energy / useful compute seconds, in
  watts (joules per second of useful work): the quantity the planner's ``Plan.best.epe``
  predicts (``J / T_A``, where the lost attempts are in ``J`` and ``T_A`` counts each unit of
  work once) — shown side by side when the prediction is given.
* **percentages against a baseline run** follow wu2018's Equation 2:
  ``(value − baseline) / baseline × 100`` for runtime, mean node power, energy and EPE —
  negative means this run used less. (The planner's ``Savings`` use the opposite sign.)
* **node energy** is the sum of the metered domains that stand for the node without counting
  anything twice (:func:`greenckpt.profile.power.choose_power_domains`); its scope is stated.

Honesty: every figure carries its source — ``measured`` or ``estimated`` — in the JSON, the
CSV, the text table and the plot's title and legend; a report made on a fake platform is
labelled SYNTHETIC everywhere; background phases (an asynchronous flush) overlap other phases,
so their time and energy are shown but never added to the run's totals; readings with gaps
(a failed or degraded meter read) are flagged.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from greenckpt.errors import InvalidValueError
from greenckpt.files import read_regular
from greenckpt.io.atomic import write_atomic
from greenckpt.jsonout import dumps
from greenckpt.phases import IO_KINDS, RUN_KINDS, USEFUL_KINDS, RunKind
from greenckpt.platform.meters.base import Source
from greenckpt.platform.sampler import Series
from greenckpt.runtime.settings import Settings

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "REPORT_FORMAT",
    "RUN_KINDS",
    "USEFUL_KINDS",
    "BaselineRun",
    "Comparison",
    "KindTotal",
    "PhaseRecord",
    "PowerTrace",
    "RunKind",
    "RunReport",
    "load_report",
    "percent_difference",
    "power_limits",
]

REPORT_FORMAT = "greenckpt-run-report"
REPORT_VERSION = 2
"""2: ``lost`` records, and useful compute = compute + rework. Version 1 (no ``lost``: the
lost work and downtime of a failure were inside ``compute``) still loads, with its old
definition of useful compute (``compute`` only) and a note saying what that means."""

_IO_KINDS = IO_KINDS
_SOURCES: tuple[Source, ...] = ("measured", "estimated")


def percent_difference(value: float, baseline: float) -> float:
    """wu2018 Equation 2: ``(value − baseline) / baseline × 100`` (NaN for a zero baseline)."""
    if baseline == 0 or not (math.isfinite(value) and math.isfinite(baseline)):
        return math.nan
    return (value - baseline) / baseline * 100.0


def _combine(sources: Iterable[Source | None]) -> Source | None:
    """``estimated`` when any figure is estimated, ``measured`` when all are, else None."""
    seen = list(sources)
    if not seen or any(s is None for s in seen):
        return None
    return "estimated" if "estimated" in seen else "measured"


# ---------------------------------------------------------------------------- records


def settings_to_dict(settings: Settings) -> dict[str, Any]:
    """A JSON-ready dict of every field of ``settings``."""
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
    }


def settings_from_dict(doc: Mapping[str, Any]) -> Settings:
    """The inverse of :func:`settings_to_dict`."""
    fields = dict(doc)
    fields["notes"] = tuple(fields.get("notes", ()))
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
            node_energy_j=_opt_float(doc.get("node_energy_j")),
            power_source=doc.get("power_source"),
            power_domains=tuple(doc.get("power_domains", ())),
            level=doc.get("level"),
            path=doc.get("path"),
            size=int(doc.get("size", 0)),
            settings=None if settings is None else settings_from_dict(settings),
            ok=bool(doc.get("ok", True)),
            background=bool(doc.get("background", False)),
            notifiers=int(doc.get("notifiers", 1)),
            nodes=tuple(int(n) for n in doc.get("nodes", ())),
            reported_seconds=_opt_float(doc.get("reported_seconds")),
            gaps={k: int(v.get("gaps", 0)) for k, v in domains.items()},
            notes=tuple(doc.get("notes", ())),
        )


def _opt_float(value: Any) -> float | None:
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
        source = _combine(series.sources[k] for k in keys) or "estimated"
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
    """Totals over the records of one kind (``level`` None) or one kind at one level."""

    kind: RunKind
    level: int | None
    count: int
    failed: int
    seconds: float
    energy_j: float | None
    source: Source | None
    background: bool

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
        }


def _total(kind: RunKind, level: int | None, records: Sequence[PhaseRecord]) -> KindTotal:
    energies = [r.node_energy_j for r in records]
    return KindTotal(
        kind=kind,
        level=level,
        count=len(records),
        failed=sum(not r.ok for r in records),
        seconds=sum(r.seconds for r in records),
        energy_j=None if any(e is None for e in energies) else sum(e for e in energies if e),
        source=_combine(r.power_source for r in records),
        background=all(r.background for r in records),
    )


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
    def from_report(cls, report: RunReport, label: str | None = None) -> BaselineRun:
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
            epe_w=_opt_float(doc.get("epe_w")),
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


# ---------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class RunReport:
    """Everything a run's report shows; build it with :meth:`from_records` (the runtime's
    :meth:`~greenckpt.runtime.session.Runtime.report` does).

    ``total_seconds``/``total_energy_j``: the run (start to close) and its node energy;
    ``power_source``/``power_scope``/``meters``: what that energy is. ``predicted_epe``: the
    model's EPE for this run (``Plan.best.epe``, watts), ``predicted_source`` where the powers
    behind it came from (``measured``, ``estimated``, ``synthetic``). ``baselines``: runs to
    compare against by wu2018 Equation 2. ``notes``: run-level statements (no frequency
    control, control off, overlapping phases, ...). ``format_version``: the accounting the
    records follow — 2 (this version) has ``lost`` records and counts rework as useful; 1 (a
    report saved by an older greenckpt) has the lost work and downtime inside ``compute``, so
    its useful compute is the compute records alone (see :data:`REPORT_VERSION`).
    """

    records: tuple[PhaseRecord, ...]
    total_seconds: float
    total_energy_j: float | None
    power_source: Source | None
    power_scope: str = ""
    meters: tuple[str, ...] = ()
    policy: str = ""
    predicted_epe: float | None = None
    predicted_source: str | None = None
    baselines: tuple[BaselineRun, ...] = ()
    trace: PowerTrace | None = None
    synthetic: bool = False
    notes: tuple[str, ...] = ()
    format_version: int = REPORT_VERSION

    @classmethod
    def from_records(
        cls,
        records: Iterable[PhaseRecord],
        *,
        total_seconds: float | None = None,
        total_energy_j: float | None = None,
        power_source: Source | None = None,
        power_scope: str = "",
        meters: Sequence[str] | None = None,
        policy: str = "",
        predicted_epe: float | None = None,
        predicted_source: str | None = None,
        baselines: Iterable[BaselineRun] = (),
        trace: PowerTrace | Series | None = None,
        power_domains: Sequence[str] | None = None,
        synthetic: bool = False,
        notes: Iterable[str] = (),
    ) -> RunReport:
        """A report over ``records`` (sorted by start time).

        Run totals default to the sums over the records that are not in the background; a
        :class:`~greenckpt.platform.sampler.Series` given as ``trace`` is summed over
        ``power_domains`` (default: those of the records) into the node power trace.
        """
        ordered = tuple(sorted(records, key=lambda r: (r.start_s, r.index)))
        fg = [r for r in ordered if not r.background]
        extra: list[str] = list(notes)
        if total_seconds is None:
            total_seconds = sum(r.seconds for r in fg)
        if total_energy_j is None and fg and all(r.node_energy_j is not None for r in fg):
            total_energy_j = sum(r.node_energy_j or 0.0 for r in fg)
        if power_source is None:
            power_source = _combine(r.power_source for r in ordered)
        domains = tuple(power_domains) if power_domains is not None else _domains_of(ordered)
        if meters is None:
            meters = sorted({k.split("/", 1)[0] for k in domains})
        overlap = _overlap_seconds(fg)
        if overlap > 0:
            extra.append(
                f"foreground phases overlapped for {overlap:.3f} s (several kinds of phase at "
                "once): their time and energy are counted in each"
            )
        if any(r.background for r in ordered):
            extra.append(
                "background phases (an asynchronous flush) ran while the application went on: "
                "their time and energy overlap other phases and are not added to the run totals"
            )
        unreliable = [r for r in ordered if not r.reliable]
        if unreliable:
            extra.append(
                f"{len(unreliable)} record(s) include failed or degraded meter readings: their "
                "energy is a lower bound"
            )
        power_trace: PowerTrace | None
        if isinstance(trace, Series):
            power_trace = PowerTrace.from_series(trace, domains, power_scope) if domains else None
        else:
            power_trace = trace
        return cls(
            records=ordered,
            total_seconds=float(total_seconds),
            total_energy_j=total_energy_j,
            power_source=power_source,
            power_scope=power_scope,
            meters=tuple(meters),
            policy=policy,
            predicted_epe=predicted_epe,
            predicted_source=predicted_source,
            baselines=tuple(baselines),
            trace=power_trace,
            synthetic=synthetic,
            notes=tuple(dict.fromkeys(extra)),
        )

    # -- figures ---------------------------------------------------------------------------

    def by_kind(self) -> dict[RunKind, KindTotal]:
        """Totals per kind of phase, in :data:`RUN_KINDS` order (kinds without records left
        out)."""
        out: dict[RunKind, KindTotal] = {}
        for kind in RUN_KINDS:
            rows = [r for r in self.records if r.kind == kind]
            if rows:
                out[kind] = _total(kind, None, rows)
        return out

    def by_level(self) -> list[KindTotal]:
        """Totals per I/O kind and level (checkpoints per level L1..L4, restarts, flushes)."""
        out: list[KindTotal] = []
        for kind in _IO_KINDS:
            levels = sorted({r.level for r in self.records if r.kind == kind and r.level})
            for level in levels:
                rows = [r for r in self.records if r.kind == kind and r.level == level]
                out.append(_total(cast(RunKind, kind), level, rows))
        return out

    def count(self, kind: RunKind) -> int:
        """How many records of ``kind`` the run has (a span that merged overlapping
        notifications of several notifiers counts once)."""
        total = self.by_kind().get(kind)
        return 0 if total is None else total.count

    @property
    def useful_seconds(self) -> float:
        """Seconds of useful compute, the work that survived: compute and rework records
        (lost excluded). A format-1 report counts its compute records only: their lost work
        is inside them, and adding the rework would count the redone iterations twice."""
        kinds: tuple[RunKind, ...] = USEFUL_KINDS if self.format_version >= 2 else ("compute",)
        return sum(r.seconds for r in self.records if r.kind in kinds and not r.background)

    @property
    def rework_seconds(self) -> float:
        """Seconds of rework: useful compute that redid what a failure had lost."""
        return sum(r.seconds for r in self.records if r.kind == "rework")

    @property
    def lost_seconds(self) -> float:
        """Seconds lost to failures: compute after the checkpoint a restart read back, and
        the downtime before the restart (0 for a format-1 report, which has no such record)."""
        return sum(r.seconds for r in self.records if r.kind == "lost")

    @property
    def mean_power_w(self) -> float | None:
        """Run energy / run time."""
        if self.total_energy_j is None or self.total_seconds <= 0:
            return None
        return self.total_energy_j / self.total_seconds

    @property
    def observed_epe(self) -> float | None:
        """Run energy per second of useful compute (watts); None without compute or energy."""
        if self.total_energy_j is None or self.useful_seconds <= 0:
            return None
        return self.total_energy_j / self.useful_seconds

    @property
    def epe_vs_predicted_pct(self) -> float | None:
        """Observed EPE against the model's, by Equation 2 (the prediction as baseline)."""
        if self.observed_epe is None or self.predicted_epe is None:
            return None
        return percent_difference(self.observed_epe, self.predicted_epe)

    def comparisons(self) -> list[Comparison]:
        """This run against every baseline, by wu2018 Equation 2."""
        out: list[Comparison] = []
        for b in self.baselines:
            power = self.mean_power_w
            epe = self.observed_epe
            out.append(
                Comparison(
                    baseline=b.label,
                    runtime_pct=percent_difference(self.total_seconds, b.seconds),
                    power_pct=None if power is None else percent_difference(power, b.mean_power_w),
                    energy_pct=(
                        None
                        if self.total_energy_j is None
                        else percent_difference(self.total_energy_j, b.energy_j)
                    ),
                    epe_pct=(
                        None if epe is None or b.epe_w is None else percent_difference(epe, b.epe_w)
                    ),
                    source=_combine([self.power_source, b.source]),
                    synthetic=self.synthetic or b.synthetic,
                )
            )
        return out

    def _label(self, source: Source | str | None) -> str:
        text = source or "no node figure"
        return f"{text}, SYNTHETIC" if self.synthetic else text

    # -- JSON and CSV ----------------------------------------------------------------------

    def to_dict(self, *, include_trace: bool = True) -> dict[str, Any]:
        """JSON-ready document; every figure next to its source."""
        return {
            "format": REPORT_FORMAT,
            "format_version": self.format_version,
            "synthetic": self.synthetic,
            "policy": self.policy,
            "power": {
                "source": self.power_source,
                "scope": self.power_scope,
                "meters": list(self.meters),
            },
            "total": {
                "seconds": self.total_seconds,
                "energy_j": self.total_energy_j,
                "mean_power_w": self.mean_power_w,
                "source": self.power_source,
            },
            "useful_compute_s": self.useful_seconds,
            "rework_s": self.rework_seconds,
            "lost_s": self.lost_seconds,
            "epe": {
                "observed_w": self.observed_epe,
                "observed_source": self.power_source,
                "predicted_w": self.predicted_epe,
                "predicted_source": self.predicted_source,
                "observed_vs_predicted_pct": self.epe_vs_predicted_pct,
                "definition": _EPE_DEFINITION[min(self.format_version, 2)],
            },
            "by_kind": {k: t.to_dict() for k, t in self.by_kind().items()},
            "by_level": [t.to_dict() for t in self.by_level()],
            "baselines": [b.to_dict() for b in self.baselines],
            "comparisons": [c.to_dict() for c in self.comparisons()],
            "notes": list(self.notes),
            "records": [r.to_dict() for r in self.records],
            "trace": None if self.trace is None or not include_trace else self.trace.to_dict(),
        }

    def to_json(self, *, include_trace: bool = True) -> str:
        """Strict JSON (non-finite numbers as null) of :meth:`to_dict`."""
        return dumps(self.to_dict(include_trace=include_trace))

    def write_json(self, path: str | os.PathLike[str], *, include_trace: bool = True) -> Path:
        """Write :meth:`to_json` atomically; return the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, self.to_json(include_trace=include_trace) + "\n")
        return target

    def csv_columns(self) -> list[str]:
        """The CSV header: fixed columns, then one ``energy_j[<domain>]`` per metered domain."""
        return [*_CSV_FIXED, *(f"energy_j[{d}]" for d in self._all_domains())]

    def _all_domains(self) -> list[str]:
        return list(dict.fromkeys(d for r in self.records for d in r.energy_j))

    def write_csv(self, path: str | os.PathLike[str]) -> Path:
        """One row per phase record (atomically); every energy column next to its source."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(self.csv_columns())
        domains = self._all_domains()
        for r in self.records:
            s = r.settings
            writer.writerow(
                [
                    r.index,
                    r.kind,
                    _cell(r.level),
                    _cell(r.start_s),
                    _cell(r.end_s),
                    _cell(r.seconds),
                    _cell(r.node_energy_j),
                    _cell(r.mean_power_w),
                    self._label(r.power_source),
                    " ".join(r.meters),
                    int(r.background),
                    int(r.ok),
                    r.notifiers,
                    " ".join(str(n) for n in r.nodes),
                    _cell(r.reported_seconds),
                    int(r.reliable),
                    _cell(r.size),
                    "" if s is None else _cell(s.frequency_hz),
                    "" if s is None else _cell(s.governor),
                    "" if s is None else s.io_processes,
                    "" if s is None else (s.codec or "none"),
                    "" if s is None else _cell(s.cstates),
                    "" if s is None else s.source,
                    "; ".join([*r.notes, *(() if s is None else s.notes)]),
                    *(_cell(r.energy_j.get(d)) for d in domains),
                ]
            )
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, buf.getvalue())
        return target

    # -- text ------------------------------------------------------------------------------

    def render_text(self) -> str:
        """A plain-text table for the terminal: per kind (and per level) count, seconds,
        joules, watts and source, then the run's totals, EPE, comparisons and notes."""
        lines: list[str] = []
        title = "greenckpt run report"
        if self.policy:
            title += f" (policy {self.policy})"
        if self.synthetic:
            title += " [SYNTHETIC: fake platform, no real measurement]"
        lines.append(title)
        scope = f": {self.power_scope}" if self.power_scope else ""
        meters = f" from {', '.join(self.meters)}" if self.meters else ""
        lines.append(f"node power {self._label(self.power_source)}{meters}{scope}")
        header = ("phase", "count", "seconds", "joules", "W", "source")
        rows: list[tuple[str, ...]] = [header]
        levels = self.by_level()
        for kind, total in self.by_kind().items():
            rows.append(self._row(kind, total))
            for lv in (t for t in levels if t.kind == kind):
                rows.append(self._row(f"  L{lv.level}", lv))
        energy = self.total_energy_j
        rows.append(
            (
                "run total",
                "",
                f"{self.total_seconds:.3f}",
                _num(energy, 1),
                _num(self.mean_power_w, 1),
                self._label(self.power_source),
            )
        )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            cells = [
                row[i].ljust(widths[i]) if i in (0, 5) else row[i].rjust(widths[i])
                for i in range(len(header))
            ]
            lines.append("  ".join(cells).rstrip())
        lines.append(
            f"useful compute {self.useful_seconds:.3f} s (the work that survived; of which "
            f"rework {self.rework_seconds:.3f} s), lost {self.lost_seconds:.3f} s (work after "
            "the checkpoint a restart read back, and the downtime before it)"
        )
        epe = f"EPE observed {_num(self.observed_epe, 2)} W ({self._label(self.power_source)})"
        if self.predicted_epe is not None:
            epe += f"; predicted {self.predicted_epe:.2f} W (model"
            epe += f", {self.predicted_source} powers)" if self.predicted_source else ")"
            pct = self.epe_vs_predicted_pct
            if pct is not None:
                epe += f"; observed vs predicted {_pct(pct)}"
        lines.append(epe)
        for c in self.comparisons():
            label = self._label(c.source) if not c.synthetic else f"{c.source}, SYNTHETIC"
            lines.append(
                f"vs baseline {c.baseline} (wu2018 Eq. 2, {label}): runtime "
                f"{_pct(c.runtime_pct)}, node power {_pct(c.power_pct)}, energy "
                f"{_pct(c.energy_pct)}, EPE {_pct(c.epe_pct)}"
            )
        if self.notes:
            lines.append("notes:")
            lines.extend(f"  - {n}" for n in self.notes)
        return "\n".join(lines) + "\n"

    def _row(self, name: str, t: KindTotal) -> tuple[str, ...]:
        source = self._label(t.source)
        if t.background:
            source += " (background: overlaps other phases)"
        count = f"{t.count}" + (f" ({t.failed} failed)" if t.failed else "")
        return (
            name,
            count,
            f"{t.seconds:.3f}",
            _num(t.energy_j, 1),
            _num(t.mean_power_w, 1),
            source,
        )

    # -- plot ------------------------------------------------------------------------------

    def plot(self, path: str | os.PathLike[str]) -> Path:
        """Draw node power over the run with the phases shaded (see :meth:`figure`); PNG or
        SVG by the file's suffix."""
        target = Path(path)
        suffix = target.suffix.lower()
        if suffix not in (".png", ".svg"):
            raise InvalidValueError(f"plot to a .png or .svg file, not {target.name!r}")
        import matplotlib as mpl  # noqa: PLC0415 - only when plotting (slow import)
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
        from matplotlib.backends.backend_svg import FigureCanvasSVG  # noqa: PLC0415

        # Text stays text in SVG files (searchable, and the labels can be checked).
        with mpl.rc_context({"svg.fonttype": "none"}):
            fig = self.figure()
            canvas = FigureCanvasAgg(fig) if suffix == ".png" else FigureCanvasSVG(fig)
            target.parent.mkdir(parents=True, exist_ok=True)
            canvas.print_figure(str(target), format=suffix[1:])
        return target

    def figure(self) -> Figure:
        """Node power over the run (the sampled trace, or each record's mean power without
        one) with every phase shaded, as a matplotlib figure.

        Why no label on each phase: a run has a checkpoint every few seconds, and one label per
        span overlapped into an unreadable strip. Each kind of phase (and each checkpoint
        level, by its hatching) gets one legend entry instead, outside the plotting area. The
        y axis leaves room above the highest and below the lowest power (:func:`power_limits`),
        so a flat trace never lies on the frame.
        """
        from matplotlib.figure import Figure  # noqa: PLC0415 - only when plotting
        from matplotlib.patches import Patch  # noqa: PLC0415

        fig = Figure(figsize=(10, 4.5), layout="constrained")
        ax = fig.add_subplot()
        source = self._label(self.power_source)
        handles: list[Any] = []
        drawn: list[float] = []
        if self.trace is not None and self.trace.t_s:
            # watts[i] is the mean over (t[i-1], t[i]]: the first interval starts at 0.
            (line,) = ax.step(
                (0.0, *self.trace.t_s),
                (self.trace.watts[0], *self.trace.watts),
                where="pre",
                color="black",
                linewidth=1.0,
                label=f"node power ({self._label(self.trace.source)})",
            )
            handles.append(line)
            drawn.extend(self.trace.watts)
        else:
            xs: list[float] = []
            ys: list[float] = []
            for r in self.records:
                if r.background or r.mean_power_w is None:
                    continue
                xs += [r.start_s, r.end_s, math.nan]
                ys += [r.mean_power_w, r.mean_power_w, math.nan]
            (line,) = ax.plot(
                xs, ys, color="black", linewidth=1.5, label=f"mean power per phase ({source})"
            )
            handles.append(line)
            drawn.extend(ys)
        entries: dict[tuple[RunKind, int | None, bool], Patch] = {}
        for r in self.records:
            level = r.level if r.kind in _IO_KINDS else None
            style = _shade(r.kind, level, r.background)
            ax.axvspan(r.start_s, r.end_s, linewidth=0, **style)
            key = (r.kind, level, r.background)
            if key not in entries:
                label = r.kind + (f" L{level}" if level else "")
                label += " (background)" if r.background else ""
                entries[key] = Patch(label=label, **style)
        order = {k: i for i, k in enumerate(RUN_KINDS)}
        for key in sorted(entries, key=lambda k: (order[k[0]], k[1] or 0, k[2])):
            handles.append(entries[key])
        ax.set_xlabel("time since the run started (s)")
        ax.set_ylabel(f"node power (W, {source})")
        ax.set_ylim(*power_limits(drawn))
        title = "Node power over the run"
        if self.synthetic:
            title = "SYNTHETIC (fake platform): " + title
        if self.policy:
            title += f", policy {self.policy}"
        title += f" (power {source}"
        title += f": {self.power_scope})" if self.power_scope else ")"
        ax.set_title(title, fontsize=9)
        fig.legend(
            handles=handles, loc="outside lower center", ncols=min(len(handles), 5), fontsize=8
        )
        return fig


def power_limits(watts: Iterable[float]) -> tuple[float, float]:
    """The y limits of a power plot: room above the highest value and below the lowest.

    The axis starts at 0 W (so that a difference in power is not magnified), unless the
    lowest value is within the margin of 0, where it starts below it; the margin is 10 % of
    the range of the values, at least 5 % of the largest and at least 0.5 W, so a flat trace
    (range 0) is drawn inside the frame, not on it. No finite value: (0, 1).
    """
    finite = [w for w in watts if math.isfinite(w)]
    if not finite:
        return 0.0, 1.0
    low, high = min(finite), max(finite)
    margin = max(0.1 * (high - low), 0.05 * max(abs(low), abs(high)), 0.5)
    return min(0.0, low - margin), high + margin


_HATCHES: dict[int, str] = {2: "..", 3: "xx", 4: "//"}
"""Hatching per checkpoint level (level 1 plain), to tell levels apart without labels."""


def _shade(kind: str, level: int | None, background: bool) -> dict[str, Any]:
    """How a span of ``kind`` at ``level`` is shaded (and drawn in the legend)."""
    return {
        "facecolor": _COLORS[kind],
        "edgecolor": _COLORS[kind],
        "alpha": 0.15 if background else 0.3,
        "hatch": _HATCHES.get(level or 0),
    }


_EPE_DEFINITION = {
    1: "run node energy / seconds of compute records (format 1: the work lost to a failure "
    "and the downtime are inside them, rework excluded)",
    2: "run node energy / seconds of useful compute (compute + rework: the work that "
    "survived; lost work and downtime excluded)",
}

_FORMAT_1_NOTE = (
    "saved by an older greenckpt (run report format 1): the work lost to each failure and the "
    "downtime before the restart are counted in its compute records, so its useful compute is "
    "too high and its observed EPE too low for a run with failures"
)

_CSV_FIXED = (
    "index",
    "kind",
    "level",
    "start_s",
    "end_s",
    "seconds",
    "node_energy_j",
    "mean_power_w",
    "power_source",
    "meters",
    "background",
    "ok",
    "notifiers",
    "nodes",
    "reported_seconds",
    "reliable",
    "size_bytes",
    "frequency_hz",
    "governor",
    "io_processes",
    "codec",
    "cstates",
    "settings_source",
    "notes",
)

_COLORS: dict[str, str] = {
    "compute": "tab:green",
    "rework": "tab:orange",
    "lost": "tab:gray",
    "checkpoint": "tab:blue",
    "restart": "tab:red",
    "flush": "tab:purple",
}


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


def _num(value: float | None, decimals: int) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{decimals}f}"


def _pct(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:+.2f} %"


def _domains_of(records: Sequence[PhaseRecord]) -> tuple[str, ...]:
    for r in records:
        if r.power_domains:
            return r.power_domains
    return ()


def _overlap_seconds(records: Sequence[PhaseRecord]) -> float:
    """Seconds in which two or more of ``records`` ran at once (counted once per extra)."""
    overlap = 0.0
    reach = -math.inf
    for r in sorted(records, key=lambda r: r.start_s):
        if r.start_s < reach:
            overlap += min(reach, r.end_s) - r.start_s
        reach = max(reach, r.end_s)
    return overlap


def load_report(path: str | os.PathLike[str]) -> RunReport:
    """A report written by :meth:`RunReport.write_json` (e.g. a baseline run's), of this
    format or an older one (format 1 keeps its own definition of useful compute, and a run
    with a restart gets a note saying what that definition hides)."""
    target = Path(path)
    try:
        doc = json.loads(read_regular(target).decode("utf-8"))
    except OSError as exc:  # a FIFO or directory too: never wait on one
        raise InvalidValueError(
            f"cannot read the run report {target}: {exc.strerror or exc}"
        ) from None
    except UnicodeDecodeError:
        raise InvalidValueError(f"{target} is not a run report: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise InvalidValueError(f"{target} is not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise InvalidValueError(f"{target}: JSON nested too deeply to be a run report") from None
    if not isinstance(doc, dict) or doc.get("format") != REPORT_FORMAT:
        raise InvalidValueError(
            f"{target} is not a greenckpt run report (format {REPORT_FORMAT!r})"
        )
    version = doc.get("format_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidValueError(
            f"{target}: format_version must be an integer >= 1, got {version!r}"
        )
    if version > REPORT_VERSION:
        raise InvalidValueError(
            f"{target} is a run report of format {version}; this greenckpt reads formats 1 to "
            f"{REPORT_VERSION}: upgrade greenckpt to read it"
        )
    try:
        records = tuple(PhaseRecord.from_dict(r) for r in doc["records"])
        notes = tuple(str(n) for n in doc.get("notes", ()))
        if version < 2 and any(r.kind == "restart" for r in records):
            notes = tuple(dict.fromkeys((*notes, _FORMAT_1_NOTE)))
        trace = doc.get("trace")
        return RunReport(
            records=records,
            total_seconds=float(doc["total"]["seconds"]),
            total_energy_j=_opt_float(doc["total"]["energy_j"]),
            power_source=doc["power"]["source"],
            power_scope=str(doc["power"].get("scope", "")),
            meters=tuple(doc["power"].get("meters", ())),
            policy=str(doc.get("policy", "")),
            predicted_epe=_opt_float(doc["epe"].get("predicted_w")),
            predicted_source=doc["epe"].get("predicted_source"),
            baselines=tuple(BaselineRun.from_dict(b) for b in doc.get("baselines", ())),
            trace=None if trace is None else PowerTrace.from_dict(trace),
            synthetic=bool(doc.get("synthetic", False)),
            notes=notes,
            format_version=version,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidValueError(f"{target}: malformed run report ({exc})") from exc
