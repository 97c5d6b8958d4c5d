"""The checkpoint library's API: protect data, checkpoint, decide when, recover, finalize.

One :class:`Checkpointer` per process, the same code in a single process and under MPI::

    ck = Checkpointer("ckpt.toml")          # or keywords: local_dir=..., l1={"every": "5min"}
    ck.protect("u", u)                       # NumPy arrays / buffers: never copied
    ck.state["it"] = 0                       # small picklable state
    if ck.recover():                         # newest complete and verified checkpoint, if any
        start = ck.state["it"]
    for it in range(start, n):
        step(u)
        ck.state["it"] = it + 1
        if (level := ck.need_checkpoint(it + 1)) is not None:
            ck.checkpoint(level, iteration=it + 1)
    ck.finalize()

The commit protocol (why a checkpoint is never reported complete before it is): every rank
writes its file into a staging directory (data fsynced, then the directory); the ranks agree
(allgather) that all of them succeeded; only then does one rank per directory (each node's
lowest rank for node-local storage, rank 0 for the global file system) write the manifest and
rename staging → committed — the commit point. Any failure before it removes the staging data
and raises :class:`CheckpointError` on every rank; the previous checkpoints are untouched, and
old ones are removed only after a newer one committed (keep-last-k, never the newest).

Recovery considers every committed checkpoint of every level, newest id first (of the copies
of one checkpoint, the lowest level first); a node-local one only if every node holds it.
Each rank checks the manifest, that its protected data still have the recorded names, dtypes
and shapes, reads its file straight into the protected buffers and checks the digests of the
stored bytes and of every variable. The first checkpoint that every rank read correctly wins;
otherwise the next older one is tried, and the reasons are kept (:attr:`RecoveryInfo.skipped`).

Levels 2 (partner copy) and 3 (erasure code) are level 1 plus redundant files on other nodes,
made after the agreement and before the commit (:mod:`greenckpt.ckpt.redundancy`), so a
committed level-2/3 checkpoint always has its redundancy. For them a checkpoint is a recovery
candidate when *any* node holds it: ranks whose files are missing or corrupt get them rebuilt
from partner copies or parity into their node's directory (a replacement node's empty one
included), each rebuilt file checked against the digest recorded at checkpoint time, and are
then read as usual (:attr:`RecoveryInfo.rebuilt` lists them).

Failure injection (:mod:`greenckpt.ckpt.inject`) can stop a rank at the points
"checkpoint-write" (its file written, nothing agreed), "checkpoint-commit" (everybody agreed,
nothing committed) and "restart-read" (before a rank reads a checkpoint).
"""

from __future__ import annotations

import os
import shutil
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from greenckpt.ckpt.comm import Comm, world
from greenckpt.ckpt.config import Config, LevelConfig, load_config
from greenckpt.ckpt.flush import Flush
from greenckpt.ckpt.groups import parity_name
from greenckpt.ckpt.hooks import HookKind, NullHook, PhaseAdvice, PhaseHook, PhaseKind
from greenckpt.ckpt.inject import maybe_fail
from greenckpt.ckpt.manifest import Manifest, RankEntry, utc_now_iso
from greenckpt.ckpt.partner import copy_name
from greenckpt.ckpt.protect import Protected
from greenckpt.ckpt.redundancy import ErasureLevel, PartnerLevel
from greenckpt.ckpt.store import CheckpointStore, StoreError
from greenckpt.ckpt.topology import Topology, write_waves
from greenckpt.ckpt.transfer import first_cause
from greenckpt.io import Chunk, ConcatSink, ConcatSource, parse_codec, run_chunks
from greenckpt.io.atomic import fsync_directory

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "Checkpointer",
    "RecoveryError",
    "RecoveryInfo",
]

LEVEL_NAMES = {1: "node-local", 2: "partner copy", 3: "erasure code", 4: "global file system"}


class CheckpointError(RuntimeError):
    """A checkpoint failed on some rank; nothing of it was committed, older ones are intact."""


class RecoveryError(RuntimeError):
    """Checkpoints exist but none could be restored; the message says why for each."""


@dataclass(frozen=True)
class CheckpointInfo:
    """A committed checkpoint, as seen by this rank."""

    id: int
    level: int
    iteration: int | None
    seconds: float
    """Wall time of the whole collective checkpoint on this rank (write, agree, commit)."""
    logical_bytes: int
    """This rank's protected bytes."""
    stored_bytes: int
    """This rank's bytes on storage (fewer with a codec)."""
    flushing: bool = False
    """Level 4 with ``async``: the data are committed on node-local storage and being copied
    to the global file system in the background; the level-4 copy is committed at a later API
    call once every rank's copy is durable (then :attr:`Checkpointer.history` gets an entry
    with ``flushing=False`` and the flush's duration)."""


@dataclass(frozen=True)
class RecoveryInfo:
    """The checkpoint a recovery restored, and why newer ones were passed over."""

    id: int
    level: int
    iteration: int | None
    seconds: float
    skipped: tuple[str, ...]
    rebuilt: tuple[int, ...] = ()
    """Ranks whose files were rebuilt from partner copies or parity (levels 2 and 3)."""


