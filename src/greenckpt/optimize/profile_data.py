"""The I/O+power profile: typed objects and the versioned JSON file format.

A profile is what the profiler measured on one machine for one storage target: per operation,
CPU setting and number of I/O processes (optionally per codec and C-state setting), the
throughput and the node's mean power. The optimizer turns it into ``T_C``/``T_R`` and
``W_C``/``W_R`` for the model. Throughput counts *logical* bytes, so points with and without a
codec compare directly, and every power figure carries its source (``measured``, ``estimated``
or ``synthetic``, never presented as a measurement).

Why validate here: loading checks every field and raises :class:`ProfileError` with the JSON
path of the first bad value, so a malformed file never reaches the optimizer. The format is in
docs/formats.md; what each field is for, and what version 2 adds, in docs/design/profiler.md.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, cast

from greenckpt.durable import write_atomic
from greenckpt.files import read_regular
from greenckpt.optimize.fields import (
    POWER_SOURCES,
    PowerSource,
    ProfileError,
    choice,
    flag,
    number,
    optional_int,
    optional_number,
    optional_str,
    setting_pair,
)
from greenckpt.optimize.lever_fields import (
    lever_fields_from_json,
    lever_fields_to_json,
    lever_key,
    lever_labels,
    levers_as_found,
    levers_from_json,
)
from greenckpt.optimize.setting import CpuSetting
from greenckpt.optimize.waiting import WaitingPower, waiting_from_json, waiting_to_json

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "OPERATIONS",
    "POWER_SOURCES",
    "READABLE_VERSIONS",
    "CellKey",
    "Operation",
    "PowerSource",
    "Profile",
    "ProfileError",
    "ProfilePoint",
    "Run",
    "cell_key",
    "check_unique_cells",
    "describe_cell",
    "load_profile",
    "point_to_json",
    "profile_from_json",
    "profile_to_json",
    "save_profile",
]

FORMAT_NAME = "greenckpt-profile"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)

Operation = Literal["write", "read"]
OPERATIONS: tuple[Operation, ...] = ("write", "read")


@dataclass(frozen=True)
class Run:
    """One repetition of a point as measured: logical bytes/s, mean node power, duration."""

    throughput: float
    power: float
    seconds: float


@dataclass(frozen=True)
class ProfilePoint:
    """One measured (or estimated, or synthetic) operating point of the node's I/O.

    At most one of ``frequency`` (Hz, a fixed CPU frequency) and ``governor`` (a stock cpufreq
    governor measured as a setting) is set; neither means the frequency was not controlled (the
    node had no cpufreq control, so the CPU ran as it was found). ``codec`` is ``None`` for
    uncompressed I/O. ``cstates`` is ``None`` when C-states were left as found, else whether
    they were enabled. ``size``/``block_size``/``layout`` describe the I/O pattern measured
    (``None`` in version 1 files). ``reliable`` is False when a power reading behind the figure
    failed or was degraded. ``runs`` are the repetitions the medians come from.
    """

    op: Operation
    processes: int
    throughput: float
    power: float
    power_source: PowerSource
    frequency: float | None = None
    governor: str | None = None
    codec: str | None = None
    cstates: bool | None = None
    repetitions: int = 1
    throughput_spread: float | None = None
    power_spread: float | None = None
    size: int | None = None
    block_size: int | None = None
    layout: str | None = None
    read_method: str | None = None
    reliable: bool = True
    runs: tuple[Run, ...] = ()
    data: str | None = None
    """What the profiler wrote: ``random`` (incompressible) or ``field`` (simulation state)."""
    compression_ratio: float | None = None
    """Logical bytes per stored byte measured at this point (codec points only)."""
    uncore_khz: int | None = None
    """Uncore frequency the point was measured at (every domain pinned); None = as found."""
    power_limit_w: float | None = None
    """Package long-term RAPL power limit (W) set while measuring; None = as found."""
    gpu_clock_mhz: int | None = None
    """GPU graphics application clock (MHz); None = as found (with ``gpu_memory_mhz``)."""
    gpu_memory_mhz: int | None = None
    """GPU memory application clock (MHz), set with ``gpu_clock_mhz``; None = as found."""
    gpu_power_limit_w: float | None = None
    """GPU power management limit (W); None = as found."""

    def __post_init__(self) -> None:
        # The one CPU-setting type decides what a frequency/governor pair may be (at most one,
        # a known governor): refused here, not later when a table asks for the point's label.
        # Reading it also caches it: keys and labels are asked per point in every lookup.
        _ = self.setting

    @cached_property
    def setting(self) -> CpuSetting:
        """The CPU setting this point was measured under, as the package's one setting type."""
        return CpuSetting.of(self.frequency, self.governor)

    @property
    def uncontrolled(self) -> bool:
        """True when the CPU frequency was not controlled (neither fixed nor a governor)."""
        return self.setting.kind == "uncontrolled"

    @property
    def setting_label(self) -> str:
        """Human label of the CPU setting, e.g. ``2.10 GHz``, ``ondemand`` or ``as found``."""
        return self.setting.label

    @property
    def setting_key(self) -> str:
        """Machine-readable CPU setting: ``<hz>``, ``governor:<name>`` or ``uncontrolled``."""
        return self.setting.key

    @property
    def levers_as_found(self) -> bool:
        """True when every lever beyond the core clock was left as found (the points the
        governor baselines and the frequency-only plan may use)."""
        return levers_as_found(self)

    @property
    def energy_per_byte(self) -> float:
        """Joules per logical byte moved at this point (the paper's Figure 8 per MB / 1e6)."""
        return self.power / self.throughput


