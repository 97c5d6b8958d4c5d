"""The checkpoint library's API: protect data, checkpoint, decide when, recover, finalize.

One :class:`Checkpointer` per process, the same code in a single process and under MPI::

    ck = Checkpointer("ckpt.toml")          # or keywords: local_dir=..., l1={"every": "5min"}
    ck.protect("u", u)                       # NumPy arrays / buffers: never copied
    ck.state["it"] = 0                       # small picklable state
    ck.recover()                             # newest complete and verified checkpoint, if any
    start = ck.state["it"]                   # 0 on a first run, the restored value otherwise
    for it in range(start, n):
        step(u)
        ck.state["it"] = it + 1
        if (level := ck.need_checkpoint(it + 1)) is not None:
            ck.checkpoint(level, iteration=it + 1)
    ck.finalize()

The Checkpointer is a façade: when is :mod:`~greenckpt.ckpt.schedule`, write-and-commit
:mod:`~greenckpt.ckpt.commit`, recovery and rebuild :mod:`~greenckpt.ckpt.recovery`, the
asynchronous flush :mod:`~greenckpt.ckpt.flush`, free space and retirement
:mod:`~greenckpt.ckpt.retention`, the runtime's notifications :mod:`~greenckpt.ckpt.announce`
and :mod:`~greenckpt.ckpt.rework`, every collective verdict :mod:`~greenckpt.ckpt.agree`.
Why it works as it does (the commit protocol, in-place protected objects, recovery order,
levels 2 and 3, failure points): docs/design/checkpointer.md.
"""

from __future__ import annotations

import operator
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, SupportsIndex

from greenckpt.ckpt.agree import one_line
from greenckpt.ckpt.announce import Announcer, hook_from_env
from greenckpt.ckpt.comm import Comm, world
from greenckpt.ckpt.commit import Commit, write_and_commit, write_rank_file
from greenckpt.ckpt.config import ON_UNRECOVERABLE, Config, LevelConfig, load_config
from greenckpt.ckpt.flush import AsyncFlush, FlushFailure
from greenckpt.ckpt.hooks import PhaseHook
from greenckpt.ckpt.job import Job, tidy
from greenckpt.ckpt.levels import BUILTIN_LEVELS, LevelSpec, level_spec
from greenckpt.ckpt.manifest import RankEntry
from greenckpt.ckpt.protect import Identity, Protected, Slot
from greenckpt.ckpt.records import CheckpointError, CheckpointInfo, RecoveryError, RecoveryInfo
from greenckpt.ckpt.recovery import candidates, restore_newest
from greenckpt.ckpt.recovery import set_aside as set_stores_aside
from greenckpt.ckpt.redundancy.builtin import build_redundancy
from greenckpt.ckpt.redundancy.scheme import Redundancy
from greenckpt.ckpt.retention import Retention
from greenckpt.ckpt.rework import Rework
from greenckpt.ckpt.schedule import Backoff, Schedule
from greenckpt.ckpt.store import CheckpointStore
from greenckpt.ckpt.topology import Topology, write_waves
from greenckpt.errors import InvalidValueError, UsageError
from greenckpt.io import run_chunks

__all__ = [
    "Backoff",
    "CheckpointError",
    "CheckpointInfo",
    "Checkpointer",
    "RecoveryError",
    "RecoveryInfo",
]

LEVEL_NAMES = {spec.number: spec.name for spec in BUILTIN_LEVELS}
"""The built-in levels' names (every level's is its :class:`~greenckpt.ckpt.levels.LevelSpec`'s)."""


def _index(value: object) -> int | None:
    """``value`` as the ``int`` it is when it is an integer of any kind (not a bool), else
    None."""
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        return None
    return operator.index(value)


