"""Adaptive sweeps: measure only the cells that could change the optimizer's decision.

Why: a full grid (every frequency × process count × operation × repetition) can take hours per
storage target, yet the optimizer needs only the region around its optimum. The adaptive mode
is a branch-and-bound over the grid: a quick initial design, an optimistic surrogate for every
unmeasured cell (throughput × (1 + m), power × (1 − m)), and the planner as the bound — a cell
its best plan uses is measured (quickly, then in full), and the sweep stops when every
scenario's best plan rests on fully measured points only. A larger margin ``m`` measures more
and is safer. The levers beyond the core clock (uncore, power limits, GPU clocks) multiply the
grid; they are explored only at the *front*: once the decision over the cells with every lever
as found has converged, every lever variant of the cells its best plans use is looked at, and
those the decision then rests on are measured in full — at most ``2 × scenarios × (L − 1)``
lever cells for ``L`` lever combinations (:func:`lever_bound`). The steps in full:
docs/design/profiler.md; ``benchmarks/bench_adaptive.py`` replays recorded full-grid profiles
to check it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from greenckpt.errors import InvalidValueError
from greenckpt.optimize import Scenario, plan
from greenckpt.optimize.planner import Choice, PlanError
from greenckpt.optimize.profile_data import Operation, Profile, ProfileError, ProfilePoint
from greenckpt.profile.grid import Cell, SweepSpec, ops_of, point_cell_key
from greenckpt.profile.lever_cells import Levers

DEFAULT_MARGIN = 0.10


@dataclass(frozen=True)
class DecisionScenario:
    """A scenario to decide for; ``app_power`` None means "the largest power measured so far"
    (a busy node), known only once something has been measured."""

    ckpt_size: float
    rate: float
    app_power: float | None = None

    def scenario(self, measured: Profile) -> Scenario:
        """The planner's scenario for the profile measured so far."""
        power = self.app_power or max(p.power for p in measured.points)
        return Scenario(ckpt_size=self.ckpt_size, rate=self.rate, app_power=power)


def _group(cell: Cell) -> tuple[object, ...]:
    return (cell.cstates, cell.size, cell.codec)


