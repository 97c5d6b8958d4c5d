"""Issue 18 item 7: space. Free space is checked before writing, and newer checkpoints at a
higher level retire older lower-level ones.

The space cases run on a real 4 MiB tmpfs (root can mount one here; skipped elsewhere), with
checkpoints of 1.5 MiB: with keep = 2 a level needs room for keep + 1 = 3 of them (4.5 MiB)
while a new one is written, so the third checkpoint cannot fit.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from greenckpt.ckpt.api import Checkpointer, CheckpointError
from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.ckpt.inject import flip_bits_in_file
from greenckpt.ckpt.store import CheckpointStore

MIB = 1 << 20


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, unmounted afterwards."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=False)


def make(local: Path, global_: Path | None = None, **kw: object) -> tuple[Checkpointer, np.ndarray]:
    settings: dict[str, object] = {"local_dir": str(local), "keep": 2}
    if global_ is not None:
        global_.mkdir(exist_ok=True)
        settings["global_dir"] = str(global_)
    settings.update(kw)
    ck = Checkpointer(**settings)  # type: ignore[arg-type]
    u = np.zeros(3 * MIB // 16)  # 1.5 MiB
    ck.protect("u", u)
    return ck, u


def ids(directory: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in directory.glob("ckpt-*"))


def test_a_checkpoint_that_cannot_fit_is_refused_before_writing(small_fs: Path) -> None:
    ck, u = make(small_fs)
    for it in (1, 2):
        u[:] = it
        ck.checkpoint(iteration=it)
    u[:] = 3
    with pytest.raises(CheckpointError) as failure:
        ck.checkpoint(iteration=3)
    message = str(failure.value)
    assert "checkpoint at level 1 (node-local) refused before writing anything" in message
    assert f"{small_fs / 'greenckpt'} on node 0 needs " in message
    need = int(message.split(" needs ")[1].split(" B ", maxsplit=1)[0])
    free = int(message.split(" and ")[1].split(" B ", maxsplit=1)[0])
    assert 1.5 * MIB < need < 1.6 * MIB and free < need
    assert re.search(r"the 2 checkpoints kept there hold 31\d{5} B \(3\.0 MiB\)", message)
    assert "keep + 1 = 3 checkpoints" in message
    # nothing was written: no staging left, the kept checkpoints intact, the id not used up
    assert not list((small_fs / "greenckpt").glob(".*"))
    assert ids(small_fs / "greenckpt") == [1, 2]
    ck.finalize()
    ck2, u2 = make(small_fs, keep=1)
    rec = ck2.recover()
    assert rec is not None and rec.id == 2 and np.all(u2 == 2)
    assert ck2.checkpoint(iteration=3).id == 3  # with keep = 1, two checkpoints fit
    ck2.finalize()
    assert ids(small_fs / "greenckpt") == [3]


def test_an_async_level_4_checkpoint_needs_room_on_both_file_systems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written to level 1 first, then copied: a global file system without the room refuses
    it before level 1 is written."""
    (tmp_path / "l").mkdir()
    ck, _ = make(tmp_path / "l", tmp_path / "g", l4={"enabled": True, "async": True})
    real = CheckpointStore.free_bytes

    def free_bytes(store: CheckpointStore) -> int:
        return 1 * MIB if store.base == tmp_path / "g" else real(store)

    monkeypatch.setattr(CheckpointStore, "free_bytes", free_bytes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CheckpointError, match=r"level 4 \(global file system\) refused"):
            ck.checkpoint(4, iteration=1)
    assert ids(tmp_path / "l" / "greenckpt") == []
    assert ck.backoff[4].failures == 1
    monkeypatch.undo()
    assert ck.checkpoint(4, iteration=2).flushing
    ck.finalize()
    assert ids(tmp_path / "g" / "greenckpt") == [1]


