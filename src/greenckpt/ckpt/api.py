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

The commit protocol (why a checkpoint is never reported complete before it is): every rank
writes its file into a staging directory (data fsynced, then the directory); the ranks agree
(allgather) that all of them succeeded; only then does one rank per directory (each node's
lowest rank for node-local storage, rank 0 for the global file system) write the manifest and
rename staging → committed — the commit point. Any failure before it removes the staging data
and raises :class:`CheckpointError` on every rank; the previous checkpoints are untouched, and
old ones are removed only after a newer one committed (keep-last-k, never the newest).

Protected arrays are written from and restored into the objects given to
:meth:`Checkpointer.protect`, in place: update them in place (``u[...] = new``), never by
rebinding names — after ``u_prev, u_curr = u_curr, u_prev`` the checkpointer still saves and
restores the objects it was given, now under each other's names, so a restart would swap
them. Protect the objects again after such a swap. ``local_dir`` and ``global_dir`` must exist
(the library creates only its own subdirectories under them: a mistyped path fails at
construction rather than silently filling another file system).

Recovery considers every committed checkpoint of every level, newest id first (of the copies
of one checkpoint, the lowest level first); a node-local one only if every node holds it.
Each rank checks the manifest (its own digest, and that its job, id and level are those of
the directory holding it), that its protected data still have the recorded names, dtypes and
shapes, reads its file straight into the protected buffers and checks the digest of the
stored bytes; with a codec each variable's digest is also checked as it is decompressed
(without one, the file's digest covers every variable's bytes). The job name, id and iteration
recorded with the state in the data must equal the manifest's, so a manifest edited
consistently on every node cannot pass off one iteration's data as another's. The first
checkpoint that every rank read correctly wins; otherwise the next older one is tried, and the
reasons are kept (:attr:`RecoveryInfo.skipped`): a damaged manifest is named as such, never
reported as a corrupt data file.

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

import contextlib
import operator
import os
import shutil
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, SupportsIndex

from greenckpt.ckpt.comm import Comm, world
from greenckpt.ckpt.config import ON_UNRECOVERABLE, Config, ConfigError, LevelConfig, load_config
from greenckpt.ckpt.flush import Flush
from greenckpt.ckpt.hooks import HookKind, NullHook, PhaseAdvice, PhaseHook, PhaseKind
from greenckpt.ckpt.inject import maybe_fail
from greenckpt.ckpt.levels import BUILTIN_LEVELS, LevelSpec, Storage, level_spec
from greenckpt.ckpt.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    RankEntry,
    utc_now_iso,
)
from greenckpt.ckpt.protect import Identity, IdentityMismatchError, Protected
from greenckpt.ckpt.redundancy import NoRedundancy, Redundancy, build_redundancy
from greenckpt.ckpt.store import CheckpointStore, FreeSpaceUnknownError, StoreError
from greenckpt.ckpt.topology import Topology, write_waves
from greenckpt.errors import GreenckptError, InvalidValueError, UsageError
from greenckpt.io import Chunk, ConcatSink, ConcatSource, parse_codec, run_chunks
from greenckpt.io.atomic import fsync_directory
from greenckpt.io.checksum import digest_bytes

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


class CheckpointError(GreenckptError, RuntimeError):
    """A checkpoint failed on some rank; nothing of it was committed, older ones are intact."""


class RecoveryError(GreenckptError, RuntimeError):
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


_BACKOFF_MAX_FACTOR = 8
"""A failing level waits at most this many of its intervals between two attempts."""

_BACKOFF_MIN_S = 60.0
"""The wait after a failure when there is no interval to count it in (a level that only takes
explicit checkpoints, ``auto`` before a checkpoint time was measured, an interval in
iterations without a known iteration): without a floor such a level would be tried again at
once, which is the retry storm the back-off is there to stop."""

_BLOCK = 4096
"""Files are counted in whole blocks of this size when checking free space."""

