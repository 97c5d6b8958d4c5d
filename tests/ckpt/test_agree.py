"""The one collective agreement (greenckpt.ckpt.agree): the first failing rank's error,
the same on every rank."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import pytest

from greenckpt.ckpt.agree import (
    PEER,
    Failure,
    LocalFailure,
    Verdict,
    agree,
    agree_on,
    agree_with,
    fail_if,
    first_cause,
    one_line,
    raise_first,
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


def test_all_ok_is_no_failure_in_one_collective() -> None:
    comm = FakeComm(0, {1: None, 2: ""}, 3)
    assert agree(comm, None) is None  # type: ignore[arg-type]
    assert comm.calls == 1


def test_the_first_failing_rank_decides_for_every_rank() -> None:
    for rank in range(3):
        errors = {0: None, 1: "disk full", 2: "read-only"}
        comm = FakeComm(rank, errors, 3)
        failure = agree(comm, errors[rank])  # type: ignore[arg-type]
        assert failure == Failure(1, "disk full")
        assert str(failure) == "rank 1: disk full"


def test_a_cause_comes_before_its_echoes_when_asked() -> None:
    errors = {0: PEER + "nothing arrived", 1: "cannot read x"}
    comm = FakeComm(0, errors, 2)
    assert agree(comm, errors[0]) == Failure(0, PEER + "nothing arrived")  # type: ignore[arg-type]
    assert agree(comm, errors[0], causes_first=True) == Failure(1, "cannot read x")  # type: ignore[arg-type]
    assert first_cause([None, None]) is None


def test_values_are_gathered_with_the_verdict() -> None:
    comm = FakeComm(1, {0: ("a", None), 2: ("c", "bad")}, 3)
    values, failure = agree_with(comm, "b", None)  # type: ignore[arg-type]
    assert values == ["a", "b", "c"]
    assert failure == Failure(2, "bad")


def test_raise_first_raises_the_same_error_on_every_rank() -> None:
    for rank in range(2):
        errors = {0: "boom", 1: None}
        comm = FakeComm(rank, errors, 2)
        with pytest.raises(RuntimeError, match=r"^rank 0: boom$"):
            raise_first(comm, errors[rank], lambda f: RuntimeError(str(f)))  # type: ignore[arg-type]
    raise_first(FakeComm(0, {1: None}, 2), None, lambda f: RuntimeError(str(f)))  # type: ignore[arg-type]


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
