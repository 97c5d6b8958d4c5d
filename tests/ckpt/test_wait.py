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


def test_a_long_wait_sleeps_with_a_doubling_pause_up_to_a_ceiling(clock: list[float]) -> None:
    request = Request(ready=60)
    assert wait.complete(request) == "value"
    assert not request.waited
    spins = request.tests - len(clock)  # tests before the first sleep
    assert 1 <= spins <= int(wait._SPIN_S / 10e-6) + 1
    assert clock[0] == wait._FIRST_PAUSE_S
    assert all(b == min(2 * a, wait._LONGEST_PAUSE_S) for a, b in itertools.pairwise(clock))
    assert max(clock) == wait._LONGEST_PAUSE_S


def test_spin_mode_uses_the_mpi_wait(clock: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(wait.WAIT_ENV, "spin")
    request = Request(ready=1000)
    assert wait.complete(request) == "value"
    assert request.waited and request.tests == 0 and clock == []


def test_a_bad_mode_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(wait.WAIT_ENV, "busy")
    with pytest.raises(InvalidValueError, match="must be polite or spin, got 'busy'"):
        wait.complete(Request(ready=1))
