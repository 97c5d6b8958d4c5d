"""SYNTHETIC uncore and RAPL powercap trees, and a root whose writes behave like their sysfs.

The values are made up (a two-socket Xeon-like node); the write rules are the kernel's: an
uncore limit outside initial_min..initial_max or crossing the other limit is EINVAL, a power
limit must be an unsigned integer, ``enabled`` 0 or 1.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass
from pathlib import Path

from greenckpt.testing.cpu import FakeSysfsRoot, build_tree, kernel_error, load_spec

UNC = "sys/devices/system/cpu/intel_uncore_frequency"
CAP = "sys/class/powercap"
_UNCORE_LIMIT = re.compile(rf"{UNC}/([^/]+)/(min|max)_freq_khz")
_CAP_FILE = re.compile(rf"{CAP}/intel-rapl:[\d:]+/(constraint_\d+_power_limit_uw|enabled)")


def _put(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")


def build_uncore(dest: Path, *, layout: str = "legacy", packages: int = 2) -> Path:
    """Uncore domains 800000..2400000 kHz, running 1200000..2400000 (as found)."""
    for pkg in range(packages):
        name = f"package_{pkg:02d}_die_00" if layout == "legacy" else f"uncore{pkg:02d}"
        d = f"{UNC}/{name}"
        for attr, value in (
            ("initial_min_freq_khz", 800000),
            ("initial_max_freq_khz", 2400000),
            ("min_freq_khz", 1200000),
            ("max_freq_khz", 2400000),
            ("current_freq_khz", 2000000),
        ):
            _put(dest, f"{d}/{attr}", str(value))
        if layout != "legacy":
            _put(dest, f"{d}/package_id", str(pkg))
            _put(dest, f"{d}/domain_id", "0")
    return dest


def build_powercap(
    dest: Path, *, packages: int = 2, max_uw: int | None = 250_000_000, enabled: str = "1"
) -> Path:
    """Package zones (long_term limit 205 W, max 250 W) with a dram subzone (max 60 W)."""
    for pkg in range(packages):
        z = f"{CAP}/intel-rapl:{pkg}"
        _put(dest, f"{z}/name", f"package-{pkg}")
        _put(dest, f"{z}/enabled", enabled)
        _put(dest, f"{z}/energy_uj", "1000")
        _put(dest, f"{z}/max_energy_range_uj", "262143328850")
        for k, (cname, limit) in enumerate(
            (("long_term", 205_000_000), ("short_term", 246_000_000))
        ):
            _put(dest, f"{z}/constraint_{k}_name", cname)
            _put(dest, f"{z}/constraint_{k}_power_limit_uw", str(limit))
            _put(dest, f"{z}/constraint_{k}_time_window_us", "999424" if k == 0 else "2440")
            if max_uw is not None:
                _put(dest, f"{z}/constraint_{k}_max_power_uw", str(max_uw))
        s = f"{z}/intel-rapl:{pkg}:0"
        _put(dest, f"{s}/name", "dram")
        _put(dest, f"{s}/enabled", "0")
        _put(dest, f"{s}/energy_uj", "500")
        _put(dest, f"{s}/constraint_0_name", "long_term")
        _put(dest, f"{s}/constraint_0_power_limit_uw", "0")
        _put(dest, f"{s}/constraint_0_max_power_uw", "60000000")
        link = dest / f"{CAP}/intel-rapl:{pkg}:0"
        if not link.exists():
            link.symlink_to(f"intel-rapl:{pkg}/intel-rapl:{pkg}:0")
    return dest


@dataclass(frozen=True)
class FakeLeverRoot(FakeSysfsRoot):
    """A FakeSysfsRoot that also accepts uncore and powercap writes, checked as sysfs does."""

    def write(self, rel: str, value: str) -> None:
        rel = rel.lstrip("/")
        text = value.removesuffix("\n")
        m = _UNCORE_LIMIT.fullmatch(rel)
        if m is None and not _CAP_FILE.fullmatch(rel):
            super().write(rel, value)
            return
        path = self / rel
        if self.before_write is not None:
            self.before_write(rel, text)
        if self.deny_writes:
            raise kernel_error(errno.EACCES, path)
        if self.fail_on is not None and rel.endswith(self.fail_on):
            raise kernel_error(errno.EIO, path)
        if not text.isdigit():
            raise kernel_error(errno.EINVAL, path, "not an unsigned integer")
        if m is not None:
            d = path.parent
            lo, hi = (int((d / f"initial_{x}_freq_khz").read_text()) for x in ("min", "max"))
            other = int((d / f"{'max' if m.group(2) == 'min' else 'min'}_freq_khz").read_text())
            v = int(text)
            if (
                not lo <= v <= hi
                or (m.group(2) == "min" and v > other)
                or (m.group(2) == "max" and v < other)
            ):
                raise kernel_error(errno.EINVAL, path, "out of range")
        elif rel.endswith("/enabled") and text not in ("0", "1"):
            raise kernel_error(errno.EINVAL, path, "enabled is 0 or 1")
        path.write_text(text + "\n", encoding="utf-8")
        self.log.append((rel, text))


def build_node(dest: Path, *, cpus_per_policy: int = 1) -> Path:
    """A SYNTHETIC 4-CPU acpi-cpufreq node (per-core policies by default) with C-states,
    uncore domains and RAPL zones: every sysfs lever present."""
    spec = dict(load_spec("intel-acpi-cpufreq"))
    spec["cpufreq"] = {**spec["cpufreq"], "cpus_per_policy": cpus_per_policy}
    build_tree(spec, dest)
    build_uncore(dest)
    build_powercap(dest)
    return dest
