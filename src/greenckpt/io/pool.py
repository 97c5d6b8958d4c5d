"""The worker processes of a job: start them, release them together, collect their reports.

Why its own module: a failed, dead or interrupted worker must never leave the others waiting
at the start barrier or the caller hanging, so starting, watching and stopping the processes
is one job with its own tests. A single worker may run in the calling process instead — the
same :func:`~greenckpt.io.worker.run_worker`, without process start-up. Design notes:
docs/design/measurement.md ("The I/O engine").
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

from greenckpt.errors import GreenckptError, InvalidValueError
from greenckpt.io.codec import CodecSpec
from greenckpt.io.jobplan import DEFAULT_ALIGNMENT, DEFAULT_BLOCK_SIZE, StartMethod
from greenckpt.io.worker import (
    BARRIER_TIMEOUT_S,
    Chunk,
    Fault,
    Op,
    ReadMethod,
    WorkerReport,
    WorkerTask,
    run_worker,
    worker_entry,
)
from greenckpt.io.writeback import DEFAULT_FLUSH_AFTER

__all__ = ["ABORT_WAIT_S", "DEAD_WORKER_GRACE_S", "IOJobError", "StartMethod", "run_chunks"]

DEAD_WORKER_GRACE_S = 1.0
"""How long a dead worker's last message may still take to arrive."""


class IOJobError(GreenckptError, RuntimeError):
    """A worker failed or died; the job was stopped and its files removed."""


ABORT_WAIT_S = 1.0
"""How long a failed job waits for its start barrier to break before stopping the workers."""


def _stop(procs: Sequence[multiprocessing.process.BaseProcess]) -> None:
    """Terminate workers still running, then kill any that ignore SIGTERM; reap all."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(2.0)
        if p.is_alive():
            p.kill()
            p.join()


class _StartWatcher:
    """Joins the workers' start barrier from the parent and calls ``on_start`` on release.

    Why a thread: the parent's main loop must keep watching for dead workers while the others
    wait; the extra barrier party lets the caller act (take a power reading) at the very
    moment the workers start moving data rather than when the processes were spawned.
    """

    def __init__(self, barrier: Any, on_start: Callable[[], None]) -> None:
        self.error: BaseException | None = None
        self._barrier = barrier
        self._on_start = on_start
        self._thread = threading.Thread(target=self._run, name="greenckpt-io-start", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._barrier.wait(BARRIER_TIMEOUT_S)
        except threading.BrokenBarrierError:
            return
        try:
            self._on_start()
        except BaseException as exc:  # handed to the caller's thread
            self.error = exc

    def join(self) -> None:
        self._thread.join(BARRIER_TIMEOUT_S)
        if self.error is not None:
            raise self.error


def run_processes(
    tasks: Sequence[WorkerTask],
    start_method: StartMethod,
    on_start: Callable[[], None] | None = None,
) -> list[WorkerReport]:
    """Run one process per task from a common start; reports in task order.

    On any failure — a worker's error, a worker dead without a report, an interrupt — the
    barrier is broken and the workers are stopped before the error propagates.
    """
    ctx = (
        multiprocessing.get_context("spawn")
        if start_method == "spawn"
        else multiprocessing.get_context("forkserver")
    )
    barrier = ctx.Barrier(len(tasks) + (on_start is not None))
    results = ctx.Queue()
    # A spawned worker's parent is this process; a forkserver's is the server, which ends
    # when this process does (the worker then ends too, see worker_entry).
    parent = os.getpid() if start_method == "spawn" else None
    procs = [
        ctx.Process(
            target=worker_entry,
            args=(task, barrier, results, parent),
            name=f"greenckpt-io-{task.rank}",
            daemon=True,
        )
        for task in tasks
    ]
    finished = False
    watcher: _StartWatcher | None = None
    try:
        for p in procs:
            p.start()
        if on_start is not None:
            watcher = _StartWatcher(barrier, on_start)
        reports = _collect(procs, results, len(tasks))
        for p in procs:
            p.join()
        if watcher is not None:
            watcher.join()
        finished = True
    finally:
        if not finished:
            _abort_barrier(barrier)
            _stop(procs)
        results.close()
        results.join_thread()
    return [reports[task.rank] for task in tasks]


def _collect(
    procs: Sequence[multiprocessing.process.BaseProcess], results: Any, count: int
) -> dict[int, WorkerReport]:
    """Every worker's report by rank; raises :class:`IOJobError` at the first failure."""
    reports: dict[int, WorkerReport] = {}
    aborted: set[int] = set()
    while len(reports) + len(aborted) < count:
        message = _next_message(procs, results, set(reports) | aborted)
        if message is None:
            continue
        kind, rank, payload = message
        if kind == "error":
            raise IOJobError(f"worker {rank} failed: {payload}")
        if kind == "aborted":
            aborted.add(rank)
        else:
            reports[rank] = payload
    if aborted:
        raise IOJobError(f"workers {sorted(aborted)} stopped without a failure report")
    return reports


