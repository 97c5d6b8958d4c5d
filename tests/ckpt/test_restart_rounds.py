"""A restart from a level without redundancy meets the other ranks twice, not three times.

Why: on a node with more ranks than cores every collective costs milliseconds of waking ranks
(issue 32: restart at the speed of a plain read); the nodes' manifests are compared in the
read's own agreement instead of one of their own before it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import numpy as np

from greenckpt.ckpt import Checkpointer
from greenckpt.ckpt.comm import SelfComm

T = TypeVar("T")


class Counting(SelfComm):
    """One rank that counts its collectives."""

    def __init__(self) -> None:
        self.rounds = 0

    def allgather(self, obj: T) -> list[T]:
        self.rounds += 1
        return super().allgather(obj)

    def bcast(self, obj: T, root: int = 0) -> T:
        self.rounds += 1
        return super().bcast(obj, root)


def _restart_rounds(tmp_path: Path) -> tuple[int, bool]:
    u = np.arange(1000.0)
    ck = Checkpointer(env={}, comm=SelfComm(), local_dir=str(tmp_path))
    ck.protect("u", u)
    ck.checkpoint(1, iteration=3)
    ck.finalize()
    comm = Counting()
    v = np.zeros(1000)
    ck = Checkpointer(env={}, comm=comm, local_dir=str(tmp_path))
    ck.protect("u", v)
    before = comm.rounds
    info = ck.recover()
    rounds = comm.rounds - before
    ck.finalize()
    assert info is not None and info.iteration == 3
    return rounds, bool(np.array_equal(u, v))


def test_a_level_1_restart_takes_two_rounds_and_restores_the_data(tmp_path: Path) -> None:
    rounds, same = _restart_rounds(tmp_path)
    assert same
    assert rounds == 2  # the listing, then the read (with the manifests compared in it)
