"""Run under ``mpiexec -n N``: the checkpoint decisions of test_checkpoint_decisions, across
ranks.

Called by ``tests/ckpt/test_checkpoint_decisions.py`` as ``python mpi_decision_scenarios.py
SCENARIO DIR``; every rank writes ``DIR/rank-<r>.json`` with what it saw, so the test can check
that all ranks took the same decisions (and, through its timeout, that none waits for the
others forever).

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

``l3-not-l2`` (4 ranks, 4 emulated nodes of 1 rank; level 2, and level 3 with one group of 4
nodes and one parity share; keep = 1): a level-2 checkpoint, then a level-3 one. Two lost
nodes of the erasure group that are not each other's partners defeat level 3 but not level 2;
before, the level-3 checkpoint had retired the level-2 one (as if a higher level survived
everything a lower one does), and nothing could be restored.
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

from greenckpt.ckpt import api, schedule
from greenckpt.ckpt.api import Checkpointer, CheckpointError, RecoveryError
from greenckpt.ckpt.inject import erase_node_storage
from greenckpt.ckpt.manifest import LEGACY_VERSION, MANIFEST_DIGEST_KEY, MANIFEST_NAME
from greenckpt.ckpt.redundancy.partner import partner_holders
from greenckpt.ckpt.store import CheckpointStore


def backoff_seconds(root: Path) -> dict[str, Any]:
    schedule.BACKOFF_MIN_S = 2.0  # the wait of level 4, which has no interval to count in
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


def _l2_l3_checkpointer(root: Path) -> tuple[Checkpointer, np.ndarray]:
    ck = Checkpointer(
        local_dir=str(root / "local"),
        ranks_per_node=1,
        l2={"enabled": True},
        l3={"enabled": True, "group_size": 4, "parity": 1},
        keep=1,
    )
    u = np.zeros(1000)
    ck.protect("u", u)
    ck.state["it"] = 0
    return ck, u


def l3_not_l2(root: Path) -> dict[str, Any]:
    ck, u = _l2_l3_checkpointer(root)
    for it, level in ((1, 2), (2, 3)):
        u[:] = it * 100 + ck.rank
        ck.state["it"] = it
        ck.checkpoint(level, iteration=it)
    ck.finalize()
    holders = list(partner_holders(ck.topology))
    # two nodes of the one erasure group (parity 1), neither holding the other's copy
    lost = next((0, j) for j in range(1, ck.comm.size) if holders[0] != j and holders[j] != 0)
    level2 = sorted(p.name for p in (root / "local" / "node1" / "level2" / "greenckpt").iterdir())
    ck.comm.barrier()
    if ck.rank == 0:
        for node in lost:
            erase_node_storage(root / "local", node)
    ck.comm.barrier()
    ck, u = _l2_l3_checkpointer(root)
    out: dict[str, Any] = {"lost": list(lost), "level2_before_loss": level2}
    try:
        info = ck.recover()
        assert info is not None
        out.update(id=info.id, level=info.level, iteration=ck.state["it"])
        out["data_ok"] = all(ck.comm.allgather(bool(np.all(u == 100 + ck.rank))))
    except RecoveryError as exc:
        out["error"] = str(exc)
    ck.finalize()
    return out


SCENARIOS = {
    "backoff-seconds": backoff_seconds,
    "v1-rebuild": v1_rebuild,
    "l3-not-l2": l3_not_l2,
}


def main() -> int:
    scenario, root = sys.argv[1], Path(sys.argv[2])
    from greenckpt.ckpt.comm import world  # noqa: PLC0415 - after the scenario is known

    rank = world().rank
    result = {"rank": rank, **SCENARIOS[scenario](root)}
    (root / f"rank-{rank}.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
