"""The collective agreement: every rank reports ok or an error; if any failed, all learn the
first failing rank's error, in the same words on every rank.

Why one helper: a collective step that fails on one rank must fail on every rank together,
or the ranks that think they succeeded go on into the next collective while the failed one
raises, and the job hangs. Every such step (writing a checkpoint, committing it, encoding its
redundancy, rebuilding lost files, opening the stores) ends with this agreement (SCR's
collective "complete" step is the model). :func:`agree_on` wraps the local computation itself
(PyTorch DCP's agreement helper is the model): it runs it, takes an exception it raises as
this rank's failure and reduces every rank's outcome, so no caller can compute a verdict by
hand or skip the reduction on a rank whose computation failed. An error that only echoes
another rank's failure (nothing arrived from it) is marked :data:`PEER`; where that matters,
the cause is reported before its echoes (:func:`first_cause`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from greenckpt.ckpt.comm import Comm
from greenckpt.errors import GreenckptError

__all__ = [
    "PEER",
    "Failure",
    "LocalFailure",
    "Verdict",
    "agree_on",
    "fail_if",
    "first_cause",
    "one_line",
]

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


class LocalFailure(GreenckptError):  # noqa: N818 - reads as "raise LocalFailure(why)"
    """Raised by a computation given to :func:`agree_on` to fail this rank in its own words
    (the message as it is, without the class's name that :func:`one_line` adds)."""


def fail_if(problem: str | None) -> None:
    """Raise :class:`LocalFailure` with ``problem`` when there is one (None or "": ok); for
    a computation that reports its failure as a message rather than an exception."""
    if problem:
        raise LocalFailure(problem)


@dataclass(frozen=True)
class Verdict(Generic[T]):
    """What every rank agreed on after :func:`agree_on`: the same on every rank."""

    values: list[T | None]
    """Every rank's result, by rank (None where the rank failed)."""
    errors: list[str | None]
    """Every rank's error, by rank (None where it succeeded)."""
    failure: Failure | None
    """The failure reported to every rank: the first failing rank's (with ``causes_first``,
    the first cause before :data:`PEER` echoes), None when all succeeded."""

    @property
    def ok(self) -> bool:
        """Whether every rank succeeded."""
        return self.failure is None

    @property
    def failed(self) -> tuple[int, ...]:
        """The ranks that failed, in order."""
        return tuple(r for r, e in enumerate(self.errors) if e)


def agree_on(comm: Comm, compute: Callable[[], T], *, causes_first: bool = False) -> Verdict[T]:
    """Run ``compute`` on this rank and agree on the outcome with every rank (collective).

    An exception ``compute`` raises (any :class:`Exception`) is this rank's failure, in
    :func:`one_line`'s words (a :class:`LocalFailure`'s message as it is); the reduction
    happens whatever ``compute`` did, so every rank learns the same :class:`Verdict` and a
    rank whose computation raised cannot leave the others waiting in the collective.
    ``causes_first``: a cause before the :data:`PEER` echoes it produced elsewhere. The only
    verdict reduction there is: no caller gathers errors by hand (tests/ckpt/test_agree.py
    fails on a module that reaches a verdict with its own ``allgather``)."""
    value: T | None = None
    error: str | None = None
    try:
        value = compute()
    except LocalFailure as exc:
        error = str(exc) or "failed"
    except Exception as exc:  # a local failure: reported on every rank, not raised here
        error = one_line(exc)
    gathered = comm.allgather((value, error))
    errors = [e or None for _, e in gathered]
    return Verdict([v for v, _ in gathered], errors, _pick(errors, causes_first))
