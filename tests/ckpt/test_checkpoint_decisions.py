"""What the checkpoint library decides when a checkpoint cannot simply be taken: back-off
agreed by every rank, which level retires or stands in for another, what counts toward
``keep``, the free-space check and its cleanup, a rebuilt version-1 manifest, a bad iteration
(the defects an independent review of issue 18, items 5-8, found).

Each test failed before its fix. The MPI cases run ``mpi_decision_scenarios.py`` under
``mpiexec`` in a process group of their own, killed at a timeout, so that a regression to a
deadlock fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from greenckpt.ckpt import flush as flush_module
from greenckpt.ckpt.api import Checkpointer, CheckpointError
from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.ckpt.config import ConfigError, load_config
from greenckpt.ckpt.inject import flip_bits_in_file
from greenckpt.ckpt.levels import LevelSpec, Storage
from greenckpt.ckpt.levels import level_spec as spec
from greenckpt.ckpt.manifest import (
    FORMAT_VERSION,
    LEGACY_VERSION,
    MANIFEST_DIGEST_KEY,
    MANIFEST_NAME,
    manifest_from_json,
    manifest_to_json,
    read_manifest,
    write_manifest,
)
from greenckpt.ckpt.schedule import Backoff, Schedule
from greenckpt.ckpt.store import CheckpointStore, FreeSpaceUnknownError
from tests.ckpt.test_manifest import valid_doc

ROOT = Path(__file__).resolve().parents[2]
MPI_SCRIPT = Path(__file__).with_name("mpi_decision_scenarios.py")

needs_mpi = pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec: pip install '.[mpi]'")


def run_mpi(scenario: str, ranks: int, root: Path, timeout: float = 120) -> list[dict[str, Any]]:
    """Every rank's JSON of ``scenario``; the test fails (not hangs) past ``timeout``."""
    launcher = find_mpiexec()
    assert launcher is not None
    proc = subprocess.Popen(
        [launcher, "-n", str(ranks), sys.executable, str(MPI_SCRIPT), scenario, str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(
            f"{scenario}: the ranks did not finish within {timeout:g} s (a deadlock?)\n{out}"
        )
    assert proc.returncode == 0, out
    return [json.loads((root / f"rank-{r}.json").read_text()) for r in range(ranks)]


def same_on_every_rank(outs: list[dict[str, Any]]) -> dict[str, Any]:
    first = {k: v for k, v in outs[0].items() if k != "rank"}
    for other in outs[1:]:
        assert {k: v for k, v in other.items() if k != "rank"} == first
    return first


# --- 1. a back-off in seconds is decided by rank 0 for everyone ------------------------------


@needs_mpi
def test_a_backoff_in_seconds_is_decided_alike_on_every_rank(tmp_path: Path) -> None:
    """Before: rank 1, past level 4's deadline on its own clock, took level 4 for the held
    level 1 while rank 0, just before it, took nothing: a hang."""
    for name in ("local", "global"):
        (tmp_path / name).mkdir()
    outs = run_mpi("backoff-seconds", 2, tmp_path, timeout=90)
    assert outs[0]["early"], "rank 0 reached iteration 5 after the deadline: inconclusive"
    seen = same_on_every_rank(outs)
    assert seen["in_seconds"]
    log = {it: (level, outcome) for it, level, outcome in seen["log"]}
    assert log[1] == (1, "failed")  # level 1's first failure: held 1 iteration
    assert log[5] == (None, None)  # rank 0's decision (before the deadline) for both
    # the barrier of iteration 6 waited for rank 1: everyone is past the deadline, and level 4
    # stands in for the held level 1 on every rank
    assert log[6] == (4, "failed")


# --- 2. a rebuilt version-1 manifest stays version 1 -----------------------------------------


@needs_mpi
def test_a_rebuilt_version_1_checkpoint_restores_on_every_later_restart(tmp_path: Path) -> None:
    """Before: the rebuild committed node 0's copy as version 2 (sealed), and the second
    restart, reading it, refused the data (no record of their checkpoint) as "does not match
    the data it describes"."""
    (tmp_path / "local").mkdir()
    seen = same_on_every_rank(run_mpi("v1-rebuild", 4, tmp_path))
    first, second = seen["restarts"]
    assert first == {
        "id": 1,
        "iteration": 10,
        "rebuilt": [0, 1],
        "data_ok": True,
        "v1_warning": True,
    }
    assert second == {**first, "rebuilt": []}
    assert seen["rebuilt_version"] == 1 and not seen["rebuilt_digest"]


def test_only_a_copy_keeps_version_1_a_new_manifest_is_sealed(tmp_path: Path) -> None:
    doc = manifest_from_json(valid_doc())  # a version-1 document
    assert manifest_to_json(doc)["format_version"] == FORMAT_VERSION  # upgraded by default
    kept = manifest_to_json(doc, keep_version=True)
    assert kept["format_version"] == LEGACY_VERSION and MANIFEST_DIGEST_KEY not in kept
    write_manifest(tmp_path / MANIFEST_NAME, doc, keep_version=True)
    assert not read_manifest(tmp_path / MANIFEST_NAME).verified
    current = replace(doc, format_version=FORMAT_VERSION)  # a new one: sealed either way
    assert manifest_to_json(current, keep_version=True)[MANIFEST_DIGEST_KEY]


# --- 3. the free-space check's cleanup keeps a running flush's source ------------------------


def test_the_space_check_keeps_the_source_of_a_running_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a level-1 checkpoint refused for space applied keep = 1 to level 1 first,
    removing checkpoint 1 while the asynchronous flush was still copying it to level 4; the
    flush failed and checkpoint 1 was lost on both levels."""
    for name in ("l", "g"):
        (tmp_path / name).mkdir()
    real_copy = flush_module.copy_file

    def slow_copy(source: Path, target: Path) -> int:
        time.sleep(0.5)  # a slow global file system: the source is opened after this
        return real_copy(source, target)

    monkeypatch.setattr(flush_module, "copy_file", slow_copy)
    tight = False
    real_free = CheckpointStore.free_bytes

    def free_bytes(store: CheckpointStore) -> int:
        return 10_000 if tight and store.base == tmp_path / "l" else real_free(store)

    monkeypatch.setattr(CheckpointStore, "free_bytes", free_bytes)
    ck = Checkpointer(
        env={},
        local_dir=str(tmp_path / "l"),
        global_dir=str(tmp_path / "g"),
        l1={"enabled": True},
        l4={"enabled": True, "async": True},
        keep=1,
    )
    ck.protect("u", np.zeros(100_000))
    assert ck.checkpoint(4, iteration=1).flushing  # 1: on level 1, being flushed
    assert ck.checkpoint(1, iteration=2).id == 2  # keeps 1 (the flush's source)
    tight = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CheckpointError, match="refused before writing anything"):
            ck.checkpoint(1, iteration=3)
    assert ck._stores[1].committed() == [1, 2]
    ck.finalize()  # the flush completes and commits checkpoint 1 on level 4
    assert ck._stores[4].committed() == [1]
    assert [(i.id, i.level, i.flushing) for i in ck.history][-1] == (1, 4, False)


# --- 7. the iteration is checked at the call --------------------------------------------------


def test_a_numpy_iteration_is_taken_as_the_integer_it_is(tmp_path: Path) -> None:
    """Before: ``np.int64`` reached the manifest, which JSON cannot hold: every checkpoint
    wrote its data, failed at the commit and backed off."""
    ck = Checkpointer(env={}, local_dir=str(tmp_path), l1={"every": "5it"})
    u = np.zeros(10)
    ck.protect("u", u)
    for it in np.arange(1, 11):
        u += 1
        ck.state["it"] = int(it)
        if (level := ck.need_checkpoint(it)) is not None:
            info = ck.checkpoint(np.int64(level), iteration=it)
            assert type(info.iteration) is int and type(info.level) is int
    ck.finalize()
    assert [(i.id, i.iteration) for i in ck.history] == [(1, 5), (2, 10)] and not ck.backoff
    again = Checkpointer(env={}, local_dir=str(tmp_path), l1={"every": "5it"})
    v = np.zeros(10)
    again.protect("u", v)
    restored = again.recover()
    assert restored is not None and (restored.id, restored.iteration) == (2, 10)
    assert np.all(v == 10)
    again.finalize()


@pytest.mark.parametrize("bad", [5.0, -1, True, "5", np.float64(5)])
def test_an_iteration_that_is_not_an_integer_is_refused_before_writing(
    tmp_path: Path, bad: object
) -> None:
    ck = Checkpointer(env={}, local_dir=str(tmp_path))
    ck.protect("u", np.zeros(10))
    with pytest.raises(ValueError, match=r"^checkpoint\(\): iteration must be an integer >= 0"):
        ck.checkpoint(iteration=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^need_checkpoint\(\): iteration must be an integer"):
        ck.need_checkpoint(bad)  # type: ignore[arg-type]
    assert not list(tmp_path.glob("greenckpt/*")) and not list(tmp_path.glob("greenckpt/.*"))
    assert not ck.backoff and not ck.history
    assert ck.checkpoint(iteration=3).id == 1  # nothing used up
    ck.finalize()


# --- 6. a way out of the free-space check -----------------------------------------------------


def _statvfs(blocks: int, available: int) -> os.statvfs_result:
    return os.statvfs_result((4096, 4096, blocks, available, available, 0, 0, 0, 0, 255))


def test_a_file_system_of_no_blocks_has_unknown_free_space_not_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: statvfs's f_blocks = 0 and f_bavail = 0 (a FUSE or object store) read as no
    free space, and every checkpoint was refused."""
    monkeypatch.setattr(os, "statvfs", lambda path: _statvfs(0, 0))
    ck = Checkpointer(env={}, local_dir=str(tmp_path))
    ck.protect("u", np.zeros(1000))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ck.checkpoint(iteration=1).id == 1
        assert ck.checkpoint(iteration=2).id == 2
    said = [str(w.message) for w in caught if "reports no size" in str(w.message)]
    assert len(said) == 1 and "f_blocks = 0" in said[0] and "space_check = false" in said[0]
    with pytest.raises(FreeSpaceUnknownError, match="reports no size"):
        CheckpointStore(tmp_path, "greenckpt").free_bytes()
    monkeypatch.setattr(os, "statvfs", lambda path: _statvfs(100, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CheckpointError, match="refused before writing anything"):
            ck.checkpoint(iteration=3)  # a real file system that is full is still refused
    ck.finalize()


def test_space_check_false_skips_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Path] = []

    def free_bytes(store: CheckpointStore) -> int:
        asked.append(store.base)
        return 0

    monkeypatch.setattr(CheckpointStore, "free_bytes", free_bytes)
    ck = Checkpointer(env={}, local_dir=str(tmp_path), space_check=False)
    ck.protect("u", np.zeros(1000))
    assert ck.checkpoint(iteration=1).id == 1 and asked == []
    ck.finalize()
    toml = tmp_path / "ckpt.toml"
    toml.write_text('[checkpoint]\nlocal_dir = "/l"\nspace_check = false\n')
    assert load_config(toml, env={}).space_check is False
    described = load_config(toml, env={"GREENCKPT_SPACE_CHECK": "yes"}).describe()
    assert described["space_check"] == {"value": True, "source": "GREENCKPT_SPACE_CHECK"}
    assert load_config(env={}, local_dir="/l").space_check is True
    with pytest.raises(ConfigError, match=r"^GREENCKPT_SPACE_CHECK: .*a boolean"):
        load_config(env={"GREENCKPT_SPACE_CHECK": "maybe"}, local_dir="/l")


# --- 5. a checkpoint counted toward keep is still there ---------------------------------------


def test_retirement_counts_only_checkpoints_that_are_still_there(tmp_path: Path) -> None:
    """keep = 2, levels 1 and 4. Recovery passes over a corrupt level-4 checkpoint (3) and
    restores checkpoint 2; a new level-4 checkpoint (4) then retires level 1's checkpoint 1,
    counting 2 and 4 as its keep newer ones. Before: level 4's own keep-last-k had removed 2
    (it kept the newest two, 3 and 4), so once 4 was damaged too nothing was left to restore."""
    (tmp_path / "l").mkdir()
    (tmp_path / "g").mkdir()
    local, global_ = tmp_path / "l" / "greenckpt", tmp_path / "g" / "greenckpt"

    def make() -> tuple[Checkpointer, np.ndarray]:
        ck = Checkpointer(
            env={},
            local_dir=str(tmp_path / "l"),
            global_dir=str(tmp_path / "g"),
            l1={"enabled": True},
            l4={"enabled": True},
            keep=2,
        )
        u = np.zeros(1000)
        ck.protect("u", u)
        return ck, u

    def ids(directory: Path) -> list[int]:
        return sorted(int(p.name.split("-")[1]) for p in directory.glob("ckpt-*"))

    def damage(ckpt_id: int) -> None:
        path = global_ / f"ckpt-{ckpt_id:08d}" / "rank-000000.data"
        flip_bits_in_file(path, positions=[77])

    for steps in (((1, 1), (2, 4)), ((3, 4),)):  # two runs: 1 has one newer in each
        ck, u = make()
        for it, level in steps:
            u[:] = it
            ck.checkpoint(level, iteration=it)
        ck.finalize()
    assert ids(local) == [1] and ids(global_) == [2, 3]
    damage(3)
    ck, u = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rec = ck.recover()
    assert rec is not None and rec.id == 2
    u[:] = 4
    ck.checkpoint(4, iteration=4)
    ck.finalize()
    for level, verified in ck._verified.items():
        assert set(verified) <= set(ck._stores[level].committed()), (level, verified)
    assert ids(local) == [] and 2 in ids(global_)
    damage(4)
    ck, u = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rec = ck.recover()
    assert rec is not None and (rec.id, rec.iteration) == (2, 2) and np.all(u == 2)
    ck.finalize()


# --- 4. a level retires or stands in for another only if it survives what that one does -------


def test_what_each_built_in_level_survives_orders_them_only_partly() -> None:
    covers = {(a, b) for a in range(1, 5) for b in range(1, 5) if spec(a).covers(spec(b))}
    assert covers == {(a, a) for a in range(1, 5)} | {(2, 1), (3, 1), (4, 1), (4, 2), (4, 3)}
    # a level registered without saying, by its storage
    assert LevelSpec(5, "x", Storage.GLOBAL, "every node").covers(spec(4))
    assert not LevelSpec(5, "x", Storage.NODE_LOCAL, "a process").covers(spec(2))


@needs_mpi
def test_level_3_does_not_retire_level_2(tmp_path: Path) -> None:
    """Before: the level-3 checkpoint retired the level-2 one (keep = 1) and, with two nodes
    of the erasure group lost, recovery had nothing left."""
    (tmp_path / "local").mkdir()
    seen = same_on_every_rank(run_mpi("l3-not-l2", 4, tmp_path))
    assert seen["level2_before_loss"] == ["ckpt-00000001"]
    assert "error" not in seen, seen["error"]
    assert (seen["id"], seen["level"], seen["iteration"], seen["data_ok"]) == (1, 2, 1, True)


def _fallback_for(number: int, held: set[int], enabled: tuple[int, ...]) -> int | None:
    """``Schedule.fallback`` for a job with ``enabled`` levels, of which ``held`` are held
    back after a failure at iteration 10 (the rule alone: levels 2 and 3 need several nodes)."""
    settings: dict[str, Any] = {f"l{n}": {"enabled": True} for n in enabled}
    config = load_config(env={}, local_dir="/l", global_dir="/g", **settings)
    schedule = Schedule(config, enabled, spec, rank=0)
    for n in held:
        schedule.backoff[n] = Backoff.after(None, n, "failed", 10, 0.0, (None, 60.0))
    return schedule.fallback(number, 10, 0.0)


def test_a_held_back_level_goes_to_one_that_survives_what_it_survives() -> None:
    """Before: level 2 held back went to level 3 (the next higher number), which does not
    survive what partner copies survive, though level 4 could be written."""
    assert _fallback_for(2, {2}, (1, 2, 3, 4)) == 4
    assert _fallback_for(1, {1}, (1, 2, 3, 4)) == 2
    assert _fallback_for(3, {3}, (1, 2, 3, 4)) == 4
    # no level survives all of it: the one that survives the most of it
    assert _fallback_for(2, {2, 4}, (1, 2, 3, 4)) == 3
    assert _fallback_for(4, {4}, (1, 2, 3, 4)) == 3
    assert _fallback_for(4, {4, 3}, (1, 2, 3, 4)) == 2
    assert _fallback_for(4, {4}, (1, 4)) == 1
    assert _fallback_for(4, {1, 4}, (1, 4)) is None
