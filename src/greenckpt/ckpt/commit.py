"""Write-and-commit: a checkpoint as a chain of small stages run in order, stopping at the
first failure.

Why a chain (VeloC's manager is the model): each stage does one job — write every rank's
data (with its digest), agree that all succeeded, encode the level's redundancy, describe the
checkpoint in a manifest, publish it (the commit point: manifest + rename of staging to
committed), retire old checkpoints — and a failure in any of them must stop the later ones
and remove the staging data, so that nothing incomplete is ever committed and the previous
checkpoints stay intact. The design is explained in docs/design/checkpointer.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from greenckpt.ckpt.agree import agree_on, fail_if, one_line
from greenckpt.ckpt.inject import maybe_fail
from greenckpt.ckpt.job import Job, tidy
from greenckpt.ckpt.manifest import Manifest, RankEntry, utc_now_iso
from greenckpt.ckpt.protect import Slot
from greenckpt.ckpt.records import CheckpointError
from greenckpt.ckpt.redundancy.scheme import ReadsMemory
from greenckpt.ckpt.store import CheckpointStore
from greenckpt.ckpt.transfer import InMemory
from greenckpt.ckpt.writer_cpu import on_writer_cpus
from greenckpt.io import Chunk, ConcatSource, parse_codec

__all__ = ["CHECKPOINT_STAGES", "Commit", "run_stages", "write_and_commit"]

S = TypeVar("S")

RunChunks = Callable[..., Any]
""":func:`greenckpt.io.run_chunks`, passed in by the caller (tests replace it there)."""

WriteRank = Callable[[int, CheckpointStore, int, Sequence[Slot]], RankEntry]
"""Writes this rank's file of checkpoint (level, store, id) from the protected data's slots:
:func:`write_rank_file` bound to the job, as the caller holds it."""


@dataclass
class Commit:
    """One checkpoint on its way through the stages: what they need and what they add."""

    job: Job
    level: int
    store: CheckpointStore
    ckpt_id: int
    iteration: int | None
    waves: list[tuple[int, ...]]
    write: WriteRank
    kept: Sequence[int] = ()
    """Checkpoints the keep-last-k cleanup after the commit must keep."""
    writer_cpus: tuple[int, ...] = ()
    """This node's writer cores under a per-core split (:mod:`greenckpt.ckpt.writer_cpu`)."""
    slots: Sequence[Slot] = ()
    """What this rank wrote (the protected data, the pickled state last): the redundancy
    reads them rather than the file where the file holds exactly them (no codec)."""
    entries: tuple[RankEntry, ...] = ()
    created: str = ""
    redundancy: dict[str, Any] = field(default_factory=dict)
    manifest: Manifest | None = None

    def failed(self, why: str) -> CheckpointError:
        """The error a stage raises on every rank; nothing was committed."""
        return CheckpointError(
            f"checkpoint {self.ckpt_id} (level {self.level}) failed{why}; nothing was "
            "committed and the previous checkpoints are intact"
        )


def run_stages(stages: Sequence[Callable[[S], None]], state: S, undo: Callable[[S], None]) -> None:
    """Run ``stages`` in order on ``state``; at the first that raises
    :class:`CheckpointError`, run ``undo`` and re-raise it (the later stages do not run)."""
    for stage in stages:
        try:
            stage(state)
        except CheckpointError:
            undo(state)
            raise


def write_rank_file(
    job: Job,
    level: int,
    store: CheckpointStore,
    ckpt_id: int,
    run_chunks: RunChunks,
    slots: Sequence[Slot],
) -> RankEntry:
    """This rank's file of ``slots`` (``job.protected.slots(for_write=True)``) into the
    staging directory; its manifest entry.

    The data stream from the protected buffers to the file; each block is hashed as it is
    served to the writer (:class:`~greenckpt.io.ConcatSource` with the checksum), which gives
    every variable's digest and the stream's in the one pass over memory the write makes.
    Without a codec the file holds exactly the stream, so its digest is the stream's; with a
    codec the writer also hashes the stored frames (the file's digest), and each variable is
    checked at recovery as it is decompressed.

    With the ``memory_check`` setting, a thread also takes the variables' digests from memory
    while the file is written (a second pass), and the two must agree: memory that changed
    during the checkpoint (another thread, a bit flip) then fails it rather than
    be committed as a torn snapshot. Off by default: it doubles the hashing, and a checkpoint
    is a collective call during which the application does not touch its data.
    """
    stage = store.staging(ckpt_id)
    name = f"rank-{job.rank:06d}.data"
    path = stage / name
    total = sum(len(s.view) for s in slots)
    codec = parse_codec(job.level(level).codec)
    checksum = job.config.checksum
    source = ConcatSource([s.view for s in slots], checksum=checksum)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644))
    with ThreadPoolExecutor(1, thread_name_prefix="greenckpt-digest") as pool:
        again = (
            pool.submit(job.protected.variables, list(slots), checksum)
            if job.config.memory_check
            else None
        )
        (report,) = run_chunks(
            "write",
            [[Chunk(str(path), 0, total, source)]],
            codec=codec,
            digest=checksum if codec is not None else None,
        )
        digests, stream = source.digests()
        if again is not None and [v.digest for v in again.result()[0]] != digests:
            raise CheckpointError(
                "the protected data changed while the checkpoint was being written (memory "
                "no longer matches the bytes stored); is another thread modifying them?"
            )
    return RankEntry(
        rank=job.rank,
        node=job.node,
        file=name,
        logical_bytes=total,
        stored_bytes=report.stored_bytes,
        digest=stream if codec is None else _stored_digest(report.digests),
        variables=job.protected.describe(list(slots), digests),
    )