def _as_iteration(value: object, call: str) -> int | None:
    """``iteration`` as a plain ``int`` (None stays None), checked where it is given.

    Why here: it goes into the manifest (JSON, an integer >= 0), which is written last; a
    NumPy integer or a negative number used to pass until then, so the checkpoint wrote all
    its data, failed at the commit and started a back-off. Any integral number
    (``operator.index``) is taken as the int it is; anything else is refused at once."""
    if value is None:
        return None
    number = _index(value)
    if number is None or number < 0:
        raise InvalidValueError(
            f"{call}: iteration must be an integer >= 0 or None, not {value!r} "
            f"({type(value).__name__})"
        )
    return number


_one_line = one_line
_tidy = tidy


class Checkpointer:
    """Multilevel checkpoint/restart for one process of a (possibly MPI) job.

    ``config`` is a TOML file; keyword ``settings`` and ``GREENCKPT_*`` environment variables
    override it (:func:`greenckpt.ckpt.config.load_config`). ``comm`` defaults to MPI's world
    when the process runs under an MPI launcher, else a single process. Construction is
    collective; it checks every storage directory and raises a one-line :class:`StoreError`
    (a ``ValueError``) on every rank if one is unusable (``local_dir`` and ``global_dir`` must
    already exist), before any computation is lost.

    :attr:`history` lists a :class:`CheckpointInfo` per checkpoint this process committed, in
    order (an asynchronous level-4 checkpoint appears twice: ``flushing=True`` when it
    returned, ``flushing=False`` once its copy on the global file system was committed).
    """

    def __init__(
        self,
        config: str | os.PathLike[str] | Config | None = None,
        *,
        comm: Comm | None = None,
        env: Mapping[str, str] | None = None,
        hook: PhaseHook | None = None,
        **settings: Any,
    ) -> None:
        self.config = (
            config if isinstance(config, Config) else load_config(config, env=env, **settings)
        )
        self.comm = comm if comm is not None else world()
        self.rank = self.comm.rank
        self.topology = Topology.discover(self.comm, self.config.ranks_per_node)
        self.node = self.topology.node_of(self.rank)
        # every rank builds the same levels' redundancy in the same order (it may be collective)
        self._redundancy: dict[int, Redundancy] = {
            n: build_redundancy(
                level_spec(n).scheme, self.comm, self.topology, self._level(n), self.config.checksum
            )
            for n in self.config.enabled_levels
        }
        self.protected = Protected()
        self._job = Job(
            self.config, self.comm, self.topology, self.node, self.protected, self._redundancy
        )
        # the level whose checkpoints are flushed in the background from another's store
        self._flush = AsyncFlush(self._job)
        self._flush_level, self._flush_source = self._flush.level, self._flush.source
        self._phases = Announcer(
            hook if hook is not None else hook_from_env(env),
            self.comm,
            self.topology,
            self.node,
            self.protected,
        )
        self._stores = self._job.stores  # the same dict: filled here, read by every part
        self._stores.update(self._job.open_stores(self._flush_source))
        self._finalized = False
        self._rework = Rework(self._job, self._phases)
        latest = max((max(s.committed(), default=0) for s in self._stores.values()), default=0)
        self._next_id = max(self.comm.allgather(latest)) + 1
        self._schedule = Schedule(self.config, self._stores, self._spec, self.rank)
        self.history: list[CheckpointInfo] = []
        self._retention = Retention(self._job, self._flush.source_of)
        self._verified = self._retention.verified  # the same dict: read by tests
        self.set_aside: tuple[Path, ...] = ()
        """Where the last ``recover(on_unrecoverable="fresh")`` moved the checkpoints it could
        not restore (every node's directories); empty when it moved none."""

    # ------------------------------------------------------------------ set-up

    @property
    def hook(self) -> PhaseHook:
        """Told when each phase starts and ends (:class:`~greenckpt.ckpt.hooks.NullHook`: no
        runtime); :mod:`greenckpt.ckpt.announce` says how."""
        return self._phases.hook

    @hook.setter
    def hook(self, hook: PhaseHook) -> None:
        self._phases.hook = hook

    @property
    def state(self) -> dict[str, Any]:
        """Small picklable application state saved with every checkpoint."""
        return self.protected.state

    def protect(self, name: str, obj: Any) -> None:
        """Save ``obj`` (a C-contiguous NumPy array or buffer) under ``name`` at every
        checkpoint; recovery reads it back in place. Same names in the same order on restart.

        The checkpointer keeps this very object: update it in place (``u[...] = new``). After
        rebinding names (``u_prev, u_curr = u_curr, u_prev``) it would save and restore each
        array under the other's name; protect the objects again after such a swap."""
        self.protected.add(name, obj)

    def _level(self, number: int) -> LevelConfig:
        return self.config.level(number)

    def _spec(self, number: int) -> LevelSpec:
        return level_spec(number)

    def _is_leader(self, level: int) -> bool:
        """Whether this rank commits and cleans its directory of ``level``."""
        return self._job.is_leader(level)

    # ------------------------------------------------------------------ when

    def need_checkpoint(self, iteration: SupportsIndex | None = None) -> int | None:
        """The level due now (the highest if several), or None. Collective when any interval
        is in seconds or automatic, or any level is held back for a time in seconds
        (:class:`Backoff`; rank 0 decides, so every rank takes the same decision), and while an
        asynchronous level-4 flush is under way (its completion is checked, and its failure
        raised as :class:`CheckpointError`, here).

        Each level's :class:`~greenckpt.ckpt.schedule.DecisionPolicy` says whether it is due
        (an interval of N iterations: the next multiple of N after the last checkpoint at that
        level or a higher one, which serves the lower ones too). A level whose checkpoint
        failed is held back (:class:`Backoff`, :attr:`backoff`) and its due checkpoints go to
        a level that can still be written (:meth:`_fallback`); see
        docs/design/checkpointer.md.
        """
        self._check_open()
        iteration = _as_iteration(iteration, "need_checkpoint()")
        self._schedule.saw(iteration)
        self._poll_flush(wait=False)
        if iteration is not None:
            self._rework.note(iteration)
        return self._schedule.decide(iteration, self.comm)

    @property
    def backoff(self) -> dict[int, Backoff]:
        """The levels held back after failed checkpoints, by level (a copy)."""
        return dict(self._schedule.backoff)

    # ------------------------------------------------------------------ checkpoint

    def checkpoint(
        self, level: SupportsIndex | None = None, *, iteration: SupportsIndex | None = None
    ) -> CheckpointInfo:
        """Write a checkpoint at ``level`` (default: the lowest enabled), collectively.

        Returns when the checkpoint is committed on every rank; raises
        :class:`CheckpointError` on every rank if any rank failed (nothing committed).
        Level 4 with ``async = true`` returns once the checkpoint is committed on node-local
        storage (level 1) and leaves the copy to the global file system to a background
        thread (``flushing=True`` in the result); one flush runs at a time, so a new one
        first waits for the previous.

        ``iteration`` is any integer >= 0 (a NumPy one too) or None; anything else is a
        :class:`ValueError` here, before anything is written (it is recorded in the manifest).

        Before writing anything, every directory the checkpoint writes to must have the room
        for it (unless the ``space_check`` setting is off); otherwise it fails like any other,
        with a message naming the level, what it needs and what is free. A failure holds the
        level back (:class:`Backoff`). Once committed, the checkpoint retires older checkpoints
        of lower levels that it makes redundant, where it survives everything they survive
        (both: :class:`~greenckpt.ckpt.retention.Retention`).
        """
        self._check_open()
        iteration = _as_iteration(iteration, "checkpoint()")
        # a NumPy integer too, as the int it is: the manifest records it
        number = min(self._stores) if level is None else _index(level)
        if number is None or number not in self._stores:
            raise InvalidValueError(
                f"level {level} is not enabled: enabled levels are "
                f"{', '.join(map(str, self._stores))}"
            )
        flushing = number == self._flush_level
        covering = self._schedule.take_covering(number)
        self._poll_flush(wait=flushing)
        written = self._flush_source if flushing else number
        try:
            if self.config.space_check:
                self._retention.check_space(
                    (written, self._flush.level or written) if flushing else (written,), written
                )
            info = self._checkpoint_at(written, iteration)
        except CheckpointError as exc:
            self._schedule.failed(number, exc, iteration, covering)
            raise
        self._retention.stored_ratio[written] = info.stored_bytes / max(1, info.logical_bytes)
        self._committed(written, info.id)
        if flushing:
            self._flush.start(info, self._phases)
            info = replace(info, level=number, flushing=True)
        self._schedule.served(number, iteration, info.seconds, covering)
        self.history.append(info)
        return info

    def _committed(self, level: int, ckpt_id: int) -> None:
        """Book-keeping once checkpoint ``ckpt_id`` is committed at ``level`` on every rank:
        the level's back-off ends, the checkpoint counts as verified (written and checked by
        this run), and the older lower-level checkpoints it makes redundant are retired."""
        self._schedule.committed(level)
        self._retention.add_verified(level, ckpt_id)
        self._retention.retire_below(level)

    def _checkpoint_at(self, number: int, iteration: int | None) -> CheckpointInfo:
        """A synchronous checkpoint at ``number``, committed on every rank (collective):
        the stages of :mod:`greenckpt.ckpt.commit`."""
        start = time.monotonic()
        ckpt_id = self._next_id
        self._next_id += 1
        store = self._stores[number]
        advice = self._phases.begin("checkpoint", number, store.job_dir)
        per_node = advice.io_processes or self.config.writers_per_node
        waves = write_waves(self.topology, per_node, self.config.writers_total)
        kept = [*self._retention.verified_with(number, ckpt_id), *self._flush.source_of(number)]
        # recorded with the state, so recovery can check the manifest against the data
        self.protected.identity = Identity(self.config.name, ckpt_id, iteration)
        ok = False
        try:
            commit = Commit(
                self._job,
                number,
                store,
                ckpt_id,
                iteration,
                waves,
                self._write,
                kept,
                writer_cpus=advice.writer_cpus,
            )
            mine = write_and_commit(commit)
            seconds = time.monotonic() - start
            ok = True
        finally:
            self._phases.end("checkpoint", ok, time.monotonic() - start)
        return CheckpointInfo(
            ckpt_id,
            number,
            iteration,
            seconds,
            mine.logical_bytes,
            mine.stored_bytes,
        )

    # ------------------------------------------------------------------ asynchronous flush

    def _poll_flush(self, *, wait: bool) -> None:
        """Commit the level-4 copy once every rank's flush is over, or raise its failure
        (collective while a flush is under way; nothing otherwise)."""
        done = self._flush.poll(self._phases, self._retention.verified_with, wait=wait)
        if isinstance(done, FlushFailure):
            assert self._flush_level is not None  # only a flushed level has a flush
            self._schedule.failed(self._flush_level, done.error, done.iteration, (), stacklevel=5)
            raise done.error
        if done is not None:
            self._committed(done.level, done.id)
            self.history.append(done)

    def _write(
        self, level: int, store: CheckpointStore, ckpt_id: int, slots: Sequence[Slot]
    ) -> RankEntry:
        """This rank's file of ``slots`` into the staging directory; its manifest entry
        (:func:`~greenckpt.ckpt.commit.write_rank_file` with this module's ``run_chunks``,
        looked up now: tests replace it here)."""
        return write_rank_file(self._job, level, store, ckpt_id, run_chunks, slots)

    # ------------------------------------------------------------------ recover

    def recover(
        self, *, missing_ok: bool = True, on_unrecoverable: str | None = None
    ) -> RecoveryInfo | None:
        """Restore the newest checkpoint that every rank can read and verify (collective).

        Returns None when there is no checkpoint at all (a first run) and ``missing_ok``.
        When checkpoints exist but none can be restored, ``on_unrecoverable`` (default: the
        ``on_unrecoverable`` setting, itself "raise" by default) decides:

        - ``"raise"``: :class:`RecoveryError`, its message giving the reason for each one.
        - ``"fresh"``: every level's checkpoints of this job are moved aside, not deleted
          (each directory renamed to ``<name>.unrestorable-<UTC time>`` next to it;
          :attr:`set_aside` lists them), rank 0 warns with the reasons, :attr:`state` is
          put back as it was before the call, and None is returned as on a first run — the
          documented way out instead of deleting files by hand.

        Either way the protected buffers may hold parts of the data the failed reads put
        there: after "fresh", initialise them as for a first run before computing. A
        recovery also ends every level's back-off (:class:`Backoff`).
        """
        mode = self.config.on_unrecoverable if on_unrecoverable is None else on_unrecoverable
        if mode not in ON_UNRECOVERABLE:
            raise InvalidValueError(
                f'on_unrecoverable must be "raise" or "fresh" (move the unrestorable '
                f"checkpoints aside and start afresh), not {mode!r}"
            )
        self._check_open()
        self._poll_flush(wait=True)
        start = time.monotonic()
        found = candidates(self._job)
        if not found and missing_ok:
            return None  # a first run: nothing to restore, no restart phase
        base = self._stores[min(self._stores)].job_dir
        advice = self._phases.begin("restart", None, base)
        per_node = advice.io_processes or self.config.writers_per_node
        waves = write_waves(self.topology, per_node, self.config.writers_total)
        ok = False
        state = self.protected.state  # a restore replaces the object, never changes it
        failure: RecoveryError | None = None
        try:
            info = restore_newest(self._job, found, waves, start, advice.writer_cpus)
            ok = True
        except RecoveryError as exc:
            if mode != "fresh" or not found:
                raise
            failure = exc
        finally:
            self._phases.end("restart", ok, time.monotonic() - start)
        self._schedule.backoff.clear()  # the schedule starts again from what was restored
        if failure is not None:
            self._start_afresh(failure, state)
            return None
        self.set_aside = ()
        self._schedule.restart(info.iteration or 0)  # goes on from the restored checkpoint
        self._next_id = max(self._next_id, info.id + 1)
        self._retention.add_verified(info.level, info.id)
        self._rework.begin(info)
        return info

    def _start_afresh(self, failure: RecoveryError, state: dict[str, Any]) -> None:
        """``on_unrecoverable="fresh"``: move this job's checkpoints aside on every level and
        node and reset the schedule, so the run goes on as a first run (collective).

        See :func:`greenckpt.ckpt.recovery.set_aside`.
        """
        self.set_aside = set_stores_aside(self._job, failure)
        self.protected.state = state
        self._schedule.restart(0)
        self._verified.clear()
        self._rework.forget()  # every rank's note of the old run: no rework
        if self.rank == 0:
            shown = ", ".join(map(str, self.set_aside)) or "nowhere (none was left)"
            warnings.warn(
                f'greenckpt: {failure}. on_unrecoverable = "fresh": moved them aside to '
                f"{shown} and starting as a first run; the protected data may hold parts of "
                "the failed reads, so initialise them as for a first run",
                RuntimeWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------ end

    def _check_open(self) -> None:
        if self._finalized:
            raise UsageError("this Checkpointer was finalized: create a new one")

    def finalize(self) -> None:
        """End of the run (collective): waits for an asynchronous flush and commits it (or
        raises its failure), so nothing is left in flight."""
        if not self._finalized:
            self._rework.end(ok=True)
            self._rework.close()
            try:
                self._poll_flush(wait=True)
            finally:
                for store in self._stores.values():
                    store.join()  # old checkpoints being removed in the background
                self.comm.barrier()
                self._finalized = True

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.finalize()
        else:
            self._finalized = True
