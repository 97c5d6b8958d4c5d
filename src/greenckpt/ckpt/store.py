"""The on-disk life cycle of one job's checkpoints under one level's base directory.

Layout (one store per level; on node-local storage each node has its own base)::

    <base>/<name>/ckpt-00000012/              a committed checkpoint: rank files + manifest.json
    <base>/<name>/.ckpt-00000013.partial/     staging: the checkpoint being written
    <base>/<name>/.ckpt-00000009.deleting/    a checkpoint being removed

Why this shape: the state of every checkpoint is visible in one rename-atomic name, so a crash
never leaves a half checkpoint that looks committed nor destroys the previous good one. *The
rename of staging to committed is the commit point.* The whole life cycle (writing, commit,
removal, recovery): docs/design/checkpointer.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from greenckpt.ckpt.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    read_manifest,
    write_manifest,
)
from greenckpt.durable import fsync_directory
from greenckpt.errors import GreenckptError
from greenckpt.io.checksum import file_digest

__all__ = ["CheckpointStore", "FreeSpaceUnknownError", "StoreError", "VerifyResult"]

_COMMITTED: Final = re.compile(r"ckpt-(\d{8,})")
_PARTIAL: Final = re.compile(r"\.ckpt-(\d{8,})\.partial")
_DELETING: Final = re.compile(r"\.ckpt-(\d{8,})\.deleting")


class StoreError(GreenckptError, ValueError):
    """A checkpoint store cannot do what was asked (unusable directory, commit of a missing or
    existing checkpoint, ...); the one-line message says what is wrong and what would be right."""


class FreeSpaceUnknownError(GreenckptError, OSError):
    """The file system holding a store does not say how much room it has (``statvfs``
    reports no blocks at all, as some FUSE file systems and object stores do)."""


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of :meth:`CheckpointStore.verify`.

    ``ok`` is True when everything checked is sound; otherwise ``problem`` is the first thing
    found wrong, in one line. ``manifest`` is the checkpoint's manifest whenever it could be
    read (so a restart need not read it again), ``ranks`` the ranks whose files were checked and
    ``deep`` whether their digests were compared.
    """

    id: int
    ok: bool
    problem: str | None
    manifest: Manifest | None
    ranks: tuple[int, ...]
    deep: bool


def _dir_name(ckpt_id: int) -> str:
    return f"ckpt-{ckpt_id:08d}"


def _parse_id(pattern: re.Pattern[str], entry: str) -> int | None:
    """The id in a directory name of the given kind, or None for anything else (including
    non-canonical spellings such as ``ckpt-000000012``, which this store never creates)."""
    m = pattern.fullmatch(entry)
    if m is None:
        return None
    ckpt_id = int(m.group(1))
    if ckpt_id < 1 or f"{ckpt_id:08d}" != m.group(1):
        return None
    return ckpt_id


def _fsync_directories(root: Path) -> None:
    """fsync ``root`` and every directory under it (bottom-up), so every entry in them is
    durable. The files themselves are fsynced by whoever wrote them: the I/O engine, the
    redundancy writers and the flush copy all do before they report success."""
    for dirpath, _dirnames, _filenames in os.walk(root, topdown=False):
        fsync_directory(Path(dirpath))


def _remove_tree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _remove_tree_quietly(job_dir: Path, path: Path) -> None:
    """Background removal of ``path``, renamed out of ``job_dir``: ``job_dir`` is fsynced
    first, so the rename is durable before any of the files goes (a crash then leaves the
    checkpoint committed and whole, or a ``.deleting`` directory). A failure leaves the
    ``.deleting`` directory, which the next start removes
    (:meth:`CheckpointStore.discard_partial`); nothing to report to anyone now."""
    with contextlib.suppress(OSError):
        fsync_directory(job_dir)
        _remove_tree(path)


def _check_id(ckpt_id: int) -> int:
    if isinstance(ckpt_id, bool) or not isinstance(ckpt_id, int) or ckpt_id < 1:
        raise StoreError(f"checkpoint id must be an integer >= 1, got {ckpt_id!r}")
    return ckpt_id