_DIRECTORY_ALLOWANCE = 64 * 1024
_RANK_ALLOWANCE = 4096
"""Room counted per checkpoint directory (its manifest, directory blocks), plus this much per
rank whose files it holds, on top of the files themselves."""


@dataclass(frozen=True)
class Backoff:
    """A level whose checkpoints failed, held back by :meth:`Checkpointer.need_checkpoint`.

    Why: a level that cannot be written (a full disk, a read-only directory) stays due, so
    without this ``need_checkpoint`` asks for it at every following iteration, and every
    attempt costs time and energy and fails the same way. After the n-th failure in a row the
    level is offered again only when ``2**(n-1)`` of its intervals (at most
    ``_BACKOFF_MAX_FACTOR`` = 8) have passed since that failure: in iterations for an interval
    in iterations, else in seconds (60 s where the level has no interval to count in). A
    wait in iterations is decided on every rank from facts they share (the failure, raised on
    every rank together, the iteration and the interval). A wait in seconds is not: each rank
    has its own clock and its own ``at``, and ranks a few milliseconds apart at the deadline
    would disagree — one entering the checkpoint's collectives, another the application's next
    one, a deadlock — so while any level is held back in seconds, rank 0 decides
    :meth:`Checkpointer.need_checkpoint` for every rank (as for a timed interval). A
    successful checkpoint at the level, or a recovery, ends it.
    """

    level: int
    failures: int
    """Failed attempts in a row."""
    reason: str
    """The last failure's message."""
    iteration: int | None
    """The iteration of the last failed attempt (None: not known)."""
    at: float
    """``time.monotonic()`` of the last failed attempt, on this rank."""
    delay_iterations: int | None
    """Iterations to wait after ``iteration``; None when the wait is in seconds."""
    delay_s: float | None
    """Seconds to wait after ``at``; None when the wait is in iterations."""

    @property
    def in_seconds(self) -> bool:
        """Whether the wait is counted in seconds, on each rank's own clock: a decision that
        reads it must be rank 0's for everyone (:meth:`Checkpointer.need_checkpoint`)."""
        return self.delay_iterations is None or self.iteration is None

    def over(self, iteration: int | None, now: float) -> bool:
        """Whether the level may be tried again at ``iteration`` and monotonic time ``now``."""
        if not self.in_seconds:
            assert self.delay_iterations is not None and self.iteration is not None
            return iteration is not None and iteration >= self.iteration + self.delay_iterations
        return now >= self.at + (self.delay_s or 0.0)

    def describe(self) -> str:
        """``after 20 iterations (from iteration 10)`` or ``after 60 s``."""
        if self.delay_iterations is not None and self.iteration is not None:
            return f"after {self.delay_iterations} iterations (from iteration {self.iteration})"
        return f"after {self.delay_s or 0.0:g} s"


def _index(value: object) -> int | None:
    """``value`` as the ``int`` it is when it is an integer of any kind (not a bool), else
    None."""
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        return None
    return operator.index(value)


def _as_iteration(value: object, call: str) -> int | None:
    """``iteration`` as a plain ``int`` (None stays None), checked where it is given.

    Why here: it goes into the manifest, which is JSON and requires an integer >= 0, and the
    manifest is written last. A NumPy integer (``np.int64(5)`` from ``np.arange``) or a
    negative number used to pass until then, so the checkpoint wrote all its data, failed at
    the commit and started a back-off. Any integral number (``operator.index``) is taken as
    the int it is; anything else is refused before anything is written."""
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


