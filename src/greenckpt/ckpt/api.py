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
asynchronous flush :mod:`~greenckpt.ckpt.flush`, every collective verdict
:mod:`~greenckpt.ckpt.agree`. Why it works as it does (the commit protocol, in-place protected
objects, recovery order, levels 2 and 3, failure points): docs/design/checkpointer.md.
"""

from __future__ import annotations

import contextlib
import operator
import os
import time
import warnings
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, SupportsIndex

from greenckpt.ckpt.agree import agree, one_line
from greenckpt.ckpt.comm import Comm, world
from greenckpt.ckpt.commit import Commit, write_and_commit, write_rank_file
from greenckpt.ckpt.config import ON_UNRECOVERABLE, Config, ConfigError, LevelConfig, load_config
from greenckpt.ckpt.flush import Flush
from greenckpt.ckpt.hooks import HookKind, NullHook, PhaseAdvice, PhaseHook, PhaseKind
from greenckpt.ckpt.job import Job, tidy
from greenckpt.ckpt.levels import BUILTIN_LEVELS, LevelSpec, Storage, level_spec
from greenckpt.ckpt.manifest import Manifest, RankEntry
from greenckpt.ckpt.protect import Identity, Protected
from greenckpt.ckpt.records import CheckpointError, CheckpointInfo, RecoveryError, RecoveryInfo
from greenckpt.ckpt.recovery import candidates, restore_newest
from greenckpt.ckpt.recovery import set_aside as set_stores_aside
from greenckpt.ckpt.redundancy import Redundancy, build_redundancy
from greenckpt.ckpt.schedule import (
    BACKOFF_MAX_FACTOR,
    BACKOFF_MIN_S,
    Backoff,
    DecisionPolicy,
    Last,
    fallback_level,
    policy_for,
    stand_in_reason,
)
from greenckpt.ckpt.store import CheckpointStore, FreeSpaceUnknownError, StoreError
from greenckpt.ckpt.topology import Topology, write_waves
from greenckpt.errors import InvalidValueError, UsageError
from greenckpt.io import parse_codec, run_chunks

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

_BACKOFF_MAX_FACTOR = BACKOFF_MAX_FACTOR
_BACKOFF_MIN_S = BACKOFF_MIN_S
"""Read at each failure (tests lower it): see :data:`greenckpt.ckpt.schedule.BACKOFF_MIN_S`."""

_BLOCK = 4096
"""Files are counted in whole blocks of this size when checking free space."""

_DIRECTORY_ALLOWANCE = 64 * 1024
_RANK_ALLOWANCE = 4096
"""Room counted per checkpoint directory (its manifest, directory blocks), plus this much per
rank whose files it holds, on top of the files themselves."""


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


def _size(nbytes: int) -> str:
    return f"{nbytes} B ({nbytes / 2**20:.1f} MiB)"


def _blocks(nbytes: int) -> int:
    return -(-nbytes // _BLOCK) * _BLOCK


_one_line = one_line
_tidy = tidy


def _warn_hook(kind: str, what: str, exc: BaseException) -> None:
    warnings.warn(
        f"greenckpt: could not notify the runtime of the {what} of a {kind}: {_one_line(exc)}; "
        "the phase goes on with the configured settings",
        RuntimeWarning,
        stacklevel=3,
    )


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
        flushed = [n for n in self.config.enabled_levels if self._level(n).async_flush]
        self._flush_level: int | None = flushed[0] if flushed else None
        self._flush_source = 0 if self._flush_level is None else self._flush_via()
        self._flush: Flush | None = None
        self._flush_manifest: Manifest | None = None
        self.hook = hook if hook is not None else _hook_from_env(env)
        self._stores = self._job.stores  # the same dict: filled here, read by every part
        self._stores.update(self._open_stores())
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
        self._backoff: dict[int, Backoff] = {}
        self._covering: dict[int, tuple[int, ...]] = {}
        self._iteration_seen: int | None = None
        self._verified: dict[int, list[int]] = {}
        self._stored_ratio: dict[int, float] = {}
        self._space_unknown: set[Path] = set()  # stores whose free space statvfs cannot tell
        self.set_aside: tuple[Path, ...] = ()
        """Where the last ``recover(on_unrecoverable="fresh")`` moved the checkpoints it could
        not restore (every node's directories); empty when it moved none."""

    def _flush_via(self) -> int:
        """The level whose store an asynchronous checkpoint is written to first; checked."""
        flush = self._flush_level
        via = None if flush is None else level_spec(flush).async_via
        assert flush is not None and via is not None  # async applies only to such levels
        if level_spec(via).storage is Storage.NODE_LOCAL and self.config.local_dir is None:
            raise InvalidValueError(
                f"level {flush} with async = true flushes from node-local storage: set local_dir "
                "too (checkpoints are written there first), or set async = false"
            )
        self._check_flush_codec(flush, via)
        return via

    def _check_flush_codec(self, flush: int, via: int) -> None:
        """Refuse a level-4 codec that an asynchronous flush would ignore: the flush copies
        the level-1 files byte for byte (their digests must hold on both copies), so the
        level-4 copy always has level 1's codec. Silently storing it otherwise would surprise
        whoever sized the global file system for the codec they asked for."""
        wanted, used = self._codec_label(flush), self._codec_label(via)
        # a Config built directly has no sources: only a codec it names counts as asked for
        source = self.config.sources.get(f"l{flush}.codec", "Config")
        asked = wanted is not None or source not in ("default", "Config")
        if asked and wanted != used:
            raise ConfigError(
                f"{source}: l{flush} codec = {wanted or 'none'!r} cannot apply with async = true: "
                f"the background flush copies the level-{via} files as they are, with level "
                f"{via}'s codec ({used or 'none'!r}); set the same codec for l{via}, remove it "
                f"from l{flush}, or set async = false"
            )

    # ------------------------------------------------------------------ set-up

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

    def _store_base(self, number: int) -> Path:
        """Where a level's store lives on this node (:meth:`LevelSpec.base`)."""
        spec = self._spec(number)
        directory = getattr(self.config, spec.storage.setting)
        assert isinstance(directory, str)  # the Config checked it is set for enabled levels
        return spec.base(directory, self.topology, self.node)

    def _open_stores(self) -> dict[int, CheckpointStore]:
        """The stores of the enabled levels, checked on every rank (collective)."""
        stores: dict[int, CheckpointStore] = {}
        problem = None
        try:
            levels = set(self.config.enabled_levels) | ({self._flush_source} - {0})
            for number in sorted(levels):
                base = self._store_base(number)
                top = getattr(self.config, self._spec(number).storage.setting)
                if base != Path(os.path.expanduser(top)) and Path(os.path.expanduser(top)).is_dir():
                    base.mkdir(parents=True, exist_ok=True)  # node<k>/, level2/, level3/
                store = CheckpointStore(base, self.config.name)
                store.check_usable()
                stores[number] = store
        except (StoreError, OSError) as exc:
            problem = str(exc)
        bad = agree(self.comm, problem)
        if bad is not None:
            raise StoreError(bad.error if bad.rank == self.rank else str(bad))
        for number, store in stores.items():
            if self._is_leader(number):
                _tidy(
                    store.discard_partial, f"remove leftovers of a crashed run in {store.job_dir}"
                )
        self.comm.barrier()
        return stores

    def _is_leader(self, level: int) -> bool:
        """Whether this rank commits and cleans its directory of ``level``."""
        return self._job.is_leader(level)

    def _redundancy_of(self, level: int) -> Redundancy:
        """A level's redundancy (none for a level used only as a flush's source)."""
        return self._job.redundancy_of(level)

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
        if iteration is not None:
            self._iteration_seen = iteration
        self._poll_flush(wait=False)
        if iteration is not None:
            if self._rework_until is not None and iteration >= self._rework_until:
                self._end_rework(ok=True)  # the lost work is done again
            self._note_progress(iteration)
        due: list[int] = []
        timed = False
        now = time.monotonic()
        for number in self._stores:
            policy = self._policy(number)
            if policy is None:
                continue
            timed = timed or policy.clocked
            last = Last(self._last_iteration[number], self._last_time[number])
            if policy.due(last, iteration, now):
                due.append(number)
        level, covering = self._route(due, iteration, now)
        # every rank holds the same back-offs (a failure is raised on all of them), so all
        # take this branch alike; a deadline in seconds is read from each rank's own clock
        clocked = timed or any(held.in_seconds for held in self._backoff.values())
        if clocked and self.comm.size > 1:
            level, covering = self.comm.bcast((level, covering))
        self._covering = {level: covering} if level is not None and covering else {}
        return level

    @property
    def backoff(self) -> dict[int, Backoff]:
        """The levels held back after failed checkpoints, by level (a copy)."""
        return dict(self._backoff)

    def _may_try(self, number: int, iteration: int | None, now: float) -> bool:
        held = self._backoff.get(number)
        return held is None or held.over(iteration, now)

    def _route(
        self, due: list[int], iteration: int | None, now: float
    ) -> tuple[int | None, tuple[int, ...]]:
        """The level to offer for the ``due`` ones (the highest), and the held-back levels
        above it that it stands in for (a lower level standing in does not serve them by
        itself, so :meth:`checkpoint` must be told)."""
        offered: set[int] = set()
        held: set[int] = set()
        for number in due:
            if self._may_try(number, iteration, now):
                offered.add(number)
                continue
            alternative = self._fallback(number, iteration, now)
            if alternative is not None:
                offered.add(alternative)
                held.add(number)
        if not offered:
            return None, ()
        level = max(offered)
        return level, tuple(sorted(n for n in held if n > level))

    def _fallback(self, number: int, iteration: int | None, now: float) -> int | None:
        """Where a checkpoint of held-back level ``number`` goes, among the enabled levels not
        held back (:func:`~greenckpt.ckpt.schedule.fallback_level`)."""
        usable = [
            n
            for n in self.config.enabled_levels
            if n != number and n in self._stores and self._may_try(n, iteration, now)
        ]
        return fallback_level(number, usable, self._spec)

    def _policy(self, number: int) -> DecisionPolicy | None:
        """Level ``number``'s decision policy (None: only explicit checkpoints)."""
        return policy_for(number, self._level(number), partial(self._auto_interval, number))

    def _stand_in(self, number: int, alternative: int, iteration: int | None, now: float) -> str:
        """How the back-off warning describes ``alternative`` standing in for ``number``."""
        enabled = {n: self._spec(n) for n in self.config.enabled_levels}
        writable = [n for n in enabled if n in self._stores and self._may_try(n, iteration, now)]
        return stand_in_reason(number, alternative, enabled, writable)

    def _retry_interval(
        self, number: int, covering: tuple[int, ...]
    ) -> tuple[int | None, float | None]:
        """The interval a back-off of ``number`` counts in, (iterations, seconds): its own,
        else that of the level it stood in for, else ``_BACKOFF_MIN_S`` seconds."""
        for n in (number, *covering):
            policy = self._policy(n)
            if policy is not None:
                return policy.interval(_BACKOFF_MIN_S)
        return None, _BACKOFF_MIN_S

    def _note_failure(
        self,
        number: int,
        exc: CheckpointError,
        iteration: int | None,
        covering: tuple[int, ...],
        stacklevel: int = 4,
    ) -> None:
        """Hold level ``number`` back after a failed checkpoint (on every rank: the failure
        was raised on all of them); rank 0 warns at the first failure in a row."""
        at = iteration if iteration is not None else self._iteration_seen
        now = time.monotonic()
        held = Backoff.after(
            self._backoff.get(number),
            number,
            str(exc),
            at,
            now,
            self._retry_interval(number, covering),
            _BACKOFF_MIN_S,
        )
        self._backoff[number] = held
        if held.failures > 1 or self.rank != 0:
            return
        alternative = self._fallback(number, at, now)
        if alternative is None:
            meanwhile = "no other level can be written, so none is taken until then"
        else:
            meanwhile = "meanwhile its due checkpoints go to " + self._stand_in(
                number, alternative, at, now
            )
        warnings.warn(
            f"greenckpt: a level-{number} ({self._spec(number).name}) checkpoint failed: {exc}. "
            f"Backing off: level {number} is offered again {held.describe()}, the wait "
            f"doubling with each further failure (up to {_BACKOFF_MAX_FACTOR} intervals); "
            f"{meanwhile}. Said once until a level-{number} checkpoint succeeds",
            RuntimeWarning,
            stacklevel=stacklevel,
        )

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
        for it (:meth:`_check_space`, unless the ``space_check`` setting is off); otherwise
        it fails like any other, with a message naming the level, what it needs and what is
        free. A failure holds the level back
        (:class:`Backoff`). Once committed, the checkpoint retires older checkpoints of lower
        levels that it makes redundant, where it survives everything they survive
        (:meth:`_retire_below`).
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
        covering, self._covering = self._covering.get(number, ()), {}
        self._poll_flush(wait=flushing)
        written = self._flush_source if flushing else number
        try:
            if self.config.space_check:
                self._check_space(written, flush=flushing)
            info = self._checkpoint_at(written, iteration)
        except CheckpointError as exc:
            self._note_failure(number, exc, iteration, covering)
            raise
        self._stored_ratio[written] = info.stored_bytes / max(1, info.logical_bytes)
        self._committed(written, info.id)
        if flushing:
            self._start_flush(info)
            info = replace(info, level=number, flushing=True)
        self._last_seconds[number] = info.seconds
        for lower in self._stores:  # a checkpoint at a level also serves every lower one
            if lower <= number or lower in covering:  # and those it stood in for
                self._last_time[lower] = time.monotonic()
                if iteration is not None:
                    self._last_iteration[lower] = iteration
        self.history.append(info)
        return info

    # ------------------------------------------------------------------ space and retirement

    def _check_space(self, level: int, *, flush: bool) -> None:
        """Refuse a checkpoint at ``level`` before anything is written when a directory it
        writes to lacks the room (collective: :class:`CheckpointError` on every rank).

        Why before: a write that runs out of space midway has cost the time and energy of
        the bytes written before it failed, and fills the disk for everyone else. The need
        of a directory is what this checkpoint adds there: the files of the ranks it holds
        (in whole blocks), their redundancy (a partner's copy on level 2, parity on level
        3) and a small allowance for the manifest. The previous checkpoints stay until the
        new one commits, and are already counted out of the free space. With a codec the
        stored size is estimated from this level's last compression ratio (the logical size
        before the first checkpoint). ``flush``: an asynchronous level-4 checkpoint, written
        to level 1 first and then copied to the global file system — both must have room.
        A directory whose free space cannot be known is not refused: ``statvfs`` failing
        (the write will report its own error), or a file system that reports no blocks at all
        (some FUSE and object stores; said once per directory). The ``space_check`` setting
        turns the whole check off.
        """
        for target in (level, self._flush_level or level) if flush else (level,):
            problem = self._space_problem(target, level)
            if problem is not None:
                raise CheckpointError(problem)

    def _directories(self, level: int) -> list[tuple[int, tuple[int, ...]]]:
        """The directories of ``level`` as (the rank that measures it, the ranks it holds)."""
        return self._spec(level).storage.directories(self.topology)

    def _space_problem(self, level: int, codec_level: int) -> str | None:
        """Why some directory of ``level`` cannot take this checkpoint, or None (collective).

        ``codec_level``: the level whose codec and compression ratio the files have."""
        store = self._stores[level]
        estimate = self.protected.nbytes
        if parse_codec(self._level(codec_level).codec) is not None:
            estimate = int(estimate * self._stored_ratio.get(codec_level, 1.0))
        measuring = self._is_leader(level)

        def free() -> int | None:
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

        seen = self.comm.allgather((estimate, free() if measuring else None))
        sizes = [e for e, _ in seen]
        extra = self._redundancy_of(level).extra_bytes(sizes)
        needs = {
            leader: sum(_blocks(sizes[r]) + _blocks(extra[r]) for r in ranks)
            + _DIRECTORY_ALLOWANCE
            + _RANK_ALLOWANCE * len(ranks)
            for leader, ranks in self._directories(level)
        }

        def short(frees: list[int | None]) -> list[int]:
            return [r for r, need in needs.items() if (f := frees[r]) is not None and f < need]

        if not short([f for _, f in seen]):
            return None
        # Background removals of older checkpoints may still be giving space back, and a
        # lowered keep (a restarted run) has not been applied yet: it is applied now, the
        # checkpoints this run verified kept, exactly as after the next commit.
        detail: tuple[int | None, int, int, str] = (None, 0, 0, "")
        if measuring:
            # the checkpoints verified by this run, and the source of a running flush (its
            # removal would fail the flush, which may hold the only copy of the newest one)
            keep = self.config.keep
            kept = [*self._verified.get(level, []), *self._flushing_from(level)]
            _tidy(lambda: store.cleanup(keep, protect=kept), "remove old checkpoints")
            store.join()
            kept = store.committed()
            held = sum(store.footprint(i) for i in kept)
            detail = (free(), held, len(kept), str(store.job_dir))
        details = self.comm.allgather(detail)
        still = short([d[0] for d in details])
        if not still:
            return None
        r = still[0]
        available, held, count, where = details[r]
        assert available is not None
        node = self._spec(level).storage.where(self.topology, r)
        keep = self.config.keep
        return (
            f"checkpoint at level {level} ({self._spec(level).name}) refused before writing "
            f"anything: {where} on {node} needs {_size(needs[r])} for it and {_size(available)} "
            f"is free (the {count} checkpoints kept there hold {_size(held)}; with keep = "
            f"{keep} a level needs room for about keep + 1 = {keep + 1} checkpoints, level 2 "
            "twice that); free space there, lower keep or use another directory"
        )

    def _flushing_from(self, level: int) -> list[int]:
        """The checkpoint of ``level``'s store that a running asynchronous flush copies (empty
        if none): every removal of old checkpoints there must keep it, or the flush fails."""
        if self._flush is not None and level == self._flush_source:
            return [self._flush.ckpt_id]
        return []

    def _committed(self, level: int, ckpt_id: int) -> None:
        """Book-keeping once checkpoint ``ckpt_id`` is committed at ``level`` on every rank:
        the level's back-off ends, the checkpoint counts as verified (written and checked by
        this run), and the older lower-level checkpoints it makes redundant are retired."""
        self._backoff.pop(level, None)
        self._add_verified(level, ckpt_id)
        self._retire_below(level)

    def _add_verified(self, level: int, ckpt_id: int) -> None:
        """Remember a checkpoint this run committed or restored (the newest ``keep`` per
        level are all :meth:`_retire_below` needs)."""
        self._verified[level] = self._verified_with(level, ckpt_id)

    def _verified_with(self, level: int, ckpt_id: int) -> list[int]:
        """The checkpoints of ``level`` that count as verified once ``ckpt_id`` does.

        Every removal by the level's own keep-last-k protects them, so that a checkpoint
        :meth:`_retire_below` counts toward ``keep`` is always still there. Without it, newer
        checkpoints this run did not verify (ones that failed to restore) filled the level's
        ``keep`` and pushed out the verified one restored before them, which kept counting:
        a lower level's checkpoint was then retired with fewer than ``keep`` restorable newer
        ones. The same on every rank (it depends only on commits and recoveries, which every
        rank sees), so every directory's leader keeps the same ones; at most ``keep``
        checkpoints more than the newest ``keep`` stay, and only until newer verified ones
        replace them.
        """
        ids = sorted({*self._verified.get(level, []), ckpt_id})
        return ids[-self.config.keep :]

    def _retire_below(self, level: int) -> None:
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
        keep = self.config.keep
        for lower, store in self._stores.items():
            spec = self._spec(lower)
            if lower >= level or not self._spec(level).covers(spec) or not self._is_leader(lower):
                continue
            newer = sorted(
                {i for n, ids in self._verified.items() if self._spec(n).covers(spec) for i in ids}
            )
            flushing = self._flushing_from(lower)
            for old in store.committed():
                if old not in flushing and sum(1 for i in newer if i > old) >= keep:
                    _tidy(
                        partial(store.remove, old, wait=False),
                        f"retire checkpoint {old} (level {lower}, made redundant by newer ones)",
                    )
                    if old in self._verified.get(lower, []):  # gone: it counts no more
                        self._verified[lower] = [i for i in self._verified[lower] if i != old]

    def _checkpoint_at(self, number: int, iteration: int | None) -> CheckpointInfo:
        """A synchronous checkpoint at ``number``, committed on every rank (collective):
        the stages of :mod:`greenckpt.ckpt.commit`."""
        start = time.monotonic()
        ckpt_id = self._next_id
        self._next_id += 1
        store = self._stores[number]
        advice = self._begin("checkpoint", number, store.job_dir)
        per_node = advice.io_processes or self.config.writers_per_node
        waves = write_waves(self.topology, per_node, self.config.writers_total)
        kept = [*self._verified_with(number, ckpt_id), *self._flushing_from(number)]
        # recorded with the state, so recovery can check the manifest against the data
        self.protected.identity = Identity(self.config.name, ckpt_id, iteration)
        ok = False
        try:
            commit = Commit(self._job, number, store, ckpt_id, iteration, waves, self._write, kept)
            mine = write_and_commit(commit)
            seconds = time.monotonic() - start
            ok = True
        finally:
            self._end("checkpoint", ok, time.monotonic() - start)
        return CheckpointInfo(
            ckpt_id,
            number,
            iteration,
            seconds,
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
        assert self._flush_level is not None  # only a level flushed asynchronously gets here
        local, global_ = self._stores[self._flush_source], self._stores[self._flush_level]
        self._begin("flush", self._flush_level, global_.job_dir)
        try:
            manifest = local.read(info.id)
            source = local.committed_path(info.id) / manifest.ranks[self.rank].file
            stage = global_.staging_path(info.id)
            stage.mkdir(parents=True, exist_ok=True)
        except (OSError, ValueError) as exc:
            # kept as a failed flush: reported on every rank at the next call, like any other
            self._flush = Flush.failed(info.id, info.iteration, _one_line(exc))
            return
        self._flush_manifest = replace(manifest, level=self._flush_level, redundancy={})
        self._flush = Flush(info.id, [source], stage, self.rank, info.iteration)

    def _poll_flush(self, *, wait: bool) -> None:
        """Commit the level-4 copy once every rank's flush is over, or raise its failure
        (collective while a flush is under way; nothing otherwise)."""
        flush, manifest, level = self._flush, self._flush_manifest, self._flush_level
        if flush is None or level is None:
            return
        if wait:
            flush.wait()
        states = self.comm.allgather((flush.done(), flush.error))
        if not all(done for done, _ in states):
            return
        self._flush = self._flush_manifest = None
        store = self._stores[level]
        errors = [e for _, e in states]
        self._end("flush", not any(errors), flush.seconds or 0.0)
        if not any(errors) and self._is_leader(level):
            assert manifest is not None  # rank 0's flush started, or it would have an error
            try:
                store.commit(flush.ckpt_id, manifest)
            except (StoreError, OSError, ValueError) as exc:
                errors[0] = _one_line(exc)
        errors[0] = self.comm.bcast(errors[0])
        bad = next(((r, e) for r, e in enumerate(errors) if e), None)
        if bad is not None:
            self._abort(level, store, flush.ckpt_id)
            error = CheckpointError(
                f"the asynchronous flush of checkpoint {flush.ckpt_id} to the global file "
                f"system failed on rank {bad[0]}: {bad[1]}; it was not committed there "
                "(the checkpoint is still on node-local storage)"
            )
            self._note_failure(level, error, flush.iteration, (), stacklevel=5)
            raise error
        if self._is_leader(level):
            keep, kept = self.config.keep, self._verified_with(level, flush.ckpt_id)
            _tidy(lambda: store.cleanup(keep, protect=kept), "remove old checkpoints")
        self._committed(level, flush.ckpt_id)
        assert manifest is not None  # no rank failed, so every rank started its flush
        mine = manifest.ranks[self.rank]
        self.history.append(
            CheckpointInfo(
                flush.ckpt_id,
                level,
                flush.iteration,
                flush.seconds or 0.0,
                mine.logical_bytes,
                mine.stored_bytes,
            )
        )

    def _write(self, level: int, store: CheckpointStore, ckpt_id: int) -> RankEntry:
        """This rank's file into the staging directory; its manifest entry
        (:func:`~greenckpt.ckpt.commit.write_rank_file` with this module's ``run_chunks``,
        looked up now: tests replace it here)."""
        return write_rank_file(self._job, level, store, ckpt_id, run_chunks)

    def _codec_label(self, level: int) -> str | None:
        return self._job.codec_label(level)

    def _abort(self, level: int, store: CheckpointStore, ckpt_id: int) -> None:
        """Remove a failed checkpoint's staging data (after every rank stopped writing)."""
        self._job.abort(level, store, ckpt_id)

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
        advice = self._begin("restart", None, base)
        per_node = advice.io_processes or self.config.writers_per_node
        waves = write_waves(self.topology, per_node, self.config.writers_total)
        ok = False
        state = self.protected.state  # a restore replaces the object, never changes it
        failure: RecoveryError | None = None
        try:
            info = restore_newest(self._job, found, waves, start)
            ok = True
        except RecoveryError as exc:
            if mode != "fresh" or not found:
                raise
            failure = exc
        finally:
            self._end("restart", ok, time.monotonic() - start)
        self._backoff.clear()  # the schedule starts again from what was restored
        if failure is not None:
            self._start_afresh(failure, state)
            return None
        self.set_aside = ()
        for n in self._stores:  # the schedule goes on from the restored checkpoint
            self._last_time[n] = time.monotonic()
            self._last_iteration[n] = info.iteration or 0
        self._next_id = max(self._next_id, info.id + 1)
        self._add_verified(info.level, info.id)
        self._begin_rework(info)
        return info

    def _start_afresh(self, failure: RecoveryError, state: dict[str, Any]) -> None:
        """``on_unrecoverable="fresh"``: move this job's checkpoints aside on every level and
        node and reset the schedule, so the run goes on as a first run (collective).

        See :func:`greenckpt.ckpt.recovery.set_aside`.
        """
        self.set_aside = set_stores_aside(self._job, failure)
        self.protected.state = state
        now = time.monotonic()
        for number in self._stores:
            self._last_time[number] = now
            self._last_iteration[number] = 0
        self._verified.clear()
        self._progress = 0
        with contextlib.suppress(OSError):  # every rank's note of the old run: no rework
            self._progress_path().unlink(missing_ok=True)
        if self.rank == 0:
            shown = ", ".join(map(str, self.set_aside)) or "nowhere (none was left)"
            warnings.warn(
                f'greenckpt: {failure}. on_unrecoverable = "fresh": moved them aside to '
                f"{shown} and starting as a first run; the protected data may hold parts of "
                "the failed reads, so initialise them as for a first run",
                RuntimeWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------ rework

    def _progress_path(self) -> Path:
        """This rank's progress note (next to its lowest level's checkpoints)."""
        store = self._stores[min(self._stores)]
        return store.base / f".{self.config.name}.progress.{self.rank}"

    def _note_progress(self, iteration: int) -> None:
        """Every rank keeps the newest iteration it reported done (``need_checkpoint``) in a
        small file of its own, so that after a restart the runtime can be told how long the
        application recomputes lost work (rework; see :meth:`_begin_rework` for the rule).

        Only with a runtime attached; one ``pwrite`` per call and no fsync: the file only has
        to outlive the process (a page-cache write does), and losing it only loses the rework
        accounting, never data.
        """
        if isinstance(self.hook, NullHook) or iteration <= self._progress:
            return
        self._progress = iteration
        self._write_progress(iteration)

    def _write_progress(self, iteration: int) -> None:
        try:
            if self._progress_fd is None:
                flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
                self._progress_fd = os.open(self._progress_path(), flags, 0o644)
            os.pwrite(self._progress_fd, f"{iteration:20d}\n".encode(), 0)
        except OSError as exc:
            _warn_hook("rework", "progress note", exc)

    def _read_progress(self) -> int | None:
        """This rank's note (None: none, e.g. its node was replaced, or unreadable)."""
        try:
            return int(self._progress_path().read_text().strip() or 0)
        except (OSError, ValueError):
            return None

    def _begin_rework(self, info: RecoveryInfo) -> None:
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
        if isinstance(self.hook, NullHook) or info.iteration is None:
            return
        notes = self.comm.allgather(self._read_progress())
        known = [n for n in notes if n is not None]
        reached = min(known) if known else None
        self._progress = max(info.iteration, reached or 0)
        self._write_progress(self._progress)
        if reached is None or reached <= info.iteration:
            return
        self._rework_until = reached
        self._rework_start = time.monotonic()
        self._tell_begin("rework", info.level, "", 0)

    def _end_rework(self, ok: bool) -> None:
        if self._rework_until is None:
            return
        self._rework_until = None
        self._end("rework", ok, time.monotonic() - self._rework_start)

    # ------------------------------------------------------------------ end

    def _check_open(self) -> None:
        if self._finalized:
            raise UsageError("this Checkpointer was finalized: create a new one")

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
