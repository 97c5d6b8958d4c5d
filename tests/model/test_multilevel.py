"""The multilevel model: schedules, exact expectations, optimizer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from greenckpt.model import (
    Level,
    Schedule,
    expected_multilevel,
    fti_schedule,
    nested_schedule,
    optimize_multilevel,
)

MIN = 60.0
# Illustrative FTI-like levels (costs grow with resilience; failure rates fall with severity).
LEVELS = [
    Level("L1 local", 5.0, 5.0, 1 / (6 * 3600), 300.0, 290.0),
    Level("L2 partner", 20.0, 20.0, 1 / (24 * 3600), 320.0, 300.0),
    Level("L3 Reed-Solomon", 60.0, 60.0, 1 / (72 * 3600), 330.0, 310.0),
    Level("L4 PFS", 300.0, 300.0, 1 / (7 * 86400), 260.0, 260.0),
]


def test_fti_default_ckp_3_5_7_11() -> None:
    """wu2018's default: L1 every 3 min, L2 every 5, L3 every 7, L4 every 11; highest due wins."""
    s = fti_schedule([3 * MIN, 5 * MIN, 7 * MIN, 11 * MIN], quantum=MIN)
    assert s.period_work == 1155 * MIN  # lcm(3, 5, 7, 11) minutes
    # Checkpoint minutes: multiples of 3, 5, 7 or 11 up to 1155 (inclusion-exclusion: 675).
    assert len(s.work) == 675
    minutes = np.cumsum(s.work) / MIN
    level_at = dict(zip(minutes.astype(int).tolist(), s.level.tolist(), strict=True))
    assert level_at[3] == 0 and level_at[5] == 1 and level_at[7] == 2 and level_at[11] == 3
    assert level_at[15] == 1  # 3 and 5 both due: L2 wins
    assert level_at[33] == 3  # 3 and 11 due: L4 wins
    assert level_at[1155] == 3
    assert 4 not in level_at


def test_nested_schedule_levels() -> None:
    s = nested_schedule(100.0, [2, 3])
    assert s.level.tolist() == [0, 1, 0, 1, 0, 2]
    assert s.intervals(3) == [100.0, 200.0, 600.0]


def test_failure_free_period() -> None:
    levels = [Level(lv.name, lv.ckpt_time, lv.restart_time, 0.0) for lv in LEVELS]
    s = nested_schedule(100.0, [2, 2, 2])
    e = expected_multilevel(levels, s, 400.0)
    assert e.compute == pytest.approx(800.0)
    assert e.checkpoint == pytest.approx((4 * 5.0, 2 * 20.0, 1 * 60.0, 1 * 300.0))
    assert sum(e.restart) == 0.0
    assert e.time_factor == pytest.approx((800 + 20 + 40 + 60 + 300) / 800)


def test_more_failures_cost_more_and_severe_ones_most() -> None:
    s = fti_schedule([3 * MIN, 5 * MIN, 7 * MIN, 11 * MIN], quantum=MIN)
    base = expected_multilevel(LEVELS, s, 300.0)
    for i in range(4):
        worse = list(LEVELS)
        worse[i] = Level(
            LEVELS[i].name,
            LEVELS[i].ckpt_time,
            LEVELS[i].restart_time,
            LEVELS[i].rate * 10,
            LEVELS[i].ckpt_power,
            LEVELS[i].restart_power,
        )
        e = expected_multilevel(worse, s, 300.0)
        assert e.time_factor > base.time_factor
        assert e.restart[i] > base.restart[i]


def test_single_level_failures_only_at_top_roll_back_to_period_start() -> None:
    """Only top-level failures: the period behaves like one basic unit of its whole length
    except that lower-level checkpoints add time (and are lost on failure)."""
    levels = [Level("L1", 10.0, 10.0, 0.0), Level("L2", 50.0, 40.0, 1e-4)]
    s = nested_schedule(200.0, [3])
    e = expected_multilevel(levels, s, 1.0)
    # Equivalent basic unit: T_A + T_C = 600 s of work + 2 × 10 s + 50 s, restart 40 s.
    lam, X, R = 1e-4, 600.0 + 20.0 + 50.0, 40.0
    assert e.total == pytest.approx(math.exp(lam * R) * math.expm1(lam * X) / lam, rel=1e-9)


