"""Run under ``mpiexec -n N``: the review of issue 18's checkpoint items, across ranks.

Called by ``tests/ckpt/test_review_fixes.py`` as ``python mpi_review_scenarios.py SCENARIO DIR``;
every rank writes ``DIR/rank-<r>.json`` with what it saw, so the test can check that all ranks
took the same decisions (and, through its timeout, that none waits for the others forever).

``backoff-seconds`` (2 ranks): every directory is full. An explicit level-4 checkpoint before
any ``need_checkpoint(it)`` fails, so level 4 is held back for a time in seconds; level 1
(every iteration) then fails too and is held back in iterations, its due checkpoints going to
level 4 once level 4's wait is over. At one iteration rank 0 asks before level 4's deadline
and rank 1 after it (a load imbalance of a few milliseconds at the boundary, made certain
here): deciding on their own clocks, rank 1 entered the checkpoint's collectives and rank 0 the
application's next barrier, and the job hung.

``v1-rebuild`` (4 ranks, 2 emulated nodes): a level-2 checkpoint written as an older greenckpt
wrote it (a format-version-1 manifest, data without a record of their checkpoint) survives
losing node 0, and again on the next restart, whose rank 0 reads the manifest the rebuild
committed on node 0.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from greenckpt.ckpt import api
from greenckpt.ckpt.api import Checkpointer, CheckpointError, RecoveryError
from greenckpt.ckpt.manifest import LEGACY_VERSION, MANIFEST_DIGEST_KEY, MANIFEST_NAME
from greenckpt.ckpt.store import CheckpointStore


def backoff_seconds(root: Path) -> dict[str, Any]:
    api._BACKOFF_MIN_S = 2.0  # the wait of level 4, which has no interval to count in
    CheckpointStore.free_bytes = lambda self: 0  # type: ignore[method-assign]
    ck = Checkpointer(
        local_dir=str(root / "local"),
        global_dir=str(root / "global"),
        l1={"every": "1it"},
        l4={"enabled": True},
        keep=1,
    )
    ck.protect("u", np.zeros(1000))
    log: list[list[Any]] = []
    early = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(CheckpointError):  # before any need_checkpoint(it): seconds
            ck.checkpoint(4, iteration=None)
        held = ck.backoff[4]
        deadline = held.at + (held.delay_s or 0.0)
        for it in range(1, 8):
            ck.comm.barrier()  # the application's halo exchange
            if it == 5:
                if ck.rank == 1:  # this rank is a little behind: past the deadline
                    time.sleep(max(0.0, deadline - time.monotonic()) + 0.2)
                else:
                    early = time.monotonic() < deadline
            level = ck.need_checkpoint(it)
            outcome = None
            if level is not None:
                try:
                    ck.checkpoint(level, iteration=it)
                    outcome = "ok"
                except CheckpointError:
                    outcome = "failed"
            log.append([it, level, outcome])
    ck.finalize()
    return {"log": log, "early": early, "in_seconds": held.in_seconds}


def _downgrade(root: Path) -> None:
    """Every node's level-2 manifest of checkpoint 1 as format version 1 wrote it."""
    for path in sorted((root / "local").glob(f"node*/level2/greenckpt/ckpt-*/{MANIFEST_NAME}")):
        doc = json.loads(path.read_text())
        doc["format_version"] = LEGACY_VERSION
        del doc[MANIFEST_DIGEST_KEY]
        path.write_text(json.dumps(doc, indent=1))


def _v1_checkpointer(root: Path) -> tuple[Checkpointer, np.ndarray]:
    ck = Checkpointer(local_dir=str(root / "local"), ranks_per_node=2, l2={"every": "10it"})
    u = np.zeros(1000)
    ck.protect("u", u)
    ck.state["it"] = 0
    return ck, u


def v1_rebuild(root: Path) -> dict[str, Any]:
    ck, u = _v1_checkpointer(root)
    u[:] = 10 + ck.rank
    ck.state["it"] = 10
    real = vars(api)["Identity"]
    setattr(api, "Identity", lambda *args: None)  # noqa: B010 - no record: data as v1 wrote them
    try:
        ck.checkpoint(2, iteration=10)
    finally:
        setattr(api, "Identity", real)  # noqa: B010
    ck.finalize()
    ck.comm.barrier()
    if ck.rank == 0:
        _downgrade(root)
        shutil.rmtree(root / "local" / "node0")  # node 0 replaced: an empty node
        (root / "local" / "node0").mkdir()
    ck.comm.barrier()
    restarts: list[dict[str, Any]] = []
    for _ in range(2):
        ck, u = _v1_checkpointer(root)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                info = ck.recover()
                assert info is not None
                restarts.append(
                    {
                        "id": info.id,
                        "iteration": ck.state["it"],
                        "rebuilt": list(info.rebuilt),
                        "data_ok": bool(np.all(u == 10 + ck.rank)),
                        "v1_warning": any("format-version-1" in str(w.message) for w in caught),
                    }
                )
            except RecoveryError as exc:
                restarts.append({"error": str(exc)})
        ck.finalize()
    manifest = root / "local" / "node0" / "level2" / "greenckpt" / "ckpt-00000001" / MANIFEST_NAME
    doc = json.loads(manifest.read_text())
    return {
        "restarts": restarts,
        "rebuilt_version": doc["format_version"],
        "rebuilt_digest": MANIFEST_DIGEST_KEY in doc,
    }


SCENARIOS = {"backoff-seconds": backoff_seconds, "v1-rebuild": v1_rebuild}


def main() -> int:
    scenario, root = sys.argv[1], Path(sys.argv[2])
    from greenckpt.ckpt.comm import world  # noqa: PLC0415 - after the scenario is known

    rank = world().rank
    result = {"rank": rank, **SCENARIOS[scenario](root)}
    (root / f"rank-{rank}.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
