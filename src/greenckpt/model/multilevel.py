"""Exact expected time and energy of multilevel checkpointing, and an interval optimizer.

Multilevel libraries (FTI, SCR; wu2018 section 3) keep cheap, frequent checkpoints that survive
mild failures (L1 node-local) and rarer, costlier ones that survive severe failures (L2 partner
copy, L3 erasure code, L4 parallel file system). Level ``i`` has its own checkpoint and restart
costs and powers, and a rate ``λ_i`` of the failures whose recovery needs it; a
:class:`Schedule` is one period of checkpoint events ending at the top level, so periods are
independent renewals (FTI's ``ckp(3,5,7,11)`` and nested schedules are both built here).

Why exact: the expectation is computed by first passages in one forward pass, ``O(N·L²)``, so
the optimizer can compare thousands of schedules without simulating; with one level it reduces
to the ``"exact"`` basic unit. The recursion is written so that overflow gives ``inf``, never
NaN. docs/model.md section 5 has the model, the derivation and the overflow rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from greenckpt.errors import InvalidValueError
from greenckpt.model.basic_unit import FloatArray, zero_wins_product

IntArray = NDArray[np.int64]
Objective = Literal["energy", "time"]


@dataclass(frozen=True)
class Level:
    """One checkpoint level: its costs, the node power in each, and the failures it covers."""

    name: str
    ckpt_time: float
    restart_time: float
    rate: float
    ckpt_power: float = 1.0
    restart_power: float = 1.0

    def __post_init__(self) -> None:
        for field, value in (
            ("ckpt_time", self.ckpt_time),
            ("restart_time", self.restart_time),
            ("rate", self.rate),
            ("ckpt_power", self.ckpt_power),
            ("restart_power", self.restart_power),
        ):
            if not (math.isfinite(value) and value >= 0):
                raise InvalidValueError(
                    f"level {self.name}: {field} must be finite and >= 0, got {value}"
                )


@dataclass(frozen=True)
class Schedule:
    """One period of checkpoint events: ``work[k]`` seconds of compute, then a checkpoint at
    level ``level[k]`` (0-based). The last event is at the top level."""

    work: FloatArray
    level: IntArray

    def __post_init__(self) -> None:
        if self.work.shape != self.level.shape or self.work.ndim != 1 or self.work.size == 0:
            raise InvalidValueError("a schedule needs one work time and one level per event")
        if not np.all(np.isfinite(self.work)) or np.any(self.work < 0):
            raise InvalidValueError("schedule work times must be finite and >= 0")
        if not self.work.sum() > 0:
            raise InvalidValueError("a schedule period must contain some work (> 0 seconds)")
        if int(self.level[-1]) != int(self.level.max()):
            raise InvalidValueError("a schedule period must end with a checkpoint at its top level")

    @property
    def period_work(self) -> float:
        """Useful compute seconds in one period."""
        return float(self.work.sum())

    def intervals(self, n_levels: int) -> list[float]:
        """Mean useful seconds between checkpoints of level ``≥ i``, for each level ``i``."""
        out = []
        for i in range(n_levels):
            count = int(np.count_nonzero(self.level >= i))
            out.append(self.period_work / count if count else math.inf)
        return out


def fti_schedule(
    intervals: Sequence[float], *, quantum: float = 1.0, max_events: int = 200_000
) -> Schedule:
    """FTI-style schedule: level ``i`` is due every ``intervals[i]`` seconds of work; when
    several are due at once the highest level is taken (wu2018's ``ckp(3,5,7,11)`` in minutes
    is ``fti_schedule([180, 300, 420, 660], quantum=60)``).

    Intervals must be whole multiples of ``quantum``; the period is their least common multiple.
    ``math.inf`` marks a level that is never due (FTI's ``ckpt_lN = 0``): its failures roll
    back to the next level above that has a checkpoint.
    """
    if not intervals:
        raise InvalidValueError("give one interval per level")
    if not (math.isfinite(quantum) and quantum > 0):
        raise InvalidValueError(f"quantum must be > 0 seconds, got {quantum}")
    if all(value == math.inf for value in intervals):
        raise InvalidValueError("at least one level needs a finite interval")
    ticks: list[int] = []
    for i, value in enumerate(intervals):
        if value == math.inf:
            ticks.append(0)
            continue
        n = round(value / quantum)
        if (
            not (math.isfinite(value) and value > 0)
            or n < 1
            or abs(n * quantum - value) > 1e-9 * value
        ):
            raise InvalidValueError(
                f"interval of level {i + 1} ({value} s) must be a positive multiple of the "
                f"quantum ({quantum} s)"
            )
        ticks.append(n)
    period = math.lcm(*(t for t in ticks if t))
    n_events = sum(period // t for t in ticks if t)  # upper bound before de-duplication
    if n_events > max_events:
        raise InvalidValueError(
            f"these intervals repeat only every {period * quantum:g} s of work "
            f"(up to {n_events} checkpoints per period, limit {max_events}): use intervals "
            "with a smaller least common multiple or a coarser quantum"
        )
    level_at = np.full(period + 1, -1, dtype=np.int64)
    for i, t in enumerate(ticks):
        if not t:
            continue
        idx = np.arange(t, period + 1, t)
        level_at[idx] = np.maximum(level_at[idx], i)
    event_ticks = np.nonzero(level_at >= 0)[0]
    work = np.diff(np.concatenate(([0], event_ticks))).astype(np.float64) * quantum
    return Schedule(work=work, level=level_at[event_ticks])


def nested_schedule(base_interval: float, multipliers: Sequence[int]) -> Schedule:
    """Nested schedule: a checkpoint every ``base_interval`` seconds of work; every
    ``multipliers[0]``-th of them is taken at level 2, every ``multipliers[1]``-th level-2
    checkpoint at level 3, and so on (``len(multipliers) == levels − 1``)."""
    if not (math.isfinite(base_interval) and base_interval > 0):
        raise InvalidValueError(f"base interval must be > 0 seconds, got {base_interval}")
    if any(int(m) < 1 for m in multipliers):
        raise InvalidValueError(f"multipliers must be integers >= 1, got {list(multipliers)}")
    n = math.prod(int(m) for m in multipliers)
    index = np.arange(1, n + 1)
    level = np.zeros(n, dtype=np.int64)
    step = 1
    for i, m in enumerate(multipliers, start=1):
        step *= int(m)
        level[index % step == 0] = i
    return Schedule(work=np.full(n, float(base_interval)), level=level)


@dataclass(frozen=True)
class MultilevelExpectation:
    """Expected seconds per period in each state, and the energy and EPE they imply."""

    compute: float
    checkpoint: tuple[float, ...]
    restart: tuple[float, ...]
    work: float
    energy: float

    @property
    def total(self) -> float:
        """Expected wall seconds of one period."""
        return self.compute + sum(self.checkpoint) + sum(self.restart)

    @property
    def time_factor(self) -> float:
        """Expected wall seconds per second of useful work."""
        return self.total / self.work

    @property
    def epe(self) -> float:
        """Expected joules per second of useful work."""
        return self.energy / self.work


def _span(cum: FloatArray, k: int, m: int) -> FloatArray:
    """``cum[k] − cum[m]`` (``m ≤ k``, prefix sums of non-negative costs), inf where ``cum[k]``
    is inf: the true difference may be finite, but the period's total in that component is
    inf whatever it is, and inf − inf would poison it with NaN."""
    hi = cum[k]
    with np.errstate(invalid="ignore"):
        diff = hi - cum[m]
    return np.where(np.isinf(hi), np.inf, diff)


def _plain_span(cum: FloatArray, k: int, m: int) -> FloatArray:
    diff: FloatArray = cum[k] - cum[m]
    return diff


def _period_costs(levels: Sequence[Level], work: FloatArray, level: IntArray) -> FloatArray:
    """Expected per-state seconds of one period for each row of ``work`` (shape ``(M, N)``).

    Returns shape ``(M, 1 + 2L)``: compute, checkpoint per level, restart per level.

    The pass with plain arithmetic is the fast one (the optimizer runs it thousands of times);
    the overflow-safe operations cost about twice as much, so they run only when the plain
    result is not finite. That is the same answer whenever the plain one is finite: the safe
    operations differ only on inf or NaN operands, and every intermediate value reaches the
    period's total by sums and products with finite non-zero factors, so an inf or NaN anywhere
    would have left the total non-finite.
    """
    costs = _period_costs_pass(levels, work, level, safe=False)
    if np.all(np.isfinite(costs)):
        return costs
    return _period_costs_pass(levels, work, level, safe=True)


def _failure_free_costs(work: FloatArray, level: IntArray, C: FloatArray) -> FloatArray:
    """The period's costs when no level can fail: the work, and each checkpoint once."""
    L = len(C)
    out = np.zeros((work.shape[0], 1 + 2 * L))
    out[:, 0] = work.sum(axis=1)
    for i in range(L):
        out[:, 1 + i] = C[i] * np.count_nonzero(level == i)
    return out


def _rollback_targets(level: IntArray, L: int) -> IntArray:
    """target[k, s]: newest event j < k whose level >= s, else -1 (the period's start)."""
    N = len(level)
    target = np.full((N, L), -1, dtype=np.int64)
    last = np.full(L, -1, dtype=np.int64)
    for k in range(N):
        target[k] = last
        last[: int(level[k]) + 1] = k
    return target


def _period_costs_pass(
    levels: Sequence[Level], work: FloatArray, level: IntArray, *, safe: bool
) -> FloatArray:
    L = len(levels)
    M, N = work.shape
    D = 1 + 2 * L
    rates = np.array([lv.rate for lv in levels])
    C = np.array([lv.ckpt_time for lv in levels])
    R = np.array([lv.restart_time for lv in levels])
    Lam = float(rates.sum())
    if Lam == 0.0:
        return _failure_free_costs(work, level, C)
    w = rates / Lam
    # Weight of failures above level s, summed from the top so that it is exactly 0 there.
    w_gt = np.concatenate((np.cumsum(w[::-1])[::-1][1:], [0.0]))
    target = _rollback_targets(level, L)
    cum = np.zeros((N + 1, M, D))
    V: dict[tuple[int, int], FloatArray] = {}
    span = _span if safe else _plain_span
    mul = zero_wins_product if safe else np.multiply
    with np.errstate(over="ignore"):
        exp_c = np.exp(Lam * C)  # per level
        ckpt_cost = np.expm1(Lam * C) / Lam

    def restart_cost(s: int, m: int) -> FloatArray:
        key = (s, m)
        if key in V:
            return V[key]
        p_fail = -math.expm1(-Lam * R[s])
        acc = np.zeros((M, D))
        acc[:, 1 + L + s] = p_fail / Lam
        for s2 in range(s + 1, L):
            if w[s2] * p_fail == 0.0:  # no escalation: the term is 0 (and 0·inf is not)
                continue
            m2 = int(target[m, s2]) + 1
            acc += p_fail * w[s2] * (restart_cost(s2, m2) + span(cum, m, m2))
        # 1 - p_fail * P(level <= s), written so it keeps its digits when p_fail ~ 1.
        stay = math.exp(-Lam * R[s]) + p_fail * w_gt[s]
        if stay == 0.0:  # the restart (practically) never succeeds: what it costs is inf
            V[key] = np.where(acc > 0, np.inf, 0.0)
        else:
            with np.errstate(over="ignore"):
                V[key] = acc / stay
        return V[key]

    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(N):
            lk = int(level[k])
            t = work[:, k]
            # One attempt's cost over its success probability e^{−ΛD}, D = t + C, multiplied
            # out: compute e^{ΛC}(e^{Λt} − 1)/Λ, checkpoint (e^{ΛC} − 1)/Λ, and each failure
            # (e^{ΛD} − 1 of them expected) costs its restart and the work rolled back.
            g = np.zeros((M, D))
            g[:, 0] = mul(exp_c[lk], np.expm1(Lam * t) / Lam)
            g[:, 1 + lk] = ckpt_cost[lk]
            back = np.zeros((M, D))
            for s in range(L):
                if w[s] == 0.0:
                    continue
                m = int(target[k, s]) + 1
                back += w[s] * (restart_cost(s, m) + span(cum, k, m))
            g += mul(np.expm1(Lam * (t + C[lk]))[:, None], back)
            cum[k + 1] = cum[k] + g
    return cum[N]


def _powers(levels: Sequence[Level], app_power: float) -> FloatArray:
    """Power of each cost component: compute, checkpoint per level, restart per level."""
    return np.concatenate(
        ([app_power], [lv.ckpt_power for lv in levels], [lv.restart_power for lv in levels])
    )


def _expectation(
    levels: Sequence[Level], costs: FloatArray, work: float, app_power: float
) -> MultilevelExpectation:
    L = len(levels)
    powers = _powers(levels, app_power)
    return MultilevelExpectation(
        compute=float(costs[0]),
        checkpoint=tuple(float(x) for x in costs[1 : 1 + L]),
        restart=tuple(float(x) for x in costs[1 + L :]),
        work=work,
        energy=float(zero_wins_product(costs, powers).sum()),
    )


def check_multilevel(levels: Sequence[Level], schedule: Schedule, app_power: float) -> None:
    """Raise ``ValueError`` unless ``schedule`` can run on ``levels`` (shared with the simulator).

    Levels above the schedule's highest level are allowed only if no failure needs them
    (rate 0): otherwise such failures could never be recovered.
    """
    if not levels:
        raise InvalidValueError("give at least one level")
    top = int(schedule.level.max())
    if top >= len(levels) or int(schedule.level.min()) < 0:
        raise InvalidValueError(
            f"the schedule names level {top + 1}, but only {len(levels)} level(s) are configured"
        )
    for lv in levels[top + 1 :]:
        if lv.rate > 0:
            raise InvalidValueError(
                f"the schedule never checkpoints at level {lv.name}, so its failures "
                f"(rate {lv.rate:g}/s) could not be recovered: add it to the schedule or give "
                "it rate 0"
            )
    if not (math.isfinite(app_power) and app_power >= 0):
        raise InvalidValueError(f"app_power must be finite and >= 0 watts, got {app_power}")
    total_rate = math.fsum(lv.rate for lv in levels)
    if not math.isfinite(total_rate):
        raise InvalidValueError(
            f"the levels' failure rates sum to {total_rate} per second: too large"
        )


def expected_multilevel(
    levels: Sequence[Level], schedule: Schedule, app_power: float = 1.0
) -> MultilevelExpectation:
    """Exact expected per-state time, energy and EPE of one period of ``schedule``."""
    check_multilevel(levels, schedule, app_power)
    costs = _period_costs(levels, schedule.work[None, :], schedule.level)[0]
    return _expectation(levels, costs, schedule.period_work, app_power)


@dataclass(frozen=True)
class MultilevelPlan:
    """Optimised nested schedule: level-1 interval and the multipliers between levels."""

    base_interval: float
    multipliers: tuple[int, ...]
    expectation: MultilevelExpectation

    @property
    def intervals(self) -> tuple[float, ...]:
        """Useful seconds between checkpoints of each level (FTI's per-level intervals);
        ``inf`` for top levels that no failure needs and the plan therefore never uses."""
        out = [self.base_interval]
        for m in self.multipliers:
            out.append(out[-1] * m)
        out += [math.inf] * (len(self.expectation.checkpoint) - len(out))
        return tuple(out)

    @property
    def schedule(self) -> Schedule:
        """The optimised period as a :class:`Schedule`."""
        return nested_schedule(self.base_interval, self.multipliers)


def _objective_values(
    levels: Sequence[Level],
    schedule: Schedule,
    scales: FloatArray,
    app_power: float,
    objective: Objective,
) -> FloatArray:
    work = scales[:, None] * schedule.work[None, :]
    costs = _period_costs(levels, work, schedule.level)
    period_work = scales * schedule.period_work
    if objective == "time":
        return np.asarray(costs.sum(axis=1) / period_work, dtype=np.float64)
    energy = zero_wins_product(costs, _powers(levels, app_power)[None, :]).sum(axis=1)
    return np.asarray(energy / period_work, dtype=np.float64)


def _best_base(
    levels: Sequence[Level],
    multipliers: tuple[int, ...],
    app_power: float,
    objective: Objective,
    guess: float,
) -> tuple[float, float]:
    """Best level-1 interval for fixed multipliers.

    Each pass evaluates a log-spaced grid in one vectorised sweep; a minimum on the grid's
    edge moves the window, an interior one narrows it sixteen-fold around the best point, to
    a relative precision of about 1e-4. Every pass costs one ``O(N·L)`` forward recursion.
    """
    unit = nested_schedule(1.0, multipliers)
    center, half = math.log(guess), 2.5 * math.log(10.0)
    best_x, best_v = guess, math.inf
    for _ in range(24):
        grid = np.exp(np.linspace(center - half, center + half, 33))
        values = _objective_values(levels, unit, grid, app_power, objective)
        values = np.where(np.isfinite(values), values, np.inf)
        i = int(np.argmin(values))
        if values[i] < best_v:
            best_x, best_v = float(grid[i]), float(values[i])
        center = math.log(grid[i])
        if 0 < i < grid.size - 1:
            half /= 16.0
            if half < 1e-4:
                break
    return best_x, best_v


_GRID_WINDOW = 512
"""Most multiples of the quantum tried around a continuous optimum (see _best_base_on_grid)."""


def _best_base_on_grid(
    levels: Sequence[Level],
    multipliers: tuple[int, ...],
    app_power: float,
    objective: Objective,
    guess: float,
    quantum: float,
) -> tuple[float, float]:
    """Best level-1 interval among the whole multiples of ``quantum``, multipliers fixed.

    Every multiple from half to twice the continuous optimum (at least 1 to 4 quanta) is
    evaluated in one vectorised sweep, so the answer does not rest on the objective being
    unimodal near its minimum; beyond ``_GRID_WINDOW`` multiples only those nearest the
    continuous optimum are tried (one quantum is then under 0.4 % of the interval).
    """
    x, _ = _best_base(levels, multipliers, app_power, objective, guess)
    n = x / quantum
    lo, hi = max(1, math.floor(n / 2)), max(4, math.ceil(2 * n))
    if hi - lo > _GRID_WINDOW:
        lo = max(1, round(n) - _GRID_WINDOW // 2)
        hi = lo + _GRID_WINDOW
    grid = np.arange(lo, hi + 1, dtype=np.float64) * quantum
    unit = nested_schedule(1.0, multipliers)
    values = _objective_values(levels, unit, grid, app_power, objective)
    values = np.where(np.isfinite(values), values, np.inf)
    i = int(np.argmin(values))
    return float(grid[i]), float(values[i])


def _neighbours(value: int) -> set[int]:
    """Candidate moves of one multiplier: halve, double, and small steps near small values."""
    out = {value * 2, value // 2, round(value * 1.25), round(value / 1.25)}
    if value <= 16:
        out |= {value + 1, value - 1}
    return {v for v in out if v >= 1 and v != value}


def optimize_multilevel(
    levels: Sequence[Level],
    app_power: float = 1.0,
    *,
    objective: Objective = "energy",
    max_events: int = 1024,
    quantum: float | None = None,
) -> MultilevelPlan:
    """Choose the level-1 interval and integer multipliers minimising EPE (or time).

    Starts from Young's interval per level (``√(2·C_i/Λ_{≥i})``, rounded to multiples) and
    improves the multipliers by a local search (×2, ÷2, ×1.25, ÷1.25, and ±1 for small ones)
    while re-optimising the level-1 interval for each candidate. Top levels that no failure
    needs (rate 0) are never checkpointed. The period is capped at ``max_events`` checkpoints.

    ``quantum`` (seconds, e.g. 60 for FTI, which counts whole minutes): the level-1 interval,
    and so every level's, is searched among whole multiples of it for every candidate, so
    the multipliers are chosen for the intervals that can actually be configured.
    """
    if not levels:
        raise InvalidValueError("give at least one level")
    if quantum is not None and not (math.isfinite(quantum) and quantum > 0):
        raise InvalidValueError(f"quantum must be > 0 seconds, got {quantum}")
    rates = np.array([lv.rate for lv in levels])
    if rates.sum() <= 0:
        raise InvalidValueError(
            "at least one level needs a failure rate > 0 to have an optimal interval"
        )
    used = list(levels[: int(np.nonzero(rates > 0)[0].max()) + 1])
    tail = np.cumsum(rates[: len(used)][::-1])[::-1]  # rate of failures needing level >= i
    young = [math.sqrt(2.0 * max(lv.ckpt_time, 1e-9) / t) for lv, t in zip(used, tail, strict=True)]
    mult = [max(1, round(young[i] / young[i - 1])) for i in range(1, len(used))]
    while math.prod(mult) > max_events:
        j = int(np.argmax(mult))
        mult[j] = max(1, mult[j] // 2)
    cache: dict[tuple[int, ...], tuple[float, float]] = {}

    def evaluate(m: tuple[int, ...]) -> tuple[float, float]:
        if m in cache:
            return cache[m]
        if quantum is None:
            cache[m] = _best_base(used, m, app_power, objective, young[0])
        else:
            cache[m] = _best_base_on_grid(used, m, app_power, objective, young[0], quantum)
        return cache[m]

    best = tuple(mult)
    best_val = evaluate(best)[1]
    improved = True
    while improved:
        improved = False
        for j in range(len(best)):
            for cand_j in sorted(_neighbours(best[j])):
                cand = (*best[:j], cand_j, *best[j + 1 :])
                if math.prod(cand) > max_events:
                    continue
                val = evaluate(cand)[1]
                if val < best_val * (1 - 1e-12):
                    best, best_val, improved = cand, val, True
    base = evaluate(best)[0]
    if not math.isfinite(best_val):
        shortest = min(max(lv.ckpt_time, lv.restart_time) for lv in used)
        raise InvalidValueError(
            f"no schedule has a finite expected {objective}: failures come every "
            f"{1.0 / float(rates.sum()):.3g} s on average, and even the cheapest level takes "
            f"{shortest:.3g} s to checkpoint or restart, so a period would be retried about "
            "e^(rate x that time) times, beyond floating point; check the failure rates and costs"
        )
    schedule = nested_schedule(base, best)
    return MultilevelPlan(
        base_interval=base,
        multipliers=best,
        expectation=expected_multilevel(levels, schedule, app_power),
    )
