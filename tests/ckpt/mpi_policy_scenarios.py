"""Run under ``mpiexec -n 4`` (2 emulated nodes): issue 18 items 6 and 7 across ranks.

Called by ``tests/ckpt/test_space.py`` as ``python mpi_policy_scenarios.py SCENARIO DIR``;
every rank writes ``DIR/rank-<r>.json`` with what it saw, so the test can check that all ranks took
the same decisions.

``short-node``: node 1's level-1 directory reports no free space (the other node has plenty).
Level 1 (every 2 iterations) must be refused on every rank, naming node 1, before anything is
written; it is then held back identically on every rank and its checkpoints fall through to
level 4 (every 100 iterations) on every rank.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

from greenckpt.ckpt.api import Checkpointer, CheckpointError
from greenckpt.ckpt.store import CheckpointStore


def main() -> int:
    scenario, root = sys.argv[1], Path(sys.argv[2])
    assert scenario == "short-node", scenario
    real = CheckpointStore.free_bytes

    def free_bytes(store: CheckpointStore) -> int:
        return 0 if "node1" in str(store.base) else real(store)

    CheckpointStore.free_bytes = free_bytes  # type: ignore[method-assign]
    ck = Checkpointer(
        local_dir=str(root / "local"),
        global_dir=str(root / "global"),
        ranks_per_node=2,
        l1={"every": "2it"},
        l4={"every": "100it"},
        keep=2,
    )
    u = np.full(10_000, float(ck.rank))
    ck.protect("u", u)
    failed, done, errors = [], [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for it in range(1, 11):
            level = ck.need_checkpoint(it)
            if level is None:
                continue
            try:
                ck.checkpoint(level, iteration=it)
                done.append([it, level])
            except CheckpointError as exc:
                failed.append(it)
                errors.append(str(exc))
    ck.finalize()
    staged = sorted(str(p) for p in (root / "local").rglob(".ckpt-*"))
    held = {str(k): [b.failures, b.iteration, b.delay_iterations] for k, b in ck.backoff.items()}
    result = {
        "rank": ck.rank,
        "failed": failed,
        "done": done,
        "errors": errors,
        "backoff": held,
        "staged": staged,
    }
    (root / f"rank-{ck.rank}.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
