"""Issue 18 item 5: manifests cannot lie.

A manifest carries a digest of its own content, and recovery checks its job, id and level
against the directory holding it and its job, id and iteration against the rank data it
restores. Each case edits a committed manifest the way a hand edit or bit rot would and states
what recovery must do: skip that checkpoint with a message naming the manifest (never the data
file), and restore the previous one.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from greenckpt.ckpt.api import Checkpointer, RecoveryError
from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.ckpt.manifest import (
    FORMAT_VERSION,
    LEGACY_VERSION,
    MANIFEST_DIGEST_KEY,
    MANIFEST_NAME,
    ManifestError,
    manifest_digest,
    manifest_from_json,
    manifest_to_json,
    read_manifest,
)
from greenckpt.ckpt.protect import Identity, IdentityMismatchError, Protected, unpack_state
from greenckpt.ckpt.store import CheckpointStore
from tests.ckpt.test_manifest import BAD, _set, valid_doc

ROOT = Path(__file__).resolve().parents[2]

Doc = dict[str, Any]


def sealed(doc: Doc) -> Doc:
    """``doc`` as version 2 with a correct digest of its own (what a tool that edits a manifest
    on purpose would write)."""
    out = {k: v for k, v in doc.items() if k != MANIFEST_DIGEST_KEY}
    out["format_version"] = FORMAT_VERSION
    out[MANIFEST_DIGEST_KEY] = manifest_digest(out)
    return out


# --- the manifest's own digest -----------------------------------------------------------------


def test_written_manifests_carry_a_digest_that_reads_back(tmp_path: Path) -> None:
    doc = manifest_to_json(manifest_from_json(valid_doc()))
    assert doc["format_version"] == 2
    assert doc[MANIFEST_DIGEST_KEY] == manifest_digest(doc)
    back = manifest_from_json(copy.deepcopy(doc))
    assert back.verified and back.format_version == 2


def test_the_digest_ignores_layout_but_not_values(tmp_path: Path) -> None:
    """Re-indenting or reordering keys is no edit; changing any value is."""
    doc = manifest_to_json(manifest_from_json(valid_doc()))
    path = tmp_path / MANIFEST_NAME
    reordered = dict(reversed(list(doc.items())))
    path.write_text(json.dumps(reordered, indent=4))
    assert read_manifest(path).iteration == 1200
    path.write_text(json.dumps({**doc, "iteration": 1201}))
    with pytest.raises(ManifestError, match=r"manifest\.manifest_digest: .*does not match"):
        read_manifest(path)


EDITS: list[tuple[str, Callable[[Doc], None]]] = [
    ("iteration", lambda d: d.update(iteration=d["iteration"] + 1)),
    ("level", lambda d: d.update(level=1)),
    ("name", lambda d: d.update(name="other")),
    ("id", lambda d: d.update(id=13)),
    ("created", lambda d: d.update(created="2024-05-01T12:00:01.000Z")),
    ("rank digest", lambda d: d["ranks"][1].update(digest="0" * 16)),
    ("variable digest", lambda d: d["ranks"][0]["variables"][0].update(digest="0" * 16)),
    ("redundancy", lambda d: d["redundancy"].update(partners=[])),
    ("an added key", lambda d: d.update(note="x")),
    ("the digest itself", lambda d: d.update({MANIFEST_DIGEST_KEY: "0" * 16})),
]


@pytest.mark.parametrize(("what", "edit"), EDITS, ids=[w for w, _ in EDITS])
def test_any_edit_breaks_the_digest(what: str, edit: Callable[[Doc], None]) -> None:
    doc = manifest_to_json(manifest_from_json(valid_doc()))
    edit(doc)
    with pytest.raises(ManifestError) as info:
        manifest_from_json(doc)
    assert str(info.value).startswith("manifest.manifest_digest: "), str(info.value)
    assert "edited or damaged" in str(info.value)


def test_a_version_2_manifest_without_a_digest_is_refused() -> None:
    doc = sealed(valid_doc())
    del doc[MANIFEST_DIGEST_KEY]
    with pytest.raises(ManifestError, match=r"^manifest\.manifest_digest: expected 16 .*missing"):
        manifest_from_json(doc)


def test_a_version_1_manifest_is_read_but_marked_unverified() -> None:
    manifest = manifest_from_json(valid_doc())
    assert manifest.format_version == LEGACY_VERSION
    assert not manifest.verified


@pytest.mark.parametrize(
    ("where", "value", "json_path", "valid"),
    BAD,
    ids=[f"{'.'.join(map(str, w))}={v!r}" for w, v, _, _ in BAD],
)
def test_field_rules_apply_to_sealed_version_2_documents(
    where: tuple[Any, ...], value: Any, json_path: str, valid: str
) -> None:
    """A sealed manifest (its digest recomputed after the edit) still gets every field rule."""
    doc = valid_doc()
    _set(doc, where, value)
    if where in (("format",), ("checksum",)):
        doc["format_version"] = FORMAT_VERSION  # refused before any digest is computed
    else:
        doc = sealed(doc)
    with pytest.raises(ManifestError) as info:
        manifest_from_json(doc)
    assert str(info.value).startswith(json_path + ":"), str(info.value)
    assert valid in str(info.value)


# --- the state records its checkpoint ----------------------------------------------------------


def test_the_state_blob_records_the_checkpoint_and_is_checked() -> None:
    protected = Protected()
    protected.state["it"] = 110
    protected.identity = Identity("heat", 3, 110)
    raw = bytes(protected.slots(for_write=True)[-1].view)
    assert unpack_state(raw) == (Identity("heat", 3, 110), {"it": 110})
    other = Protected()
    with pytest.raises(
        IdentityMismatchError,
        match="describes checkpoint 3 of job 'heat' at "
        "iteration 111, the data hold checkpoint 3 of job 'heat' at iteration 110",
    ):
        other.load_state(raw, Identity("heat", 3, 111))
    assert other.state == {}  # left as it was
    other.load_state(raw, Identity("heat", 3, 110))
    assert other.state == {"it": 110}


def test_a_state_written_before_records_existed_still_loads() -> None:
    raw = pickle.dumps({"it": 7})
    assert unpack_state(raw) == (None, {"it": 7})
    with pytest.raises(IdentityMismatchError, match="no record of its checkpoint"):
        Protected().load_state(raw, Identity("heat", 1, 7))


# --- recovery ---------------------------------------------------------------------------------


def run_two_checkpoints(tmp_path: Path, **kw: Any) -> None:
    """Checkpoints 1 (iteration 100) and 2 (iteration 110) of job 'greenckpt', level 1."""
    ck = Checkpointer(local_dir=str(tmp_path), keep=3, **kw)
    u = np.zeros(1000)
    ck.protect("u", u)
    for it in (100, 110):
        u[:] = it
        ck.state["it"] = it
        ck.checkpoint(iteration=it)
    ck.finalize()


def manifest_path(tmp_path: Path, ckpt_id: int) -> Path:
    return tmp_path / "greenckpt" / f"ckpt-{ckpt_id:08d}" / MANIFEST_NAME


def edit_manifest(tmp_path: Path, ckpt_id: int, edit: Callable[[Doc], None], *, seal: bool) -> Path:
    path = manifest_path(tmp_path, ckpt_id)
    doc = json.loads(path.read_text())
    edit(doc)
    if seal:
        doc = sealed(doc)
    path.write_text(json.dumps(doc, indent=1))
    return path


def recover(tmp_path: Path, **kw: Any) -> tuple[Any, np.ndarray, Checkpointer]:
    ck = Checkpointer(local_dir=str(tmp_path), keep=3, **kw)
    u = np.zeros(1000)
    ck.protect("u", u)
    info = ck.recover()
    return info, u, ck


RECOVERY_EDITS: list[tuple[str, Callable[[Doc], None], bool]] = [
    # hand edits and bit rot: the manifest's own digest fails
    ("iteration", lambda d: d.update(iteration=111), False),
    ("level", lambda d: d.update(level=4), False),
    ("name", lambda d: d.update(name="other"), False),
    ("variable digest", lambda d: d["ranks"][0]["variables"][0].update(digest="0" * 16), False),
    ("rank digest", lambda d: d["ranks"][0].update(digest="0" * 16), False),
    # the same edits with the digest recomputed: the cross-checks fail (iteration: the data's
    # record; level and name: the directory; rank digest: the file, whose variables match).
    # A recomputed variable digest alone changes nothing restored without a codec (the file's
    # digest covers those bytes), so it is not among them.
    ("iteration", lambda d: d.update(iteration=111), True),
    ("level", lambda d: d.update(level=4), True),
    ("name", lambda d: d.update(name="other"), True),
    ("rank digest", lambda d: d["ranks"][0].update(digest="0" * 16), True),
]


@pytest.mark.parametrize(
    ("what", "edit", "seal"),
    RECOVERY_EDITS,
    ids=[f"{w}-{'recomputed' if s else 'hand-edit'}" for w, _, s in RECOVERY_EDITS],
)
def test_an_edited_manifest_is_skipped_and_named(
    tmp_path: Path, what: str, edit: Callable[[Doc], None], seal: bool
) -> None:
    """The previous checkpoint (iteration 100) is restored, and the reason names the
    manifest, never the (sound) data file."""
    run_two_checkpoints(tmp_path)
    path = edit_manifest(tmp_path, 2, edit, seal=seal)
    info, u, ck = recover(tmp_path)
    assert info is not None
    assert (info.id, info.iteration, ck.state) == (1, 100, {"it": 100})
    assert np.all(u == 100)
    (reason,) = info.skipped
    assert reason.startswith("checkpoint 2 (level 1): rank 0: "), reason
    assert str(path) in reason, reason
    assert "is corrupt" not in reason, reason
    if not seal:
        assert "does not match its own digest" in reason, reason


def test_iteration_edited_on_every_node_with_the_digest_recomputed_is_caught(
    tmp_path: Path,
) -> None:
    """The case of the issue: iteration 110 -> 111. RecoveryInfo.iteration must never report
    an iteration the restored data do not belong to."""
    run_two_checkpoints(tmp_path)
    path = edit_manifest(tmp_path, 2, lambda d: d.update(iteration=111), seal=True)
    info, _, _ = recover(tmp_path)
    assert info is not None and info.iteration == 100
    assert f"{path} does not match the data it describes" in info.skipped[0]
    assert (
        "at iteration 111, the data hold checkpoint 2 of job 'greenckpt' at iteration 110"
        in (info.skipped[0])
    )


def test_only_checkpoint_edited_is_a_recovery_error_naming_the_manifest(tmp_path: Path) -> None:
    ck = Checkpointer(local_dir=str(tmp_path))
    u = np.zeros(10)
    ck.protect("u", u)
    ck.checkpoint(iteration=110)
    ck.finalize()
    path = edit_manifest(tmp_path, 1, lambda d: d.update(iteration=111), seal=False)
    with pytest.raises(RecoveryError) as info:
        recover(tmp_path)
    assert str(path) in str(info.value)
    assert "does not match its own digest" in str(info.value)


def test_a_legacy_manifest_restores_with_a_warning(tmp_path: Path) -> None:
    """Version 1 (no digest of its own) is accepted, not refused: its data are still verified
    by their digests, and a warning says its other fields are not."""
    run_two_checkpoints(tmp_path)

    def downgrade(d: Doc) -> None:
        d["format_version"] = LEGACY_VERSION
        del d[MANIFEST_DIGEST_KEY]

    edit_manifest(tmp_path, 2, downgrade, seal=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info, u, _ = recover(tmp_path)
    assert info is not None and (info.id, info.iteration) == (2, 110)
    assert np.all(u == 110)
    legacy = [w for w in caught if "format-version-1 manifest" in str(w.message)]
    assert legacy
    # the warning points at the caller's ck.recover() line (in recover() above), so -W
    # filters by module and the once-per-location bookkeeping work
    assert (Path(legacy[0].filename).name, legacy[0].lineno) == (
        Path(__file__).name,
        recover.__code__.co_firstlineno + 4,
    )


def test_store_verify_checks_the_level_of_its_directory(tmp_path: Path) -> None:
    run_two_checkpoints(tmp_path)
    store = CheckpointStore(tmp_path, "greenckpt")
    assert store.verify(2, level=1).ok
    edit_manifest(tmp_path, 2, lambda d: d.update(level=4), seal=True)
    assert store.verify(2).ok  # without a level, nothing to compare with
    result = store.verify(2, level=1)
    assert not result.ok and result.problem is not None
    assert "describes a level-4 checkpoint, but it is in the level-1 directory" in result.problem
    with pytest.raises(ManifestError, match="level-1 directory"):
        store.read(2, level=1)


# --- under MPI: the same edit on every node -------------------------------------------------

MPI_SCRIPT = Path(__file__).with_name("mpi_integrity_scenarios.py")


@pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec: pip install '.[mpi]'")
@pytest.mark.parametrize(
    ("scenario", "why"),
    [
        ("iteration", "does not match its own digest"),
        ("iteration-sealed", "does not match the data it describes"),
        ("level-one-node", "does not match its own digest"),
        ("name-sealed", "describes checkpoint 2 of job 'other'"),
    ],
)
def test_a_manifest_edited_on_every_node_is_skipped(
    scenario: str, why: str, tmp_path: Path
) -> None:
    """Two nodes hold the same edited manifest, so comparing the nodes' copies cannot tell;
    the digest and the cross-checks do: checkpoint 1 (iteration 100) is restored on every
    rank, with the reason naming a manifest."""
    (tmp_path / "local").mkdir()
    launcher = find_mpiexec()
    assert launcher is not None
    proc = subprocess.run(
        [launcher, "-n", "4", sys.executable, str(MPI_SCRIPT), scenario, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "error" not in out, out
    assert (out["id"], out["iteration"], out["all_ok"]) == (1, 100, True), out
    (reason,) = out["skipped"]
    assert reason.startswith("checkpoint 2 (level 1): rank "), reason
    assert "manifest.json" in reason and why in reason, reason
