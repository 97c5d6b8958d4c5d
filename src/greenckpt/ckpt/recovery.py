"""Recovery: find the newest checkpoint every rank can restore, rebuild lost files of levels
with redundancy, and read the data back into the protected buffers.

Why collective at every step: a checkpoint counts as restored only when every rank read and
verified its part; otherwise every rank passes to the next older one together, keeping the
reasons (a damaged manifest named as such, never blamed on a sound data file). The rules
(which copies are candidates, how a node's lost directory is rebuilt and committed) are
explained in docs/design/checkpointer.md.
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from pathlib import Path

from greenckpt.ckpt.agree import LocalFailure, agree_on, fail_if, one_line
from greenckpt.ckpt.inject import maybe_fail
from greenckpt.ckpt.job import Job, tidy
from greenckpt.ckpt.manifest import MANIFEST_NAME, Manifest, ManifestError, RankEntry
from greenckpt.ckpt.protect import Identity, IdentityMismatchError
from greenckpt.ckpt.records import RecoveryError, RecoveryInfo
from greenckpt.ckpt.store import CheckpointStore
from greenckpt.ckpt.writer_cpu import on_writer_cpus
from greenckpt.durable import fsync_directory
from greenckpt.io import Chunk, ConcatSink, parse_codec, run_chunks
from greenckpt.io.checksum import digest_bytes

__all__ = ["Candidates", "candidates", "restore_newest", "set_aside"]

Listing = list[dict[int, list[int]]]
"""Every rank's committed checkpoint ids, by level."""


class Candidates:
    """The checkpoints a recovery may try (newest first; of one checkpoint's copies, the
    lowest level first: node-local storage is the fastest to read back), and the orphans:
    held by some nodes only, on a level that cannot rebuild the rest."""

    def __init__(self, job: Job, everyone: Listing) -> None:
        def held(ckpt_id: int, number: int) -> bool:
            holders = [ckpt_id in other.get(number, ()) for other in everyone]
            # a level with redundancy rebuilds what a node lost; the others need every copy
            return any(holders) if job.redundancy_of(number).rebuilds else all(holders)

        self.everyone = everyone
        self.tried = sorted(
            {
                (ckpt_id, number)
                for other in everyone
                for number, ids in other.items()
                for ckpt_id in ids
                if held(ckpt_id, number)
            },
            key=lambda c: (-c[0], c[1]),
        )
        usable = {c for c, _ in self.tried}
        # from every rank's listing, so that every rank takes the same branch
        anywhere = {i for other in everyone for ids in other.values() for i in ids}
        self.orphans = sorted(anywhere - usable, reverse=True)

    def __bool__(self) -> bool:
        return bool(self.tried or self.orphans)


def candidates(job: Job) -> Candidates:
    """Every rank's committed checkpoints, gathered (collective)."""
    mine = {number: store.committed() for number, store in job.stores.items()}
    return Candidates(job, job.comm.allgather(mine))


def restore_newest(
    job: Job,
    found: Candidates,
    waves: list[tuple[int, ...]],
    start: float,
    writer_cpus: tuple[int, ...] = (),
) -> RecoveryInfo:
    """Try the candidates newest first; the first every rank restores (collective), or
    :class:`RecoveryError` with every reason. ``writer_cpus``: this node's reader cores
    under a per-core split (:mod:`greenckpt.ckpt.writer_cpu`)."""
    skipped: list[str] = []
    for ckpt_id, number in found.tried:
        restored: tuple[int, ...] | str
        if job.redundancy_of(number).rebuilds:
            manifest, why = shared_manifest(job, number, ckpt_id, found.everyone)
            if manifest is None:
                skipped.append(f"checkpoint {ckpt_id} (level {number}): {why}")
                continue
            restored = _restore_one(job, number, ckpt_id, manifest, waves, writer_cpus)
        else:
            manifest, restored = _restore_own(job, number, ckpt_id, waves, writer_cpus)
        if isinstance(restored, str):
            skipped.append(f"checkpoint {ckpt_id} (level {number}): {restored}")
            continue
        assert manifest is not None  # restored: every rank read its manifest
        if not manifest.verified:
            warnings.warn(
                f"greenckpt: checkpoint {ckpt_id} (level {number}) was restored from a "
                f"format-version-{manifest.format_version} manifest, written before "
                "manifests carried their own digest: its data were verified, its "
                "iteration and other fields could not be",
                RuntimeWarning,
                stacklevel=3,
            )
        passed = [f"checkpoint {o}: not held by every node" for o in found.orphans if o > ckpt_id]
        return RecoveryInfo(
            ckpt_id,
            number,
            manifest.iteration,
            time.monotonic() - start,
            tuple(passed + skipped),
            restored,
        )
    skipped += [f"checkpoint {ckpt_id}: not held by every node" for ckpt_id in found.orphans]
    detail = "; ".join(skipped) if skipped else "no checkpoint exists"
    raise RecoveryError(f"no checkpoint could be restored: {detail}")


