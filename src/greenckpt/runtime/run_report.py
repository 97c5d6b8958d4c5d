"""The per-phase report of a run: time and energy per phase, EPE observed against the model's,
percentages against a baseline run, saved as JSON/CSV and loaded back.

Why: saito2013's runtime (section 5) only pays off if its savings can be seen, the way the
companion papers show them (per-phase time and energy, runtime, node power and energy against
an original run). This module turns the runtime's :class:`PhaseRecord` list into those figures
and reads nothing from the machine, so a saved report can be rebuilt (:func:`load_report`) and
compared. Every figure carries its source (measured or estimated), a fake platform's report is
SYNTHETIC, background phases are never added to the run's totals. Showing a report (text,
plot) is :mod:`greenckpt.report`'s job. The definitions (useful compute, lost, rework,
observed EPE, wu2018's percentages) and why: docs/design/reports.md, "Run reports".
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from greenckpt.durable import write_atomic
from greenckpt.errors import InvalidValueError
from greenckpt.files import read_regular
from greenckpt.jsonout import dumps
from greenckpt.phases import IO_KINDS, RUN_KINDS, USEFUL_KINDS, RunKind
from greenckpt.platform.meters.base import Source
from greenckpt.platform.sampler import Series
from greenckpt.runtime.records import (
    BaselineRun,
    Comparison,
    KindTotal,
    PhaseRecord,
    PowerTrace,
    PreviousLoss,
    combine_sources,
    kind_total,
    opt_float,
    percent_difference,
    settings_from_dict,
    settings_to_dict,
    sum_cpu_s,
)

__all__ = [
    "CPU_DEFINITION",
    "REPORT_FORMAT",
    "REPORT_MODE",
    "RUN_KINDS",
    "USEFUL_KINDS",
    "BaselineRun",
    "Comparison",
    "KindTotal",
    "PhaseRecord",
    "PowerTrace",
    "PreviousLoss",
    "RunKind",
    "RunReport",
    "load_report",
    "percent_difference",
    "settings_from_dict",
    "settings_to_dict",
]

REPORT_MODE = 0o644
"""The mode of every report file (JSON, CSV, plots, logs kept), less the umask: what the plot
library gives its images, so a report folder's files read alike (they hold no secret)."""

REPORT_FORMAT = "greenckpt-run-report"
REPORT_VERSION = 2
"""2: ``lost`` records, and useful compute = compute + rework. Version 1 (no ``lost``: the
lost work and downtime of a failure were inside ``compute``) still loads, with its old
definition of useful compute (``compute`` only) and a note saying what that means."""

_IO_KINDS = IO_KINDS

CPU_DEFINITION = (
    "measured, not estimated: the node's busy CPU-seconds over all CPUs (user, nice, system, "
    "irq and softirq jiffies of /proc/stat's cpu line), the difference at a span's two "
    "boundaries; null when /proc/stat could not be read"
)


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
    ``total_cpu_s``: the node's busy CPU-seconds over the run, from ``/proc/stat`` (``None``
    when not read, or in a report saved before it was recorded; optional in every format).
    ``exit_status``/``signal``: how the command ended (its status as a shell reports it, the
    signal received, e.g. ``SIGTERM``), when the report knows (``greenckpt run`` sets them;
    ``None`` from Python or in a report saved before they were recorded). ``previous_lost``:
    the work an earlier run lost, when this run restarted from its checkpoint (shown beside
    this run's figures, never added to them: :class:`PreviousLoss`).
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
    total_cpu_s: float | None = None
    exit_status: int | None = None
    signal: str | None = None
    previous_lost: PreviousLoss | None = None

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
        total_cpu_s: float | None = None,
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
        if total_cpu_s is None:
            total_cpu_s = sum_cpu_s(fg)
        if power_source is None:
            power_source = combine_sources(r.power_source for r in ordered)
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
            total_cpu_s=total_cpu_s,
        )

    # -- figures ---------------------------------------------------------------------------

    def by_kind(self) -> dict[RunKind, KindTotal]:
        """Totals per kind of phase, in :data:`RUN_KINDS` order (kinds without records left
        out)."""
        out: dict[RunKind, KindTotal] = {}
        for kind in RUN_KINDS:
            rows = [r for r in self.records if r.kind == kind]
            if rows:
                out[kind] = kind_total(kind, None, rows)
        return out

    def by_level(self) -> list[KindTotal]:
        """Totals per I/O kind and level (checkpoints per level L1..L4, restarts, flushes)."""
        out: list[KindTotal] = []
        for kind in _IO_KINDS:
            levels = sorted({r.level for r in self.records if r.kind == kind and r.level})
            for level in levels:
                rows = [r for r in self.records if r.kind == kind and r.level == level]
                out.append(kind_total(cast(RunKind, kind), level, rows))
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
                    source=combine_sources([self.power_source, b.source]),
                    synthetic=self.synthetic or b.synthetic,
                )
            )
        return out

    def source_label(self, source: Source | str | None) -> str:
        """How ``source`` is shown in this report's CSV, tables and plot: ``measured``,
        ``estimated`` or "no node figure", with ", SYNTHETIC" for a fake platform."""
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
            "cpu": {"total_s": self.total_cpu_s, "definition": CPU_DEFINITION},
            "useful_compute_s": self.useful_seconds,
            "rework_s": self.rework_seconds,
            "lost_s": self.lost_seconds,
            "previous_lost": None if self.previous_lost is None else self.previous_lost.to_dict(),
            "exit_status": self.exit_status,
            "signal": self.signal,
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
        write_atomic(target, self.to_json(include_trace=include_trace) + "\n", mode=REPORT_MODE)
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
                    self.source_label(r.power_source),
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
                    _cell(r.cpu_s),
                    *("" if s is None else _cell(getattr(s, name)) for name in _CSV_LEVERS),
                    *(_cell(r.energy_j.get(d)) for d in domains),
                ]
            )
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, buf.getvalue(), mode=REPORT_MODE)
        return target


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

_CSV_LEVERS = (
    "waiting_frequency_hz",
    "uncore_khz",
    "power_limit_w",
    "gpu_memory_mhz",
    "gpu_clock_mhz",
    "gpu_power_limit_w",
)
"""The levers' CSV columns, after ``cpu_s`` (empty: left as found): the settings' fields."""

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
    "cpu_s",
    *_CSV_LEVERS,
)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


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
            total_energy_j=opt_float(doc["total"]["energy_j"]),
            power_source=doc["power"]["source"],
            power_scope=str(doc["power"].get("scope", "")),
            meters=tuple(doc["power"].get("meters", ())),
            policy=str(doc.get("policy", "")),
            predicted_epe=opt_float(doc["epe"].get("predicted_w")),
            predicted_source=doc["epe"].get("predicted_source"),
            baselines=tuple(BaselineRun.from_dict(b) for b in doc.get("baselines", ())),
            trace=None if trace is None else PowerTrace.from_dict(trace),
            synthetic=bool(doc.get("synthetic", False)),
            notes=notes,
            format_version=version,
            total_cpu_s=opt_float(doc.get("cpu", {}).get("total_s")),
            exit_status=None if doc.get("exit_status") is None else int(doc["exit_status"]),
            signal=None if doc.get("signal") is None else str(doc["signal"]),
            previous_lost=(
                None
                if doc.get("previous_lost") is None
                else PreviousLoss.from_dict(doc["previous_lost"])
            ),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidValueError(f"{target}: malformed run report ({exc})") from exc