def _file_problem(rank: int, path: Path, manifest: Manifest) -> str | None:
    """What is wrong with rank ``rank``'s file as its size tells (None: nothing)."""
    entry = manifest.ranks[rank]
    try:
        st = path.stat()
    except FileNotFoundError:
        return f"rank {rank}'s file {path} is missing"
    except OSError as exc:
        return f"cannot stat rank {rank}'s file {path}: {exc.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return f"rank {rank}'s file {path} is not a regular file"
    if st.st_size != entry.stored_bytes:
        return (
            f"rank {rank}'s file {path} has {st.st_size} bytes, the manifest says "
            f"{entry.stored_bytes} (truncated or overwritten)"
        )
    return None


def _digest_problem(rank: int, path: Path, manifest: Manifest) -> str | None:
    """What is wrong with rank ``rank``'s file as its digest tells (None: nothing)."""
    entry = manifest.ranks[rank]
    try:
        digest, nread = file_digest(path, manifest.checksum)
    except OSError as exc:
        return f"cannot read rank {rank}'s file {path}: {exc.strerror}"
    if nread != entry.stored_bytes or digest != entry.digest:
        return (
            f"rank {rank}'s file {path} is corrupt: {manifest.checksum} digest "
            f"{digest} over {nread} bytes, the manifest says {entry.digest} over "
            f"{entry.stored_bytes}"
        )
    return None


