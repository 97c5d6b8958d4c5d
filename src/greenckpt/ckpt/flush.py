"""The asynchronous level-4 flush: one rank's files copied to the global file system in the
background.

Why in the background: writing to a parallel file system is the slowest level by far, and the
application need not wait for it once its data are safe on node-local storage. SCR and FTI do
the same (FTI's L4 flush, SCR's asynchronous flush); their users' complaints tell what must not
happen, and this design rules each out:

* *a checkpoint marked complete before its data are durable* — the thread only copies and
  fsyncs files into the global store's staging directory; the commit (manifest + rename) is
  done later by the application's own thread, collectively, and only after every rank's copy
  finished without error (:meth:`greenckpt.ckpt.api.Checkpointer.checkpoint` and friends poll);
* *silent failures* — an error in the thread is kept and raised as a
  :class:`~greenckpt.ckpt.api.CheckpointError` on every rank at the next API call;
* *the source deleted under the copy* — the node-local checkpoint being flushed is protected
  from keep-last-k cleanup until the flush is over.

The copy is :func:`greenckpt.io.copy.copy_file`: in the kernel where it can be
(``copy_file_range``), with the target's writeback started as it goes, and through one 8 MiB
buffer elsewhere, so its memory is constant whatever the checkpoint's size. The thread is a
daemon: a process that ends without waiting leaves only a staging directory, which is never
mistaken for a checkpoint and is removed at the next start.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from greenckpt.ckpt.agree import Failure, agree_on, fail_if, one_line
from greenckpt.ckpt.announce import Announcer
from greenckpt.ckpt.config import ConfigError
from greenckpt.ckpt.inject import maybe_fail
from greenckpt.ckpt.job import Job, tidy
from greenckpt.ckpt.levels import Storage, level_spec
from greenckpt.ckpt.manifest import Manifest
from greenckpt.ckpt.records import CheckpointError, CheckpointInfo
from greenckpt.errors import InvalidValueError
from greenckpt.io.copy import copy_file

__all__ = ["AsyncFlush", "Flush", "FlushFailure"]


class Flush:
    """Copies one rank's files of checkpoint ``ckpt_id`` into ``stage`` in a background thread.

    ``error`` is None until the copy fails; ``seconds`` is how long it took once done.
    """

    def __init__(
        self, ckpt_id: int, sources: list[Path], stage: Path, rank: int, iteration: int | None
    ) -> None:
        self.ckpt_id = ckpt_id
        self.iteration = iteration
        self.error: str | None = None
        self.seconds: float | None = None
        self.bytes = 0
        self._start = time.monotonic()
        self._thread: threading.Thread | None = threading.Thread(
            target=self._run,
            args=(sources, stage, rank),
            name=f"greenckpt-flush-{ckpt_id}",
            daemon=True,
        )
        self._thread.start()

    @classmethod
    def failed(cls, ckpt_id: int, iteration: int | None, error: str) -> Flush:
        """A flush that could not even start (its error is reported like a copy's)."""
        flush = cls.__new__(cls)
        flush.ckpt_id, flush.iteration, flush.error = ckpt_id, iteration, error
        flush.seconds, flush.bytes, flush._start = 0.0, 0, time.monotonic()
        flush._thread = None
        return flush

    def _run(self, sources: list[Path], stage: Path, rank: int) -> None:
        try:
            maybe_fail("flush", rank=rank, iteration=self.iteration)
            for source in sources:
                self.bytes += copy_file(source, stage / source.name)
        except Exception as exc:  # kept and raised at the next API call, on every rank
            self.error = one_line(exc)
        finally:
            self.seconds = time.monotonic() - self._start

    def done(self) -> bool:
        """Whether the copy finished (successfully or not)."""
        return self._thread is None or not self._thread.is_alive()

    def wait(self) -> None:
        """Block until the copy finished."""
        if self._thread is not None:
            self._thread.join()


@dataclass(frozen=True)
class FlushFailure:
    """A flush that failed on some rank (the same on every rank): not committed."""

    error: CheckpointError
    iteration: int | None


class AsyncFlush:
    """The level flushed in the background (level 4 with ``async = true``) from another
    level's store (``source``; 0 and ``level`` None: no such level), and its flush under way.

    Starting and polling it are the Checkpointer's; committing the copy once every rank's
    flush is over, or reporting its failure on every rank, is done here.
    """

    def __init__(self, job: Job) -> None:
        self._job = job
        flushed = [n for n in job.config.enabled_levels if job.level(n).settings.get("async_flush")]
        self.level: int | None = flushed[0] if flushed else None
        self.source = 0 if self.level is None else self._via()
        self._flush: Flush | None = None
        self._manifest: Manifest | None = None

    def _via(self) -> int:
        """The level whose store an asynchronous checkpoint is written to first; checked."""
        flush = self.level
        via = None if flush is None else level_spec(flush).async_via
        assert flush is not None and via is not None  # async applies only to such levels
        if level_spec(via).storage is Storage.NODE_LOCAL and self._job.config.local_dir is None:
            raise InvalidValueError(
                f"level {flush} with async = true flushes from node-local storage: set local_dir "
                "too (checkpoints are written there first), or set async = false"
            )
        self._check_codec(flush, via)
        return via

    def _check_codec(self, flush: int, via: int) -> None:
        """Refuse a level-4 codec that an asynchronous flush would ignore: the flush copies
        the level-1 files byte for byte (their digests must hold on both copies), so the
        level-4 copy always has level 1's codec. Silently storing it otherwise would surprise
        whoever sized the global file system for the codec they asked for."""
        config = self._job.config
        wanted, used = self._job.codec_label(flush), self._job.codec_label(via)
        # a Config built directly has no sources: only a codec it names counts as asked for
        source = config.sources.get(f"l{flush}.codec", "Config")
        asked = wanted is not None or source not in ("default", "Config")
        if asked and wanted != used:
            raise ConfigError(
                f"{source}: l{flush} codec = {wanted or 'none'!r} cannot apply with async = true: "
                f"the background flush copies the level-{via} files as they are, with level "
                f"{via}'s codec ({used or 'none'!r}); set the same codec for l{via}, remove it "
                f"from l{flush}, or set async = false"
            )

    def source_of(self, level: int) -> list[int]:
        """The checkpoint of ``level``'s store that a running flush copies (empty if none):
        every removal of old checkpoints there must keep it, or the flush fails."""
        if self._flush is not None and level == self.source:
            return [self._flush.ckpt_id]
        return []

    def start(self, info: CheckpointInfo, phases: Announcer) -> None:
        """Copy this rank's files of checkpoint ``info.id`` (committed in the source's store)
        to the flushed level's staging directory in the background."""
        job, level = self._job, self.level
        assert level is not None  # only a level flushed asynchronously gets here
        local, global_ = job.stores[self.source], job.stores[level]
        phases.begin("flush", level, global_.job_dir)
        try:
            manifest = local.read(info.id)
            source = local.committed_path(info.id) / manifest.ranks[job.rank].file
            stage = global_.staging_path(info.id)
            stage.mkdir(parents=True, exist_ok=True)
        except (OSError, ValueError) as exc:
            # kept as a failed flush: reported on every rank at the next call, like any other
            self._flush = Flush.failed(info.id, info.iteration, one_line(exc))
            return
        self._manifest = replace(manifest, level=level, redundancy={})
        self._flush = Flush(info.id, [source], stage, job.rank, info.iteration)

    def poll(
        self, phases: Announcer, verified_with: Callable[[int, int], list[int]], *, wait: bool
    ) -> CheckpointInfo | FlushFailure | None:
        """Commit the copy once every rank's flush is over: this rank's record of it, or the
        failure; None while it runs or when none does (collective while a flush is under
        way). ``verified_with``: the flushed level's checkpoints its cleanup keeps."""
        flush, manifest, level = self._flush, self._manifest, self.level
        if flush is None or level is None:
            return None
        if wait:
            flush.wait()
        copied = agree_on(self._job.comm, partial(_copied, flush))
        if False in copied.values:  # some rank's copy is still running
            return None
        self._flush = self._manifest = None
        phases.end("flush", copied.ok, flush.seconds or 0.0)
        bad = copied.failure or self._commit(flush, manifest)
        if bad is not None:
            self._job.abort(level, self._job.stores[level], flush.ckpt_id)
            error = CheckpointError(
                f"the asynchronous flush of checkpoint {flush.ckpt_id} to the global file "
                f"system failed on rank {bad.rank}: {bad.error}; it was not committed there "
                "(the checkpoint is still on node-local storage)"
            )
            return FlushFailure(error, flush.iteration)
        if self._job.is_leader(level):
            store, keep = self._job.stores[level], self._job.config.keep
            kept = verified_with(level, flush.ckpt_id)
            tidy(lambda: store.cleanup(keep, protect=kept), "remove old checkpoints")
        assert manifest is not None  # no rank failed, so every rank started its flush
        mine = manifest.ranks[self._job.rank]
        return CheckpointInfo(
            flush.ckpt_id,
            level,
            flush.iteration,
            flush.seconds or 0.0,
            mine.logical_bytes,
            mine.stored_bytes,
        )

    def _commit(self, flush: Flush, manifest: Manifest | None) -> Failure | None:
        """Commit the copy (the level's leader, once every rank's copy succeeded;
        collective): the agreed failure, or None."""
        level = self.level
        assert level is not None

        def commit() -> None:
            if self._job.is_leader(level):
                assert manifest is not None  # its flush started, or it would have an error
                self._job.stores[level].commit(flush.ckpt_id, manifest)

        return agree_on(self._job.comm, commit).failure


def _copied(flush: Flush) -> bool:
    """Whether this rank's copy is over (False while it runs); its error raised as this
    rank's failure once it is over."""
    if not flush.done():
        return False
    fail_if(flush.error)
    return True
