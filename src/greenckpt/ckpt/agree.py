"""The collective agreement: every rank reports ok or an error; if any failed, all learn the
first failing rank's error, in the same words on every rank.

Why one helper: a collective step that fails on one rank must fail on every rank together,
or the ranks that think they succeeded go on into the next collective while the failed one
raises, and the job hangs. Every such step (writing a checkpoint, committing it, encoding its
redundancy, rebuilding lost files, opening the stores) ends with this agreement (SCR's
collective "complete" step is the model). An error that only echoes another rank's failure
(nothing arrived from it) is marked :data:`PEER`; where that matters, the cause is reported
before its echoes (:func:`first_cause`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from greenckpt.ckpt.comm import Comm

__all__ = ["PEER", "Failure", "agree", "agree_with", "first_cause", "one_line", "raise_first"]

T = TypeVar("T")

PEER: Final = "(because of a peer) "
"""Marks an error that only reflects another rank's failure (nothing arrived from it), so the
error reported to the user is the cause, not its echo on the peers."""


def one_line(exc: BaseException) -> str:
    """An exception as the one line that error messages carry: its class's own name (not
    the module path, which would change when a class moves) and its message."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class Failure:
    """The failure every rank agreed on: which rank, and its error."""

    rank: int
    error: str

    def __str__(self) -> str:
        return f"rank {self.rank}: {self.error}"


def first_cause(errors: Sequence[str | None]) -> tuple[int, str] | None:
    """The rank and error to report among every rank's: the first that is not only a
    consequence of another rank's failure (marked :data:`PEER`), else the first of those."""
    found = [(r, e) for r, e in enumerate(errors) if e]
    if not found:
        return None
    own = [(r, e) for r, e in found if PEER not in e]
    return own[0] if own else found[0]


def _pick(errors: Sequence[str | None], causes_first: bool) -> Failure | None:
    if causes_first:
        bad = first_cause(errors)
    else:
        bad = next(((r, e) for r, e in enumerate(errors) if e), None)
    return None if bad is None else Failure(*bad)


def agree(comm: Comm, error: str | None, *, causes_first: bool = False) -> Failure | None:
    """Every rank's ``error`` (None or "" for ok) gathered; the first failing rank's, the same
    on every rank, or None when all succeeded (collective). ``causes_first``: a cause before
    the :data:`PEER` echoes it produced elsewhere."""
    return _pick(comm.allgather(error), causes_first)


def agree_with(
    comm: Comm, value: T, error: str | None, *, causes_first: bool = False
) -> tuple[list[T], Failure | None]:
    """:func:`agree` that also gathers each rank's ``value`` in the same collective: every
    rank's values (by rank) and the agreed failure, if any."""
    gathered = comm.allgather((value, error))
    return [v for v, _ in gathered], _pick([e for _, e in gathered], causes_first)


def raise_first(comm: Comm, error: str | None, make: Callable[[Failure], BaseException]) -> None:
    """:func:`agree`, raising ``make(failure)`` on every rank when some rank failed."""
    failure = agree(comm, error)
    if failure is not None:
        raise make(failure)
