"""Argument checks shared by the simulators: one-line ``ValueError`` messages that name the value.

A simulation that runs on a NaN or a negative time does not fail, it silently returns nonsense
(``floor(nan)`` units, negative state times), so every public entry point checks its scalars
here before drawing a single random number.
"""

from __future__ import annotations

import math

import numpy as np

from greenckpt.errors import InvalidValueError

SeedLike = int | np.random.SeedSequence | np.random.Generator | None
"""Anything :func:`numpy.random.default_rng` accepts; ``None`` draws fresh OS entropy."""


def finite(name: str, value: float) -> float:
    """Return ``value`` as a float, or raise if it is not a finite real number."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InvalidValueError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(out):
        raise InvalidValueError(f"{name} must be finite, got {value!r}")
    return out


def non_negative(name: str, value: float, unit: str = "seconds") -> float:
    """Return ``value`` as a float, or raise if it is not finite and ``>= 0``."""
    out = finite(name, value)
    if out < 0:
        raise InvalidValueError(f"{name} must be >= 0 {unit}, got {value!r}")
    return out


def positive(name: str, value: float, unit: str = "seconds") -> float:
    """Return ``value`` as a float, or raise if it is not finite and ``> 0``."""
    out = finite(name, value)
    if out <= 0:
        raise InvalidValueError(f"{name} must be > 0 {unit}, got {value!r}")
    return out


def count(name: str, value: int) -> int:
    """Return ``value`` as an int, or raise if it is not an integer ``>= 1``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise InvalidValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def confidence_level(value: float) -> float:
    """Return ``value`` as a float, or raise if it is not strictly between 0 and 1."""
    out = finite("confidence", value)
    if not 0.0 < out < 1.0:
        raise InvalidValueError(f"confidence must be strictly between 0 and 1, got {value!r}")
    return out