def test_newer_higher_level_checkpoints_retire_older_lower_level_ones(tmp_path: Path) -> None:
    """keep-last-k counted across levels: a level-1 checkpoint goes once keep = 2 newer ones
    exist at level 1 or above; the newest restorable ones always stay."""
    (tmp_path / "l").mkdir()
    ck, u = make(tmp_path / "l", tmp_path / "g", l1={"enabled": True}, l4={"enabled": True})
    local, global_ = tmp_path / "l" / "greenckpt", tmp_path / "g" / "greenckpt"
    for it, level in ((1, 1), (2, 1)):
        u[:] = it
        ck.checkpoint(level, iteration=it)
    u[:] = 3
    ck.checkpoint(4, iteration=3)
    ck.finalize()  # waits for the removals in the background
    assert ids(local) == [2]  # 1 has two newer (2 at level 1, 3 at level 4); 2 has one
    ck, u = make(tmp_path / "l", tmp_path / "g", l1={"enabled": True}, l4={"enabled": True})
    assert ck.recover() is not None and np.all(u == 3)
    u[:] = 4
    ck.checkpoint(4, iteration=4)
    ck.finalize()
    assert ids(local) == [] and ids(global_) == [3, 4]


def test_a_full_level_1_gets_its_space_back_from_retirement(small_fs: Path, tmp_path: Path) -> None:
    """The run of the issue: two level-1 checkpoints fill the small disk, level 4 then takes
    the checkpoints; once two newer level-4 ones are committed, the old level-1 ones are
    retired and level 1 can be written again (before: ENOSPC for the rest of the run)."""
    kw = {"l1": {"enabled": True}, "l4": {"enabled": True}}
    ck, u = make(small_fs, tmp_path / "g", **kw)
    for it, level in ((1, 1), (2, 1), (3, 4), (4, 4)):
        u[:] = it
        ck.checkpoint(level, iteration=it)
    ck.finalize()
    ck, u = make(small_fs, tmp_path / "g", **kw)
    assert ck.recover() is not None and np.all(u == 4)
    for it in (5, 6):
        u[:] = it
        assert ck.checkpoint(1, iteration=it).level == 1
    ck.finalize()
    assert ids(small_fs / "greenckpt") == [5, 6]


def test_checkpoints_not_verified_by_this_run_do_not_retire_anything(tmp_path: Path) -> None:
    """A newer checkpoint that failed to restore is no reason to drop an older one: after
    recovery passed over a corrupt level-4 checkpoint and restored level 1, one new level-4
    checkpoint is one verified newer checkpoint, not two, so the level-1 one stays."""
    (tmp_path / "l").mkdir()
    kw = {"l1": {"enabled": True}, "l4": {"enabled": True}}
    ck, u = make(tmp_path / "l", tmp_path / "g", **kw)
    for it, level in ((1, 4), (2, 1), (3, 4)):
        u[:] = it
        ck.checkpoint(level, iteration=it)
    ck.finalize()
    local = tmp_path / "l" / "greenckpt"
    assert ids(local) == [2]
    flip_bits_in_file(
        tmp_path / "g" / "greenckpt" / "ckpt-00000003" / "rank-000000.data", positions=[77]
    )
    ck, u = make(tmp_path / "l", tmp_path / "g", **kw)
    rec = ck.recover()
    assert rec is not None and (rec.id, rec.level) == (2, 1)
    u[:] = 4
    ck.checkpoint(4, iteration=4)
    ck.finalize()
    assert ids(local) == [2]


def test_under_mpi_a_node_short_of_space_fails_the_level_on_every_rank_alike(
    tmp_path: Path,
) -> None:
    """4 ranks on 2 emulated nodes, node 1's level-1 directory full: every rank sees the same
    refusal (naming node 1), the same back-off and the same fall-through to level 4."""
    launcher = find_mpiexec()
    if launcher is None:
        pytest.skip("no mpiexec: pip install '.[mpi]'")
    (tmp_path / "local").mkdir()
    (tmp_path / "global").mkdir()
    script = Path(__file__).with_name("mpi_policy_scenarios.py")
    proc = subprocess.run(
        [launcher, "-n", "4", sys.executable, str(script), "short-node", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outs = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(4)]
    assert sorted(o["rank"] for o in outs) == [0, 1, 2, 3]
    first = outs[0]
    assert first["failed"] == [2, 4, 8]
    assert first["done"] == [[i, 4] for i in (3, 5, 6, 9, 10)]
    assert first["backoff"] == {"1": [3, 8, 8]}
    assert "refused before writing anything" in first["errors"][0]
    assert "on node 1 needs " in first["errors"][0]
    assert first["staged"] == []
    for other in outs[1:]:
        assert {k: v for k, v in other.items() if k != "rank"} == {
            k: v for k, v in first.items() if k != "rank"
        }