def _restore_own(
    job: Job,
    number: int,
    ckpt_id: int,
    waves: list[tuple[int, ...]],
    writer_cpus: tuple[int, ...] = (),
) -> tuple[Manifest | None, tuple[int, ...] | str]:
    """Read a checkpoint of a level without redundancy, each rank by its own directory's
    manifest: (this rank's manifest, ``()``) when every rank read and verified its data and
    every node's manifest is the same checkpoint's, else (None or it, why not) (collective).

    Why the manifests are compared in the read's agreement, not in one of their own before it
    (as :func:`shared_manifest` does): that saves one collective per restart — on a node with
    more ranks than cores, a few milliseconds of a restart of tens — and nodes holding different
    manifests (leftovers of another run) are rare: their data are then read for nothing and the
    next candidate is tried, exactly as before."""
    manifest, why = _read_manifest(job, number, ckpt_id)
    maybe_fail(
        "restart-read", rank=job.rank, iteration=None if manifest is None else manifest.iteration
    )

    def read() -> tuple[str, int | None]:
        fail_if(read_in_waves(job, number, ckpt_id, manifest, waves, writer_cpus, why))
        assert manifest is not None  # read, or its problem failed the read above
        return manifest.created, manifest.iteration

    seen = agree_on(job.comm, read)
    if seen.failure is not None:
        return manifest, str(seen.failure)
    if len(set(seen.values)) > 1:  # e.g. node-local leftovers of another run
        return manifest, "the nodes hold different manifests for it (written by different runs)"
    return manifest, ()


def _restore_one(
    job: Job,
    number: int,
    ckpt_id: int,
    manifest: Manifest,
    waves: list[tuple[int, ...]],
    writer_cpus: tuple[int, ...] = (),
) -> tuple[int, ...] | str:
    """Read one checkpoint on every rank, rebuilding lost files where the level can: the
    ranks rebuilt, or why it cannot be restored (collective)."""
    maybe_fail("restart-read", rank=job.rank, iteration=manifest.iteration)
    read = agree_on(
        job.comm,
        lambda: fail_if(read_in_waves(job, number, ckpt_id, manifest, waves, writer_cpus)),
    )
    if read.failure is None:
        return ()
    if not job.redundancy_of(number).rebuilds:
        return str(read.failure)
    lost = set(read.failed)
    failure = rebuild(job, number, ckpt_id, manifest, lost)
    if failure is not None:
        return f"{read.failure}; rebuilding failed: {failure}"
    again = agree_on(
        job.comm,
        lambda: fail_if(try_read(job, number, ckpt_id, manifest) if job.rank in lost else None),
    )
    return tuple(sorted(lost)) if again.failure is None else str(again.failure)


def read_in_waves(
    job: Job,
    level: int,
    ckpt_id: int,
    manifest: Manifest | None,
    waves: list[tuple[int, ...]],
    writer_cpus: tuple[int, ...] = (),
    unreadable: str = "",
) -> str | None:
    """:func:`try_read`, ranks reading at once as many as the waves allow, each on its
    node's I/O core under a per-core split (collective: a rank with no ``manifest``, for the
    reason ``unreadable``, reads nothing but takes part in every wave)."""
    problem = None
    for wave in waves:
        if job.rank in wave:
            if manifest is None:
                problem = unreadable or "no manifest"
            else:
                with on_writer_cpus(job.rank, writer_cpus):
                    problem = try_read(job, level, ckpt_id, manifest)
        if len(waves) > 1:
            job.comm.barrier()
    return problem


def _read_manifest(job: Job, level: int, ckpt_id: int) -> tuple[Manifest | None, str]:
    try:
        return job.stores[level].read(ckpt_id, level=level), ""
    except ManifestError as exc:  # already one line naming the manifest
        return None, str(exc)
    except (OSError, ValueError) as exc:
        return None, one_line(exc)


