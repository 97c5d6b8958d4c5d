"""The checkpoint store: commit by rename, crash leftovers, verify, atomic removal, cleanup."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest

import greenckpt.ckpt.store as store_module
from greenckpt.ckpt.manifest import (
    MANIFEST_NAME,
    Manifest,
    RankEntry,
    Variable,
    utc_now_iso,
)
from greenckpt.ckpt.store import CheckpointStore, StoreError, VerifyResult
from greenckpt.io.checksum import digest_bytes

NODES = ((0, 1), (2,))
"""Three ranks on two nodes: node 0 holds ranks 0 and 1, node 1 holds rank 2."""


def stage(
    store: CheckpointStore,
    ckpt_id: int,
    *,
    checksum: str = "xxh3_64",
    ranks_here: Iterable[int] | None = None,
    size: int = 1000,
) -> Manifest:
    """Write the files of ``ranks_here`` (default: all) into staging; return the manifest."""
    nranks = sum(len(n) for n in NODES)
    here = set(range(nranks) if ranks_here is None else ranks_here)
    node_of = {r: i for i, rs in enumerate(NODES) for r in rs}
    directory = store.staging(ckpt_id)
    entries = []
    for rank in range(nranks):
        data = np.random.default_rng([ckpt_id, rank]).integers(0, 256, size + rank, np.uint8)
        raw = data.tobytes()
        name = f"rank-{rank:05d}.dat"
        if rank in here:
            with open(directory / name, "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
        digest = digest_bytes(checksum, raw)
        var = Variable("data", "buffer", None, None, 0, len(raw), digest)
        entries.append(RankEntry(rank, node_of[rank], name, len(raw), len(raw), digest, (var,)))
    return Manifest(
        name=store.name,
        id=ckpt_id,
        level=1,
        created=utc_now_iso(),
        iteration=ckpt_id * 100,
        checksum=checksum,
        codec=None,
        nranks=nranks,
        nodes=NODES,
        ranks=tuple(entries),
    )


def save(store: CheckpointStore, ckpt_id: int) -> Manifest:
    """Stage and commit checkpoint ``ckpt_id`` with every rank's file."""
    manifest = stage(store, ckpt_id)
    store.commit(ckpt_id, manifest)
    return manifest


