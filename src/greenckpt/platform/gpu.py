"""The GPU lever: NVIDIA application clocks and power management limit on every GPU of a node.

Why: on a GPU node the host writes or reads a checkpoint while the GPUs wait at their
application clocks and power limit, drawing tens of watts each for nothing; lowering them for
the checkpoint and restart phases, and putting them back afterwards, saves that energy. The
calls go through NVML (:mod:`~greenckpt.platform.nvml`); the design, the permissions and what
happens on a refusal: docs/design/gpu.md.

A request is checked against what every GPU reports before anything is written: application
clocks must be a (memory MHz, graphics MHz) pair every GPU supports, and a power limit must lie
within every GPU's ``nvmlDeviceGetPowerManagementLimitConstraints``; a refusal is one line and
changes nothing. A write that fails on one GPU puts the GPUs already changed back.

The session (:class:`~greenckpt.platform.restore.NodeSettings`) delegates to this module's
functions, which are its whole interface:

- :func:`gpu_levers` (``root``) -> the ``"gpu clocks"`` and ``"gpu power limit"``
  :class:`~greenckpt.platform.levers.LeverInfo`;
- :func:`set_gpu_clocks` (``memory_mhz, graphics_mhz, save=None``) and
  :func:`set_gpu_power_limit` (``watts, save=None``) ->
  :class:`~greenckpt.platform.levers.LeverResult`;
  ``save`` is called with :func:`gpu_originals`'s document after the check and before the first
  write (the session writes it to its state file; it keeps the first document it gets);
- :func:`gpu_originals` () -> the JSON-able originals by GPU UUID;
- :func:`restore_gpu` (``saved``) -> the list of failures (empty: every GPU as found).

The profiler checks its GPU axes up front, NVML read once: :func:`detect_gpus` (``nvml``) and
:func:`check_gpu_clocks` / :func:`check_gpu_power_limit` (``gpus, ...``).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from greenckpt.errors import InvalidValueError
from greenckpt.platform.levers import LeverInfo, LeverResult
from greenckpt.platform.nvml import CLOCK_GRAPHICS, CLOCK_MEM, Nvml, NvmlError, NvmlUnavailableError
from greenckpt.platform.root import PlatformError, SysRoot

__all__ = [
    "CLOCKS",
    "POWER_LIMIT",
    "Gpu",
    "check_gpu_clocks",
    "check_gpu_power_limit",
    "detect_gpus",
    "gpu_levers",
    "gpu_originals",
    "restore_gpu",
    "set_gpu_clocks",
    "set_gpu_power_limit",
]

CLOCKS = "gpu clocks"
POWER_LIMIT = "gpu power limit"

SaveOriginals = Callable[[dict[str, Any]], None]
"""Called with :func:`gpu_originals`'s document before the first write of a change."""


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML reports it; clocks in MHz, power limits in mW (NVML's units)."""

    index: int
    uuid: str
    name: str
    handle: ctypes.c_void_p = field(repr=False, compare=False)
    clocks: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    """Supported application clocks: memory MHz -> the graphics MHz that go with it."""
    clocks_reason: str = ""
    """Why application clocks cannot be read or set here ("" when they can)."""
    memory_mhz: int = 0
    graphics_mhz: int = 0
    default_memory_mhz: int = 0
    default_graphics_mhz: int = 0
    power_limit_mw: int = 0
    power_range_mw: tuple[int, int] = (0, 0)
    default_power_limit_mw: int = 0
    power_reason: str = ""
    """Why the power limit cannot be read or set here ("" when it can)."""

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.uuid})"

    @property
    def clocks_at_default(self) -> bool:
        return (self.memory_mhz, self.graphics_mhz) == (
            self.default_memory_mhz,
            self.default_graphics_mhz,
        )


def _detect_one(nvml: Nvml, index: int) -> Gpu:
    dev = nvml.handle(index)
    found: dict[str, Any] = {}
    try:
        found["memory_mhz"] = nvml.applications_clock(dev, CLOCK_MEM)
        found["graphics_mhz"] = nvml.applications_clock(dev, CLOCK_GRAPHICS)
        found["default_memory_mhz"] = nvml.default_applications_clock(dev, CLOCK_MEM)
        found["default_graphics_mhz"] = nvml.default_applications_clock(dev, CLOCK_GRAPHICS)
        found["clocks"] = {
            mem: tuple(sorted(set(nvml.supported_graphics_clocks(dev, mem)), reverse=True))
            for mem in sorted(set(nvml.supported_memory_clocks(dev)), reverse=True)
        }
        if not found["clocks"]:
            found["clocks_reason"] = "NVML lists no supported application clocks"
    except NvmlError as exc:
        found["clocks"] = {}
        found["clocks_reason"] = str(exc)
    try:
        found["power_limit_mw"] = nvml.power_limit_mw(dev)
        found["power_range_mw"] = nvml.power_limit_constraints_mw(dev)
        found["default_power_limit_mw"] = nvml.default_power_limit_mw(dev)
    except NvmlError as exc:
        found["power_reason"] = str(exc)
    return Gpu(index, nvml.uuid(dev), nvml.name(dev), dev, **found)


