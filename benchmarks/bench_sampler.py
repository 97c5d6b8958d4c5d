"""CPU cost of greenckpt's power sampler: must stay under 1 % of one core at 10 Hz.

Run: ``PYTHONPATH=src python benchmarks/bench_sampler.py [--seconds 10] [--repeats 3]``.
Not a test: nothing here asserts a time; it prints ratios.

Cases, run interleaved (case 1, case 2, ..., case 1, ...) and reported as medians:

* ``idle thread``: the baseline — a thread that wakes at the same rate and does nothing.
* ``estimator``: the sampler reading this machine's real ``/proc/stat`` (the meter this VM has).
* ``rapl (fake tree)``: the sampler reading four powercap-style counters (package, core,
  uncore, dram) in a SYNTHETIC tree under the temp directory — the same open-once/``pread``
  path as on a RAPL machine, though a real sysfs read costs somewhat more than a tmpfs one.

Each run measures the sampling thread's own CPU time (``time.thread_time`` inside the thread)
and the whole process's (``resource.getrusage``; the main thread only sleeps), divided by the
wall time: the fraction of one core spent. The 1 kHz rows show what the fastest rate costs.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from greenckpt.platform.meters import MeterOptions, RaplMeter, UtilisationEstimator
from greenckpt.platform.root import SysRoot
from greenckpt.platform.sampler import Sampler


@dataclass
class Run:
    thread_cpu_s: float
    process_cpu_s: float
    wall_s: float
    reads: int


def _process_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def idle_thread(rate_hz: float, seconds: float) -> Run:
    """Baseline: a thread waking on the same schedule, doing nothing."""
    stop = threading.Event()
    out: dict[str, float] = {}
    wakes = 0

    def loop() -> None:
        nonlocal wakes
        cpu0 = time.thread_time()
        period = 1.0 / rate_hz
        next_t = time.monotonic() + period
        while not stop.wait(max(0.0, next_t - time.monotonic())):
            wakes += 1
            next_t += period
        out["cpu"] = time.thread_time() - cpu0

    p0, w0 = _process_cpu(), time.monotonic()
    t = threading.Thread(target=loop)
    t.start()
    time.sleep(seconds)
    stop.set()
    t.join()
    return Run(out["cpu"], _process_cpu() - p0, time.monotonic() - w0, wakes)


def sampler_run(make: Callable[[], object], rate_hz: float, seconds: float) -> Run:
    meter = make()
    p0, w0 = _process_cpu(), time.monotonic()
    s = Sampler([meter], rate_hz=rate_hz).start()  # type: ignore[list-item]
    time.sleep(seconds)
    s.stop()
    run = Run(s.thread_cpu_s, _process_cpu() - p0, time.monotonic() - w0, s.ticks)
    meter.close()  # type: ignore[attr-defined]
    return run


def fake_rapl_tree(root: Path) -> None:
    """A SYNTHETIC single-socket powercap tree (package, core, uncore, dram)."""
    zones = [("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "core")]
    zones += [("intel-rapl:0:1", "uncore"), ("intel-rapl:0:2", "dram")]
    for zone, name in zones:
        d = root / "sys/class/powercap" / zone
        d.mkdir(parents=True)
        (d / "name").write_text(name + "\n")
        (d / "energy_uj").write_text("123456789\n")
        (d / "max_energy_range_uj").write_text("262143328850\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved runs per case")
    ap.add_argument("--fast-seconds", type=float, default=3.0, help="length of the 1 kHz runs")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        fake_rapl_tree(Path(tmp))
        fake_root = SysRoot(Path(tmp))
        real_root = SysRoot(Path("/"))
        opts = MeterOptions()
        cases: list[tuple[str, float, float, Callable[[float, float], Run]]] = []
        for rate, secs in ((10.0, args.seconds), (1000.0, args.fast_seconds)):
            cases += [
                (f"idle thread @ {rate:g} Hz", rate, secs, idle_thread),
                (
                    f"estimator @ {rate:g} Hz",
                    rate,
                    secs,
                    lambda r, s: sampler_run(
                        lambda: UtilisationEstimator.probe(real_root, opts), r, s
                    ),
                ),
                (
                    f"rapl (fake tree) @ {rate:g} Hz",
                    rate,
                    secs,
                    lambda r, s: sampler_run(lambda: RaplMeter.probe(fake_root, opts), r, s),
                ),
            ]
        results: dict[str, list[Run]] = {name: [] for name, *_ in cases}
        for _ in range(args.repeats):
            for name, rate, secs, fn in cases:
                results[name].append(fn(rate, secs))

    print(
        f"sampler CPU cost, median of {args.repeats} interleaved runs "
        f"({args.seconds:g} s at 10 Hz, {args.fast_seconds:g} s at 1 kHz)\n"
    )
    header = (
        f"{'case':<28} {'reads/s':>8} {'thread %core':>13} {'process %core':>14} "
        f"{'µs/wake':>8} {'vs idle':>9}"
    )
    print(header)
    print("-" * len(header))
    baseline: dict[float, float] = {}
    for name, rate, _secs, _fn in cases:
        runs = results[name]
        thread_frac = statistics.median(r.thread_cpu_s / r.wall_s for r in runs)
        proc_frac = statistics.median(r.process_cpu_s / r.wall_s for r in runs)
        reads = statistics.median(r.reads / r.wall_s for r in runs)
        per_read = statistics.median(r.thread_cpu_s / max(1, r.reads) for r in runs) * 1e6
        if name.startswith("idle"):
            baseline[rate] = thread_frac
            extra = "—"
        else:
            extra = f"+{100 * (thread_frac - baseline[rate]):.3f}%"
        print(
            f"{name:<28} {reads:>8.1f} {100 * thread_frac:>12.3f}% {100 * proc_frac:>13.3f}% "
            f"{per_read:>8.1f} {extra:>9}"
        )
    worst = max(
        statistics.median(r.thread_cpu_s / r.wall_s for r in results[name])
        for name, rate, *_ in cases
        if rate == 10.0 and not name.startswith("idle")
    )
    verdict = "meets" if worst < 0.01 else "MISSES"
    print(
        f"\nat 10 Hz the sampler thread uses {100 * worst:.3f}% of a core: {verdict} the < 1% goal"
    )


if __name__ == "__main__":
    main()
