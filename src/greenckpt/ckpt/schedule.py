"""When to checkpoint: a decision policy per level, and the back-off of a failing level.

Why policies (orbax-checkpoint's save-decision policies are the model): a level is due every
N iterations, every N seconds, at the time-optimal interval for the measured checkpoint time
and the MTBF, or when any of several policies says so; the Checkpointer asks each level's
policy (:func:`policy_for` maps the configuration onto one) and decides nothing itself. A
policy that reads the clock is ``clocked``: ranks' clocks differ, so such a decision must be
rank 0's for every rank. The back-off and the stand-in levels are explained in
docs/design/checkpointer.md.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from greenckpt.ckpt.config import LevelConfig
from greenckpt.ckpt.levels import LevelSpec
from greenckpt.errors import InvalidValueError

__all__ = [
    "AnyOf",
    "Automatic",
    "Backoff",
    "DecisionPolicy",
    "EveryIterations",
    "EverySeconds",
    "Last",
    "fallback_level",
    "policy_for",
    "stand_in_reason",
]

BACKOFF_MAX_FACTOR = 8
"""A failing level waits at most this many of its intervals between two attempts."""

BACKOFF_MIN_S = 60.0
"""The wait after a failure when there is no interval to count it in (a level that only takes
explicit checkpoints, ``auto`` before a checkpoint time was measured, an interval in
iterations without a known iteration): without a floor such a level would be tried again at
once, which is the retry storm the back-off is there to stop."""

Interval = tuple[int | None, float | None]
"""An interval as (iterations, seconds), one of them set."""


@dataclass(frozen=True)
class Last:
    """A level's last checkpoint (or one at a higher level that served it)."""

    iteration: int
    time: float
    """``time.monotonic()`` on this rank."""


class DecisionPolicy(Protocol):
    """Whether a level is due now, given its last checkpoint."""

    @property
    def clocked(self) -> bool:
        """Whether the decision reads this rank's clock (then rank 0 decides for all)."""
        ...

    def due(self, last: Last, iteration: int | None, now: float) -> bool:
        """Whether a checkpoint is due at ``iteration`` and monotonic time ``now``."""
        ...

    def interval(self, minimum: float) -> Interval:
        """The interval a back-off counts in (at least ``minimum`` seconds when automatic)."""
        ...


@dataclass(frozen=True)
class EveryIterations:
    """Due when ``iteration`` reaches the next multiple of ``every`` after the last one.

    Multiples rather than "N since the last one" keep a restarted run's schedule the same as
    that of a run without failures."""

    every: int
    level: int = 0
    """Only for the message when no iteration is given."""
    clocked = False

    def due(self, last: Last, iteration: int | None, now: float) -> bool:
        if iteration is None:
            raise InvalidValueError(
                f"level {self.level} checkpoints every {self.every} iterations: "
                "pass the iteration to need_checkpoint()"
            )
        return iteration // self.every > last.iteration // self.every

    def interval(self, minimum: float) -> Interval:
        return self.every, None


@dataclass(frozen=True)
class EverySeconds:
    """Due when ``seconds`` passed since the last checkpoint."""

    seconds: float
    clocked = True

    def due(self, last: Last, iteration: int | None, now: float) -> bool:
        return now - last.time >= self.seconds

    def interval(self, minimum: float) -> Interval:
        return None, self.seconds


@dataclass(frozen=True)
class Automatic:
    """Due at the time-optimal interval, which ``seconds`` computes when asked (from the
    measured checkpoint time and the MTBF; 0 until a checkpoint time was measured)."""

    seconds: Callable[[], float]
    clocked = True

    def due(self, last: Last, iteration: int | None, now: float) -> bool:
        return now - last.time >= self.seconds()

    def interval(self, minimum: float) -> Interval:
        return None, max(self.seconds(), minimum)


@dataclass(frozen=True)
class AnyOf:
    """Due when any of ``policies`` is; a back-off counts in the first one's interval."""

    policies: tuple[DecisionPolicy, ...]

    @property
    def clocked(self) -> bool:
        return any(p.clocked for p in self.policies)

    def due(self, last: Last, iteration: int | None, now: float) -> bool:
        # every policy asked (no short cut): one that needs an iteration must say so
        return any([p.due(last, iteration, now) for p in self.policies])

    def interval(self, minimum: float) -> Interval:
        return self.policies[0].interval(minimum) if self.policies else (None, minimum)


