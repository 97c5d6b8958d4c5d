"""Run under ``mpiexec -n 4``: a test-only fifth level, registered by every rank, through the
public API (issue 17 item 1: adding a level touches no greenckpt module).

Called by ``tests/ckpt/test_levels_as_data_mpi.py`` as ``python mpi_fifth_level.py DIR MODE``;
rank 0 prints one JSON line. MODE ``mirrored``: level 5 is node-local with the test's own
redundancy (a mirror of each rank file); rank 2's file is deleted after the checkpoint and
recovery must rebuild it from its mirror. MODE ``archive``: level 5 is a second global copy;
levels 1 and 5 are written, every node's local storage is lost, and recovery must restore
level 5's newest checkpoint. Each rank's array differs in length and contents, so a file
restored for the wrong rank would fail the bit-for-bit comparison.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from greenckpt.ckpt import Checkpointer, register_level
from greenckpt.ckpt.levels import register_scheme
from tests.ckpt.test_levels_as_data import ARCHIVE, MIRROR_PREFIX, MIRRORED, _mirror


def data(rank: int, it: int) -> np.ndarray:
    return np.arange(30_000 + 5_000 * rank, dtype=np.float64) * (rank + 1) + it


def make(root: Path, settings: dict[str, Any]) -> tuple[Checkpointer, np.ndarray]:
    ck = Checkpointer(
        env={},
        local_dir=str(root / "local"),
        global_dir=str(root / "global"),
        ranks_per_node=2,
        **settings,
    )
    u = np.zeros(30_000 + 5_000 * ck.rank)
    ck.protect("u", u)
    return ck, u


def run(ck: Checkpointer, u: np.ndarray, iterations: range) -> None:
    for it in iterations:
        u[:] = data(ck.rank, it)
        ck.state["it"] = it
        level = ck.need_checkpoint(it)
        if level is not None:
            ck.checkpoint(level, iteration=it)
    ck.finalize()


def main() -> None:
    root, mode = Path(sys.argv[1]), sys.argv[2]
    if mode == "mirrored":
        register_scheme("mirror", _mirror)
        register_level(MIRRORED)
        settings: dict[str, Any] = {"l5": {"every": "3it"}}
    else:
        register_level(ARCHIVE)
        settings = {"l1": {"every": "2it"}, "l5": {"every": "3it"}}
    ck, u = make(root, settings)
    comm = ck.comm
    run(ck, u, range(1, 7))
    comm.barrier()
    if comm.rank == 0:
        if mode == "mirrored":
            lost = [
                p
                for p in (root / "local").rglob("rank-000002.data")
                if not p.name.startswith(MIRROR_PREFIX) and "ckpt-00000002" in str(p)
            ]
            assert len(lost) == 1, lost
            lost[0].unlink()
        else:
            shutil.rmtree(root / "local")
            (root / "local").mkdir()
    comm.barrier()
    again, v = make(root, settings)
    info = again.recover()
    ok = bool(np.array_equal(v, data(again.rank, again.state.get("it", -1))))
    oks = comm.allgather(ok)
    again.finalize()
    if comm.rank == 0:
        print(
            json.dumps(
                {
                    "recovered": None if info is None else [info.id, info.level, info.iteration],
                    "rebuilt": None if info is None else list(info.rebuilt),
                    "identical": oks,
                }
            )
        )


if __name__ == "__main__":
    main()