@dataclass(frozen=True)
class Profile:
    """A set of profile points for one machine and storage target, plus their provenance."""

    points: tuple[ProfilePoint, ...]
    synthetic: bool = False
    note: str = ""
    machine: Mapping[str, Any] = field(default_factory=dict)
    storage: Mapping[str, Any] = field(default_factory=dict)
    meters: tuple[str, ...] = ()
    idle_power: float | None = None
    idle_power_source: PowerSource | None = None
    idle_power_spread: float | None = None
    power_domains: tuple[str, ...] = ()
    created: str = ""
    tool: str = ""
    status: Literal["complete", "partial"] = "complete"
    sweep: Mapping[str, Any] = field(default_factory=dict)
    waiting: tuple[WaitingPower, ...] = ()
    """Power per waiting rank by CPU setting, C-states and wait mode (optional, *v2*)."""
    levers: Mapping[str, bool] = field(default_factory=dict)
    """Which levers the node had (``{"per-core split": true, ...}``); empty when the profile
    predates the record, and then no lever is taken to be present."""

    def for_op(self, op: Operation) -> tuple[ProfilePoint, ...]:
        """Points of one operation, in file order."""
        return tuple(p for p in self.points if p.op == op)

    @property
    def power_sources(self) -> frozenset[PowerSource]:
        """Every power source that occurs in the profile (for labels in reports)."""
        return frozenset(p.power_source for p in self.points)

    @property
    def frequencies(self) -> tuple[float, ...]:
        """Distinct fixed frequencies measured, ascending."""
        return tuple(sorted({p.frequency for p in self.points if p.frequency is not None}))

    @property
    def process_counts(self) -> tuple[int, ...]:
        """Distinct numbers of I/O processes measured, ascending."""
        return tuple(sorted({p.processes for p in self.points}))

    @property
    def sizes(self) -> tuple[int, ...]:
        """Distinct sizes S measured, ascending (empty when the file does not record them)."""
        return tuple(sorted({p.size for p in self.points if p.size is not None}))

    def at_size(self, size: float) -> Profile:
        """The points measured at the recorded size nearest to ``size`` (on a log scale).

        A profile swept over several sizes (to see where throughput stops depending on S) has
        one set of points per size; a plan for a checkpoint of ``size`` bytes uses the set whose
        S is closest to it. Points without a size are always kept.
        """
        sizes = self.sizes
        if len(sizes) < 2:
            return self
        best = min(sizes, key=lambda s: (abs(math.log(s / size)), -s))
        return replace(self, points=tuple(p for p in self.points if p.size in (None, best)))


def _where(path: str) -> str:
    return path or "profile"


