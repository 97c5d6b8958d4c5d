"""The write-and-commit chain (greenckpt.ckpt.commit): stages run in order and the chain
stops at the first failure, undoing it, with later stages not run."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from greenckpt.ckpt.comm import SelfComm
from greenckpt.ckpt.commit import (
    CHECKPOINT_STAGES,
    Commit,
    run_stages,
    write_and_commit,
    write_rank_file,
)
from greenckpt.ckpt.config import load_config
from greenckpt.ckpt.job import Job
from greenckpt.ckpt.manifest import RankEntry
from greenckpt.ckpt.protect import Identity, Protected, Slot
from greenckpt.ckpt.records import CheckpointError
from greenckpt.ckpt.store import CheckpointStore
from greenckpt.ckpt.topology import Topology
from greenckpt.io import run_chunks


def test_stages_run_in_order_and_stop_at_the_first_failure() -> None:
    ran: list[str] = []
    undone: list[list[str]] = []

    def stage(name: str, fails: bool = False):  # type: ignore[no-untyped-def]
        def run(state: list[str]) -> None:
            ran.append(name)
            if fails:
                raise CheckpointError(name)

        return run

    state: list[str] = []
    with pytest.raises(CheckpointError, match="second"):
        run_stages(
            [stage("first"), stage("second", fails=True), stage("third")],
            state,
            undone.append,
        )
    assert ran == ["first", "second"]  # the third never ran
    assert undone == [state]
    ran.clear()
    run_stages([stage("a"), stage("b")], state, undone.append)
    assert ran == ["a", "b"] and len(undone) == 1


def test_another_error_is_not_a_stage_failure() -> None:
    def broken(state: object) -> None:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        run_stages([broken], None, lambda s: pytest.fail("a bug is not undone as a failure"))


def _commit(tmp_path: Path) -> Commit:
    config = load_config(env={}, local_dir=str(tmp_path))
    comm = SelfComm()
    topology = Topology.discover(comm, None)
    protected = Protected()
    protected.add("u", np.arange(1000.0))
    job = Job(config, comm, topology, 0, protected, {})
    store = CheckpointStore(tmp_path, config.name)
    job.stores[1] = store
    protected.identity = Identity(config.name, 1, 7)  # stamped by the caller
    return Commit(job, 1, store, 1, 7, [(0,)], partial(_write, job, run_chunks))


def _write(
    job: Job, run: Any, level: int, store: CheckpointStore, ckpt_id: int, slots: Sequence[Slot]
) -> RankEntry:
    return write_rank_file(job, level, store, ckpt_id, run, slots)


def test_the_checkpoint_stages_commit_a_checkpoint(tmp_path: Path) -> None:
    c = _commit(tmp_path)
    entry = write_and_commit(c)
    assert entry.logical_bytes > 8000  # the array and the pickled state
    assert c.store.committed() == [1]
    assert c.manifest is not None and c.manifest.iteration == 7
    assert [s.__name__ for s in CHECKPOINT_STAGES] == [
        "write_data",
        "encode_redundancy",
        "describe",
        "publish",
        "retire_old",
    ]


def test_a_failing_write_stops_before_anything_is_committed(tmp_path: Path) -> None:
    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    c = _commit(tmp_path)
    c.write = partial(_write, c.job, full)
    with pytest.raises(CheckpointError, match=r"failed on rank 0: OSError.*nothing was committed"):
        write_and_commit(c)
    assert c.manifest is None  # describe never ran
    assert c.store.committed() == []
    assert not c.store.staging_path(1).exists()  # undone
