"""Where the stock cpufreq governors run: the points the planner's baselines are evaluated at.

Why apart from :mod:`greenckpt.optimize.planner`: the governor baselines (saito2013 Table 2)
are read off the profile by rules of their own — the CPU's frequency range from the node facts,
which governors have one frequency, what an active-mode pstate driver does — which the
runtime's governor policies share (:mod:`greenckpt.runtime.baselines`), so both evaluate the
same points. The planner evaluates them (docs/model.md, section 4, "Baselines").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from greenckpt.optimize.profile_data import Profile, ProfilePoint

__all__ = [
    "ACTIVE_PSTATE_DRIVERS",
    "BASELINES",
    "FREQUENCY_TOLERANCE",
    "app_processes",
    "baseline_point",
    "governor_frequency",
]

BASELINES = ("performance", "powersave", "ondemand")


def app_processes(profile: Profile, requested: int | None = None) -> int:
    """The application's I/O processes the governor baselines run at: ``requested``, else the
    profile's core count when it was measured, else its largest process count (public for the
    runtime's governor policies, which must match the planner's baselines)."""
    if requested is not None:
        return requested
    cores = profile.machine.get("cores")
    if isinstance(cores, int) and cores in profile.process_counts:
        return cores
    return max(profile.process_counts)


FREQUENCY_TOLERANCE = 1e-3
"""A profile point runs at a governor's frequency when within 0.1 % of it (sysfs speaks kHz and
hand-written profiles round; P-states are 100 MHz or more apart, so no neighbour is this close)."""

ACTIVE_PSTATE_DRIVERS = ("intel_pstate", "amd-pstate-epp")
"""cpufreq drivers in active mode: their ``powersave`` is the driver's (or the hardware's) own
frequency selection, not the CPU's minimum frequency."""


def _hz_list(value: Any) -> list[float] | None:
    """``value`` as a non-empty list of positive finite frequencies, or None if it is not one."""
    if not isinstance(value, list) or not value:
        return None
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int | float):
            return None
        if not (math.isfinite(v) and v > 0):
            return None
        out.append(float(v))
    return out


def _cpu_range(machine: Mapping[str, Any]) -> tuple[tuple[float, float] | None, str]:
    """The CPU's ``(minimum, maximum)`` frequency from a profile's node facts, and where from
    (or None and why not).

    What the profiler records (``machine.cpufreq.policies[].range_hz``, the cpuinfo limits
    ``greenckpt probe`` reads) comes first; ``machine.frequencies_hz`` (the frequencies the CPU
    offers, as hand-made and synthetic profiles give them) next.
    """
    cpufreq = machine.get("cpufreq")
    if isinstance(cpufreq, Mapping) and cpufreq.get("policies"):
        policies = cpufreq["policies"]
        if not isinstance(policies, list):
            return None, "profile.machine.cpufreq.policies is not a list of cpufreq policies"
        ranges = set()
        for i, pol in enumerate(policies):
            freqs = None
            if isinstance(pol, Mapping):
                freqs = _hz_list(pol.get("range_hz")) or _hz_list(pol.get("frequencies_hz"))
            if freqs is None:
                return None, (
                    f"profile.machine.cpufreq.policies[{i}] records no frequency range "
                    "(range_hz: [minimum, maximum] in Hz)"
                )
            ranges.add((min(freqs), max(freqs)))
        lows, highs = {r[0] for r in ranges}, {r[1] for r in ranges}
        return (
            (
                min(lows) if len(lows) == 1 else math.nan,
                max(highs) if len(highs) == 1 else math.nan,
            ),
            "profile.machine.cpufreq",
        )
    if "frequencies_hz" in machine:
        freqs = _hz_list(machine["frequencies_hz"])
        if freqs is None:
            return None, (
                "profile.machine.frequencies_hz is not a list of frequencies in Hz, so the "
                "CPU's frequency range is not known"
            )
        return (min(freqs), max(freqs)), "profile.machine.frequencies_hz"
    return None, (
        "the profile does not record the CPU's frequency range (machine.cpufreq from the "
        "profiler, or machine.frequencies_hz), so the frequency the governor sets is not known"
    )


