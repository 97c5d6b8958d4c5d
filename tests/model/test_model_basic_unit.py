"""Properties of the basic-unit model: totals, limits, monotonicity, and the two forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greenckpt.model import (
    Level,
    epe,
    expected_failures,
    expected_multilevel,
    expected_unit_time,
    nested_schedule,
    overhead,
    sojourn_times,
    time_factor,
)

seconds = st.floats(min_value=1.0, max_value=2e5)
rates = st.floats(min_value=1e-9, max_value=1e-3)
watts = st.floats(min_value=1.0, max_value=2000.0)


@settings(max_examples=200, deadline=None)
@given(T_A=seconds, T_C=seconds, T_R=seconds, lam=rates)
def test_both_forms_have_the_same_total(T_A: float, T_C: float, T_R: float, lam: float) -> None:
    exact = sojourn_times(T_A, T_C, T_R, lam)
    paper = sojourn_times(T_A, T_C, T_R, lam, form="saito2013")
    want = expected_unit_time(T_A, T_C, T_R, lam)
    assert exact.total == pytest.approx(want, rel=1e-10)
    assert paper.total == pytest.approx(want, rel=1e-10)
    # The checkpoint term is printed correctly in the paper; A and R are split differently.
    assert pytest.approx(exact.C, rel=1e-12) == paper.C
    assert paper.A >= exact.A
    assert paper.R <= exact.R


@settings(max_examples=100, deadline=None)
@given(T_A=seconds, T_C=seconds, T_R=seconds, lam=rates)
def test_paper_moves_restarts_after_failures_in_A_into_A(
    T_A: float, T_C: float, T_R: float, lam: float
) -> None:
    """The difference is exactly the restart time caused by failures during A."""
    exact = sojourn_times(T_A, T_C, T_R, lam)
    paper = sojourn_times(T_A, T_C, T_R, lam, form="saito2013")
    failures_in_A = math.exp(lam * T_C) * math.expm1(lam * T_A)
    restart_each = math.expm1(lam * T_R) / lam
    diff = float(paper.A - exact.A)
    assert diff == pytest.approx(failures_in_A * restart_each, rel=1e-8, abs=1e-12 * float(paper.A))


@settings(max_examples=60, deadline=None)
@given(T_A=seconds, T_C=seconds, T_R=seconds, lam=st.floats(min_value=1e-7, max_value=2e-4))
def test_exact_form_equals_an_independent_first_passage_computation(
    T_A: float, T_C: float, T_R: float, lam: float
) -> None:
    """The multilevel first-passage recursion with one level is an independent derivation."""
    times = sojourn_times(T_A, T_C, T_R, lam)
    ml = expected_multilevel([Level("L1", T_C, T_R, lam)], nested_schedule(T_A, []))
    assert ml.compute == pytest.approx(float(times.A), rel=1e-9)
    assert ml.checkpoint[0] == pytest.approx(float(times.C), rel=1e-9)
    assert ml.restart[0] == pytest.approx(float(times.R), rel=1e-9, abs=1e-12)


def test_failure_free_limit_is_exact() -> None:
    t = sojourn_times(3600.0, 120.0, 90.0, 0.0)
    assert (float(t.A), float(t.C), float(t.R)) == (3600.0, 120.0, 0.0)
    small = sojourn_times(3600.0, 120.0, 90.0, 1e-15)
    assert float(small.A) == pytest.approx(3600.0, rel=1e-9)
    assert float(small.R) == pytest.approx(0.0, abs=1e-6)
    assert float(overhead(3600.0, 120.0, 90.0, 0.0)) == pytest.approx(120.0 / 3600.0)
    assert float(expected_failures(3600.0, 120.0, 0.0)) == 0.0


@settings(max_examples=100, deadline=None)
@given(T_A=seconds, T_C=seconds, T_R=seconds, lam=rates, factor=st.floats(1.01, 10.0))
def test_monotone_in_rate_and_checkpoint_time(
    T_A: float, T_C: float, T_R: float, lam: float, factor: float
) -> None:
    base = float(time_factor(T_A, T_C, T_R, lam))
    assert float(time_factor(T_A, T_C, T_R, lam * factor)) > base
    assert float(time_factor(T_A, T_C * factor, T_R, lam)) > base
    assert float(time_factor(T_A, T_C, T_R * factor, lam)) > base
    e = float(epe(T_A, T_C, T_R, lam, 400.0, 300.0, 350.0))
    assert float(epe(T_A, T_C, T_R, lam * factor, 400.0, 300.0, 350.0)) > e
    assert float(epe(T_A, T_C * factor, T_R, lam, 400.0, 300.0, 350.0)) > e


@settings(max_examples=100, deadline=None)
@given(T_A=seconds, T_C=seconds, T_R=seconds, lam=rates, W_A=watts, W_C=watts, W_R=watts)
def test_epe_is_energy_over_useful_time(
    T_A: float, T_C: float, T_R: float, lam: float, W_A: float, W_C: float, W_R: float
) -> None:
    t = sojourn_times(T_A, T_C, T_R, lam)
    J = float(t.A) * W_A + float(t.C) * W_C + float(t.R) * W_R
    assert float(epe(T_A, T_C, T_R, lam, W_A, W_C, W_R)) == pytest.approx(J / T_A, rel=1e-12)
    # Equal powers everywhere: the energy is power × expected time in both forms.
    for form in ("exact", "saito2013"):
        same = float(epe(T_A, T_C, T_R, lam, W_A, W_A, W_A, form=form))
        assert same == pytest.approx(W_A * float(time_factor(T_A, T_C, T_R, lam)), rel=1e-10)


def test_vectorised_over_arrays() -> None:
    T_A = np.array([600.0, 3600.0, 7200.0])
    t = sojourn_times(T_A, 60.0, 30.0, 1 / 50400)
    assert t.A.shape == (3,)
    for i, ta in enumerate(T_A):
        assert t.A[i] == pytest.approx(float(sojourn_times(ta, 60.0, 30.0, 1 / 50400).A))


def test_long_checkpoints_relative_to_mtbf_stay_finite() -> None:
    t = sojourn_times(1000.0, 2000.0, 500.0, 1e-3)
    assert all(math.isfinite(float(x)) for x in (t.A, t.C, t.R))
    assert float(t.total) > 3000.0