def shared_manifest(
    job: Job, level: int, ckpt_id: int, everyone: Listing
) -> tuple[Manifest | None, str]:
    """The checkpoint's manifest, the same on every rank (collective).

    Levels without redundancy: each rank reads its own directory's copy (all must be
    readable). Levels with redundancy: read by the first rank whose node holds a readable
    copy and broadcast, so ranks of a node that lost everything learn what to rebuild.
    """
    if not job.redundancy_of(level).rebuilds:
        mine: list[Manifest] = []

        def read() -> tuple[str, int | None]:
            manifest, problem = _read_manifest(job, level, ckpt_id)
            fail_if(problem)
            assert manifest is not None  # read, or the problem raised above
            mine.append(manifest)
            return manifest.created, manifest.iteration

        seen = agree_on(job.comm, read)
        if seen.failure is not None:
            return None, str(seen.failure)
        if len(set(seen.values)) > 1:  # e.g. node-local leftovers of another run
            return None, "the nodes hold different manifests for it (written by different runs)"
        return mine[0], ""
    reasons = []
    for root, other in enumerate(everyone):
        if ckpt_id not in other.get(level, ()):
            continue
        found: tuple[Manifest | None, str] = (None, "")
        if job.rank == root:
            found = _read_manifest(job, level, ckpt_id)
        manifest, problem = job.comm.bcast(found, root)
        if manifest is not None:
            return manifest, ""
        reasons.append(f"rank {root}: {problem}")
    return None, "; ".join(reasons) or "no node holds it"


def rebuild(job: Job, level: int, ckpt_id: int, manifest: Manifest, lost: set[int]) -> str | None:
    """Write the ``lost`` ranks' files (and the redundancy they held) again into their
    nodes' directories from partner copies or parity (collective); why not, or None.

    Rebuilt files are written under hidden names and renamed into place only when every
    rank succeeded. A node that lost its whole directory gets a staging directory that its
    leader commits with the checkpoint's manifest, exactly like a new checkpoint, in the
    manifest's own format version.
    """
    store = job.stores[level]
    committed = store.committed_path(ckpt_id)
    present = committed.is_dir()
    made = agree_on(job.comm, lambda: committed if present else store.staging(ckpt_id))
    if made.failure is not None:
        _abort_rebuild(job, level, store, ckpt_id, present, [])
        return str(made.failure)
    target = made.values[job.rank] or committed  # this rank's: made everywhere
    done, failure = job.redundancy_of(level).rebuild(manifest, lost, target)
    if failure:
        _abort_rebuild(job, level, store, ckpt_id, present, done)
        return failure
    failed = _put_in_place(job, level, ckpt_id, manifest, present, done, target)
    if failed is not None:
        _abort_rebuild(job, level, store, ckpt_id, present, done)
        return failed
    return None


def _put_in_place(
    job: Job,
    level: int,
    ckpt_id: int,
    manifest: Manifest,
    present: bool,
    done: list[tuple[Path, Path]],
    target: Path,
) -> str | None:
    """Rename the rebuilt files into place and, for a node directory made anew, commit it
    (collective); the agreed failure, or None."""
    store = job.stores[level]

    def place() -> None:
        for tmp, final in done:
            os.replace(tmp, final)
        if done:
            fsync_directory(target)

    # every rank's rebuilt files must be in place before a node directory is committed
    placed = agree_on(job.comm, place)
    if placed.failure is not None:
        return str(placed.failure)

    def commit() -> None:
        if not present and job.is_leader(level):
            # the manifest as it was read: a version-1 one stays version 1 (sealing it
            # would make every later restart refuse data written without a record of
            # their checkpoint; see manifest_to_json)
            store.commit(ckpt_id, manifest, ranks=job.dir_ranks(level), keep_version=True)
            fail_if(_redundancy_missing(job, level, store, ckpt_id, manifest))

    bad = agree_on(job.comm, commit).failure
    return None if bad is None else str(bad)


def _redundancy_missing(
    job: Job, level: int, store: CheckpointStore, ckpt_id: int, manifest: Manifest
) -> str | None:
    """After committing a rebuilt node directory: are its partner copies / parity files
    there too? (The store checks only the rank files.)"""
    directory = store.committed_path(ckpt_id)
    for rank in job.topology.nodes[job.node]:
        for name in job.redundancy_of(level).extra_files(manifest, rank):
            if not (directory / name).is_file():
                return f"the rebuilt {directory} lacks {name}"
    return None


