"""The statistics of a study: medians with bootstrap intervals, wu2018 Eq. 2 against a baseline.

Why these: a handful of runs per cell on a noisy machine is the norm, so the median (robust to
one slow run) with a percentile-bootstrap interval (no normality assumed) is reported per cell,
and every saving is wu2018's Eq. 2, ``(x - baseline) / baseline × 100``, with its own
interval. When the runs were made in blocks (every cell once per block), each run is compared
with the baseline run of its block and the interval comes from those paired ratios, which
cancels drift between blocks; otherwise the two groups are resampled independently. An
interval that contains 0 is flagged: that cell cannot be told from the baseline. Figures of
measured and estimated power are never pooled: the caller groups runs by source first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from greenckpt.errors import InvalidValueError

__all__ = ["RESAMPLES", "Estimate", "Saving", "eq2", "median_ci"]

RESAMPLES = 10_000
LEVEL = 0.95


@dataclass(frozen=True)
class Estimate:
    """The median of ``n`` values and its interval (None with fewer than 2 values)."""

    median: float
    low: float | None
    high: float | None
    n: int


@dataclass(frozen=True)
class Saving:
    """wu2018 Eq. 2 in percent, its interval, whether paired, and whether the interval
    contains 0 (``undecided``: not distinguishable from the baseline)."""

    pct: float
    low: float | None
    high: float | None
    paired: bool
    n: int

    @property
    def undecided(self) -> bool:
        """The interval contains 0 (or there is none)."""
        return self.low is None or self.high is None or self.low <= 0.0 <= self.high


def _percentiles(samples: np.ndarray) -> tuple[float, float]:
    tail = (1.0 - LEVEL) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


def _boot_medians(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    picks = rng.integers(0, values.size, size=(RESAMPLES, values.size))
    medians: np.ndarray = np.median(values[picks], axis=1)
    return medians


def median_ci(values: Sequence[float], *, seed: int = 0) -> Estimate:
    """Median and percentile-bootstrap interval of ``values`` (seeded)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise InvalidValueError("no values")
    median = float(np.median(arr))
    if arr.size < 2:
        return Estimate(median, None, None, 1)
    low, high = _percentiles(_boot_medians(arr, np.random.default_rng(seed)))
    return Estimate(median, low, high, int(arr.size))


def eq2(
    values: Sequence[float],
    baseline: Sequence[float],
    *,
    pairs: Sequence[tuple[float, float]] | None = None,
    seed: int = 0,
) -> Saving:
    """Eq. 2 of the medians, ``(median(values) - median(baseline)) / median(baseline)``, in
    percent, with an interval: from ``pairs`` (value, baseline value of the same block) when
    at least 2 are given, else from independent resampling of both groups."""
    x, b = np.asarray(values, dtype=float), np.asarray(baseline, dtype=float)
    base = float(np.median(b))
    if base == 0:
        raise InvalidValueError("the baseline's median is 0: no percentage")
    pct = (float(np.median(x)) - base) / base * 100.0
    rng = np.random.default_rng(seed)
    if pairs is not None and len(pairs) >= 2:
        p = np.asarray(pairs, dtype=float)
        ratios = (p[:, 0] - p[:, 1]) / p[:, 1] * 100.0
        low, high = _percentiles(_boot_medians(ratios, rng))
        return Saving(pct, low, high, True, len(pairs))
    if x.size < 2 or b.size < 2:
        return Saving(pct, None, None, False, int(min(x.size, b.size)))
    bx, bb = _boot_medians(x, rng), _boot_medians(b, rng)
    low, high = _percentiles((bx - bb) / bb * 100.0)
    return Saving(pct, low, high, False, int(min(x.size, b.size)))
