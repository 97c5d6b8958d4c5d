"""Polite waiting: ranks that wait for others block in the kernel instead of spinning.

Why: MPICH (like most MPIs) busy-polls in every blocking call, so a rank that waits in a
barrier while the node's writers write burns a core at full power — the very setting the
planner chooses (one or two writers per node) would spend on spinning the energy it saves.
Measured here (4 ranks, one working for 1 s, the others waiting): 0.50 CPU-s per waiting rank
in ``MPI_Barrier``, 0.007 CPU-s with :func:`complete`, the same wall time. :func:`complete`
finishes a nonblocking MPI request by testing it for a short spin (200 µs: a request that is
nearly done costs no sleep) and then sleeping between tests with a pause that doubles from
50 µs to 1 ms, so a wait ends at most ~1 ms after the request completes. ``GREENCKPT_WAIT=spin``
restores MPI's own blocking waits (for comparison: benchmarks/bench_waiting.py).
"""

from __future__ import annotations

import os
import time
from typing import Any, Protocol

from greenckpt.errors import InvalidValueError

__all__ = ["WAIT_ENV", "Testable", "complete", "polite"]

WAIT_ENV = "GREENCKPT_WAIT"
_SPIN_S = 200e-6
_FIRST_PAUSE_S = 50e-6
_LONGEST_PAUSE_S = 1e-3


class Testable(Protocol):
    """An mpi4py request: ``test()`` returns (done, value) and ``wait()`` blocks."""

    def test(self) -> tuple[bool, Any]:
        """(whether it completed, its value)."""
        ...

    def wait(self) -> Any:
        """Block until it completes; its value."""
        ...


def polite() -> bool:
    """Whether waits sleep (default) or spin (``GREENCKPT_WAIT=spin``)."""
    mode = os.environ.get(WAIT_ENV, "polite").strip().lower() or "polite"
    if mode not in ("polite", "spin"):
        raise InvalidValueError(f"{WAIT_ENV} must be polite or spin, got {mode!r}")
    return mode == "polite"


def complete(request: Testable) -> Any:
    """``request``'s value once it completed, waiting without spinning (see the module)."""
    if not polite():
        return request.wait()
    until = time.perf_counter() + _SPIN_S
    while True:
        done, value = request.test()
        if done:
            return value
        if time.perf_counter() >= until:
            break
    pause = _FIRST_PAUSE_S
    while True:
        time.sleep(pause)
        done, value = request.test()
        if done:
            return value
        pause = min(2 * pause, _LONGEST_PAUSE_S)