def detect_gpus(nvml: Nvml) -> tuple[Gpu, ...]:
    """Every GPU NVML sees, with its clocks and power limit; :class:`NvmlUnavailableError`
    if there is none."""
    count = nvml.count()
    if count == 0:
        raise NvmlUnavailableError("NVML sees no GPU")
    return tuple(_detect_one(nvml, i) for i in range(count))


def _common_clocks(gpus: tuple[Gpu, ...]) -> dict[int, tuple[int, ...]]:
    """The (memory, graphics) pairs every GPU supports, as memory MHz -> graphics MHz."""
    out: dict[int, tuple[int, ...]] = {}
    for mem, graphics in gpus[0].clocks.items():
        common = set(graphics)
        for gpu in gpus[1:]:
            common &= set(gpu.clocks.get(mem, ()))
        if common:
            out[mem] = tuple(sorted(common, reverse=True))
    return out


def _power_range_mw(gpus: tuple[Gpu, ...]) -> tuple[int, int]:
    """The power limits (mW) every GPU accepts: the highest minimum to the lowest maximum."""
    return max(g.power_range_mw[0] for g in gpus), min(g.power_range_mw[1] for g in gpus)


def _describe_clocks(common: Mapping[int, tuple[int, ...]]) -> tuple[str, ...]:
    return tuple(
        f"memory {mem} MHz: graphics {min(gr)}-{max(gr)} MHz ({len(gr)} clocks)"
        for mem, gr in common.items()
    )


def _watts(milliwatts: int) -> str:
    return f"{milliwatts / 1000:g} W"


def _clocks_reason(gpus: tuple[Gpu, ...]) -> str:
    for gpu in gpus:
        if gpu.clocks_reason:
            return f"{gpu.label}: {gpu.clocks_reason}"
    if not _common_clocks(gpus):
        return "the GPUs share no supported application clock pair"
    return ""


def _power_reason(gpus: tuple[Gpu, ...]) -> str:
    for gpu in gpus:
        if gpu.power_reason:
            return f"{gpu.label}: {gpu.power_reason}"
    low, high = _power_range_mw(gpus)
    if not 0 < low <= high:
        return f"the GPUs share no power limit range ({_watts(low)} to {_watts(high)})"
    return ""


def gpu_levers(root: SysRoot) -> tuple[LeverInfo, ...]:
    """The ``"gpu clocks"`` and ``"gpu power limit"`` levers of this node, present or absent
    with the reason. ``root`` is not read: NVML talks to the driver, not to a file tree (tests
    point ``GREENCKPT_NVML_LIBRARY`` at a fake); it is taken so that every lever reports
    through one signature."""
    del root
    try:
        with Nvml.open() as nvml:
            gpus = detect_gpus(nvml)
    except NvmlUnavailableError as exc:
        why = str(exc)
        return (LeverInfo(CLOCKS, False, why, ()), LeverInfo(POWER_LIMIT, False, why, ()))
    except NvmlError as exc:
        why = f"NVML could not describe the GPUs: {exc}"
        return (LeverInfo(CLOCKS, False, why, ()), LeverInfo(POWER_LIMIT, False, why, ()))
    n = f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
    clocks_why = _clocks_reason(gpus)
    clocks = (
        LeverInfo(CLOCKS, False, clocks_why, ())
        if clocks_why
        else LeverInfo(CLOCKS, True, "", (*_describe_clocks(_common_clocks(gpus)), n))
    )
    power_why = _power_reason(gpus)
    low, high = (0, 0) if power_why else _power_range_mw(gpus)
    power = (
        LeverInfo(POWER_LIMIT, False, power_why, ())
        if power_why
        else LeverInfo(POWER_LIMIT, True, "", (f"{_watts(low)} to {_watts(high)}", n))
    )
    return clocks, power