def process_design(counts: Sequence[int]) -> set[int]:
    """The process counts first looked at on a row: both ends and the middle."""
    ordered = sorted(set(counts))
    return {ordered[0], ordered[-1], ordered[len(ordered) // 2]}


def lever_bound(spec: SweepSpec, scenarios: int) -> int:
    """The most lever cells (cells setting a lever) an adaptive sweep measures: the variants
    of the front's cells, at most two per scenario (its best write and read points)."""
    combos = spec.levers.combinations()
    return 0 if combos == 1 else 2 * scenarios * (combos - 1)


def initial_cells(cells: Sequence[Cell]) -> list[Cell]:
    """The initial design (step 1 of the module docstring), in grid order: cells with every
    lever as found only (lever variants are looked at on the front)."""
    chosen: set[str] = set()
    groups: dict[tuple[object, ...], list[Cell]] = {}
    for c in cells:
        if c.levers.as_found:
            groups.setdefault(_group(c), []).append(c)
    for members in groups.values():
        counts = sorted({c.processes for c in members})
        edges = {counts[0], counts[-1]}
        sparse = process_design(counts)
        freqs = sorted({c.setting.hz for c in members if c.setting.hz is not None})
        rows = sorted({c.setting for c in members if c.setting.kind != "frequency"})
        full_row = freqs[-1] if freqs else None
        for c in members:
            if c.setting.kind == "frequency":
                if c.setting.hz == full_row or (c.setting.hz == freqs[0] and c.processes in sparse):
                    chosen.add(c.key)
            elif (not freqs and c.setting == rows[0] and c.processes in sparse) or (
                c.processes in edges
            ):
                chosen.add(c.key)
    return [c for c in cells if c.key in chosen]


def _predict_row(xs: np.ndarray, ys: np.ndarray, x: float) -> float:
    order = np.argsort(xs)
    return float(np.interp(x, xs[order], ys[order]))


class _Surrogate:
    """Interpolates one (group, op)'s measured points to any cell of the group."""

    def __init__(self, points: Sequence[ProfilePoint]) -> None:
        self.points = list(points)
        # scipy.interpolate costs ~0.2 s to import: only when a sweep is adaptive.
        from scipy.interpolate import (  # noqa: PLC0415
            LinearNDInterpolator,
            NearestNDInterpolator,
        )

        fixed = [p for p in points if p.frequency is not None]
        self._plane: tuple[Callable[..., np.ndarray], Callable[..., np.ndarray]] | None = None
        if fixed:
            xy = np.array([[p.frequency / 1e9, math.log2(p.processes)] for p in fixed])  # type: ignore[operator]
            vals = np.array([[p.throughput, p.power] for p in fixed])
            near = NearestNDInterpolator(xy, vals)
            lin: Callable[..., np.ndarray] | None = None
            if len(fixed) >= 3 and np.linalg.matrix_rank(xy - xy.mean(axis=0)) == 2:
                lin = LinearNDInterpolator(xy, vals)
            self._plane = (lin or near, near)

    def predict(self, cell: Cell) -> tuple[float, float] | None:
        x = math.log2(cell.processes)
        if cell.setting.kind == "frequency" and self._plane is not None:
            lin, near = self._plane
            assert cell.setting.hz is not None
            q = np.array([[cell.setting.hz / 1e9, x]])
            v = lin(q)[0]
            if not np.all(np.isfinite(v)):
                v = near(q)[0]
            return float(v[0]), float(v[1])
        row = [p for p in self.points if p.setting_key == cell.setting.key]
        if not row:
            return None
        xs = np.array([math.log2(p.processes) for p in row])
        thr = _predict_row(xs, np.array([p.throughput for p in row]), x)
        pw = _predict_row(xs, np.array([p.power for p in row]), x)
        return thr, pw


class AdaptiveChooser:
    """The adaptive mode as a :class:`~greenckpt.profile.sweep.CellChooser`."""

    mode = "adaptive"

    def __init__(
        self,
        spec: SweepSpec,
        scenarios: Sequence[DecisionScenario],
        margin: float = DEFAULT_MARGIN,
    ) -> None:
        if not scenarios:
            raise InvalidValueError("the adaptive mode needs at least one scenario to decide for")
        if not 0 <= margin < 1:
            raise InvalidValueError(f"the optimism margin must be in [0, 1), got {margin}")
        self.spec = spec
        self.scenarios = tuple(scenarios)
        self.margin = margin
        self.rounds = 0

    def next_cells(
        self, measured: Profile | None, pending: Sequence[Cell]
    ) -> list[tuple[Cell, bool]]:
        self.rounds += 1
        seen = set() if measured is None else {point_cell_key(p) for p in measured.points}
        first = [c for c in initial_cells(self.spec.cells()) if c.key not in seen]
        if first or measured is None:
            return [(c, True) for c in first]  # also when resuming a partial sweep
        quick = {c.key for c in pending if c.key in seen}
        base = replace(
            measured, points=tuple(p for p in measured.points if Levers.of_point(p).as_found)
        )
        unmeasured = [c for c in pending if c.key not in seen and c.levers.as_found]
        wanted, front = self._bound(base, unmeasured, quick)
        if not wanted:  # the decision with the levers as found has converged: the front
            wanted = self._front(measured, pending, seen, quick, front)
        return [(c, wanted[c.key]) for c in pending if c.key in wanted]

    def _bound(
        self, measured: Profile, unmeasured: Sequence[Cell], quick: set[str]
    ) -> tuple[dict[str, bool], set[str]]:
        """Steps 2–3 over ``measured`` (every lever as found): the cells to measure next,
        each quick or full, and the keys of the cells the best plans use (the front)."""
        optimistic, owner = self._optimistic(measured, unmeasured)
        wanted: dict[str, bool] = {}
        front: set[str] = set()
        for d in self.scenarios:
            try:
                best = self._best(measured, optimistic, d)
            except (PlanError, ProfileError):
                continue  # this scenario cannot be planned on this grid at all
            for p in (best.write, best.read):
                key = owner.get(id(p))
                if key is not None:
                    wanted[key] = True  # could beat everything measured: a quick look
                elif point_cell_key(p) in quick:
                    wanted.setdefault(point_cell_key(p), False)  # the decision rests on it
                front.add(point_cell_key(p))
        return wanted, front

    def _front(
        self,
        measured: Profile,
        pending: Sequence[Cell],
        seen: set[str],
        quick: set[str],
        front: set[str],
    ) -> dict[str, bool]:
        """The lever step: a quick look at every lever variant of the front's cells, then,
        planning over every measured point, each quick point a best plan uses in full."""
        variants = {c.key: True for c in pending if c.base.key in front and c.key not in seen}
        if variants:
            return variants
        wanted: dict[str, bool] = {}
        for d in self.scenarios:
            try:
                best = self._best(measured, (), d)
            except (PlanError, ProfileError):
                continue
            for p in (best.write, best.read):
                if point_cell_key(p) in quick:
                    wanted[point_cell_key(p)] = False
        return wanted

    @staticmethod
    def _best(
        measured: Profile, optimistic: tuple[ProfilePoint, ...], d: DecisionScenario
    ) -> Choice:
        """The planner's best choice for ``d`` over the measured and optimistic points."""
        return plan(
            replace(measured, points=measured.points + optimistic), d.scenario(measured)
        ).best

    def _optimistic(
        self, measured: Profile, pending: Sequence[Cell]
    ) -> tuple[tuple[ProfilePoint, ...], dict[int, str]]:
        surrogates: dict[tuple[object, ...], _Surrogate] = {}
        out: list[ProfilePoint] = []
        owner: dict[int, str] = {}
        m = self.margin
        for cell in pending:
            for op in ops_of(self.spec):
                key = (*_group(cell), op)
                if key not in surrogates:
                    surrogates[key] = _Surrogate(
                        [p for p in measured.points if _matches(p, cell, op)]
                    )
                guess = surrogates[key].predict(cell)
                if guess is None:
                    continue
                thr, pw = guess
                point = ProfilePoint(
                    op=op,
                    processes=cell.processes,
                    throughput=max(thr, 1.0) * (1 + m),
                    power=max(pw, 1e-3) * (1 - m),
                    power_source="estimated",
                    frequency=None if cell.setting.hz is None else float(cell.setting.hz),
                    governor=cell.setting.governor,
                    codec=cell.codec,
                    cstates=cell.cstates,
                    size=cell.size,
                )
                out.append(point)
                owner[id(point)] = cell.key
        return tuple(out), owner


def _matches(p: ProfilePoint, cell: Cell, op: Operation) -> bool:
    return (
        p.op == op and p.cstates == cell.cstates and p.size == cell.size and p.codec == cell.codec
    )