def _one_line(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


def _warn_hook(kind: str, what: str, exc: BaseException) -> None:
    warnings.warn(
        f"greenckpt: could not notify the runtime of the {what} of a {kind}: {_one_line(exc)}; "
        "the phase goes on with the configured settings",
        RuntimeWarning,
        stacklevel=3,
    )


def _tidy(action: Callable[[], object], what: str) -> None:
    """Housekeeping on one rank (removing old or failed checkpoints): its failure is a
    warning. It must not raise on one rank after all agreed, which would leave the others
    waiting in the next collective; the checkpoints it failed to remove are kept, not lost."""
    try:
        action()
    except (OSError, ValueError) as exc:
        warnings.warn(f"greenckpt: could not {what}: {_one_line(exc)}", RuntimeWarning, 3)


def _hook_from_env(env: Mapping[str, str] | None) -> PhaseHook:
    """The runtime's notification socket when ``greenckpt run`` announced one, else none."""
    from greenckpt.ckpt.notify_client import hook_from_env  # noqa: PLC0415 - only if used

    found = hook_from_env(os.environ if env is None else env)
    return NullHook() if found is None else found


class Checkpointer:
    """Multilevel checkpoint/restart for one process of a (possibly MPI) job.

    ``config`` is a TOML file; keyword ``settings`` and ``GREENCKPT_*`` environment variables
    override it (:func:`greenckpt.ckpt.config.load_config`). ``comm`` defaults to MPI's world
    when the process runs under an MPI launcher, else a single process. Construction is
    collective; it checks every storage directory and raises a one-line :class:`StoreError`
    (a ``ValueError``) on every rank if one is unusable, before any computation is lost.
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
        enabled = self.config.enabled_levels
        checksum = self.config.checksum
        self._partner = PartnerLevel(self.comm, self.topology, checksum) if 2 in enabled else None
        l3 = self._level(3)
        self._erasure = (
            ErasureLevel(self.comm, self.topology, l3.group_size, l3.parity, checksum)
            if 3 in enabled
            else None
        )
        self._async_flush = 4 in enabled and self._level(4).async_flush
        if self._async_flush and self.config.local_dir is None:
            raise ValueError(
                "level 4 with async = true flushes from node-local storage: set local_dir too "
                "(checkpoints are written there first), or set async = false"
            )
        self._flush: Flush | None = None
        self._flush_manifest: Manifest | None = None
        self.protected = Protected()
        self.hook = hook if hook is not None else _hook_from_env(env)
        self._stores = self._open_stores()
        self._finalized = False
        self._progress_fd: int | None = None
        self._progress = 0
        self._rework_until: int | None = None
        self._unannounced: dict[str, int] = {}  # phases whose begin the hook could not send
        self._rework_start = 0.0
        latest = max((max(s.committed(), default=0) for s in self._stores.values()), default=0)
        self._next_id = max(self.comm.allgather(latest)) + 1
        now = time.monotonic()
        self._last_time = dict.fromkeys(self._stores, now)
        self._last_iteration = dict.fromkeys(self._stores, 0)
        self._last_seconds: dict[int, float] = {}
        self.history: list[CheckpointInfo] = []

    # ------------------------------------------------------------------ set-up

    @property
    def state(self) -> dict[str, Any]:
        """Small picklable application state saved with every checkpoint."""
        return self.protected.state

    def protect(self, name: str, obj: Any) -> None:
        """Save ``obj`` (a C-contiguous NumPy array or buffer) under ``name`` at every
        checkpoint; recovery reads it back in place. Same names in the same order on restart."""
        self.protected.add(name, obj)

    def _level(self, number: int) -> LevelConfig:
        return self.config.level(number)

    def _store_base(self, number: int) -> Path:
        """Where a level's store lives. Levels 2 and 3 get their own subdirectory of the
        node-local directory (``level2``, ``level3``): each level's checkpoints must be
        listed, kept (keep-last-k) and removed apart from the other levels' — sharing one
        directory, a level-1 cleanup would delete the older level-2 checkpoint that a node
        loss needs."""
        if number == 4:
            assert self.config.global_dir is not None
            return Path(os.path.expanduser(self.config.global_dir))
        assert self.config.local_dir is not None
        base = self.topology.local_base(self.config.local_dir, self.node)
        return base if number == 1 else base / f"level{number}"

    def _open_stores(self) -> dict[int, CheckpointStore]:
        """The stores of the enabled levels, checked on every rank (collective)."""
        stores: dict[int, CheckpointStore] = {}
        problem = None
        try:
            levels = set(self.config.enabled_levels) | ({1} if self._async_flush else set())
            for number in sorted(levels):
                base = self._store_base(number)
                local = self.config.local_dir
                if number != 4 and local is not None and Path(os.path.expanduser(local)).is_dir():
                    base.mkdir(parents=True, exist_ok=True)  # node<k>/, level2/, level3/
                store = CheckpointStore(base, self.config.name)
                store.check_usable()
                stores[number] = store
        except (StoreError, OSError) as exc:
            problem = str(exc)
        problems = self.comm.allgather(problem)
        bad = next(((r, p) for r, p in enumerate(problems) if p), None)
        if bad is not None:
            raise StoreError(bad[1] if bad[0] == self.rank else f"rank {bad[0]}: {bad[1]}")
        for number, store in stores.items():
            if self._is_leader(number):
                _tidy(
                    store.discard_partial, f"remove leftovers of a crashed run in {store.job_dir}"
                )
        self.comm.barrier()
        return stores

    def _is_leader(self, level: int) -> bool:
        """Whether this rank commits and cleans its directory of ``level``."""
        if level == 4:
            return self.rank == 0
        return self.rank == self.topology.leader(self.node)

    def _dir_ranks(self, level: int) -> tuple[int, ...] | None:
        """The ranks whose files this rank's directory of ``level`` holds (None: all)."""
        return None if level == 4 else self.topology.nodes[self.node]

    # ------------------------------------------------------------------ when

    def need_checkpoint(self, iteration: int | None = None) -> int | None:
        """The level due now (the highest if several), or None. Collective when any interval
        is in seconds or automatic (rank 0 decides, so every rank takes the same decision),
        and while an asynchronous level-4 flush is under way (its completion is checked, and
        its failure raised as :class:`CheckpointError`, here).

        An interval of N iterations is due when ``iteration`` reaches the next multiple of N
        after the last checkpoint at that level or a higher one (a higher level serves the
        lower ones too). Multiples rather than "N since the last one" keep the schedule of a
        restarted run the same as that of a run without failures: with levels every 10 and 50
        iterations, checkpoints fall on 10, 20, …, 50 (the higher level), 60, … whether or not
        the run was restarted at 110.
        """
        self._check_open()
        self._poll_flush(wait=False)
        if iteration is not None:
            if self._rework_until is not None and iteration >= self._rework_until:
                self._end_rework(ok=True)  # the lost work is done again
            self._note_progress(iteration)
        due: list[int] = []
        timed = False
        now = time.monotonic()
        for number in self._stores:
            lc = self._level(number)
            if lc.every_iterations is not None:
                if iteration is None:
                    raise ValueError(
                        f"level {number} checkpoints every {lc.every_iterations} iterations: "
                        "pass the iteration to need_checkpoint()"
                    )
                every = lc.every_iterations
                if iteration // every > self._last_iteration[number] // every:
                    due.append(number)
            elif lc.every_s is not None or lc.auto:
                timed = True
                interval = lc.every_s if lc.every_s is not None else self._auto_interval(number)
                if now - self._last_time[number] >= interval:
                    due.append(number)
        level = max(due) if due else None
        return self.comm.bcast(level) if timed and self.comm.size > 1 else level

    def _auto_interval(self, level: int) -> float:
        """The time-optimal interval (saito2013 §6's model) for the measured checkpoint time
        of ``level`` and the configured MTBF; 0 (checkpoint now) until one was measured."""
        seconds = self._last_seconds.get(level)
        mtbf = self.config.mtbf
        if seconds is None or mtbf is None:
            return 0.0
        # imported here: the model pulls in SciPy (~30 MiB and ~0.15 s per rank at start-up),
        # which only jobs with an automatic interval need
        from greenckpt.model.intervals import time_optimal_interval  # noqa: PLC0415

        return float(time_optimal_interval(max(seconds, 1e-3), 1.0 / mtbf))

    # ------------------------------------------------------------------ checkpoint

    def checkpoint(
        self, level: int | None = None, *, iteration: int | None = None
    ) -> CheckpointInfo:
        """Write a checkpoint at ``level`` (default: the lowest enabled), collectively.

        Returns when the checkpoint is committed on every rank; raises
        :class:`CheckpointError` on every rank if any rank failed (nothing committed).
        Level 4 with ``async = true`` returns once the checkpoint is committed on node-local
        storage (level 1) and leaves the copy to the global file system to a background
        thread (``flushing=True`` in the result); one flush runs at a time, so a new one
        first waits for the previous.
        """
        self._check_open()
        number = min(self._stores) if level is None else level
        if number not in self._stores:
            raise ValueError(
                f"level {number} is not enabled: enabled levels are "
                f"{', '.join(map(str, self._stores))}"
            )
        flushing = number == 4 and self._async_flush
        self._poll_flush(wait=flushing)
        info = self._checkpoint_at(1 if flushing else number, iteration)
        if flushing:
            self._start_flush(info)
            info = replace(info, level=4, flushing=True)
        self._last_seconds[number] = info.seconds
        for lower in self._stores:  # a checkpoint at a level also serves every lower one
            if lower <= number:
                self._last_time[lower] = time.monotonic()
                if iteration is not None:
                    self._last_iteration[lower] = iteration
        self.history.append(info)
        return info

    def _checkpoint_at(self, number: int, iteration: int | None) -> CheckpointInfo:
        """A synchronous checkpoint at ``number``, committed on every rank (collective)."""
        start = time.monotonic()
        ckpt_id = self._next_id
        self._next_id += 1
        store = self._stores[number]
        advice = self._begin("checkpoint", number, store.job_dir)
        per_node = advice.io_processes or self.config.writers_per_node
        waves = write_waves(self.topology, per_node, self.config.writers_total)
        ok = False
        try:
            info = self._write_and_commit(number, store, ckpt_id, iteration, waves, start)
            ok = True
        finally:
            self._end("checkpoint", ok, time.monotonic() - start)
        return info

    def _write_and_commit(
        self,
        number: int,
        store: CheckpointStore,
        ckpt_id: int,
        iteration: int | None,
        waves: list[tuple[int, ...]],
        start: float,
    ) -> CheckpointInfo:
        """Write every rank's file in ``waves``, agree, add redundancy, commit (collective)."""
        entry, error = None, None
        for wave in waves:
            if self.rank in wave:
                try:
                    entry = self._write(number, store, ckpt_id)
                except Exception as exc:  # reported to every rank below
                    error = _one_line(exc)
                maybe_fail("checkpoint-write", rank=self.rank, iteration=iteration)
            if len(waves) > 1:
                self.comm.barrier()
        # rank 0's clock dates the checkpoint: every node's manifest must be the same
        outcomes = self.comm.allgather((entry, error, utc_now_iso()))
        created = outcomes[0][2]
        failed = [(r, e) for r, (_, e, _) in enumerate(outcomes) if e is not None]
        if failed:
            self._abort(number, store, ckpt_id)
            r, e = failed[0]
            raise CheckpointError(
                f"checkpoint {ckpt_id} (level {number}) failed on rank {r}: {e}; nothing was "
                "committed and the previous checkpoints are intact"
            )
        entries = tuple(e for e, _, _ in outcomes if e is not None)
        redundancy, problem = self._protect(number, store, ckpt_id, entries)
        if problem is not None:
            self._abort(number, store, ckpt_id)
            raise CheckpointError(
                f"checkpoint {ckpt_id} (level {number}) failed: {problem}; nothing was "
                "committed and the previous checkpoints are intact"
            )
        manifest = Manifest(
            name=self.config.name,
            id=ckpt_id,
            level=number,
            created=created,
            iteration=iteration,
            checksum=self.config.checksum,
            codec=self._codec_label(number),
            nranks=self.comm.size,
            nodes=self.topology.nodes,
            ranks=entries,
            redundancy=redundancy,
        )
        commit_error = None
        maybe_fail("checkpoint-commit", rank=self.rank, iteration=iteration)
        if self._is_leader(number):
            try:
                store.commit(ckpt_id, manifest, ranks=self._dir_ranks(number))
            except (StoreError, OSError, ValueError) as exc:
                commit_error = _one_line(exc)
        commits = self.comm.allgather(commit_error)
        if any(commits):
            if self._is_leader(number) and commit_error is None:
                # committed here but not everywhere: not a checkpoint
                _tidy(lambda: store.remove(ckpt_id), f"remove checkpoint {ckpt_id}")
            self._abort(number, store, ckpt_id)
            r = next(i for i, c in enumerate(commits) if c)
            raise CheckpointError(
                f"checkpoint {ckpt_id} (level {number}) could not be committed on rank {r}: "
                f"{commits[r]}; the previous checkpoints are intact"
            )
        if self._is_leader(number):
            flushing = [self._flush.ckpt_id] if self._flush is not None and number == 1 else []
            keep = self.config.keep
            kept = [ckpt_id, *flushing]
            _tidy(lambda: store.cleanup(keep, protect=kept, wait=False), "remove old checkpoints")
        mine = entries[self.rank]
        return CheckpointInfo(
            ckpt_id,
            number,
            iteration,
            time.monotonic() - start,
            mine.logical_bytes,
            mine.stored_bytes,
        )

    # ------------------------------------------------------------------ runtime notifications

    def _begin(self, kind: PhaseKind, level: int | None, path: Path) -> PhaseAdvice:
        """Tell the runtime that a phase starts (node leaders, with their node's bytes); rank
        0's advice is used by every rank, so the write waves agree (collective with a hook)."""
        if isinstance(self.hook, NullHook):
            return PhaseAdvice()
        sizes = self.comm.allgather(self.protected.nbytes)
        size = sum(sizes[r] for r in self.topology.nodes[self.node])
        advice = self.comm.bcast(self._tell_begin(kind, level, str(path), size))
        if advice.io_processes is not None and advice.io_processes < 1:
            return PhaseAdvice(None, advice.note)
        return advice

    def _tell_begin(self, kind: HookKind, level: int | None, path: str, size: int) -> PhaseAdvice:
        """The node leader tells the runtime a phase starts; its advice (none elsewhere)."""
        if isinstance(self.hook, NullHook) or self.rank != self.topology.leader(self.node):
            return PhaseAdvice()
        try:
            return self.hook.begin(kind, level=level, path=path, size=size, node=self.node)
        except Exception as exc:  # a runtime must never make a checkpoint fail
            _warn_hook(kind, "start", exc)
            self._unannounced[kind] = self._unannounced.get(kind, 0) + 1
            return PhaseAdvice()

    def _end(self, kind: HookKind, ok: bool, seconds: float) -> None:
        """Tell the runtime that this node's part of a phase is over (node leaders)."""
        if isinstance(self.hook, NullHook) or self.rank != self.topology.leader(self.node):
            return
        if self._unannounced.get(kind, 0) > 0:
            # Its begin never reached the runtime: an end would close another notifier's
            # phase of the same kind early, skewing its accounting. Say so instead.
            self._unannounced[kind] -= 1
            _warn_hook(kind, "end", RuntimeError("not sent, since its start never arrived"))
            return
        try:
            self.hook.end(kind, node=self.node, ok=ok, seconds=seconds)
        except Exception as exc:  # see _tell_begin
            _warn_hook(kind, "end", exc)

    # ------------------------------------------------------------------ asynchronous flush

    def _start_flush(self, info: CheckpointInfo) -> None:
        """Copy this rank's files of level-1 checkpoint ``info.id`` to the global store's
        staging directory in the background (see :mod:`greenckpt.ckpt.flush`)."""
        local, global_ = self._stores[1], self._stores[4]
        self._begin("flush", 4, global_.job_dir)
        try:
            manifest = local.read(info.id)
            source = local.committed_path(info.id) / manifest.ranks[self.rank].file
            stage = global_.staging_path(info.id)
            stage.mkdir(parents=True, exist_ok=True)
        except (OSError, ValueError) as exc:
            # kept as a failed flush: reported on every rank at the next call, like any other
            self._flush = Flush.failed(info.id, info.iteration, _one_line(exc))
            return
        self._flush_manifest = replace(manifest, level=4, redundancy={})
        self._flush = Flush(info.id, [source], stage, self.rank, info.iteration)

    def _poll_flush(self, *, wait: bool) -> None:
        """Commit the level-4 copy once every rank's flush is over, or raise its failure
        (collective while a flush is under way; nothing otherwise)."""
        flush, manifest = self._flush, self._flush_manifest
        if flush is None:
            return
        if wait:
            flush.wait()
        states = self.comm.allgather((flush.done(), flush.error))
        if not all(done for done, _ in states):
            return
        self._flush = self._flush_manifest = None
        store = self._stores[4]
        errors = [e for _, e in states]
        self._end("flush", not any(errors), flush.seconds or 0.0)
        if not any(errors) and self.rank == 0:
            assert manifest is not None  # rank 0's flush started, or it would have an error
            try:
                store.commit(flush.ckpt_id, manifest)
            except (StoreError, OSError, ValueError) as exc:
                errors[0] = _one_line(exc)
        errors[0] = self.comm.bcast(errors[0])
        bad = next(((r, e) for r, e in enumerate(errors) if e), None)
        if bad is not None:
            self._abort(4, store, flush.ckpt_id)
            raise CheckpointError(
                f"the asynchronous flush of checkpoint {flush.ckpt_id} to the global file "
                f"system failed on rank {bad[0]}: {bad[1]}; it was not committed there "
                "(the checkpoint is still on node-local storage)"
            )
        if self.rank == 0:
            keep, done = self.config.keep, flush.ckpt_id
            _tidy(lambda: store.cleanup(keep, protect=[done]), "remove old checkpoints")
        assert manifest is not None  # no rank failed, so every rank started its flush
        mine = manifest.ranks[self.rank]
        self.history.append(
            CheckpointInfo(
                flush.ckpt_id,
                4,
                flush.iteration,
                flush.seconds or 0.0,
                mine.logical_bytes,
                mine.stored_bytes,
            )
        )

    def _protect(
        self, level: int, store: CheckpointStore, ckpt_id: int, entries: tuple[RankEntry, ...]
    ) -> tuple[dict[str, Any], str | None]:
        """Levels 2 and 3: the redundant files next to the rank files (collective); the
        manifest's ``redundancy`` object, or the first rank's error."""
        stage = store.staging_path(ckpt_id)
        if level == 2 and self._partner is not None:
            bad = first_cause(self.comm.allgather(self._partner.protect(stage, entries)))
            if bad is not None:
                return {}, f"rank {bad[0]}: {bad[1]}"
            return self._partner.redundancy(), None
        if level == 3 and self._erasure is not None:
            outcomes = self.comm.allgather(self._erasure.protect(stage, entries))
            bad = first_cause([e for _, e in outcomes])
            if bad is not None:
                return {}, f"rank {bad[0]}: {bad[1]}"
            return self._erasure.redundancy([info or {} for info, _ in outcomes]), None
        return {}, None

    def _codec_label(self, level: int) -> str | None:
        spec = parse_codec(self._level(level).codec)
        return None if spec is None else spec.label

    def _write(self, level: int, store: CheckpointStore, ckpt_id: int) -> RankEntry:
        """This rank's file into the staging directory; its manifest entry.

        The data stream from the protected buffers to the file (its digest computed as they
        pass) while a thread takes the variables' digests from memory: the writer releases the
        GIL in every ``pwrite`` and ``fsync`` (xxhash does not release it, but hashes 256 KiB
        in ~15 µs), so the hashing runs while the writer waits on the kernel.
        Every byte is so read twice, at two moments; without a codec the file holds exactly
        those bytes, so the file's digest and the variables' stream digest must agree. If
        they do not, memory changed while the checkpoint was written, and the checkpoint fails
        here rather than being committed with data that no variable's digest matches (with a
        codec the change is caught at recovery, where each variable is checked as it is
        decompressed).
        """
        stage = store.staging(ckpt_id)
        name = f"rank-{self.rank:06d}.data"
        path = stage / name
        slots = self.protected.slots(for_write=True)
        total = sum(len(s.view) for s in slots)
        codec = parse_codec(self._level(level).codec)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644))
        with ThreadPoolExecutor(1, thread_name_prefix="greenckpt-digest") as pool:
            hashing = pool.submit(self.protected.variables, slots, self.config.checksum)
            (report,) = run_chunks(
                "write",
                [[Chunk(str(path), 0, total, ConcatSource([s.view for s in slots]))]],
                codec=codec,
                digest=self.config.checksum,
            )
            variables, stream = hashing.result()
        assert report.digests is not None
        if codec is None and stream != report.digests[0]:
            raise CheckpointError(
                "the protected data changed while the checkpoint was being written (memory "
                "no longer matches the bytes stored); is another thread modifying them?"
            )
        return RankEntry(
            rank=self.rank,
            node=self.node,
            file=name,
            logical_bytes=total,
            stored_bytes=report.stored_bytes,
            digest=report.digests[0],
            variables=variables,
        )

    def _abort(self, level: int, store: CheckpointStore, ckpt_id: int) -> None:
        """Remove a failed checkpoint's staging data (after every rank stopped writing)."""
        self.comm.barrier()
        if self._is_leader(level):
            shutil.rmtree(store.staging_path(ckpt_id), ignore_errors=True)
        self.comm.barrier()

    # ------------------------------------------------------------------ recover

    def recover(self, *, missing_ok: bool = True) -> RecoveryInfo | None:
        """Restore the newest checkpoint that every rank can read and verify (collective).

        Returns None when there is no checkpoint at all (a first run) and ``missing_ok``;
        raises :class:`RecoveryError` when checkpoints exist but none can be restored (the
        protected buffers may then hold partial data).
        """
        self._check_open()
        self._poll_flush(wait=True)
        start = time.monotonic()
        mine = {number: store.committed() for number, store in self._stores.items()}
        everyone = self.comm.allgather(mine)

        def held(ckpt_id: int, number: int) -> bool:
            holders = [ckpt_id in other.get(number, ()) for other in everyone]
            # levels 2 and 3 rebuild what a node lost; levels 1 and 4 need every copy
            return any(holders) if number in (2, 3) else all(holders)

        # newest first; of one checkpoint's copies (an L1 checkpoint flushed to L4 keeps its
        # id), the lowest level first: node-local storage is the fastest to read back
        candidates = sorted(
            {
                (ckpt_id, number)
                for other in everyone
                for number, ids in other.items()
                for ckpt_id in ids
                if held(ckpt_id, number)
            },
            key=lambda c: (-c[0], c[1]),
        )
        usable = {c for c, _ in candidates}
        # from every rank's listing, so that every rank takes the same branch below
        held_anywhere = {i for other in everyone for ids in other.values() for i in ids}
        orphans = sorted(held_anywhere - usable, reverse=True)
        if not candidates and not orphans and missing_ok:
            return None  # a first run: nothing to restore, no restart phase
        base = self._stores[min(self._stores)].job_dir
        advice = self._begin("restart", None, base)
        per_node = advice.io_processes or self.config.writers_per_node
        waves = write_waves(self.topology, per_node, self.config.writers_total)
        ok = False
        try:
            info = self._restore_newest(candidates, orphans, everyone, waves, start)
            ok = True
        finally:
            self._end("restart", ok, time.monotonic() - start)
        self._begin_rework(info)
        return info

    # ------------------------------------------------------------------ rework

    def _progress_path(self) -> Path:
        store = self._stores[min(self._stores)]
        return store.base / f".{self.config.name}.progress"

    def _note_progress(self, iteration: int) -> None:
        """Rank 0 keeps the newest iteration reached in a small file, so that after a restart
        the runtime can be told how long the application recomputes lost work (rework).

        Only with a runtime attached; one ``pwrite`` per call and no fsync: the file only has
        to outlive the process (a page-cache write does), and losing it only loses the rework
        accounting, never data.
        """
        if self.rank != 0 or isinstance(self.hook, NullHook) or iteration <= self._progress:
            return
        self._progress = iteration
        try:
            if self._progress_fd is None:
                flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
                self._progress_fd = os.open(self._progress_path(), flags, 0o644)
            os.pwrite(self._progress_fd, f"{iteration:20d}\n".encode(), 0)
        except OSError as exc:
            _warn_hook("rework", "progress note", exc)

    def _begin_rework(self, info: RecoveryInfo) -> None:
        """After a restart: if the run had got further than the restored iteration, announce
        the rework until it gets there again (collective with a hook)."""
        if isinstance(self.hook, NullHook) or info.iteration is None:
            return
        reached = None
        if self.rank == 0:
            try:
                reached = int(self._progress_path().read_text().strip() or 0)
            except (OSError, ValueError):
                reached = None
        reached = self.comm.bcast(reached)
        self._progress = max(self._progress, reached or 0)
        if reached is None or reached <= info.iteration:
            return
        self._rework_until = reached
        self._rework_start = time.monotonic()
        self._tell_begin("rework", None, "", 0)

    def _end_rework(self, ok: bool) -> None:
        if self._rework_until is None:
            return
        self._rework_until = None
        self._end("rework", ok, time.monotonic() - self._rework_start)

    def _restore_newest(
        self,
        candidates: list[tuple[int, int]],
        orphans: list[int],
        everyone: list[dict[int, list[int]]],
        waves: list[tuple[int, ...]],
        start: float,
    ) -> RecoveryInfo:
        """Try ``candidates`` newest first; the first every rank restores (collective)."""
        skipped: list[str] = []
        for ckpt_id, number in candidates:
            manifest, why = self._shared_manifest(number, ckpt_id, everyone)
            if manifest is None:
                skipped.append(f"checkpoint {ckpt_id} (level {number}): {why}")
                continue
            maybe_fail("restart-read", rank=self.rank, iteration=manifest.iteration)
            problem = self._read_in_waves(number, ckpt_id, manifest, waves)
            problems = self.comm.allgather(problem)
            bad = [(r, p) for r, p in enumerate(problems) if p]
            rebuilt: tuple[int, ...] = ()
            if bad and number in (2, 3):
                lost = {r for r, _ in bad}
                failure = self._rebuild(number, ckpt_id, manifest, lost)
                if failure is None:
                    rebuilt = tuple(sorted(lost))
                    problem = self._try_read(number, ckpt_id, manifest) if problem else None
                    problems = self.comm.allgather(problem)
                    bad = [(r, p) for r, p in enumerate(problems) if p]
                else:
                    r, p = bad[0]
                    skipped.append(
                        f"checkpoint {ckpt_id} (level {number}): rank {r}: {p}; rebuilding "
                        f"failed: {failure}"
                    )
                    continue
            if not bad:
                for n in self._stores:
                    self._last_time[n] = time.monotonic()
                    self._last_iteration[n] = manifest.iteration or 0
                self._next_id = max(self._next_id, ckpt_id + 1)
                passed = [f"checkpoint {o}: not held by every node" for o in orphans if o > ckpt_id]
                return RecoveryInfo(
                    ckpt_id,
                    number,
                    manifest.iteration,
                    time.monotonic() - start,
                    tuple(passed + skipped),
                    rebuilt,
                )
            r, p = bad[0]
            skipped.append(f"checkpoint {ckpt_id} (level {number}): rank {r}: {p}")
        for ckpt_id in orphans:
            skipped.append(f"checkpoint {ckpt_id}: not held by every node")
        detail = "; ".join(skipped) if skipped else "no checkpoint exists"
        raise RecoveryError(f"no checkpoint could be restored: {detail}")

    def _read_in_waves(
        self, level: int, ckpt_id: int, manifest: Manifest, waves: list[tuple[int, ...]]
    ) -> str | None:
        """:meth:`_try_read`, ranks reading at once as many as the waves allow (collective)."""
        problem = None
        for wave in waves:
            if self.rank in wave:
                problem = self._try_read(level, ckpt_id, manifest)
            if len(waves) > 1:
                self.comm.barrier()
        return problem

    def _shared_manifest(
        self, level: int, ckpt_id: int, everyone: list[dict[int, list[int]]]
    ) -> tuple[Manifest | None, str]:
        """The checkpoint's manifest, the same on every rank (collective).

        Levels 1 and 4: each rank reads its own directory's copy (they must all be readable).
        Levels 2 and 3: read by the first rank whose node holds a readable copy and broadcast,
        so ranks of a node that lost everything learn what to rebuild.
        """
        if level not in (2, 3):
            try:
                manifest: Manifest | None = self._stores[level].read(ckpt_id)
                problem = ""
            except (OSError, ValueError) as exc:
                manifest, problem = None, _one_line(exc)
            seen = self.comm.allgather(
                (problem, None if manifest is None else (manifest.created, manifest.iteration))
            )
            bad = next(((r, p) for r, (p, _) in enumerate(seen) if p), None)
            if bad is not None:
                return None, f"rank {bad[0]}: {bad[1]}"
            if len({f for _, f in seen}) > 1:  # e.g. node-local leftovers of another run
                return None, "the nodes hold different manifests for it (written by different runs)"
            return manifest, ""
        reasons = []
        for root, other in enumerate(everyone):
            if ckpt_id not in other.get(level, ()):
                continue
            found: tuple[Manifest | None, str] = (None, "")
            if self.rank == root:
                try:
                    found = (self._stores[level].read(ckpt_id), "")
                except (OSError, ValueError) as exc:
                    found = (None, _one_line(exc))
            manifest, problem = self.comm.bcast(found, root)
            if manifest is not None:
                return manifest, ""
            reasons.append(f"rank {root}: {problem}")
        return None, "; ".join(reasons) or "no node holds it"

    def _rebuild(self, level: int, ckpt_id: int, manifest: Manifest, lost: set[int]) -> str | None:
        """Write the ``lost`` ranks' files (and the redundancy they held) again into their
        nodes' directories from partner copies or parity (collective); why not, or None.

        Rebuilt files are written under hidden names and renamed into place only when every
        rank succeeded. A node that lost its whole directory gets a staging directory that its
        leader commits with the checkpoint's manifest, exactly like a new checkpoint.
        """
        store = self._stores[level]
        committed = store.committed_path(ckpt_id)
        present = committed.is_dir()
        redundancy = self._partner if level == 2 else self._erasure
        assert redundancy is not None
        problem: str | None = None
        try:
            target = committed if present else store.staging(ckpt_id)
        except (OSError, ValueError) as exc:
            problem = _one_line(exc)
        problems = self.comm.allgather(problem)
        bad = next(((r, p) for r, p in enumerate(problems) if p), None)
        if bad is not None:
            self._abort_rebuild(level, store, ckpt_id, present, [])
            return f"rank {bad[0]}: {bad[1]}"
        done, failure = redundancy.rebuild(manifest, lost, target)
        if failure:
            self._abort_rebuild(level, store, ckpt_id, present, done)
            return failure
        try:
            for tmp, final in done:
                os.replace(tmp, final)
            if done:
                fsync_directory(target)
        except OSError as exc:
            problem = _one_line(exc)
        # every rank's rebuilt files must be in place before a node directory is committed
        bad = next(((r, p) for r, p in enumerate(self.comm.allgather(problem)) if p), None)
        if bad is None and not present and self._is_leader(level):
            try:
                store.commit(ckpt_id, manifest, ranks=self._dir_ranks(level))
            except (OSError, ValueError) as exc:
                problem = _one_line(exc)
            if problem is None:
                problem = self._redundancy_missing(level, store, ckpt_id, manifest)
        if bad is None:
            bad = next(((r, p) for r, p in enumerate(self.comm.allgather(problem)) if p), None)
        if bad is not None:
            self._abort_rebuild(level, store, ckpt_id, present, done)
            return f"rank {bad[0]}: {bad[1]}"
        return None

    def _redundancy_missing(
        self, level: int, store: CheckpointStore, ckpt_id: int, manifest: Manifest
    ) -> str | None:
        """After committing a rebuilt node directory: are its partner copies / parity files
        there too? (The store checks only the rank files.)"""
        directory = store.committed_path(ckpt_id)
        for rank in self.topology.nodes[self.node]:
            name = manifest.ranks[rank].file
            if level == 2 and self._partner is not None:
                name = copy_name(manifest.ranks[self._partner.owners[rank]].file)
            elif level == 3:
                name = parity_name(name)
            if not (directory / name).is_file():
                return f"the rebuilt {directory} lacks {name}"
        return None

    def _abort_rebuild(
        self,
        level: int,
        store: CheckpointStore,
        ckpt_id: int,
        present: bool,
        done: list[tuple[Path, Path]],
    ) -> None:
        """Remove what a failed rebuild wrote (collective). Files already renamed into a
        committed directory stay: each was checked against its recorded digest. A node
        directory committed by this rebuild is removed again: it may lack redundancy."""
        for tmp, _ in done:
            tmp.unlink(missing_ok=True)
        self.comm.barrier()
        if not present and self._is_leader(level):
            shutil.rmtree(store.staging_path(ckpt_id), ignore_errors=True)
            if store.committed_path(ckpt_id).is_dir():
                _tidy(lambda: store.remove(ckpt_id), f"remove checkpoint {ckpt_id}")
        self.comm.barrier()

    def _try_read(self, level: int, ckpt_id: int, manifest: Manifest) -> str | None:
        """Read this rank's data of a checkpoint into the protected buffers; why not, or None."""
        store = self._stores[level]
        try:
            if manifest.nranks != self.comm.size:
                return f"written by {manifest.nranks} ranks, this job has {self.comm.size}"
            entry = manifest.ranks[self.rank]
            mismatch = self.protected.check(entry.variables)
            if mismatch is not None:
                return mismatch
            path = store.committed_path(ckpt_id) / entry.file
            size = path.stat().st_size
            if size != entry.stored_bytes:
                return f"{path} holds {size} B, the manifest says {entry.stored_bytes} B"
            views, state = self.protected.read_slots(entry.variables)
            # Without a codec the file's digest covers every variable's bytes (the write
            # checked they matched memory); with one, each variable is also hashed as its
            # bytes land, which catches memory that changed during that checkpoint.
            per_variable = manifest.codec is not None
            sink = ConcatSink(views, checksum=manifest.checksum if per_variable else None)
            (report,) = run_chunks(
                "read",
                [[Chunk(str(path), 0, entry.logical_bytes, sink=sink)]],
                codec=parse_codec(manifest.codec),
                digest=manifest.checksum,
            )
            assert report.digests is not None
            if report.digests[0] != entry.digest:
                return f"{path} is corrupt: its {manifest.checksum} digest does not match"
            if per_variable:
                for v, digest in zip(entry.variables, sink.digests(), strict=True):
                    if digest != v.digest:
                        return f"variable {v.name} does not match its digest after reading"
            self.protected.load_state(state)
        except Exception as exc:  # any failure here must reach the collective verdict
            return _one_line(exc)
        return None

    # ------------------------------------------------------------------ end

    def _check_open(self) -> None:
        if self._finalized:
            raise RuntimeError("this Checkpointer was finalized: create a new one")

    def finalize(self) -> None:
        """End of the run (collective): waits for an asynchronous flush and commits it (or
        raises its failure), so nothing is left in flight."""
        if not self._finalized:
            self._end_rework(ok=True)
            if self._progress_fd is not None:
                os.close(self._progress_fd)
                self._progress_fd = None
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