def _next_message(
    procs: Sequence[multiprocessing.process.BaseProcess], results: Any, done: set[int]
) -> tuple[str, int, Any] | None:
    """The next ``(kind, rank, payload)``, or None after 0.1 s with every worker alive.

    A worker that exited without a message gets :data:`DEAD_WORKER_GRACE_S` for one last look
    (it may have put its message just before exiting), then fails the job.
    """
    try:
        message: tuple[str, int, Any] = results.get(timeout=0.1)
    except queue.Empty:
        pass
    else:
        return message
    for dead, p in enumerate(procs):
        if p.exitcode is not None and dead not in done:
            try:
                message = results.get(timeout=DEAD_WORKER_GRACE_S)
            except queue.Empty:
                raise IOJobError(
                    f"worker {dead} exited with code {p.exitcode} without a result"
                ) from None
            return message
    return None


def _abort_barrier(barrier: Any) -> None:
    """Break the start barrier so that every party still waiting at it returns.

    Why on a thread given a moment: multiprocessing's barrier wakes its waiters through a
    condition whose ``notify`` waits until each sleeper acknowledges; a worker that died while
    waiting (a batch system's SIGTERM reaches the whole process group) never does, and the
    abort would block the job — and the cleanup after it — forever. The workers are stopped
    next in any case (:func:`_stop`); a watcher thread left waiting ends at its own timeout.
    """
    aborting = threading.Thread(target=barrier.abort, name="greenckpt-io-abort", daemon=True)
    aborting.start()
    aborting.join(ABORT_WAIT_S)


def run_chunks(
    op: Op,
    assignments: Sequence[Sequence[Chunk]],
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    fsync: bool = True,
    read_method: ReadMethod = "cached",
    alignment: int = DEFAULT_ALIGNMENT,
    checksum: bool = False,
    start_method: StartMethod = "spawn",
    in_process: bool = True,
    fault: Fault | None = None,
    on_start: Callable[[], None] | None = None,
    codec: CodecSpec | None = None,
    digest: str | None = None,
    flush_after: int = DEFAULT_FLUSH_AFTER,
    cpus: Sequence[int] | None = None,
) -> list[WorkerReport]:
    """Run one worker per entry of ``assignments`` (its chunks) from a common start.

    The executor under :func:`run_io`, for callers that own their files (the checkpoint
    library): it creates, validates and removes nothing, and ``read_method`` is taken as
    given (files for ``o_direct`` must allow it). Files to write must exist. A single worker
    runs in the calling process when ``in_process``; otherwise each worker is a process and
    its chunks' sources must be picklable. On any failure the workers are terminated and
    :class:`IOJobError` is raised. ``on_start`` is called in the calling process when the
    workers are released to move data (after files are open and sources prepared), e.g. to
    take a power reading at the start of the I/O window. With ``codec`` every block becomes a
    compressed frame (:mod:`greenckpt.io.codec`): chunk lengths stay logical, frames start at
    each chunk's offset, and the reports give the stored bytes per chunk (a compressed chunk
    must not share a file region with another, since its stored size is known only after).
    ``digest`` (a :mod:`greenckpt.io.checksum` name) makes each report carry the digest of
    every chunk's stored bytes, computed as they pass. ``flush_after`` (writes): start
    writeback of every so many bytes as they are written (:mod:`greenckpt.io.writeback`;
    0: off). ``cpus``: the CPUs the worker processes run on (the per-core split's writer
    cores, :func:`greenckpt.runtime.control.writer_cpus`); a worker in the calling process is
    not pinned.
    """
    if not assignments:
        raise InvalidValueError("no workers: give at least one worker's chunks")
    tasks = [
        WorkerTask(
            rank=rank,
            op=op,
            chunks=tuple(chunks),
            block_size=block_size,
            fsync=fsync,
            read_method=read_method,
            alignment=alignment,
            checksum=checksum,
            fault=fault,
            codec=codec,
            digest=digest,
            flush_after=flush_after,
            cpus=None if cpus is None else tuple(sorted(set(cpus))),
        )
        for rank, chunks in enumerate(assignments)
    ]
    if len(tasks) == 1 and in_process:
        try:
            return [run_worker(tasks[0], on_start)]
        except (OSError, RuntimeError, ValueError) as exc:
            raise IOJobError(f"worker 0 failed: {type(exc).__name__}: {exc}") from exc
    return run_processes(tasks, start_method, on_start)
