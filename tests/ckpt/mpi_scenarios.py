"""Run under ``mpiexec -n 4``: checkpoint/recover scenarios over 2 emulated nodes.

Called by ``tests/ckpt/test_mpi.py`` as ``python mpi_scenarios.py SCENARIO DIR``; rank 0 prints
one JSON line with what happened, which the test checks. Each rank's data are different
(``rank``-dependent), so a restore from the wrong rank or node would be caught.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

from greenckpt.ckpt.api import Checkpointer, CheckpointError, RecoveryError
from greenckpt.ckpt.manifest import manifest_digest


def data(rank: int, it: int) -> np.ndarray:
    return np.arange(50_000, dtype=np.float64) * (rank + 1) + it


ASYNC = False


def make(root: Path, **kw: object) -> tuple[Checkpointer, np.ndarray]:
    ck = Checkpointer(
        local_dir=str(root / "local"),
        global_dir=str(root / "global"),
        ranks_per_node=2,
        writers_per_node=1,
        l1={"every": "1it", "codec": "lz4"},
        l4={"every": "2it", "async": ASYNC},
        keep=3,
        **kw,
    )
    u = np.zeros(50_000)
    ck.protect("u", u)
    return ck, u


def main() -> int:  # noqa: PLR0912, PLR0915 — one dispatcher over every MPI scenario
    scenario, root = sys.argv[1], Path(sys.argv[2])
    if scenario.startswith("async-"):  # the same run with level 4 flushed in the background
        scenario = scenario.removeprefix("async-")
        global ASYNC  # noqa: PLW0603 - one switch for every Checkpointer this script makes
        ASYNC = True
    ck, u = make(root)
    rank = ck.rank
    # iterations 1..5: L1 every iteration, L4 on even ones (the higher level wins when both),
    # so the newest checkpoint (id 5) is node-local and the newest global one is id 4
    levels = []
    for it in range(1, 6):
        u[:] = data(rank, it)
        ck.state["it"] = it
        level = ck.need_checkpoint(it)
        if level is not None:
            levels.append(ck.checkpoint(level, iteration=it).level)
    ck.finalize()
    ck.comm.barrier()
    out: dict[str, object] = {"levels": levels}
    if rank == 0:
        if scenario == "lose-node":  # node 1's local storage is gone: L4 must serve
            shutil.rmtree(root / "local" / "node1")
        elif scenario == "foreign-manifest":  # node 1's newest is another run's checkpoint 5
            newest = sorted((root / "local" / "node1" / "greenckpt").glob("ckpt-*"))[-1]
            doc = json.loads((newest / "manifest.json").read_text())
            doc["created"] = "2001-01-01T00:00:00.000Z"
            doc["manifest_digest"] = manifest_digest(doc)  # another run's is sound in itself
            (newest / "manifest.json").write_text(json.dumps(doc))
        elif scenario == "lose-node-and-global":  # only node 0 holds checkpoints any more
            shutil.rmtree(root / "local" / "node1")
            shutil.rmtree(root / "global" / "greenckpt")
        elif scenario == "corrupt-newest":  # flip a byte of rank 3's newest L1 file
            newest = sorted((root / "local" / "node1" / "greenckpt").glob("ckpt-*"))[-1]
            f = newest / "rank-000003.data"
            raw = bytearray(f.read_bytes())
            raw[len(raw) // 2] ^= 0x40
            f.write_bytes(raw)
    ck.comm.barrier()
    if scenario == "fail-write":
        ck2, u2 = make(root)
        u2[:] = data(rank, 99)
        if rank == 2:  # this rank's disk fills up mid-write

            def full(*args: object) -> None:
                raise OSError(28, "No space left on device")

            ck2._write = full  # type: ignore[method-assign,assignment]
        try:
            ck2.checkpoint(1, iteration=99)
            out["error"] = None
        except (CheckpointError, ValueError) as exc:
            out["error"] = str(exc)
        out["staging_left"] = sorted(str(p) for p in root.rglob("*.partial"))
        ck2.finalize()
    ck3, u3 = make(root)
    verdict = "restored"
    try:
        info = ck3.recover()
        verdict = "restored" if info is not None else "nothing to restore"
    except RecoveryError as exc:
        out["recovery_error"] = str(exc)
        info = None
        verdict = "raised"
    # every rank must reach the same verdict (a rank that returned while others raised
    # would leave them waiting in the next collective)
    out["verdicts"] = ck3.comm.allgather(verdict)
    if info is not None:
        out.update(id=info.id, level=info.level, iteration=info.iteration, skipped=info.skipped)
        it = ck3.state["it"]
        ok = bool(np.array_equal(u3, data(rank, it)))
        out["all_ok"] = all(ck3.comm.allgather(ok))
    ck3.finalize()
    if rank == 0:
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
