"""Checkpoint intervals: Young, Daly, and the exact time- and energy-optimal ``T_A``.

Young (1974) and Daly (2006) are first- and higher-order approximations used in practice. For
the basic-unit model of :mod:`greenckpt.model.basic_unit` both the expected time per useful
second and the EPE have the shape ``g(x) = (K·e^x − L)/x`` in ``x = λ·T_A`` with ``K > L``
independent of ``x``. Setting ``g'(x) = 0`` gives ``(x − 1)·e^x = −L/K``, hence

    x* = 1 + W₀(−(L/K)/e)

with W₀ the principal branch of the Lambert W function. ``g`` is unimodal on ``x > 0``
(``sign g'`` is the sign of ``K(x−1)e^x + L``, increasing in ``x``), so this stationary point is
the global minimum. For time, ``L/K = e^{−λT_C}`` and ``T_R`` drops out; for energy the powers
enter and the optimum differs. The derivations are in docs/model.md.

Near ``L/K → 1`` (checkpoints cheap relative to the MTBF) W₀ is evaluated next to its branch
point, where ``1 + W₀`` loses digits; the root is then polished with Newton steps on
``log(1 − x) + x + γ = 0`` (``γ = −log(L/K)``), which converge monotonically from
``x₀ = √(2γ)``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import lambertw

from greenckpt.errors import InvalidValueError
from greenckpt.model.basic_unit import (
    FloatArray,
    ModelForm,
    validate_powers,
    validate_unit_inputs,
    zero_wins_product,
)
from greenckpt.model.basic_unit import as_float_array as _f

IntervalRule = Literal["young", "daly", "time-optimal", "energy-optimal"]
INTERVAL_RULES: tuple[IntervalRule, ...] = ("young", "daly", "time-optimal", "energy-optimal")


def young_interval(T_C: ArrayLike, rate: ArrayLike) -> FloatArray:
    """Young's first-order optimum ``√(2·T_C/λ)`` (also Vaidya's, quoted by saito2013).

    ``inf`` without failures (``λ = 0``), also when ``T_C = 0``, like the other rules.
    """
    validate_unit_inputs(None, T_C, None, rate)
    lam = _f(rate)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        return _f(np.where(lam > 0, np.sqrt(2.0 * _f(T_C) / lam), np.inf))


def daly_interval(T_C: ArrayLike, rate: ArrayLike) -> FloatArray:
    """Daly's (2006) higher-order estimate of the optimum compute time between checkpoints.

    ``√(2δM)·[1 + ⅓·√(δ/2M) + ⅑·(δ/2M)] − δ`` for ``δ < 2M`` and ``M`` otherwise, with
    ``δ = T_C`` and ``M = 1/λ`` (Daly, FGCS 22(3), 2006, eq. 37).
    """
    validate_unit_inputs(None, T_C, None, rate)
    lam = _f(rate)
    delta = _f(T_C)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        M = 1.0 / lam
        ratio = delta / (2.0 * M)
        est = np.sqrt(2.0 * delta * M) * (1.0 + np.sqrt(ratio) / 3.0 + ratio / 9.0) - delta
        out = np.where(delta < 2.0 * M, est, M)
    return _f(np.where(lam > 0, out, np.inf))


def _x_star(s: FloatArray) -> FloatArray:
    """Minimiser ``x > 0`` of ``(K e^x − L)/x`` given ``s = (K − L)/K > 0``."""
    s = _f(s)
    out = np.empty_like(s)
    big = s >= 1.0
    # L <= 0: (x - 1) e^x = s - 1 >= 0 has its root at x >= 1 on the principal branch.
    out[big] = 1.0 + np.real(lambertw((s[big] - 1.0) / np.e, 0))
    small = ~big
    gamma = -np.log1p(-s[small])
    x = np.empty_like(gamma)
    near = gamma < 1e-3
    # Far from the branch point W0 is accurate to working precision.
    x[~near] = 1.0 + np.real(lambertw(-np.exp(-1.0 - gamma[~near]), 0))
    # Near it: Newton on h(x) = log1p(-x) + x + gamma, from x0 = sqrt(2 gamma) >= root.
    g = gamma[near]
    xn = np.sqrt(2.0 * g)
    for _ in range(6):
        h = np.log1p(-xn) + xn + g
        dh = -xn / (1.0 - xn)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(dh != 0, h / dh, 0.0)
        xn = xn - step
    x[near] = xn
    out[small] = x
    return out


def _interval_from_s(s: ArrayLike, rate: ArrayLike) -> FloatArray:
    lam, ss = np.broadcast_arrays(_f(rate), _f(s))
    out = np.full(lam.shape, np.inf)
    ok = (lam > 0) & (ss > 0)
    out[ok] = _x_star(ss[ok]) / lam[ok]
    out[(lam > 0) & (ss <= 0)] = 0.0
    return out


def time_optimal_interval(T_C: ArrayLike, rate: ArrayLike) -> FloatArray:
    """Exact minimiser of expected wall time per useful second: ``(1 + W₀(−e^{−1−λT_C}))/λ``.

    Independent of ``T_R``: the restart cost scales every interval's time by the same
    ``e^{λT_R}``.
    """
    validate_unit_inputs(None, T_C, None, rate)
    lam = _f(rate)
    return _interval_from_s(-np.expm1(-lam * _f(T_C)), lam)


def energy_optimal_interval(
    T_C: ArrayLike,
    T_R: ArrayLike,
    rate: ArrayLike,
    W_A: ArrayLike,
    W_C: ArrayLike,
    W_R: ArrayLike,
    *,
    form: ModelForm = "exact",
) -> FloatArray:
    """Exact minimiser of EPE over ``T_A`` for fixed ``T_C``, ``T_R``, rate and powers.

    With ``c = λT_C``, ``r = λT_R`` and ``ρ = W_R·(e^r − 1)``:

    exact:      ``s = (e^c − 1)(W_C + ρ) / (e^c (W_A + ρ))``
    saito2013:  ``s = (e^c − 1)(W_C + ρ) / (W_A e^{c+r})``

    and ``T_A* = x*(s)/λ``. For small ``λ`` this tends to ``√(2·T_C·W_C/(λ·W_A))``: Young's
    interval with the checkpoint cost weighted by its power relative to computing.

    ``s`` is evaluated as ``(1 − e^{−c})·(W_C + ρ)/(W_A + ρ)`` (exact) and
    ``(1 − e^{−c})·(W_C e^{−r} + W_R(1 − e^{−r}))/W_A`` (saito2013), which stay finite when
    ``e^c`` or ``e^r`` overflow (``c`` or ``r`` above about 709); the quotient of the printed
    forms is then inf/inf. Raises ``ValueError`` for a bad time, rate or power (``W_A > 0``,
    ``W_C, W_R >= 0``, all finite).
    """
    validate_unit_inputs(None, T_C, T_R, rate)
    validate_powers(W_A, W_C, W_R)
    lam = _f(rate)
    c = lam * _f(T_C)
    r = lam * _f(T_R)
    W_A_, W_C_, W_R_ = _f(W_A), _f(W_C), _f(W_R)
    with np.errstate(over="ignore", invalid="ignore"):
        if form == "exact":
            rho = zero_wins_product(W_R_, np.expm1(r))
            # rho = inf only when W_R > 0: both sums are then dominated by it.
            power_ratio = np.where(np.isinf(rho), 1.0, (W_C_ + rho) / (W_A_ + rho))
        elif form == "saito2013":
            power_ratio = (W_C_ * np.exp(-r) - W_R_ * np.expm1(-r)) / W_A_
        else:  # pragma: no cover - guarded by the Literal type
            raise InvalidValueError(f"unknown model form {form!r}")
    return _interval_from_s(-np.expm1(-c) * power_ratio, lam)


def interval(
    rule: IntervalRule,
    T_C: ArrayLike,
    T_R: ArrayLike,
    rate: ArrayLike,
    W_A: ArrayLike = 1.0,
    W_C: ArrayLike = 1.0,
    W_R: ArrayLike = 1.0,
    *,
    form: ModelForm = "exact",
) -> FloatArray:
    """Dispatch on an interval rule name (as used by the CLI and the optimizer)."""
    if rule == "young":
        return young_interval(T_C, rate)
    if rule == "daly":
        return daly_interval(T_C, rate)
    if rule == "time-optimal":
        return time_optimal_interval(T_C, rate)
    if rule == "energy-optimal":
        return energy_optimal_interval(T_C, T_R, rate, W_A, W_C, W_R, form=form)
    raise InvalidValueError(
        f"unknown interval rule {rule!r}: use one of {', '.join(INTERVAL_RULES)}"
    )
