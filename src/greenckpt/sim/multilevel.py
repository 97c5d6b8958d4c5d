"""Monte Carlo simulation of multilevel checkpointing with failures of several severities.

The semantics are those of :mod:`greenckpt.model.multilevel` (a failure of level ``s`` rolls
back to the newest checkpoint of level ``≥ s``); with Poisson failures the per-period means
match :func:`greenckpt.model.expected_multilevel`. A Weibull or trace process sets when the
machine fails, and the levels' rates only the mix of severities.

Why failure by failure: a failure's consequence depends on where in the period it strikes, so
the simulation keeps its position in failure-free time, advances it in O(1) per gap and locates
a failure in O(log N) by bisection; time per state is booked from cumulative sums. A period of
thousands of checkpoints then costs little more per failure than a period of one. The samples
are periods, reported per second of useful work. docs/model.md section 6.3 has the details.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike

from greenckpt.errors import InvalidValueError
from greenckpt.model.multilevel import Level, Schedule, check_multilevel, expected_multilevel
from greenckpt.sim._checks import SeedLike, confidence_level, count, non_negative
from greenckpt.sim.basic_unit import EnergySource, failures_needed, fitting_count, format_big
from greenckpt.sim.processes import Exponential, FailureProcess, Trace
from greenckpt.sim.stats import Estimate, Moments, mean_estimate

DEFAULT_PERIODS = 20_000
"""Periods simulated when ``periods`` is not given and the failure process never ends."""

DEFAULT_MAX_FAILURES = 20_000_000
"""Most failures a run may be expected to need before it is refused (about a minute or two:
this simulator handles a few hundred thousand failures per second, one Python step each)."""

_BATCH = 1 << 12
_FLUSH = 1 << 14


@dataclass(frozen=True)
class MultilevelSimResult:
    """Simulated expectations per second of useful work, each with its confidence interval.

    ``compute`` (which includes recomputed work), ``checkpoint[l]`` and ``restart[l]`` are
    seconds per second of useful work; their sum is ``time_factor``. ``epe`` is joules per
    second of useful work. Multiply by ``period_work`` to compare with the per-period figures of
    :class:`greenckpt.model.MultilevelExpectation`.
    """

    compute: Estimate
    checkpoint: tuple[Estimate, ...]
    restart: tuple[Estimate, ...]
    time_factor: Estimate
    epe: Estimate
    periods: int
    """Periods completed (each ends with a top-level checkpoint)."""
    period_work: float
    """Useful compute seconds per period."""
    failures: int
    """Failures that struck before the last completed period ended."""
    failures_by_level: tuple[int, ...]
    wall_time: float
    """Simulated seconds from job start to the end of the last completed period."""
    confidence: float
    iid_samples: bool
    """True for Poisson failures, where periods are i.i.d.; otherwise the intervals are
    indicative only."""
    energy_source: EnergySource = "modelled"
    """Energies are modelled from the given powers (time × watts), not measured."""

    @property
    def work(self) -> float:
        """Useful compute seconds completed."""
        return self.periods * self.period_work


class _Layout:
    """A period laid out on the failure-free time axis, with the lookups a failure needs."""

    def __init__(self, levels: Sequence[Level], schedule: Schedule) -> None:
        n_levels = len(levels)
        work = [float(w) for w in schedule.work]
        lev = [int(x) for x in schedule.level]
        ckpt = [levels[x].ckpt_time for x in lev]
        self.n_levels = n_levels
        self.level = lev
        self.work = work
        # start[k]: failure-free time at which event k starts; start[N] is the period length.
        start = np.concatenate(([0.0], np.cumsum(np.add(work, ckpt))))
        self.start: list[float] = start.tolist()
        self.period = self.start[-1]
        # Compute seconds and per-level checkpoint seconds before event k (k = 0..N).
        self.cum_compute: list[float] = np.concatenate(([0.0], np.cumsum(work))).tolist()
        per_event = np.zeros((len(lev) + 1, n_levels))
        per_event[np.arange(1, len(lev) + 1), lev] = ckpt
        self.cum_ckpt: list[list[float]] = np.cumsum(per_event, axis=0).tolist()
        # resume[k][s]: event to resume at after a level-s failure during event k, i.e. one
        # past the newest event j < k with level[j] >= s (0: the period's start).
        resume: list[list[int]] = []
        last = [-1] * n_levels
        for lv in lev:
            resume.append([j + 1 for j in last])
            for s in range(lv + 1):
                last[s] = len(resume) - 1
        self.resume = resume
        self.period_row = [self.cum_compute[-1], *self.cum_ckpt[-1], *([0.0] * n_levels)]


def _check(levels: Sequence[Level], schedule: Schedule, app_power: float) -> float:
    check_multilevel(levels, schedule, app_power)
    return non_negative("app_power", app_power, "watts")


def simulate_multilevel(
    levels: Sequence[Level],
    schedule: Schedule,
    process: FailureProcess | None = None,
    app_power: float = 1.0,
    *,
    periods: int | None = None,
    seed: SeedLike = None,
    confidence: float = 0.95,
    max_failures: int = DEFAULT_MAX_FAILURES,
) -> MultilevelSimResult:
    """Simulate periods of ``schedule`` until ``periods`` have completed.

    ``process=None`` draws Poisson failures at the levels' rates; otherwise ``process`` sets
    when failures strike and each one's level is drawn with probability ``rate_s / Σ rate``
    (see the module docstring). ``periods`` defaults to the whole trace for a
    :class:`~greenckpt.sim.processes.Trace` and to :data:`DEFAULT_PERIODS` otherwise. The same
    ``seed`` gives the same result, and the same failure times as
    :func:`~greenckpt.sim.basic_unit.simulate_basic_unit` with that seed and process.

    Before drawing anything, a run whose expected number of failures exceeds ``max_failures``
    is refused with a ``ValueError`` that says how many periods would fit. For Poisson failures
    (``process`` None or :class:`~greenckpt.sim.processes.Exponential`) the expectation is
    exact: Λ × the model's expected period time (:func:`greenckpt.model.expected_multilevel`);
    for a Weibull process it is a lower bound (every period needs one gap that covers at least
    the shortest restart and the whole last event); a trace always ends and is never refused.

    Raises ``ValueError`` for an inconsistent schedule, all-zero rates, a period with no
    work, a bad ``app_power`` or ``confidence``, a run that would need more than
    ``max_failures`` failures, or a trace in which no period completes.
    """
    power, conf, layout = _prepare(levels, schedule, app_power, confidence)
    rates = np.array([lv.rate for lv in levels])
    total_rate = float(rates.sum())
    if not (math.isfinite(total_rate) and total_rate > 0):
        raise InvalidValueError(
            f"the levels' failure rates must sum to > 0 per second, got {total_rate!r}"
        )
    proc = process if process is not None else Exponential(total_rate)
    if periods is None:
        target = math.inf if proc.final_stretch is not None else DEFAULT_PERIODS
    else:
        target = count("periods", periods)
    limit = count("max_failures", max_failures)
    if math.isfinite(target):
        _check_feasible(levels, schedule, layout, proc, int(target), limit)

    rng = np.random.default_rng(seed)
    severity_rng = rng.spawn(1)[0]  # a separate stream: the gaps stay those of `seed` alone
    run = _Run(layout, [lv.restart_time for lv in levels], target)
    stream = proc.stream(rng)
    cum_weights = np.cumsum(rates / total_rate)
    while not run.finished:
        gaps = stream.take(_BATCH)
        if len(levels) == 1:
            severity = [0] * gaps.size
        else:
            u = severity_rng.random(gaps.size)
            idx = np.searchsorted(cum_weights, u, side="right")
            severity = np.minimum(idx, len(levels) - 1).tolist()
        run.gaps(gaps.tolist(), severity)
        if gaps.size < _BATCH and not run.finished:
            run.final(proc.final_stretch or 0.0)
            break
    return _result(
        levels=levels, layout=layout, app_power=power, run=run, conf=conf, iid=proc.memoryless
    )


def _check_feasible(
    levels: Sequence[Level],
    schedule: Schedule,
    layout: _Layout,
    proc: FailureProcess,
    target: int,
    limit: int,
) -> None:
    """Refuse a run that would need more than ``limit`` failures, before drawing any.

    Why: with ``Λ·C ≫ 1`` (or a last event much longer than the MTBF) a period is retried
    ``e^{Λ·…}`` times, and the simulation, which costs one Python step per failure, never
    returns.
    """
    total_rate = math.fsum(lv.rate for lv in levels)
    restarts = [lv.restart_time for lv in levels if lv.rate > 0]
    if isinstance(proc, Exponential):
        # Cheap upper bound first: if every failure rolled back to the period's start and
        # restarted for the longest time, a period would be one basic unit of the period's
        # length, e^{λR}(e^{λP} − 1) failures (the real run is never behind that one, failure
        # for failure). Most runs pass here without the O(N·L²) exact expectation below.
        lam = proc.rate
        with np.errstate(over="ignore"):
            pessimistic = float(np.exp(lam * max(restarts)) * np.expm1(lam * layout.period))
        if target * pessimistic <= limit:
            return
        # The process sets the frequency, the levels' rates the mix (module docstring).
        scaled = [replace(lv, rate=lv.rate * proc.rate / total_rate) for lv in levels]
        period_time = expected_multilevel(scaled, schedule).total
        per_period = proc.rate * period_time  # Wald: Poisson failures over a period's time
        need = target * per_period
        fit = int(min(limit / per_period, target)) if per_period > 0 else target
        how = f"{format_big(per_period)} per period, exact for Poisson failures"
    else:
        last_event = layout.work[-1] + levels[layout.level[-1]].ckpt_time
        first = proc.mean_reach(layout.period, layout.period)
        later = proc.mean_reach(min(restarts) + last_event, layout.period)
        if first is None or later is None:
            return
        need = failures_needed(first, later, target)
        fit = fitting_count(first, later, limit)
        how = f"at least {format_big(1 / later if later > 0 else math.inf)} per period"
    if need <= limit:
        return
    advice = (
        f"simulate at most {fit} periods"
        if fit >= 1
        else "not even one period fits: checkpoints, restarts and the last interval must be "
        f"short against the mean time between failures ({proc.mean_gap:.3g} s)"
    )
    raise InvalidValueError(
        f"simulating {target} periods would take {format_big(need)} failures on average "
        f"({how}), more than max_failures={limit}: {advice}, raise max_failures, or use the "
        "analytic model (greenckpt.model.expected_multilevel, exact for Poisson failures)"
    )


def replay_multilevel(
    levels: Sequence[Level],
    schedule: Schedule,
    trace: Trace,
    severity: ArrayLike,
    app_power: float = 1.0,
    *,
    confidence: float = 0.95,
) -> MultilevelSimResult:
    """Replay ``trace`` with a known level per failure (``severity[i]`` for ``trace.times[i]``).

    For failure logs that record which level each failure needed; the levels' rates are not
    used. The intervals are indicative only, as for any trace.
    """
    power, conf, layout = _prepare(levels, schedule, app_power, confidence)
    sev = np.asarray(severity)
    if sev.shape != trace.times.shape:
        raise InvalidValueError(
            f"severity needs one level per failure ({trace.times.size}), got shape {sev.shape}"
        )
    if sev.size and (
        not np.issubdtype(sev.dtype, np.integer) or sev.min() < 0 or sev.max() >= len(levels)
    ):
        raise InvalidValueError(
            f"severity must be level indices in 0..{len(levels) - 1}, got {sev!r}"
        )
    run = _Run(layout, [lv.restart_time for lv in levels], math.inf)
    run.gaps(trace.gaps().tolist(), [int(x) for x in sev.tolist()])
    run.final(trace.final_stretch)
    return _result(levels=levels, layout=layout, app_power=power, run=run, conf=conf, iid=False)


def _prepare(
    levels: Sequence[Level], schedule: Schedule, app_power: float, confidence: float
) -> tuple[float, float, _Layout]:
    power = _check(levels, schedule, app_power)
    conf = confidence_level(confidence)
    return power, conf, _Layout(levels, schedule)


class _Run:
    """State of one simulated run: position in the period, restart in progress, accumulators."""

    def __init__(self, layout: _Layout, restart_time: list[float], target: float) -> None:
        self.lay = layout
        self.restart_time = restart_time
        self.target = target
        n_levels = layout.n_levels
        self.y = 0.0  # failure-free position within the current period
        self.restarting = False  # the next gap begins with a restart ...
        self.r_level = 0  # ... of this level ...
        self.r_resume = 0  # ... that resumes at this event
        # Seconds booked to the current (incomplete) period beyond F(position):
        # work done and thrown away, and restarts.
        self.lost_compute = 0.0
        self.lost_ckpt = [0.0] * n_levels
        self.restart = [0.0] * n_levels
        self.periods = 0
        self.clean_periods = 0  # periods with no failure (all equal to layout.period_row)
        self.rows: list[list[float]] = []
        self.moments = Moments(1 + 2 * n_levels)
        self.failures = 0
        self.failures_by_level = [0] * n_levels
        self.failures_done = 0  # failures up to the last completed period
        self.by_level_done = [0] * n_levels
        self.clock = 0.0  # simulated seconds up to the current gap's start
        self.wall_done = 0.0  # simulated seconds up to the last completed period
        self.finished = False

    def gaps(self, gaps: list[float], severity: list[int]) -> None:
        """Process gaps that each end with a failure of the given level."""
        lay = self.lay
        start = lay.start
        for g, s in zip(gaps, severity, strict=True):
            if self._advance(g):
                return
            self.clock += g
            self.failures += 1
            self.failures_by_level[s] += 1
            if self.restarting:  # the gap ended inside the restart: it is struck
                if s > self.r_level:  # more severe: restart at s from an earlier point
                    m = lay.resume[self.r_resume][s]
                    self._roll_back(self.r_resume, m)
                    self.r_level = s
                    self.r_resume = m
                continue
            y = self.y
            k = bisect_right(start, y) - 1
            m = lay.resume[k][s]
            t = y - start[k]
            w = lay.work[k]
            if t > w:
                self.lost_compute += w
                self.lost_ckpt[lay.level[k]] += t - w
            else:
                self.lost_compute += t
            self._roll_back(k, m)
            self.restarting = True
            self.r_level = s
            self.r_resume = m

    def final(self, stretch: float) -> None:
        """Process the failure-free stretch that ends a finite process.

        Even a zero stretch counts: a zero-length restart and zero-length events after a
        failure at the very end still complete.
        """
        if not self.finished:
            self._advance(stretch)

    def _roll_back(self, k: int, m: int) -> None:
        """Book the work between the starts of events ``m`` and ``k`` as thrown away."""
        lay = self.lay
        self.lost_compute += lay.cum_compute[k] - lay.cum_compute[m]
        ck, cm = lay.cum_ckpt[k], lay.cum_ckpt[m]
        lost = self.lost_ckpt
        for i in range(lay.n_levels):
            lost[i] += ck[i] - cm[i]

    def _advance(self, g: float) -> bool:
        """Spend ``g`` failure-free seconds; True when the target number of periods is done.

        On return ``self.restarting`` is still true if the gap ended inside the restart;
        otherwise ``self.y`` is the position reached.
        """
        clock = self.clock
        if self.restarting:
            r = self.restart_time[self.r_level]
            if g < r:
                self.restart[self.r_level] += g
                return False
            self.restart[self.r_level] += r
            g -= r
            clock += r
            self.y = self.lay.start[self.r_resume]
            self.restarting = False
        period = self.lay.period
        y1 = self.y + g
        if y1 < period:
            self.y = y1
            return False
        # The current period completes.
        clock += period - self.y
        self._complete()
        if self.periods >= self.target:
            self.wall_done = clock
            self.finished = True
            return True
        rem = y1 - period
        whole = math.floor(rem / period)
        whole = int(min(whole, self.target - self.periods))
        self.clean_periods += whole
        self.periods += whole
        clock += whole * period
        self.wall_done = clock
        if self.periods >= self.target:
            self.finished = True
            return True
        y = rem - whole * period
        self.y = min(max(y, 0.0), math.nextafter(period, 0.0))
        return False

    def _complete(self) -> None:
        lay = self.lay
        row = [lay.period_row[0] + self.lost_compute]
        row += [c + x for c, x in zip(lay.cum_ckpt[-1], self.lost_ckpt, strict=True)]
        row += self.restart
        self.rows.append(row)
        if len(self.rows) >= _FLUSH:
            self.moments.add(np.array(self.rows))
            self.rows = []
        n_levels = lay.n_levels
        self.lost_compute = 0.0
        self.lost_ckpt = [0.0] * n_levels
        self.restart = [0.0] * n_levels
        self.periods += 1
        self.failures_done = self.failures
        self.by_level_done = list(self.failures_by_level)

    def close(self) -> Moments:
        """Merge what is still buffered and return the per-period moments."""
        if self.rows:
            self.moments.add(np.array(self.rows))
            self.rows = []
        self.moments.add_repeated(self.lay.period_row, self.clean_periods)
        self.clean_periods = 0
        return self.moments


def _result(
    *,
    levels: Sequence[Level],
    layout: _Layout,
    app_power: float,
    run: _Run,
    conf: float,
    iid: bool,
) -> MultilevelSimResult:
    if run.periods == 0:
        raise InvalidValueError(
            f"no checkpoint period completes in this trace (a period lasts {layout.period!r} s "
            f"without failures; {run.failures} failures)"
        )
    moments = run.close()
    n_levels = len(levels)
    dim = 1 + 2 * n_levels
    work = layout.cum_compute[-1]

    def est(weights: Sequence[float] | np.ndarray) -> Estimate:
        return mean_estimate(moments, weights, conf, scale=work)

    def unit(i: int) -> Estimate:
        return est(np.eye(dim)[i])

    powers = np.array(
        [app_power, *(lv.ckpt_power for lv in levels), *(lv.restart_power for lv in levels)]
    )
    return MultilevelSimResult(
        compute=unit(0),
        checkpoint=tuple(unit(1 + i) for i in range(n_levels)),
        restart=tuple(unit(1 + n_levels + i) for i in range(n_levels)),
        time_factor=est(np.ones(dim)),
        epe=est(powers),
        periods=run.periods,
        period_work=work,
        failures=run.failures_done,
        failures_by_level=tuple(run.by_level_done),
        wall_time=run.wall_done,
        confidence=conf,
        iid_samples=iid,
    )