def check_gpu_clocks(gpus: tuple[Gpu, ...], memory_mhz: int, graphics_mhz: int) -> None:
    """Refuse (one line, nothing written) clocks that are not a pair every GPU of ``gpus``
    supports; :class:`PlatformError` when the GPUs have no clock control."""
    why = _clocks_reason(gpus)
    if why:
        raise PlatformError(f"no GPU clocks control: {why}")
    for what, mhz in (("memory", memory_mhz), ("graphics", graphics_mhz)):
        if isinstance(mhz, bool) or not isinstance(mhz, int):
            raise InvalidValueError(f"gpu clocks: the {what} clock must be whole MHz, got {mhz!r}")
    common = _common_clocks(gpus)
    if graphics_mhz not in common.get(memory_mhz, ()):
        raise InvalidValueError(
            f"gpu clocks {memory_mhz}:{graphics_mhz} MHz is not a (memory:graphics) pair every "
            f"GPU supports; supported: {'; '.join(_describe_clocks(common))}"
        )


def check_gpu_power_limit(gpus: tuple[Gpu, ...], watts: float) -> int:
    """Refuse (one line, nothing written) a limit outside what every GPU of ``gpus`` accepts;
    the limit in mW when it is accepted."""
    why = _power_reason(gpus)
    if why:
        raise PlatformError(f"no GPU power limit control: {why}")
    if isinstance(watts, bool) or not isinstance(watts, int | float):
        raise InvalidValueError(f"gpu power limit must be a number of watts, got {watts!r}")
    low, high = _power_range_mw(gpus)
    milliwatts = round(watts * 1000) if math.isfinite(watts) else -1
    if not low <= milliwatts <= high:
        raise InvalidValueError(
            f"gpu power limit {watts:g} W is outside {_watts(low)} to {_watts(high)}, "
            "the range every GPU accepts"
        )
    return milliwatts


# The names profile/lever_check.py used before the public ones; drop once it uses those.
_check_clocks = check_gpu_clocks
_check_power = check_gpu_power_limit


def _originals(gpus: tuple[Gpu, ...]) -> dict[str, Any]:
    return {
        g.uuid: {
            "index": g.index,
            "name": g.name,
            "memory_mhz": None if g.clocks_reason else g.memory_mhz,
            "graphics_mhz": None if g.clocks_reason else g.graphics_mhz,
            "clocks_at_default": False if g.clocks_reason else g.clocks_at_default,
            "power_limit_mw": None if g.power_reason else g.power_limit_mw,
        }
        for g in gpus
    }


def gpu_originals() -> dict[str, Any]:
    """The GPUs' settings as found, JSON-able, by GPU UUID: application clocks (MHz; None
    where the GPU has none), whether they were at their defaults, and the power limit (mW).
    :func:`restore_gpu` takes it back."""
    with Nvml.open() as nvml:
        return _originals(detect_gpus(nvml))


def _apply(
    lever: str,
    value: str,
    gpus: tuple[Gpu, ...],
    write: Callable[[Gpu], None],
    undo: Callable[[Gpu], None],
) -> None:
    """``write`` on every GPU; if one fails, ``undo`` the GPUs already written and raise."""
    done: list[Gpu] = []
    for gpu in gpus:
        try:
            write(gpu)
        except NvmlError as exc:
            failed: list[str] = []
            for back in reversed(done):
                try:
                    undo(back)
                except NvmlError as again:
                    failed.append(f"{back.label}: {again}")
            after = (
                f"; could not put back: {'; '.join(failed)}"
                if failed
                else "; the GPUs already changed were put back"
                if done
                else ""
            )
            raise PlatformError(f"{lever} {value}: {gpu.label}: {exc}{after}") from None
        done.append(gpu)


def set_gpu_clocks(
    memory_mhz: int, graphics_mhz: int, save: SaveOriginals | None = None
) -> LeverResult:
    """Set the application clocks of every GPU to ``memory_mhz:graphics_mhz``.

    Checked first (a pair every GPU supports, else :class:`InvalidValueError`; no control,
    :class:`PlatformError`), then ``save`` gets the originals, then each GPU is written and
    read back."""
    value = f"{memory_mhz}:{graphics_mhz} MHz"
    with Nvml.open() as nvml:
        gpus = detect_gpus(nvml)
        check_gpu_clocks(gpus, memory_mhz, graphics_mhz)
        if save is not None:
            save(_originals(gpus))

        def write(g: Gpu) -> None:
            nvml.set_applications_clocks(g.handle, memory_mhz, graphics_mhz)

        def undo(g: Gpu) -> None:
            _put_clocks_back(nvml, g.handle, g.memory_mhz, g.graphics_mhz, g.clocks_at_default)

        _apply(CLOCKS, value, gpus, write, undo)
        notes = []
        for g in gpus:
            now = (
                nvml.applications_clock(g.handle, CLOCK_MEM),
                nvml.applications_clock(g.handle, CLOCK_GRAPHICS),
            )
            if now != (memory_mhz, graphics_mhz):
                notes.append(f"{g.label} reads back {now[0]}:{now[1]} MHz")
    return LeverResult(CLOCKS, f"{value} on {len(gpus)} GPU(s)", tuple(notes))


