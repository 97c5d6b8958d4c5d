"""Work lost by an earlier run: a job that died, resubmitted, restarts from its checkpoint.

Why: within one run the runtime re-labels as ``lost`` the work since the checkpoint a restart
reads back (:mod:`greenckpt.runtime.lost`). But under a batch system the normal failure ends
the run: the job is resubmitted and the *next* run restarts. That run's runtime started after
the failure, so its restart reads a checkpoint written before it and nothing of its own is
lost; the work lost is in the earlier run, whose report knows when its last checkpoint
committed and when it ended. :func:`previous_loss` accounts that span from the earlier
report, labelled with where it came from, beside this run's figures (never added to them:
this run did not spend it). Which earlier report (:mod:`greenckpt.runtime.earlier_run`):
docs/user-guide.md ("Work lost by an earlier run").
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from greenckpt.platform.meters.base import Source
from greenckpt.runtime.lost import restored_from
from greenckpt.runtime.records import PhaseRecord, PowerTrace, PreviousLoss, combine_sources
from greenckpt.runtime.run_report import RunReport

__all__ = ["earlier_restart", "ended_of", "previous_loss", "with_previous_loss"]

_COVERED = 0.999
"""The share of the lost span the earlier run's records must cover for their energy to be
its energy (they cover all of it unless the report was cut)."""


def ended_of(report: RunReport) -> str:
    """How the run of ``report`` ended: ``completed`` (status 0, no signal), ``cancelled``
    (a signal), ``failed`` (another status) or ``unknown`` (a report that does not say)."""
    if report.signal is not None:
        return "cancelled"
    if report.exit_status is None:
        return "unknown"
    return "completed" if report.exit_status == 0 else "failed"


def previous_loss(
    records: Sequence[PhaseRecord],
    previous: RunReport,
    *,
    source: str,
    report: str,
    ended: str | None = None,
) -> PreviousLoss | None:
    """The work ``previous`` (an earlier run's report) lost, when this run (``records``)
    restarted from a checkpoint written before it; None when this run did not restart, or
    its first restart read back a checkpoint of its own. ``source`` labels the figures
    (``previous run <path>``), ``report`` is the earlier report's path; ``ended``: how the
    earlier run ended when known elsewhere (a job report), else read from ``previous``."""
    found = earlier_restart(records)
    if found is None:
        return None
    restart, level = found
    how = ended if ended is not None else ended_of(previous)
    end_s = previous.total_seconds
    if how == "completed":
        loss = PreviousLoss(
            source, report, 0.0, end_s, end_s, 0.0, None, "nothing lost", how,
            "the earlier run completed (exit status 0): it lost no work, and this run's "
            "restart read the state it left",
        )  # fmt: skip
        return replace(loss, restart_level=level)
    from_s, level_of, read, what = _lost_from(previous, end_s, level, restart.ok)
    energy, energy_source, basis = _energy(previous, from_s, end_s)
    ending = {"failed": "failed", "cancelled": "was cancelled (a signal)"}.get(
        how, "ended without saying how (its report predates exit statuses)"
    )
    note = (
        f"the earlier run {ending}; {what}: its work from {from_s:.3f} s to its end at "
        f"{end_s:.3f} s did not survive (the time between the two runs, e.g. in the batch "
        "queue, is in neither report)"
    )
    return PreviousLoss(
        source=source,
        report=report,
        seconds=max(end_s - from_s, 0.0),
        from_s=from_s,
        to_s=end_s,
        energy_j=energy,
        energy_source=energy_source,
        energy_basis=basis,
        ended=how,
        note=note,
        restart_level=level,
        checkpoint_level=level_of,
        read_previous=read,
    )


def with_previous_loss(
    report: RunReport,
    previous: RunReport,
    path: Path,
    *,
    ended: str | None = None,
    source: str | None = None,
) -> RunReport:
    """``report`` with the loss of the earlier run of ``previous`` (read from ``path``), when
    this run restarted from a checkpoint written before it; else ``report`` unchanged.
    ``source``: the label (default ``previous run <path>``)."""
    where = os.path.abspath(path)
    label = source or f"previous run {where}"
    loss = previous_loss(report.records, previous, source=label, report=where, ended=ended)
    return report if loss is None else replace(report, previous_lost=loss)


def earlier_restart(records: Sequence[PhaseRecord]) -> tuple[PhaseRecord, int | None] | None:
    """This run's first restart and the level it read (None: not named), when it read back
    a checkpoint written before this run started; None when there is no restart or it read
    one of this run's own (whose lost work is this run's ``lost`` records)."""
    restart = _first_restart(records)
    if restart is None:
        return None
    level = restart.level if restart.level is not None else _rework_level(records, restart)
    if restored_from(list(records), restart.start_s, level) is not None:
        return None
    return restart, level


def _first_restart(records: Sequence[PhaseRecord]) -> PhaseRecord | None:
    restarts = [r for r in records if r.kind == "restart" and not r.background]
    return min(restarts, key=lambda r: (r.start_s, r.index), default=None)


def _rework_level(records: Sequence[PhaseRecord], restart: PhaseRecord) -> int | None:
    """The level the library named with the rework after ``restart`` (the level of the
    checkpoint it restored), if any."""
    after = [r for r in records if r.kind == "rework" and r.start_s >= restart.start_s]
    first = min(after, key=lambda r: r.start_s, default=None)
    return None if first is None else first.level


def _lost_from(
    previous: RunReport, end_s: float, level: int | None, restored: bool
) -> tuple[float, int | None, bool | None, str]:
    """Where the earlier run's lost work starts, the level of its checkpoint there, whether
    this run's restart read a checkpoint the earlier run committed, and why (for the note)."""
    if not restored:
        return (
            0.0,
            None,
            False,
            (
                "this run's restart failed and restored nothing, so none of the earlier run's "
                "work survived"
            ),
        )
    origin = restored_from(list(previous.records), end_s, level)
    if origin is None:
        named = f"no level-{level} checkpoint" if level is not None else "no checkpoint"
        return (
            0.0,
            None,
            False,
            (
                f"it committed {named}, so this run's restart read one written before it and "
                "everything from its start was lost"
            ),
        )
    from_s, why = origin
    checkpoint = [
        r for r in previous.records if r.kind == "checkpoint" and r.ok and r.end_s == from_s
    ]
    if not checkpoint:  # the earlier run's own restart, no checkpoint committed since
        return from_s, None, False, f"its state was last restored by {why}"
    if level is None:
        why += (
            "; this run's restart did not name the level it read, so it is taken to have "
            "read that checkpoint"
        )
    return (
        from_s,
        checkpoint[0].level,
        level is not None or None,
        (f"its state was last saved by {why}"),
    )


