"""Which checkpoints stay: the free-space check before a checkpoint is written, and the
retirement of lower levels' checkpoints that newer ones make redundant.

Why together: both are about the room checkpoints hold. The space check refuses a checkpoint
before anything is written when a directory lacks the room, after applying the same removals
a commit would; retirement keeps old lower-level checkpoints from holding the room every later
checkpoint needs. Both count only the checkpoints this run verified (committed or restored),
which is the record kept here. The rules: docs/design/checkpointer.md and the docstrings of
:meth:`Retention.check_space` and :meth:`Retention.retire_below`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

from greenckpt.ckpt.job import Job, tidy
from greenckpt.ckpt.records import CheckpointError
from greenckpt.ckpt.store import CheckpointStore, FreeSpaceUnknownError
from greenckpt.io import parse_codec

__all__ = ["Retention"]

_BLOCK = 4096
"""Files are counted in whole blocks of this size when checking free space."""

_DIRECTORY_ALLOWANCE = 64 * 1024
_RANK_ALLOWANCE = 4096
"""Room counted per checkpoint directory (its manifest, directory blocks), plus this much per
rank whose files it holds, on top of the files themselves."""

_Detail = tuple[int | None, int, int, str]
"""What a directory's leader measured after the removals: free, held, checkpoints, where."""


def _size(nbytes: int) -> str:
    return f"{nbytes} B ({nbytes / 2**20:.1f} MiB)"


