"""Benchmark: the planner on large profiles, pruned (``plan``) against exhaustive (issue 19).

Profiles are SYNTHETIC (labelled so, measuring nothing): 2 operations × CPU frequencies ×
I/O process counts × codecs, with throughput saturating in processes and frequency and power
growing with both, each figure jittered by a seeded ±15 %: 80, 1k, 6k and 41k points.
``plan()`` pairs only the points no other point beats in throughput and power;
``_plan_exhaustive`` pairs every write with every read of its codec (the reference). Both must
give the same plan (checked here too). Times are medians of interleaved repetitions (new, old,
new, old, ...); peak memory is tracemalloc's peak (NumPy reports its buffers to it) of one
``plan`` call in a fresh interpreter. The exhaustive search is skipped where its quadratic
extrapolation from the previous size exceeds 120 s. Target: 41k points in < 1 s and < 200 MB.
Run: ``.venv/bin/python benchmarks/bench_planner.py``. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import json
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before NumPy loads its BLAS

import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

from greenckpt.optimize import Profile, ProfilePoint, Scenario, plan  # noqa: E402
from greenckpt.optimize.planner import _plan_exhaustive  # noqa: E402

GIB = 2**30
SCENARIO = Scenario(ckpt_size=64 * GIB, rate=1.89474e-5, app_power=471.1)
CODECS = (None, "lz4", "zstd", "zstd-3", "gzip")
# (frequencies, process counts, codecs): 2 × 5 × 8 × 1 = 80, 2 × 10 × 25 × 2 = 1000,
# 2 × 20 × 50 × 3 = 6000, 2 × 43 × 96 × 5 = 41280 points.
GRIDS = ((5, 8, 1), (10, 25, 2), (20, 50, 3), (43, 96, 5))
REPEATS = {80: 7, 1000: 5, 6000: 3, 41280: 3}
SKIP_OLD_S = 120.0
TARGET_S, TARGET_MB = 1.0, 200.0


def synthetic_profile(n_freq: int, n_procs: int, n_codecs: int, seed: int = 0) -> Profile:
    """A synthetic node: ``2 × n_freq × n_procs × n_codecs`` points (see the module text)."""
    rng = np.random.default_rng(seed)
    freqs = np.linspace(0.8e9, 5.0e9, n_freq) if n_freq > 1 else np.array([2.0e9])
    cores = n_procs
    points = []
    for op, base_bw, base_w in (("write", 1.2e9, 180.0), ("read", 2.0e9, 170.0)):
        for c, codec in enumerate(CODECS[:n_codecs]):
            ratio = 1.0 + 0.5 * c  # compressed bytes move faster but cost CPU
            for f in freqs:
                for n in range(1, n_procs + 1):
                    sat = 1.0 - np.exp(-n / 4.0)
                    cpu = (f / 5.0e9) ** 0.5
                    thr = base_bw * ratio * sat * (0.4 + 0.6 * cpu) / (1 + 0.1 * c / cpu)
                    power = base_w + 60.0 * (f / 5.0e9) ** 2 * min(n, cores) ** 0.7 + 8.0 * c
                    jitter = rng.uniform(0.85, 1.15, 2)
                    points.append(
                        ProfilePoint(
                            op=op,  # type: ignore[arg-type]
                            processes=n,
                            throughput=float(thr * jitter[0]),
                            power=float(power * jitter[1]),
                            power_source="estimated",
                            frequency=float(f),
                            codec=codec,
                        )
                    )
    machine = {"frequencies_hz": [float(f) for f in freqs], "cores": cores}
    return Profile(points=tuple(points), synthetic=True, machine=machine, note="synthetic")


def _peak_mb(grid: tuple[int, int, int], exhaustive: bool) -> float:
    """tracemalloc's peak (MB) of one plan of ``grid``'s profile, in a fresh interpreter."""
    code = (
        "import json, sys, tracemalloc\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import bench_planner as b\n"
        "prof = b.synthetic_profile(*json.loads(sys.argv[2]))\n"
        "f = b._plan_exhaustive if sys.argv[3] == '1' else b.plan\n"
        "tracemalloc.start()\n"
        "f(prof, b.SCENARIO)\n"
        "print(tracemalloc.get_traced_memory()[1])\n"
    )
    here = os.path.dirname(os.path.abspath(__file__))
    args = [sys.executable, "-c", code, here, json.dumps(list(grid)), str(int(exhaustive))]
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    return int(out.stdout.split()[-1]) / 1e6


def _time(f: Callable[[Profile, Scenario], object], prof: Profile) -> float:
    t0 = time.perf_counter()
    f(prof, SCENARIO)
    return time.perf_counter() - t0


def main() -> None:
    print("SYNTHETIC profiles (generated here, not measurements); scenario: 64 GiB, MTBF 14.7 h")
    head = f"{'points':>7} {'pairs':>11} {'old median':>11} {'new median':>11} {'speed-up':>9}"
    print(f"{head} {'old peak':>10} {'new peak':>10} same")
    prev: tuple[int, float] | None = None
    rows = []
    for grid in GRIDS:
        prof = synthetic_profile(*grid)
        n = len(prof.points)
        pairs = grid[2] * (grid[0] * grid[1]) ** 2  # writes × reads of each codec
        run_old = prev is None or prev[1] * (pairs / prev[0]) <= SKIP_OLD_S
        new_t: list[float] = []
        old_t: list[float] = []
        same = "-"
        if run_old:
            same = "yes" if plan(prof, SCENARIO) == _plan_exhaustive(prof, SCENARIO) else "NO"
        for _ in range(REPEATS[n]):  # interleaved
            new_t.append(_time(plan, prof))
            if run_old:
                old_t.append(_time(_plan_exhaustive, prof))
        new_med = statistics.median(new_t)
        old_med = statistics.median(old_t) if old_t else float("nan")
        if old_t:
            prev = (pairs, old_med)
        new_mb = _peak_mb(grid, exhaustive=False)
        old_mb = _peak_mb(grid, exhaustive=True) if run_old else float("nan")
        old_s = f"{old_med:10.3f}s" if old_t else f"{'skipped':>11}"
        old_m = f"{old_mb:8.1f}MB" if run_old else f"{'skipped':>10}"
        ratio = f"{old_med / new_med:8.1f}x" if old_t else f"{'-':>9}"
        print(
            f"{n:>7} {pairs:>11,} {old_s} {new_med:10.4f}s {ratio} {old_m} {new_mb:8.1f}MB {same}"
        )
        rows.append((n, new_med, new_mb))
    n, t, mb = rows[-1]
    ok = t < TARGET_S and mb < TARGET_MB
    print(
        f"{n} points: {t:.3f} s ({t / TARGET_S:.2f} of the {TARGET_S:g} s budget), "
        f"{mb:.1f} MB ({mb / TARGET_MB:.2f} of {TARGET_MB:g} MB): "
        f"{'meets' if ok else 'MISSES'} the target"
    )


if __name__ == "__main__":
    main()
