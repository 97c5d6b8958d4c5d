"""The runtime/energy Pareto front of the plans a profile allows.

Split from :mod:`greenckpt.optimize.planner`, which it shares the candidate pairs, the model
and the scenario with: the planner answers one plan, this module the whole trade-off between
expected wall time and energy per useful second that a user picks from (``plan --pareto``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from greenckpt.model import energy_optimal_interval, epe, time_factor, time_optimal_interval
from greenckpt.optimize.planner import Scenario, _candidates
from greenckpt.optimize.profile import Profile, ProfilePoint


@dataclass(frozen=True)
class ParetoPoint:
    """A plan on the runtime/energy Pareto front."""

    time_factor: float
    epe: float
    write: ProfilePoint
    read: ProfilePoint
    T_A: float


def pareto_front(profile: Profile, scenario: Scenario, samples: int = 24) -> list[ParetoPoint]:
    """Non-dominated (expected time per useful second, EPE) plans, fastest first.

    For each codec-compatible pair, the intervals between its time optimum and its energy
    optimum are the only ones that can be Pareto-optimal (outside them both objectives worsen);
    ``samples`` geometric steps cover that range. ``max_slowdown`` is ignored: the front shows
    the whole trade-off.
    """
    return _front(profile, scenario, samples, prune=False)


def _pareto_front_exhaustive(
    profile: Profile, scenario: Scenario, samples: int = 24
) -> list[ParetoPoint]:
    """:func:`pareto_front` over every pair: the reference the pruned search must equal."""
    return _front(profile, scenario, samples, prune=False)


def _front(profile: Profile, scenario: Scenario, samples: int, *, prune: bool) -> list[ParetoPoint]:
    scn = scenario
    profile = profile.at_size(scn.ckpt_size)
    c = _candidates(profile, scn, prune=prune)
    writes, reads, wi, ri, tc, tr, wc, wr = c.writes, c.reads, c.wi, c.ri, c.tc, c.tr, c.wc, c.wr
    x_t = time_optimal_interval(tc, scn.rate)
    x_e = energy_optimal_interval(tc, tr, scn.rate, scn.app_power, wc, wr, form=scn.form)
    steps = np.linspace(0.0, 1.0, samples)[None, :]
    ta = np.exp(np.log(x_t)[:, None] * (1 - steps) + np.log(x_e)[:, None] * steps)
    tf = time_factor(ta, tc[:, None], tr[:, None], scn.rate)
    ep = epe(
        ta,
        tc[:, None],
        tr[:, None],
        scn.rate,
        scn.app_power,
        wc[:, None],
        wr[:, None],
        form=scn.form,
    )
    order = np.argsort(tf, axis=None, kind="stable")
    e_sorted = np.where(np.isfinite(ep), ep, np.inf).ravel()[order]
    prev_min = np.concatenate(([np.inf], np.minimum.accumulate(e_sorted)[:-1]))
    keep = order[e_sorted < prev_min * (1 - 1e-12)]
    front = []
    for idx in keep:
        pair, s = np.unravel_index(idx, tf.shape)
        front.append(
            ParetoPoint(
                time_factor=float(tf[pair, s]),
                epe=float(ep[pair, s]),
                write=writes[wi[pair]],
                read=reads[ri[pair]],
                T_A=float(ta[pair, s]),
            )
        )
    return front
