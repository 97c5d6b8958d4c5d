"""The checkpoint library under ``mpiexec -n 4`` (MPICH from the PyPI wheel), 2 emulated nodes.

Each case runs ``mpi_scenarios.py`` in a fresh directory and states its expected outcome:
which checkpoint and level the recovery must restore, and that every rank's data are
bit-identical to what it had at that iteration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from greenckpt.ckpt.comm import find_mpiexec

SCRIPT = Path(__file__).with_name("mpi_scenarios.py")
ROOT = Path(__file__).resolve().parents[2]


def mpiexec() -> str | None:
    """The launcher next to this Python (a venv with the mpich wheel), else on PATH."""
    return find_mpiexec()


pytestmark = pytest.mark.skipif(
    mpiexec() is None, reason="no mpiexec: pip install '.[mpi]' (mpi4py + the mpich wheel)"
)


def run(scenario: str, tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "local").mkdir()
    (tmp_path / "global").mkdir()
    launcher = mpiexec()
    assert launcher is not None
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [launcher, "-n", "4", sys.executable, str(SCRIPT), scenario, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize(
    ("scenario", "ckpt_id", "level", "skipped"),
    [
        # nothing lost: the newest checkpoint (node-local, iteration 5)
        ("plain", 5, 1, None),
        # node 1's local storage erased: its L1 copies are gone → the newest global one
        ("lose-node", 4, 4, None),
        # one byte of rank 3's newest file flipped: detected by digest → the newest global one
        ("corrupt-newest", 4, 4, "rank 3: "),
        # rank 2 hits ENOSPC in a 6th checkpoint: nothing committed, the 5th restores
        ("fail-write", 5, 1, None),
        # level 4 flushed in the background: the same outcomes once the flushes committed
        ("async-plain", 5, 1, None),
        ("async-lose-node", 4, 4, None),
    ],
)
def test_scenario(
    scenario: str, ckpt_id: int, level: int, skipped: str | None, tmp_path: Path
) -> None:
    out = run(scenario, tmp_path)
    assert out["levels"] == [1, 4, 1, 4, 1]  # L4 due on even iterations, L1 on the others
    assert (out["id"], out["level"], out["iteration"]) == (ckpt_id, level, ckpt_id)
    assert out["all_ok"] is True  # every rank's array equals its state at that iteration
    if skipped is not None:
        assert any(skipped in s and "digest does not match" in s for s in out["skipped"])
    if scenario == "fail-write":
        assert "failed on rank 2: OSError: [Errno 28] No space left on device" in out["error"]
        assert "previous checkpoints are intact" in out["error"]
        assert out["staging_left"] == []  # the failed checkpoint left nothing behind


def test_checkpoints_on_some_nodes_only_are_the_same_error_everywhere(tmp_path: Path) -> None:
    """Node 1's local storage and the global copies are lost: node 0 still lists its
    level-1 checkpoints, node 1 lists none. Every rank must raise the same RecoveryError
    (not node 1 starting afresh while node 0 raises), naming why."""
    out = run("lose-node-and-global", tmp_path)
    assert out["verdicts"] == ["raised"] * 4
    assert out["recovery_error"].startswith("no checkpoint could be restored: checkpoint 5: ")
    assert "not held by every node" in out["recovery_error"]


def test_nodes_holding_different_runs_checkpoint_are_not_mixed(tmp_path: Path) -> None:
    """Node 1's newest local checkpoint has the right id but comes from another run (its
    manifest differs): restoring it would mix two runs, so the newest global one serves."""
    out = run("foreign-manifest", tmp_path)
    assert (out["id"], out["level"], out["all_ok"]) == (4, 4, True)
    assert any("different manifests" in s for s in out["skipped"]), out["skipped"]
