"""A fifth level under ``mpiexec -n 4`` (two emulated nodes of two ranks): registered by every
rank from test code, checkpointed on its schedule and recovered bit-identical, with its own
redundancy rebuilding a lost rank file (see ``mpi_fifth_level.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.ckpt.test_mpi import ROOT, mpiexec

SCRIPT = Path(__file__).with_name("mpi_fifth_level.py")

pytestmark = pytest.mark.skipif(
    mpiexec() is None, reason="no mpiexec: pip install '.[mpi]' (mpi4py + the mpich wheel)"
)


def run(tmp_path: Path, mode: str) -> dict[str, Any]:
    (tmp_path / "local").mkdir()
    (tmp_path / "global").mkdir()
    launcher = mpiexec()
    assert launcher is not None
    proc = subprocess.run(
        [launcher, "-n", "4", sys.executable, str(SCRIPT), str(tmp_path), mode],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_a_fifth_level_with_its_own_redundancy_rebuilds_a_lost_rank_file(tmp_path: Path) -> None:
    out = run(tmp_path, "mirrored")
    # level 5 every 3 iterations: checkpoints 1 (it 3) and 2 (it 6); rank 2's file of
    # checkpoint 2 deleted and rebuilt from its mirror, on rank 2 only
    assert out == {"recovered": [2, 5, 6], "rebuilt": [2], "identical": [True] * 4}


def test_a_fifth_global_level_survives_the_loss_of_every_node(tmp_path: Path) -> None:
    out = run(tmp_path, "archive")
    # levels 1 (every 2) and 5 (every 3): the newest level-5 checkpoint is iteration 6; with
    # node-local storage gone it is what recovery restores, on every rank
    assert out["recovered"][1:] == [5, 6]
    assert out["rebuilt"] == [] and out["identical"] == [True] * 4