def _runs_from_json(obj: Mapping[str, Any], path: str) -> tuple[Run, ...]:
    raw = obj.get("runs", [])
    if not isinstance(raw, list):
        raise ProfileError(f"{path}.runs: expected a list of runs")
    runs = []
    for i, r in enumerate(raw):
        where = f"{path}.runs[{i}]"
        if not isinstance(r, dict):
            raise ProfileError(f"{where}: expected an object")
        runs.append(
            Run(
                throughput=number(r, "throughput_Bps", where),
                power=number(r, "power_W", where),
                seconds=number(r, "seconds", where),
            )
        )
    return tuple(runs)


def _point_from_json(obj: Any, path: str, version: int = FORMAT_VERSION) -> ProfilePoint:
    if not isinstance(obj, dict):
        raise ProfileError(f"{path}: expected an object, got {type(obj).__name__}")
    op = cast(Operation, choice(obj, "op", path, OPERATIONS))
    processes = obj.get("processes")
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ProfileError(f"{path}.processes: expected an integer >= 1, got {processes!r}")
    frequency, governor = setting_pair(obj, path)
    if version == 1 and frequency is None and governor is None:
        raise ProfileError(
            f"{path}: give exactly one of frequency_hz (a fixed CPU frequency) and governor "
            "(a version 1 profile cannot say the frequency was not controlled)"
        )
    codec = obj.get("codec")
    if codec is not None and not (isinstance(codec, str) and codec):
        raise ProfileError(f"{path}.codec: expected a codec name or null, got {codec!r}")
    cstates = obj.get("cstates")
    if cstates is not None and not isinstance(cstates, bool):
        raise ProfileError(f"{path}.cstates: expected true, false or null, got {cstates!r}")
    reps = obj.get("repetitions", 1)
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ProfileError(f"{path}.repetitions: expected an integer >= 1, got {reps!r}")
    return ProfilePoint(
        op=op,
        processes=processes,
        throughput=number(obj, "throughput_Bps", path),
        power=number(obj, "power_W", path),
        power_source=cast(PowerSource, choice(obj, "power_source", path, POWER_SOURCES)),
        frequency=frequency,
        governor=governor,
        codec=codec,
        cstates=cstates,
        repetitions=reps,
        throughput_spread=optional_number(obj, "throughput_spread_Bps", path),
        power_spread=optional_number(obj, "power_spread_W", path),
        size=optional_int(obj, "size_bytes", path),
        block_size=optional_int(obj, "block_size_bytes", path),
        layout=optional_str(obj, "layout", path),
        read_method=optional_str(obj, "read_method", path),
        reliable=flag(obj, "reliable", path, default=True),
        runs=_runs_from_json(obj, path),
        data=optional_str(obj, "data", path),
        compression_ratio=(
            None if obj.get("compression_ratio") is None else number(obj, "compression_ratio", path)
        ),
        **lever_fields_from_json(obj, path),
    )


CellKey = tuple[
    str, str, int, str | None, bool | None, int | None, int | None, str | None, *tuple[Any, ...]
]
"""``(op, setting_key, processes, codec, cstates, size, block_size, layout, *levers)``: one sweep
cell of one operation (the same identity :func:`greenckpt.profile.merge.point_key` matches nodes
by), the levers (uncore, power limit, GPU clocks, GPU limit) last: two points differing only in
the uncore frequency are different cells."""


def cell_key(p: ProfilePoint) -> CellKey:
    """What identifies a point's cell: two points with the same key measure the same thing."""
    return (
        p.op,
        p.setting_key,
        p.processes,
        p.codec,
        p.cstates,
        p.size,
        p.block_size,
        p.layout,
        *lever_key(p),
    )


def describe_cell(p: ProfilePoint) -> str:
    """A cell in words, e.g. ``write 2.10 GHz, 4 I/O processes, codec zstd:3``."""
    parts = [f"{p.op} {p.setting_label}", f"{p.processes} I/O process" + "es" * (p.processes > 1)]
    if p.codec is not None:
        parts.append(f"codec {p.codec}")
    if p.cstates is not None:
        parts.append(f"C-states {'on' if p.cstates else 'off'}")
    for name, value in (("size", p.size), ("block size", p.block_size)):
        if value is not None:
            parts.append(f"{name} {value} B")
    if p.layout is not None:
        parts.append(p.layout)
    parts.extend(lever_labels(p))
    return ", ".join(parts)