def _one_line(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


def _explain_mismatch(
    path: Path, manifest_path: Path, manifest: Manifest, entry: RankEntry, digests: list[str]
) -> str:
    """Why a rank file's digest differs from its manifest's: the file is corrupt (some
    variables read back differ from their recorded digests), or — every variable matching —
    the manifest's digest of the file is what is damaged, and the message must say so rather
    than blame a sound data file."""
    wrong = [v.name for v, d in zip(entry.variables, digests, strict=False) if d != v.digest]
    if wrong or len(digests) != len(entry.variables):
        shown = ", ".join(wrong[:5]) + (", ..." if len(wrong) > 5 else "")
        return (
            f"{path} is corrupt: its {manifest.checksum} digest does not match the manifest's"
            + (f" (variables {shown} differ)" if wrong else "")
        )
    return (
        f"{manifest_path} is damaged: its {manifest.checksum} digest of {path.name} does not "
        "match the file, whose every variable matches its own digest"
    )


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
        # the level whose checkpoints are flushed in the background from another's store
        flushed = [n for n in self.config.enabled_levels if self._level(n).async_flush]
        self._flush_level: int | None = flushed[0] if flushed else None
        self._flush_source = 0 if self._flush_level is None else self._flush_via()
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
        return self.rank == self._spec(level).storage.leader(self.topology, self.node)

    def _dir_ranks(self, level: int) -> tuple[int, ...] | None:
        """The ranks whose files this rank's directory of ``level`` holds (None: all)."""
        return self._spec(level).storage.dir_ranks(self.topology, self.node)

    def _redundancy_of(self, level: int) -> Redundancy:
        """A level's redundancy (none for a level used only as an asynchronous flush's
        source)."""
        return self._redundancy.get(level) or NoRedundancy()

    # ------------------------------------------------------------------ when

    def need_checkpoint(self, iteration: SupportsIndex | None = None) -> int | None:
        """The level due now (the highest if several), or None. Collective when any interval
        is in seconds or automatic, or any level is held back for a time in seconds
        (:class:`Backoff`; rank 0 decides, so every rank takes the same decision), and while an
        asynchronous level-4 flush is under way (its completion is checked, and its failure
        raised as :class:`CheckpointError`, here).

        An interval of N iterations is due when ``iteration`` reaches the next multiple of N
        after the last checkpoint at that level or a higher one (a higher level serves the
        lower ones too). Multiples rather than "N since the last one" keep the schedule of a
        restarted run the same as that of a run without failures: with levels every 10 and 50
        iterations, checkpoints fall on 10, 20, …, 50 (the higher level), 60, … whether or not
        the run was restarted at 110.

        A level whose checkpoint failed is held back (:class:`Backoff`, :attr:`backoff`): it is
        offered again only after a delay counted from the failure and doubling with each
        further failure, and rank 0 warns once. Meanwhile a checkpoint it would have taken
        goes to the next level that can still be written — the lowest enabled level that
        survives everything the failed one survives, else the one that survives the most of
        it (:meth:`_fallback`) — and, once committed, counts for the level it stood in for.
        With no such level, none is offered until the delay is over.
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
            lc = self._level(number)
            if lc.every_iterations is not None:
                if iteration is None:
                    raise InvalidValueError(
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
        held back: the lowest that survives everything ``number`` survives
        (:meth:`LevelSpec.covers`; for the built-in levels the next higher one, except that
        level 3 does not stand in fully for level 2); else, as a lesser protection than none,
        the one that survives the most of what ``number`` survives (the highest of equals:
        level 3 for level 4 before level 2, level 3 for level 2 before level 1); else None.

        Why not simply the next higher number: a higher level need not survive what a lower
        one does (two losses in one erasure group defeat level 3, not partner copies)."""
        usable = [
            n
            for n in self.config.enabled_levels
            if n != number and n in self._stores and self._may_try(n, iteration, now)
        ]
        wanted = self._spec(number)
        full = [n for n in usable if self._spec(n).covers(wanted)]
        if full:
            return min(full)
        if not usable:
            return None
        return max(usable, key=lambda n: (len(self._spec(n).failures & wanted.failures), n))

    def _stand_in(self, number: int, alternative: int, iteration: int | None, now: float) -> str:
        """How the back-off warning describes ``alternative`` standing in for ``number``."""
        name = f"level {alternative} ({self._spec(alternative).name})"
        if self._spec(alternative).covers(self._spec(number)):
            if alternative > number and all(
                not self._may_try(n, iteration, now) or n not in self._stores
                for n in self.config.enabled_levels
                if number < n < alternative
            ):
                return f"{name}, the next higher level that can be written"
            return (
                f"{name}, the lowest level that can be written and survives everything "
                f"level {number} survives"
            )
        if alternative < number and not any(
            n > number and n in self._stores and self._may_try(n, iteration, now)
            for n in self.config.enabled_levels
        ):
            return f"{name}, the next lower level that can be written (no higher one can)"
        return (
            f"{name}, which survives only part of what level {number} survives (no level "
            "that survives all of it can be written)"
        )

    def _retry_interval(
        self, number: int, covering: tuple[int, ...]
    ) -> tuple[int | None, float | None]:
        """The interval a back-off of ``number`` counts in, (iterations, seconds): its own,
        else that of the level it stood in for, else ``_BACKOFF_MIN_S`` seconds."""
        for n in (number, *covering):
            lc = self._level(n)
            if lc.every_iterations is not None:
                return lc.every_iterations, None
            if lc.every_s is not None:
                return None, lc.every_s
            if lc.auto:
                return None, max(self._auto_interval(n), _BACKOFF_MIN_S)
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
        previous = self._backoff.get(number)
        failures = 1 if previous is None else previous.failures + 1
        factor = min(2 ** (failures - 1), _BACKOFF_MAX_FACTOR)
        at = iteration if iteration is not None else self._iteration_seen
        every_it, every_s = self._retry_interval(number, covering)
        if every_it is not None and at is None:
            every_it, every_s = None, _BACKOFF_MIN_S
        now = time.monotonic()
        held = Backoff(
            number,
            failures,
            str(exc),
            at,
            now,
            None if every_it is None else every_it * factor,
            None if every_it is not None else (every_s or _BACKOFF_MIN_S) * factor,
        )
        self._backoff[number] = held
        if failures > 1 or self.rank != 0:
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
        # recorded with the state, so recovery can check the manifest against the data
        self.protected.identity = Identity(self.config.name, ckpt_id, iteration)
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
        stage = store.staging_path(ckpt_id)
        redundancy, problem = self._redundancy_of(number).encode(stage, entries)
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
            keep = self.config.keep
            kept = [*self._verified_with(number, ckpt_id), *self._flushing_from(number)]
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
        mine = {number: store.committed() for number, store in self._stores.items()}
        everyone = self.comm.allgather(mine)

        def held(ckpt_id: int, number: int) -> bool:
            holders = [ckpt_id in other.get(number, ()) for other in everyone]
            # a level with redundancy rebuilds what a node lost; the others need every copy
            return any(holders) if self._redundancy_of(number).rebuilds else all(holders)

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
        state = self.protected.state  # a restore replaces the object, never changes it
        failure: RecoveryError | None = None
        try:
            info = self._restore_newest(candidates, orphans, everyone, waves, start)
            ok = True
        except RecoveryError as exc:
            if mode != "fresh" or not (candidates or orphans):
                raise
            failure = exc
        finally:
            self._end("restart", ok, time.monotonic() - start)
        self._backoff.clear()  # the schedule starts again from what was restored
        if failure is not None:
            self._start_afresh(failure, state)
            return None
        self.set_aside = ()
        self._add_verified(info.level, info.id)
        self._begin_rework(info)
        return info

    def _start_afresh(self, failure: RecoveryError, state: dict[str, Any]) -> None:
        """``on_unrecoverable="fresh"``: move this job's checkpoints aside on every level and
        node and reset the schedule, so the run goes on as a first run (collective).

        Moving, not deleting: the checkpoints failed to restore for reasons a person may want
        to look into (a different job layout, a damaged disk). Each store's leader renames
        its job directory (:meth:`CheckpointStore.set_aside`), all with rank 0's time stamp;
        if one cannot, :class:`RecoveryError` is raised on every rank with both reasons.
        """
        stamp: str = self.comm.bcast(time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        moved: list[str] = []
        problem = None
        for number, store in sorted(self._stores.items()):
            if not self._is_leader(number):
                continue
            try:
                store.join()  # removals in the background work in the job directory
                where = store.set_aside(stamp)
            except OSError as exc:
                problem = f"could not move {store.job_dir} aside: {_one_line(exc)}"
                break
            if where is not None:
                moved.append(str(where))
        outcomes = self.comm.allgather((moved, problem))
        bad = next(((r, p) for r, (_, p) in enumerate(outcomes) if p), None)
        if bad is not None:
            raise RecoveryError(
                f"{failure}; starting afresh failed on rank {bad[0]}: {bad[1]}"
            ) from failure
        self.set_aside = tuple(Path(p) for paths, _ in outcomes for p in paths)
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
            if bad and self._redundancy_of(number).rebuilds:
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
                if not manifest.verified:
                    warnings.warn(
                        f"greenckpt: checkpoint {ckpt_id} (level {number}) was restored from a "
                        f"format-version-{manifest.format_version} manifest, written before "
                        "manifests carried their own digest: its data were verified, its "
                        "iteration and other fields could not be",
                        RuntimeWarning,
                        stacklevel=3,
                    )
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

        Levels without redundancy (1, 4): each rank reads its own directory's copy (they must all
        be readable). Levels with redundancy (2, 3): read by the first rank whose node holds a
        readable copy and broadcast, so ranks of a node that lost everything learn what to
        rebuild.
        """
        if not self._redundancy_of(level).rebuilds:
            try:
                manifest: Manifest | None = self._stores[level].read(ckpt_id, level=level)
                problem = ""
            except ManifestError as exc:  # already one line naming the manifest
                manifest, problem = None, str(exc)
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
                    found = (self._stores[level].read(ckpt_id, level=level), "")
                except ManifestError as exc:
                    found = (None, str(exc))
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
        leader commits with the checkpoint's manifest, exactly like a new checkpoint, in the
        manifest's own format version.
        """
        store = self._stores[level]
        committed = store.committed_path(ckpt_id)
        present = committed.is_dir()
        redundancy = self._redundancy_of(level)
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
                # the manifest as it was read: a version-1 one stays version 1 (sealing it
                # would make every later restart refuse data written without a record of
                # their checkpoint; see manifest_to_json)
                store.commit(ckpt_id, manifest, ranks=self._dir_ranks(level), keep_version=True)
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
            for name in self._redundancy_of(level).extra_files(manifest, rank):
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
            directory = store.committed_path(ckpt_id)
            path = directory / entry.file
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                if not directory.is_dir():
                    return f"its node holds no copy of checkpoint {ckpt_id} ({directory} is gone)"
                return f"its file {entry.file} is missing from {directory}"
            if size != entry.stored_bytes:
                return f"{path} holds {size} B, the manifest says {entry.stored_bytes} B"
            views, state = self.protected.read_slots(entry.variables)
            # Without a codec the file's digest covers every variable's bytes (the write
            # checked they matched memory), and the variables' own digests are not taken on
            # the way (only to explain a mismatch); with one, each variable is also hashed as
            # its bytes land, which catches memory that changed during that checkpoint.
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
                digests = (
                    sink.digests()
                    if per_variable
                    else [digest_bytes(manifest.checksum, view) for view in views]
                )
                return _explain_mismatch(path, directory / MANIFEST_NAME, manifest, entry, digests)
            if per_variable:
                for v, digest in zip(entry.variables, sink.digests(), strict=True):
                    if digest != v.digest:
                        return f"variable {v.name} does not match its digest after reading"
            # the data recorded which checkpoint they belong to (versions with a manifest
            # digest): the manifest's name, id and iteration must be theirs
            expected = (
                Identity(manifest.name, manifest.id, manifest.iteration)
                if manifest.verified
                else None
            )
            try:
                self.protected.load_state(state, expected)
            except IdentityMismatchError as exc:
                return (
                    f"{directory / MANIFEST_NAME} does not match the data it describes ({exc}): "
                    "the manifest was edited or damaged"
                )
        except Exception as exc:  # any failure here must reach the collective verdict
            return _one_line(exc)
        return None

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
