"""Tests for greenckpt.sim: the simulators against the analytic model, hand-computed traces and
naive step-by-step reference simulations; bad input. Every seed is fixed, so nothing is flaky."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenckpt.model import (
    Level,
    Schedule,
    expected_multilevel,
    fti_schedule,
    nested_schedule,
    sojourn_times,
    unit_energy,
    young_interval,
)
from greenckpt.sim import (
    Estimate,
    Exponential,
    Trace,
    Weibull,
    gap_state_times,
    replay_multilevel,
    simulate_basic_unit,
    simulate_multilevel,
)
from greenckpt.sim.stats import Moments, mean_estimate, ratio_estimate

CONF = 0.999
W_A, W_C, W_R = 120.0, 180.0, 90.0


# --------------------------------------------------------------------------- reference simulators


def reference_basic_unit(
    T_A: float, T_C: float, T_R: float, times: Sequence[float], horizon: float
) -> tuple[float, float, float, int]:
    """Walk phase by phase through a trace: seconds in A, C, R and units completed.

    A phase that ends exactly when a failure strikes completes first.
    """
    t, units = 0.0, 0
    spent = {"A": 0.0, "C": 0.0, "R": 0.0}
    state, left = "A", float(T_A)
    i = 0
    while True:
        fail = times[i] if i < len(times) else math.inf
        nxt = min(fail, horizon)
        if t + left <= nxt:  # the phase completes
            spent[state] += left
            t += left
            if state == "A":
                state, left = "C", T_C
            else:  # C done: one more unit; R done: redo the unit
                units += state == "C"
                state, left = "A", T_A
            continue
        spent[state] += nxt - t
        t = nxt
        if fail > horizon:
            return spent["A"], spent["C"], spent["R"], units
        i += 1
        state, left = "R", T_R


@dataclass
class _RefTotals:
    compute: float
    ckpt: list[float]
    restart: list[float]
    periods: int
    wall: float


def reference_multilevel(
    levels: Sequence[Level],
    schedule: Schedule,
    times: Sequence[float],
    severity: Sequence[int],
    horizon: float,
) -> _RefTotals:
    """Walk phase by phase, keeping the set of stored checkpoints literally.

    A failure of level s destroys every checkpoint below level s and recovers from the newest
    one left (the job start counts as a top-level checkpoint); a failure during a restart
    restarts at the more severe level. Totals are taken at the last completed period.
    """
    n_levels = len(levels)
    work = [float(w) for w in schedule.work]
    lev = [int(x) for x in schedule.level]
    n = len(work)
    top = n_levels - 1
    stored: list[tuple[int, int]] = [(-1, top)]  # (global event index, level)
    comp, ck, rs = 0.0, [0.0] * n_levels, [0.0] * n_levels
    snapshot = _RefTotals(0.0, [0.0] * n_levels, [0.0] * n_levels, 0, 0.0)
    t, g = 0.0, 0  # clock, global index of the event in progress
    phase, left = "work", work[0]
    r_level = 0
    failures = [*times, math.inf]
    i = 0
    while True:
        nxt = min(failures[i], horizon)
        if t + left <= nxt:
            t += left
            if phase == "work":
                comp += left
                phase, left = "ckpt", levels[lev[g % n]].ckpt_time
            elif phase == "ckpt":
                ck[lev[g % n]] += left
                stored.append((g, lev[g % n]))
                if g % n == n - 1:
                    snapshot = _RefTotals(comp, list(ck), list(rs), g // n + 1, t)
                g += 1
                phase, left = "work", work[g % n]
            else:  # restart done: resume after the newest stored checkpoint
                rs[r_level] += left
                g = stored[-1][0] + 1
                phase, left = "work", work[g % n]
            continue
        spent = nxt - t
        t = nxt
        if phase == "work":
            comp += spent
        elif phase == "ckpt":
            ck[lev[g % n]] += spent
        else:
            rs[r_level] += spent
        if failures[i] > horizon:
            return snapshot
        s = int(severity[i])
        i += 1
        r_level = max(s, r_level) if phase == "restart" else s
        stored = [(j, lv) for j, lv in stored if lv >= s]
        phase, left = "restart", levels[r_level].restart_time


# ------------------------------------------------------------------------------------- processes


def test_exponential_and_weibull_means() -> None:
    rng = np.random.default_rng(7)
    n = 400_000
    for proc in (Exponential(1 / 300.0), Weibull(1.0, 300.0), Weibull(0.6, 300.0), Weibull(3, 300)):
        gaps = proc.draw(rng, n)
        se = gaps.std() / math.sqrt(n)
        assert abs(gaps.mean() - 300.0) < 4 * se, proc
        assert proc.mean_gap == pytest.approx(300.0)
    assert Weibull(1.0, 300.0).scale == pytest.approx(300.0)
    assert Weibull(2.0, 300.0).scale == pytest.approx(300.0 / math.gamma(1.5))


def test_trace_gaps_and_stretch() -> None:
    tr = Trace([3.0, 3.0, 10.0], horizon=14.0)
    assert tr.gaps().tolist() == [3.0, 0.0, 7.0]
    assert tr.final_stretch == 4.0
    assert tr.horizon == 14.0
    assert not tr.renewal
    assert Trace([5.0]).final_stretch == 0.0
    stream = tr.stream(np.random.default_rng(0))
    assert stream.take(2).tolist() == [3.0, 0.0]
    assert stream.take(5).tolist() == [7.0]
    assert stream.take(5).size == 0


# ------------------------------------------------------------------------------ the gap kernel


def test_gap_kernel_by_hand() -> None:
    gaps = np.array([30.0, 2.0, 18.0, 20.0])
    out = gap_state_times(gaps, 10.0, 2.0, 3.0, first_restarts=False)
    assert out.tolist() == [
        [26.0, 4.0, 0.0, 2.0],  # 2 units, then 6 s of lost A
        [0.0, 0.0, 2.0, 0.0],  # failure during the restart
        [13.0, 2.0, 3.0, 1.0],  # restart, 1 unit, 3 s lost
        [15.0, 2.0, 3.0, 1.0],  # restart, 1 unit, 5 s lost
    ]
    out = gap_state_times(np.array([25.0]), 10.0, 2.0, 3.0, first_restarts=True)
    assert out.tolist() == [[10.0 + 10.0, 2.0, 3.0, 1.0]]  # R, 1 unit, all of A lost
    out = gap_state_times(np.array([21.0]), 10.0, 2.0, 3.0, first_restarts=True)
    assert out.tolist() == [[10.0 + 6.0, 2.0, 3.0, 1.0]]


@given(
    gaps=st.lists(st.floats(0.0, 1e4, allow_nan=False), min_size=1, max_size=50),
    T_A=st.floats(1e-3, 1e3),
    T_C=st.floats(0.0, 1e3),
    T_R=st.floats(0.0, 1e3),
    first=st.booleans(),
)
def test_gap_kernel_invariants(
    gaps: list[float], T_A: float, T_C: float, T_R: float, first: bool
) -> None:
    g = np.array(gaps)
    out = gap_state_times(g, T_A, T_C, T_R, first_restarts=first)
    a, c, r, u = out.T
    assert np.all(out >= 0)
    assert np.allclose(a + c + r, g, rtol=1e-9, atol=1e-9)
    assert np.all(u == np.floor(u))
    assert np.all(r <= T_R)
    if not first:
        assert r[0] == 0.0
    # lost work is less than one unit and C only after all of A
    lost = a + c - u * (T_A + T_C)
    assert np.all(lost <= T_A + T_C + 1e-9 * (1 + g))
    assert np.all((c - u * T_C <= 1e-9 * (1 + g)) | (a - u * T_A >= T_A - 1e-9 * (1 + g)))


# -------------------------------------------------------------------- basic unit: hand traces


def test_basic_unit_hand_trace() -> None:
    # T_A = 10, T_C = 2, T_R = 3. Failures at 30, 32, 50; the run stops at 70.
    #   [0, 30):  A 0-10, C 10-12, A 12-22, C 22-24 (2 units), A 24-30 lost
    #   [30, 32): R, struck at 32
    #   [32, 50): R 32-35, A 35-45, C 45-47 (1 unit), A 47-50 lost
    #   [50, 70): R 50-53, A 53-63, C 63-65 (1 unit), A 65-70 in progress at the horizon
    res = simulate_basic_unit(10, 2, 3, Trace([30, 32, 50], horizon=70), W_A=5, W_C=7, W_R=11)
    assert (res.units, res.failures, res.wall_time) == (4, 3, 70.0)
    assert res.A.mean == pytest.approx(54 / 4, rel=1e-12)
    assert res.C.mean == pytest.approx(8 / 4, rel=1e-12)
    assert res.R.mean == pytest.approx(8 / 4, rel=1e-12)
    assert res.total.mean == pytest.approx(70 / 4, rel=1e-12)
    assert res.energy.mean == pytest.approx((54 * 5 + 8 * 7 + 8 * 11) / 4, rel=1e-12)
    assert res.epe.mean == pytest.approx(res.energy.mean / 10, rel=1e-12)
    assert res.time_factor.mean == pytest.approx(70 / 40, rel=1e-12)
    assert not res.iid_samples
    assert res.energy_source == "modelled"

    # default horizon: the last failure; nothing assumed after it
    res = simulate_basic_unit(10, 2, 3, Trace([30, 32, 50]))
    assert (res.units, res.failures, res.wall_time) == (3, 3, 50.0)
    assert (res.A.mean, res.C.mean, res.R.mean) == pytest.approx((39 / 3, 6 / 3, 5 / 3))

    # stop at the end of the gap in which the 2nd unit completes
    res = simulate_basic_unit(10, 2, 3, Trace([30, 32, 50], horizon=70), units=2)
    assert (res.units, res.failures, res.wall_time) == (2, 1, 30.0)
    assert (res.A.mean, res.C.mean, res.R.mean) == pytest.approx((13.0, 2.0, 0.0))

    # no failure at all: the first stretch has no restart
    res = simulate_basic_unit(10, 2, 3, Trace([], horizon=30))
    assert (res.units, res.failures) == (2, 0)
    assert (res.A.mean, res.C.mean, res.R.mean) == pytest.approx((13.0, 2.0, 0.0))
    assert math.isinf(res.A.stderr)  # one sample: no error estimate


@settings(max_examples=200, deadline=None)
@given(
    T_A=st.integers(1, 6),
    T_C=st.integers(0, 4),
    T_R=st.integers(0, 4),
    times=st.lists(st.integers(0, 80), max_size=25),
    extra=st.integers(0, 40),
)
def test_basic_unit_matches_step_by_step_replay(
    T_A: int, T_C: int, T_R: int, times: list[int], extra: int
) -> None:
    # integer times make ties (a failure exactly at the end of a phase) exact and frequent
    times.sort()
    horizon = (times[-1] if times else 0) + extra
    if horizon == 0:
        return
    a, c, r, units = reference_basic_unit(T_A, T_C, T_R, times, horizon)
    trace = Trace(times, horizon=horizon)
    if units == 0:
        with pytest.raises(ValueError, match="no basic unit completes"):
            simulate_basic_unit(T_A, T_C, T_R, trace)
        return
    res = simulate_basic_unit(T_A, T_C, T_R, trace)
    assert res.units == units
    assert res.failures == len(times)
    assert res.wall_time == horizon
    assert res.A.mean * units == pytest.approx(a, rel=1e-9, abs=1e-9)
    assert res.C.mean * units == pytest.approx(c, rel=1e-9, abs=1e-9)
    assert res.R.mean * units == pytest.approx(r, rel=1e-9, abs=1e-9)


# -------------------------------------------------------------- basic unit: against the model

MTBF_14H = 14 * 3600.0
T_C_SAITO = 64 * 2**30 / 500e6
T_R_SAITO = 64 * 2**30 / 700e6
T_A_SAITO = float(young_interval(T_C_SAITO, 1 / MTBF_14H))

GRID = [
    # (T_A, T_C, T_R, rate, units): λ(T_A+T_C) from 1e-3 to 3
    pytest.param(T_A_SAITO, T_C_SAITO, T_R_SAITO, 1 / MTBF_14H, 1_000_000, id="saito2013-young"),
    pytest.param(10.0, 1.0, 2.0, 1e-4, 2_000_000, id="rare-lx=1e-3"),
    pytest.param(1.0, 0.5, 0.3, 2 / 3, 400_000, id="lx=1"),
    pytest.param(0.5, 1.5, 1.0, 1.0, 200_000, id="long-ckpt-lx=2"),
    pytest.param(1.0, 2.0, 0.5, 1.0, 100_000, id="long-ckpt-lx=3"),
    pytest.param(2.5, 0.2, 0.8, 1.0, 100_000, id="long-compute-lx=2.7"),
    pytest.param(1.0, 0.0, 0.0, 0.5, 200_000, id="free-ckpt-and-restart"),
]


@pytest.mark.parametrize(("T_A", "T_C", "T_R", "rate", "units"), GRID)
def test_basic_unit_within_ci_of_exact_model(
    T_A: float, T_C: float, T_R: float, rate: float, units: int
) -> None:
    res = simulate_basic_unit(
        T_A, T_C, T_R, rate, W_A=W_A, W_C=W_C, W_R=W_R, units=units, seed=11, confidence=CONF
    )
    exact = sojourn_times(T_A, T_C, T_R, rate, form="exact")
    energy = float(unit_energy(exact, W_A, W_C, W_R))
    assert res.units >= units
    assert res.iid_samples
    assert res.confidence == CONF
    for name, value in (
        ("A", exact.A),
        ("C", exact.C),
        ("R", exact.R),
        ("total", exact.total),
        ("energy", energy),
    ):
        est: Estimate = getattr(res, name)
        assert est.contains(float(value)), (name, float(value), est)
    assert res.epe.contains(energy / T_A)
    assert res.time_factor.contains(float(exact.total) / T_A)
    # the estimates are consistent with each other
    assert res.total.mean == pytest.approx(res.A.mean + res.C.mean + res.R.mean, rel=1e-12)
    assert res.energy.mean == pytest.approx(
        W_A * res.A.mean + W_C * res.C.mean + W_R * res.R.mean, rel=1e-12
    )
    assert res.wall_time == pytest.approx(res.total.mean * res.units, rel=1e-9)


def test_saito2013_form_outside_ci_when_lambda_T_A_is_large() -> None:
    # λT_A = 2: the paper books the restarts caused by failures in A under A
    T_A, T_C, T_R, rate = 2.0, 0.3, 0.5, 1.0
    res = simulate_basic_unit(
        T_A, T_C, T_R, rate, W_A=W_A, W_C=W_C, W_R=W_R, units=200_000, seed=3, confidence=CONF
    )
    paper = sojourn_times(T_A, T_C, T_R, rate, form="saito2013")
    exact = sojourn_times(T_A, T_C, T_R, rate, form="exact")
    assert not res.A.contains(float(paper.A))
    assert float(paper.A) > res.A.ci_high  # too much time in A ...
    assert not res.R.contains(float(paper.R))
    assert float(paper.R) < res.R.ci_low  # ... and too little in R
    assert res.C.contains(float(paper.C))  # C is the same in both forms
    assert res.total.contains(float(paper.total))  # the totals agree
    assert float(paper.total) == pytest.approx(float(exact.total), rel=1e-12)
    # so the energy is off too unless W_A == W_R
    assert not res.energy.contains(float(unit_energy(paper, W_A, W_C, W_R)))
    same = simulate_basic_unit(
        T_A, T_C, T_R, rate, W_A=100, W_C=W_C, W_R=100, units=200_000, seed=3, confidence=CONF
    )
    assert same.energy.contains(float(unit_energy(paper, 100, W_C, 100)))


def test_basic_unit_is_deterministic_given_seed() -> None:
    args = (1.0, 0.5, 0.3, Exponential(0.5))
    one = simulate_basic_unit(*args, units=50_000, seed=5)
    two = simulate_basic_unit(*args, units=50_000, seed=np.random.default_rng(5))
    other = simulate_basic_unit(*args, units=50_000, seed=6)
    assert one == two
    assert one != other


# ----------------------------------------------------------------------------------- Weibull


def test_weibull_shape_one_is_exponential() -> None:
    T_A, T_C, T_R, rate = 1.0, 0.5, 0.3, 2 / 3
    weib = simulate_basic_unit(
        T_A, T_C, T_R, Weibull(1.0, 1 / rate), units=400_000, seed=21, confidence=CONF
    )
    expo = simulate_basic_unit(
        T_A, T_C, T_R, Exponential(rate), units=400_000, seed=22, confidence=CONF
    )
    exact = sojourn_times(T_A, T_C, T_R, rate)
    for name in ("A", "C", "R", "total"):
        w: Estimate = getattr(weib, name)
        e: Estimate = getattr(expo, name)
        assert w.contains(float(getattr(exact, name)))
        # the two simulations agree with each other within their combined error
        assert abs(w.mean - e.mean) < 3.3 * math.hypot(w.stderr, e.stderr)
    assert weib.iid_samples


def test_weibull_shape_below_one_runs_and_reports() -> None:
    T_A, T_C, T_R, mtbf = 1.0, 0.5, 0.3, 1.5
    res = simulate_basic_unit(
        T_A, T_C, T_R, Weibull(0.5, mtbf), W_A=W_A, W_C=W_C, W_R=W_R, units=200_000, seed=4
    )
    assert res.units >= 200_000
    for est in (res.A, res.C, res.R, res.total, res.energy, res.epe):
        assert math.isfinite(est.mean) and est.stderr > 0
        assert est.ci_low < est.mean < est.ci_high
    assert res.A.mean >= T_A and res.C.mean >= T_C
    assert res.total.mean == pytest.approx(res.A.mean + res.C.mean + res.R.mean)
    # clustered failures (same MTBF) hit fewer units than Poisson ones do
    poisson = sojourn_times(T_A, T_C, T_R, 1 / mtbf)
    assert res.total.ci_high < float(poisson.total)


# ------------------------------------------------------------------------------- statistics


@settings(max_examples=50, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.floats(-1e3, 1e3), st.floats(0, 1e3), st.floats(0, 10)),
        min_size=2,
        max_size=60,
    ),
    cut=st.integers(0, 60),
)
def test_moments_merge_equals_one_pass(data: list[tuple[float, float, float]], cut: int) -> None:
    rows = np.array(data)
    m = Moments(3)
    m.add(rows[:cut])
    m.add(rows[cut:])
    assert m.count == len(rows)
    assert np.allclose(m.mean, rows.mean(axis=0), rtol=1e-9, atol=1e-9)
    centred = rows - rows.mean(axis=0)
    assert np.allclose(m.comoment, centred.T @ centred, rtol=1e-7, atol=1e-6)


def test_ratio_and_mean_estimates_by_hand() -> None:
    rows = np.array([[2.0, 1.0], [4.0, 1.0], [9.0, 2.0]])
    m = Moments(2)
    m.add(rows)
    est = ratio_estimate(m, [1.0, 0.0], 1, 0.95)
    assert est.mean == pytest.approx(15 / 4)
    resid = rows[:, 0] - 15 / 4 * rows[:, 1]
    assert est.stderr == pytest.approx(math.sqrt((resid**2).sum() / 6) / (4 / 3))
    assert est.ci_low < est.mean < est.ci_high
    mean = mean_estimate(m, [1.0, 0.0], 0.95, scale=2.0)
    assert mean.mean == pytest.approx(5 / 2)
    assert mean.stderr == pytest.approx(rows[:, 0].std(ddof=1) / math.sqrt(3) / 2)
    m.add_repeated([5.0, 1.0], 3)
    assert m.count == 6
    assert m.mean[0] == pytest.approx(30 / 6)


# --------------------------------------------------------------------------------- multilevel


def assert_matches_model(
    levels: Sequence[Level], schedule: Schedule, app_power: float, *, periods: int, seed: int
) -> None:
    res = simulate_multilevel(
        levels, schedule, None, app_power, periods=periods, seed=seed, confidence=CONF
    )
    exp = expected_multilevel(levels, schedule, app_power)
    work = exp.work
    assert res.periods == periods
    assert res.period_work == pytest.approx(work)
    assert res.iid_samples
    assert res.compute.contains(exp.compute / work), (res.compute, exp.compute / work)
    for i in range(len(levels)):
        assert res.checkpoint[i].contains(exp.checkpoint[i] / work), (i, res.checkpoint[i])
        assert res.restart[i].contains(exp.restart[i] / work), (i, res.restart[i])
    assert res.time_factor.contains(exp.time_factor), (res.time_factor, exp.time_factor)
    assert res.epe.contains(exp.epe), (res.epe, exp.epe)
    parts = res.compute.mean + sum(e.mean for e in res.checkpoint + res.restart)
    assert res.time_factor.mean == pytest.approx(parts, rel=1e-12)
    assert res.wall_time == pytest.approx(res.time_factor.mean * res.work, rel=1e-9)
    assert sum(res.failures_by_level) == res.failures > 0


def test_multilevel_two_level_nested_matches_model() -> None:
    levels = [
        Level("L1", 2.0, 3.0, 1 / 200, ckpt_power=150.0, restart_power=110.0),
        Level("L4", 10.0, 20.0, 1 / 2000, ckpt_power=200.0, restart_power=130.0),
    ]
    assert_matches_model(levels, nested_schedule(30.0, [4]), 100.0, periods=30_000, seed=1)


def test_multilevel_fti_four_levels_matches_model() -> None:
    # wu2018's ckp(3,5,7,11), in seconds instead of minutes, with failures every ~2 min
    levels = [
        Level("L1", 0.2, 0.3, 0.004, ckpt_power=130.0, restart_power=115.0),
        Level("L2", 0.5, 1.0, 0.002, ckpt_power=140.0, restart_power=120.0),
        Level("L3", 1.0, 2.0, 0.001, ckpt_power=160.0, restart_power=125.0),
        Level("L4", 3.0, 5.0, 0.0005, ckpt_power=190.0, restart_power=135.0),
    ]
    assert_matches_model(levels, fti_schedule([3, 5, 7, 11]), 100.0, periods=3_000, seed=2)


def test_multilevel_fti_three_levels_frequent_failures_matches_model() -> None:
    levels = [
        Level("L1", 0.5, 0.5, 0.05, ckpt_power=2.0, restart_power=3.0),
        Level("L2", 1.0, 1.5, 0.03, ckpt_power=2.5, restart_power=3.5),
        Level("L3", 2.0, 3.0, 0.02, ckpt_power=3.0, restart_power=4.0),
    ]
    assert_matches_model(levels, fti_schedule([2, 4, 8]), 1.0, periods=20_000, seed=3)


def test_multilevel_rare_failures_matches_model() -> None:
    # most periods see no failure: they are booked in bulk
    levels = [Level("L1", 1.0, 2.0, 1e-4), Level("L2", 5.0, 8.0, 2e-5)]
    assert_matches_model(levels, nested_schedule(20.0, [5]), 1.0, periods=200_000, seed=4)


def test_multilevel_single_level_equals_basic_unit() -> None:
    T_A, T_C, T_R, rate = 1.0, 0.5, 0.3, 2 / 3
    level = Level("L1", T_C, T_R, rate, ckpt_power=W_C, restart_power=W_R)
    schedule = Schedule(np.array([T_A]), np.array([0]))
    ml = simulate_multilevel([level], schedule, None, W_A, periods=100_000, seed=8)
    bu = simulate_basic_unit(T_A, T_C, T_R, rate, W_A=W_A, W_C=W_C, W_R=W_R, units=100_000, seed=8)
    # same seed, same failure times: the two estimates differ only by where each run stops
    pairs = [
        (ml.compute, bu.A),
        (ml.checkpoint[0], bu.C),
        (ml.restart[0], bu.R),
        (ml.time_factor, bu.time_factor),
        (ml.epe, bu.epe),
    ]
    for m, b in pairs:
        assert m.mean * T_A == pytest.approx(b.mean, rel=1e-4)
        assert m.stderr * T_A == pytest.approx(b.stderr, rel=0.2)
    exact = sojourn_times(T_A, T_C, T_R, rate)
    assert ml.time_factor.contains(float(exact.total) / T_A)
    model = expected_multilevel([level], schedule, W_A)
    assert model.total == pytest.approx(float(exact.total), rel=1e-12)
    assert model.energy == pytest.approx(float(unit_energy(exact, W_A, W_C, W_R)), rel=1e-12)


def test_multilevel_weibull_shape_one_matches_model() -> None:
    levels = [Level("L1", 1.0, 1.0, 0.02), Level("L2", 3.0, 4.0, 0.01)]
    schedule = nested_schedule(8.0, [3])
    res = simulate_multilevel(
        levels, schedule, Weibull(1.0, 1 / 0.03), periods=20_000, seed=9, confidence=CONF
    )
    exp = expected_multilevel(levels, schedule)
    assert res.time_factor.contains(exp.time_factor)
    assert res.restart[1].contains(exp.restart[1] / exp.work)
    assert not res.iid_samples  # only Poisson failures make periods independent
    # the severities follow the rates' mix (2:1)
    share = res.failures_by_level[0] / res.failures
    assert abs(share - 2 / 3) < 4 * math.sqrt(2 / 9 / res.failures)
    clustered = simulate_multilevel(levels, schedule, Weibull(0.6, 1 / 0.03), periods=5_000, seed=9)
    assert math.isfinite(clustered.epe.mean) and clustered.periods == 5_000


def test_multilevel_deterministic_given_seed() -> None:
    levels = [Level("L1", 1.0, 1.0, 0.02), Level("L2", 3.0, 4.0, 0.01)]
    schedule = nested_schedule(8.0, [3])
    one = simulate_multilevel(levels, schedule, periods=2_000, seed=5)
    two = simulate_multilevel(levels, schedule, periods=2_000, seed=5)
    assert one == two
    assert one != simulate_multilevel(levels, schedule, periods=2_000, seed=6)


HAND_LEVELS = [Level("L1", 1.0, 3.0, 1.0), Level("L2", 2.0, 4.0, 1.0)]
HAND_SCHEDULE = Schedule(np.array([10.0, 10.0, 10.0, 10.0]), np.array([0, 1, 0, 1]))
# Failure-free layout: e0 [0, 11) = work 0-10, L1 ckpt 10-11; e1 [11, 23) = work 11-21,
# L2 ckpt 21-23; e2 [23, 34); e3 [34, 46). A period lasts 46 s and does 40 s of work.


def test_multilevel_replay_by_hand_escalating_restart() -> None:
    # 39 L1: at 39 in e3's work (5 s in): back to e3's start (34), restart L1 39-42
    # 41 L2: strikes the restart: escalate to L2, back to after e1 (23), restart L2 41-45
    # 56 L1: run 45-56 reaches exactly 34 = e3's start: e2 completed, nothing lost; R 56-59
    # 70 L1: run 59-70 reaches 45, in e3's L2 checkpoint (1 s in): lose 10 s work + 1 s ckpt
    #        restart L1 70-73, then 34 -> 46 completes the period at 85; horizon 90.
    res = replay_multilevel(
        HAND_LEVELS, HAND_SCHEDULE, Trace([39, 41, 56, 70], horizon=90), [0, 1, 0, 0]
    )
    compute = 40 + 5 + 10 + 0 + 10  # the period's work, and work thrown away
    ckpt = (2 + 1, 4 + 1)  # the period's checkpoints, and e2's L1 and e3's partial L2
    restart = (2 + 3 + 3, 4)
    assert (res.periods, res.failures, res.failures_by_level) == (1, 4, (3, 1))
    assert res.wall_time == 85.0
    assert res.compute.mean == pytest.approx(compute / 40)
    assert tuple(e.mean for e in res.checkpoint) == pytest.approx(tuple(c / 40 for c in ckpt))
    assert tuple(e.mean for e in res.restart) == pytest.approx(tuple(r / 40 for r in restart))
    assert res.time_factor.mean == pytest.approx(85 / 40)
    assert not res.iid_samples


def test_multilevel_replay_by_hand_restart_struck_twice() -> None:
    # 30 L1 in e2 (7 s in): back to 23, restart L1 30-; 31 L2 strikes it: L2's rollback point
    # from e2 is also 23, restart L2 31-; 33 L2 strikes it again: restart L2 33-37; run
    # 23 -> 26 until 40 L2: back to 23, restart L2 40-44, run 23 -> 46 by 67.
    res = replay_multilevel(
        HAND_LEVELS, HAND_SCHEDULE, Trace([30, 31, 33, 40], horizon=67), [0, 1, 1, 1]
    )
    assert (res.periods, res.failures, res.wall_time) == (1, 4, 67.0)
    assert res.compute.mean == pytest.approx((40 + 7 + 3) / 40)
    assert tuple(e.mean for e in res.checkpoint) == pytest.approx((2 / 40, 4 / 40))
    assert tuple(e.mean for e in res.restart) == pytest.approx((1 / 40, (2 + 4 + 4) / 40))


def test_multilevel_trace_with_drawn_severities() -> None:
    # rates (1, 0): every failure is L1, so the drawn severities are known
    levels = [Level("L1", 1.0, 3.0, 1.0), Level("L2", 2.0, 4.0, 0.0)]
    schedule = Schedule(np.array([10.0, 10.0]), np.array([0, 1]))
    # 5: back to 0, R 5-8, run 0 -> 12 by 20; 20: in e1 (1 s in): back to 11; R 20-21,
    # struck at 21: R 21-24, run 11 -> 23 by 36 (period complete); the rest is discarded
    res = simulate_multilevel(levels, schedule, Trace([5, 20, 21], horizon=40), seed=0)
    assert (res.periods, res.failures, res.wall_time) == (1, 3, 36.0)
    assert res.compute.mean == pytest.approx(26 / 20)
    assert tuple(e.mean for e in res.restart) == pytest.approx((7 / 20, 0.0))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_multilevel_replay_matches_literal_reference(data: st.DataObject) -> None:
    n_levels = data.draw(st.integers(1, 3))
    levels = [
        Level(
            f"L{i + 1}",
            float(data.draw(st.integers(0, 3))),
            float(data.draw(st.integers(0, 4))),
            1.0,
        )
        for i in range(n_levels)
    ]
    n_events = data.draw(st.integers(1, 6))
    lev = [data.draw(st.integers(0, n_levels - 1)) for _ in range(n_events - 1)] + [n_levels - 1]
    work = [float(data.draw(st.integers(0, 5))) for _ in range(n_events)]
    if sum(work) == 0:
        with pytest.raises(ValueError, match="must contain some work"):
            Schedule(np.array(work), np.array(lev, dtype=np.int64))
        return
    schedule = Schedule(np.array(work), np.array(lev, dtype=np.int64))
    times = sorted(data.draw(st.lists(st.integers(0, 60), max_size=15)))
    severity = [data.draw(st.integers(0, n_levels - 1)) for _ in times]
    horizon = (times[-1] if times else 0) + data.draw(st.integers(1, 60))
    ref = reference_multilevel(levels, schedule, times, severity, horizon)
    trace = Trace(times, horizon=horizon)
    if ref.periods == 0:
        with pytest.raises(ValueError, match="no checkpoint period completes"):
            replay_multilevel(levels, schedule, trace, severity)
        return
    res = replay_multilevel(levels, schedule, trace, severity)
    work_done = res.work
    assert res.periods == ref.periods
    assert res.wall_time == pytest.approx(ref.wall)
    assert res.compute.mean * work_done == pytest.approx(ref.compute, abs=1e-9)
    for i in range(n_levels):
        assert res.checkpoint[i].mean * work_done == pytest.approx(ref.ckpt[i], abs=1e-9)
        assert res.restart[i].mean * work_done == pytest.approx(ref.restart[i], abs=1e-9)


# --------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Exponential(0.0), r"rate must be > 0 .*got 0\.0"),
        (lambda: Exponential(-1.0), r"rate must be > 0 .*got -1\.0"),
        (lambda: Exponential(math.nan), r"rate must be finite, got nan"),
        (lambda: Exponential(math.inf), r"rate must be finite, got inf"),
        (lambda: Exponential.from_mtbf(0.0), r"mtbf must be > 0 .*got 0\.0"),
        (lambda: Weibull(0.0, 10.0), r"shape must be > 0 .*got 0\.0"),
        (lambda: Weibull(-0.5, 10.0), r"shape must be > 0 .*got -0\.5"),
        (lambda: Weibull(math.nan, 10.0), r"shape must be finite, got nan"),
        (lambda: Weibull(0.7, -3.0), r"mtbf must be > 0 .*got -3\.0"),
        (lambda: Trace([5.0, 3.0, 9.0]), r"sorted, got 5\.0 before 3\.0"),
        (lambda: Trace([-1.0, 3.0]), r">= 0 seconds, got -1\.0"),
        (lambda: Trace([1.0, math.nan]), r"finite, got nan"),
        (lambda: Trace([1.0, 8.0], horizon=5.0), r"horizon must be >= the last failure .*got 5\.0"),
        (lambda: Trace([]), r"empty trace needs a horizon"),
        (lambda: simulate_basic_unit(-1.0, 1.0, 1.0, 0.1), r"T_A must be > 0 .*got -1\.0"),
        (lambda: simulate_basic_unit(0.0, 1.0, 1.0, 0.1), r"T_A must be > 0 .*got 0\.0"),
        (lambda: simulate_basic_unit(1.0, -2.0, 1.0, 0.1), r"T_C must be >= 0 .*got -2\.0"),
        (lambda: simulate_basic_unit(1.0, 1.0, math.nan, 0.1), r"T_R must be finite, got nan"),
        (lambda: simulate_basic_unit(1.0, 1.0, 1.0, 0.0), r"rate must be > 0 .*got 0\.0"),
        (lambda: simulate_basic_unit(1.0, 1.0, 1.0, math.nan), r"rate must be finite, got nan"),
        (lambda: simulate_basic_unit(1.0, 1.0, 1.0, 0.1, W_C=-5.0), r"W_C must be >= 0 watts"),
        (lambda: simulate_basic_unit(1.0, 1.0, 1.0, 0.1, units=0), r"units must be .*got 0"),
        (lambda: simulate_basic_unit(1, 1, 1, 0.1, confidence=1.0), r"confidence .*got 1\.0"),
        (lambda: simulate_basic_unit(5, 1, 1, Trace([2.0, 4.0])), r"no basic unit completes"),
        (
            lambda: simulate_multilevel(HAND_LEVELS[:1], HAND_SCHEDULE),
            r"the schedule names level 2, but only 1 level\(s\) are configured",
        ),
        (
            lambda: simulate_multilevel(
                HAND_LEVELS, Schedule(np.array([1.0, 1.0]), np.array([1, 0])), periods=5
            ),
            r"a period must end|top level",
        ),
        (
            lambda: simulate_multilevel(
                [Level("L1", 1, 1, 0.0)], Schedule(np.array([1.0]), np.array([0]))
            ),
            r"rates must sum to > 0 .*got 0\.0",
        ),
        (
            lambda: simulate_multilevel(HAND_LEVELS, HAND_SCHEDULE, app_power=math.nan),
            r"app_power must be finite and >= 0 watts, got nan",
        ),
        (
            lambda: simulate_multilevel(HAND_LEVELS, HAND_SCHEDULE, periods=-3),
            r"periods must be .*got -3",
        ),
        (
            lambda: replay_multilevel(HAND_LEVELS, HAND_SCHEDULE, Trace([1.0, 2.0]), [0, 2]),
            r"severity must be level indices in 0\.\.1",
        ),
        (
            lambda: replay_multilevel(HAND_LEVELS, HAND_SCHEDULE, Trace([1.0, 2.0]), [0]),
            r"one level per failure \(2\)",
        ),
    ],
)
def test_bad_input_raises_one_line_value_error(make: object, match: str) -> None:
    assert callable(make)
    with pytest.raises(ValueError, match=match) as info:
        make()
    assert "\n" not in str(info.value)