def check_unique_cells(points: Sequence[ProfilePoint], where: str = "profile.points") -> None:
    """Raise :class:`ProfileError` when two points measure the same cell.

    Why: the planner treats every point as an alternative setting, so a second copy of a cell
    (two files concatenated, a hand edit, a resumed sweep written twice) silently competes with
    the first — a copy with 10x the throughput changes the plan. Which copy is right cannot be
    told from the file, so it is refused; combining nodes' figures is
    ``greenckpt profile merge``'s job, which says what it did.
    """
    first: dict[CellKey, int] = {}
    for i, p in enumerate(points):
        j = first.setdefault(cell_key(p), i)
        if j != i:
            raise ProfileError(
                f"{where}[{j}] and {where}[{i}] are the same cell ({describe_cell(p)}) measured "
                "twice: a profile holds one figure per cell; keep one of them (profiles of "
                "several nodes are combined with greenckpt profile merge)"
            )


def _version_from_json(data: Any) -> int:
    """The format version of a parsed profile, after checking it is one this code reads."""
    if not isinstance(data, dict):
        raise ProfileError("profile: expected a JSON object at the top level")
    if data.get("format") != FORMAT_NAME:
        raise ProfileError(
            f"profile.format: expected {FORMAT_NAME!r}, got {data.get('format')!r} "
            "(is this a greenckpt profile?)"
        )
    version = data.get("format_version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise ProfileError(
            "profile.format_version: this greenckpt reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}, got {version!r}"
        )
    return cast(int, version)


def _points_from_json(data: Mapping[str, Any], version: int) -> tuple[ProfilePoint, ...]:
    raw_points = data.get("points")
    if not isinstance(raw_points, list) or not raw_points:
        raise ProfileError("profile.points: expected a non-empty list of measured points")
    points = tuple(
        _point_from_json(p, f"profile.points[{i}]", version) for i, p in enumerate(raw_points)
    )
    check_unique_cells(points)
    return points


def _synthetic_from_json(data: Mapping[str, Any], points: Sequence[ProfilePoint]) -> bool:
    synthetic = data.get("synthetic", False)
    if not isinstance(synthetic, bool):
        raise ProfileError(f"profile.synthetic: expected true or false, got {synthetic!r}")
    if not synthetic and any(p.power_source == "synthetic" for p in points):
        raise ProfileError(
            "profile.synthetic: points have power_source 'synthetic', so the profile must "
            "say synthetic: true"
        )
    return synthetic


def _idle_from_json(
    data: Mapping[str, Any],
) -> tuple[float | None, PowerSource | None, float | None]:
    """The idle power, its source and its spread (all None when the profile has none)."""
    idle = data.get("idle_power")
    if idle is None:
        return None, None, None
    if not isinstance(idle, dict):
        raise ProfileError('profile.idle_power: expected {"value_W": ..., "source": ...}')
    return (
        number(idle, "value_W", "profile.idle_power"),
        cast(PowerSource, choice(idle, "source", "profile.idle_power", POWER_SOURCES)),
        optional_number(idle, "spread_W", "profile.idle_power"),
    )


def _descriptions_from_json(data: Mapping[str, Any]) -> dict[str, Any]:
    """The descriptive fields (objects, name lists, strings, status), each checked."""
    found: dict[str, Any] = {}
    for key in ("machine", "storage", "sweep"):
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise ProfileError(f"profile.{key}: expected an object")
        found[key] = dict(value)
    for key in ("meters", "power_domains"):
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
            raise ProfileError(f"profile.{key}: expected a list of names")
        found[key] = tuple(value)
    for key in ("note", "created", "tool"):
        value = data.get(key, "")
        if not isinstance(value, str):
            raise ProfileError(f"profile.{key}: expected a string")
        found[key] = value
    status = data.get("status", "complete")
    if status not in ("complete", "partial"):
        raise ProfileError(f"profile.status: expected 'complete' or 'partial', got {status!r}")
    found["status"] = status
    return found