def _energy(
    previous: RunReport, from_s: float, to_s: float
) -> tuple[float | None, Source | None, str]:
    """The earlier run's node energy over ``[from_s, to_s]``: from its phase records, else
    from its power trace, else estimated from its mean power (each labelled)."""
    span = to_s - from_s
    if span <= 0:
        return 0.0, previous.power_source, "an empty span"
    parts = [
        (r, min(r.end_s, to_s) - max(r.start_s, from_s))
        for r in previous.records
        if not r.background and r.end_s > from_s and r.start_s < to_s
    ]
    covered = sum(share for _, share in parts)
    if parts and covered >= _COVERED * span and all(r.node_energy_j is not None for r, _ in parts):
        joules = sum(
            (r.node_energy_j or 0.0) * (share / r.seconds if r.seconds > 0 else 1.0)
            for r, share in parts
        )
        source = combine_sources(r.power_source for r, _ in parts)
        return joules, source, "the earlier run's phase records over the span"
    trace = previous.trace
    joules, seen = (0.0, 0.0) if trace is None else _integrate(trace, from_s, to_s)
    if trace is not None and seen >= 0.9 * span:
        basis = "the earlier run's power trace over the span"
        if seen < span:
            basis += f" ({span - seen:.3f} s outside the trace at its mean power over the rest)"
        return joules * span / seen, trace.source, basis
    power = previous.mean_power_w
    if power is None or not math.isfinite(power):
        return None, None, "none: the earlier report has no node energy figure"
    return (
        power * span,
        "estimated",
        (
            f"estimated: the earlier run's mean node power ({power:.1f} W) times the lost seconds "
            "(its records do not cover the span)"
        ),
    )


def _integrate(trace: PowerTrace, from_s: float, to_s: float) -> tuple[float, float]:
    """Joules of ``trace`` over ``[from_s, to_s]`` (``watts[i]`` is the mean power over
    ``(t_s[i-1], t_s[i]]``) and the seconds of the span it covers."""
    joules = seconds = 0.0
    for i in range(1, len(trace.t_s)):
        lo, hi = max(trace.t_s[i - 1], from_s), min(trace.t_s[i], to_s)
        if hi > lo:
            joules += trace.watts[i] * (hi - lo)
            seconds += hi - lo
    return joules, seconds
