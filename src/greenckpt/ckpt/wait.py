"""Polite waiting: ranks that wait for others block in the kernel instead of spinning.

Why: MPICH (like most MPIs) busy-polls in every blocking call, so a rank that waits in a
barrier while the node's writers write burns a core at full power — the very setting the
planner chooses (one or two writers per node) would spend on spinning the energy it saves.
Measured here (4 ranks, one working for 1 s, the others waiting): 0.50 CPU-s per waiting rank
in ``MPI_Barrier``, 0.007 CPU-s with :func:`complete`, the same wall time. :func:`complete`
finishes a nonblocking MPI request by testing it for a short spin (200 µs: a request that is
nearly done costs no sleep) and then sleeping between tests, each pause 1/20 of the time waited
so far, at least 50 µs and at most 1 ms: a wait ends at most 5 % of its length (and never
more than 1 ms) after the request completes.

Why a pause that follows the time waited, not one that doubles to its ceiling in under 2 ms:
the library's agreements are short waits (ranks that finished their writes a few milliseconds
apart), and a collective such as a barrier advances one round per poll of a sleeping rank;
with 1 ms pauses a 2 ms wait took 3.7 ms more on 4 ranks over 2 cores, and cost 6.8 ms of CPU,
most of it the ranks that noticed first spinning in the blocking collective after the barrier
for the ones still asleep; with pauses of 1/20 of the wait it took 0.9 ms more and 2.4 ms of
CPU. A long wait pauses 1 ms from 20 ms into it, as before, so ranks waiting for writers use
a few per cent of a core (benchmarks/bench_waiting.py; 1/40 doubled that share).
``GREENCKPT_WAIT=spin`` restores MPI's own blocking waits (for comparison).
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
_PAUSE_SHARE = 1 / 20
"""Each pause is this share of the time waited so far (between the two bounds above)."""


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
    start = time.perf_counter()
    until = start + _SPIN_S
    while True:
        done, value = request.test()
        if done:
            return value
        if time.perf_counter() >= until:
            break
    while True:
        waited = time.perf_counter() - start
        time.sleep(min(_LONGEST_PAUSE_S, max(_FIRST_PAUSE_S, waited * _PAUSE_SHARE)))
        done, value = request.test()
        if done:
            return value
