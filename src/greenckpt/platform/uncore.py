"""Uncore (mesh, memory controller, LLC) frequency through Linux ``intel_uncore_frequency``.

Why: on current Xeons the uncore draws tens of watts per socket and sets how fast memory and
I/O move, so memory- and I/O-bound phases (a checkpoint) may cost less at another uncore
frequency; EAR and GEOPM set it for that reason. The kernel exposes one directory per domain,
in one of two layouts: ``package_PP_die_DD`` (every kernel with the driver) or ``uncoreNN``
with ``package_id`` and ``domain_id`` files (newer kernels, TPMI); where both exist the
``uncoreNN`` ones are used (the others then mirror some of them). Setting the uncore to X kHz
pins every domain: ``min_freq_khz`` = ``max_freq_khz`` = X, written in an order that never
shows min > max (:func:`limit_pair_writes`, also used to restore). The range allowed is what
each domain reports it booted with: ``initial_min_freq_khz`` .. ``initial_max_freq_khz``; a
value outside it is refused in one line, nothing written. AMD: the kernel exposes no uncore
(data fabric) frequency control, so the lever is reported absent with that reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from greenckpt.errors import InvalidValueError
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.sysfs_writes import SysfsWrite, WriteGuard, write_attributes

__all__ = [
    "UNCORE_DIR",
    "UncoreDomain",
    "UncorePlan",
    "UncoreResult",
    "apply_uncore",
    "describe_range",
    "detect_uncore",
    "limit_pair_writes",
    "plan_uncore",
    "touched_paths",
    "uncore_absent_reason",
]

UNCORE_DIR = "sys/devices/system/cpu/intel_uncore_frequency"
_LEGACY = re.compile(r"package_(\d{2,3})_die_(\d{2,3})")
_NEW = re.compile(r"uncore(\d{1,4})")
_NO_CONTROL = "no uncore frequency control"


@dataclass(frozen=True)
class UncoreDomain:
    """One uncore frequency domain (a die, or a TPMI cluster), as read (kHz)."""

    name: str
    """Its directory name: ``package_00_die_00`` or ``uncore00``."""
    path: str
    """Directory relative to the root."""
    package: int
    die: int
    initial_min_khz: int
    initial_max_khz: int
    min_khz: int
    max_khz: int
    current_khz: int | None

    def check(self, khz: int) -> None:
        """Refuse (one line) a value outside what this domain reports."""
        if not self.initial_min_khz <= khz <= self.initial_max_khz:
            raise InvalidValueError(
                f"uncore frequency {khz} kHz is outside the range {self.name} reports: "
                f"{self.initial_min_khz}..{self.initial_max_khz} kHz "
                "(initial_min_freq_khz..initial_max_freq_khz); nothing was changed"
            )


@dataclass(frozen=True)
class UncorePlan:
    """A validated request: every domain, the writes in order, the value."""

    khz: int
    domains: tuple[UncoreDomain, ...]
    writes: tuple[SysfsWrite, ...]


@dataclass(frozen=True)
class UncoreResult:
    """What was written and what the domains read afterwards (notes on any difference)."""

    plan: UncorePlan
    written: tuple[SysfsWrite, ...]
    applied: tuple[UncoreDomain, ...]
    notes: tuple[str, ...]


def limit_pair_writes(
    min_path: str, max_path: str, cur_min: int, cur_max: int, new_min: int, new_max: int
) -> list[SysfsWrite]:
    """Writes moving [min, max] to the new pair without ever showing min > max.

    If the new minimum is above the current maximum, the maximum goes first; otherwise the
    minimum does (the same rule as cpufreq's :func:`~greenckpt.platform.cpufreq.limit_writes`).
    Unchanged values are not written.
    """
    if new_min > new_max:
        raise PlatformError(f"{min_path}: minimum {new_min} above maximum {new_max}")
    wmin, wmax = SysfsWrite(min_path, str(new_min)), SysfsWrite(max_path, str(new_max))
    order = [wmax, wmin] if new_min > cur_max else [wmin, wmax]
    current = {min_path: cur_min, max_path: cur_max}
    return [w for w in order if int(w.value) != current[w.path]]


def _is_amd(root: SysRoot) -> bool:
    text = root.read_or_none("proc/cpuinfo") or ""
    return any(
        line.startswith("vendor_id") and "AuthenticAMD" in line for line in text.splitlines()
    )


def _entries(root: SysRoot) -> list[tuple[str, int, int]]:
    """(directory, package, die) of every domain, in the layout this kernel uses."""
    try:
        names = sorted(os.listdir(root / UNCORE_DIR))
    except OSError:
        return []
    new: list[tuple[str, int, int]] = []
    legacy: list[tuple[str, int, int]] = []
    for name in names:
        if m := _NEW.fullmatch(name):
            pkg = root.read_int_or_none(f"{UNCORE_DIR}/{name}/package_id")
            dom = root.read_int_or_none(f"{UNCORE_DIR}/{name}/domain_id")
            new.append((name, pkg if pkg is not None else -1, dom if dom is not None else -1))
        elif m := _LEGACY.fullmatch(name):
            legacy.append((name, int(m.group(1)), int(m.group(2))))
    return new or legacy


def _read_domain(root: SysRoot, name: str, package: int, die: int) -> UncoreDomain:
    path = f"{UNCORE_DIR}/{name}"
    values: dict[str, int] = {}
    for attr in ("initial_min_freq_khz", "initial_max_freq_khz", "min_freq_khz", "max_freq_khz"):
        value = root.read_int_or_none(f"{path}/{attr}")
        if value is None:
            raise PlatformError(f"{_NO_CONTROL}: {root / path}/{attr} is missing or unreadable")
        values[attr] = value
    return UncoreDomain(
        name=name,
        path=path,
        package=package,
        die=die,
        initial_min_khz=values["initial_min_freq_khz"],
        initial_max_khz=values["initial_max_freq_khz"],
        min_khz=values["min_freq_khz"],
        max_khz=values["max_freq_khz"],
        current_khz=root.read_int_or_none(f"{path}/current_freq_khz"),
    )


def uncore_absent_reason(root: SysRoot) -> str | None:
    """Why this node has no uncore frequency control (None: it has some)."""
    if _entries(root):
        return None
    if _is_amd(root):
        return (
            "AMD CPU: the Linux kernel exposes no uncore (data fabric) frequency control in sysfs"
        )
    if (root / UNCORE_DIR).is_dir():
        return f"{root / UNCORE_DIR} lists no package_PP_die_DD or uncoreNN domain"
    return (
        f"no {root / UNCORE_DIR} (the intel_uncore_frequency driver is not loaded — try "
        "`modprobe intel_uncore_frequency` — or the CPU or VM lacks it)"
    )


def detect_uncore(root: SysRoot) -> tuple[UncoreDomain, ...]:
    """Every uncore domain; PlatformError ("no uncore frequency control: <why>") when none."""
    why = uncore_absent_reason(root)
    if why is not None:
        raise PlatformError(f"{_NO_CONTROL}: {why}")
    return tuple(_read_domain(root, *entry) for entry in _entries(root))


def plan_uncore(root: SysRoot, khz: int) -> UncorePlan:
    """Validate ``khz`` against every domain (nothing planned when one refuses), then plan
    min = max = ``khz`` on each, in the safe order from its current limits."""
    if isinstance(khz, bool) or not isinstance(khz, int) or khz <= 0:
        raise InvalidValueError(
            f"an uncore frequency must be a positive whole number of kHz, got {khz!r}"
        )
    domains = detect_uncore(root)
    for d in domains:
        d.check(khz)
    writes: list[SysfsWrite] = []
    for d in domains:
        writes += limit_pair_writes(
            f"{d.path}/min_freq_khz", f"{d.path}/max_freq_khz", d.min_khz, d.max_khz, khz, khz
        )
    return UncorePlan(khz, domains, tuple(writes))


def touched_paths(plan: UncorePlan) -> list[str]:
    """The files whose originals a session saves before applying ``plan`` (both limits of
    every domain: restoring one without the other could be refused by the ordering rule)."""
    return [f"{d.path}/{a}" for d in plan.domains for a in ("min_freq_khz", "max_freq_khz")]


def apply_uncore(
    root: SysRoot, plan: UncorePlan, *, around_each: WriteGuard | None = None
) -> UncoreResult:
    """Write ``plan`` (each write inside ``around_each``), read back, note any difference."""
    written = write_attributes(
        root, plan.writes, what="the uncore frequency files", around_each=around_each
    )
    applied = tuple(_read_domain(root, d.name, d.package, d.die) for d in plan.domains)
    notes = [
        f"{d.name}: limits read {d.min_khz}..{d.max_khz} kHz, not {plan.khz} kHz"
        for d in applied
        if (d.min_khz, d.max_khz) != (plan.khz, plan.khz)
    ]
    return UncoreResult(plan, tuple(written), applied, tuple(notes))


def describe_range(domains: Iterable[UncoreDomain]) -> str:
    """The range every domain accepts, for the probe ("1200000..2400000 kHz on 2 domains")."""
    ds = list(domains)
    lo = max(d.initial_min_khz for d in ds)
    hi = min(d.initial_max_khz for d in ds)
    return f"{lo}..{hi} kHz on {len(ds)} domain{'s' if len(ds) != 1 else ''}"
