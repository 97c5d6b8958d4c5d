"""greenckpt's side of ``bench_peers.py`` (not run by hand): one job of greenckpt's cells.

    mpiexec -n R python _peers_worker.py sync|async|levels DIR BYTES_PER_RANK SEED

Every rank protects one array of BYTES_PER_RANK random bytes (``rng.bytes``: incompressible),
one emulated node per rank (``ranks_per_node = 1``), codec none, ``DIR/local`` for levels 1–3
and ``DIR/global`` for level 4. One Checkpointer per level, so each restart reads the level it
names: level 1; level 4 synchronous; level 2 (partner copy); level 3 (Reed–Solomon, parity 2
over a group of all R ranks); level 4 with ``async = true``. A warm-up runs the job's cells on
1 MiB under other names first (imports, thread pools, directories), as the peers' harnesses
do. Each job mirrors the peer job it is compared with, so both write as much before each cell
(on a VM disk whose speed depends on what was just written, that matters):

* ``sync`` (VeloC sync): ``L1`` then ``L4`` back to back (``L1+L4``: both), ``restart-L1``,
  ``restart-L4``.
* ``async`` (VeloC async): ``L4-async-return`` (``checkpoint(4)`` until it returns, committed
  on node-local storage), ``L4-async-durable`` (then ``finalize()``, which waits for the flush
  and commits it on the global directory: greenckpt has no other public call that waits).
* ``levels`` (FTI): ``L1``, ``L2``, ``L3-rs2``, ``L4``, ``restart-L4``, ``restart-L1``.

Each cell is timed from a barrier to the last rank's end (CLOCK_MONOTONIC, one host) with
every rank's CPU-seconds (``getrusage(RUSAGE_SELF)``: the flush thread included); a restart
reads into the zeroed array (verifying the stored bytes' digest as it reads), which is then
compared with the written one. Rank 0 prints ``RESULT {"cell": [seconds, cpu_s], ...}``; exit
status 1 if a restored array differs.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from greenckpt.ckpt import Checkpointer
from greenckpt.ckpt.comm import world

WARM_BYTES = 1 << 20


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


class Timer:
    """Stages of one cell on every rank, reduced to the job's (seconds, cpu_s) per stage."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        comm.barrier()
        self.cpu0, self.t0 = _cpu(), time.monotonic()
        self.stages: list[tuple[float, float]] = []

    def stage(self) -> None:
        self.stages.append((time.monotonic(), _cpu()))

    def figures(self) -> list[tuple[float, float]]:
        got = self.comm.allgather((self.t0, self.cpu0, self.stages))
        start = min(g[0] for g in got)
        return [
            (max(g[2][k][0] for g in got) - start, sum(g[2][k][1] - g[1] for g in got))
            for k in range(len(self.stages))
        ]


def make(
    kind: str, prefix: str, root: Path, size: int, data: np.ndarray
) -> dict[str, Checkpointer]:
    """The Checkpointers of job ``kind``, each protecting ``data``."""
    common: dict[str, Any] = {
        "local_dir": str(root / "local"),
        "global_dir": str(root / "global"),
        "ranks_per_node": 1,
        "keep": 1,
    }
    off = {"enabled": False}
    plain = {"enabled": True, "codec": "none"}
    levels: dict[str, dict[str, Any]] = {
        "g1": {"l1": plain},
        "g4": {"l1": off, "l4": plain},
        "g2": {"l1": off, "l2": plain},
        "g3": {"l1": off, "l3": {**plain, "group_size": size, "parity": 2}},
        "ga": {"l1": plain, "l4": {**plain, "async": True}},
    }
    names = {"sync": ("g1", "g4"), "async": ("ga",), "levels": ("g1", "g2", "g3", "g4")}[kind]
    made = {n: Checkpointer(name=f"{prefix}{n}", **levels[n], **common) for n in names}
    for ck in made.values():
        ck.protect("field", data)
    return made


def _restart(
    ck: Checkpointer, level: int, data: np.ndarray, copy: np.ndarray, comm: Any
) -> tuple[tuple[float, float], bool]:
    """``ck.recover()`` into the zeroed array: its figures, and whether it restored ``copy``."""
    data[...] = 0
    timer = Timer(comm)
    info = ck.recover(missing_ok=False)
    timer.stage()
    same = info is not None and info.level == level and np.array_equal(data, copy)
    return timer.figures()[0], same


def _one(ck: Checkpointer, level: int, comm: Any) -> tuple[float, float]:
    timer = Timer(comm)
    ck.checkpoint(level, iteration=1)
    timer.stage()
    return timer.figures()[0]


def run_cells(
    kind: str, ck: dict[str, Checkpointer], data: np.ndarray, copy: np.ndarray, comm: Any
) -> tuple[dict[str, tuple[float, float]], bool]:
    """The cells of job ``kind`` once; the figures and whether every restored array matched."""
    out: dict[str, tuple[float, float]] = {}
    same = True
    if kind == "sync":
        timer = Timer(comm)
        ck["g1"].checkpoint(1, iteration=1)
        timer.stage()
        ck["g4"].checkpoint(4, iteration=1)
        timer.stage()
        l1, both = timer.figures()
        out["L1"], out["L1+L4"] = l1, both
        out["L4"] = (both[0] - l1[0], both[1] - l1[1])
        order = (("restart-L1", "g1", 1), ("restart-L4", "g4", 4))
    elif kind == "async":
        timer = Timer(comm)
        ck["ga"].checkpoint(4, iteration=1)
        timer.stage()
        ck["ga"].finalize()
        timer.stage()
        out["L4-async-return"], out["L4-async-durable"] = timer.figures()
        order = ()
    else:  # "levels": FTI's order, restarts from L4 then L1 as bench_fti's launches
        for cell, name, level in (("L1", "g1", 1), ("L2", "g2", 2), ("L3-rs2", "g3", 3)):
            out[cell] = _one(ck[name], level, comm)
        out["L4"] = _one(ck["g4"], 4, comm)
        order = (("restart-L4", "g4", 4), ("restart-L1", "g1", 1))
    for cell, name, level in order:
        out[cell], ok = _restart(ck[name], level, data, copy, comm)
        same = same and ok
    for made in ck.values():
        made.finalize()
    return out, same


def main() -> None:
    kind, root = sys.argv[1], Path(sys.argv[2])
    nbytes, seed = int(sys.argv[3]), int(sys.argv[4])
    comm = world()
    rng = np.random.default_rng(seed + comm.rank)
    warm = np.frombuffer(rng.bytes(WARM_BYTES), dtype=np.uint8).copy()
    warm_copy = warm.copy()
    data = np.frombuffer(rng.bytes(nbytes), dtype=np.uint8).copy()
    copy = data.copy()
    run_cells(kind, make(kind, "w", root, comm.size, warm), warm, warm_copy, comm)
    out, same = run_cells(kind, make(kind, "g", root, comm.size, data), data, copy, comm)
    same = all(comm.allgather(same))
    if comm.rank == 0:
        print("RESULT " + json.dumps(out), flush=True)
        if not same:
            print("_peers_worker: a restored array differs from the written one", file=sys.stderr)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
