"""Polite waiting (issue 19 item 2): a request is completed by tests and sleeps, not by MPI's
spinning wait; ``GREENCKPT_WAIT=spin`` gives MPI's own wait back. The CPU it saves is measured
in benchmarks/bench_waiting.py; here the logic, with a fake request and a fake clock."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from greenckpt.ckpt import wait
from greenckpt.errors import InvalidValueError


class Request:
    """Completes at the ``ready``-th test; records whether ``wait`` was used."""

    def __init__(self, ready: int) -> None:
        self.ready, self.tests, self.waited = ready, 0, False

    def test(self) -> tuple[bool, Any]:
        self.tests += 1
        return (self.tests >= self.ready, "value" if self.tests >= self.ready else None)

    def wait(self) -> Any:
        self.waited = True
        return "value"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A fake clock: perf_counter advances 10 µs per reading, sleep records its pauses."""
    now = [0.0]
    pauses: list[float] = []

    def perf_counter() -> float:
        now[0] += 10e-6
        return now[0]

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(wait.time, "perf_counter", perf_counter)
    monkeypatch.setattr(wait.time, "sleep", sleep)
    monkeypatch.delenv(wait.WAIT_ENV, raising=False)
    return pauses


def test_a_request_done_at_once_costs_no_sleep(clock: list[float]) -> None:
    request = Request(ready=1)
    assert wait.complete(request) == "value"
    assert request.tests == 1 and clock == [] and not request.waited


def test_a_long_wait_pauses_a_share_of_the_time_waited_between_two_bounds(
    clock: list[float],
) -> None:
    request = Request(ready=400)
    assert wait.complete(request) == "value"
    assert not request.waited
    spins = request.tests - len(clock)  # tests before the first sleep
    assert 1 <= spins <= int(wait._SPIN_S / 10e-6) + 1
    assert clock[0] == wait._FIRST_PAUSE_S
    # the fake clock advances 10 µs per reading: the start is the first reading, the spin
    # reads once per test, and each pause follows one reading of how long the wait has been
    now = 10e-6 * (spins + 1)
    for pause in clock:
        now += 10e-6
        share = (now - 10e-6) * wait._PAUSE_SHARE
        assert pause == pytest.approx(min(wait._LONGEST_PAUSE_S, max(wait._FIRST_PAUSE_S, share)))
        now += pause  # the test after it reads no clock
    assert all(b >= a for a, b in itertools.pairwise(clock))  # never shorter than before
    assert max(clock) == wait._LONGEST_PAUSE_S  # a long wait reaches the ceiling


def test_a_short_wait_pauses_briefly(clock: list[float]) -> None:
    """A wait of a few milliseconds (an agreement after balanced writes) keeps its pauses
    short: the collective it finishes advances one round per poll."""
    request = Request(ready=40)
    wait.complete(request)
    waited = sum(clock) + 10e-6 * request.tests
    assert waited < 5e-3
    assert max(clock) <= max(wait._FIRST_PAUSE_S, waited * wait._PAUSE_SHARE) + 1e-9


def test_spin_mode_uses_the_mpi_wait(clock: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(wait.WAIT_ENV, "spin")
    request = Request(ready=1000)
    assert wait.complete(request) == "value"
    assert request.waited and request.tests == 0 and clock == []


def test_a_bad_mode_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(wait.WAIT_ENV, "busy")
    with pytest.raises(InvalidValueError, match="must be polite or spin, got 'busy'"):
        wait.complete(Request(ready=1))
