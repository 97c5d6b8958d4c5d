"""Every lever greenckpt may move on a node, whether this node has it, and why not.

Why one list: the probe, the profiler (which axes it may sweep), the planner's notes and the
runtime all ask "which levers are here?" — the CPU frequency, the uncore frequency, the
per-core split between writer and waiting cores, the RAPL power limit, and the GPU's clocks
and power limit. :func:`node_levers` answers once, reading only (nothing is written), and a
lever the node lacks is reported absent with its reason, never guessed. :class:`LeverResult`
is what a :class:`~greenckpt.platform.restore.NodeSettings` change of a new lever returns.
The per-core split takes the writer cores as the first ``io_processes`` CPUs of this process's
affinity (:func:`split_cpus`) and needs cpufreq policies that do not straddle the two sets
(:func:`per_core_split_available`). The GPU entries come from the GPU module
(``greenckpt.platform.gpu.gpu_levers``), loaded by name because it builds on this one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from greenckpt.errors import InvalidValueError
from greenckpt.platform.capability import frequency_control
from greenckpt.platform.cpunotation import format_cpus, format_hz
from greenckpt.platform.lever_state import gpu_module
from greenckpt.platform.powercap import DOMAINS, detect_power_zones, power_limit_absent_reason
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.uncore import describe_range, detect_uncore, uncore_absent_reason

__all__ = [
    "LEVER_NAMES",
    "LeverInfo",
    "LeverResult",
    "node_levers",
    "per_core_split_available",
    "split_cpus",
]

LEVER_NAMES = (
    "cpu frequency",
    "uncore frequency",
    "per-core split",
    "power limit",
    "gpu clocks",
    "gpu power limit",
)
GPU_NAMES = ("gpu clocks", "gpu power limit")


@dataclass(frozen=True)
class LeverResult:
    """What a lever change applied: the lever, the value (for a human), notes (read-back)."""

    lever: str
    value: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class LeverInfo:
    """One lever on this node: present or not (and why), and what values it takes."""

    name: str
    present: bool
    reason: str = ""
    values: tuple[str, ...] = ()


def _cpu_frequency(root: SysRoot) -> LeverInfo:
    control = frequency_control(root)
    if not control.available:
        return LeverInfo("cpu frequency", False, control.reason)
    assert control.cpufreq is not None
    pol = control.cpufreq.policies[0]
    if control.frequencies_hz:
        values = tuple(format_hz(f) for f in control.frequencies_hz)
    else:
        values = (f"{format_hz(pol.cpuinfo_min_hz)}..{format_hz(pol.cpuinfo_max_hz)}",)
    return LeverInfo("cpu frequency", True, "", values)


def _uncore(root: SysRoot) -> LeverInfo:
    why = uncore_absent_reason(root)
    if why is not None:
        return LeverInfo("uncore frequency", False, why)
    domains = detect_uncore(root)
    for d in domains:
        for attr in ("min_freq_khz", "max_freq_khz"):
            if not os.access(root / f"{d.path}/{attr}", os.W_OK):
                return LeverInfo(
                    "uncore frequency",
                    False,
                    f"{root / d.path}/{attr} is not writable: root is needed",
                )
    return LeverInfo("uncore frequency", True, "", (describe_range(domains),))


def _split(root: SysRoot) -> LeverInfo:
    name = "per-core split"
    control = frequency_control(root)
    if not control.available:
        return LeverInfo(name, False, f"no CPU frequency control: {control.reason}")
    assert control.cpufreq is not None
    policies = control.cpufreq.policies
    shared = next((p for p in policies if len(p.cpus) > 1), None)
    if shared is not None:
        return LeverInfo(
            name,
            False,
            f"cpufreq policies are not per core ({shared.name} covers CPUs "
            f"{format_cpus(shared.cpus)}): writer and waiting cores could share a frequency",
        )
    if len(policies) < 2:
        return LeverInfo(name, False, "a single CPU: no cores to split")
    return LeverInfo(
        name,
        True,
        "",
        (f"writer and waiting cores at separate frequencies ({len(policies)} cores)",),
    )


def _power_limit(root: SysRoot) -> LeverInfo:
    why = power_limit_absent_reason(root, "package")
    if why is not None:
        return LeverInfo("power limit", False, why)
    zones = detect_power_zones(root)
    values = []
    for domain in DOMAINS:
        mine = [z for z in zones if z.domain == domain]
        if mine and power_limit_absent_reason(root, domain) is None:
            top = min(z.max_power_uw or 0 for z in mine) / 1e6
            values.append(f"{domain}: above 0 up to {top:g} W on {len(mine)} zone(s)")
        elif mine:
            values.append(f"{domain}: not settable ({power_limit_absent_reason(root, domain)})")
    return LeverInfo("power limit", True, "", tuple(values))


def _gpu(root: SysRoot) -> list[LeverInfo]:
    module = gpu_module()
    levers = getattr(module, "gpu_levers", None) if module is not None else None
    if levers is None:
        return [LeverInfo(n, False, "GPU lever module not available") for n in GPU_NAMES]
    found = {i.name: i for i in levers(root)}
    return [
        found.get(n, LeverInfo(n, False, "the GPU lever module does not report it"))
        for n in GPU_NAMES
    ]


def _guarded(names: Iterable[str], read: Callable[[], list[LeverInfo]]) -> list[LeverInfo]:
    """A malformed file becomes an absent lever with its reason, not a failed probe."""
    try:
        return read()
    except (PlatformError, OSError, ValueError, UnicodeDecodeError) as exc:
        return [LeverInfo(n, False, f"could not be read: {exc}") for n in names]


def node_levers(root: SysRoot) -> tuple[LeverInfo, ...]:
    """Every lever of :data:`LEVER_NAMES`, in that order, present or absent (reads only)."""
    return (
        *_guarded(["cpu frequency"], lambda: [_cpu_frequency(root)]),
        *_guarded(["uncore frequency"], lambda: [_uncore(root)]),
        *_guarded(["per-core split"], lambda: [_split(root)]),
        *_guarded(["power limit"], lambda: [_power_limit(root)]),
        *_guarded(GPU_NAMES, lambda: _gpu(root)),
    )


def split_cpus(
    io_processes: int, cpus: Iterable[int] | None = None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(writer CPUs, waiting CPUs): the first ``io_processes`` CPUs (ascending) of ``cpus``
    (default: this process's ``os.sched_getaffinity(0)``) write, the rest wait."""
    if isinstance(io_processes, bool) or not isinstance(io_processes, int) or io_processes < 1:
        raise InvalidValueError(
            f"the number of I/O processes must be a whole number >= 1, got {io_processes!r}"
        )
    chosen = sorted(set(cpus if cpus is not None else os.sched_getaffinity(0)))
    return tuple(chosen[:io_processes]), tuple(chosen[io_processes:])


