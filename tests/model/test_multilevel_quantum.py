"""The multilevel optimum searched on a time quantum (FTI counts whole minutes), and FTI
schedules with disabled levels."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from greenckpt.model import (
    Level,
    expected_multilevel,
    fti_schedule,
    nested_schedule,
    optimize_multilevel,
)
from tests.model.test_multilevel import LEVELS, MIN

# Two levels whose continuous optimum is a few minutes, so that the grid matters.
TWO = [
    Level("L1 local", 4.0, 4.0, 1 / (1.5 * 3600), 300.0, 290.0),
    Level("L4 PFS", 90.0, 90.0, 1 / (20 * 3600), 260.0, 260.0),
]


def _epe(levels: list[Level], base: float, mult: tuple[int, ...]) -> float:
    return expected_multilevel(levels, nested_schedule(base, mult), 300.0).epe


def test_intervals_are_whole_minutes_and_no_neighbouring_multiple_is_better() -> None:
    plan = optimize_multilevel(LEVELS, 300.0, quantum=MIN)
    assert all(iv % MIN == 0 and iv >= MIN for iv in plan.intervals)
    n = round(plan.base_interval / MIN)
    for dn, *dm in itertools.product(range(-2, 3), *([(-1, 0, 1)] * len(plan.multipliers))):
        mult = tuple(m + d for m, d in zip(plan.multipliers, dm, strict=True))
        if n + dn < 1 or min(mult) < 1:
            continue
        assert plan.expectation.epe <= _epe(LEVELS, (n + dn) * MIN, mult) * (1 + 1e-12)


def test_two_levels_match_an_exhaustive_search_over_whole_minutes() -> None:
    plan = optimize_multilevel(TWO, 300.0, quantum=MIN)
    best = min((_epe(TWO, n * MIN, (m,)), n, m) for n in range(1, 16) for m in range(1, 41))
    assert plan.expectation.epe == pytest.approx(best[0], rel=1e-12)
    assert (round(plan.base_interval / MIN), plan.multipliers[0]) == best[1:]


def test_the_grid_optimum_is_at_least_as_good_as_rounding_the_continuous_one() -> None:
    free = optimize_multilevel(TWO, 300.0)
    grid = optimize_multilevel(TWO, 300.0, quantum=MIN)
    assert free.base_interval % MIN != 0  # the continuous optimum is not on the grid
    for rounding in (math.floor, math.ceil):
        n = max(1, rounding(free.base_interval / MIN))
        assert grid.expectation.epe <= _epe(TWO, n * MIN, free.multipliers) * (1 + 1e-12)
    assert free.expectation.epe <= grid.expectation.epe * (1 + 1e-9)  # the grid costs a little


def test_time_objective_on_the_grid() -> None:
    plan = optimize_multilevel(LEVELS, 300.0, objective="time", quantum=MIN)
    assert all(iv % MIN == 0 for iv in plan.intervals)


def test_a_bad_quantum_is_refused() -> None:
    with pytest.raises(ValueError, match="quantum must be > 0"):
        optimize_multilevel(LEVELS, 300.0, quantum=0.0)


def test_a_disabled_fti_level_is_never_due_and_failures_roll_back_above_it() -> None:
    s = fti_schedule([3 * MIN, math.inf, 7 * MIN, 11 * MIN], quantum=MIN)
    assert 1 not in set(s.level.tolist())
    # Minute by minute, as FTI_Snapshot decides: the highest enabled level that is due.
    ticks, levels = [], []
    for t in range(1, 3 * 7 * 11 + 1):
        due = [i for i, every in ((0, 3), (2, 7), (3, 11)) if t % every == 0]
        if due:
            ticks.append(t)
            levels.append(max(due))
    np.testing.assert_array_equal(s.level, levels)
    np.testing.assert_array_equal(np.cumsum(s.work), np.array(ticks) * MIN)
    e = expected_multilevel(LEVELS, s, 300.0)
    assert e.checkpoint[1] == 0.0 and math.isfinite(e.epe)


def test_all_levels_disabled_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one level needs a finite interval"):
        fti_schedule([math.inf, math.inf])
