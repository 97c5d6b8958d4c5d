"""More bytes than a receive buffer holds in a level-2 or level-3 exchange (peers that disagree
on the layout): the exchange refuses them on that rank only after it is complete everywhere,
and the level makes it that rank's error, so every rank fails the checkpoint in the same
words and none is left waiting (the MPI side: tests/ckpt/test_comm_bulk.py).
Ranks are threads of this process, each its own emulated node (``greenckpt.testing.comm``).
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from greenckpt.ckpt import Checkpointer
from greenckpt.ckpt.comm import Comm
from greenckpt.ckpt.records import CheckpointError
from greenckpt.errors import InvalidValueError
from greenckpt.testing.comm import ThreadComm, run_ranks

TOO_MUCH = "9999 bytes arrived, more than the 16-byte buffer"


def _refused_on_rank_2(monkeypatch: pytest.MonkeyPatch, method: str) -> Counter[str]:
    """``method`` of every rank's communicator takes part as usual, then refuses on rank 2 of
    the job (the contract of the MPI communicator when too much arrives); the calls made by
    each rank (thread ``rank-N``), counted."""
    real = getattr(ThreadComm, method)
    calls: Counter[str] = Counter()

    def refusing(self: ThreadComm, *args: Any) -> Any:
        out = real(self, *args)
        calls[threading.current_thread().name] += 1
        if threading.current_thread().name == "rank-2":
            raise InvalidValueError(TOO_MUCH)
        return out

    monkeypatch.setattr(ThreadComm, method, refusing)
    return calls


@pytest.mark.filterwarnings("ignore:greenckpt. a level-:RuntimeWarning")  # its back-off notice
@pytest.mark.parametrize(
    ("level", "method"), [(2, "sendrecv_into"), (3, "alltoall_into")], ids=["L2", "L3"]
)
def test_a_refused_receive_fails_the_checkpoint_on_every_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: int, method: str
) -> None:
    calls = _refused_on_rank_2(monkeypatch, method)
    extra = {"group_size": 4} if level == 3 else {}

    def work(comm: Comm) -> str:
        ck = Checkpointer(
            env={},
            comm=comm,
            ranks_per_node=1,
            local_dir=str(tmp_path),
            **{f"l{level}": {"enabled": True, "codec": "none", **extra}},
        )
        # several segments (4 MiB), so that there are exchanges after the refused one
        ck.protect("u", np.random.default_rng(comm.rank).random(4_000_000))
        try:
            ck.checkpoint(level, iteration=1)
        except CheckpointError as exc:
            return str(exc)
        finally:
            ck.finalize()
        return "committed"

    messages = run_ranks(4, work)
    # rank 2 went on taking part after its refusal: on MPI a rank that left would leave the
    # others waiting in the next exchange (threads only pair the calls up wrongly)
    assert len(set(calls.values())) == 1 and calls["rank-2"] > 1, calls
    assert all(TOO_MUCH in m for m in messages), messages
    assert len(set(messages)) == 1  # the same verdict, in the same words, everywhere
    assert not list(tmp_path.rglob("manifest.json"))
