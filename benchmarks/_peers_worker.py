"""greenckpt's side of ``bench_peers.py`` (not run by hand): one job, every greenckpt cell.

    mpiexec -n R python _peers_worker.py DIR BYTES_PER_RANK SEED

Every rank protects one array of BYTES_PER_RANK random bytes (``rng.bytes``: incompressible),
one emulated node per rank (``ranks_per_node = 1``), codec none, ``DIR/local`` for levels 1–3
and ``DIR/global`` for level 4. One Checkpointer per cell, so each restart reads the level it
names: ``g1`` (level 1), ``g4`` (level 4, synchronous), ``g2`` (level 2, partner copy), ``g3``
(level 3, Reed–Solomon with parity 2 over a group of all R ranks) and ``ga`` (level 4 with
``async = true``). A warm-up runs every cell first on 1 MiB under other names (imports, thread
pools, directories), as the peers' harnesses do, so the timed calls are the steady state.

Cells, in this order, each timed from a barrier to the last rank's end (CLOCK_MONOTONIC, one
host) with every rank's CPU-seconds (``getrusage(RUSAGE_SELF)``: the flush thread included):

* ``L1``: ``g1.checkpoint(1)``; ``L4``: ``g4.checkpoint(4)`` right after it; ``L1+L4`` is
  their sum, the two calls back to back (both fsync data, directory and manifest).
* ``L2``, ``L3-rs2``: ``g2.checkpoint(2)``, ``g3.checkpoint(3)``.
* ``L4-async-return``: ``ga.checkpoint(4)`` until it returns (committed on node-local storage);
  ``L4-async-durable``: then ``ga.finalize()``, which waits for the flush and commits it on
  the global directory — greenckpt has no other public call that waits for a flush.
* ``restart-L1``, ``restart-L4``: ``g1.recover()``, ``g4.recover()`` into the zeroed array,
  which verify the stored bytes' digest as they read; the array is compared afterwards.

Rank 0 prints ``RESULT {"cell": [seconds, cpu_s], ...}``; exit status 1 if a restored array
differs from the written one.
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


def make(prefix: str, root: Path, size: int, data: np.ndarray) -> dict[str, Checkpointer]:
    """The cells' Checkpointers, each protecting ``data``."""
    common: dict[str, Any] = {
        "local_dir": str(root / "local"),
        "global_dir": str(root / "global"),
        "ranks_per_node": 1,
        "keep": 1,
    }
    off = {"enabled": False}
    plain = {"enabled": True, "codec": "none"}
    made = {
        "g1": Checkpointer(name=f"{prefix}1", l1=plain, **common),
        "g4": Checkpointer(name=f"{prefix}4", l1=off, l4=plain, **common),
        "g2": Checkpointer(name=f"{prefix}2", l1=off, l2=plain, **common),
        "g3": Checkpointer(
            name=f"{prefix}3",
            l1=off,
            l3={**plain, "group_size": size, "parity": 2},
            **common,
        ),
        "ga": Checkpointer(name=f"{prefix}a", l1=plain, l4={**plain, "async": True}, **common),
    }
    for ck in made.values():
        ck.protect("field", data)
    return made


def run_cells(
    ck: dict[str, Checkpointer], data: np.ndarray, copy: np.ndarray, comm: Any
) -> tuple[dict[str, tuple[float, float]], bool]:
    """Every cell once; the figures and whether every restored array matched."""
    out: dict[str, tuple[float, float]] = {}
    timer = Timer(comm)
    ck["g1"].checkpoint(1, iteration=1)
    timer.stage()
    ck["g4"].checkpoint(4, iteration=1)
    timer.stage()
    (l1, both) = timer.figures()
    out["L1"], out["L1+L4"] = l1, both
    out["L4"] = (both[0] - l1[0], both[1] - l1[1])
    for cell, name, level in (("L2", "g2", 2), ("L3-rs2", "g3", 3)):
        timer = Timer(comm)
        ck[name].checkpoint(level, iteration=1)
        timer.stage()
        out[cell] = timer.figures()[0]
    timer = Timer(comm)
    ck["ga"].checkpoint(4, iteration=1)
    timer.stage()
    ck["ga"].finalize()
    timer.stage()
    out["L4-async-return"], out["L4-async-durable"] = timer.figures()
    same = True
    for cell, name in (("restart-L1", "g1"), ("restart-L4", "g4")):
        data[...] = 0
        timer = Timer(comm)
        info = ck[name].recover(missing_ok=False)
        timer.stage()
        out[cell] = timer.figures()[0]
        expected = 1 if name == "g1" else 4
        same = same and info is not None and info.level == expected and np.array_equal(data, copy)
    for name in ("g1", "g4", "g2", "g3"):
        ck[name].finalize()
    return out, same


def main() -> None:
    root, nbytes, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    comm = world()
    rng = np.random.default_rng(seed + comm.rank)
    warm = np.frombuffer(rng.bytes(WARM_BYTES), dtype=np.uint8).copy()
    warm_copy = warm.copy()
    data = np.frombuffer(rng.bytes(nbytes), dtype=np.uint8).copy()
    copy = data.copy()
    run_cells(make("w", root, comm.size, warm), warm, warm_copy, comm)
    out, same = run_cells(make("g", root, comm.size, data), data, copy, comm)
    same = all(comm.allgather(same))
    if comm.rank == 0:
        print("RESULT " + json.dumps(out), flush=True)
        if not same:
            print("_peers_worker: a restored array differs from the written one", file=sys.stderr)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
