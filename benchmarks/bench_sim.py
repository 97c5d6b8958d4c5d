"""Speed of greenckpt.sim on one core: simulated basic units (and multilevel failures) per second.

Run: ``PYTHONPATH=src python benchmarks/bench_sim.py``. Each case is run 5 times, interleaved
(case 1, case 2, ..., case 1, ...), and the median is reported. The target for the single-level
simulator is at least 1,000,000 basic units per second. Not a test: nothing here asserts a time.

Cases (SI units inside, as everywhere in greenckpt):

* saito2013: MTBF 14 h, T_C = 64 GiB / 500 MB/s, T_R = 64 GiB / 700 MB/s, T_A from Young's
  interval (λX ≈ 0.08: about 13 units between failures).
* λX ≈ 1: the same checkpoint and restart with an MTBF of one unit (about 1.7 failures per unit).
* multilevel: wu2018's FTI ``ckp(3,5,7,11)`` (minutes) on four levels, and a two-level nested
  schedule; the cost there is per failure (a Python loop over failures), so failures per second
  is the figure that matters.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before NumPy loads its BLAS: one core means one thread

import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402

from greenckpt.model import (  # noqa: E402
    Level,
    Schedule,
    fti_schedule,
    nested_schedule,
    young_interval,
)
from greenckpt.sim import simulate_basic_unit, simulate_multilevel  # noqa: E402

REPEATS = 5
GIB = 2**30
T_C = 64 * GIB / 500e6
T_R = 64 * GIB / 700e6
MTBF_14H = 14 * 3600.0


@dataclass
class Case:
    name: str
    run: Callable[[int], tuple[int, int]]  # seed -> (units or periods, failures)
    what: str  # "units" or "periods"


def _basic(T_A: float, rate: float, units: int) -> Callable[[int], tuple[int, int]]:
    def run(seed: int) -> tuple[int, int]:
        res = simulate_basic_unit(T_A, T_C, T_R, rate, units=units, seed=seed)
        return res.units, res.failures

    return run


def _multi(levels: list[Level], schedule: Schedule, periods: int) -> Case:
    def run(seed: int) -> tuple[int, int]:
        res = simulate_multilevel(levels, schedule, None, 1.0, periods=periods, seed=seed)
        return res.periods, res.failures

    name = f"multilevel {len(levels)} levels, {schedule.work.size} ckpt/period"
    return Case(name, run, "periods")


def cases() -> list[Case]:
    rate_14h = 1 / MTBF_14H
    t_a_young = float(young_interval(T_C, rate_14h))
    mtbf_one_unit = 3600.0
    fti_levels = [
        Level("L1 local", 10.0, 10.0, 1 / 7200),
        Level("L2 partner", 30.0, 40.0, 1 / 14400),
        Level("L3 RS", 60.0, 80.0, 1 / 28800),
        Level("L4 PFS", T_C, T_R, 1 / 57600),
    ]
    two_levels = [Level("L1", 10.0, 10.0, 1 / 3600), Level("L4 PFS", T_C, T_R, 1 / 14400)]
    return [
        Case(
            f"1-level saito2013 (λX={(t_a_young + T_C) * rate_14h:.3f})",
            _basic(t_a_young, rate_14h, 20_000_000),
            "units",
        ),
        Case(
            "1-level λX=1 (MTBF 1 h = T_A + T_C)",
            _basic(mtbf_one_unit - T_C, 1 / mtbf_one_unit, 2_000_000),
            "units",
        ),
        _multi(fti_levels, fti_schedule([180, 300, 420, 660], quantum=60.0), 4000),
        _multi(two_levels, nested_schedule(600.0, [6]), 40_000),
    ]


def main() -> int:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    todo = cases()
    times: dict[str, list[float]] = {c.name: [] for c in todo}
    counts: dict[str, tuple[int, int]] = {}
    for rep in range(REPEATS):  # interleaved, so drifts in machine speed hit every case alike
        for case in todo:
            start = time.perf_counter()
            counts[case.name] = case.run(1000 + rep)
            times[case.name].append(time.perf_counter() - start)
    header = f"{'case':<44} {'median s':>9} {'per second':>24} {'failures/s':>12}"
    print(f"greenckpt.sim on one core, median of {REPEATS} interleaved runs")
    print(header)
    print("-" * len(header))
    for case in todo:
        med = statistics.median(times[case.name])
        done, failures = counts[case.name]
        rate = f"{done / med:,.0f} {case.what}"
        print(f"{case.name:<44} {med:>9.3f} {rate:>24} {failures / med:>12,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