def set_gpu_power_limit(watts: float, save: SaveOriginals | None = None) -> LeverResult:
    """Set the power management limit of every GPU to ``watts``.

    Checked first (within every GPU's constraints, else :class:`InvalidValueError`), then
    ``save`` gets the originals, then each GPU is written and read back."""
    with Nvml.open() as nvml:
        gpus = detect_gpus(nvml)
        milliwatts = check_gpu_power_limit(gpus, watts)
        value = f"{watts:g} W"
        if save is not None:
            save(_originals(gpus))

        def write(g: Gpu) -> None:
            nvml.set_power_limit_mw(g.handle, milliwatts)

        def undo(g: Gpu) -> None:
            nvml.set_power_limit_mw(g.handle, g.power_limit_mw)

        _apply(POWER_LIMIT, value, gpus, write, undo)
        notes = [
            f"{g.label} reads back {_watts(now)}"
            for g in gpus
            if (now := nvml.power_limit_mw(g.handle)) != milliwatts
        ]
    return LeverResult(POWER_LIMIT, f"{value} on {len(gpus)} GPU(s)", tuple(notes))


def _put_clocks_back(
    nvml: Nvml, dev: ctypes.c_void_p, memory_mhz: int, graphics_mhz: int, at_default: bool
) -> None:
    if at_default:
        nvml.reset_applications_clocks(dev)
    else:
        nvml.set_applications_clocks(dev, memory_mhz, graphics_mhz)


def _int_or_none(entry: Mapping[str, Any], key: str) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidValueError(f"{key} is {value!r}, not a non-negative integer")
    return value


def _restore_one(nvml: Nvml, gpu: Gpu, entry: Mapping[str, Any]) -> list[str]:
    failures: list[str] = []
    try:
        memory, graphics = _int_or_none(entry, "memory_mhz"), _int_or_none(entry, "graphics_mhz")
        limit = _int_or_none(entry, "power_limit_mw")
        at_default = entry.get("clocks_at_default", False)
        if not isinstance(at_default, bool):
            raise InvalidValueError(f"clocks_at_default is {at_default!r}, not true or false")
    except ValueError as exc:
        return [f"{gpu.label}: saved originals unreadable: {exc}"]
    if memory is not None and graphics is not None and not gpu.clocks_reason:
        wanted = (
            (gpu.default_memory_mhz, gpu.default_graphics_mhz) if at_default else (memory, graphics)
        )
        if (gpu.memory_mhz, gpu.graphics_mhz) != wanted:
            try:
                _put_clocks_back(nvml, gpu.handle, memory, graphics, at_default)
            except NvmlError as exc:
                failures.append(f"{gpu.label} {CLOCKS}: {exc}")
    if limit is not None and not gpu.power_reason and gpu.power_limit_mw != limit:
        try:
            nvml.set_power_limit_mw(gpu.handle, limit)
        except NvmlError as exc:
            failures.append(f"{gpu.label} {POWER_LIMIT}: {exc}")
    return failures


def restore_gpu(saved: object) -> list[str]:
    """Put back the GPU settings :func:`gpu_originals` saved; the failures, one line each.

    ``saved`` comes from a state file (untrusted): entries that are not what
    :func:`gpu_originals` writes are reported, not acted on. Clocks that were at their
    defaults are reset (``nvmlDeviceResetApplicationsClocks``), others set back; the power
    limit is set back. Only what differs from the originals is written, so a session whose
    change was refused restores without touching the GPU."""
    if not saved:
        return []
    if not isinstance(saved, Mapping):
        return [f"GPU originals: expected a mapping by GPU UUID, got {type(saved).__name__}"]
    try:
        with Nvml.open() as nvml:
            gpus = {g.uuid: g for g in detect_gpus(nvml)}
            failures: list[str] = []
            for uuid, entry in saved.items():
                if uuid not in gpus:
                    failures.append(f"GPU {uuid}: not found on this node, not restored")
                elif not isinstance(entry, Mapping):
                    failures.append(f"GPU {uuid}: saved originals are not a mapping")
                else:
                    failures += _restore_one(nvml, gpus[uuid], entry)
            return failures
    except PlatformError as exc:
        return [f"GPUs not restored: {exc}"]
