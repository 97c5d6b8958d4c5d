"""What a sweep measures: CPU settings × levers × C-states × sizes × codecs × process counts ×
operation.

Why a separate, pure module: the sweep runner, the resume logic, the adaptive mode and the
tests all need the same answer to "which points, in which order, and is this file's sweep the
same sweep?", without touching the machine.

Order: the grid is walked one *cell* at a time. A cell is one (CPU setting, levers, C-states,
size, codec, process count); within a cell every repetition writes the files and then reads
them back (reads need the files a write of the same size and process count left), so a cell
yields one point per operation. Cells are ordered CPU setting first, then the levers beyond the
core clock (:mod:`greenckpt.profile.lever_cells`), C-states, size, codec and processes, so the
node is reconfigured as rarely as possible. A stock governor is a baseline: it is measured with
every other lever as found only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from greenckpt.errors import GreenckptError
from greenckpt.io.codec import CodecError, parse_codec
from greenckpt.io.sources import DATA_KINDS
from greenckpt.optimize.lever_fields import LeverPoint
from greenckpt.optimize.profile_data import OPERATIONS, Operation
from greenckpt.optimize.setting import CpuSetting
from greenckpt.profile.lever_cells import (
    AS_FOUND,
    NO_AXES,
    LeverAxes,
    Levers,
    LeverSweepError,
)

__all__ = [
    "LAYOUTS",
    "READ_METHODS",
    "Cell",
    "CpuSetting",
    "SweepError",
    "SweepSpec",
    "cell_key",
    "default_process_counts",
    "ops_of",
    "point_cell_key",
]

LAYOUTS = ("file_per_process", "shared_file")
READ_METHODS = ("auto", "o_direct", "fadvise_dontneed", "cached")


class SweepError(GreenckptError, ValueError):
    """A sweep request is invalid; the message says which value and what would be valid."""


@dataclass(frozen=True)
class Cell:
    """One configuration of the node and the I/O pattern; yields one point per operation."""

    setting: CpuSetting
    cstates: bool | None
    size: int
    codec: str | None
    processes: int
    levers: Levers = AS_FOUND
    """The levers beyond the core clock this cell sets (all as found by default)."""

    @property
    def key(self) -> str:
        """Stable key used by the resume journal (the profile's ``sweep.done`` list)."""
        return cell_key(
            self.setting.key, self.cstates, self.size, self.codec, self.processes, self.levers
        )

    @property
    def base(self) -> Cell:
        """This cell with every lever as found (the adaptive mode's front is made of these)."""
        return Cell(self.setting, self.cstates, self.size, self.codec, self.processes)

    @property
    def label(self) -> str:
        """Short human description for progress lines."""
        parts = [self.setting.label, f"{self.processes} proc", _size_label(self.size)]
        if self.codec:
            parts.append(self.codec)
        if self.cstates is not None:
            parts.append("C-states " + ("on" if self.cstates else "off"))
        if not self.levers.as_found:
            parts.append(self.levers.label)
        return ", ".join(parts)


def cell_key(
    setting_key: str,
    cstates: bool | None,
    size: int,
    codec: str | None,
    processes: int,
    levers: Levers = AS_FOUND,
) -> str:
    """The key of the cell a point belongs to (``ProfilePoint.setting_key`` etc.); a cell
    with every lever as found has the key it had before the lever axes."""
    cst = "asfound" if cstates is None else ("on" if cstates else "off")
    return f"{setting_key}|{cst}|{size}|{codec or 'none'}|{processes}{levers.key}"


class KeyedPoint(LeverPoint, Protocol):
    """What :func:`point_cell_key` reads of a profile point."""

    @property
    def setting_key(self) -> str: ...
    @property
    def cstates(self) -> bool | None: ...
    @property
    def size(self) -> int | None: ...
    @property
    def codec(self) -> str | None: ...
    @property
    def processes(self) -> int: ...


def point_cell_key(point: KeyedPoint) -> str:
    """The key of the cell a profile point was measured in (its levers included)."""
    return cell_key(
        point.setting_key,
        point.cstates,
        point.size or 0,
        point.codec,
        point.processes,
        Levers.of_point(point),
    )


def _size_label(size: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def default_process_counts(cores: int) -> tuple[int, ...]:
    """1, 2, 4, … up to the first power of two at least twice the core count (beyond it, as
    the paper's 1–48 goes beyond its 12 cores)."""
    counts = [1]
    while counts[-1] < 2 * max(1, cores):
        counts.append(counts[-1] * 2)
    return tuple(counts)


@dataclass(frozen=True)
class SweepSpec:
    """Everything that defines a sweep; equal specs mean a file can be resumed."""

    path: str
    settings: tuple[CpuSetting, ...]
    processes: tuple[int, ...]
    ops: tuple[Operation, ...] = OPERATIONS
    sizes: tuple[int, ...] = (2 << 30,)
    codecs: tuple[str | None, ...] = (None,)
    cstates: tuple[bool | None, ...] = (None,)
    block_size: int = 1 << 20
    layout: str = "file_per_process"
    read_method: str = "auto"
    repetitions: int = 3
    warmup: int = 1
    idle_seconds: float = 5.0
    data: str = "random"
    """What the writes send: ``random`` (incompressible) or ``field`` (simulation state); a
    sweep with codecs should use ``field`` for every cell so compressed and uncompressed
    points move the same bytes."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Free-form settings recorded with the sweep (meters asked for, sampling rate)."""
    waiting_seconds: float = 0.0
    """Metered window of the waiting-power measurement, per CPU setting, C-state setting and
    wait mode (:mod:`greenckpt.profile.waiting`); 0 skips it. The library's default is 0
    because the measurement needs the checkpoint library's wait loop handed in (the profiler
    sits below it); ``greenckpt profile run`` measures 2 s by default."""
    levers: LeverAxes = NO_AXES
    """The levers beyond the core clock to sweep (each axis also measures "as found")."""

    def validate(self) -> None:
        """Raise :class:`SweepError` for the first invalid value (nothing about the machine).

        The checks run in a fixed order (the grid, then how each cell is run, then the codecs
        and data), so the same bad spec always gets the same first message.
        """
        self._validate_grid()
        try:
            self.levers.validate()
        except LeverSweepError as exc:
            raise SweepError(str(exc)) from None
        self._validate_runs()
        self._validate_codecs()
        if self.data not in DATA_KINDS:
            raise SweepError(f"data must be one of {', '.join(DATA_KINDS)}, got {self.data!r}")

    def _validate_grid(self) -> None:
        if not self.settings:
            raise SweepError("no CPU settings to measure: give frequencies and/or governors")
        if len(set(self.settings)) != len(self.settings):
            raise SweepError("a CPU setting is listed twice")
        if not self.processes:
            raise SweepError("the process list is empty: give at least one count, e.g. 1,2,4")
        for n in self.processes:
            if n < 1:
                raise SweepError(f"process counts must be >= 1, got {n}")
        if len(set(self.processes)) != len(self.processes):
            raise SweepError("a process count is listed twice")
        if not self.ops or any(op not in OPERATIONS for op in self.ops):
            raise SweepError(f"operations must be among {', '.join(OPERATIONS)}")
        if not self.sizes or any(s < 1 for s in self.sizes):
            raise SweepError("sizes must be positive byte counts")
        if self.block_size < 1:
            raise SweepError(f"block size must be >= 1 byte, got {self.block_size}")
        for s in self.sizes:
            for n in self.processes:
                if s < n * self.block_size:
                    raise SweepError(
                        f"size {s} B cannot give each of {n} processes a {self.block_size} B "
                        f"block: use a size of at least {n * self.block_size} B or fewer processes"
                    )

    def _validate_runs(self) -> None:
        if self.layout not in LAYOUTS:
            raise SweepError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.read_method not in READ_METHODS:
            raise SweepError(
                f"read method must be one of {', '.join(READ_METHODS)}, got {self.read_method!r}"
            )
        if self.repetitions < 1:
            raise SweepError(f"repetitions must be >= 1, got {self.repetitions}")
        if self.warmup < 0:
            raise SweepError(f"warm-up runs must be >= 0, got {self.warmup}")
        if not self.idle_seconds >= 0:
            raise SweepError(f"idle seconds must be >= 0, got {self.idle_seconds}")
        if not (math.isfinite(self.waiting_seconds) and self.waiting_seconds >= 0):
            raise SweepError(
                f"waiting seconds must be a finite number >= 0 (0 skips the waiting power), "
                f"got {self.waiting_seconds}"
            )

    def _validate_codecs(self) -> None:
        if not self.codecs:
            raise SweepError("the codec list is empty: give none and/or codecs, e.g. none,zstd")
        labels = []
        for codec in self.codecs:
            try:
                spec = parse_codec(codec)
            except CodecError as exc:
                raise SweepError(str(exc)) from None
            labels.append(None if spec is None else spec.label)
            if codec is not None and (spec is None or spec.label != codec):
                raise SweepError(
                    f"codec {codec!r} is not in canonical form: write "
                    f"{spec.label if spec else 'none'!r}"
                )
        if len(set(labels)) != len(labels):
            raise SweepError("a codec is listed twice")
        if any(labels) and self.layout != "file_per_process":
            raise SweepError(
                "codecs need --layout file_per_process: compressed sizes are known only after "
                "writing, so processes cannot share one file at fixed offsets"
            )

    def cells(self) -> list[Cell]:
        """Every cell, in measuring order (see the module docstring)."""
        return [
            Cell(setting, cst, size, codec, n, levers)
            for setting in self.settings
            for levers in self.lever_combos(setting)
            for cst in self.cstates
            for size in self.sizes
            for codec in self.codecs
            for n in self.processes
        ]

    def lever_combos(self, setting: CpuSetting) -> list[Levers]:
        """The lever combinations a CPU setting is measured with: every one for a fixed
        frequency (or the frequency as found), only "as found" for a stock governor (a
        baseline keeps everything else as the node had it)."""
        if setting.kind == "governor":
            return [Levers()]
        return list(self.levers.combos())

    def runs_per_cell(self) -> int:
        """I/O jobs per cell: every repetition and warm-up writes, and reads if asked."""
        per_rep = 1 + ("read" in self.ops)
        return (self.repetitions + self.warmup) * per_rep

    def to_json(self) -> dict[str, Any]:
        """The ``sweep.spec`` object of a profile (compared on resume)."""
        return {
            "path": self.path,
            "settings": [s.key for s in self.settings],
            "processes": list(self.processes),
            "ops": list(self.ops),
            "sizes": list(self.sizes),
            "codecs": list(self.codecs),
            "cstates": list(self.cstates),
            "block_size": self.block_size,
            "layout": self.layout,
            "read_method": self.read_method,
            "repetitions": self.repetitions,
            "warmup": self.warmup,
            "idle_seconds": self.idle_seconds,
            "data": self.data,
            "extra": dict(self.extra),
            "waiting_seconds": self.waiting_seconds,
            # absent without lever axes: the spec of a sweep without them is as it was
            **({} if self.levers.empty else {"levers": self.levers.to_json()}),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SweepSpec:
        """Inverse of :meth:`to_json`; raises :class:`SweepError` on anything malformed."""
        try:
            spec = cls(
                path=str(obj["path"]),
                settings=tuple(CpuSetting.from_key(str(k)) for k in obj["settings"]),
                processes=tuple(int(n) for n in obj["processes"]),
                ops=tuple(obj["ops"]),
                sizes=tuple(int(s) for s in obj["sizes"]),
                codecs=tuple(obj["codecs"]),
                cstates=tuple(obj["cstates"]),
                block_size=int(obj["block_size"]),
                layout=str(obj["layout"]),
                read_method=str(obj["read_method"]),
                repetitions=int(obj["repetitions"]),
                warmup=int(obj["warmup"]),
                idle_seconds=float(obj["idle_seconds"]),
                data=str(obj.get("data", "random")),
                extra=dict(obj.get("extra", {})),
                waiting_seconds=float(obj.get("waiting_seconds", 0.0)),
                levers=LeverAxes.from_json(obj.get("levers")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SweepError(f"the recorded sweep is malformed ({exc})") from None
        spec.validate()
        return spec

    def differences(self, other: SweepSpec) -> list[str]:
        """Field names whose values differ (why a file cannot be resumed with this spec)."""
        a, b = self.to_json(), other.to_json()
        return [k for k in {**a, **b} if a.get(k) != b.get(k)]


def ops_of(spec: SweepSpec) -> Sequence[Operation]:
    """The operations a cell records, writes first."""
    return [op for op in OPERATIONS if op in spec.ops]