def test_optimizer_beats_the_fti_default_and_its_neighbours() -> None:
    plan = optimize_multilevel(LEVELS, 300.0)
    default = expected_multilevel(LEVELS, fti_schedule([180, 300, 420, 660], quantum=60), 300.0)
    assert plan.expectation.epe < default.epe
    base, mult = plan.base_interval, plan.multipliers
    for b in (base * 0.8, base * 1.25):
        assert (
            plan.expectation.epe <= expected_multilevel(LEVELS, nested_schedule(b, mult), 300.0).epe
        )
    for j in range(len(mult)):
        for d in (-1, 1):
            m = list(mult)
            m[j] += d
            if m[j] >= 1:
                other = expected_multilevel(LEVELS, nested_schedule(base, m), 300.0)
                assert plan.expectation.epe <= other.epe * (1 + 1e-9)
    assert plan.intervals[0] == base and len(plan.intervals) == 4


def test_time_objective_is_faster_energy_objective_cheaper() -> None:
    e_plan = optimize_multilevel(LEVELS, 300.0, objective="energy")
    t_plan = optimize_multilevel(LEVELS, 300.0, objective="time")
    assert e_plan.expectation.epe <= t_plan.expectation.epe * (1 + 1e-9)
    assert t_plan.expectation.time_factor <= e_plan.expectation.time_factor * (1 + 1e-9)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: fti_schedule([]), "one interval per level"),
        (lambda: fti_schedule([90, 100], quantum=60), "multiple of the quantum"),
        (lambda: fti_schedule([7, 11, 13, 17, 19, 23], max_events=1000), "repeat only every"),
        (lambda: nested_schedule(-1.0, [2]), "base interval"),
        (lambda: nested_schedule(10.0, [0]), "multipliers"),
        (lambda: Level("L1", -1.0, 1.0, 1e-5), "ckpt_time"),
        (lambda: Level("L1", 1.0, 1.0, math.nan), "rate"),
        (
            lambda: expected_multilevel(LEVELS, nested_schedule(10.0, [2]), 1.0),
            "could not be recovered",
        ),
        (lambda: optimize_multilevel([Level("L1", 1.0, 1.0, 0.0)]), "failure rate > 0"),
    ],
)
def test_bad_input(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        call()


def test_schedule_without_work_is_refused() -> None:
    with pytest.raises(ValueError, match="some work"):
        Schedule(np.array([0.0]), np.array([0]))


def test_top_levels_no_failure_needs_are_never_checkpointed() -> None:
    never = [*LEVELS[:3], Level("L4 PFS", 300.0, 300.0, 0.0, 260.0, 260.0)]
    plan = optimize_multilevel(never, 300.0)
    assert math.isinf(plan.intervals[3]) and len(plan.multipliers) == 2
    assert plan.expectation.checkpoint[3] == 0.0
    assert plan.expectation.epe == pytest.approx(
        expected_multilevel(never, nested_schedule(plan.base_interval, plan.multipliers), 300.0).epe
    )


def test_rare_top_level_failures_keep_the_period_bounded() -> None:
    rare = [Level("L1", 5.0, 5.0, 1e-4, 1.0, 1.0), Level("L2", 60.0, 60.0, 1e-9, 1.0, 1.0)]
    plan = optimize_multilevel(rare, 1.0, max_events=256)
    assert plan.multipliers[0] <= 256
    # Not stuck on the search grid's edge: nudging the base interval does not help.
    for f in (0.9, 1.1):
        other = expected_multilevel(rare, nested_schedule(plan.base_interval * f, plan.multipliers))
        assert plan.expectation.epe <= other.epe * (1 + 1e-9)
