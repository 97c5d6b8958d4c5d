"""When to checkpoint: a decision policy per level, and the back-off of a failing level.

Why policies (orbax-checkpoint's save-decision policies are the model): a level is due every
N iterations, every N seconds, at the time-optimal interval for the measured checkpoint time
and the MTBF, or when any of several policies says so; the Checkpointer asks each level's
policy (:func:`policy_for` maps the configuration onto one) and decides nothing itself. A
policy that reads the clock is ``clocked``: ranks' clocks differ, so such a decision must be
rank 0's for every rank. :class:`Schedule` holds what the decisions read (each level's last
checkpoint, the levels held back) and takes them for the Checkpointer. The back-off and the
stand-in levels are explained in docs/design/checkpointer.md.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from greenckpt.ckpt.comm import Comm
from greenckpt.ckpt.config import Config, LevelConfig
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
    "Schedule",
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
once, which is the retry storm the back-off is there to stop. Read at each failure (tests
lower it)."""

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


class Schedule:
    """When each level is due: its last checkpoint, the levels held back, and the decisions
    the :class:`~greenckpt.ckpt.api.Checkpointer` asks for (it holds one; every rank's is the
    same, since every rank sees the same checkpoints and failures).

    ``levels``: the levels with a store, in order; ``spec``: a level's
    :class:`~greenckpt.ckpt.levels.LevelSpec`; ``rank``: only rank 0 warns.
    """

    def __init__(
        self, config: Config, levels: Iterable[int], spec: Callable[[int], LevelSpec], rank: int
    ) -> None:
        self.config = config
        self.levels = tuple(levels)
        self._spec = spec
        self.rank = rank
        now = time.monotonic()
        self.last_time = dict.fromkeys(self.levels, now)
        """Each level's last checkpoint (or one at a higher level), ``time.monotonic()``."""
        self.last_iteration = dict.fromkeys(self.levels, 0)
        self.last_seconds: dict[int, float] = {}
        """How long each level's last checkpoint took (the automatic interval's input)."""
        self.backoff: dict[int, Backoff] = {}
        self.covering: dict[int, tuple[int, ...]] = {}
        """The held-back levels the last level offered stands in for."""
        self.iteration_seen: int | None = None
        """The last iteration passed to :meth:`decide` (a failure without one is dated so)."""

    # ------------------------------------------------------------------ deciding

    def saw(self, iteration: int | None) -> None:
        """Note the iteration the application is at (None: not told)."""
        if iteration is not None:
            self.iteration_seen = iteration

    def decide(self, iteration: int | None, comm: Comm) -> int | None:
        """The level due now (the highest if several), or None; rank 0's decision for every
        rank when a policy or a held-back level reads the clock (collective then)."""
        due: list[int] = []
        timed = False
        now = time.monotonic()
        for number in self.levels:
            policy = self.policy(number)
            if policy is None:
                continue
            timed = timed or policy.clocked
            last = Last(self.last_iteration[number], self.last_time[number])
            if policy.due(last, iteration, now):
                due.append(number)
        level, covering = self.route(due, iteration, now)
        # every rank holds the same back-offs (a failure is raised on all of them), so all
        # take this branch alike; a deadline in seconds is read from each rank's own clock
        clocked = timed or any(held.in_seconds for held in self.backoff.values())
        if clocked and comm.size > 1:
            level, covering = comm.bcast((level, covering))
        self.covering = {level: covering} if level is not None and covering else {}
        return level

    def take_covering(self, number: int) -> tuple[int, ...]:
        """The held-back levels a checkpoint at ``number`` stands in for (once: forgotten)."""
        covering, self.covering = self.covering.get(number, ()), {}
        return covering

    def may_try(self, number: int, iteration: int | None, now: float) -> bool:
        """Whether level ``number`` is not held back at ``iteration`` and ``now``."""
        held = self.backoff.get(number)
        return held is None or held.over(iteration, now)

    def route(
        self, due: list[int], iteration: int | None, now: float
    ) -> tuple[int | None, tuple[int, ...]]:
        """The level to offer for the ``due`` ones (the highest), and the held-back levels
        above it that it stands in for (a lower level standing in does not serve them by
        itself, so the checkpoint must be told)."""
        offered: set[int] = set()
        held: set[int] = set()
        for number in due:
            if self.may_try(number, iteration, now):
                offered.add(number)
                continue
            alternative = self.fallback(number, iteration, now)
            if alternative is not None:
                offered.add(alternative)
                held.add(number)
        if not offered:
            return None, ()
        level = max(offered)
        return level, tuple(sorted(n for n in held if n > level))

    def fallback(self, number: int, iteration: int | None, now: float) -> int | None:
        """Where a checkpoint of held-back level ``number`` goes, among the enabled levels not
        held back (:func:`fallback_level`)."""
        usable = [
            n
            for n in self.config.enabled_levels
            if n != number and n in self.levels and self.may_try(n, iteration, now)
        ]
        return fallback_level(number, usable, self._spec)

    def policy(self, number: int) -> DecisionPolicy | None:
        """Level ``number``'s decision policy (None: only explicit checkpoints)."""
        return policy_for(number, self.config.level(number), partial(self.auto_interval, number))

    def auto_interval(self, level: int) -> float:
        """The time-optimal interval (saito2013 §6's model) for the measured checkpoint time
        of ``level`` and the configured MTBF; 0 (checkpoint now) until one was measured."""
        seconds = self.last_seconds.get(level)
        mtbf = self.config.mtbf
        if seconds is None or mtbf is None:
            return 0.0
        # imported here: the model pulls in SciPy (~30 MiB and ~0.15 s per rank at start-up),
        # which only jobs with an automatic interval need
        from greenckpt.model.intervals import time_optimal_interval  # noqa: PLC0415

        return float(time_optimal_interval(max(seconds, 1e-3), 1.0 / mtbf))

    # ------------------------------------------------------------------ backing off

    def retry_interval(self, number: int, covering: tuple[int, ...]) -> Interval:
        """The interval a back-off of ``number`` counts in, (iterations, seconds): its own,
        else that of the level it stood in for, else :data:`BACKOFF_MIN_S` seconds."""
        for n in (number, *covering):
            policy = self.policy(n)
            if policy is not None:
                return policy.interval(BACKOFF_MIN_S)
        return None, BACKOFF_MIN_S

    def failed(
        self,
        number: int,
        exc: Exception,
        iteration: int | None,
        covering: tuple[int, ...],
        stacklevel: int = 4,
    ) -> None:
        """Hold level ``number`` back after a failed checkpoint (on every rank: the failure
        was raised on all of them); rank 0 warns at the first failure in a row."""
        at = iteration if iteration is not None else self.iteration_seen
        now = time.monotonic()
        held = Backoff.after(
            self.backoff.get(number),
            number,
            str(exc),
            at,
            now,
            self.retry_interval(number, covering),
            BACKOFF_MIN_S,
        )
        self.backoff[number] = held
        if held.failures > 1 or self.rank != 0:
            return
        alternative = self.fallback(number, at, now)
        if alternative is None:
            meanwhile = "no other level can be written, so none is taken until then"
        else:
            enabled = {n: self._spec(n) for n in self.config.enabled_levels}
            writable = [n for n in enabled if n in self.levels and self.may_try(n, at, now)]
            meanwhile = "meanwhile its due checkpoints go to " + stand_in_reason(
                number, alternative, enabled, writable
            )
        warnings.warn(
            f"greenckpt: a level-{number} ({self._spec(number).name}) checkpoint failed: {exc}. "
            f"Backing off: level {number} is offered again {held.describe()}, the wait "
            f"doubling with each further failure (up to {BACKOFF_MAX_FACTOR} intervals); "
            f"{meanwhile}. Said once until a level-{number} checkpoint succeeds",
            RuntimeWarning,
            stacklevel=stacklevel,
        )

    # ------------------------------------------------------------------ after the fact

    def served(
        self, number: int, iteration: int | None, seconds: float, covering: tuple[int, ...]
    ) -> None:
        """A checkpoint at ``number`` that took ``seconds`` returned: it serves every lower
        level and those it stood in for (``covering``)."""
        self.last_seconds[number] = seconds
        for lower in self.levels:
            if lower <= number or lower in covering:
                self.last_time[lower] = time.monotonic()
                if iteration is not None:
                    self.last_iteration[lower] = iteration

    def committed(self, level: int) -> None:
        """A checkpoint at ``level`` was committed on every rank: its back-off ends."""
        self.backoff.pop(level, None)

    def restart(self, iteration: int) -> None:
        """After a recovery (from ``iteration``) or a fresh start (0): every back-off ends and
        every level's schedule goes on from there."""
        self.backoff.clear()
        now = time.monotonic()
        for number in self.levels:
            self.last_time[number] = now
            self.last_iteration[number] = iteration
