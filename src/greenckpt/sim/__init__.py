"""Monte Carlo simulation of runs with failures, to check the analytic model and go beyond it.

Pure and deterministic given a seed: no I/O, no machine access. Failures come from a
:class:`FailureProcess` (Poisson, Weibull renewal, or a replayed trace) and strike in every
state; the simulators walk from failure to failure (not over time steps), so they are exact for
any failure process independent of the application and fast enough to check the model to a few
parts in ten thousand in a second.

* :func:`simulate_basic_unit` — single-level checkpointing (:mod:`greenckpt.model.basic_unit`).
* :func:`simulate_multilevel` / :func:`replay_multilevel` — multilevel checkpointing
  (:mod:`greenckpt.model.multilevel`).

Every figure is an :class:`Estimate` with a confidence interval; energies are modelled from the
given state powers (``energy_source == "modelled"``: simulated time × the caller's
powers, whose own provenance — measured, estimated or synthetic — the caller labels).
"""

from greenckpt.sim.basic_unit import DEFAULT_UNITS, SimResult, gap_state_times, simulate_basic_unit
from greenckpt.sim.multilevel import (
    DEFAULT_PERIODS,
    MultilevelSimResult,
    replay_multilevel,
    simulate_multilevel,
)
from greenckpt.sim.processes import Exponential, FailureProcess, GapStream, Trace, Weibull
from greenckpt.sim.stats import Estimate

__all__ = [
    "DEFAULT_PERIODS",
    "DEFAULT_UNITS",
    "Estimate",
    "Exponential",
    "FailureProcess",
    "GapStream",
    "MultilevelSimResult",
    "SimResult",
    "Trace",
    "Weibull",
    "gap_state_times",
    "replay_multilevel",
    "simulate_basic_unit",
    "simulate_multilevel",
]
