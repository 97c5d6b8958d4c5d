"""The one collective agreement (greenckpt.ckpt.agree): the first failing rank's error,
the same on every rank."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import pytest

from greenckpt.ckpt.agree import (
    PEER,
    Failure,
    LocalFailure,
    Verdict,
    agree_on,
    fail_if,
    first_cause,
    one_line,
)
from greenckpt.ckpt.comm import Comm
from greenckpt.io.pool import IOJobError
from greenckpt.testing.comm import run_ranks

T = TypeVar("T")


class FakeComm:
    """A communicator whose allgather returns the other ranks' values as given."""

    def __init__(self, rank: int, others: Mapping[int, object], size: int) -> None:
        self.rank, self.size, self.others = rank, size, others
        self.calls = 0

    def allgather(self, value: T) -> list[T]:
        self.calls += 1
        return [value if r == self.rank else self.others[r] for r in range(self.size)]  # type: ignore[misc]


def _failing(error: str | None) -> Callable[[], str]:
    def compute() -> str:
        fail_if(error)
        return "mine"

    return compute


def test_all_ok_is_no_failure_in_one_collective() -> None:
    comm = FakeComm(0, {1: ("b", None), 2: ("c", "")}, 3)
    verdict = agree_on(comm, _failing(None))  # type: ignore[arg-type]
    assert verdict.failure is None and verdict.ok and verdict.failed == ()
    assert comm.calls == 1


def test_the_first_failing_rank_decides_for_every_rank() -> None:
    for rank in range(3):
        errors = {0: None, 1: "disk full", 2: "read-only"}
        others = {r: (None, e) for r, e in errors.items()}
        comm = FakeComm(rank, others, 3)
        failure = agree_on(comm, _failing(errors[rank])).failure  # type: ignore[arg-type]
        assert failure == Failure(1, "disk full")
        assert str(failure) == "rank 1: disk full"


def test_a_cause_comes_before_its_echoes_when_asked() -> None:
    others = {1: (None, "cannot read x")}
    echo = _failing(PEER + "nothing arrived")
    verdict = agree_on(FakeComm(0, others, 2), echo)  # type: ignore[arg-type]
    assert verdict.failure == Failure(0, PEER + "nothing arrived")
    verdict = agree_on(FakeComm(0, others, 2), echo, causes_first=True)  # type: ignore[arg-type]
    assert verdict.failure == Failure(1, "cannot read x")
    assert first_cause([None, None]) is None


def test_values_are_gathered_with_the_verdict() -> None:
    comm = FakeComm(1, {0: ("a", None), 2: (None, "bad")}, 3)
    verdict = agree_on(comm, lambda: "b")  # type: ignore[arg-type]
    assert verdict.values == ["a", "b", None]
    assert verdict.failure == Failure(2, "bad")


def test_one_line_names_the_class_not_its_module() -> None:
    """A class moving between modules (issue 17 split several) must not change messages."""
    assert one_line(IOJobError("worker 0 failed: x")) == "IOJobError: worker 0 failed: x"
    assert one_line(OSError(28, "No space left on device")) == (
        "OSError: [Errno 28] No space left on device"
    )
    assert one_line(KeyboardInterrupt()) == "KeyboardInterrupt"


def test_a_rank_s_exception_is_every_rank_s_failure_verdict() -> None:
    """agree_on runs the computation itself: rank 2's exception is caught there, reduced,
    and every rank (rank 2 too) returns the same failure instead of raising or hanging."""
    ran: list[int] = []

    def work(comm: Comm) -> Verdict[int]:
        def compute() -> int:
            ran.append(comm.rank)
            if comm.rank == 2:
                raise OSError(28, "No space left on device")
            return comm.rank * 10

        return agree_on(comm, compute)

    verdicts = run_ranks(4, work)
    assert sorted(ran) == [0, 1, 2, 3]
    expected = Failure(2, "OSError: [Errno 28] No space left on device")
    assert all(v.failure == expected for v in verdicts)
    assert all(not v.ok and v.failed == (2,) for v in verdicts)
    assert all(v.values == [0, 10, None, 30] for v in verdicts)


def test_agree_on_all_ok_and_local_failures_in_their_own_words() -> None:
    ok = run_ranks(3, lambda comm: agree_on(comm, lambda: comm.rank))
    assert all(v.ok and v.failure is None and v.values == [0, 1, 2] for v in ok)

    def work(comm: Comm) -> Verdict[None]:
        return agree_on(
            comm,
            lambda: fail_if({1: "cannot read x", 2: "checksum"}.get(comm.rank)),
            causes_first=True,
        )

    verdicts = run_ranks(3, work)
    assert all(v.failure == Failure(1, "cannot read x") for v in verdicts)
    assert all(v.errors == [None, "cannot read x", "checksum"] for v in verdicts)
    with pytest.raises(LocalFailure, match=r"^why$"):
        fail_if("why")
    fail_if("")
    fail_if(None)


def test_agree_on_puts_a_cause_before_its_peer_echoes() -> None:
    def work(comm: Comm) -> Verdict[None]:
        def compute() -> None:
            if comm.rank == 0:
                raise LocalFailure(PEER + "nothing arrived")
            raise ValueError("bad block")

        return agree_on(comm, compute, causes_first=True)

    verdicts = run_ranks(2, work)
    assert all(v.failure == Failure(1, "ValueError: bad block") for v in verdicts)


SRC = Path(__file__).resolve().parents[2] / "src" / "greenckpt"

# Where a collective that gathers from every rank may be called outside ckpt/agree.py, and
# how many times: each moves data that every rank needs, not a verdict (no rank's failure is
# reduced there). The communicators themselves (ckpt/comm.py, testing/comm.py) define them.
DATA_EXCHANGES: dict[str, tuple[int, str]] = {
    "ckpt/comm.py": (1, "MPIComm.allgather wraps ckpt/polite_objects.py's"),
    "testing/comm.py": (4, "the threaded communicator builds its collectives on allgather"),
    "ckpt/recovery.py": (1, "every rank's listing of the checkpoints its directories hold"),
    "ckpt/api.py": (1, "every rank's newest committed id, to number the next checkpoint"),
    "ckpt/announce.py": (
        2,
        "every rank's protected bytes; the node leaders' advice (each node its own writer CPUs)",
    ),
    "ckpt/transfer.py": (1, "every rank's file size before the data move"),
    "ckpt/topology.py": (1, "every rank's host name"),
    "ckpt/rework.py": (1, "every rank's progress note"),
    "ckpt/retention.py": (2, "size estimates and free space, measured, then room made"),
    "ckpt/redundancy/builtin.py": (1, "which parity files of the erasure group are intact"),
    "apps/stream.py": (1, "every rank's measured bandwidths"),
}

_GATHER = re.compile(r"(?<!def )\b(?:allgather|allreduce)\(")


def test_no_module_reaches_a_verdict_with_its_own_allgather() -> None:
    """Every all-ranks verdict goes through agree_on (issue 28): a module that gathers
    errors by hand can skip the reduction on a rank whose computation raised, and hang the
    job. Only the data exchanges listed above (moving data is not a verdict) may gather."""
    found: dict[str, int] = {}
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        if name == "ckpt/agree.py":
            continue
        count = len(_GATHER.findall(path.read_text(encoding="utf-8")))
        if count:
            found[name] = count
    assert found == {name: count for name, (count, _) in DATA_EXCHANGES.items()}
