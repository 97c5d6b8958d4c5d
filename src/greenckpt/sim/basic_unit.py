"""Monte Carlo simulation of a run of basic units with failures (single-level checkpointing).

The semantics are those of :mod:`greenckpt.model.basic_unit`; this checks the model state by
state and extends it to Weibull and replayed failures.

Why the simulation walks over gaps between failures instead of over time: failures do not
depend on the application, so everything between two consecutive failures is a deterministic
function of the gap's length. A handful of NumPy operations per batch of gaps then simulates
millions of units per second, exactly for any failure process independent of the application.
Each gap is one cycle of a renewal-reward estimate (:mod:`greenckpt.sim.stats`), whose interval
is indicative only for a replayed trace (:attr:`SimResult.iid_samples`). Energies are state
time × the given power; nothing here measures power. docs/model.md section 6.2 has the details.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from greenckpt.errors import InvalidValueError
from greenckpt.sim._checks import SeedLike, confidence_level, count, non_negative, positive
from greenckpt.sim.processes import Exponential, FailureProcess, FloatArray
from greenckpt.sim.stats import Estimate, Moments, ratio_estimate

DEFAULT_UNITS = 1_000_000
"""Units simulated when ``units`` is not given and the failure process never ends."""

DEFAULT_MAX_FAILURES = 1_000_000_000
"""Most failures a run may be expected to need before it is refused (about a minute or two:
the simulator handles some ten million failures per second on one core)."""

EnergySource = Literal["modelled"]

_MIN_BATCH = 1 << 12
_MAX_BATCH = 1 << 18
# Columns of the per-gap sample matrix.
_A, _C, _R, _U = 0, 1, 2, 3


@dataclass(frozen=True)
class SimResult:
    """Simulated expectations per basic unit, each with its confidence interval.

    ``A``, ``C``, ``R`` and ``total`` are seconds per completed basic unit (comparable with
    :func:`greenckpt.model.sojourn_times`); ``energy`` is joules per unit and ``epe`` joules per
    second of useful work (``energy / T_A``); ``time_factor`` is wall seconds per second of
    useful work.
    """

    A: Estimate
    C: Estimate
    R: Estimate
    total: Estimate
    energy: Estimate
    epe: Estimate
    time_factor: Estimate
    units: int
    """Basic units completed."""
    failures: int
    """Failures that struck (including those that struck a restart)."""
    wall_time: float
    """Simulated seconds from job start to the end of the last gap used."""
    confidence: float
    iid_samples: bool
    """True when the per-gap samples are i.i.d. (exponential, Weibull): the intervals are then
    asymptotically exact; False for a replayed trace, where they are indicative only."""
    energy_source: EnergySource = "modelled"
    """Energies are modelled from the given state powers (time × watts), not measured."""


def gap_state_times(
    gaps: FloatArray, T_A: float, T_C: float, T_R: float, *, first_restarts: bool
) -> FloatArray:
    """Seconds in A, C, R and units completed in each gap; shape ``(n, 4)``.

    Every gap but possibly the first starts with a failure, hence a restart; the first starts
    with one only if ``first_restarts``. Each gap ends with a failure (or with the end of the
    run), so what remains after its last whole unit is partial work in A, then C.
    """
    X = T_A + T_C
    out = np.empty((gaps.size, 4))
    r = np.minimum(gaps, T_R, out=out[:, _R])
    if not first_restarts and gaps.size:
        r[0] = 0.0
    h = gaps - r
    n = np.floor(h / X, out=out[:, _U])
    part = h - n * X
    np.clip(part, 0.0, X, out=part)  # guard the rounding of h - n·X
    part_a = np.minimum(part, T_A)
    np.multiply(n, T_A, out=out[:, _A])
    out[:, _A] += part_a
    np.multiply(n, T_C, out=out[:, _C])
    out[:, _C] += part - part_a
    return out


def _resolve(process: FailureProcess | float) -> FailureProcess:
    if isinstance(process, FailureProcess):
        return process
    return Exponential(process)


def simulate_basic_unit(
    T_A: float,
    T_C: float,
    T_R: float,
    process: FailureProcess | float,
    *,
    W_A: float = 1.0,
    W_C: float = 1.0,
    W_R: float = 1.0,
    units: int | None = None,
    seed: SeedLike = None,
    confidence: float = 0.95,
    max_failures: int = DEFAULT_MAX_FAILURES,
) -> SimResult:
    """Simulate basic units until at least ``units`` are completed; return per-unit estimates.

    ``process`` is a :class:`~greenckpt.sim.processes.FailureProcess` or a failure rate λ (1/s)
    for Poisson failures. ``units`` defaults to the whole trace for a :class:`Trace` and to
    :data:`DEFAULT_UNITS` otherwise; a trace may end before ``units`` are reached. The run stops
    at the end of the gap in which the ``units``-th unit completes. The same ``seed`` gives the
    same result. The cost grows like the number of failures, ``e^{λT_R}(e^{λ(T_A+T_C)} − 1)``
    per unit for Poisson failures: with ``λ(T_A+T_C) = 20`` that is half a billion per unit.

    Before drawing anything, a run whose expected number of failures exceeds ``max_failures``
    is refused (``ValueError`` giving the expected attempts and the units that would fit):
    exactly for Poisson failures, by a lower bound for Weibull ones (see
    :meth:`FailureProcess.mean_reach`); a replayed trace always ends and is never refused.

    Raises ``ValueError`` for a non-finite or negative time or power, ``T_A <= 0``, a bad
    process parameter, a run that would need more than ``max_failures`` failures, or a trace
    in which no unit completes.
    """
    T_A = positive("T_A", T_A)
    T_C = non_negative("T_C", T_C)
    T_R = non_negative("T_R", T_R)
    powers = np.array(
        [non_negative(name, w, "watts") for name, w in (("W_A", W_A), ("W_C", W_C), ("W_R", W_R))]
    )
    conf = confidence_level(confidence)
    proc = _resolve(process)
    finite_process = proc.final_stretch is not None
    if units is None:
        target = math.inf if finite_process else DEFAULT_UNITS
    else:
        target = count("units", units)
    limit = count("max_failures", max_failures)
    if math.isfinite(target):
        _check_feasible(proc, T_A, T_C, T_R, int(target), limit)

    stream = proc.stream(np.random.default_rng(seed))
    moments = Moments(4)
    done = 0
    failures = 0
    gaps_seen = 0
    wall = 0.0
    batch = _MIN_BATCH
    while done < target:
        gaps = stream.take(batch)
        exhausted = gaps.size < batch
        samples = gap_state_times(gaps, T_A, T_C, T_R, first_restarts=gaps_seen > 0)
        if gaps.size and done + samples[:, _U].sum() >= target:
            reached = np.cumsum(samples[:, _U]) >= target - done
            stop = int(np.argmax(reached)) + 1
            gaps, samples = gaps[:stop], samples[:stop]
        moments.add(samples)
        done += int(samples[:, _U].sum())
        failures += gaps.size
        gaps_seen += gaps.size
        wall += float(gaps.sum())
        if done >= target:
            break
        if exhausted:
            stretch = proc.final_stretch or 0.0
            if stretch > 0:  # ends with the end of the trace, not with a failure
                tail = gap_state_times(
                    np.array([stretch]), T_A, T_C, T_R, first_restarts=gaps_seen > 0
                )
                moments.add(tail)
                done += int(tail[0, _U])
                wall += stretch
            break
        batch = _next_batch(target - done, done, gaps_seen, batch)

    if done == 0:
        raise InvalidValueError(
            f"no basic unit completes in this trace (T_A + T_C = {T_A + T_C!r} s, "
            f"{failures} failures in {wall!r} s)"
        )
    return _result(
        moments=moments,
        powers=powers,
        T_A=T_A,
        done=done,
        failures=failures,
        wall=wall,
        conf=conf,
        iid=proc.renewal,
    )


def failures_needed(first: float, later: float, n: int) -> float:
    """Lower bound on the expected failures (gaps) to complete ``n`` units (or periods).

    ``first`` and ``later`` bound the mean units completed by the first gap and by each later
    one (:meth:`FailureProcess.mean_reach`). Gaps are i.i.d. after the first, and the run
    stops at the first gap that brings the total to ``n``; by Wald's identity the expected
    number of gaps is at least ``1 + (n − first)/later``.
    """
    if later <= 0.0:
        return math.inf
    return 1.0 + max(n - first, 0.0) / later


def fitting_count(first: float, later: float, limit: int) -> int:
    """Largest ``n`` whose :func:`failures_needed` is within ``limit`` (0 if none)."""
    n = min(math.floor(first + (limit - 1) * later), 1 << 62)
    while n >= 1 and failures_needed(first, later, n) > limit:
        n -= 1
    return max(n, 0)


def format_big(x: float) -> str:
    """``x`` to two digits, or ``over 1e308`` when it overflowed."""
    return f"{x:.2g}" if math.isfinite(x) else "over 1e308"


def _check_feasible(
    proc: FailureProcess, T_A: float, T_C: float, T_R: float, target: int, limit: int
) -> None:
    """Refuse a run that would need more than ``limit`` failures, before drawing any.

    Why: the cost is per failure, and for ``λ(T_A+T_C) ≫ 1`` the failures per unit grow like
    ``e^{λ(T_A+T_C)}``; without this check such a run simply never returns.
    """
    X = T_A + T_C
    first = proc.mean_reach(X, X)  # the first gap starts without a restart
    later = proc.mean_reach(T_R + X, X)
    if first is None or later is None:
        return
    need = failures_needed(first, later, target)
    if need <= limit:
        return
    per_unit = 1.0 / later if later > 0 else math.inf
    if isinstance(proc, Exponential):
        lam = proc.rate
        why = (
            f"each unit needs e^(λ(T_A+T_C)) = e^{lam * X:.3g} = {format_big(_exp(lam * X))} "
            f"attempts on average and each restart is struck e^(λT_R) − 1 = "
            f"{format_big(_exp(lam * T_R) - 1)} times: {format_big(per_unit)} failures per unit"
        )
    else:
        why = f"at least {format_big(per_unit)} failures per unit on average"
    fit = fitting_count(first, later, limit)
    advice = (
        f"simulate at most {fit} units"
        if fit >= 1
        else "not even one unit fits: shorten T_A + T_C or T_R against the mean time between "
        f"failures ({proc.mean_gap:.3g} s)"
    )
    raise InvalidValueError(
        f"simulating {target} units would take {format_big(need)} failures on average ({why}), "
        f"more than max_failures={limit}: {advice}, raise max_failures, or use the analytic "
        "model (greenckpt.model.sojourn_times, exact for Poisson failures)"
    )


def _exp(x: float) -> float:
    return math.exp(x) if x < 709.0 else math.inf


def _next_batch(remaining: float, done: int, gaps_seen: int, last: int) -> int:
    """Gaps to draw next: enough to finish (plus 10%) at the rate seen so far, within bounds."""
    if done == 0:
        return min(2 * last, _MAX_BATCH)
    per_gap = done / gaps_seen
    want = math.ceil(1.1 * remaining / per_gap) if math.isfinite(remaining) else _MAX_BATCH
    return max(_MIN_BATCH, min(want, _MAX_BATCH))


def _result(
    *,
    moments: Moments,
    powers: FloatArray,
    T_A: float,
    done: int,
    failures: int,
    wall: float,
    conf: float,
    iid: bool,
) -> SimResult:
    def est(weights: list[float] | FloatArray) -> Estimate:
        return ratio_estimate(moments, np.append(weights, 0.0), _U, conf)

    total = est([1.0, 1.0, 1.0])
    energy = est(powers)
    return SimResult(
        A=est([1.0, 0.0, 0.0]),
        C=est([0.0, 1.0, 0.0]),
        R=est([0.0, 0.0, 1.0]),
        total=total,
        energy=energy,
        epe=energy.scaled(1.0 / T_A),
        time_factor=total.scaled(1.0 / T_A),
        units=done,
        failures=failures,
        wall_time=wall,
        confidence=conf,
        iid_samples=iid,
    )
