"""The runtime/energy Pareto front of the plans a profile allows.

Split from :mod:`greenckpt.optimize.planner`, which it shares the candidate pairs, the model
and the scenario with: the planner answers one plan, this module the whole trade-off between
expected wall time and energy per useful second that a user picks from (``plan --pareto``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from greenckpt.model import energy_optimal_interval, epe, time_factor, time_optimal_interval
from greenckpt.optimize.planner import Scenario, _candidates, _OpPoints, _Pairs, _pairs
from greenckpt.optimize.profile_data import Profile, ProfilePoint
from greenckpt.optimize.setting import CpuSetting


@dataclass(frozen=True)
class ParetoPoint:
    """A plan on the runtime/energy Pareto front."""

    time_factor: float
    epe: float
    write: ProfilePoint
    read: ProfilePoint
    T_A: float
    write_split: CpuSetting | None = None
    """The waiting ranks' own CPU setting while checkpointing (per-core split), as
    :attr:`greenckpt.optimize.planner.Choice.write_split`; None: no split."""
    read_split: CpuSetting | None = None


def pareto_front(profile: Profile, scenario: Scenario, samples: int = 24) -> list[ParetoPoint]:
    """Non-dominated (expected time per useful second, EPE) plans, fastest first.

    For each codec-compatible pair, the intervals between its time optimum and its energy
    optimum are the only ones that can be Pareto-optimal (outside them both objectives worsen);
    ``samples`` geometric steps cover that range. ``max_slowdown`` is ignored: the front shows
    the whole trade-off. Powers are the phases' (waiting ranks included), as in the plan.
    """
    return _front(profile, scenario, samples, prune=True)


def _pareto_front_exhaustive(
    profile: Profile, scenario: Scenario, samples: int = 24
) -> list[ParetoPoint]:
    """:func:`pareto_front` over every pair: the reference the pruned search must equal."""
    return _front(profile, scenario, samples, prune=False)


_MARGIN = 1e-9
"""Relative margin of the screen: far above the rounding of the model's figures."""

_BLOCK_PAIRS = 1 << 20
"""Pairs screened at a time (bounds the screen's memory)."""


def _samples(
    scn: Scenario, pairs: _Pairs, samples: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals, time factors and EPEs of every pair's ``samples`` steps (pairs × samples)."""
    tc, tr, wc, wr = pairs.tc, pairs.tr, pairs.wc, pairs.wr
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
    return ta, tf, ep


def _subset(scn: Scenario, c: _Pairs, wi: np.ndarray, ri: np.ndarray) -> _Pairs:
    """The pairs ``(wi, ri)`` of ``c``'s unpruned points, with their figures (the phase
    powers: point power + waiting ranks)."""
    writes, reads = _all(c)
    thr_w = np.array([p.throughput for p in writes.points])
    thr_r = np.array([p.throughput for p in reads.points])
    return _Pairs(
        writes=writes,
        reads=reads,
        wi=wi,
        ri=ri,
        tc=scn.ckpt_size / thr_w[wi],
        tr=scn.ckpt_size / thr_r[ri],
        wc=writes.power[wi],
        wr=reads.power[ri],
    )


def _all(c: _Pairs) -> tuple[_OpPoints, _OpPoints]:
    """Every write and read point of ``c`` within the power cap, pruned or not."""
    assert c.all_writes is not None and c.all_reads is not None, "pairs from _candidates"
    return c.all_writes, c.all_reads


def _survivors(scn: Scenario, c: _Pairs, samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of unpruned points whose samples may count on the front, in the exhaustive order.

    The pruned pairs' samples are computed first. A pair none of whose samples can reach below
    them — one of them is faster than its fastest and no worse than its least EPE, by a margin —
    can neither be on the front nor change which points are (the earlier sample hides it and
    everything it would hide); every other pair is kept and evaluated in full.
    """
    _, tf, ep = _samples(scn, c, samples)
    tf, ep = tf.ravel(), np.where(np.isfinite(ep), ep, np.inf).ravel()
    finite = np.isfinite(tf)
    order = np.argsort(tf[finite], kind="stable")
    tf_sorted, ep_min = tf[finite][order], np.minimum.accumulate(ep[finite][order])
    all_w, all_r = _all(c)
    w_pos = {id(p): i for i, p in enumerate(all_w.points)}
    r_pos = {id(p): j for j, p in enumerate(all_r.points)}
    kept_w = np.zeros(len(all_w.points), dtype=bool)
    kept_r = np.zeros(len(all_r.points), dtype=bool)
    kept_w[[w_pos[id(p)] for p in c.writes.points]] = True
    kept_r[[r_pos[id(p)] for p in c.reads.points]] = True
    out_w, out_r = [], []
    step = max(1, _BLOCK_PAIRS // max(1, len(all_r.points)))
    for start in range(0, len(all_w.points), step):
        wi, ri = _pairs(all_w.points[start : start + step], all_r.points)
        wi = wi + start
        sub = _subset(scn, c, wi, ri)
        x_t = time_optimal_interval(sub.tc, scn.rate)
        x_e = energy_optimal_interval(
            sub.tc, sub.tr, scn.rate, scn.app_power, sub.wc, sub.wr, form=scn.form
        )
        tf_lo = time_factor(x_t, sub.tc, sub.tr, scn.rate)
        ep_lo = epe(x_e, sub.tc, sub.tr, scn.rate, scn.app_power, sub.wc, sub.wr, form=scn.form)
        pos = np.searchsorted(tf_sorted, tf_lo * (1 - _MARGIN), side="left")
        best = np.full(pos.shape, np.inf)
        if tf_sorted.size:
            best = np.where(pos > 0, ep_min[np.maximum(pos - 1, 0)], np.inf)
        hidden = np.isfinite(tf_lo) & np.isfinite(ep_lo) & (best <= ep_lo * (1 - _MARGIN))
        keep = ~hidden | (kept_w[wi] & kept_r[ri])
        out_w.append(wi[keep])
        out_r.append(ri[keep])
    return np.concatenate(out_w), np.concatenate(out_r)


def _front(profile: Profile, scenario: Scenario, samples: int, *, prune: bool) -> list[ParetoPoint]:
    scn = scenario
    profile = profile.at_size(scn.ckpt_size)
    c = _candidates(profile, scn, prune=prune)
    waits = c.waits
    assert waits is not None  # _candidates sets it
    if prune:
        c = _subset(scn, c, *_survivors(scn, c, samples))
    writes, reads, wi, ri = c.writes.points, c.reads.points, c.wi, c.ri
    ta, tf, ep = _samples(scn, c, samples)
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
                write_split=waits.use(writes[wi[pair]])[1],
                read_split=waits.use(reads[ri[pair]])[1],
            )
        )
    return front
