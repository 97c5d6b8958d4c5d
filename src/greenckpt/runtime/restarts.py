"""One restart per failure: the ranks' restart announcements that a job attempt makes in close
succession are joined into one restart, even when they do not overlap; and what a restart
does to the rework around it.

Why: every rank of an MPI code announces its own restart (an interposed FTI_Recover, SCR or
VeloC restart, the C phase API). The runtime already merges announcements that overlap
(:mod:`greenckpt.runtime.spans`), but a level-1 recovery reads a node-local file in
microseconds and has no collective, so one rank's restart may be over before the next rank's
begins. Taken one by one, each later announcement would be a new failure with its own lost
work and downtime: one recovery of a four-rank job reported as several restarts.

A restart that begins while no restart is open therefore *rejoins* the newest restart — which
reopens, from its first begin, and ends again with the straggler's end — when all of these
hold: it began at most :data:`RESTART_JOIN_S` after that restart ended; its notifier (the
announcing process: node and process id) has not announced a restart of it yet; since it
ended the job did nothing but compute or rework (no checkpoint, flush or other phase began,
the application is still running). A genuine second failure breaks at least one of them:
every rank of the relaunched attempt restarts again (a notifier of the old restart reusing
its process — an in-process library, the Python API — is already in it), usually after a
checkpoint, and a crash, its detection and a relaunch take longer than the window. The
compute and rework records between the restart's first end and the rejoin are folded into
the restart: as with overlapping announcements, the node is restarting from the first rank's
begin to the last rank's end; a rework an early rank began meanwhile stays open. A new
restart, by contrast, ends the rework of the attempt that died (:func:`abandon_rework`), and
a rework's level re-accounts the newest restart's lost work (:func:`relabel_for_rework`).
Details: docs/design/runtime.md ("Overlapping notifications") and docs/intercept.md ("What a
restart is").
"""

from __future__ import annotations

from dataclasses import dataclass

from greenckpt.phases import ACCOUNTED_KINDS
from greenckpt.runtime.lost import newest_restart_s, relabel_lost
from greenckpt.runtime.run_report import PhaseRecord, RunKind
from greenckpt.runtime.spans import Segment, Span

__all__ = ["RESTART_JOIN_S", "Notifier", "RestartGroup", "abandon_rework", "relabel_for_rework"]

RESTART_JOIN_S = 1.0
"""How long after a restart ended another rank's restart still joins it (seconds). Ranks of
one attempt start their recoveries together (after MPI_Init and the library's collective
initialisation), so their restarts are apart by the time a recovery takes, microseconds to
milliseconds; a relaunch after a crash takes seconds at least."""

Notifier = tuple[int | None, int | None]
"""Who announced a phase: its node and process id (None: not told)."""
_ACCOUNTED: frozenset[RunKind] = frozenset(ACCOUNTED_KINDS)
_JOINED = "notifier(s) began their restart after it had ended"


@dataclass
class RestartGroup:
    """The newest restart (its span, kept after it closed, and its record) and the notifiers
    that announced it: the only per-notifier state, one entry per announcing process of the
    node, dropped at the next genuine restart."""

    span: Span
    notifiers: set[Notifier]
    record: PhaseRecord | None = None
    late: int = 0
    late_s: float = 0.0

    def rejoin(
        self,
        notifier: Notifier,
        now_s: float,
        records: list[PhaseRecord],
        spans: dict[RunKind, Span],
        segment: Segment | None,
    ) -> Span | None:
        """This restart, open again in ``spans``, when a restart that ``notifier`` begins at
        ``now_s`` (run seconds) is another rank's announcement of it (see the module
        docstring); None when it is a new restart. ``records`` loses the restart's record and
        the compute and rework recorded since it ended; the caller drops the open
        ``segment`` (its time is the restart's) and begins the span for ``notifier``."""
        record = self.record
        if record is None or notifier in self.notifiers or now_s - record.end_s > RESTART_JOIN_S:
            return None
        if not set(spans) <= _ACCOUNTED or (segment is not None and segment.kind not in _ACCOUNTED):
            return None  # an I/O phase is open, or the application is no longer running
        after = [r for r in records if r is not record and r.end_s > record.end_s]
        if any(r.kind not in _ACCOUNTED for r in after):
            return None  # a checkpoint, flush or restart since: the job went on
        records[:] = [r for r in records if r is not record and r.end_s <= record.end_s]
        self.record = None
        self.late += 1
        self.late_s = max(self.late_s, now_s - record.end_s)
        self.span.refs = 0
        spans["restart"] = self.span
        return self.span

    def closing(self, span: Span) -> None:
        """``span`` is about to be recorded: when it is this group's restart and notifiers
        rejoined it, say so in its notes (one note, however many rejoined)."""
        if span is not self.span or self.late == 0:
            return
        span.notes[:] = [n for n in span.notes if _JOINED not in n]
        span.notes.append(
            f"{self.late} {_JOINED} (up to {self.late_s * 1e3:.3f} ms later, with no "
            "checkpoint between): joined as one restart of the job, not as further failures"
        )


def abandon_rework(spans: dict[RunKind, Span], abandoned: dict[RunKind, int]) -> None:
    """A new restart (not a rejoined one) begins while a rework is open: that rework belonged
    to the attempt that died (no end will come from it), so it ends here, and ``abandoned``
    counts its notifiers' late ends, which the runtime then ignores."""
    span = spans.pop("rework", None)
    if span is not None:
        abandoned["rework"] = abandoned.get("rework", 0) + span.refs


def relabel_for_rework(records: list[PhaseRecord], spans: dict[RunKind, Span], level: int) -> None:
    """A rework names the level of the checkpoint its restart restored: account the lost
    work of the newest restart again with that level (it can only grow: the newest
    checkpoint of one level is never newer than the newest of all). A rework begun while
    a restart is still open (a misbehaving notifier) says nothing about an older one."""
    newest = newest_restart_s(records)
    if newest is not None and "restart" not in spans:
        relabel_lost(records, newest, level)