def policy_for(
    number: int, settings: LevelConfig, auto: Callable[[], float]
) -> DecisionPolicy | None:
    """The policy of level ``number``'s settings (None: only explicit checkpoints)."""
    if settings.every_iterations is not None:
        return EveryIterations(settings.every_iterations, number)
    if settings.every_s is not None:
        return EverySeconds(settings.every_s)
    if settings.auto:
        return Automatic(auto)
    return None


@dataclass(frozen=True)
class Backoff:
    """A level whose checkpoints failed, held back by
    :meth:`~greenckpt.ckpt.api.Checkpointer.need_checkpoint`.

    After the n-th failure in a row the level is offered again only when ``2**(n-1)`` of its
    intervals (at most 8) have passed since that failure: in iterations for an interval in
    iterations, else in seconds (60 s where the level has no interval to count in). A wait
    in seconds is read from each rank's own clock, so while one is held, rank 0 decides for
    every rank. A successful checkpoint at the level, or a recovery, ends it.
    """

    level: int
    failures: int
    """Failed attempts in a row."""
    reason: str
    """The last failure's message."""
    iteration: int | None
    """The iteration of the last failed attempt (None: not known)."""
    at: float
    """``time.monotonic()`` of the last failed attempt, on this rank."""
    delay_iterations: int | None
    """Iterations to wait after ``iteration``; None when the wait is in seconds."""
    delay_s: float | None
    """Seconds to wait after ``at``; None when the wait is in iterations."""

    @property
    def in_seconds(self) -> bool:
        """Whether the wait is counted in seconds, on each rank's own clock: a decision that
        reads it must be rank 0's for everyone (:meth:`Checkpointer.need_checkpoint`)."""
        return self.delay_iterations is None or self.iteration is None

    def over(self, iteration: int | None, now: float) -> bool:
        """Whether the level may be tried again at ``iteration`` and monotonic time ``now``."""
        if not self.in_seconds:
            assert self.delay_iterations is not None and self.iteration is not None
            return iteration is not None and iteration >= self.iteration + self.delay_iterations
        return now >= self.at + (self.delay_s or 0.0)

    def describe(self) -> str:
        """``after 20 iterations (from iteration 10)`` or ``after 60 s``."""
        if self.delay_iterations is not None and self.iteration is not None:
            return f"after {self.delay_iterations} iterations (from iteration {self.iteration})"
        return f"after {self.delay_s or 0.0:g} s"

    @classmethod
    def after(
        cls,
        previous: Backoff | None,
        level: int,
        reason: str,
        iteration: int | None,
        now: float,
        interval: Interval,
        minimum: float = BACKOFF_MIN_S,
    ) -> Backoff:
        """The back-off after a failure at ``iteration`` (None: unknown), following
        ``previous``, waiting a doubling multiple of ``interval``."""
        failures = 1 if previous is None else previous.failures + 1
        factor = min(2 ** (failures - 1), BACKOFF_MAX_FACTOR)
        every_it, every_s = interval
        if every_it is not None and iteration is None:
            every_it, every_s = None, minimum
        return cls(
            level,
            failures,
            reason,
            iteration,
            now,
            None if every_it is None else every_it * factor,
            None if every_it is not None else (every_s or minimum) * factor,
        )


def fallback_level(
    number: int, usable: Sequence[int], spec: Callable[[int], LevelSpec]
) -> int | None:
    """Where a checkpoint of held-back level ``number`` goes among the ``usable`` levels:
    the lowest that survives everything ``number`` survives; else the one that survives the
    most of it (the highest of equals); else None. Not simply the next higher number: a
    higher level need not survive what a lower one does."""
    wanted = spec(number)
    full = [n for n in usable if spec(n).covers(wanted)]
    if full:
        return min(full)
    if not usable:
        return None
    return max(usable, key=lambda n: (len(spec(n).failures & wanted.failures), n))


def stand_in_reason(
    number: int,
    alternative: int,
    specs: Mapping[int, LevelSpec],
    writable: Collection[int],
) -> str:
    """How the back-off warning describes ``alternative`` standing in for ``number``
    (``specs``: the enabled levels; ``writable``: those that can be tried now)."""
    name = f"level {alternative} ({specs[alternative].name})"
    if specs[alternative].covers(specs[number]):
        if alternative > number and not any(
            n in writable for n in specs if number < n < alternative
        ):
            return f"{name}, the next higher level that can be written"
        return (
            f"{name}, the lowest level that can be written and survives everything "
            f"level {number} survives"
        )
    if alternative < number and not any(n > number and n in writable for n in specs):
        return f"{name}, the next lower level that can be written (no higher one can)"
    return (
        f"{name}, which survives only part of what level {number} survives (no level "
        "that survives all of it can be written)"
    )