def profile_from_json(data: Any) -> Profile:
    """Build a :class:`Profile` from parsed JSON, validating every field."""
    version = _version_from_json(data)
    points = _points_from_json(data, version)
    synthetic = _synthetic_from_json(data, points)
    idle_power, idle_source, idle_spread = _idle_from_json(data)
    return Profile(
        points=points,
        synthetic=synthetic,
        idle_power=idle_power,
        idle_power_source=idle_source,
        idle_power_spread=idle_spread,
        waiting=waiting_from_json(data, synthetic),
        levers=levers_from_json(data),
        **_descriptions_from_json(data),
    )


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file; errors name the file and the bad field."""
    p = Path(path)
    try:
        text = read_regular(p).decode("utf-8")
    except FileNotFoundError:
        raise ProfileError(f"profile file {str(p)!r} does not exist") from None
    except OSError as exc:
        raise ProfileError(f"cannot read profile file {str(p)!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{p}: not a UTF-8 text file (is it a profile?)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(
            f"{p}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except RecursionError:
        raise ProfileError(f"{p}: JSON nested too deeply to be a profile") from None
    try:
        return profile_from_json(data)
    except ProfileError as exc:
        raise ProfileError(f"{p}: {exc}") from None


def point_to_json(p: ProfilePoint) -> dict[str, Any]:
    """The JSON object of one point (the inverse of the loader)."""
    out: dict[str, Any] = {
        "op": p.op,
        "frequency_hz": p.frequency,
        "governor": p.governor,
        "processes": p.processes,
        "codec": p.codec,
        "cstates": p.cstates,
        "throughput_Bps": p.throughput,
        "power_W": p.power,
        "power_source": p.power_source,
        "repetitions": p.repetitions,
    }
    if p.throughput_spread is not None:
        out["throughput_spread_Bps"] = p.throughput_spread
    if p.power_spread is not None:
        out["power_spread_W"] = p.power_spread
    for key, value in (
        ("size_bytes", p.size),
        ("block_size_bytes", p.block_size),
        ("layout", p.layout),
        ("read_method", p.read_method),
        ("data", p.data),
        ("compression_ratio", p.compression_ratio),
    ):
        if value is not None:
            out[key] = value
    out.update(lever_fields_to_json(p))
    if not p.reliable:
        out["reliable"] = False
    if p.runs:
        out["runs"] = [
            {"throughput_Bps": r.throughput, "power_W": r.power, "seconds": r.seconds}
            for r in p.runs
        ]
    return out


def profile_to_json(profile: Profile) -> dict[str, Any]:
    """The JSON document of a profile (version :data:`FORMAT_VERSION`)."""
    out: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "status": profile.status,
        "synthetic": profile.synthetic,
        "note": profile.note,
        "created": profile.created,
        "tool": profile.tool,
        "machine": dict(profile.machine),
        "storage": dict(profile.storage),
        "meters": list(profile.meters),
        "power_domains": list(profile.power_domains),
    }
    if profile.idle_power is not None:
        idle: dict[str, Any] = {"value_W": profile.idle_power, "source": profile.idle_power_source}
        if profile.idle_power_spread is not None:
            idle["spread_W"] = profile.idle_power_spread
        out["idle_power"] = idle
    if profile.sweep:
        out["sweep"] = dict(profile.sweep)
    out["points"] = [point_to_json(p) for p in profile.points]
    if profile.waiting:
        out["waiting"] = [waiting_to_json(w) for w in profile.waiting]
    if profile.levers:
        out["levers"] = dict(profile.levers)
    return out


def save_profile(profile: Profile, path: str | os.PathLike[str]) -> None:
    """Write ``profile`` to ``path`` atomically, as strict JSON (a profile holds only finite
    numbers: the loader refuses anything else).

    Atomic because a sweep rewrites its profile after every finished cell and may be killed at
    any moment: the file on disk is always the previous complete version or the new one. It
    sits beside :func:`load_profile` so the format is written and read in one module.
    """
    write_atomic(path, json.dumps(profile_to_json(profile), indent=2, allow_nan=False) + "\n")
