"""SYNTHETIC cpufreq/cpuidle trees, and a root that acts like sysfs (moved from tests/platform).

Why: frequency and C-state control must be tested without root and without the hardware, on
the drivers greenckpt has to handle (acpi-cpufreq, intel_pstate with HWP, amd-pstate, a VM with
no cpufreq). Committing such trees would mean thousands of tiny files; instead each machine is a
short JSON description under ``trees/`` and :func:`build_tree` generates the files into a
temporary directory. Nothing here is a measurement of any machine.

Plain files accept anything, so :class:`FakeSysfsRoot` adds what the kernel would check on every
write and would change as a consequence:

* writes only to attributes that exist and that the kernel lets one write (EACCES otherwise),
* ``scaling_min_freq`` above the current ``scaling_max_freq`` (or max below min) → EINVAL, as on
  kernels before frequency QoS: code that writes limits in the wrong order fails here,
* governors not in ``scaling_available_governors`` → EINVAL; ``scaling_setspeed`` only under the
  userspace governor; switching to userspace starts ``setspeed`` at the current frequency, and
  any other governor shows ``<unsupported>``,
* ``energy_performance_preference`` refused (EBUSY) under intel_pstate's performance governor,
* ``scaling_cur_freq`` follows deterministically (userspace: setspeed within the limits, resolved
  on the table; performance: the maximum; others: the minimum), and is computed the same way when
  the tree is built — so a correctly restored tree is byte-for-byte the original one,
* every accepted write is shown with a trailing newline, as sysfs does, and logged in order.

It works across processes (the state lives in the files), so subprocess tests use it too. Its
refusals are the kernel's own built-in ``OSError`` subclasses, built by :func:`kernel_error`, so
code under test sees exactly what it would see on a real node.
"""

from __future__ import annotations

import errno
import json
import os
import re
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greenckpt.platform.root import SysRoot

__all__ = [
    "CPU",
    "CPUFREQ",
    "TREES",
    "FakeMsr",
    "FakeSysfsRoot",
    "build_tree",
    "diff",
    "kernel_error",
    "load_spec",
    "snapshot",
    "spec_names",
]

TREES = Path(__file__).resolve().parent / "trees"
CPU = "sys/devices/system/cpu"
CPUFREQ = f"{CPU}/cpufreq"

_POLICY_ATTR = re.compile(rf"({CPUFREQ}/policy\d+)/(\w+)")
_IDLE_DISABLE = re.compile(rf"{CPU}/cpu\d+/cpuidle/state\d+/disable")


def load_spec(name: str) -> dict[str, Any]:
    """The description ``trees/<name>.json`` (a fresh dict each time: tests may tweak it)."""
    spec: dict[str, Any] = json.loads((TREES / f"{name}.json").read_text(encoding="utf-8"))
    return spec


def spec_names() -> list[str]:
    """Every machine description shipped under ``trees/``."""
    return sorted(p.stem for p in TREES.glob("*.json"))


