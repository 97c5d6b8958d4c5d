"""A SYNTHETIC node for profiler tests: throughput and power are known functions of the CPU
frequency the fake sysfs tree shows and of the number of I/O processes.

Nothing here is a measurement. The real profiler code runs against it: ``NodeSettings`` writes
frequencies and governors into a :class:`~tests.platform.fake_cpu.FakeSysfsRoot` tree (and must
restore it), the real :class:`~greenckpt.platform.sampler.Sampler` reads a meter whose energy is
the integral of the model's power on a manual clock, and a fake I/O engine "runs" a job by
reading ``scaling_cur_freq`` from the tree, registering its power window and advancing the clock
by ``size / throughput`` — no sleeping, no disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from greenckpt.io import IOResult, job_files
from greenckpt.platform.meters.base import Meter, MeterOptions, Resolution, Source
from greenckpt.platform.root import SysRoot
from tests.platform.fake_power import ManualClock

POLICY0 = "sys/devices/system/cpu/cpufreq/policy0"
IDLE_W = 40.0


MODEL_RATIO = 1.25
"""SYNTHETIC compression ratio of every codec in the model."""


def model_throughput(op: str, f_hz: float, n: int, codec: str | None = None) -> float:
    """Logical bytes/s: CPU-bound at low frequency and few processes, device-bound above.

    A codec moves ``MODEL_RATIO`` times fewer bytes through the device but costs CPU time
    (compression costs writes 30 % of their CPU-bound rate, decompression costs reads 20 %)."""
    ghz = f_hz / 1e9
    device = 900e6 if op == "read" else 500e6
    cpu = (260e6 if op == "read" else 180e6) * ghz * n**0.6
    if codec is not None:
        device *= MODEL_RATIO
        cpu *= 0.8 if op == "read" else 0.7
    return min(device, cpu)


def model_power(op: str, f_hz: float, n: int, codec: str | None = None) -> float:
    """Watts: idle + dynamic CPU power growing with f² and the busy cores, + per-process cost
    (+ 2 W for a codec's extra CPU work)."""
    ghz = f_hz / 1e9
    busy = min(n, 4)
    extra = 2.0 if codec is not None else 0.0
    return IDLE_W + 6.0 * ghz**2 * busy + 1.5 * n + (3.0 if op == "write" else 2.0) + extra


@dataclass
class Window:
    start: float
    end: float
    watts: float


class ModelMeter(Meter):
    """SYNTHETIC counter meter: idle power plus the registered I/O windows' extra power."""

    name = "rapl"
    source: ClassVar[Source] = "measured"

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.t0 = clock()
        self.windows: list[Window] = []
        self.reads = 0

    @classmethod
    def probe(cls, root: SysRoot, options: MeterOptions) -> Self:  # pragma: no cover
        raise NotImplementedError

    @property
    def domains(self) -> tuple[str, ...]:
        return ("package-0",)

    @property
    def resolution(self) -> Resolution:
        return Resolution(1e-6, "J")

    def energy_at(self, t: float) -> float:
        e = IDLE_W * (t - self.t0)
        for w in self.windows:
            overlap = max(0.0, min(t, w.end) - max(self.t0, w.start))
            e += (w.watts - IDLE_W) * overlap
        return e

    def read(self) -> dict[str, float]:
        self.reads += 1
        return {"package-0": self.energy_at(self.clock())}


@dataclass
class FakeIO:
    """Stands in for ``greenckpt.io.run_io``: model timing and power, files created empty."""

    root: SysRoot
    clock: ManualClock
    meter: ModelMeter
    calls: list[dict[str, Any]] = field(default_factory=list)
    fail_after: int | None = None
    """Raise KeyboardInterrupt on the call after this many (to kill a sweep mid-way)."""
    on_call: Callable[[Mapping[str, Any]], None] | None = None

    def frequency(self) -> float:
        return int(self.root.read(f"{POLICY0}/scaling_cur_freq").strip()) * 1000.0

    def __call__(
        self,
        op: Any,
        path: str | os.PathLike[str],
        *,
        total_bytes: int,
        workers: int,
        block_size: int,
        layout: Any,
        read_method: Any,
        name: str,
        keep: bool,
        on_start: Callable[[], None] | None,
        codec: str | None = None,
        data: Any = "random",
    ) -> IOResult:
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise KeyboardInterrupt
        f = self.frequency()
        call = {"op": op, "f": f, "n": workers, "size": total_bytes, "codec": codec, "data": data}
        self.calls.append(call)
        if self.on_call is not None:
            self.on_call(call)
        files = job_files(path, name, layout, workers)
        if op == "write":
            for file in files:
                Path(file).touch()
        self.clock.advance(0.05)  # process start-up, outside the I/O window
        if on_start is not None:
            on_start()
        thr = model_throughput(op, f, workers, codec)
        seconds = total_bytes / thr
        start = self.clock()
        watts = model_power(op, f, workers, codec)
        self.meter.windows.append(Window(start, start + seconds, watts))
        self.clock.advance(seconds)
        return IOResult(
            op=op,
            layout=layout,
            workers=workers,
            total_bytes=total_bytes,
            block_size=block_size,
            fsync=True,
            read_method="o_direct" if op == "read" else None,
            path=os.fspath(path),
            files=files,
            kept=True,
            storage_key="synthetic:test",
            in_process=workers == 1,
            start_method=None,
            wall_s=seconds,
            start_monotonic_s=start,
            end_monotonic_s=start + seconds,
            throughput=thr,
            processes=(),
            codec=codec,
            stored_bytes=round(total_bytes / MODEL_RATIO) if codec else total_bytes,
            data=data,
        )
