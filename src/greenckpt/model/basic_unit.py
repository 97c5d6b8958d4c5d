"""Expected time spent in each state of one basic unit of a run with checkpoints and failures.

A *basic unit* (saito2013 section 6, Figure 6) is one checkpoint interval: compute ``T_A``
(state A), write a checkpoint ``T_C`` (state C) and, after a failure, read it back ``T_R``
(state R) before redoing the unit. Failures are Poisson of rate ``rate`` (λ, 1/s) in every state.

Two per-state decompositions with the same total are offered: ``"exact"`` (the default), the
time the Markov model really spends in each state, which simulation reproduces state by state;
and ``"saito2013"``, the paper's printed formulas, which book the restarts after failures in A
under A (so energies agree only when ``W_A == W_R``). Every function is pure and vectorised.
``rate == 0`` is exact, and an overflowing ``e^{…}`` gives ``inf``, never NaN (see
:func:`zero_wins_product`). docs/model.md section 1 derives both forms and their limits.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from greenckpt.errors import InvalidValueError

ModelForm = Literal["exact", "saito2013"]
"""Which per-state decomposition to use; see the module docstring."""

MODEL_FORMS: tuple[ModelForm, ...] = ("exact", "saito2013")

FloatArray = NDArray[np.float64]


class StateTimes(NamedTuple):
    """Expected seconds spent in states A, C and R during one basic unit."""

    A: FloatArray
    C: FloatArray
    R: FloatArray

    @property
    def total(self) -> FloatArray:
        """Expected wall time of one basic unit."""
        return np.asarray(self.A + self.C + self.R, dtype=np.float64)


def as_float_array(x: ArrayLike) -> FloatArray:
    """``x`` as a float64 array (scalars become 0-d arrays)."""
    return np.asarray(x, dtype=np.float64)


_f = as_float_array


def expm1_over_rate(rate: ArrayLike, t: ArrayLike) -> FloatArray:
    """``(e^{λt} − 1)/λ``, accurate for small λt and equal to ``t`` at λ = 0.

    This is the expected time to get ``t`` seconds of uninterrupted progress when every failure
    throws the progress away (restart costs excluded), the building block of every formula here.
    """
    lam, tt = np.broadcast_arrays(_f(rate), _f(t))
    out = np.array(tt, dtype=np.float64, copy=True)
    pos = lam > 0
    with np.errstate(over="ignore"):
        out[pos] = np.expm1(lam[pos] * tt[pos]) / lam[pos]
    return out


def zero_wins_product(a: ArrayLike, b: ArrayLike) -> FloatArray:
    """``a·b`` where a factor that is exactly 0 makes the product 0, even if the other is inf.

    Why: the expectations here are products such as (expected failures) × (restart time) or
    (time in a state) × (power). When the first factor overflows to inf and the second is a
    true zero (a free restart, a state drawing no power), IEEE arithmetic gives NaN, but the
    quantity is 0: nothing is spent however often a free thing happens.
    """
    x, y = np.broadcast_arrays(_f(a), _f(b))
    with np.errstate(invalid="ignore", over="ignore"):
        out = x * y
    return _f(np.where((x == 0) | (y == 0), 0.0, out))


def validate_unit_inputs(
    T_A: ArrayLike | None, T_C: ArrayLike, T_R: ArrayLike | None, rate: ArrayLike
) -> None:
    """Raise ``ValueError`` naming the first argument that is not finite and non-negative.

    ``T_A`` must be positive; ``T_C``, ``T_R`` and ``rate`` may be zero. ``None`` skips an
    argument (the interval functions have no ``T_A``). Called by every public function of the
    model so that a negative or NaN input fails loudly instead of giving a plausible number.
    """
    for name, value, strict in (
        ("T_A", T_A, True),
        ("T_C", T_C, False),
        ("T_R", T_R, False),
        ("rate", rate, False),
    ):
        if value is None:
            continue
        arr = _f(value)
        if not np.all(np.isfinite(arr)):
            raise InvalidValueError(f"{name} must be finite, got {value!r}")
        if strict and not np.all(arr > 0):
            raise InvalidValueError(f"{name} must be > 0 seconds, got {value!r}")
        if not np.all(arr >= 0):
            raise InvalidValueError(f"{name} must be >= 0, got {value!r}")


def validate_powers(W_A: ArrayLike, W_C: ArrayLike, W_R: ArrayLike) -> None:
    """Raise ``ValueError`` naming the first power (watts) that is not finite and in range.

    ``W_C`` and ``W_R`` may be 0 (a state that draws nothing); ``W_A`` must be > 0, because the
    figure of merit is joules per second of useful computation: with free computing every
    interval would be as good as any other and the energy optimum is undefined (0/0). A NaN or
    negative power would otherwise flow through into a NaN, 0 or a plausible-looking number.
    """
    for name, value, strict in (("W_A", W_A, True), ("W_C", W_C, False), ("W_R", W_R, False)):
        arr = _f(value)
        if not np.all(np.isfinite(arr)):
            raise InvalidValueError(f"{name} must be a finite number of watts, got {value!r}")
        if strict and not np.all(arr > 0):
            raise InvalidValueError(
                f"{name} (power while computing) must be > 0 watts, got {value!r}"
            )
        if not np.all(arr >= 0):
            raise InvalidValueError(f"{name} must be >= 0 watts, got {value!r}")


def sojourn_times(
    T_A: ArrayLike,
    T_C: ArrayLike,
    T_R: ArrayLike,
    rate: ArrayLike,
    *,
    form: ModelForm = "exact",
) -> StateTimes:
    """Expected time in A, C and R per basic unit (``T_Ā``, ``T_C̄``, ``T_R̄``).

    exact:
        ``T_Ā = e^{λT_C}(e^{λT_A} − 1)/λ`` (every attempt at the unit computes until it
        completes A or fails; a failure in C also throws A away),
        ``T_C̄ = (e^{λT_C} − 1)/λ``,
        ``T_R̄ = (e^{λ(T_A+T_C)} − 1)(e^{λT_R} − 1)/λ`` (expected failures × expected restart).
    saito2013:
        ``T_Ā = e^{λ(T_C+T_R)}(e^{λT_A} − 1)/λ``, ``T_C̄ = (e^{λT_C} − 1)/λ``,
        ``T_R̄ = (e^{λT_C} − 1)(e^{λT_R} − 1)/λ``.
    """
    validate_unit_inputs(T_A, T_C, T_R, rate)
    lam = _f(rate)
    tc = _f(T_C)
    tr = _f(T_R)
    ta = _f(T_A)
    C = expm1_over_rate(lam, tc)
    with np.errstate(over="ignore", invalid="ignore"):
        A, R = _a_and_r(lam, ta, tc, tr, form)
    A, C, R = np.broadcast_arrays(A, C, R)
    return StateTimes(_f(A), _f(C), _f(R))


def _a_and_r(
    lam: FloatArray, ta: FloatArray, tc: FloatArray, tr: FloatArray, form: ModelForm
) -> tuple[FloatArray, FloatArray]:
    if form == "exact":
        A = zero_wins_product(np.exp(lam * tc), expm1_over_rate(lam, ta))
        R = zero_wins_product(np.expm1(lam * (ta + tc)), expm1_over_rate(lam, tr))
    elif form == "saito2013":
        A = zero_wins_product(np.exp(lam * (tc + tr)), expm1_over_rate(lam, ta))
        R = zero_wins_product(np.expm1(lam * tc), expm1_over_rate(lam, tr))
    else:  # pragma: no cover - guarded by the Literal type
        raise InvalidValueError(f"unknown model form {form!r}: use one of {MODEL_FORMS}")
    return _f(A), _f(R)


def expected_unit_time(
    T_A: ArrayLike, T_C: ArrayLike, T_R: ArrayLike, rate: ArrayLike
) -> FloatArray:
    """Expected wall time of one basic unit, ``e^{λT_R}(e^{λ(T_A+T_C)} − 1)/λ``."""
    validate_unit_inputs(T_A, T_C, T_R, rate)
    lam = _f(rate)
    with np.errstate(over="ignore"):
        return zero_wins_product(np.exp(lam * _f(T_R)), expm1_over_rate(lam, _f(T_A) + _f(T_C)))


def expected_failures(T_A: ArrayLike, T_C: ArrayLike, rate: ArrayLike) -> FloatArray:
    """Expected number of failures (hence restarts) per basic unit, ``e^{λ(T_A+T_C)} − 1``.

    Failures that strike a restart are not counted: they lengthen the restart instead.
    """
    validate_unit_inputs(T_A, T_C, None, rate)
    with np.errstate(over="ignore"):
        return _f(np.expm1(_f(rate) * (_f(T_A) + _f(T_C))))
