"""Levels 2 and 3 under ``mpiexec -n 4``: the failure matrix (damage × level × which nodes).

Every case states its expected outcome: the checkpoint and level recovery restores, which ranks
had their files rebuilt from partner copies or parity, and — for a second damage after the
first recovery — that the rebuild restored the redundancy too. In every recovered case every
rank's data are bit-identical to its state at the restored iteration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.ckpt.test_mpi import ROOT, mpiexec

SCRIPT = Path(__file__).with_name("mpi_redundancy.py")

pytestmark = pytest.mark.skipif(
    mpiexec() is None, reason="no mpiexec: pip install '.[mpi]' (mpi4py + the mpich wheel)"
)


def run(tmp_path: Path, *args: str, mixed: bool = False, scale: int = 1) -> dict[str, Any]:
    (tmp_path / "local").mkdir()
    (tmp_path / "global").mkdir()
    launcher = mpiexec()
    assert launcher is not None
    proc = subprocess.run(
        [launcher, "-n", "4", sys.executable, str(SCRIPT), str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "MIXED": "1" if mixed else "0",
            "SCALE": str(scale),
        },
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


# (level, ranks per node, parity, codec, damage, second damage,
#  expected first (id, level, rebuilt ranks), expected second (id, level, rebuilt ranks) or None,
#  text expected in the first recovery's skipped reasons or None)
CASES = [
    # --- level 1 (no redundancy), 2 nodes: a lost or corrupt file sends recovery to level 4
    ("1", "2", "1", "none", "erase:1", None, (2, 4, []), None, "not held by every node"),
    ("1", "2", "1", "none", "corrupt:2", None, (2, 4, []), None, "digest does not match"),
    # ... and when the level-4 copy is corrupt too, nothing is left: a clear error
    ("1", "2", "1", "none", "erase:1+corrupt-global:1", None, "error", None, None),
    # --- level 2, 2 nodes (ranks 0,1 | 2,3); partners: 0<->2, 1<->3
    ("2", "2", "1", "none", "none", None, (3, 2, []), None, None),
    # node 1 replaced (empty): its files come back from node 0's copies, and node 0's copies
    # are re-made on node 1 — so losing node 0 next is survivable too
    ("2", "2", "1", "lz4", "erase:1", "erase:0", (3, 2, [2, 3]), (3, 2, [0, 1]), None),
    ("2", "2", "1", "none", "corrupt:3", None, (3, 2, [3]), None, None),
    # the file and its copy both bad: nothing to rebuild from → the newest global checkpoint
    ("2", "2", "1", "none", "corrupt-copy:3", None, (2, 4, []), None, "rebuilding failed"),
    # both nodes lost
    ("2", "2", "1", "none", "erase:0,1", None, (2, 4, []), None, None),
    # --- level 3, 4 nodes of 1 rank, one group of 4, XOR (tolerates 1)
    ("3", "1", "1", "none", "erase:2", "erase:0", (3, 3, [2]), (3, 3, [0]), None),
    ("3", "1", "1", "zstd", "corrupt:1", None, (3, 3, [1]), None, None),
    ("3", "1", "1", "none", "erase:1,2", None, (2, 4, []), None, "tolerates 1"),
    # a lost member and a survivor's damaged parity: a stripe lacks two pieces → level 4
    ("3", "1", "1", "none", "erase:2+corrupt-parity:0", None, (2, 4, []), None, "stripe"),
    # two members' files of checkpoint 3 corrupt (XOR tolerates 1) and the level-4 checkpoint
    # 2 corrupt: the older level-3 checkpoint 1 is restored
    ("3", "1", "1", "none", "corrupt:1+corrupt:2+corrupt-global:0", None, (1, 3, []), None, None),
    # --- level 3, Reed–Solomon with 2 parity pieces (tolerates 2)
    ("3", "1", "2", "lz4", "erase:1,3", "erase:0,2", (3, 3, [1, 3]), (3, 3, [0, 2]), None),
    # --- level 3, 2 nodes of 2 ranks: groups {0,2} and {1,3}, each a mirror-like XOR pair
    ("3", "2", "1", "none", "erase:0", None, (3, 3, [0, 1]), None, None),
]


def _ids(case: tuple[Any, ...]) -> str:
    level, rpn, parity, codec, first, second = case[:6]
    return f"L{level}-rpn{rpn}-p{parity}-{codec}-{first}-{second or 'once'}"


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_failure_matrix(case: tuple[Any, ...], tmp_path: Path) -> None:
    level, rpn, parity, codec, first, second, want1, want2, reason = case
    args = [level, rpn, parity, codec, first] + ([second] if second else [])
    out = run(tmp_path, *args)
    assert out["levels"] == [int(level), 4, int(level)]
    got = out["first"]
    if want1 == "error":
        assert got["error"].startswith("no checkpoint could be restored: "), got
        assert "digest does not match" in got["error"], got
        assert out["leftovers"] == []
        return
    assert "error" not in got, got
    assert (got["id"], got["level"], got["rebuilt"]) == want1, got
    assert got["all_ok"] is True
    if reason is not None:
        assert any(reason in s for s in got["skipped"]), got["skipped"]
    if want2 is not None:
        again = out["second"]
        assert (again["id"], again["level"], again["rebuilt"]) == want2, again
        assert again["all_ok"] is True
    assert out["leftovers"] == []  # no staging, no half-rebuilt hidden files


# files of several exchange segments (4 MiB each for groups of 4), of different lengths per
# rank: the last segment of every piece is short, and pieces of a stripe differ in length
SEGMENTED = [
    ("2", "1", "1", "none", "erase:1", "erase:2", (3, 2, [1]), (3, 2, [2])),
    ("3", "1", "1", "none", "erase:2", "erase:0", (3, 3, [2]), (3, 3, [0])),
    ("3", "1", "2", "none", "erase:1,3", "erase:0,2", (3, 3, [1, 3]), (3, 3, [0, 2])),
]


@pytest.mark.parametrize("case", SEGMENTED, ids=[_ids(c) for c in SEGMENTED])
def test_rebuild_of_files_spanning_several_segments(case: tuple[Any, ...], tmp_path: Path) -> None:
    level, rpn, parity, codec, first, second, want1, want2 = case
    out = run(tmp_path, level, rpn, parity, codec, first, second, scale=30)
    for key, want in (("first", want1), ("second", want2)):
        got = out[key]
        assert "error" not in got, got
        assert (got["id"], got["level"], got["rebuilt"]) == want, got
        assert got["all_ok"] is True  # every rank bit-identical to its state at iteration 3
    assert out["leftovers"] == []


@pytest.mark.parametrize("level", ["2", "3"])
def test_level_1_checkpoints_never_push_out_a_redundant_level(level: str, tmp_path: Path) -> None:
    """Levels 1 and 2/3 on the same node-local storage, keep = 3: after three newer level-1
    checkpoints, node 1 is lost; the level-1 ones are not on every node, and the older
    level-2/3 checkpoint is still there to be rebuilt (each level lists and keeps its own)."""
    out = run(tmp_path, level, "2", "1", "none", "erase:1", mixed=True)
    assert out["levels"] == [int(level), 4, int(level), 1, 1, 1]
    got = out["first"]
    assert (got["id"], got["level"], got["rebuilt"]) == (3, int(level), [2, 3]), got
    assert got["all_ok"] is True
    assert not any("level 2): rank" in s and "partner map" in s for s in got["skipped"])


@pytest.mark.parametrize(("level", "rpn", "who"), [("2", "2", "rank 2"), ("3", "1", "rank 1")])
def test_redundancy_that_cannot_be_stored_fails_the_checkpoint_everywhere(
    level: str, rpn: str, who: str, tmp_path: Path
) -> None:
    """The partner (or parity holder) cannot store its file: one clear error on every rank
    naming the rank where it failed, no staging left, and the previous checkpoint restores."""
    out = run(tmp_path, level, rpn, "1", "none", "block-redundancy")
    error = out["error"]
    assert error is not None and error.startswith("checkpoint 4 (level ")
    assert f"failed: {who}: " in error  # the rank that could not store it, not its peers
    assert "IsADirectoryError" in error and "nothing was committed" in error
    assert (out["first"]["id"], out["first"]["level"]) == (3, int(level))
    assert out["first"]["all_ok"] is True
    assert out["leftovers"] == []
