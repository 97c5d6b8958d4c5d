"""Benchmark: planner and model speed (targets from issue 2).

* ``plan`` on a 5 frequencies × 8 process counts × 2 operations profile (the shipped synthetic
  example without its governor points), interval optimised jointly: target < 50 ms.
* The Pareto front on the same profile (no target; reported).
* Vectorised model throughput: basic units evaluated per second by ``sojourn_times`` + ``epe``.

Medians of interleaved repetitions; run ``python benchmarks/bench_plan.py``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from greenckpt.model import energy_optimal_interval, epe, sojourn_times
from greenckpt.optimize import Profile, Scenario, load_profile, pareto_front, plan

ROOT = Path(__file__).resolve().parents[1]
TARGET_PLAN_S = 0.050


def _grid_profile() -> Profile:
    prof = load_profile(ROOT / "examples" / "profiles" / "synthetic-pcie-flash.json")
    points = tuple(p for p in prof.points if p.frequency is not None)
    assert len(points) == 5 * 8 * 2
    return Profile(points=points, synthetic=True, machine=prof.machine, storage=prof.storage)


def main() -> None:
    prof = _grid_profile()
    scn = Scenario(ckpt_size=64 * 2**30, rate=1.89474e-5, app_power=471.1)
    n = 1_000_000
    rng = np.random.default_rng(0)
    T_A = rng.uniform(600, 7200, n)
    T_C = rng.uniform(10, 600, n)
    T_R = rng.uniform(10, 600, n)

    def model_eval() -> None:
        sojourn_times(T_A, T_C, T_R, 1e-5)
        epe(T_A, T_C, T_R, 1e-5, 400.0, 300.0, 320.0)
        energy_optimal_interval(T_C, T_R, 1e-5, 400.0, 300.0, 320.0)

    cases: dict[str, Callable[[], object]] = {
        "plan (80 points, joint interval)": lambda: plan(prof, scn),
        "plan with max_slowdown 1%": lambda: plan(
            prof, Scenario(scn.ckpt_size, scn.rate, scn.app_power, max_slowdown=0.01)
        ),
        "pareto_front": lambda: pareto_front(prof, scn),
        "model: 1e6 units (times, EPE, interval)": model_eval,
    }
    for f in cases.values():  # warm-up
        f()
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(9):  # interleaved repetitions
        for name, f in cases.items():
            t0 = time.perf_counter()
            f()
            samples[name].append(time.perf_counter() - t0)
    print(f"{'case':42} {'median':>10} {'min':>10}")
    for name, xs in samples.items():
        print(f"{name:42} {statistics.median(xs) * 1e3:8.2f} ms {min(xs) * 1e3:8.2f} ms")
    med = statistics.median(samples["plan (80 points, joint interval)"])
    verdict = "meets" if med < TARGET_PLAN_S else "MISSES"
    print(
        f"plan median {med * 1e3:.2f} ms: {verdict} the < {TARGET_PLAN_S * 1e3:.0f} ms target "
        f"(ratio {med / TARGET_PLAN_S:.2f} of the budget)"
    )
    units_per_s = n / statistics.median(samples["model: 1e6 units (times, EPE, interval)"])
    print(f"model throughput: {units_per_s:,.0f} basic units per second (times + EPE + interval)")


if __name__ == "__main__":
    main()
