"""The statistics of a study: t-intervals on log values, wu2018 Eq. 2 against a baseline, noise.

Why t-intervals on logs: a study has a handful of runs per cell (3 is common), and at such n a
percentile bootstrap interval is little more than the range of the values, covering the true
value far less often than the 95 % it claims. Run times and energies are positive and their
noise is multiplicative (a loaded machine makes a run x % slower), so their logarithms are
close to normal, and Student's t on the logs keeps its coverage at n = 2..10 (checked by
simulation in tests/study/test_coverage.py). A cell is summarised by the geometric mean of its
runs with that interval (its median is kept beside it); a saving is wu2018's Eq. 2,
``(x - baseline) / baseline × 100``, estimated as the geometric mean of the ratios: when the
runs were made in blocks (every cell once per block), each run is divided by the baseline run
of its block and the interval is a paired t-interval on those log-ratios, which cancels drift
between blocks; otherwise Welch's t-interval on the two groups' logs. An interval that
contains 0 is flagged: that cell cannot be told from the baseline. The method is named in
every estimate (``method``).

Noise: the run-to-run spread of the baseline (and, pooled over every compared cell, the spread
of the paired log-ratios) says the smallest effect a study of ``n`` repeats can resolve, and
how many repeats reach a stated precision (:func:`resolvable_pct`, :func:`repeats_needed`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy import stats as sps

from greenckpt.errors import InvalidValueError

__all__ = [
    "LEVEL",
    "Estimate",
    "Saving",
    "cell_estimate",
    "eq2",
    "log_t_interval",
    "mean_ci",
    "repeats_needed",
    "resolvable_pct",
    "t_quantile",
]

LEVEL = 0.95
CELL_METHOD = "geometric mean, 95 % Student t-interval on the log values"
PAIRED_METHOD = "paired by block: geometric mean of the ratios, 95 % t-interval on log-ratios"
WELCH_METHOD = "unpaired: ratio of geometric means, 95 % Welch t-interval on the log values"


@cache
def t_quantile(df: float, level: float = LEVEL) -> float:
    """Student's t quantile for a two-sided ``level`` interval with ``df`` degrees of freedom."""
    return float(sps.t.ppf(0.5 + level / 2, df))


def log_t_interval(logs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and 95 % t-interval of the log values along the last axis (vectorised over the
    others; the last axis must hold at least 2 values): ``(mean, low, high)`` of the logs."""
    n = logs.shape[-1]
    if n < 2:
        raise InvalidValueError("a t-interval needs at least 2 values")
    mean = logs.mean(axis=-1)
    half = t_quantile(n - 1) * logs.std(axis=-1, ddof=1) / math.sqrt(n)
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class Estimate:
    """A cell's figure: the median of its ``n`` values, their geometric ``mean`` and the 95 %
    interval of that mean (None with fewer than 2 values, or a value <= 0)."""

    median: float
    mean: float
    low: float | None
    high: float | None
    n: int
    method: str = CELL_METHOD


@dataclass(frozen=True)
class Saving:
    """wu2018 Eq. 2 in percent (``pct``: from the geometric mean of the ratios), its 95 %
    interval, whether paired by block, ``n`` (pairs, or the smaller group), ``median_pct``
    (Eq. 2 of the two medians, for reference) and the interval's method."""

    pct: float
    low: float | None
    high: float | None
    paired: bool
    n: int
    median_pct: float
    method: str

    @property
    def undecided(self) -> bool:
        """The interval contains 0 (or there is none)."""
        return self.low is None or self.high is None or self.low <= 0.0 <= self.high

    @property
    def half_width_pct(self) -> float | None:
        """Half the interval's width, in percentage points (None without an interval)."""
        return None if self.low is None or self.high is None else (self.high - self.low) / 2


def _pct(log_ratio: float) -> float:
    return (math.exp(log_ratio) - 1.0) * 100.0


def cell_estimate(values: Sequence[float]) -> Estimate:
    """A cell's :class:`Estimate` of ``values``."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise InvalidValueError("no values")
    median = float(np.median(arr))
    if arr.size < 2 or not (arr > 0).all():
        mean = float(np.exp(np.log(arr).mean())) if (arr > 0).all() else float(arr.mean())
        return Estimate(
            median, mean, None, None, int(arr.size), "no interval: n < 2 or a value <= 0"
        )
    centre, low, high = (float(v) for v in log_t_interval(np.log(arr)))
    return Estimate(median, math.exp(centre), math.exp(low), math.exp(high), int(arr.size))


def mean_ci(values: Sequence[float]) -> dict[str, float | int | str | None]:
    """The mean of ``values`` with its 95 % Student t-interval on the values themselves (for a
    figure that may be 0, such as a share of time: no logarithm); no interval below 2."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise InvalidValueError("no values")
    mean = float(arr.mean())
    if arr.size < 2:
        return {"mean": mean, "low": None, "high": None, "n": 1, "method": "no interval: n < 2"}
    half = t_quantile(arr.size - 1) * float(arr.std(ddof=1)) / math.sqrt(arr.size)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": int(arr.size),
            "method": "mean, 95 % Student t-interval"}  # fmt: skip