def governor_frequency(profile: Profile, name: str) -> tuple[float | None, str]:
    """The frequency a stock governor runs the CPU at, from the profile's node facts, and how
    it was found — or None and why it cannot be told.

    *performance* runs the CPU at its maximum frequency, *powersave* at its minimum: the CPU's
    (what its cpufreq driver offers), not the lowest or highest frequency the sweep happened to
    measure. Under an active-mode pstate driver, powersave is the driver's own selection, and
    *ondemand* (like every other governor) adapts to load: neither has one frequency.
    """
    if name not in ("performance", "powersave"):
        return None, f"{name} adapts to load: it does not run the CPU at one frequency"
    cpufreq = profile.machine.get("cpufreq")
    if name == "powersave" and isinstance(cpufreq, Mapping):
        driver = cpufreq.get("driver")
        active = driver in ACTIVE_PSTATE_DRIVERS or (
            isinstance(driver, str)
            and driver.startswith("amd-pstate")
            and cpufreq.get("mode") == "active"
        )
        if active:
            return None, (
                f"the node's cpufreq driver ({driver}, active mode) chooses the frequency "
                "itself under powersave, so it is not the minimum frequency; profile the "
                "powersave governor as a setting to compare against it"
            )
    rng, where = _cpu_range(profile.machine)
    if rng is None:
        return None, where
    which = "maximum" if name == "performance" else "minimum"
    hz = rng[1] if name == "performance" else rng[0]
    if math.isnan(hz):
        return None, (
            f"the CPU's cpufreq policies differ in their {which} frequency ({where}), so "
            f"{name} does not run the node at one frequency"
        )
    return hz, f"the CPU's {which} frequency {hz / 1e9:.2f} GHz (what {name} sets; from {where})"


def baseline_point(profile: Profile, op: str, name: str, n: int) -> tuple[ProfilePoint | None, str]:
    """The point a stock governor would run ``op`` at with ``n`` I/O processes, and how found.

    A point measured under the governor is used as it is. Otherwise *performance* and
    *powersave* are read from the fixed-frequency point at the frequency they set
    (:func:`governor_frequency`); where that point was not measured, the answer is None and
    says so — a neighbouring frequency would be a different governor's figure. Only points
    with every lever beyond the core clock as found are candidates: the baseline is the stock
    governor with the uncore, the power limits and the GPU as the node had them.

    Public because the runtime's governor policies (greenckpt.runtime.policy) must pick exactly
    the points the planner's baselines are evaluated at, or runs and plans would not compare.
    """
    pts = [
        p
        for p in profile.points
        if p.op == op
        and p.processes == n
        and p.codec is None
        and p.cstates in (None, True)
        and p.levers_as_found  # a governor leaves the uncore, power limits and GPU as found
    ]
    if not pts:
        counts = sorted({p.processes for p in profile.points if p.op == op})
        return None, f"no uncompressed {op} points at {n} I/O processes (measured: {counts})"
    governed = [p for p in pts if p.governor == name]
    if governed:
        return governed[0], f"measured under the {name} governor"
    return _baseline_at_fixed_frequency(profile, op, name, n, pts)


def _baseline_at_fixed_frequency(
    profile: Profile, op: str, name: str, n: int, pts: Sequence[ProfilePoint]
) -> tuple[ProfilePoint | None, str]:
    """:func:`baseline_point` for a governor not measured as such: the fixed-frequency point
    at the frequency it sets, or None and why it cannot be read from ``pts``."""
    fixed = [p for p in pts if p.frequency is not None]
    if not fixed and all(p.uncontrolled for p in pts):
        return None, (
            "the CPU frequency was not controlled when this profile was made (no cpufreq "
            f"control on the node), so what {name} would do cannot be read from it"
        )
    if name == "ondemand":
        return None, (
            f"no {op} points measured under the ondemand governor at {n} I/O processes; "
            "ondemand adapts to load and cannot be inferred from fixed-frequency points"
        )
    if not fixed:
        return None, (
            f"no {op} points measured under the {name} governor or at fixed frequencies at "
            f"{n} I/O processes"
        )
    hz, how = governor_frequency(profile, name)
    if hz is None:
        return None, how
    at = [p for p in fixed if abs((p.frequency or 0.0) - hz) <= FREQUENCY_TOLERANCE * hz]
    if not at:
        measured = ", ".join(f"{f / 1e9:.2f}" for f in sorted({p.frequency or 0.0 for p in fixed}))
        return None, (
            f"not measured: {how}, but the profile has no uncompressed {op} point at "
            f"{hz / 1e9:.2f} GHz with {n} I/O processes (measured there: {measured} GHz)"
        )
    return at[0], how
