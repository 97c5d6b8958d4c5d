"""Run under ``mpiexec -n 4`` (2 emulated nodes of 2 ranks): edited manifests on every node.

Called by ``tests/ckpt/test_manifest_integrity.py`` as
``python mpi_integrity_scenarios.py SCENARIO DIR``; rank 0 prints one JSON line. Level 1
checkpoints 1 and 2 are taken at iterations 100 and 110; then rank 0 edits checkpoint 2's
manifest on *both* nodes the same way (so the nodes agree with each other) and every rank
recovers.

SCENARIO: ``iteration`` (110 -> 111 by hand), ``iteration-sealed`` (the same with the
manifest's digest recomputed, as a buggy tool would), ``level-one-node`` (one node's level
1 -> 4 by hand), ``name-sealed`` (both nodes' job name changed, digest recomputed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from greenckpt.ckpt.api import Checkpointer, RecoveryError
from greenckpt.ckpt.manifest import FORMAT_VERSION, MANIFEST_DIGEST_KEY, manifest_digest


def make(root: Path) -> tuple[Checkpointer, np.ndarray]:
    ck = Checkpointer(local_dir=str(root / "local"), ranks_per_node=2, keep=3)
    u = np.zeros(5000 + 100 * ck.rank)
    ck.protect("u", u)
    return ck, u


def edit(path: Path, scenario: str) -> None:
    doc: dict[str, Any] = json.loads(path.read_text())
    if scenario.startswith("iteration"):
        doc["iteration"] = 111
    elif scenario.startswith("level"):
        doc["level"] = 4
    elif scenario.startswith("name"):
        doc["name"] = "other"
    if scenario.endswith("-sealed"):
        doc["format_version"] = FORMAT_VERSION
        doc[MANIFEST_DIGEST_KEY] = manifest_digest(doc)
    path.write_text(json.dumps(doc, indent=1))


def main() -> int:
    scenario, root = sys.argv[1], Path(sys.argv[2])
    ck, u = make(root)
    for it in (100, 110):
        u[:] = it + ck.rank
        ck.state["it"] = it
        ck.checkpoint(1, iteration=it)
    ck.finalize()
    ck.comm.barrier()
    if ck.rank == 0:
        nodes = [0] if scenario == "level-one-node" else [0, 1]
        for node in nodes:
            path = root / "local" / f"node{node}" / "greenckpt" / "ckpt-00000002" / "manifest.json"
            edit(path, scenario)
    ck.comm.barrier()
    ck, u = make(root)
    out: dict[str, Any] = {}
    try:
        info = ck.recover()
        assert info is not None
        out.update(id=info.id, iteration=info.iteration, skipped=list(info.skipped))
        ok = bool(np.all(u == ck.state["it"] + ck.rank))
        out["all_ok"] = all(ck.comm.allgather(ok))
    except RecoveryError as exc:
        out["error"] = str(exc)
    ck.finalize()
    if ck.rank == 0:
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
