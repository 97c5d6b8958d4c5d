"""The MPI job of ``bench_levels.py`` (not run by hand): every level on the same bytes.

    mpiexec -n R python _levels_worker.py DIR BYTES_PER_RANK ROUNDS SEED

Every rank protects one array of BYTES_PER_RANK uniform random doubles (incompressible), one
emulated node per rank (``ranks_per_node = 1``), codec none, keep 1. Two Checkpointers share
the array: ``a`` with levels 1, 2 (partner copy) and 3 with parity 1 (XOR), ``b`` with level 3
and parity 2 (Reed–Solomon), both with erasure groups of all R ranks. Each round runs L1, L2,
L3 XOR and L3 RS once, in an order that rotates from round to round (interleaved: the
machine's drift hits every level alike). Each call is timed between a barrier and its return:
the job's wall time is max end − min start (CLOCK_MONOTONIC, one clock on one host), and the
CPU-seconds are every rank's user + system time in the call (threads included), summed.
Rank 0 prints ``RESULT {json}``: per level, the list of (seconds, cpu_s) over the rounds, and
the bytes the level's last checkpoint stores on all nodes together (data, copies, parity): on
one host every emulated node writes to the same device, so a level that stores twice L1's
bytes cannot take less than about twice L1's time where the device is the bottleneck.

That floor is measured too, in the same rounds: for each level's storage factor f (bytes
stored over L1's: 2 for a partner copy, 1 + t/(G − t) for parity t over groups of G), a
level-1 checkpoint of f times the bytes (the array and a second random array of (f − 1) times
its size; ``floors`` in the result maps each level to its floor's name). The level's time
over its floor's says how far it is from what level 1's own path needs to store its bytes on
this machine.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

from greenckpt.ckpt import Checkpointer
from greenckpt.ckpt.comm import world


def storage_factors(ranks: int) -> dict[str, float]:
    """Bytes each level stores over level 1's, with erasure groups of all ``ranks``."""
    return {"L2": 2.0, "L3-xor": 1 + 1 / (ranks - 1), "L3-rs2": 1 + 2 / (ranks - 2)}


def floor_name(factor: float) -> str:
    return f"L1x{factor:.2f}"


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def stored_bytes(local: Path, level: int, name: str) -> int:
    """Bytes in the newest checkpoint directory of ``name`` at ``level`` on every node."""
    total = 0
    pattern = f"*/{name}" if level == 1 else f"*/level{level}/{name}"  # the store's layout
    for node in sorted(local.glob(pattern)):
        newest = max(node.glob("ckpt-*"), default=None)
        if newest is not None:
            total += sum(f.stat().st_size for f in newest.rglob("*") if f.is_file())
    return total


def main() -> None:
    root, nbytes, rounds, seed = (
        Path(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    comm = world()
    size = comm.size
    data = np.random.default_rng(seed + comm.rank).random(nbytes // 8)
    common = {"local_dir": str(root / "local"), "ranks_per_node": 1, "keep": 1}
    a = Checkpointer(
        name="a",
        l1={"enabled": True},
        l2={"enabled": True},
        l3={"enabled": True, "group_size": size, "parity": 1},
        **common,
    )
    b = Checkpointer(name="b", l3={"enabled": True, "group_size": size, "parity": 2}, **common)
    for ck in (a, b):
        ck.protect("field", data)
    calls = {"L1": (a, 1), "L2": (a, 2), "L3-xor": (a, 3), "L3-rs2": (b, 3)}
    floors = {level: floor_name(f) for level, f in storage_factors(size).items()}
    extra_rng = np.random.default_rng(seed + size + comm.rank)
    for factor in sorted(set(storage_factors(size).values())):
        name = floor_name(factor)
        ck = Checkpointer(name=f"floor{len(calls)}", l1={"enabled": True}, **common)
        ck.protect("field", data)
        ck.protect("extra", extra_rng.random(round((factor - 1) * nbytes) // 8))
        calls[name] = (ck, 1)
    runs = tuple(calls)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    stored: dict[str, int] = {}
    for r in range(rounds + 1):  # round 0 warms up (files, page cache, zfec import)
        order = runs[r % len(runs) :] + runs[: r % len(runs)]
        for name in order:
            ck, level = calls[name]
            comm.barrier()
            cpu0, t0 = _cpu(), time.monotonic()
            ck.checkpoint(level, iteration=r)
            t1, cpu1 = time.monotonic(), _cpu()
            got = comm.allgather((t0, t1, cpu1 - cpu0))
            wall = max(g[1] for g in got) - min(g[0] for g in got)
            if r > 0:
                results[name].append((wall, sum(g[2] for g in got)))
            if r == 1 and comm.rank == 0:  # after the call: a later level may retire it
                stored[name] = stored_bytes(root / "local", level, ck.config.name)
    for ck in {id(c): c for c, _ in calls.values()}.values():
        ck.finalize()
    if comm.rank == 0:
        doc = {
            "ranks": size,
            "bytes_per_rank": nbytes,
            "results": results,
            "stored": stored,
            "floors": floors,
        }
        print("RESULT " + json.dumps(doc))


if __name__ == "__main__":
    main()
