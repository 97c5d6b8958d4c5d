"""Issue 18, item 10: the model and the simulators under pathological input.

Each test pins one failure mode seen before the fix: a simulation that could never return, a
bad power that gave a plausible number, an overflow that gave NaN instead of inf.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greenckpt.model import (
    Level,
    Schedule,
    energy_optimal_interval,
    epe,
    expected_energy,
    expected_failures,
    expected_multilevel,
    expected_runtime,
    interval,
    nested_schedule,
    optimize_multilevel,
    sojourn_times,
    time_optimal_interval,
    unit_energy,
    young_interval,
)
from greenckpt.sim import (
    Exponential,
    GapStream,
    Trace,
    Weibull,
    simulate_basic_unit,
    simulate_multilevel,
)

BAD_POWERS = [math.nan, -1.0, math.inf, -math.inf]


class _NoDraws(GapStream):
    def take(self, n: int) -> np.ndarray:  # type: ignore[type-arg]
        raise AssertionError("the simulator drew failures instead of refusing up front")


class _RefusingExponential(Exponential):
    """Poisson failures that fail the test if the simulator starts drawing them."""

    def stream(self, rng: np.random.Generator) -> GapStream:
        return _NoDraws()


class _RefusingWeibull(Weibull):
    def stream(self, rng: np.random.Generator) -> GapStream:
        return _NoDraws()


# ---------------------------------------------------------------- single-level simulator


def test_issue_example_refused_with_expected_attempts() -> None:
    """The issue's call: λ(T_A+T_C) = 20.2, so e^{20.2} ≈ 6e8 attempts per unit (and every
    restart of 100 s is struck e^{20} times): refused at once, saying why and what would run."""
    with pytest.raises(ValueError) as info:
        simulate_basic_unit(1, 100, 100, 0.2)
    msg = str(info.value)
    assert "\n" not in msg
    assert "5.9e+08" in msg  # e^{20.2} attempts per unit
    assert "max_failures" in msg and "sojourn_times" in msg


def test_basic_unit_refuses_before_drawing_a_failure() -> None:
    with pytest.raises(ValueError, match="failures"):
        simulate_basic_unit(1.0, 100.0, 100.0, _RefusingExponential(0.2), units=1)


def test_basic_unit_refusal_is_exact_for_poisson() -> None:
    """Expected failures for n units are ≥ 1 + (n − b0)/b (Wald), b0 and b the mean units the
    first and a later gap complete; for Poisson failures b = e^{−λT_R}/(e^{λX} − 1). A limit 1%
    above that bound runs, 1% below refuses: the check neither refuses runnable scenarios nor
    lets unrunnable ones start."""
    T_A, T_C, T_R, rate, n = 30.0, 10.0, 20.0, 0.05, 200
    X = T_A + T_C
    b0 = math.exp(-rate * X) / -math.expm1(-rate * X)
    b = math.exp(-rate * (T_R + X)) / -math.expm1(-rate * X)
    need = 1 + (n - b0) / b  # about 2.0e3 failures
    res = simulate_basic_unit(T_A, T_C, T_R, rate, units=n, seed=3, max_failures=int(need * 1.01))
    assert res.units >= n
    with pytest.raises(ValueError, match=r"at most \d+ units"):
        simulate_basic_unit(
            T_A, T_C, T_R, _RefusingExponential(rate), units=n, max_failures=int(need * 0.99)
        )


def test_basic_unit_suggested_units_run() -> None:
    """The units the message offers do run within the same limit."""
    with pytest.raises(ValueError) as info:
        simulate_basic_unit(30.0, 10.0, 20.0, 0.05, units=10_000, max_failures=5_000)
    offered = int(str(info.value).split("at most ")[1].split(" units")[0])
    assert 1 <= offered < 10_000
    res = simulate_basic_unit(30.0, 10.0, 20.0, 0.05, units=offered, seed=1, max_failures=5_000)
    assert res.units >= offered


def test_basic_unit_not_even_one_unit() -> None:
    with pytest.raises(ValueError, match="not even one unit"):
        simulate_basic_unit(1.0, 100.0, 100.0, _RefusingExponential(1.0), units=1)


def test_basic_unit_weibull_refused() -> None:
    """Weibull failures (MTBF 5 s) against a 101 s unit: the bound on the expected failures is
    astronomically large, refused before any gap is drawn."""
    with pytest.raises(ValueError, match="failures"):
        simulate_basic_unit(1.0, 100.0, 100.0, _RefusingWeibull(0.7, 5.0))


def test_basic_unit_reasonable_scenarios_still_run() -> None:
    """λX = 1 (the benchmark's harsh case) with the default limit, and a replayed trace, which
    always ends, however hopeless."""
    res = simulate_basic_unit(3000.0, 600.0, 600.0, 1 / 3600, units=20_000, seed=2)
    assert res.units >= 20_000
    res = simulate_basic_unit(3000.0, 600.0, 600.0, Weibull(0.7, 3600.0), units=20_000, seed=2)
    assert res.units >= 20_000
    with pytest.raises(ValueError, match="no basic unit completes"):
        simulate_basic_unit(1.0, 100.0, 100.0, Trace(np.arange(1.0, 1000.0)), max_failures=1)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_basic_unit_max_failures_validated(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_failures"):
        simulate_basic_unit(1.0, 1.0, 1.0, 0.1, units=10, max_failures=bad)


@settings(max_examples=200, deadline=None)
@given(
    shape=st.floats(0.3, 5.0),
    mtbf=st.floats(1.0, 1e6),
    start_rel=st.floats(0.0, 60.0),
    step_rel=st.floats(0.1, 10.0),
)
def test_weibull_mean_reach_bounds_the_sum(
    shape: float, mtbf: float, start_rel: float, step_rel: float
) -> None:
    """``mean_reach`` must never underestimate Σ_j P(G ≥ start + j·step) (else the simulator
    could refuse a runnable scenario), and must not overestimate it by more than one term
    (else it would be useless). Checked against a direct sum of 200,000 terms, which in this
    range (step ≥ η/10, shape ≥ 0.3) leaves out less than 1e-4 of the total."""
    w = Weibull(shape, mtbf)
    eta = w.scale
    start, step = start_rel * eta, step_rel * eta
    j = np.arange(200_000, dtype=np.float64)
    direct = float(np.exp(-(((start + j * step) / eta) ** shape)).sum())
    got = w.mean_reach(start, step)
    assert got is not None
    assert got >= direct * (1 - 1e-9)
    assert got <= 1.001 * direct + math.exp(-(((start + 63 * step) / eta) ** shape)) + 1e-300


def test_exponential_mean_reach_is_exact() -> None:
    e = Exponential(0.01)
    j = np.arange(100_000, dtype=np.float64)
    direct = float(np.exp(-0.01 * (50.0 + j * 30.0)).sum())
    assert e.mean_reach(50.0, 30.0) == pytest.approx(direct, rel=1e-12)
    assert Trace([1.0, 2.0]).mean_reach(0.0, 1.0) is None


# ---------------------------------------------------------------- multilevel simulator


def test_multilevel_lambda_c_huge_refused() -> None:
    levels = [Level("L1", 100.0, 100.0, 0.2)]
    with pytest.raises(ValueError, match="failures"):
        simulate_multilevel(levels, nested_schedule(1.0, []), _RefusingExponential(0.2))
    with pytest.raises(ValueError, match=r"max_failures"):
        simulate_multilevel(levels, nested_schedule(1.0, []))
    with pytest.raises(ValueError, match="failures"):
        simulate_multilevel(levels, nested_schedule(1.0, []), _RefusingWeibull(0.7, 5.0))


def test_multilevel_refusal_is_exact_for_poisson() -> None:
    """Poisson: expected failures per period are Λ × the model's expected period time (Wald),
    so the check uses the exact model; 1% above runs, 1% below refuses."""
    levels = [Level("L1", 5.0, 5.0, 1 / 200), Level("L2", 20.0, 30.0, 1 / 800)]
    sched = nested_schedule(60.0, [3])
    periods = 300
    total_rate = 1 / 200 + 1 / 800
    need = periods * total_rate * expected_multilevel(levels, sched).total
    res = simulate_multilevel(levels, sched, periods=periods, seed=4, max_failures=int(need * 1.01))
    assert res.periods == periods
    with pytest.raises(ValueError, match=r"at most \d+ periods"):
        simulate_multilevel(levels, sched, periods=periods, max_failures=int(need * 0.99))
    # An explicit Poisson process sets the frequency; the levels' rates only the mix.
    proc = Exponential(2 * total_rate)
    need2 = (
        periods
        * 2
        * total_rate
        * expected_multilevel(
            [Level(lv.name, lv.ckpt_time, lv.restart_time, 2 * lv.rate) for lv in levels], sched
        ).total
    )
    with pytest.raises(ValueError, match="periods"):
        simulate_multilevel(levels, sched, proc, periods=periods, max_failures=int(need2 * 0.99))
    res = simulate_multilevel(
        levels, sched, proc, periods=periods, seed=1, max_failures=int(need2 * 1.01)
    )
    assert res.periods == periods


def test_multilevel_weibull_reasonable_runs() -> None:
    levels = [Level("L1", 5.0, 5.0, 1 / 3600), Level("L2", 30.0, 40.0, 1 / 14400)]
    res = simulate_multilevel(
        levels, nested_schedule(600.0, [6]), Weibull(0.7, 3000.0), periods=500, seed=5
    )
    assert res.periods == 500


# ---------------------------------------------------------------- powers


def _energy_calls(bad: float, which: int) -> list[Callable[[], object]]:
    powers = [300.0, 200.0, 250.0]
    powers[which] = bad
    W_A, W_C, W_R = powers
    times = sojourn_times(1000.0, 60.0, 60.0, 1e-4)
    return [
        lambda: epe(1000.0, 60.0, 60.0, 1e-4, W_A, W_C, W_R),
        lambda: epe(1000.0, 60.0, 60.0, 1e-4, W_A, W_C, W_R, form="saito2013"),
        lambda: expected_energy(1e6, 1000.0, 60.0, 60.0, 1e-4, W_A, W_C, W_R),
        lambda: unit_energy(times, W_A, W_C, W_R),
        lambda: energy_optimal_interval(60.0, 60.0, 1e-4, W_A, W_C, W_R),
        lambda: interval("energy-optimal", 60.0, 60.0, 1e-4, W_A, W_C, W_R),
    ]


@pytest.mark.parametrize("which", [0, 1, 2])
@pytest.mark.parametrize("bad", BAD_POWERS)
def test_bad_power_refused(bad: float, which: int) -> None:
    name = ("W_A", "W_C", "W_R")[which]
    for call in _energy_calls(bad, which):
        with pytest.raises(ValueError, match=name):
            call()


def test_zero_compute_power_refused_zero_io_power_allowed() -> None:
    """EPE is joules per useful second: a node that draws nothing while computing makes every
    interval equally good (0/0); idle-cheap I/O (W_C = W_R = 0) is a valid, if odd, input."""
    with pytest.raises(ValueError, match="W_A"):
        energy_optimal_interval(60.0, 60.0, 1e-4, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="W_A"):
        epe(1000.0, 60.0, 60.0, 1e-4, 0.0, 1.0, 1.0)
    # Free checkpoints (in joules): checkpoint as often as possible, the documented s <= 0 case.
    assert float(energy_optimal_interval(60.0, 60.0, 1e-4, 300.0, 0.0, 0.0)) == 0.0
    assert float(epe(1000.0, 60.0, 60.0, 1e-4, 300.0, 0.0, 0.0)) > 0


def test_array_with_one_bad_power_refused() -> None:
    with pytest.raises(ValueError, match="W_C"):
        epe(1000.0, 60.0, 60.0, 1e-4, 300.0, np.array([200.0, -1.0]), 250.0)


@settings(max_examples=200, deadline=None)
@given(
    T_C=st.floats(0.0, 1e6),
    T_R=st.floats(0.0, 1e6),
    rate=st.floats(0.0, 10.0),
    good=st.floats(1e-3, 1e5),
    bad=st.sampled_from(BAD_POWERS) | st.floats(max_value=-1e-300, allow_infinity=False),
    which=st.integers(0, 2),
)
def test_bad_power_always_refused(
    T_C: float, T_R: float, rate: float, good: float, bad: float, which: int
) -> None:
    powers = [good, good, good]
    powers[which] = bad
    with pytest.raises(ValueError):
        energy_optimal_interval(T_C, T_R, rate, *powers)
    with pytest.raises(ValueError):
        epe(max(T_C, 1.0), T_C, T_R, rate, *powers)


# ---------------------------------------------------------------- overflow, single level


def test_sojourn_overflow_is_inf_not_nan() -> None:
    """λ(T_A+T_C) = 1000: A overflows to inf; with a free restart (T_R = 0) R is exactly 0."""
    t = sojourn_times(1000.0, 0.0, 0.0, 1.0)
    assert math.isinf(float(t.A)) and float(t.R) == 0.0 and float(t.C) == 0.0
    t = sojourn_times(1.0, 1000.0, 0.0, 1.0, form="saito2013")
    assert float(t.R) == 0.0 and math.isinf(float(t.C))
    # Zero power in an infinitely long state costs nothing, not NaN.
    assert math.isinf(float(epe(1000.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0)))
    assert float(unit_energy(sojourn_times(1.0, 1000.0, 0.0, 1.0), 1.0, 0.0, 1.0)) > 0


def test_energy_optimum_with_overflowing_checkpoint_equals_time_optimum() -> None:
    """Equal powers make the energy and time optima equal. With λT_C ≥ 710 e^{λT_C} overflows;
    the energy optimum was inf (computed from inf/inf = NaN) while the time optimum is 1/λ."""
    for tc in (10.0, 709.0, 710.0, 1e5, 1e300):
        want = float(time_optimal_interval(tc, 1.0))
        assert float(energy_optimal_interval(tc, 0.0, 1.0, 5.0, 5.0, 5.0)) == pytest.approx(want)
        got = float(energy_optimal_interval(tc, 2000.0, 1.0, 5.0, 5.0, 5.0))
        assert got == pytest.approx(want)
        got = float(energy_optimal_interval(tc, 2000.0, 1.0, 5.0, 5.0, 5.0, form="saito2013"))
        assert got == pytest.approx(want)


def test_young_failure_free_and_free_checkpoint_is_inf() -> None:
    assert math.isinf(float(young_interval(0.0, 0.0)))


def test_expected_failures_and_runtime_validate() -> None:
    with pytest.raises(ValueError, match="rate"):
        expected_failures(100.0, 10.0, -1.0)
    with pytest.raises(ValueError, match="T_A"):
        expected_failures(math.nan, 10.0, 1e-3)
    with pytest.raises(ValueError, match="work"):
        expected_runtime(-5.0, 100.0, 10.0, 10.0, 1e-3)
    with pytest.raises(ValueError, match="work"):
        expected_energy(math.nan, 100.0, 10.0, 10.0, 1e-3, 1.0, 1.0, 1.0)


@settings(max_examples=300, deadline=None)
@given(
    T_A=st.floats(1e-6, 1e12),
    T_C=st.floats(0.0, 1e12),
    T_R=st.floats(0.0, 1e12),
    rate=st.floats(0.0, 1e3),
    W=st.tuples(st.floats(1e-3, 1e4), st.floats(0.0, 1e4), st.floats(0.0, 1e4)),
)
def test_single_level_never_nan(
    T_A: float, T_C: float, T_R: float, rate: float, W: tuple[float, float, float]
) -> None:
    for form in ("exact", "saito2013"):
        t = sojourn_times(T_A, T_C, T_R, rate, form=form)  # type: ignore[arg-type]
        assert not np.isnan([t.A, t.C, t.R]).any()
        assert not math.isnan(float(epe(T_A, T_C, T_R, rate, *W, form=form)))  # type: ignore[arg-type]
        x = float(energy_optimal_interval(T_C, T_R, rate, *W, form=form))  # type: ignore[arg-type]
        assert not math.isnan(x) and x >= 0


# ---------------------------------------------------------------- overflow, multilevel


def test_multilevel_overflow_is_inf_not_nan() -> None:
    """Λ(t + C) = 1010 > 709: every state's expectation is inf (or a true 0), never NaN."""
    e = expected_multilevel([Level("L1", 1000.0, 1000.0, 1.0)], nested_schedule(10.0, []))
    values = [e.compute, *e.checkpoint, *e.restart, e.energy, e.total, e.epe, e.time_factor]
    assert not any(math.isnan(v) for v in values)
    assert math.isinf(e.total) and math.isinf(e.energy)


def test_multilevel_overflow_zero_power_state() -> None:
    """An infinite expected restart time at 0 W costs 0 J, not NaN."""
    lv = [Level("L1", 1.0, 1000.0, 1.0, ckpt_power=1.0, restart_power=0.0)]
    e = expected_multilevel(lv, nested_schedule(1.0, []), app_power=1.0)
    assert math.isinf(e.restart[0]) and not math.isnan(e.energy)


def test_multilevel_one_level_still_matches_basic_unit() -> None:
    """The rewritten recursion keeps the one-level reduction to the exact basic unit."""
    for t, c, r, lam in [(100.0, 10.0, 20.0, 1e-3), (1.0, 300.0, 50.0, 0.1), (5.0, 0.0, 0.0, 2.0)]:
        e = expected_multilevel([Level("L", c, r, lam)], nested_schedule(t, []))
        s = sojourn_times(t, c, r, lam)
        assert e.compute == pytest.approx(float(s.A), rel=1e-9)
        assert e.checkpoint[0] == pytest.approx(float(s.C), rel=1e-9)
        assert e.restart[0] == pytest.approx(float(s.R), rel=1e-9)


_times = st.floats(1e-3, 1e7)
_level = st.builds(
    Level,
    name=st.just("L"),
    ckpt_time=st.floats(0.0, 1e7),
    restart_time=st.floats(0.0, 1e7),
    rate=st.floats(1e-9, 1e3),
    ckpt_power=st.floats(0.0, 1e4),
    restart_power=st.floats(0.0, 1e4),
)


@settings(max_examples=300, deadline=None)
@given(
    levels=st.lists(_level, min_size=1, max_size=3),
    work=st.lists(_times, min_size=1, max_size=6),
    app_power=st.floats(0.0, 1e4),
    data=st.data(),
)
def test_expected_multilevel_never_nan(
    levels: list[Level], work: list[float], app_power: float, data: st.DataObject
) -> None:
    """For finite, positive inputs every expectation is a number or +inf, never NaN."""
    top = len(levels) - 1
    lev = data.draw(st.lists(st.integers(0, top), min_size=len(work), max_size=len(work)))
    lev[-1] = top
    sched = Schedule(work=np.array(work), level=np.array(lev, dtype=np.int64))
    e = expected_multilevel(levels, sched, app_power)
    values = [e.compute, *e.checkpoint, *e.restart, e.energy, e.total, e.epe, e.time_factor]
    assert not any(math.isnan(v) for v in values)
    assert all(v >= 0 for v in values)


def test_optimize_multilevel_refuses_when_every_interval_overflows() -> None:
    """Failures every second against 1000 s checkpoints: every candidate's expected time is
    inf. The optimizer returned its starting interval with a NaN expectation; now it refuses."""
    with pytest.raises(ValueError, match="no schedule"):
        optimize_multilevel([Level("L1", 1000.0, 1000.0, 1.0)])


def test_optimize_multilevel_near_overflow_is_finite() -> None:
    """Part of the search grid overflows, part does not: the plan is finite."""
    plan = optimize_multilevel([Level("L1", 300.0, 300.0, 1.0)], objective="time")
    assert math.isfinite(plan.expectation.total) and plan.base_interval > 0