class CheckpointStore:
    """The checkpoints of job ``name`` under ``base`` (one level's directory, see module doc)."""

    def __init__(self, base: str | os.PathLike[str], name: str) -> None:
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name:
            raise StoreError(
                f"job name must be a plain directory name (no '/', not '.' or '..'), got {name!r}"
            )
        self.base: Final = Path(base)
        self.name: Final = name
        self._removals: list[threading.Thread] = []

    def __repr__(self) -> str:
        return f"CheckpointStore({str(self.base)!r}, {self.name!r})"

    @property
    def job_dir(self) -> Path:
        """``<base>/<name>``: where this job's checkpoints live."""
        return self.base / self.name

    def committed_path(self, ckpt_id: int) -> Path:
        """The directory of committed checkpoint ``ckpt_id`` (whether or not it exists)."""
        return self.job_dir / _dir_name(_check_id(ckpt_id))

    def staging_path(self, ckpt_id: int) -> Path:
        """The staging directory of checkpoint ``ckpt_id`` (whether or not it exists)."""
        return self.job_dir / f".{_dir_name(_check_id(ckpt_id))}.partial"

    def deleting_path(self, ckpt_id: int) -> Path:
        """Where checkpoint ``ckpt_id`` sits while it is being removed."""
        return self.job_dir / f".{_dir_name(_check_id(ckpt_id))}.deleting"

    def check_usable(self) -> None:
        """Raise a one-line :class:`StoreError` unless checkpoints can be written here.

        Runs before the first checkpoint starts, so a wrong path fails at once instead of after
        hours of computation. Writability is tested by creating (and removing) a small file:
        permission bits alone do not tell (root ignores them, read-only mounts and pseudo file
        systems refuse writes whatever the bits say).
        """
        base = self.base
        if not base.exists():
            raise StoreError(
                f"checkpoint directory {base} does not exist; create it or give an existing "
                "directory"
            )
        if not base.is_dir():
            raise StoreError(
                f"checkpoint directory {base} is not a directory; give a directory path"
            )
        target = base
        if self.job_dir.exists():
            if not self.job_dir.is_dir():
                raise StoreError(
                    f"{self.job_dir} exists and is not a directory; remove it or use another "
                    "job name"
                )
            target = self.job_dir
        try:
            fd, probe = tempfile.mkstemp(prefix=".greenckpt-probe-", dir=target)
        except OSError as exc:
            raise StoreError(
                f"checkpoint directory {target} is not writable ({exc.strerror}); give a "
                "directory this process can create files in"
            ) from None
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)

    def staging(self, ckpt_id: int) -> Path:
        """Create (if needed, parents too) and return the staging directory of ``ckpt_id``.

        Idempotent: every rank of a node calls it and writes its own file into the same
        directory. Refused when ``ckpt_id`` is already committed (ids only increase; writing
        into a committed id would mix two checkpoints).
        """
        path = self.staging_path(ckpt_id)
        if self.committed_path(ckpt_id).exists():
            raise StoreError(
                f"checkpoint {ckpt_id} of job {self.name!r} is already committed at "
                f"{self.committed_path(ckpt_id)}; use a new, larger id"
            )
        path.mkdir(parents=True, exist_ok=True)
        return path

    def commit(
        self,
        ckpt_id: int,
        manifest: Manifest,
        *,
        ranks: Iterable[int] | None = None,
        keep_version: bool = False,
    ) -> Path:
        """Make staged checkpoint ``ckpt_id`` committed; return its directory.

        Writes ``manifest.json`` into staging, checks the rank files this store holds are there
        with their sizes (``ranks``: all ranks of the manifest by default; on node-local storage
        pass the node's ranks, since each node's store holds only its own files), fsyncs the
        manifest and the staging directory (the rank files were fsynced by their writers),
        renames staging to the committed name and fsyncs the job directory and the base
        directory holding it. The rename is the commit point: a crash before it
        leaves only a ``.partial`` directory that never looks committed. ``keep_version``:
        the manifest is a copy of one that was read (a rebuilt node's) and keeps its format
        version (:func:`~greenckpt.ckpt.manifest.manifest_to_json`).
        """
        staging = self.staging_path(ckpt_id)
        final = self.committed_path(ckpt_id)
        if manifest.id != ckpt_id or manifest.name != self.name:
            raise StoreError(
                f"manifest is for checkpoint {manifest.id} of job {manifest.name!r}, cannot "
                f"commit it as checkpoint {ckpt_id} of job {self.name!r}"
            )
        if final.exists():
            raise StoreError(
                f"checkpoint {ckpt_id} of job {self.name!r} is already committed at {final}; "
                "commit each id once"
            )
        if not staging.is_dir():
            raise StoreError(
                f"no staging directory {staging} for checkpoint {ckpt_id}; call staging() and "
                "write the rank files before commit()"
            )
        selected = range(manifest.nranks) if ranks is None else sorted(set(ranks))
        for rank in selected:
            if not 0 <= rank < manifest.nranks:
                raise StoreError(
                    f"rank {rank} is not in checkpoint {ckpt_id} (nranks is {manifest.nranks})"
                )
            entry = manifest.ranks[rank]
            try:
                size = (staging / entry.file).stat().st_size
            except FileNotFoundError:
                raise StoreError(
                    f"rank {rank}'s file {entry.file} is missing from {staging}; write every "
                    "rank's file before commit() (on node-local storage pass ranks=<the "
                    "node's ranks>)"
                ) from None
            if size != entry.stored_bytes:
                raise StoreError(
                    f"rank {rank}'s file {staging / entry.file} has {size} bytes, the manifest "
                    f"says {entry.stored_bytes}; finish writing it before commit()"
                )
        # staging is never read, so the manifest needs no temporary name of its own
        write_manifest(staging / MANIFEST_NAME, manifest, atomic=False, keep_version=keep_version)
        _fsync_directories(staging)
        os.rename(staging, final)  # the commit point
        fsync_directory(self.job_dir)
        fsync_directory(self.base)  # the job directory may be new (a first or rebuilt one)
        return final

    def _scan(self, pattern: re.Pattern[str]) -> list[int]:
        try:
            entries = os.listdir(self.job_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        ids = (_parse_id(pattern, e) for e in entries)
        return sorted(i for i in ids if i is not None)

    def committed(self) -> list[int]:
        """Ids of committed checkpoints, ascending (staging, deletions and other names are
        ignored)."""
        return [i for i in self._scan(_COMMITTED) if self.committed_path(i).is_dir()]

    def read(self, ckpt_id: int, *, level: int | None = None) -> Manifest:
        """The manifest of committed checkpoint ``ckpt_id`` (:class:`ManifestError` if it
        cannot be read, is invalid or damaged, or describes another job, id or — given
        ``level``, the level of this store — another level than its directory)."""
        path = self.committed_path(ckpt_id) / MANIFEST_NAME
        manifest = read_manifest(path)
        problem = self._misplaced(manifest, ckpt_id, level)
        if problem is not None:
            raise ManifestError(f"{path}: {problem}")
        return manifest

    def _misplaced(self, manifest: Manifest, ckpt_id: int, level: int | None) -> str | None:
        """Why ``manifest`` cannot be checkpoint ``ckpt_id`` of this store, or None."""
        wrong = []
        if manifest.name != self.name or manifest.id != ckpt_id:
            wrong.append(
                f"describes checkpoint {manifest.id} of job {manifest.name!r}, expected "
                f"checkpoint {ckpt_id} of job {self.name!r} (the name of its directory)"
            )
        if level is not None and manifest.level != level:
            wrong.append(
                f"describes a level-{manifest.level} checkpoint, but it is in the level-{level} "
                "directory"
            )
        if not wrong:
            return None
        return f"{'; it '.join(wrong)}: it was edited or moved, so it cannot be trusted"

    def verify(
        self,
        ckpt_id: int,
        *,
        deep: bool = True,
        ranks: Iterable[int] | None = None,
        level: int | None = None,
    ) -> VerifyResult:
        """Check committed checkpoint ``ckpt_id`` without trusting anything but the manifest.

        The manifest must be readable, match its own digest and be this job's checkpoint
        ``ckpt_id`` (and of ``level``, when given: the level of this store); each checked
        rank's file must exist with ``stored_bytes`` bytes; with ``deep`` its digest must match
        too (the whole file is read). ``ranks`` limits the files checked (on node-local storage
        a node holds only its own ranks' files); ``None`` checks all. Never raises for a bad
        checkpoint: the result says what is wrong.
        """
        _check_id(ckpt_id)
        directory = self.committed_path(ckpt_id)
        manifest, problem = self._checked_manifest(directory, ckpt_id, level)
        if manifest is None:
            return VerifyResult(ckpt_id, False, problem, None, (), deep)
        checked: tuple[int, ...] = ()
        if problem is None:
            checked = tuple(range(manifest.nranks) if ranks is None else sorted(set(ranks)))
            problem = self._files_problem(directory, manifest, checked, deep=deep)
        return VerifyResult(ckpt_id, problem is None, problem, manifest, checked, deep)

    def _checked_manifest(
        self, directory: Path, ckpt_id: int, level: int | None
    ) -> tuple[Manifest | None, str | None]:
        """The manifest of committed checkpoint ``ckpt_id`` (None: unreadable) and what is
        wrong with it (None: it is this job's, of ``level`` when given)."""
        if not directory.is_dir():
            return None, f"checkpoint {ckpt_id} of job {self.name!r} is not committed ({directory})"
        try:
            manifest = read_manifest(directory / MANIFEST_NAME)
        except ManifestError as exc:
            return None, str(exc)
        misplaced = self._misplaced(manifest, ckpt_id, level)
        if misplaced is not None:
            return manifest, f"{directory / MANIFEST_NAME}: {misplaced}"
        return manifest, None

    @staticmethod
    def _files_problem(
        directory: Path, manifest: Manifest, checked: tuple[int, ...], *, deep: bool
    ) -> str | None:
        """What is wrong with the ``checked`` ranks' files, or None. Cheap checks for all
        files first, so a missing file is reported before hours of reading the others."""
        for rank in checked:
            if not 0 <= rank < manifest.nranks:
                return (
                    f"rank {rank} is not in checkpoint {manifest.id} (nranks is {manifest.nranks})"
                )
        for rank in checked:
            problem = _file_problem(rank, directory / manifest.ranks[rank].file, manifest)
            if problem is not None:
                return problem
        for rank in checked if deep else ():
            problem = _digest_problem(rank, directory / manifest.ranks[rank].file, manifest)
            if problem is not None:
                return problem
        return None

    def remove(self, ckpt_id: int, *, wait: bool = True) -> None:
        """Remove committed checkpoint ``ckpt_id``.

        First renamed to ``.ckpt-N.deleting`` and the job directory fsynced, so it stops
        looking committed atomically; then the files are deleted. A crash in between leaves a
        ``.deleting`` directory for :meth:`discard_partial`, never a damaged "committed" one.

        With ``wait=False`` the fsync and the deletion run in a background thread, in that
        order (:meth:`join` waits for it): freeing a large file's blocks takes tens of
        milliseconds on ext4, and the fsync a journal commit (1-2 ms here), neither of which a
        checkpoint need wait for once the checkpoint no longer looks committed to this run. A
        crash before that fsync may bring the rename back, with every file still there.
        """
        final = self.committed_path(ckpt_id)
        if not final.is_dir():
            raise StoreError(
                f"checkpoint {ckpt_id} of job {self.name!r} is not committed ({final}); "
                f"committed ids are {self.committed()}"
            )
        doomed = self.deleting_path(ckpt_id)
        if doomed.exists() or doomed.is_symlink():
            _remove_tree(doomed)  # a leftover of an earlier, interrupted removal
        os.rename(final, doomed)
        if wait:
            fsync_directory(self.job_dir)
            _remove_tree(doomed)
            return
        worker = threading.Thread(
            target=_remove_tree_quietly,
            args=(self.job_dir, doomed),
            name="greenckpt-remove",
            daemon=True,
        )
        worker.start()
        self._removals = [t for t in self._removals if t.is_alive()] + [worker]

    def join(self) -> None:
        """Wait for the background removals started by ``remove(..., wait=False)``."""
        for worker in self._removals:
            worker.join()
        self._removals = []

    def discard_partial(self) -> list[Path]:
        """Remove staging and deletion leftovers of a crashed earlier run; return what was
        removed.

        Call it when no checkpoint of this job is being written (at start-up, before the first
        checkpoint): it deletes every ``.partial`` directory, including one being filled now.
        """
        removed: list[Path] = []
        for ckpt_id in self._scan(_PARTIAL):
            path = self.staging_path(ckpt_id)
            _remove_tree(path)
            removed.append(path)
        for ckpt_id in self._scan(_DELETING):
            path = self.deleting_path(ckpt_id)
            _remove_tree(path)
            removed.append(path)
        if removed:
            fsync_directory(self.job_dir)
        return removed

    def cleanup(self, keep: int, protect: Iterable[int] = (), *, wait: bool = True) -> list[int]:
        """Keep the newest ``keep`` committed checkpoints and every id in ``protect``; remove
        the others, oldest first, and return their ids.

        ``protect`` is how the caller guarantees the newest *verified* checkpoint survives even
        when newer, unverified (possibly bad) ones would otherwise push it out: a failing
        checkpoint must never destroy the previous good one.
        """
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise StoreError(
                f"keep must be an integer >= 1 (the newest checkpoint always stays), got {keep!r}"
            )
        ids = self.committed()
        kept = set(ids[-keep:]) | set(protect)
        removed = []
        for ckpt_id in ids:
            if ckpt_id not in kept:
                self.remove(ckpt_id, wait=wait)
                removed.append(ckpt_id)
        return removed

    # -------------------------------------------------------------- space and setting aside

    def free_bytes(self) -> int:
        """Bytes this process may still write on the file system holding this store.

        ``statvfs``'s blocks available to unprivileged users (``f_bavail``), not the free
        blocks (``f_bfree``): the reserve kept for root is not the application's to fill, and
        a checkpoint that needs it has already left too little room for everyone else. The job
        directory is asked when it exists (it may be a different mount than the base).

        A file system of no blocks at all (``f_blocks == 0``: some FUSE file systems and
        object stores report nothing) cannot be full in any meaningful way: its free space is
        unknown, not zero, and :class:`FreeSpaceUnknownError` says so rather than a 0 that
        would refuse every checkpoint."""
        target = self.job_dir if self.job_dir.is_dir() else self.base
        st = os.statvfs(target)
        if st.f_blocks == 0:
            raise FreeSpaceUnknownError(
                f"the file system of {target} reports no size (statvfs f_blocks = 0, as some "
                "FUSE file systems and object stores do), so its free space is unknown"
            )
        return st.f_bavail * st.f_frsize

    def footprint(self, ckpt_id: int) -> int:
        """Bytes held by the files of committed checkpoint ``ckpt_id`` (0 if it is gone):
        what removing it would give back, for messages about space."""
        total = 0
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.committed_path(ckpt_id)):
                with contextlib.suppress(OSError):
                    total += entry.stat(follow_symlinks=False).st_size
        return total

    def set_aside(self, stamp: str) -> Path | None:
        """Move this job's whole directory out of the store's sight; return where it went.

        The way out when no checkpoint can be restored: the application can start afresh
        while nothing is deleted (the data may still be worth a look). One ``rename`` to
        ``<base>/<name>.unrestorable-<stamp>`` (``-2``, ``-3``, ... if that exists), so a
        crash leaves the checkpoints either all in place or all set aside; the next
        checkpoint re-creates the job directory. None when there is no job directory."""
        if not self.job_dir.is_dir():
            return None
        target = self.base / f"{self.name}.unrestorable-{stamp}"
        n = 1
        while target.exists() or target.is_symlink():
            n += 1
            target = self.base / f"{self.name}.unrestorable-{stamp}-{n}"
        os.rename(self.job_dir, target)
        fsync_directory(self.base)
        return target
