"""Choose checkpoint and restart settings and the checkpoint interval that minimise EPE.

This is saito2013's profile lookup (section 6): every profile point gives, for a checkpoint of
``ckpt_size`` bytes, a time (size / throughput) and a node power. For every pair of a write
point (checkpoint settings) and a read point (restart settings) that use the same codec — a
checkpoint written compressed must be read with the same codec — the energy-optimal interval is
known in closed form (:func:`greenckpt.model.energy_optimal_interval`), so the joint optimum
over (write settings, read settings, interval) is a vectorised search over pairs, exact rather
than tied to Young's interval; pairs of points no plan can choose are pruned first (exact too).

Waiting ranks: a point's power was measured with its ``n`` I/O processes and every other core
idle, but in the phase the other ``R − n`` ranks of the node wait (``R``: the application's
processes per node). Their power per rank, from the profile's ``waiting`` entries for the
scenario's wait mode (:mod:`greenckpt.optimize.waiting`), is added to the point's power before
anything else — the cap, the pruning and the search all see the phase's power.

Constraints:

* ``power_cap`` (W): checkpoint and restart points whose node power during the phase (the
  waiting ranks included) exceeds it are not used. It bounds the phases greenckpt controls;
  the application's own power ``W_A`` is an input, not a setting, so it is not checked
  against the cap.
* ``max_slowdown`` (fraction): the plan's expected wall time per useful second may exceed that
  of the *fastest* plan the profile allows (fastest settings at the time-optimal interval,
  within the power cap) by at most this fraction. Because both the time and the EPE of a pair
  are unimodal in the interval, the best feasible interval of a pair is its energy optimum
  clipped to the interval range where the time bound holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from greenckpt.errors import GreenckptError
from greenckpt.model import (
    IntervalRule,
    ModelForm,
    StateTimes,
    energy_optimal_interval,
    epe,
    interval,
    sojourn_times,
    time_factor,
    time_optimal_interval,
)
from greenckpt.optimize.baselines import (
    ACTIVE_PSTATE_DRIVERS,
    BASELINES,
    FREQUENCY_TOLERANCE,
    app_processes,
    baseline_point,
    governor_frequency,
)
from greenckpt.optimize.lever_fields import swept_levers
from greenckpt.optimize.profile_data import Profile, ProfileError, ProfilePoint, check_unique_cells
from greenckpt.optimize.pruning import nondominated_index
from greenckpt.optimize.setting import CpuSetting
from greenckpt.optimize.split import PhaseWaiting, split_notes, split_offered
from greenckpt.optimize.waiting import (
    WAIT_MODES,
    WaitingLookup,
    WaitingUse,
    WaitMode,
    check_unique_waiting,
    no_waiting,
)

__all__ = [
    "ACTIVE_PSTATE_DRIVERS",
    "BASELINES",
    "FREQUENCY_TOLERANCE",
    "MIN_RATE",
    "Baseline",
    "Choice",
    "Plan",
    "PlanError",
    "Savings",
    "Scenario",
    "app_processes",
    "baseline_point",
    "governor_frequency",
    "plan",
]

MIN_RATE = 1e-15
"""Smallest failure rate (1/s) planned for: intervals scale as 1/√λ and overflow beyond it."""


class PlanError(GreenckptError, ValueError):
    """The inputs cannot give a plan; the message says which value and what would be valid."""


@dataclass(frozen=True)
class Scenario:
    """What the optimizer is asked: one node's checkpoint size, the job's failure rate and the
    application's power, plus constraints and how to evaluate the baselines.

    ``app_processes`` is ``R``, the application's ranks per node (default
    :func:`app_processes`): the governor baselines write with all of them, and a plan with
    ``n`` I/O processes has ``R − n`` ranks waiting, in ``wait_mode``.
    """

    ckpt_size: float
    rate: float
    app_power: float
    app_processes: int | None = None
    form: ModelForm = "exact"
    max_slowdown: float | None = None
    power_cap: float | None = None
    baseline_interval: IntervalRule = "young"
    work: float | None = None
    nodes: int = 1
    wait_mode: WaitMode = "polite"

    def validate(self) -> None:
        """Raise :class:`PlanError` for the first value out of range."""
        checks: list[tuple[str, float | None, bool]] = [
            ("ckpt_size", self.ckpt_size, True),
            ("rate", self.rate, True),
            ("app_power", self.app_power, True),
            ("max_slowdown", self.max_slowdown, False),
            ("power_cap", self.power_cap, True),
            ("work", self.work, True),
        ]
        for name, value, strict in checks:
            if value is None:
                continue
            if not math.isfinite(value) or value < 0 or (strict and value == 0):
                bound = "> 0" if strict else ">= 0"
                raise PlanError(f"{name} must be a finite number {bound}, got {value!r}")
        if self.rate < MIN_RATE:
            raise PlanError(
                f"the job's MTBF ({1 / self.rate:.3g} s) is beyond the model's range: give an "
                f"MTBF of at most {1 / MIN_RATE:.0e} s (about 30 million years)"
            )
        if self.app_processes is not None and self.app_processes < 1:
            raise PlanError(f"app_processes must be >= 1, got {self.app_processes}")
        if self.nodes < 1:
            raise PlanError(f"nodes must be >= 1, got {self.nodes}")
        if self.wait_mode not in WAIT_MODES:
            raise PlanError(
                f"wait_mode must be one of {', '.join(WAIT_MODES)}, got {self.wait_mode!r}"
            )


@dataclass(frozen=True)
class Choice:
    """A checkpoint point, a restart point and an interval, with the model's expectations.

    ``write_waiting``/``read_waiting``: the power of the ranks that wait during the phase,
    added to the point's power (``W_C = write.power + write_waiting.power``); ``epe`` and the
    energies per GB include it.
    """

    write: ProfilePoint
    read: ProfilePoint
    T_A: float
    T_C: float
    T_R: float
    times: StateTimes
    epe: float
    time_factor: float
    write_waiting: WaitingUse = field(default_factory=no_waiting)
    read_waiting: WaitingUse = field(default_factory=no_waiting)
    write_split: CpuSetting | None = None
    """The waiting ranks' own CPU setting during the checkpoint when the per-core split is
    used (the I/O processes' cores at ``write.setting``, the others at this); None: no split."""
    read_split: CpuSetting | None = None
    """The same for the restart."""

    @property
    def write_waiting_setting(self) -> CpuSetting:
        """The CPU setting of the waiting ranks' cores while checkpointing (the point's own
        when there is no per-core split)."""
        return self.write.setting if self.write_split is None else self.write_split

    @property
    def read_waiting_setting(self) -> CpuSetting:
        """The CPU setting of the waiting ranks' cores while restarting."""
        return self.read.setting if self.read_split is None else self.read_split

    @property
    def uses_levers(self) -> bool:
        """True when the choice sets a lever beyond the core clock or splits the cores."""
        return (
            not (self.write.levers_as_found and self.read.levers_as_found)
            or self.write_split is not None
            or self.read_split is not None
        )

    @property
    def overhead(self) -> float:
        """Expected extra wall time over the failure-free, checkpoint-free run (fraction)."""
        return self.time_factor - 1.0

    @property
    def write_waiting_power(self) -> float:
        """Watts the waiting ranks add to the checkpoint (``(R − n) × w_wait``)."""
        return self.write_waiting.power

    @property
    def read_waiting_power(self) -> float:
        """Watts the waiting ranks add to the restart."""
        return self.read_waiting.power

    @property
    def W_C(self) -> float:
        """Node power while checkpointing: the write point's plus its waiting ranks'."""
        return self.write.power + self.write_waiting_power

    @property
    def W_R(self) -> float:
        """Node power while restarting: the read point's plus its waiting ranks'."""
        return self.read.power + self.read_waiting_power

    @property
    def write_energy_per_gb(self) -> float:
        """Joules per GB (1e9 bytes) checkpointed, waiting ranks included."""
        return self.W_C / self.write.throughput * 1e9

    @property
    def read_energy_per_gb(self) -> float:
        """Joules per GB (1e9 bytes) restarted, waiting ranks included."""
        return self.W_R / self.read.throughput * 1e9


@dataclass(frozen=True)
class Baseline:
    """A stock governor evaluated on the profile, or why it could not be."""

    name: str
    choice: Choice | None
    how: str


@dataclass(frozen=True)
class Savings:
    """Relative savings of the plan against a baseline: ``(baseline − plan)/baseline``.

    Positive means the plan uses less. (wu2018 equation 2 gives the same with the sign flipped.)
    """

    epe: float
    write_energy_per_gb: float
    read_energy_per_gb: float
    time_factor: float


@dataclass(frozen=True)
class Plan:
    """The optimizer's answer and what it was compared against."""

    scenario: Scenario
    best: Choice
    fastest_time_factor: float
    app_processes: int
    baselines: tuple[Baseline, ...]
    synthetic: bool
    power_sources: frozenset[str]
    notes: tuple[str, ...] = ()
    """Remarks on the figures behind the plan (a waiting power taken from another setting, or
    not measured at all)."""
    frequency_only: Baseline | None = None
    """The best plan with every lever beyond the core clock as found and no per-core split
    (what greenckpt chose before issue 33), to show what the levers save; None when the
    profile offers nothing beyond it (it would be :attr:`best`)."""
    levers: Mapping[str, bool] = field(default_factory=dict)
    """The profile's ``levers`` metadata: which levers the node had (empty: not recorded)."""
    split_searched: bool = False
    """Whether the waiting ranks' own frequency (the per-core split) was searched."""
    swept_levers: tuple[str, ...] = ()
    """The levers some point of the profile sets (its lever axes), by name."""

    def savings(self, baseline: Baseline) -> Savings | None:
        """Savings of :attr:`best` against ``baseline``, or ``None`` if it was not evaluable."""
        b = baseline.choice
        if b is None:
            return None

        def rel(base: float, value: float) -> float:
            return (base - value) / base

        return Savings(
            epe=rel(b.epe, self.best.epe),
            write_energy_per_gb=rel(b.write_energy_per_gb, self.best.write_energy_per_gb),
            read_energy_per_gb=rel(b.read_energy_per_gb, self.best.read_energy_per_gb),
            time_factor=rel(b.time_factor, self.best.time_factor),
        )


def _choice(
    scn: Scenario,
    w: ProfilePoint,
    r: ProfilePoint,
    T_A: float,
    w_wait: WaitingUse,
    r_wait: WaitingUse,
    w_split: CpuSetting | None = None,
    r_split: CpuSetting | None = None,
) -> Choice:
    T_C = scn.ckpt_size / w.throughput
    T_R = scn.ckpt_size / r.throughput
    st = sojourn_times(T_A, T_C, T_R, scn.rate, form=scn.form)
    times = StateTimes(st.A[()], st.C[()], st.R[()])
    W_C, W_R = w.power + w_wait.power, r.power + r_wait.power
    return Choice(
        write=w,
        read=r,
        T_A=float(T_A),
        T_C=T_C,
        T_R=T_R,
        times=times,
        epe=float(epe(T_A, T_C, T_R, scn.rate, scn.app_power, W_C, W_R, form=scn.form)),
        time_factor=float(time_factor(T_A, T_C, T_R, scn.rate)),
        write_waiting=w_wait,
        read_waiting=r_wait,
        write_split=w_split,
        read_split=r_split,
    )


def _pairs(
    writes: tuple[ProfilePoint, ...], reads: tuple[ProfilePoint, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Index arrays of (write, read) pairs that share a codec, writes then reads in order."""
    codes: dict[str | None, int] = {}
    w_code = np.array([codes.setdefault(w.codec, len(codes)) for w in writes], dtype=np.int64)
    r_code = np.array([codes.get(r.codec, -1) for r in reads], dtype=np.int64)
    wi, ri = np.nonzero(w_code[:, None] == r_code[None, :])
    return wi.astype(np.int64), ri.astype(np.int64)


def _time_bounds(
    tc: np.ndarray, tr: np.ndarray, rate: float, x_time: np.ndarray, bound: float
) -> tuple[np.ndarray, np.ndarray]:
    """Interval range ``[lo, hi]`` around ``x_time`` where ``time_factor ≤ bound`` (bisection)."""

    def f(ta: np.ndarray) -> np.ndarray:
        return time_factor(ta, tc, tr, rate)

    lo_a, lo_b = x_time * 1e-9, x_time.copy()
    hi_a = x_time.copy()
    hi_b = x_time * 2.0
    for _ in range(200):  # grow the upper bracket until it is infeasible
        grow = f(hi_b) <= bound
        if not grow.any():
            break
        hi_b = np.where(grow, hi_b * 2.0, hi_b)
    for _ in range(100):
        mid = np.sqrt(lo_a * lo_b)
        ok = f(mid) <= bound
        lo_b = np.where(ok, mid, lo_b)
        lo_a = np.where(ok, lo_a, mid)
        mid = 0.5 * (hi_a + hi_b)
        ok = f(mid) <= bound
        hi_a = np.where(ok, mid, hi_a)
        hi_b = np.where(ok, hi_b, mid)
    return lo_b, hi_a


@dataclass(frozen=True)
class _OpPoints:
    """One operation's candidate points with their phase power (point power + waiting
    ranks'), aligned."""

    points: tuple[ProfilePoint, ...]
    power: np.ndarray

    def take(self, index: np.ndarray) -> _OpPoints:
        return _OpPoints(tuple(self.points[i] for i in index), self.power[index])


@dataclass(frozen=True)
class _Pairs:
    """Codec-compatible (write, read) candidate pairs as parallel arrays of T_C, T_R, W_C, W_R
    (the phase powers: point power + waiting ranks)."""

    writes: _OpPoints
    reads: _OpPoints
    wi: np.ndarray
    ri: np.ndarray
    tc: np.ndarray
    tr: np.ndarray
    wc: np.ndarray
    wr: np.ndarray
    all_writes: _OpPoints | None = None
    """Every write and read point within the power cap, pruned or not (for the front)."""
    all_reads: _OpPoints | None = None
    waits: PhaseWaiting | None = None
    """The waiting lookup the phase powers came from (the chosen points' details)."""


def _op_points(profile: Profile, scn: Scenario, waits: PhaseWaiting) -> tuple[_OpPoints, ...]:
    """Each operation's points with their phase power, within the power cap."""
    out = []
    for op, phase in (("write", "checkpoint"), ("read", "restart")):
        points = profile.for_op(op)  # type: ignore[arg-type]
        if not points:
            raise ProfileError(
                f"the profile has no '{op}' points: a plan needs {op} ({phase}) measurements; "
                f"profile the storage target for {op}s"
            )
        power = np.array([p.power for p in points]) + waits.extra_power(points)
        pts = _OpPoints(points, power)
        if scn.power_cap is not None:
            pts = pts.take(np.flatnonzero(power <= scn.power_cap))
            if not pts.points:
                raise PlanError(
                    f"no {op} point of the profile stays under the power cap "
                    f"({scn.power_cap:g} W, waiting ranks included): raise the cap"
                )
        out.append(pts)
    return tuple(out)


def _candidates(
    profile: Profile, scn: Scenario, *, prune: bool = True, split: bool | None = None
) -> _Pairs:
    """Candidate pairs within the power cap; refuses scenarios no pair can make progress in,
    and profiles that hold a cell (or a waiting entry) twice (the copies would compete).

    Every point's power is first the phase's: the point's plus its ``R − n`` waiting ranks'
    (:class:`~greenckpt.optimize.waiting.WaitingLookup`). With ``prune``, points that another
    point of the same operation and codec matches or beats in throughput and that power are
    left out (:mod:`greenckpt.optimize.pruning`): no plan can choose them, and pairing only
    the rest keeps the search from growing with the square of the profile. ``split``: whether
    the waiters' own setting is searched (default: where the profile offers it,
    :mod:`greenckpt.optimize.split`)."""
    scn.validate()
    check_unique_cells(profile.points)
    check_unique_waiting(profile.waiting)
    waits = PhaseWaiting(
        profile.waiting,
        scn.wait_mode,
        app_processes(profile, scn.app_processes),
        split=split_offered(profile) if split is None else split,
    )
    pool = _op_points(profile, scn, waits)
    out = [ops.take(nondominated_index(ops.points, ops.power)) if prune else ops for ops in pool]
    writes, reads = out
    wi, ri = _pairs(writes.points, reads.points)
    if wi.size == 0:
        raise PlanError(
            "no write and read points share a codec: a restart must read what was written"
        )
    tc = scn.ckpt_size / np.array([writes.points[i].throughput for i in wi])
    mtbf = 1.0 / scn.rate
    if tc.min() >= mtbf:
        raise PlanError(
            f"the MTBF ({mtbf:.4g} s) is not longer than the fastest checkpoint "
            f"({tc.min():.4g} s): no interval makes progress; give a longer MTBF, fewer nodes "
            "or a smaller checkpoint"
        )
    return _Pairs(
        writes=writes,
        reads=reads,
        wi=wi,
        ri=ri,
        tc=tc,
        tr=scn.ckpt_size / np.array([reads.points[j].throughput for j in ri]),
        wc=writes.power[wi],
        wr=reads.power[ri],
        all_writes=pool[0],
        all_reads=pool[1],
        waits=waits,
    )


def plan(profile: Profile, scenario: Scenario) -> Plan:
    """Jointly choose write settings, read settings and interval minimising EPE.

    A profile measured at several sizes is first narrowed to the size nearest the checkpoint
    (:meth:`Profile.at_size`). Only points no other point beats in throughput and power are
    paired; the answer is the exhaustive search's (:func:`_plan_exhaustive`), ties included.
    """
    result = _plan(profile, scenario, prune=True)
    if not math.isfinite(result.best.epe):  # no pair is evaluable: answer as the exhaustive
        return _plan_exhaustive(profile, scenario)  # search does (its first pair)
    return result


def _plan_exhaustive(profile: Profile, scenario: Scenario) -> Plan:
    """:func:`plan` over every pair of points: the reference the pruned search must equal."""
    return _plan(profile, scenario, prune=False)


def _search(
    profile: Profile, scn: Scenario, *, prune: bool, split: bool
) -> tuple[Choice, float, PhaseWaiting]:
    """The best choice among the profile's pairs, the fastest time factor, and the waiting
    lookup (the vectorised search over pairs, each at its best feasible interval)."""
    c = _candidates(profile, scn, prune=prune, split=split)
    writes, reads, wi, ri, tc, tr, wc, wr = c.writes, c.reads, c.wi, c.ri, c.tc, c.tr, c.wc, c.wr
    x_time = time_optimal_interval(tc, scn.rate)
    f_time = time_factor(x_time, tc, tr, scn.rate)
    fastest = float(np.nanmin(f_time))
    x_energy = energy_optimal_interval(tc, tr, scn.rate, scn.app_power, wc, wr, form=scn.form)
    ta = x_energy
    feasible = np.isfinite(f_time)
    if scn.max_slowdown is not None:
        bound = fastest * (1.0 + scn.max_slowdown)
        feasible &= f_time <= bound * (1 + 1e-12)
        lo, hi = _time_bounds(tc, tr, scn.rate, x_time, bound)
        ta = np.clip(x_energy, lo, hi)
    values = epe(ta, tc, tr, scn.rate, scn.app_power, wc, wr, form=scn.form)
    values = np.where(feasible & np.isfinite(values), values, np.inf)
    k = int(np.argmin(values))
    w, r = writes.points[int(wi[k])], reads.points[int(ri[k])]
    waits = c.waits
    assert waits is not None  # _candidates sets it
    (w_wait, w_split), (r_wait, r_split) = waits.use(w), waits.use(r)
    best = _choice(scn, w, r, float(ta[k]), w_wait, r_wait, w_split, r_split)
    return best, fastest, waits


def _frequency_only(
    profile: Profile, scn: Scenario, *, prune: bool, split: bool
) -> Baseline | None:
    """The best plan with every lever beyond the core clock as found and no per-core split,
    or None when the profile offers nothing else (it is then the plan itself)."""
    if not split and all(p.levers_as_found for p in profile.points):
        return None
    plain = replace(profile, points=tuple(p for p in profile.points if p.levers_as_found))
    how = "every lever beyond the core clock as found, no per-core split"
    if not plain.points:
        return Baseline(
            "frequency-only", None, "the profile has no point with every lever as found"
        )
    try:
        choice = _search(plain, scn, prune=prune, split=False)[0]
    except (PlanError, ProfileError) as exc:
        return Baseline("frequency-only", None, str(exc))
    return Baseline("frequency-only", choice if math.isfinite(choice.epe) else None, how)


def _plan(profile: Profile, scenario: Scenario, *, prune: bool) -> Plan:
    scn = scenario
    profile = profile.at_size(scn.ckpt_size)
    split = split_offered(profile)
    best, fastest, waits = _search(profile, scn, prune=prune, split=split)
    n_app = app_processes(profile, scn.app_processes)
    baselines = tuple(_baseline(profile, scn, name, n_app, waits.lookup) for name in BASELINES)
    return Plan(
        scenario=scn,
        best=best,
        fastest_time_factor=fastest,
        app_processes=n_app,
        baselines=baselines,
        synthetic=profile.synthetic,
        power_sources=frozenset(profile.power_sources),
        notes=_waiting_notes(best)
        + split_notes(profile, min(profile.process_counts) < n_app, split),
        frequency_only=_frequency_only(profile, scn, prune=prune, split=split),
        levers=dict(profile.levers),
        split_searched=split,
        swept_levers=swept_levers(profile.points),
    )


def _waiting_notes(best: Choice) -> tuple[str, ...]:
    """What the plan's waiting figures rest on, where it is not an exact measurement."""
    notes = []
    for phase, use in (("checkpoint", best.write_waiting), ("restart", best.read_waiting)):
        if use.ranks and not use.exact:
            notes.append(f"{phase}: waiting power of the {use.ranks} waiting ranks {use.how}")
    return tuple(notes)


def _baseline(profile: Profile, scn: Scenario, name: str, n: int, waits: WaitingLookup) -> Baseline:
    """A governor baseline: every one of the ``n`` application processes does I/O, so no rank
    waits (the waiting lookup gives 0 W for ``n ≥ R``)."""
    w, how_w = baseline_point(profile, "write", name, n)
    r, how_r = baseline_point(profile, "read", name, n)
    if w is None or r is None:
        return Baseline(name=name, choice=None, how=how_w if w is None else how_r)
    T_C = scn.ckpt_size / w.throughput
    T_R = scn.ckpt_size / r.throughput
    if 1.0 / scn.rate <= T_C:
        return Baseline(name, None, f"its checkpoint ({T_C:.4g} s) is not shorter than the MTBF")
    w_wait, r_wait = waits.use(w), waits.use(r)
    T_A = float(
        interval(
            scn.baseline_interval,
            T_C,
            T_R,
            scn.rate,
            scn.app_power,
            w.power + w_wait.power,
            r.power + r_wait.power,
            form=scn.form,
        )
    )
    how = how_w if how_w == how_r else f"write: {how_w}; read: {how_r}"
    return Baseline(name=name, choice=_choice(scn, w, r, T_A, w_wait, r_wait), how=how)