def _stored_digest(digests: tuple[str, ...] | None) -> str:
    assert digests is not None  # the writer was asked for the stored bytes' digest
    return digests[0]


def write_data(c: Commit) -> None:
    """Every rank writes its file in its wave; all agree that every rank succeeded."""
    job = c.job  # the caller stamped the protected data with the checkpoint's Identity

    def write() -> tuple[RankEntry | None, str]:
        entry, error = None, None
        for wave in c.waves:
            if job.rank in wave:
                try:
                    c.slots = job.protected.slots(for_write=True)
                    with on_writer_cpus(job.rank, c.writer_cpus):
                        entry = c.write(c.level, c.store, c.ckpt_id, c.slots)
                except Exception as exc:  # reported to every rank by the agreement
                    error = one_line(exc)
                maybe_fail("checkpoint-write", rank=job.rank, iteration=c.iteration)
            if len(c.waves) > 1:
                job.comm.barrier()
        fail_if(error)
        # rank 0's clock dates the checkpoint: every node's manifest must be the same
        return entry, utc_now_iso()

    written = agree_on(job.comm, write)
    if written.failure is not None:
        raise c.failed(f" on {written.failure}")
    outcomes = [o for o in written.values if o is not None]
    c.created = outcomes[0][1]
    c.entries = tuple(e for e, _ in outcomes if e is not None)


def encode_redundancy(c: Commit) -> None:
    """The level's redundant files next to the data (partner copies, parity; collective)."""
    stage = c.store.staging_path(c.ckpt_id)
    redundancy = c.job.redundancy_of(c.level)
    stored_as_is = bool(c.slots) and parse_codec(c.job.level(c.level).codec) is None
    if stored_as_is and isinstance(redundancy, ReadsMemory) and redundancy.reads_memory:
        memory = InMemory([s.view for s in c.slots])
        c.redundancy, problem = redundancy.encode(stage, c.entries, memory)
    else:
        c.redundancy, problem = redundancy.encode(stage, c.entries)
    if problem is not None:
        raise c.failed(f": {problem}")


def describe(c: Commit) -> None:
    """The checkpoint's manifest, the same on every rank."""
    job = c.job
    c.manifest = Manifest(
        name=job.config.name,
        id=c.ckpt_id,
        level=c.level,
        created=c.created,
        iteration=c.iteration,
        checksum=job.config.checksum,
        codec=job.codec_label(c.level),
        nranks=job.comm.size,
        nodes=job.topology.nodes,
        ranks=c.entries,
        redundancy=c.redundancy,
    )


def publish(c: Commit) -> None:
    """The commit point: each directory's leader writes the manifest and renames staging to
    committed; all agree, and a checkpoint committed on only some nodes is removed again."""
    job, store = c.job, c.store
    manifest = c.manifest
    assert manifest is not None  # described before
    maybe_fail("checkpoint-commit", rank=job.rank, iteration=c.iteration)

    def commit() -> None:
        if job.is_leader(c.level):
            store.commit(c.ckpt_id, manifest, ranks=job.dir_ranks(c.level))

    committed = agree_on(job.comm, commit)
    bad = committed.failure
    if bad is None:
        return
    commit_error = committed.errors[job.rank]
    if job.is_leader(c.level) and commit_error is None:
        # committed here but not everywhere: not a checkpoint
        tidy(lambda: store.remove(c.ckpt_id), f"remove checkpoint {c.ckpt_id}")
    raise CheckpointError(
        f"checkpoint {c.ckpt_id} (level {c.level}) could not be committed on rank {bad.rank}: "
        f"{bad.error}; the previous checkpoints are intact"
    )


def retire_old(c: Commit) -> None:
    """Keep-last-k within the level, in the background (each directory's leader)."""
    if c.job.is_leader(c.level):
        keep, kept, store = c.job.config.keep, list(c.kept), c.store
        tidy(lambda: store.cleanup(keep, protect=kept, wait=False), "remove old checkpoints")


CHECKPOINT_STAGES: tuple[Callable[[Commit], None], ...] = (
    write_data,
    encode_redundancy,
    describe,
    publish,
    retire_old,
)
"""The stages of a synchronous checkpoint, in order."""


def _undo(c: Commit) -> None:
    c.job.abort(c.level, c.store, c.ckpt_id)


def write_and_commit(c: Commit) -> RankEntry:
    """Run :data:`CHECKPOINT_STAGES` on ``c`` (collective); this rank's manifest entry."""
    run_stages(CHECKPOINT_STAGES, c, _undo)
    return c.entries[c.job.rank]
