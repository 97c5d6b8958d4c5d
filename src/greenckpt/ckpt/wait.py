"""Polite waiting: ranks that wait for others block in the kernel instead of spinning.

Why: MPICH (like most MPIs) busy-polls in every blocking call, so a rank that waits in a
barrier while the node's writers write burns a core at full power — the very setting the
planner chooses (one or two writers per node) would spend on spinning the energy it saves.
Measured here (4 ranks, one working for 1 s, the others waiting): 0.50 CPU-s per waiting rank
in ``MPI_Barrier``, 0.007 CPU-s with :func:`complete`, the same wall time. :func:`complete`
finishes a nonblocking MPI request by testing it for a short spin (50 µs: a request that is
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
Why a spin of 50 µs (200 µs until 2026-12-06): on a node with more ranks than cores, a rank
that spins takes the core from the one it waits for. Level-1 checkpoints of 1 MiB per rank
(three agreements each), 30 per job, medians, 3 jobs alternating per setting: 4 ranks on 2
cores 9.0–9.4 → 8.1–8.4 ms and 10.7–11.0 → 9.2–9.6 ms of CPU; 8 ranks 17.4–18.4 → 15.7–16.3 ms
and 25.1–25.6 → 21.7–22.1 ms of CPU; 2 ranks on 2 cores 4.3–4.6 against 4.4–5.1 ms and
4.5–4.7 against 4.3–4.9 ms of CPU (within the noise). 10 µs was no better than 50.
``GREENCKPT_WAIT=spin`` restores MPI's own blocking waits (for comparison).
"""

from __future__ import annotations

import os
import time
from typing import Any, Protocol

from greenckpt.errors import InvalidValueError

__all__ = ["WAIT_ENV", "Testable", "complete", "polite"]

WAIT_ENV = "GREENCKPT_WAIT"
_SPIN_S = 50e-6
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