@pytest.fixture
def store(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(tmp_path / "base", "heat")


@pytest.fixture(autouse=True)
def _make_base(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()


# --- commit -----------------------------------------------------------------------------------


def test_commit_makes_it_committed_and_staging_disappears(store: CheckpointStore) -> None:
    assert store.committed() == []
    manifest = stage(store, 1)
    staging = store.staging_path(1)
    assert staging.is_dir()
    assert store.committed() == []  # staged is not committed
    path = store.commit(1, manifest)
    assert path == store.committed_path(1) == store.base / "heat" / "ckpt-00000001"
    assert store.committed() == [1]
    assert not staging.exists()
    assert sorted(p.name for p in path.iterdir()) == [
        MANIFEST_NAME,
        "rank-00000.dat",
        "rank-00001.dat",
        "rank-00002.dat",
    ]
    assert store.read(1) == manifest


def test_commit_makes_the_manifest_and_every_entry_durable_before_and_after_the_rename(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a commit fsyncs, in order: the manifest and the staging directory (its entries)
    before the rename, then the job directory and the base directory holding it (the job
    directory may have just been created, or re-created after its node lost it)."""
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    manifests = [stage(store, 1), stage(store, 2)]
    monkeypatch.setattr(os, "fsync", spy)
    real_rename = os.rename

    def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        synced.append(f"rename {Path(src).name}")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    store.commit(1, manifests[0])
    first, synced[:] = list(synced), []
    store.commit(2, manifests[1])
    for ckpt_id, seen in ((1, first), (2, synced)):
        staging = store.staging_path(ckpt_id)
        expected = [
            str(staging / MANIFEST_NAME),
            str(staging),
            f"rename {staging.name}",
            str(store.job_dir),
            str(store.base),
        ]
        assert seen == expected


def test_staging_is_idempotent(store: CheckpointStore) -> None:
    first = store.staging(3)
    (first / "rank-00000.dat").write_bytes(b"x")
    assert store.staging(3) == first == store.base / "heat" / ".ckpt-00000003.partial"
    assert (first / "rank-00000.dat").read_bytes() == b"x"


def test_staging_creates_missing_parents(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "deep" / "er", "job")
    assert store.staging(1).is_dir()


def test_crash_before_commit_leaves_only_a_partial(store: CheckpointStore) -> None:
    save(store, 1)
    stage(store, 2)  # the process dies here: no commit
    assert store.committed() == [1]
    assert store.discard_partial() == [store.staging_path(2)]
    assert not store.staging_path(2).exists()
    assert store.committed() == [1]
    assert store.verify(1).ok
    assert store.discard_partial() == []


def test_crash_at_the_commit_point_keeps_previous_good_checkpoint(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = save(store, 1)
    manifest = stage(store, 2)

    def crash(src: object, dst: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "rename", crash)
    with pytest.raises(OSError, match="Input/output"):
        store.commit(2, manifest)
    monkeypatch.undo()
    assert store.committed() == [1]
    assert (store.staging_path(2) / MANIFEST_NAME).is_file()  # only staging holds the manifest
    result = store.verify(1)
    assert result.ok
    assert result.manifest == good


def test_commit_refuses_an_existing_id(store: CheckpointStore) -> None:
    manifest = save(store, 1)
    with pytest.raises(StoreError, match="already committed"):
        store.staging(1)
    store.staging_path(1).mkdir()  # e.g. a buggy caller staging the same id by hand
    with pytest.raises(StoreError, match=r"checkpoint 1 of job 'heat' is already committed"):
        store.commit(1, manifest)
    assert store.committed() == [1]
    assert store.verify(1).ok


def test_commit_refuses_missing_staging(store: CheckpointStore) -> None:
    manifest = stage(store, 1)
    store.discard_partial()
    with pytest.raises(StoreError, match=r"no staging directory .*call staging\(\)"):
        store.commit(1, manifest)
    assert store.committed() == []


def test_commit_refuses_a_manifest_of_another_checkpoint(store: CheckpointStore) -> None:
    manifest = stage(store, 1)
    store.staging(2)
    with pytest.raises(StoreError, match="manifest is for checkpoint 1"):
        store.commit(2, manifest)
    other = CheckpointStore(store.base, "other")
    other.staging(1)
    with pytest.raises(StoreError, match="of job 'heat', cannot commit"):
        other.commit(1, manifest)


def test_commit_refuses_missing_or_short_rank_files(store: CheckpointStore) -> None:
    manifest = stage(store, 1, ranks_here=[0, 1])
    with pytest.raises(StoreError, match=r"rank 2's file rank-00002\.dat is missing"):
        store.commit(1, manifest)
    (store.staging_path(1) / "rank-00002.dat").write_bytes(b"short")
    with pytest.raises(StoreError, match="has 5 bytes, the manifest says 1002"):
        store.commit(1, manifest)
    assert store.committed() == []
    with pytest.raises(StoreError, match="rank 3 is not in checkpoint 1"):
        store.commit(1, manifest, ranks=[3])


def test_node_local_commit_with_only_this_nodes_ranks(store: CheckpointStore) -> None:
    manifest = stage(store, 1, ranks_here=NODES[0])
    store.commit(1, manifest, ranks=NODES[0])
    assert store.committed() == [1]
    assert store.verify(1, ranks=NODES[0]).ok
    full = store.verify(1)
    assert not full.ok
    assert full.problem is not None
    assert "rank 2's file" in full.problem
    assert "missing" in full.problem


def test_large_ids_keep_sorting(store: CheckpointStore) -> None:
    save(store, 99_999_999)
    save(store, 123_456_789)
    assert store.committed_path(123_456_789).name == "ckpt-123456789"
    assert store.committed() == [99_999_999, 123_456_789]


@pytest.mark.parametrize("bad", [0, -1, True, 1.0])
def test_ids_must_be_positive_integers(store: CheckpointStore, bad: object) -> None:
    with pytest.raises(StoreError, match="checkpoint id must be an integer >= 1"):
        store.staging(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "x\0y"])
def test_job_name_must_be_a_plain_name(tmp_path: Path, name: str) -> None:
    with pytest.raises(StoreError, match="job name must be a plain directory name"):
        CheckpointStore(tmp_path, name)


def test_committed_ignores_unrelated_names(store: CheckpointStore) -> None:
    assert store.committed() == []  # job directory does not exist yet
    save(store, 4)
    job = store.job_dir
    (job / "ckpt-abc").mkdir()
    (job / "ckpt-4").mkdir()  # not the canonical spelling
    (job / "ckpt-000000004").mkdir()  # nor this
    (job / "ckpt-00000000").mkdir()  # id 0 does not exist
    (job / "ckpt-00000009").write_text("a file, not a checkpoint")
    (job / ".ckpt-00000005.partial").mkdir()
    (job / ".ckpt-00000002.deleting").mkdir()
    (job / "notes.txt").write_text("")
    assert store.committed() == [4]


# --- verify -----------------------------------------------------------------------------------


@pytest.mark.parametrize("checksum", ["xxh3_64", "crc32"])
def test_verify_passes_a_good_checkpoint(store: CheckpointStore, checksum: str) -> None:
    manifest = stage(store, 1, checksum=checksum)
    store.commit(1, manifest)
    for deep in (True, False):
        result = store.verify(1, deep=deep)
        assert result == VerifyResult(1, True, None, manifest, (0, 1, 2), deep)


def test_verify_catches_a_missing_file(store: CheckpointStore) -> None:
    save(store, 1)
    (store.committed_path(1) / "rank-00001.dat").unlink()
    result = store.verify(1, deep=False)
    assert not result.ok
    assert result.problem is not None
    assert "rank 1's file" in result.problem
    assert "is missing" in result.problem
    assert result.manifest is not None


def test_verify_catches_a_wrong_size(store: CheckpointStore) -> None:
    save(store, 1)
    with open(store.committed_path(1) / "rank-00002.dat", "ab") as f:
        f.write(b"!")
    result = store.verify(1, deep=False)
    assert not result.ok
    assert result.problem is not None
    assert "has 1003 bytes, the manifest says 1002" in result.problem


def test_verify_catches_a_flipped_byte_only_when_deep(store: CheckpointStore) -> None:
    save(store, 1)
    path = store.committed_path(1) / "rank-00000.dat"
    data = bytearray(path.read_bytes())
    data[500] ^= 0x01
    path.write_bytes(bytes(data))
    assert store.verify(1, deep=False).ok  # same size: only the digest can tell
    result = store.verify(1)
    assert not result.ok
    assert result.problem is not None
    assert "rank 0's file" in result.problem
    assert "is corrupt" in result.problem
    assert "\n" not in result.problem


def test_rank_limited_verify_ignores_other_ranks_files(store: CheckpointStore) -> None:
    save(store, 1)
    path = store.committed_path(1) / "rank-00002.dat"
    path.write_bytes(b"\x00" * 1002)  # node 1's file is corrupt
    assert not store.verify(1).ok
    result = store.verify(1, ranks=[1, 0, 1])
    assert result.ok
    assert result.ranks == (0, 1)
    path.unlink()
    assert store.verify(1, ranks=NODES[0]).ok
    assert not store.verify(1, ranks=NODES[1]).ok


def test_verify_rank_outside_the_checkpoint(store: CheckpointStore) -> None:
    save(store, 1)
    result = store.verify(1, ranks=[5])
    assert not result.ok
    assert result.problem == "rank 5 is not in checkpoint 1 (nranks is 3)"


def test_verify_of_an_uncommitted_id(store: CheckpointStore) -> None:
    stage(store, 1)
    result = store.verify(1)
    assert not result.ok
    assert result.manifest is None
    assert result.problem is not None
    assert "checkpoint 1 of job 'heat' is not committed" in result.problem


def test_verify_of_a_truncated_manifest(store: CheckpointStore) -> None:
    save(store, 1)
    path = store.committed_path(1) / MANIFEST_NAME
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    result = store.verify(1)
    assert not result.ok
    assert result.manifest is None
    assert result.problem is not None
    assert "is truncated or not JSON" in result.problem


def test_verify_of_a_missing_manifest(store: CheckpointStore) -> None:
    save(store, 1)
    (store.committed_path(1) / MANIFEST_NAME).unlink()
    result = store.verify(1)
    assert not result.ok
    assert result.problem is not None
    assert "manifest.json does not exist" in result.problem


def test_verify_of_a_manifest_for_another_id(store: CheckpointStore) -> None:
    save(store, 1)
    os.rename(store.committed_path(1), store.committed_path(7))
    result = store.verify(7)
    assert not result.ok
    assert result.problem is not None
    assert "describes checkpoint 1 of job 'heat', expected checkpoint 7" in result.problem


def test_verify_of_a_directory_in_place_of_a_file(store: CheckpointStore) -> None:
    save(store, 1)
    path = store.committed_path(1) / "rank-00000.dat"
    path.unlink()
    path.mkdir()
    result = store.verify(1)
    assert not result.ok
    assert result.problem is not None
    assert "is not a regular file" in result.problem


# --- remove, discard, cleanup -----------------------------------------------------------------


def test_remove(store: CheckpointStore) -> None:
    save(store, 1)
    save(store, 2)
    store.remove(1)
    assert store.committed() == [2]
    assert sorted(p.name for p in store.job_dir.iterdir()) == ["ckpt-00000002"]
    with pytest.raises(StoreError, match=r"checkpoint 1 of job 'heat' is not committed"):
        store.remove(1)


def test_background_removal_stops_looking_committed_at_once(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wait=False``: the checkpoint is no longer committed when remove returns (renamed
    before anything else), its files go in a background thread, and join waits for them."""
    save(store, 1)
    save(store, 2)
    release = threading.Event()
    real = store_module._remove_tree

    def slow(path: Path) -> None:
        release.wait(30)
        real(path)

    monkeypatch.setattr(store_module, "_remove_tree", slow)
    store.cleanup(1, wait=False)
    assert store.committed() == [2]
    assert (store.job_dir / ".ckpt-00000001.deleting").is_dir()  # still being removed
    release.set()
    store.join()
    assert sorted(p.name for p in store.job_dir.iterdir()) == ["ckpt-00000002"]


def test_background_removal_makes_the_rename_durable_before_deleting(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wait=False``: the caller does not wait for the job directory's fsync; the background
    thread fsyncs it before it deletes anything, and where that fsync fails it deletes
    nothing (the ``.deleting`` directory stays for the next start)."""
    save(store, 1)
    save(store, 2)
    events: list[tuple[str, str, str]] = []
    real_fsync, real_remove = store_module.fsync_directory, store_module._remove_tree

    def fsync(path: Path) -> None:
        events.append(("fsync", threading.current_thread().name, Path(path).name))
        real_fsync(path)

    def remove(path: Path) -> None:
        events.append(("remove", threading.current_thread().name, Path(path).name))
        real_remove(path)

    monkeypatch.setattr(store_module, "fsync_directory", fsync)
    monkeypatch.setattr(store_module, "_remove_tree", remove)
    store.remove(1, wait=False)
    store.join()
    assert events == [
        ("fsync", "greenckpt-remove", store.job_dir.name),
        ("remove", "greenckpt-remove", ".ckpt-00000001.deleting"),
    ]
    assert store.committed() == [2] and not store.deleting_path(1).exists()

    save(store, 3)
    events.clear()

    def failing(path: Path) -> None:
        events.append(("fsync", threading.current_thread().name, Path(path).name))
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(store_module, "fsync_directory", failing)
    store.remove(2, wait=False)
    store.join()
    assert events == [("fsync", "greenckpt-remove", store.job_dir.name)]
    assert store.committed() == [3]
    assert (store.deleting_path(2) / MANIFEST_NAME).is_file()  # kept whole for discard_partial


def test_crash_during_remove_never_looks_committed(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    save(store, 1)
    save(store, 2)

    def crash(path: Path) -> None:
        raise KeyboardInterrupt  # the process dies after the rename, before deleting files

    monkeypatch.setattr(store_module, "_remove_tree", crash)
    with pytest.raises(KeyboardInterrupt):
        store.remove(1)
    monkeypatch.undo()
    assert store.committed() == [2]
    assert store.deleting_path(1).is_dir()
    assert store.discard_partial() == [store.deleting_path(1)]
    assert sorted(p.name for p in store.job_dir.iterdir()) == ["ckpt-00000002"]


def test_discard_partial_removes_every_leftover(store: CheckpointStore) -> None:
    save(store, 1)
    stage(store, 2)
    stage(store, 3)
    doomed = store.deleting_path(1)
    doomed.mkdir()
    (doomed / "rank-00000.dat").write_bytes(b"x")
    removed = store.discard_partial()
    assert removed == [store.staging_path(2), store.staging_path(3), doomed]
    assert store.committed() == [1]
    assert sorted(p.name for p in store.job_dir.iterdir()) == ["ckpt-00000001"]


def test_discard_partial_without_a_job_directory(store: CheckpointStore) -> None:
    assert store.discard_partial() == []


def test_cleanup_keeps_the_newest(store: CheckpointStore) -> None:
    for i in range(1, 6):
        save(store, i)
    assert store.cleanup(2) == [1, 2, 3]
    assert store.committed() == [4, 5]
    assert store.cleanup(5) == []
    assert store.committed() == [4, 5]


def test_cleanup_never_removes_the_protected_checkpoint(store: CheckpointStore) -> None:
    for i in range(1, 6):
        save(store, i)
    # Checkpoints 2..5 failed verification; 1 is the newest good one and must survive.
    assert store.cleanup(1, protect=[1]) == [2, 3, 4]
    assert store.committed() == [1, 5]
    assert store.verify(1).ok
    assert store.cleanup(1, protect=[42]) == [1]  # an unknown protected id changes nothing else
    assert store.committed() == [5]


@pytest.mark.parametrize("keep", [0, -1, True])
def test_cleanup_keep_at_least_one(store: CheckpointStore, keep: int) -> None:
    save(store, 1)
    with pytest.raises(StoreError, match="keep must be an integer >= 1"):
        store.cleanup(keep)
    assert store.committed() == [1]


# --- check_usable -----------------------------------------------------------------------------


def test_check_usable_passes_and_leaves_nothing(store: CheckpointStore) -> None:
    store.check_usable()
    assert list(store.base.iterdir()) == []
    save(store, 1)
    store.check_usable()
    assert store.committed() == [1]
    assert sorted(p.name for p in store.job_dir.iterdir()) == ["ckpt-00000001"]


def test_check_usable_missing_directory(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "absent", "heat")
    with pytest.raises(StoreError, match="does not exist; create it or give an existing"):
        store.check_usable()


def test_check_usable_file_instead_of_directory(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    store = CheckpointStore(tmp_path / "afile", "heat")
    with pytest.raises(StoreError, match="is not a directory; give a directory path"):
        store.check_usable()


def test_check_usable_job_path_is_a_file(store: CheckpointStore) -> None:
    store.job_dir.write_text("")
    with pytest.raises(StoreError, match="exists and is not a directory"):
        store.check_usable()


@pytest.mark.skipif(
    sys.platform == "win32" or os.geteuid() == 0, reason="root ignores permission bits"
)
def test_check_usable_read_only_directory(store: CheckpointStore) -> None:
    store.base.chmod(0o555)
    try:
        with pytest.raises(StoreError, match="is not writable"):
            store.check_usable()
    finally:
        store.base.chmod(0o755)


def _proc_refuses_files() -> bool:
    try:
        fd, name = tempfile.mkstemp(dir="/proc")
    except OSError:
        return True
    os.close(fd)
    os.unlink(name)
    return False


@pytest.mark.skipif(
    not Path("/proc").is_dir() or not _proc_refuses_files(), reason="needs Linux /proc"
)
def test_check_usable_directory_that_refuses_files_even_for_root() -> None:
    # /proc passes os.access(W_OK) for root, yet no file can be created in it.
    with pytest.raises(StoreError, match=r"^checkpoint directory /proc is not writable \("):
        CheckpointStore("/proc", "heat").check_usable()


def test_check_usable_when_creating_a_file_fails(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> tuple[int, str]:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(StoreError) as info:
        store.check_usable()
    message = str(info.value)
    assert "is not writable (Read-only file system)" in message
    assert "give a directory this process can create files in" in message
    assert "\n" not in message