def _blocks(nbytes: int) -> int:
    return -(-nbytes // _BLOCK) * _BLOCK


class Retention:
    """The checkpoints this run verified, and what follows from them for space and removal.

    ``flushing``: the checkpoint of a level's store that a running asynchronous flush copies
    (empty if none); every removal there keeps it, or the flush fails.
    """

    def __init__(self, job: Job, flushing: Callable[[int], list[int]]) -> None:
        self._job = job
        self._flushing = flushing
        self.verified: dict[int, list[int]] = {}
        """Per level, the checkpoints this run committed or restored (the newest ``keep``)."""
        self.stored_ratio: dict[int, float] = {}
        """Per level, stored / logical bytes of its last checkpoint (its codec's ratio)."""
        self._space_unknown: set[Path] = set()  # stores whose free space statvfs cannot tell

    # ------------------------------------------------------------------ verified checkpoints

    def add_verified(self, level: int, ckpt_id: int) -> None:
        """Remember a checkpoint this run committed or restored (the newest ``keep`` per
        level are all :meth:`retire_below` needs)."""
        self.verified[level] = self.verified_with(level, ckpt_id)

    def verified_with(self, level: int, ckpt_id: int) -> list[int]:
        """The checkpoints of ``level`` that count as verified once ``ckpt_id`` does.

        Every removal by the level's own keep-last-k protects them, so that a checkpoint
        :meth:`retire_below` counts toward ``keep`` is always still there. Without it, newer
        checkpoints this run did not verify (ones that failed to restore) filled the level's
        ``keep`` and pushed out the verified one restored before them, which kept counting:
        a lower level's checkpoint was then retired with fewer than ``keep`` restorable newer
        ones. The same on every rank (it depends only on commits and recoveries, which every
        rank sees), so every directory's leader keeps the same ones; at most ``keep``
        checkpoints more than the newest ``keep`` stay, and only until newer verified ones
        replace them.
        """
        ids = sorted({*self.verified.get(level, []), ckpt_id})
        return ids[-self._job.config.keep :]

    def retire_below(self, level: int) -> None:
        """Remove the checkpoints of the levels below ``level`` that ``keep`` newer ones
        make redundant (each node's leader in its own directory; not collective).

        The rule: keep-last-k counted across levels. A checkpoint is retired once ``keep``
        checkpoints newer than it, at its level or at levels that survive everything its
        level survives (:meth:`LevelSpec.covers`), were committed or restored by this run.
        Recovery tries the newest first, so it would reach the retired one only after all
        ``keep`` newer ones failed, each of which survived whatever the retired one would
        have — exactly the case keep-last-k accepts within a level. A level that does not
        survive all of it never retires it: two lost nodes in one erasure group defeat level
        3's checkpoints but not level 2's partner copies, so level 3 does not retire level 2.
        Without retirement an old level-1 checkpoint stays all run while level 4 serves the
        level-1 schedule, and holds space that every later level-1 checkpoint needs. Only
        checkpoints verified by this run count (not unverified leftovers of an earlier one),
        and the level-1 source of a running flush is kept, so the only restorable checkpoint
        is never retired.
        """
        job = self._job
        for lower, store in job.stores.items():
            spec = job.spec(lower)
            if lower >= level or not job.spec(level).covers(spec) or not job.is_leader(lower):
                continue
            newer = sorted(
                {i for n, ids in self.verified.items() if job.spec(n).covers(spec) for i in ids}
            )
            self._retire(lower, store, newer)

    def _retire(self, lower: int, store: CheckpointStore, newer: list[int]) -> None:
        """Remove the checkpoints of ``lower`` with ``keep`` of ``newer`` newer than them."""
        keep = self._job.config.keep
        flushing = self._flushing(lower)
        for old in store.committed():
            if old not in flushing and sum(1 for i in newer if i > old) >= keep:
                tidy(
                    partial(store.remove, old, wait=False),
                    f"retire checkpoint {old} (level {lower}, made redundant by newer ones)",
                )
                if old in self.verified.get(lower, []):  # gone: it counts no more
                    self.verified[lower] = [i for i in self.verified[lower] if i != old]

    # ------------------------------------------------------------------ free space

    def check_space(self, levels: tuple[int, ...], codec_level: int) -> None:
        """Refuse a checkpoint before anything is written when a directory of ``levels`` it
        writes to lacks the room (collective: :class:`CheckpointError` on every rank).

        Why before: a write that runs out of space midway has cost the time and energy of
        the bytes written before it failed, and fills the disk for everyone else. The need
        of a directory is what this checkpoint adds there: the files of the ranks it holds
        (in whole blocks), their redundancy (a partner's copy on level 2, parity on level
        3) and a small allowance for the manifest. The previous checkpoints stay until the
        new one commits, and are already counted out of the free space. With a codec the
        stored size is estimated from ``codec_level``'s last compression ratio (the logical
        size before the first checkpoint). An asynchronous level-4 checkpoint is written to
        level 1 first and then copied to the global file system: both are in ``levels``. A
        directory whose free space cannot be known is not refused: ``statvfs`` failing (the
        write will report its own error), or a file system that reports no blocks at all
        (some FUSE and object stores; said once per directory). The ``space_check`` setting
        turns the whole check off.
        """
        for target in levels:
            problem = self._space_problem(target, codec_level)
            if problem is not None:
                raise CheckpointError(problem)

    def _free(self, level: int, store: CheckpointStore) -> int | None:
        """The free bytes of ``store`` (None: not knowable; said once per directory)."""
        try:
            return store.free_bytes()
        except FreeSpaceUnknownError as exc:
            if store.base not in self._space_unknown:
                self._space_unknown.add(store.base)
                warnings.warn(
                    f"greenckpt: {exc}: level-{level} checkpoints there are written "
                    "without a free-space check (set space_check = false to skip the "
                    "check everywhere). Said once",
                    RuntimeWarning,
                    stacklevel=5,
                )
            return None
        except OSError:
            return None  # not knowable here: the write reports its own error

    def _estimate(self, codec_level: int) -> int:
        """This rank's bytes in the checkpoint, stored with ``codec_level``'s codec."""
        estimate = self._job.protected.nbytes
        if parse_codec(self._job.level(codec_level).codec) is not None:
            estimate = int(estimate * self.stored_ratio.get(codec_level, 1.0))
        return estimate

    def _needs(self, level: int, sizes: list[int]) -> dict[int, int]:
        """What each directory of ``level`` needs, by the rank that measures it."""
        job = self._job
        extra = job.redundancy_of(level).extra_bytes(sizes)
        return {
            leader: sum(_blocks(sizes[r]) + _blocks(extra[r]) for r in ranks)
            + _DIRECTORY_ALLOWANCE
            + _RANK_ALLOWANCE * len(ranks)
            for leader, ranks in job.spec(level).storage.directories(job.topology)
        }

    def _space_problem(self, level: int, codec_level: int) -> str | None:
        """Why some directory of ``level`` cannot take this checkpoint, or None (collective).

        ``codec_level``: the level whose codec and compression ratio the files have."""
        job = self._job
        store = job.stores[level]
        measuring = job.is_leader(level)
        seen = job.comm.allgather(
            (self._estimate(codec_level), self._free(level, store) if measuring else None)
        )
        needs = self._needs(level, [e for e, _ in seen])

        def short(frees: list[int | None]) -> list[int]:
            return [r for r, need in needs.items() if (f := frees[r]) is not None and f < need]

        if not short([f for _, f in seen]):
            return None
        detail: _Detail = self._make_room(level, store) if measuring else (None, 0, 0, "")
        details = job.comm.allgather(detail)
        still = short([d[0] for d in details])
        return self._refusal(level, needs[still[0]], details[still[0]], still[0]) if still else None

    def _make_room(self, level: int, store: CheckpointStore) -> _Detail:
        """Apply the removals a commit would, then measure again (a directory's leader).

        Background removals of older checkpoints may still be giving space back, and a
        lowered keep (a restarted run) has not been applied yet: it is applied now, the
        checkpoints this run verified kept, exactly as after the next commit, and so is the
        source of a running flush (its removal would fail the flush, which may hold the only
        copy of the newest one)."""
        keep = self._job.config.keep
        kept = [*self.verified.get(level, []), *self._flushing(level)]
        tidy(lambda: store.cleanup(keep, protect=kept), "remove old checkpoints")
        store.join()
        kept = store.committed()
        held = sum(store.footprint(i) for i in kept)
        return (self._free(level, store), held, len(kept), str(store.job_dir))

    def _refusal(self, level: int, need: int, detail: _Detail, rank: int) -> str:
        """The message refusing a checkpoint of ``level``: rank ``rank``'s directory lacks
        room."""
        available, held, count, where = detail
        assert available is not None
        job = self._job
        node = job.spec(level).storage.where(job.topology, rank)
        keep = job.config.keep
        return (
            f"checkpoint at level {level} ({job.spec(level).name}) refused before writing "
            f"anything: {where} on {node} needs {_size(need)} for it and {_size(available)} "
            f"is free (the {count} checkpoints kept there hold {_size(held)}; with keep = "
            f"{keep} a level needs room for about keep + 1 = {keep + 1} checkpoints, level 2 "
            "twice that); free space there, lower keep or use another directory"
        )