def eq2(
    values: Sequence[float],
    baseline: Sequence[float],
    *,
    pairs: Sequence[tuple[float, float]] | None = None,
) -> Saving:
    """Eq. 2 of ``values`` against ``baseline`` (see the module docstring): paired from
    ``pairs`` (value, baseline value of the same block) when at least 2 are given, else Welch's
    interval from both groups (no interval with fewer than 2 values in either)."""
    x, b = np.asarray(values, dtype=float), np.asarray(baseline, dtype=float)
    base = float(np.median(b))
    if base == 0:
        raise InvalidValueError("the baseline's median is 0: no percentage")
    median_pct = (float(np.median(x)) - base) / base * 100.0
    if pairs is not None and len(pairs) >= 2:
        p = np.asarray(pairs, dtype=float)
        if (p > 0).all():
            mean, low, high = log_t_interval(np.log(p[:, 0] / p[:, 1]))
            return Saving(
                _pct(float(mean)), _pct(float(low)), _pct(float(high)), True, len(p),
                median_pct, PAIRED_METHOD,
            )  # fmt: skip
    n = int(min(x.size, b.size))
    if x.size < 2 or b.size < 2 or not ((x > 0).all() and (b > 0).all()):
        return Saving(median_pct, None, None, False, n, median_pct, "no interval: n < 2")
    lx, lb = np.log(x), np.log(b)
    vx, vb = lx.var(ddof=1) / lx.size, lb.var(ddof=1) / lb.size
    diff = float(lx.mean() - lb.mean())
    se = math.sqrt(vx + vb)
    if se == 0:
        return Saving(_pct(diff), _pct(diff), _pct(diff), False, n, median_pct, WELCH_METHOD)
    df = (vx + vb) ** 2 / (vx**2 / (lx.size - 1) + vb**2 / (lb.size - 1))
    half = t_quantile(df) * se
    return Saving(
        _pct(diff), _pct(diff - half), _pct(diff + half), False, n, median_pct, WELCH_METHOD
    )


def resolvable_pct(sd_log: float, n: int, *, paired: bool = True) -> float | None:
    """The smallest effect, in percent, that a study of ``n`` repeats per cell can tell from 0:
    the expected half-width of its 95 % interval when the paired log-ratios (or, unpaired, each
    group's log values) spread with standard deviation ``sd_log``. None for n < 2."""
    if n < 2:
        return None
    spread = sd_log / math.sqrt(n) if paired else sd_log * math.sqrt(2.0 / n)
    df = n - 1 if paired else 2 * n - 2
    return _pct(t_quantile(df) * spread)


def repeats_needed(
    sd_log: float, effect_pct: float, *, power: float | None = None, most: int = 10_000
) -> int | None:
    """The fewest repeats (>= 2) with which the 95 % paired interval's half-width is at most
    ``effect_pct`` (so an effect that large excludes 0) — or, with ``power`` (e.g. 0.8), with
    which a true effect that large is declared (its interval excludes 0) with that probability.
    None when even ``most`` repeats do not suffice."""
    if not effect_pct > 0:
        raise InvalidValueError(f"the effect must be > 0 %, got {effect_pct:g} %")
    target = math.log1p(effect_pct / 100.0)
    for n in range(2, most + 1):
        factor = t_quantile(n - 1)
        if power is not None:
            factor += float(sps.t.ppf(power, n - 1))
        if factor * sd_log / math.sqrt(n) <= target:
            return n
    return None
