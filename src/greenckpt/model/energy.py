"""Expected energy of a basic unit, energy per unit of useful work (EPE), runtime and overhead.

The node draws ``W_A`` watts while computing, ``W_C`` while checkpointing and ``W_R`` while
restarting (saito2013 section 6). The expected energy of one basic unit is
``J = T_Ā·W_A + T_C̄·W_C + T_R̄·W_R`` and ``EPE = J / T_A`` (section 7.2): joules per second of
useful computation, the figure of merit the optimizer minimises. Time and energy are both
expectations over failures; the energy is exact only when the per-state times are (the
``"exact"`` form), because the paper's form books restart time under A.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from greenckpt.errors import InvalidValueError
from greenckpt.model.basic_unit import (
    FloatArray,
    ModelForm,
    StateTimes,
    expected_unit_time,
    sojourn_times,
    validate_powers,
    zero_wins_product,
)


def unit_energy(times: StateTimes, W_A: ArrayLike, W_C: ArrayLike, W_R: ArrayLike) -> FloatArray:
    """Expected energy ``J`` (joules) of one basic unit from its per-state times.

    Raises ``ValueError`` for a NaN, infinite or negative power, or ``W_A <= 0``. A state with
    an infinite expected time (overflow) and zero power contributes 0 J, not NaN.
    """
    validate_powers(W_A, W_C, W_R)
    out = zero_wins_product(times.A, W_A)
    out = out + zero_wins_product(times.C, W_C)
    out = out + zero_wins_product(times.R, W_R)
    return np.asarray(out, dtype=np.float64)


def _validate_work(work: ArrayLike) -> None:
    arr = np.asarray(work, dtype=np.float64)
    if not (np.all(np.isfinite(arr)) and np.all(arr >= 0)):
        raise InvalidValueError(f"work must be a finite number of seconds >= 0, got {work!r}")


def epe(
    T_A: ArrayLike,
    T_C: ArrayLike,
    T_R: ArrayLike,
    rate: ArrayLike,
    W_A: ArrayLike,
    W_C: ArrayLike,
    W_R: ArrayLike,
    *,
    form: ModelForm = "exact",
) -> FloatArray:
    """Energy per second of useful work, ``J / T_A`` (watts of useful progress).

    Raises ``ValueError`` for a bad time, rate or power (see :func:`unit_energy`).
    """
    validate_powers(W_A, W_C, W_R)
    times = sojourn_times(T_A, T_C, T_R, rate, form=form)
    return np.asarray(
        unit_energy(times, W_A, W_C, W_R) / np.asarray(T_A, dtype=np.float64), dtype=np.float64
    )


def time_factor(T_A: ArrayLike, T_C: ArrayLike, T_R: ArrayLike, rate: ArrayLike) -> FloatArray:
    """Expected wall seconds per second of useful work (``≥ 1``); 1 means no overhead."""
    return np.asarray(
        expected_unit_time(T_A, T_C, T_R, rate) / np.asarray(T_A, dtype=np.float64),
        dtype=np.float64,
    )


def overhead(T_A: ArrayLike, T_C: ArrayLike, T_R: ArrayLike, rate: ArrayLike) -> FloatArray:
    """Fraction of extra time over the failure-free, checkpoint-free run: ``time_factor − 1``."""
    return np.asarray(time_factor(T_A, T_C, T_R, rate) - 1.0, dtype=np.float64)


def expected_runtime(
    work: ArrayLike, T_A: ArrayLike, T_C: ArrayLike, T_R: ArrayLike, rate: ArrayLike
) -> FloatArray:
    """Expected wall time to finish ``work`` seconds of useful computation.

    ``work / T_A`` basic units (a fractional last unit is counted pro rata, which is exact in
    expectation only for whole units; the error is below one unit's time).
    """
    _validate_work(work)
    return zero_wins_product(work, time_factor(T_A, T_C, T_R, rate))


def expected_energy(
    work: ArrayLike,
    T_A: ArrayLike,
    T_C: ArrayLike,
    T_R: ArrayLike,
    rate: ArrayLike,
    W_A: ArrayLike,
    W_C: ArrayLike,
    W_R: ArrayLike,
    *,
    form: ModelForm = "exact",
) -> FloatArray:
    """Expected energy (joules, one node) to finish ``work`` seconds of useful computation."""
    _validate_work(work)
    return zero_wins_product(work, epe(T_A, T_C, T_R, rate, W_A, W_C, W_R, form=form))