def _abort_rebuild(
    job: Job,
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
    job.comm.barrier()
    if not present and job.is_leader(level):
        shutil.rmtree(store.staging_path(ckpt_id), ignore_errors=True)
        if store.committed_path(ckpt_id).is_dir():
            tidy(lambda: store.remove(ckpt_id), f"remove checkpoint {ckpt_id}")
    job.comm.barrier()


def explain_mismatch(
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


def try_read(job: Job, level: int, ckpt_id: int, manifest: Manifest) -> str | None:
    """Read this rank's data of a checkpoint into the protected buffers; why not, or None."""
    try:
        return _read(job, level, ckpt_id, manifest)
    except Exception as exc:  # any failure here must reach the collective verdict
        return one_line(exc)


def _locate(job: Job, level: int, ckpt_id: int, manifest: Manifest) -> tuple[Path, str | None]:
    """This rank's file of the checkpoint, and why it cannot be read as it is (or None)."""
    directory = job.stores[level].committed_path(ckpt_id)
    if manifest.nranks != job.comm.size:
        return directory, f"written by {manifest.nranks} ranks, this job has {job.comm.size}"
    entry = manifest.ranks[job.rank]
    mismatch = job.protected.check(entry.variables)
    if mismatch is not None:
        return directory, mismatch
    path = directory / entry.file
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        if not directory.is_dir():
            return path, f"its node holds no copy of checkpoint {ckpt_id} ({directory} is gone)"
        return path, f"its file {entry.file} is missing from {directory}"
    if size != entry.stored_bytes:
        return path, f"{path} holds {size} B, the manifest says {entry.stored_bytes} B"
    return path, None


def _read(job: Job, level: int, ckpt_id: int, manifest: Manifest) -> str | None:
    path, problem = _locate(job, level, ckpt_id, manifest)
    if problem is not None:
        return problem
    entry, directory = manifest.ranks[job.rank], path.parent
    views, state = job.protected.read_slots(entry.variables)
    # Without a codec the file's digest covers every variable's bytes (the write checked
    # they matched memory), and the variables' own digests are not taken on the way (only
    # to explain a mismatch); with one, each variable is also hashed as its bytes land,
    # which catches memory that changed during that checkpoint.
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
        return explain_mismatch(path, directory / MANIFEST_NAME, manifest, entry, digests)
    if per_variable:
        for v, digest in zip(entry.variables, sink.digests(), strict=True):
            if digest != v.digest:
                return f"variable {v.name} does not match its digest after reading"
    # the data recorded which checkpoint they belong to (versions with a manifest digest):
    # the manifest's name, id and iteration must be theirs
    expected = (
        Identity(manifest.name, manifest.id, manifest.iteration) if manifest.verified else None
    )
    try:
        job.protected.load_state(state, expected)
    except IdentityMismatchError as exc:
        return (
            f"{directory / MANIFEST_NAME} does not match the data it describes ({exc}): "
            "the manifest was edited or damaged"
        )
    return None


def set_aside(job: Job, failure: RecoveryError) -> tuple[Path, ...]:
    """Move this job's checkpoints aside on every level and node, all with rank 0's time
    stamp (collective): where they went. If one store cannot, :class:`RecoveryError` on
    every rank with both reasons. Moving, not deleting: the checkpoints failed to restore
    for reasons a person may want to look into (a different layout, a damaged disk)."""
    stamp: str = job.comm.bcast(time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))

    def move() -> list[str]:
        moved: list[str] = []
        for number, store in sorted(job.stores.items()):
            if not job.is_leader(number):
                continue
            try:
                store.join()  # removals in the background work in the job directory
                where = store.set_aside(stamp)
            except OSError as exc:
                raise LocalFailure(
                    f"could not move {store.job_dir} aside: {one_line(exc)}"
                ) from exc
            if where is not None:
                moved.append(str(where))
        return moved

    everyone = agree_on(job.comm, move)
    if everyone.failure is not None:
        raise RecoveryError(f"{failure}; starting afresh failed on {everyone.failure}") from failure
    return tuple(Path(p) for paths in everyone.values for p in paths or ())
