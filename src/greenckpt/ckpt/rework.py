"""The rework phase: after a restart, the time the application spends computing again the
iterations it had completed before the failure, announced to the runtime.

Why a note per rank: the runtime accounts that time as lost work, and only the application
knows how far it had got. Every rank keeps the newest iteration it reported done
(``need_checkpoint``) in a small file of its own next to its lowest level's checkpoints; after
a restart the ranks' notes say where the rework ends (:meth:`Rework.begin` gives the rule).
Only with a runtime attached; losing a note only loses the rework accounting, never data.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from greenckpt.ckpt.announce import Announcer, warn_hook
from greenckpt.ckpt.job import Job
from greenckpt.ckpt.records import RecoveryInfo

__all__ = ["Rework"]


class Rework:
    """This rank's progress note and the rework phase it opens after a restart."""

    def __init__(self, job: Job, announcer: Announcer) -> None:
        self._job = job
        self._announcer = announcer
        self._fd: int | None = None
        self.progress = 0
        """The newest iteration this rank reported done (0: none yet)."""
        self._until: int | None = None
        self._start = 0.0

    def _path(self) -> Path:
        """This rank's progress note (next to its lowest level's checkpoints)."""
        store = self._job.stores[min(self._job.stores)]
        return store.base / f".{self._job.config.name}.progress.{self._job.rank}"

    def note(self, iteration: int) -> None:
        """Iteration ``iteration`` is done on this rank: end the rework once it reaches where
        the job had got, and keep the note (one ``pwrite`` per call and no fsync: the file
        only has to outlive the process, which a page-cache write does)."""
        if self._until is not None and iteration >= self._until:
            self.end(ok=True)  # the lost work is done again
        if not self._announcer.attached or iteration <= self.progress:
            return
        self.progress = iteration
        self._write(iteration)

    def _write(self, iteration: int) -> None:
        try:
            if self._fd is None:
                flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
                self._fd = os.open(self._path(), flags, 0o644)
            os.pwrite(self._fd, f"{iteration:20d}\n".encode(), 0)
        except OSError as exc:
            warn_hook("rework", "progress note", exc)

    def _read(self) -> int | None:
        """This rank's note (None: none, e.g. its node was replaced, or unreadable)."""
        try:
            return int(self._path().read_text().strip() or 0)
        except (OSError, ValueError):
            return None

    def begin(self, info: RecoveryInfo) -> None:
        """After a restart: if the job had completed iterations past the restored one,
        announce the rework until it gets there again, naming the restored checkpoint's level
        (collective with a hook).

        The rule: an iteration was completed by the job when *every* rank reported it done
        (called ``need_checkpoint`` with it), so the rework ends at the *smallest* of the
        ranks' notes. Ranks are not in step at ``need_checkpoint``: rank 0 may report
        iteration N+1 before another rank, which computed N+1 too, dies before reporting it;
        the job then completed N, and after a restart from N iteration N+1 is new work, not
        rework (one note on rank 0 alone made it rework). A rank whose note is gone (its node
        was replaced with its local storage) cannot say: the others' smallest note is used,
        which is one too many when that rank was the one behind. The level is how the runtime
        knows which checkpoint was read back, so that it accounts the work since that one as
        lost (:mod:`greenckpt.runtime.session`). Every rank then restarts its note at what
        the job had completed, so a note left ahead by the attempt that died cannot count in
        the next failure's rework.
        """
        if not self._announcer.attached or info.iteration is None:
            return
        notes = self._job.comm.allgather(self._read())
        known = [n for n in notes if n is not None]
        reached = min(known) if known else None
        self.progress = max(info.iteration, reached or 0)
        self._write(self.progress)
        if reached is None or reached <= info.iteration:
            return
        self._until = reached
        self._start = time.monotonic()
        self._announcer.tell_begin("rework", info.level, "", 0)

    def end(self, ok: bool) -> None:
        """End a rework under way (none: nothing)."""
        if self._until is None:
            return
        self._until = None
        self._announcer.end("rework", ok, time.monotonic() - self._start)

    def forget(self) -> None:
        """The job starts afresh: no note of the old run counts (every rank's removed)."""
        self.progress = 0
        with contextlib.suppress(OSError):
            self._path().unlink(missing_ok=True)

    def close(self) -> None:
        """End of the run: close the note (it stays, for the next restart)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
