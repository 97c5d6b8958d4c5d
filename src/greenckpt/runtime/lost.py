"""Work lost to a failure: which compute and rework records a restart turns into ``lost``.

Why here and why after the fact: the runtime cannot see a crash, only the compute going on
until the restart begins, so at the restart's begin it re-labels the records from the end of
the checkpoint the restart reads back up to that begin (the work since that checkpoint and
the downtime). Which checkpoint, and what cannot be known, is explained in
docs/design/runtime.md ("Lost work"). These functions change the records list they are given
and nothing else; :class:`~greenckpt.runtime.session.Runtime` calls them under its lock.
"""

from __future__ import annotations

import math
from dataclasses import replace

from greenckpt.runtime.run_report import USEFUL_KINDS, PhaseRecord

__all__ = [
    "LOST",
    "NO_CHECKPOINT_BEFORE",
    "newest_restart_s",
    "relabel_all_lost",
    "relabel_lost",
    "restored_from",
]

LOST = "lost to a failure: computed"
"""How every lost record's note begins (a later, better-informed account replaces it)."""
NO_CHECKPOINT_BEFORE = (
    "no checkpoint of this run ended ok before this restart: it read one written before the "
    "runtime started, so the compute before it is counted as the job's start-up, not as lost "
    "work"
)
"""The restart's note when nothing was re-labelled."""


def _end(record: PhaseRecord) -> float:
    return record.end_s


def newest_restart_s(records: list[PhaseRecord]) -> float | None:
    """The start (run seconds) of the newest restart recorded, if any."""
    restarts = [r for r in records if r.kind == "restart"]
    if not restarts:
        return None
    return max(restarts, key=lambda r: (r.start_s, r.index)).start_s


def relabel_lost(records: list[PhaseRecord], before_s: float, level: int | None) -> bool:
    """Re-label as ``lost`` the compute and rework records from the end of the checkpoint a
    restart beginning at ``before_s`` reads back (of ``level`` when known) to ``before_s``;
    False when no checkpoint (or restart) of this run lies before it: nothing re-labelled."""
    origin = restored_from(records, before_s, level)
    if origin is None:
        return False
    from_s, why = origin
    note = (
        f"{LOST} after {why}, and the downtime until the restart at {before_s:.3f} s "
        "(the runtime cannot see the crash itself)"
    )
    _mark_lost(records, from_s, before_s, note)
    return True


def relabel_all_lost(records: list[PhaseRecord], before_s: float) -> None:
    """A restart that failed restored nothing: whatever the application goes on to do —
    stop, or start afresh from its initial state (the library's
    ``on_unrecoverable="fresh"``) — none of the work computed before it survived, so every
    compute and rework record before ``before_s`` becomes ``lost``. Without this, a run
    that starts afresh would count its first pass and its second as useful work."""
    note = (
        f"{LOST} before the restart at {before_s:.3f} s, which failed: no checkpoint was "
        "restored, so no work before it survived"
    )
    _mark_lost(records, -math.inf, before_s, note)


def _mark_lost(records: list[PhaseRecord], from_s: float, before_s: float, note: str) -> None:
    """Re-label the foreground compute, rework (and already lost) records lying within
    ``[from_s, before_s]`` as ``lost``, with ``note`` replacing any earlier lost note."""
    for i, r in enumerate(records):
        if r.background or not (from_s <= r.start_s and r.end_s <= before_s):
            continue
        if r.kind in USEFUL_KINDS or r.kind == "lost":
            notes = tuple(n for n in r.notes if not n.startswith(LOST))
            records[i] = replace(r, kind="lost", notes=(*notes, note))


def _newest_checkpoint(
    records: list[PhaseRecord], done: list[PhaseRecord], before_s: float, level: int | None
) -> PhaseRecord | None:
    """The newest checkpoint that ended ok before ``before_s`` (of ``level`` when known: a
    flushed copy of that level counts as the checkpoint the flush copied)."""
    checkpoints = [r for r in done if r.kind == "checkpoint"]
    if level is not None:
        copies = [
            r
            for r in records
            if r.kind == "flush" and r.ok and r.level == level and r.end_s <= before_s
        ]
        sources = [
            max((c for c in checkpoints if c.end_s <= f.start_s), key=_end, default=None)
            for f in copies
        ]
        checkpoints = [c for c in checkpoints if c.level == level]
        checkpoints += [c for c in sources if c is not None]
    return max(checkpoints, key=_end, default=None)


def restored_from(
    records: list[PhaseRecord], before_s: float, level: int | None
) -> tuple[float, str] | None:
    """Where the state a restart at ``before_s`` reads back was left: the end of the
    newest checkpoint (of ``level``, when known) that ended ok, or of the previous
    restart when that is newer; with a description for the lost records' note."""
    done = [r for r in records if r.ok and not r.background and r.end_s <= before_s]
    checkpoint = _newest_checkpoint(records, done, before_s, level)
    restart = max((r for r in done if r.kind == "restart"), key=_end, default=None)
    if restart is not None and (checkpoint is None or restart.end_s > checkpoint.end_s):
        return restart.end_s, (
            f"the restart that ended at {restart.end_s:.3f} s (no checkpoint "
            f"{'of level ' + str(level) + ' ' if level is not None else ''}ended ok since, "
            "so this restart reads back the same state or an older one)"
        )
    if checkpoint is None:
        return None
    if level is not None:
        what = f"the level-{level} checkpoint that ended at {checkpoint.end_s:.3f} s"
        if checkpoint.level != level:
            what += f" (its level-{level} copy was made by a flush)"
        return checkpoint.end_s, what + ", the newest of the level the restart read"
    return checkpoint.end_s, (
        f"the newest checkpoint that ended ok (level {checkpoint.level}, at "
        f"{checkpoint.end_s:.3f} s; the restart did not say which level it read: a "
        "fall-back to an older checkpoint would make the lost work longer than counted)"
    )
