"""Estimates with confidence intervals from streamed samples.

The simulators produce millions of per-cycle samples in batches and must not keep them.
:class:`Moments` keeps only the count, the mean vector and the centred co-moment matrix, merged
batch by batch with the pairwise update of Chan, Golub and LeVeque (1979): summing raw squares
would lose the variance to cancellation. Any linear combination of the sampled quantities
(energy is ``Σ power × time``) then gets its own variance without a second pass.

:func:`ratio_estimate` is the renewal-reward estimator with a delta-method error,
:func:`mean_estimate` the plain sample mean; intervals use Student's t. docs/model.md section
6.4 gives the formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import stdtrit

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Estimate:
    """A simulated expectation: point estimate, standard error and two-sided interval."""

    mean: float
    stderr: float
    ci_low: float
    ci_high: float
    confidence: float

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the closed confidence interval."""
        return self.ci_low <= float(value) <= self.ci_high

    def scaled(self, factor: float) -> Estimate:
        """The estimate of ``factor × quantity`` (``factor >= 0``)."""
        return Estimate(
            self.mean * factor,
            self.stderr * factor,
            self.ci_low * factor,
            self.ci_high * factor,
            self.confidence,
        )


class Moments:
    """Running count, mean vector and centred co-moment matrix of vector samples."""

    def __init__(self, dim: int) -> None:
        self.count = 0
        self.mean: FloatArray = np.zeros(dim)
        self.comoment: FloatArray = np.zeros((dim, dim))

    def add(self, rows: FloatArray) -> None:
        """Merge a batch of samples, one per row (shape ``(n, dim)``)."""
        n_b = rows.shape[0]
        if n_b == 0:
            return
        mean_b = rows.mean(axis=0)
        centred = rows - mean_b
        self._merge(n_b, mean_b, centred.T @ centred)

    def add_repeated(self, row: ArrayLike, times: int) -> None:
        """Merge ``times`` identical samples equal to ``row`` (no spread among them)."""
        if times <= 0:
            return
        vec = np.asarray(row, dtype=np.float64)
        self._merge(int(times), vec, np.zeros_like(self.comoment))

    def _merge(self, n_b: int, mean_b: FloatArray, comoment_b: FloatArray) -> None:
        n_a = self.count
        n = n_a + n_b
        delta = mean_b - self.mean
        self.mean = self.mean + delta * (n_b / n)
        self.comoment = self.comoment + comoment_b + np.outer(delta, delta) * (n_a * n_b / n)
        self.count = n


def _interval(mean: float, var_sum: float, n: int, scale: float, confidence: float) -> Estimate:
    """Estimate from ``Σ residual²`` over ``n`` samples, the residual's mean being zero."""
    if n < 2 or not math.isfinite(mean):
        return Estimate(mean, math.inf, -math.inf, math.inf, confidence)
    stderr = math.sqrt(max(var_sum, 0.0) / (n * (n - 1))) / scale
    half = float(stdtrit(n - 1, 0.5 + confidence / 2.0)) * stderr
    return Estimate(mean, stderr, mean - half, mean + half, confidence)


def ratio_estimate(
    moments: Moments, weights: ArrayLike, denominator: int, confidence: float
) -> Estimate:
    """Estimate ``E[w·y] / E[u]`` where ``u`` is column ``denominator`` of the samples.

    ``weights`` has one entry per column (the denominator's entry is ignored), so the same
    moments give seconds in one state (a unit vector) or energy (the state powers).
    """
    w = np.array(weights, dtype=np.float64, copy=True)
    w[denominator] = 0.0
    mean_u = float(moments.mean[denominator])
    mean_y = float(w @ moments.mean)
    if mean_u <= 0:
        return Estimate(math.nan, math.inf, -math.inf, math.inf, confidence)
    ratio = mean_y / mean_u
    w[denominator] = -ratio  # residual yᵢ − R·uᵢ, whose mean is exactly zero
    return _interval(ratio, float(w @ moments.comoment @ w), moments.count, mean_u, confidence)


def mean_estimate(
    moments: Moments, weights: ArrayLike, confidence: float, *, scale: float = 1.0
) -> Estimate:
    """Estimate ``E[w·y] / scale`` from the sample mean."""
    w = np.asarray(weights, dtype=np.float64)
    mean = float(w @ moments.mean) / scale
    return _interval(mean, float(w @ moments.comoment @ w), moments.count, scale, confidence)
