"""The pruned planner answers exactly what the exhaustive search over every pair answers.

Random profiles (seeded numpy, several sizes) draw throughputs and powers from coarse grids so
that duplicates and ties in one or both are common, mix codecs and C-state settings, and are
planned under random constraints (power cap, max slowdown, model form). The plan — chosen
settings, interval, baselines, every figure — and the Pareto front must be equal, as must any
refusal (same exception, same message). With waiting entries (some settings measured, some
not, some negative), the power pruned on is the phase's, which depends on the process count
and the CPU setting: the same equalities must hold for either wait mode and any ``R``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from greenckpt.errors import GreenckptError
from greenckpt.optimize import Profile, ProfilePoint, Scenario, pareto_front, plan
from greenckpt.optimize.front import _pareto_front_exhaustive
from greenckpt.optimize.planner import _plan_exhaustive
from greenckpt.optimize.pruning import nondominated
from greenckpt.optimize.waiting import WaitingPower

GIB = 2**30
CODECS = (None, None, "zstd", "lz4")


def random_profile(rng: np.random.Generator, n_freq: int, n_procs: int) -> Profile:
    """A synthetic profile: every (op, frequency, processes, codec, C-states) cell with
    probability 0.8, figures from coarse grids (ties) or continuous draws."""
    freqs = [1.0e9 + 0.1e9 * i for i in range(n_freq)]
    procs = [1 + i for i in range(n_procs)]
    coarse = bool(rng.integers(2))
    points = []
    for op in ("write", "read"):
        for f in freqs:
            for n in procs:
                for codec in sorted(set(CODECS), key=str):
                    for cst in (None, False) if rng.random() < 0.3 else (None,):
                        if rng.random() > 0.8:
                            continue
                        if coarse:
                            thr = float(rng.choice([0.5, 1.0, 1.5, 2.0])) * 1e9
                            power = float(rng.choice([200.0, 250.0, 300.0]))
                        else:
                            thr = float(rng.uniform(0.2, 3.0)) * 1e9 * (1 + 0.1 * n)
                            power = float(rng.uniform(150.0, 350.0)) + 5.0 * n
                        points.append(
                            ProfilePoint(
                                op=op,  # type: ignore[arg-type]
                                processes=n,
                                throughput=thr,
                                power=power,
                                power_source="estimated",
                                frequency=f,
                                codec=codec,
                                cstates=cst,
                            )
                        )
    order = rng.permutation(len(points))
    machine: dict[str, Any] = {"frequencies_hz": freqs, "cores": procs[-1]}
    return Profile(points=tuple(points[i] for i in order), synthetic=True, machine=machine)


def random_scenario(rng: np.random.Generator) -> Scenario:
    return Scenario(
        ckpt_size=float(rng.choice([1, 8, 64])) * GIB,
        rate=float(rng.choice([1e-7, 1e-5, 1 / 3600, 1e-3])),
        app_power=float(rng.choice([150.0, 300.0, 471.1])),
        form="exact" if rng.random() < 0.7 else "saito2013",
        max_slowdown=[None, 0.0, 0.01, 0.2][int(rng.integers(4))],
        power_cap=[None, None, 260.0, 320.0][int(rng.integers(4))],
    )


def outcome(f: Callable[[Profile, Scenario], object], prof: Profile, scn: Scenario) -> object:
    """What ``f(prof, scn)`` returns, or the type and message of the greenckpt error it raises."""
    try:
        return f(prof, scn)
    except GreenckptError as exc:
        return (type(exc), str(exc))


SIZES = [(2, 2), (3, 4), (5, 8), (8, 6)]


@pytest.mark.parametrize("seed", range(40))
def test_pruned_plan_equals_the_exhaustive_search(seed: int) -> None:
    rng = np.random.default_rng(seed)
    prof = random_profile(rng, *SIZES[seed % len(SIZES)])
    for _ in range(4):
        scn = random_scenario(rng)
        got = outcome(plan, prof, scn)
        want = outcome(_plan_exhaustive, prof, scn)
        assert got == want
        if not isinstance(want, tuple):  # the chosen settings are the same points, too
            assert got.best.write is want.best.write  # type: ignore[attr-defined]
            assert got.best.read is want.best.read  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(24))
def test_pruned_pareto_front_equals_the_exhaustive_one(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    prof = random_profile(rng, *SIZES[seed % len(SIZES)])
    for _ in range(3):
        scn = random_scenario(rng)
        got = outcome(pareto_front, prof, scn)
        assert got == outcome(_pareto_front_exhaustive, prof, scn)


def _pt(op: str, thr: float, power: float, codec: str | None = None, n: int = 1) -> ProfilePoint:
    return ProfilePoint(
        op=op,  # type: ignore[arg-type]
        processes=n,
        throughput=thr,
        power=power,
        power_source="estimated",
        codec=codec,
    )


def test_nondominated_keeps_the_first_of_equal_points_and_each_codec() -> None:
    a = _pt("write", 2e9, 300.0, n=1)
    b = _pt("write", 2e9, 300.0, n=2)  # equal to a: a is first
    c = _pt("write", 1e9, 300.0, n=3)  # slower at the same power
    d = _pt("write", 1e9, 200.0, n=4)  # slower but cheaper: on the front
    e = _pt("write", 1e9, 400.0, codec="zstd")  # another codec competes only with its own
    assert nondominated((a, b, c, d, e)) == (a, d, e)
    assert nondominated((b, a, c)) == (b,)


def test_ties_break_as_the_exhaustive_search_breaks_them() -> None:
    writes = [_pt("write", 1e9, 250.0, n=n) for n in (3, 1, 2)]  # equal figures
    reads = [_pt("read", 2e9, 200.0, n=n) for n in (2, 1)]
    prof = Profile(points=(*writes, *reads), synthetic=True, machine={"cores": 3})
    scn = Scenario(ckpt_size=8 * GIB, rate=1e-5, app_power=300.0)
    got, want = plan(prof, scn), _plan_exhaustive(prof, scn)
    assert got == want
    assert got.best.write is writes[0] and got.best.read is reads[0]


def random_waiting(rng: np.random.Generator, prof: Profile) -> Profile:
    """``prof`` with SYNTHETIC waiting entries for about two thirds of its (frequency,
    C-states, mode) combinations, per-rank powers from a coarse grid (ties; a negative one
    is noise taken as 0 W) or continuous draws."""
    combos = sorted({(p.frequency, p.cstates) for p in prof.points}, key=repr)
    entries = []
    for f, cst in combos:
        for mode in ("polite", "spin"):
            if rng.random() > 0.65:
                continue
            grid = [-0.1, 0.0, 0.5] if mode == "polite" else [5.0, 10.0, 20.0]
            w = float(rng.choice(grid)) if rng.random() < 0.5 else float(rng.uniform(0, 25))
            entries.append(
                WaitingPower(
                    mode=mode,  # type: ignore[arg-type]
                    ranks=8,
                    power_per_rank=w,
                    power_source="synthetic",
                    frequency=f,
                    cstates=cst,
                )
            )
    return replace(prof, waiting=tuple(entries[i] for i in rng.permutation(len(entries))))


def waiting_scenario(rng: np.random.Generator, prof: Profile) -> Scenario:
    counts = prof.process_counts
    r = [None, counts[-1], int(rng.integers(1, counts[-1] + 3))][int(rng.integers(3))]
    return replace(
        random_scenario(rng),
        wait_mode="spin" if rng.random() < 0.5 else "polite",
        app_processes=r,
    )


@pytest.mark.parametrize("seed", range(16))
def test_pruned_plan_with_waiting_ranks_equals_the_exhaustive_search(seed: int) -> None:
    rng = np.random.default_rng(5000 + seed)
    prof = random_waiting(rng, random_profile(rng, *SIZES[seed % len(SIZES)]))
    for _ in range(4):
        scn = waiting_scenario(rng, prof)
        got = outcome(plan, prof, scn)
        want = outcome(_plan_exhaustive, prof, scn)
        assert got == want
        if not isinstance(want, tuple):
            assert got.best.write is want.best.write  # type: ignore[attr-defined]
            assert got.best.read is want.best.read  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(8))
def test_pruned_pareto_front_with_waiting_ranks_equals_the_exhaustive_one(seed: int) -> None:
    rng = np.random.default_rng(7000 + seed)
    prof = random_waiting(rng, random_profile(rng, *SIZES[seed % len(SIZES)]))
    for _ in range(3):
        scn = waiting_scenario(rng, prof)
        got = outcome(pareto_front, prof, scn)
        assert got == outcome(_pareto_front_exhaustive, prof, scn)


def test_the_waiting_ranks_change_what_the_pruning_keeps() -> None:
    """Why the phase's power is pruned on: one writer beside seven spinning waiters costs
    more than eight writers, though its own point is the cheaper one."""
    one = _pt("write", 1e9, 200.0, n=1)
    eight = _pt("write", 1e9, 210.0, n=8)
    read = _pt("read", 1e9, 200.0, n=8)
    spin = WaitingPower(mode="spin", ranks=8, power_per_rank=10.0, power_source="synthetic")
    prof = Profile(points=(one, eight, read), synthetic=True, machine={"cores": 8})
    scn = Scenario(ckpt_size=8 * GIB, rate=1e-5, app_power=300.0, wait_mode="spin")
    assert nondominated((one, eight)) == (one,)  # the points alone: eight is dominated
    assert plan(prof, scn).best.write is one  # nothing measured: waiting assumed idle
    spinning = replace(prof, waiting=(spin,))
    assert plan(spinning, scn).best.write is eight  # 200 + 7 x 10 W > 210 W
    assert nondominated((one, eight), [270.0, 210.0]) == (eight,)
