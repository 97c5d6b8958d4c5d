"""Self-check of the meters: read each twice under load, and compare meters of one domain.

Why: a meter can open and still be wrong on a real node (a counter that does not move, a unit
off by 1000, a wrap mishandled, a BMC that reports the PSU's idle floor). Every meter that
opens is read twice an interval apart while a CPU is kept busy: cumulative energy must not
fall, the busy domains (package, node, GPU) must rise, the power must be below what the
hardware can draw. Then meters that cover the same thing are set side by side: RAPL and the
perf power PMU count the same package; a node's power (IPMI, a wall-plug log) is at least its
packages' and DRAM's (and GPUs'). Which meters are compared is their declared role (two
measured CPU meters, a node meter against the CPU and GPU meters, two node meters). Every
meter is probed on its own, not through the auto-selection, which opens one CPU meter only and
so would leave nothing to compare.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from greenckpt.platform.meters import (
    METERS,
    Meter,
    MeterUnavailable,
    RaplMeter,
    probe_meter,
    with_role,
)
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.selfcheck_base import Check, SelfCheckOptions

__all__ = ["NODE_BOUND_W", "check_meters"]

NODE_BOUND_W = 20_000.0
"""Highest plausible power of one node (W): above it a reading is a unit or parsing error."""
GPU_BOUND_W = 2_000.0
DOMAIN_BOUND_W = 2_000.0
"""Highest plausible power of any other domain with no limit of its own to compare with."""
_MUST_RISE = re.compile(r"(package-\d+|node|gpu\d+|psys|cpu)")


@dataclass
class _Reading:
    """Two reads of one meter: cumulative joules per domain at two monotonic times."""

    meter: Meter
    first: dict[str, float] = field(default_factory=dict)
    second: dict[str, float] = field(default_factory=dict)
    t: list[float] = field(default_factory=list)
    error: str | None = None

    def take(self, into: dict[str, float]) -> None:
        if self.error is not None:
            return
        try:
            into.update(self.meter.read())
            self.t.append(time.monotonic())
        except (PlatformError, OSError, ValueError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def powers(self) -> dict[str, float]:
        dt = self.t[1] - self.t[0]
        return {d: (self.second[d] - self.first[d]) / dt for d in self.first if d in self.second}


def _bound(meter: Meter, domain: str) -> tuple[float, str]:
    """The highest plausible power of ``domain`` (W) and where that bound comes from."""
    own = meter.power_bound(domain)
    if own is not None:
        return own
    if domain == "node":
        return NODE_BOUND_W, "a node's highest plausible power"
    if domain.startswith("gpu"):
        return GPU_BOUND_W, "a GPU's highest plausible power"
    return DOMAIN_BOUND_W, "a domain's highest plausible power"


def _one_meter(r: _Reading, interval: float) -> Check:
    m = r.meter
    name = f"meter {m.name}"
    did = f"read {m.name} ({m.source}) twice, {interval:.2g} s apart, a CPU kept busy"
    if r.error is not None or len(r.t) != 2:
        return Check.failed(name, did, expected="two readings", seen=r.error or "no reading")
    powers = r.powers()
    problems: list[str] = []
    for d, p in powers.items():
        bound, why = _bound(m, d)
        if r.second[d] < r.first[d]:
            problems.append(f"{d} energy fell {r.first[d]:.6g} -> {r.second[d]:.6g} J")
        elif p <= 0 and _MUST_RISE.fullmatch(d):
            problems.append(f"{d} did not rise ({p:.3g} W) while a CPU was busy")
        elif not math.isfinite(p) or p > bound:
            problems.append(f"{d} {p:.4g} W above {bound:.4g} W ({why})")
    wraps = dict(m.wraps) if isinstance(m, RaplMeter) else {}
    shown = ", ".join(f"{d} {p:.4g} W" for d, p in powers.items())
    extra = [f"{sum(wraps.values())} counter wrap(s) corrected"] if any(wraps.values()) else []
    gaps = {d: n for d, n in m.gaps.items() if n}
    if gaps:
        extra.append(f"degraded readings {gaps}")
    observed = "; ".join([f"{shown} ({m.source})", *extra])
    details: dict[str, object] = {"source": m.source, "power_w": powers, "wraps": wraps}
    details |= {"gaps": gaps, "interval_s": r.t[1] - r.t[0]}
    if problems:
        expected = "energy never falling, busy domains rising, power plausible"
        return Check.failed(
            name,
            did,
            expected=expected,
            seen="; ".join(problems),
            observed=observed,
            details=details,
        )
    return Check.passed(name, did, observed, details)


def _sum(powers: Mapping[str, float], pattern: str) -> tuple[float, list[str]]:
    names = [d for d in powers if re.fullmatch(pattern, d)]
    return sum(powers[d] for d in names), names


def _compare(name: str, did: str, a: float, b: float, tolerance: float, relation: str) -> Check:
    """``a`` against ``b``: ``relation`` ``=`` within ``tolerance``, or ``>=`` (a ≥ b·(1−tol))."""
    diff = a - b
    rel = abs(diff) / max(abs(a), abs(b), 1e-12)
    ok = rel <= tolerance if relation == "=" else a >= b * (1 - tolerance)
    observed = f"{a:.4g} W vs {b:.4g} W: differ by {diff:+.4g} W ({rel:.1%})"
    details = {"a_w": a, "b_w": b, "difference_w": diff, "relative": rel, "tolerance": tolerance}
    if ok:
        return Check.passed(name, did, observed, details)
    want = "equal within" if relation == "=" else "first at least the second, within"
    return Check.failed(
        name, did, expected=f"{want} {tolerance:.0%}", seen=observed, details=details
    )


def _comparisons(readings: Sequence[_Reading], tolerance: float) -> list[Check]:
    powers = {r.meter.name: r.powers() for r in readings if r.error is None and len(r.t) == 2}
    measured = {r.meter.name for r in readings if r.meter.source == "measured"}
    out: list[Check] = []
    cpus = [n for n in with_role("cpu") if n in powers and n in measured]
    for i, a in enumerate(cpus):
        for b in cpus[i + 1 :]:
            for d in sorted(set(powers[a]) & set(powers[b])):
                out.append(
                    _compare(
                        f"{a} vs {b} {d}",
                        "compared the same domain's power",
                        powers[a][d],
                        powers[b][d],
                        tolerance,
                        "=",
                    )
                )
    cpu = cpus[0] if cpus else None
    gpus = [n for n in with_role("gpu") if n in powers]
    nodes = [n for n in with_role("node") if n in powers and n in measured]
    for node in nodes:
        parts: list[str] = []
        inside = 0.0
        if cpu is not None:
            inside, parts = _sum(powers[cpu], r"(package|dram)-\d+")
        for gpu in gpus:
            watts, names = _sum(powers[gpu], r"gpu\d+")
            inside, parts = inside + watts, [*parts, *names]
        if parts and "node" in powers[node]:
            label = f"{cpu} " + "+".join(parts) if cpu else "+".join(parts)
            out.append(
                _compare(
                    f"{node} node >= {label}",
                    "compared the node's power with the parts it contains",
                    powers[node]["node"],
                    inside,
                    tolerance,
                    ">=",
                )
            )
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            if "node" in powers[a] and "node" in powers[b]:
                out.append(
                    _compare(
                        f"{a} vs {b} node",
                        "compared two meters of the node",
                        powers[a]["node"],
                        powers[b]["node"],
                        tolerance,
                        "=",
                    )
                )
    if not out:
        have = ", ".join(sorted(powers)) or "none"
        out.append(
            Check.not_checked(
                "meters of one domain", f"no second meter of the same domain (meters read: {have})"
            )
        )
    return out


def _open_all(root: SysRoot, options: SelfCheckOptions) -> tuple[list[Meter], list[Check]]:
    meters: list[Meter] = []
    skipped: list[Check] = []
    for name, cls in METERS.items():
        why = cls.not_needed(options.meter_options)
        if why is not None:
            flags = [o.flag for o in cls.options if o.flag is not None]
            shown = f"{why} ({', '.join(flags)})" if flags else why
            skipped.append(Check.not_checked(f"meter {name}", shown))
            continue
        try:
            meters.append(probe_meter(name, root, options.meter_options))
        except MeterUnavailable as exc:
            skipped.append(Check.not_checked(f"meter {name}", exc.reason, f"probed {name}"))
        except (PlatformError, OSError, ValueError) as exc:
            skipped.append(
                Check.failed(
                    f"meter {name}",
                    f"probed {name}",
                    expected="the meter to open or say why not",
                    seen=f"{type(exc).__name__}: {exc}",
                )
            )
    return meters, skipped


def check_meters(
    root: SysRoot,
    options: SelfCheckOptions,
    opener: Callable[[SysRoot, SelfCheckOptions], tuple[list[Meter], list[Check]]] = _open_all,
) -> list[Check]:
    """Read every meter that opens twice under load; compare those of one domain."""
    meters, checks = opener(root, options)
    try:
        if not meters:
            why = "no meter opened here: nothing to read or compare"
            return [*checks, Check.not_checked("meters of one domain", why)]
        readings = [_Reading(m) for m in meters]
        interval = max([options.interval_s, *(m.min_period_s * 1.1 for m in meters)])
        for r in readings:
            r.take(r.first)
        options.load(interval)
        for r in readings:
            r.take(r.second)
        checks.extend(_one_meter(r, interval) for r in readings)
        checks.extend(_comparisons(readings, options.meter_tolerance))
        return checks
    finally:
        for m in meters:
            with contextlib.suppress(Exception):
                m.close()