def _put(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def build_tree(spec: str | Mapping[str, Any], dest: Path) -> Path:
    """Generate the files of a machine description under ``dest``; return ``dest``."""
    s: Mapping[str, Any] = load_spec(spec) if isinstance(spec, str) else spec
    ncpu = int(s["cpus"])
    last = f"0-{ncpu - 1}" if ncpu > 1 else "0"
    for name in ("online", "possible", "present"):
        _put(dest, f"{CPU}/{name}", last)
    _put(dest, "proc/sys/kernel/random/boot_id", str(s.get("boot_id", "synthetic-boot")))
    dma = dest / "dev/cpu_dma_latency"
    dma.parent.mkdir(parents=True, exist_ok=True)
    dma.write_bytes(struct.pack("=i", 2_000_000_000))
    for cpu in range(ncpu):
        (dest / f"{CPU}/cpu{cpu}").mkdir(parents=True, exist_ok=True)
        if cpu:
            _put(dest, f"{CPU}/cpu{cpu}/online", "1")
    (dest / CPUFREQ).mkdir(parents=True, exist_ok=True)  # present but empty without a driver
    freq = s.get("cpufreq")
    if freq:
        _build_cpufreq(dest, ncpu, freq)
    idle = s.get("cpuidle")
    if idle:
        _build_cpuidle(dest, ncpu, idle)
    return dest


def _build_cpufreq(dest: Path, ncpu: int, f: Mapping[str, Any]) -> None:
    if f.get("intel_pstate_status"):
        _put(dest, f"{CPU}/intel_pstate/status", f["intel_pstate_status"])
        _put(dest, f"{CPU}/intel_pstate/no_turbo", "0")
    if f.get("amd_pstate_status"):
        _put(dest, f"{CPU}/amd_pstate/status", f["amd_pstate_status"])
    per = int(f.get("cpus_per_policy", 1))
    for first in range(0, ncpu, per):
        cpus = " ".join(str(c) for c in range(first, min(first + per, ncpu)))
        pol = f"{CPUFREQ}/policy{first}"
        governor = f["governor"]
        lo = int(f.get("scaling_min_khz", f["cpuinfo_min_khz"]))
        hi = int(f.get("scaling_max_khz", f["cpuinfo_max_khz"]))
        files = {
            "affected_cpus": cpus,
            "related_cpus": cpus,
            "scaling_driver": f["driver"],
            "scaling_governor": governor,
            "scaling_available_governors": " ".join(f["governors"]),
            "cpuinfo_min_freq": str(f["cpuinfo_min_khz"]),
            "cpuinfo_max_freq": str(f["cpuinfo_max_khz"]),
            "cpuinfo_transition_latency": str(f.get("transition_latency_ns", 10000)),
            "scaling_min_freq": str(lo),
            "scaling_max_freq": str(hi),
            "scaling_cur_freq": str(lo),
            "scaling_setspeed": str(f.get("setspeed_khz", lo))
            if governor == "userspace"
            else "<unsupported>",
        }
        if f.get("frequencies_khz"):
            files["scaling_available_frequencies"] = " ".join(map(str, f["frequencies_khz"]))
        if f.get("epp"):
            files["energy_performance_preference"] = f["epp"]
            files["energy_performance_available_preferences"] = " ".join(f["epp_available"])
        files.update(f.get("extra", {}))
        for name, text in files.items():
            _put(dest, f"{pol}/{name}", text)
        _refresh_cur(dest / pol)
        for cpu in range(first, min(first + per, ncpu)):
            os.symlink(f"../cpufreq/policy{first}", dest / f"{CPU}/cpu{cpu}/cpufreq")


def _build_cpuidle(dest: Path, ncpu: int, idle: Mapping[str, Any]) -> None:
    _put(dest, f"{CPU}/cpuidle/current_driver", idle["driver"])
    _put(dest, f"{CPU}/cpuidle/current_governor", idle.get("governor", "menu"))
    _put(dest, f"{CPU}/cpuidle/current_governor_ro", idle.get("governor", "menu"))
    for cpu in range(ncpu):
        for index, st in enumerate(idle["states"]):
            base = f"{CPU}/cpu{cpu}/cpuidle/state{index}"
            _put(dest, f"{base}/name", st["name"])
            _put(dest, f"{base}/desc", st["desc"])
            _put(dest, f"{base}/latency", str(st["latency_us"]))
            _put(dest, f"{base}/residency", str(st["residency_us"]))
            _put(dest, f"{base}/disable", str(st.get("disable", 0)))
            _put(dest, f"{base}/default_status", "enabled")
            _put(dest, f"{base}/usage", str(1000 * (index + 1)))
            _put(dest, f"{base}/time", str(50_000 * (index + 1)))


# --------------------------------------------------------------------------------------------
# Kernel-like behaviour
# --------------------------------------------------------------------------------------------


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8").strip()


def _table(policy: Path) -> list[int]:
    f = policy / "scaling_available_frequencies"
    return sorted(int(t) for t in _text(f).split()) if f.exists() else []


def _resolve(policy: Path, target: int, lo: int, hi: int, highest: bool) -> int:
    """A frequency the driver would run: the table entry at or above (RELATION_L) or at or
    below (RELATION_H) the target, kept inside [lo, hi]; the target itself without a table."""
    target = min(max(target, lo), hi)
    table = [t for t in _table(policy) if lo <= t <= hi]
    if not table:
        return target
    if highest:
        below = [t for t in table if t <= target]
        return below[-1] if below else table[0]
    above = [t for t in table if t >= target]
    return above[0] if above else table[-1]


def _refresh_cur(policy: Path) -> None:
    """Recompute ``scaling_cur_freq`` from governor, limits and setspeed (deterministic)."""
    gov = _text(policy / "scaling_governor")
    lo, hi = int(_text(policy / "scaling_min_freq")), int(_text(policy / "scaling_max_freq"))
    if gov == "userspace":
        cur = _resolve(policy, int(_text(policy / "scaling_setspeed")), lo, hi, highest=False)
    elif gov == "performance":
        cur = _resolve(policy, hi, lo, hi, highest=True)
    else:
        cur = _resolve(policy, lo, lo, hi, highest=False)
    (policy / "scaling_cur_freq").write_text(f"{cur}\n", encoding="utf-8")


def kernel_error(code: int, path: Path | str | None = None, why: str | None = None) -> OSError:
    """The ``OSError`` subclass the kernel's ``errno`` maps to (EACCES: ``PermissionError``...).

    A fake of sysfs must fail as sysfs does, with a plain built-in error and not a greenckpt
    one, or code that catches only ``GreenckptError`` would pass here and crash on a node.
    """
    text = os.strerror(code) if why is None else f"{os.strerror(code)} ({why})"
    return OSError(code, text) if path is None else OSError(code, text, str(path))


def _einval(path: Path, why: str) -> OSError:
    return OSError(errno.EINVAL, f"Invalid argument ({why})", str(path))


def _parse_uint(path: Path, text: str) -> int:
    if not re.fullmatch(r"\d+", text):
        raise _einval(path, f"not a number: {text!r}")
    return int(text)


@dataclass(frozen=True)
class FakeSysfsRoot(SysRoot):
    """A SysRoot over a generated tree whose writes behave like sysfs (see the module doc)."""

    log: list[tuple[str, str]] = field(default_factory=list, compare=False, repr=False)
    """Every accepted write, in order: (path relative to the root, value without newline)."""
    deny_writes: bool = False
    """Refuse every write with EACCES, as sysfs does for a user without root."""
    before_write: Callable[[str, str], None] | None = field(default=None, compare=False)
    """Called with (path, value) before each write is checked (tests hook in here)."""
    fail_on: str | None = None
    """A path suffix whose write fails with EIO (to test failures in mid-sequence)."""
    limit_step_khz: int | None = None
    """Round written limits to this step, as intel_pstate rounds to its P-state ratios."""
    cur_freq_khz: int | None = None
    """``scaling_cur_freq`` shows this whatever is set (a platform overriding the request)."""
    idle_disable_ignored: bool = False
    """Writes to a C-state's ``disable`` are accepted but do not stick (it keeps reading 0)."""

    def write(self, rel: str, value: str) -> None:
        rel = rel.lstrip("/")
        text = value.removesuffix("\n")
        if self.before_write is not None:
            self.before_write(rel, text)
        path = self / rel
        if self.deny_writes:
            raise kernel_error(errno.EACCES, path)
        if not path.is_file():
            raise kernel_error(errno.ENOENT, path)
        if self.fail_on is not None and rel.endswith(self.fail_on):
            raise kernel_error(errno.EIO, path)
        if "\n" in text:
            raise _einval(path, "embedded newline")
        if m := _POLICY_ATTR.fullmatch(rel):
            self._write_policy(self / m.group(1), m.group(2), path, text)
        elif _IDLE_DISABLE.fullmatch(rel):
            shown = "1" if _parse_uint(path, text) and not self.idle_disable_ignored else "0"
            path.write_text(shown + "\n", encoding="utf-8")
        else:
            raise kernel_error(errno.EACCES, path, "read-only attribute")
        self.log.append((rel, text))

    def _write_policy(self, policy: Path, attr: str, path: Path, text: str) -> None:
        """One cpufreq policy attribute, checked as the kernel checks it (one rule per attr)."""
        if attr == "scaling_governor":
            _write_governor(policy, path, text)
        elif attr in ("scaling_min_freq", "scaling_max_freq"):
            self._write_limit(policy, attr, path, text)
        elif attr == "scaling_setspeed":
            if _text(policy / "scaling_governor") != "userspace":
                raise _einval(path, "setspeed needs the userspace governor")
            path.write_text(f"{_parse_uint(path, text)}\n", encoding="utf-8")
        elif attr == "energy_performance_preference":
            _write_epp(policy, path, text)
        else:
            raise kernel_error(errno.EACCES, path, "read-only attribute")
        _refresh_cur(policy)
        if self.cur_freq_khz is not None:
            (policy / "scaling_cur_freq").write_text(f"{self.cur_freq_khz}\n", encoding="utf-8")

    def _write_limit(self, policy: Path, attr: str, path: Path, text: str) -> None:
        lo, hi = int(_text(policy / "scaling_min_freq")), int(_text(policy / "scaling_max_freq"))
        cmin, cmax = (
            int(_text(policy / "cpuinfo_min_freq")),
            int(_text(policy / "cpuinfo_max_freq")),
        )
        value = min(max(_parse_uint(path, text), cmin), cmax)  # the kernel clamps silently
        if self.limit_step_khz:
            value = round(value / self.limit_step_khz) * self.limit_step_khz
        if attr == "scaling_min_freq" and value > hi:
            raise _einval(path, f"min {value} above max {hi}")
        if attr == "scaling_max_freq" and value < lo:
            raise _einval(path, f"max {value} below min {lo}")
        path.write_text(f"{value}\n", encoding="utf-8")


def _write_governor(policy: Path, path: Path, text: str) -> None:
    gov = _text(policy / "scaling_governor")
    if text not in _text(policy / "scaling_available_governors").split():
        raise _einval(path, f"governor {text!r} not available")
    if text == "userspace" and gov != "userspace":
        cur = _text(policy / "scaling_cur_freq")
        (policy / "scaling_setspeed").write_text(cur + "\n", encoding="utf-8")
    elif text != "userspace":
        (policy / "scaling_setspeed").write_text("<unsupported>\n", encoding="utf-8")
    path.write_text(text + "\n", encoding="utf-8")


def _write_epp(policy: Path, path: Path, text: str) -> None:
    if text not in _text(policy / "energy_performance_available_preferences").split():
        raise _einval(path, f"unknown preference {text!r}")
    gov = _text(policy / "scaling_governor")
    if gov == "performance" and _text(policy / "scaling_driver") == "intel_pstate":
        raise kernel_error(errno.EBUSY, path)
    path.write_text(text + "\n", encoding="utf-8")


class FakeMsr:
    """SYNTHETIC ``/dev/cpu/N/msr`` for the self-check's ``msr_reader``: TSC, MPERF and APERF.

    A plain file cannot stand in (the msr driver's file offset is the register number, and
    MPERF 0xE7 and APERF 0xE8 overlap as byte ranges), so the tree gets empty ``msr`` files and
    this reader makes up the counters: at each read of the TSC they advance by the monotonic
    time since the CPU's previous TSC read, TSC and MPERF at ``tsc_hz`` (a CPU always busy),
    APERF at the CPU's effective frequency, by default its policy's ``scaling_cur_freq``
    (``effective_hz`` to change it); MPERF and APERF read after it give that same instant, as
    the self-check reads a snapshot TSC first. Why not at every read: the three reads of a
    snapshot would then be taken at three instants, and a rank preempted between two of them
    on a busy machine skewed the measured frequency by more than the 1 % the test allows
    (1.2175 against 1.2 GHz, seen once in CI). ``reads`` counts the reads.
    """

    def __init__(
        self,
        tree: Path,
        cpus: int,
        tsc_hz: float = 2.6e9,
        effective_hz: Callable[[int], float] | None = None,
    ) -> None:
        self.tree = tree
        self.tsc_hz = tsc_hz
        self.effective_hz = effective_hz or self._scaling_cur
        self.reads = 0
        self._last: dict[int, float] = {}
        self._counts: dict[int, list[float]] = {}
        for cpu in range(cpus):
            path = tree / f"dev/cpu/{cpu}/msr"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()

    def _scaling_cur(self, cpu: int) -> float:
        return int(_text(self.tree / f"{CPU}/cpu{cpu}/cpufreq/scaling_cur_freq")) * 1000.0

    def __call__(self, path: Path, register: int) -> int:
        if not path.exists():
            raise kernel_error(errno.ENOENT, path)
        cpu = int(path.parent.name)
        index = {0x10: 0, 0xE7: 1, 0xE8: 2}.get(register)
        if index is None:
            raise kernel_error(errno.EIO, path, f"register {register:#x} not faked")
        counts = self._counts.setdefault(cpu, [1e12, 5e11, 4e11])
        if index == 0:
            now = time.monotonic()
            dt = now - self._last.get(cpu, now)
            self._last[cpu] = now
            counts[0] += self.tsc_hz * dt
            counts[1] += self.tsc_hz * dt
            counts[2] += self.effective_hz(cpu) * dt
        self.reads += 1
        return int(counts[index])


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file's bytes (and every symlink's target) under ``root``, by relative path."""
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = Path(dirpath) / name
            rel = str(full.relative_to(root))
            out[rel] = (
                b"-> " + os.readlink(full).encode() if full.is_symlink() else full.read_bytes()
            )
    return out


def diff(before: Mapping[str, bytes], after: Mapping[str, bytes]) -> list[str]:
    """Readable differences between two snapshots (empty when identical)."""
    lines = []
    for rel in sorted(set(before) | set(after)):
        if before.get(rel) != after.get(rel):
            lines.append(f"{rel}: {before.get(rel)!r} -> {after.get(rel)!r}")
    return lines
