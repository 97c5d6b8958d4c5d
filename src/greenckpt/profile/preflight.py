"""Everything a sweep needs, checked before anything starts; and the default grid of a node.

Why: a sweep that fails an hour in — on a frequency the CPU does not offer, a full disk, a
read-only cpufreq tree — wastes the hour and may leave files behind. Every such condition is
checked first and reported in one line that says what would be right.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from greenckpt.platform.capability import frequency_control
from greenckpt.platform.cpufreq import CpufreqController, format_hz
from greenckpt.platform.cpuidle import CpuidleController
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.profile.grid import CpuSetting, SweepError, SweepSpec
from greenckpt.profile.lever_check import check_lever_axes
from greenckpt.units import format_size

DEFAULT_GOVERNORS = ("performance", "powersave", "ondemand", "schedutil", "conservative")
"""Stock governors measured as settings when the node offers them (userspace is a mechanism,
not a policy, so it is not measured)."""
TABLELESS_STEPS = 5
"""Frequencies measured on a driver without a frequency table (intel_pstate, amd-pstate)."""
FREE_MARGIN = 64 << 20
"""Free space a sweep leaves on the target beyond its largest run (metadata, other users)."""


def default_settings(root: SysRoot | None = None) -> tuple[CpuSetting, ...]:
    """Every frequency the CPU offers plus the stock governors it offers; "as found" when the
    node has no cpufreq control (a VM, a container)."""
    try:
        info = CpufreqController(root).detect()
    except PlatformError:
        return (CpuSetting.uncontrolled(),)
    pol = info.policies[0]
    if pol.frequencies_hz:
        freqs = list(pol.frequencies_hz)
    else:
        lo, hi = pol.cpuinfo_min_hz, pol.cpuinfo_max_hz
        step = (hi - lo) / (TABLELESS_STEPS - 1)
        freqs = sorted({round((lo + i * step) / 1e8) * 100_000_000 for i in range(TABLELESS_STEPS)})
        freqs = [min(max(f, lo), hi) for f in freqs]
    govs = [g for g in DEFAULT_GOVERNORS if g in pol.available_governors]
    return (
        *(CpuSetting.frequency(f) for f in freqs),
        *(CpuSetting.of_governor(g) for g in govs),
    )


def _check_path(spec: SweepSpec) -> None:
    path = Path(spec.path)
    if not path.exists():
        raise SweepError(f"{path} does not exist: give an existing directory on the storage")
    if not path.is_dir():
        raise SweepError(f"{path} is not a directory: give the directory to profile")
    if not os.access(path, os.W_OK | os.X_OK):
        raise SweepError(f"{path} is not writable: give a directory you can write in")
    need = max(spec.sizes)
    free = shutil.disk_usage(path).free
    if free < need + FREE_MARGIN:
        # format_size picks the unit, so a nearly full target with small sizes does not read
        # "0.00 GiB free; writes 0.00 GiB".
        raise SweepError(
            f"{path} has {format_size(free)} free; the sweep writes {format_size(need)} at a "
            f"time (plus a {format_size(FREE_MARGIN)} margin): free space or give smaller sizes"
        )


def _check_cpufreq(spec: SweepSpec, root: SysRoot | None) -> None:
    wanted = [s for s in spec.settings if s.kind != "uncontrolled"]
    if not wanted:
        return
    control = frequency_control(root)
    info = control.cpufreq
    if info is None:
        raise SweepError(
            f"CPU frequency cannot be controlled on this node ({control.reason}); profile with "
            "the frequency as found (--frequencies asfound)"
        )
    for pol in info.policies:
        for s in wanted:
            try:
                if s.kind == "frequency":
                    assert s.hz is not None
                    pol.check_offered(s.hz)
                elif s.governor not in pol.available_governors:
                    raise PlatformError(
                        f"governor {s.governor!r} is not offered by {pol.name}: it offers "
                        f"{', '.join(pol.available_governors)}"
                    )
            except PlatformError as exc:
                offered = ", ".join(format_hz(f) for f in pol.frequencies_hz or ())
                hint = f" (offered: {offered})" if offered and s.kind == "frequency" else ""
                raise SweepError(f"{exc}{hint}") from None
    if control.unwritable is not None:
        raise SweepError(
            f"cannot change the CPU frequency: {control.unwritable} is not writable (run as "
            "root, or profile with the frequency as found: --frequencies asfound)"
        )


def _check_cpuidle(spec: SweepSpec, root: SysRoot | None) -> None:
    if all(c is None for c in spec.cstates):
        return
    try:
        info = CpuidleController(root).detect()
    except PlatformError as exc:
        raise SweepError(
            f"C-states cannot be controlled on this node ({exc}); leave --cstates out"
        ) from None
    if not info.states:
        raise SweepError("this node exposes no C-states to switch: leave --cstates out")


def preflight(spec: SweepSpec, root: SysRoot | None = None) -> None:
    """Raise :class:`SweepError` (one line) for the first thing that would make the sweep fail."""
    spec.validate()
    _check_path(spec)
    _check_cpufreq(spec, root)
    _check_cpuidle(spec, root)
    check_lever_axes(spec, root)