def per_core_split_available(
    root: SysRoot, writers: Iterable[int], waiters: Iterable[int]
) -> tuple[bool, str]:
    """Whether the writer and waiting CPUs can run at separate frequencies: both sets are
    non-empty, every CPU has a writable cpufreq policy, and no policy covers CPUs of both.
    Returns (True, "") or (False, why)."""
    w, r = set(writers), set(waiters)
    if not w or not r:
        return False, "no waiting cores: every CPU of this process writes" if w else (
            "no writer cores given"
        )
    if w & r:
        return False, f"CPUs {format_cpus(sorted(w & r))} are both writers and waiters"
    control = frequency_control(root)
    if not control.available or control.cpufreq is None:
        return False, f"no CPU frequency control: {control.reason}"
    covered = set(control.cpufreq.cpus)
    missing = sorted((w | r) - covered)
    if missing:
        return False, f"CPUs {format_cpus(missing)} have no active cpufreq policy"
    for p in control.cpufreq.policies:
        cpus = set(p.cpus)
        if cpus & w and cpus & r:
            return False, (
                f"{p.name} covers writer CPUs {format_cpus(sorted(cpus & w))} and waiting CPUs "
                f"{format_cpus(sorted(cpus & r))}: they share one frequency"
            )
    return True, ""
