"""Self-check of the levers: set a frequency and a C-state for real, read back, restore.

Why: the cpufreq and cpuidle code is tested on fake trees only; a real node may accept a write
and run something else (a platform that overrides the request, HWP, a BMC's power cap, an idle
driver ignoring ``disable``). So each lever is moved through the session every run uses
(:class:`~greenckpt.platform.restore.NodeSettings`: saved first, restored on exit and signals)
and read back twice: what the kernel says (``scaling_cur_freq``) and what the CPU ran (busy
frequency from APERF/MPERF, else ``cpuinfo_cur_freq``, else ``/proc/cpuinfo``).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

from greenckpt.platform.capability import FrequencyControl
from greenckpt.platform.cpufreq import CPUFREQ_DIR, CpufreqPolicy, format_hz
from greenckpt.platform.cpuidle import CpuidleController, IdleState
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.selfcheck_base import Check, SelfCheckOptions

__all__ = [
    "APERF",
    "MPERF",
    "TSC",
    "check_cpufreq",
    "check_cstate",
    "cpufreq_unavailable",
    "idle_target",
    "read_settings",
]

TSC, MPERF, APERF = 0x10, 0xE7, 0xE8
"""IA32_TIME_STAMP_COUNTER, IA32_MPERF, IA32_APERF: busy frequency = TSC rate × ΔAPERF/ΔMPERF
(what turbostat calls Bzy_MHz)."""
TURBO_STEP_HZ = 1_000_000
"""acpi-cpufreq lists turbo as the nominal top frequency + 1 MHz."""
_POLICY_KEYS = ("scaling_governor", "scaling_min_freq", "scaling_max_freq", "scaling_setspeed")


def read_settings(root: SysRoot) -> dict[str, str | None]:
    """Every setting a session may change, by path: each policy's governor, limits, setspeed
    and EPP, each idle state's ``disable`` (for "the node is as it was found")."""
    out: dict[str, str | None] = {}
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(root / CPUFREQ_DIR)):
            if re.fullmatch(r"policy\d+", name):
                for key in (*_POLICY_KEYS, "energy_performance_preference"):
                    path = f"{CPUFREQ_DIR}/{name}/{key}"
                    if (root / path).exists():
                        out[path] = root.read_or_none(path)
    with contextlib.suppress(PlatformError):
        for s in CpuidleController(root).detect().states:
            out[s.disable_path] = root.read_or_none(s.disable_path)
    return out


def cpufreq_unavailable(control: FrequencyControl) -> str | None:
    """Why the frequency cannot be checked here (None: it can)."""
    if control.cpufreq is None:
        return control.reason
    if not control.available:
        return f"{control.reason} ({control.unwritable} is not writable by this process)"
    return None


def idle_target(root: SysRoot) -> tuple[IdleState | None, str]:
    """The idle state to toggle (the deepest enabled one of the first CPU), or why none."""
    try:
        info = CpuidleController(root).detect()
    except PlatformError as exc:
        return None, str(exc)
    cpu = info.cpus[0]
    enabled = [s for s in info.for_cpu(cpu) if not s.disabled]
    if not enabled:
        return None, f"every idle state of CPU {cpu} is disabled already: nothing to toggle"
    state = enabled[-1]
    if not os.access(root / state.disable_path, os.W_OK):
        return None, f"{root / state.disable_path} is not writable: root is needed"
    return state, ""


# -------------------------------------------------------------------------------- cpufreq


def _targets(root: SysRoot, policy: CpufreqPolicy) -> tuple[int, int, str]:
    """The lowest and highest frequency to set (Hz), and a note on the choice."""
    table = sorted(policy.frequencies_hz or ())
    if table:
        if len(table) > 1 and table[-1] - table[-2] == TURBO_STEP_HZ:
            return (
                table[0],
                table[-2],
                (
                    f"the top entry {format_hz(table[-1])} requests turbo, whose speed varies: "
                    f"the highest nominal one is set"
                ),
            )
        return table[0], table[-1], ""
    base = root.read_int_or_none(f"{policy.path}/base_frequency")
    if base is not None and policy.cpuinfo_min_hz <= base * 1000 <= policy.cpuinfo_max_hz:
        return policy.cpuinfo_min_hz, base * 1000, "highest: the base frequency (above is turbo)"
    return policy.cpuinfo_min_hz, policy.cpuinfo_max_hz, "highest: cpuinfo_max_freq"


@contextlib.contextmanager
def _pinned(root: SysRoot, cpu: int) -> Iterator[str]:
    """Run the calling thread on ``cpu`` (only on the machine's own root); yields a note."""
    if not root.is_real or not hasattr(os, "sched_setaffinity"):
        yield ""
        return
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:
        yield f"not pinned to CPU {cpu} ({exc.strerror}): the load may run elsewhere"
        return
    try:
        yield ""
    finally:
        os.sched_setaffinity(0, before)


@dataclass
class _Effective:
    """The frequency CPU ``cpu`` ran while busy, from the best source this node offers."""

    root: SysRoot
    cpu: int
    policy_path: str
    options: SelfCheckOptions
    start: tuple[float, int, int, int] | None = None
    why_not_msr: str = ""

    def begin(self) -> None:
        path = self.root / f"dev/cpu/{self.cpu}/msr"
        try:
            regs = [self.options.msr_reader(path, r) for r in (TSC, MPERF, APERF)]
        except PermissionError:
            self.why_not_msr = f"{path}: permission denied (root is needed)"
        except FileNotFoundError:
            self.why_not_msr = f"no {path} (load the msr module: modprobe msr)"
        except OSError as exc:
            self.why_not_msr = f"{path}: {exc.strerror or exc}"
        else:
            tsc, mperf, aperf = regs
            self.start = (time.monotonic(), tsc, mperf, aperf)

    def finish(self) -> tuple[int | None, str, list[str]]:
        """(Hz or None, the source used, why better sources were not)."""
        why: list[str] = []
        if self.start is not None:
            hz = self._from_msr(why)
            if hz is not None:
                return hz, "APERF/MPERF", why
        else:
            why.append(self.why_not_msr)
        khz = self.root.read_int_or_none(f"{self.policy_path}/cpuinfo_cur_freq")
        if khz is not None:
            return khz * 1000, "cpuinfo_cur_freq", why
        why.append("no readable cpuinfo_cur_freq")
        mhz = _cpuinfo_mhz(self.root, self.cpu)
        if mhz is not None:
            return round(mhz * 1e6), "/proc/cpuinfo cpu MHz", why
        why.append(f"no 'cpu MHz' for CPU {self.cpu} in /proc/cpuinfo")
        return None, "none", why

    def _from_msr(self, why: list[str]) -> int | None:
        assert self.start is not None
        t0, tsc0, m0, a0 = self.start
        path = self.root / f"dev/cpu/{self.cpu}/msr"
        try:
            tsc1, m1, a1 = (self.options.msr_reader(path, r) for r in (TSC, MPERF, APERF))
        except OSError as exc:
            why.append(f"{path}: {exc.strerror or exc} on the second read")
            return None
        dt = time.monotonic() - t0
        if m1 <= m0 or tsc1 <= tsc0 or dt <= 0:
            why.append("MPERF did not advance (the CPU never left idle)")
            return None
        return round((tsc1 - tsc0) / dt * (a1 - a0) / (m1 - m0))


def _cpuinfo_mhz(root: SysRoot, cpu: int) -> float | None:
    text = root.read_or_none("proc/cpuinfo") or ""
    for block in text.split("\n\n"):
        fields = dict(
            (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in block.splitlines())
        )
        if fields.get("processor") == str(cpu) and "cpu MHz" in fields:
            with contextlib.suppress(ValueError):
                return float(fields["cpu MHz"])
    return None


def _set_and_read(
    root: SysRoot,
    node: NodeSettings,
    policy: CpufreqPolicy,
    label: str,
    hz: int,
    options: SelfCheckOptions,
) -> list[Check]:
    cpu = policy.cpus[0]
    result = node.set_frequency(hz, cpus=policy.cpus)
    want = result.plan.requested_hz or hz
    effective = _Effective(root, cpu, policy.path, options)
    effective.begin()
    options.load(options.hold_s)
    cur_khz = root.read_int_or_none(f"{policy.path}/scaling_cur_freq")
    eff_hz, source, why = effective.finish()
    did = (
        f"set {policy.name} to its {label} frequency {format_hz(want)} via "
        f"{result.plan.method}, kept CPU {cpu} busy {options.hold_s:g} s, read back"
    )
    name = f"cpufreq {policy.name} {label}"
    notes = "; ".join(n for n in result.notes if "scaling_cur_freq reads" not in n)
    details = {"requested_hz": want, "method": result.plan.method, "notes": list(result.notes)}
    out: list[Check] = []
    cur = None if cur_khz is None else cur_khz * 1000
    if cur is not None and options.frequency_ok(want, cur):
        out.append(
            Check.passed(
                f"{name}: scaling_cur_freq",
                did,
                f"reads {format_hz(cur)}",
                {**details, "scaling_cur_freq_hz": cur},
            )
        )
    else:
        shown = "unreadable" if cur is None else format_hz(cur)
        out.append(
            Check.failed(
                f"{name}: scaling_cur_freq",
                did,
                expected=_within(options, want),
                seen=f"scaling_cur_freq {shown}" + (f" ({notes})" if notes else ""),
                details={**details, "scaling_cur_freq_hz": cur},
            )
        )
    edetails = {**details, "effective_hz": eff_hz, "source": source, "unused_sources": why}
    ename = f"{name}: effective frequency"
    if eff_hz is None:
        out.append(
            Check.not_checked(ename, "no source of the effective frequency: " + "; ".join(why), did)
        )
    elif options.frequency_ok(want, eff_hz):
        out.append(Check.passed(ename, did, f"{eff_hz / 1e9:.3f} GHz from {source}", edetails))
    else:
        out.append(
            Check.failed(
                ename,
                did,
                expected=_within(options, want),
                seen=f"{eff_hz / 1e9:.3f} GHz from {source}",
                details=edetails,
            )
        )
    return out


def _within(options: SelfCheckOptions, want: float) -> str:
    margin = max(options.frequency_tolerance * want, options.frequency_floor_hz)
    return f"{format_hz(want)} ± {format_hz(margin)}"


def _policy_settings(root: SysRoot, policy: CpufreqPolicy) -> dict[str, str | None]:
    return {k: v for k, v in read_settings(root).items() if k.startswith(policy.path + "/")}


def check_cpufreq(
    root: SysRoot, node: NodeSettings, control: FrequencyControl, options: SelfCheckOptions
) -> list[Check]:
    """Set the first policy's lowest then highest frequency, read back, restore, compare."""
    assert control.cpufreq is not None
    policy = control.cpufreq.policies[0]
    low, high, note = _targets(root, policy)
    found = _policy_settings(root, policy)
    checks: list[Check] = []
    try:
        with _pinned(root, policy.cpus[0]) as pin_note:
            for label, hz in (("lowest", low), ("highest", high)):
                checks.extend(_set_and_read(root, node, policy, label, hz, options))
        node.restore()
    except Exception as exc:  # restore first, then report
        return [*checks, _raised(f"cpufreq {policy.name}", node, exc)]
    after = _policy_settings(root, policy)
    did = f"restored {policy.name} through the session and read it back"
    extra = "; ".join(n for n in (note, pin_note) if n)
    if after == found:
        observed = f"governor, limits and setspeed as found ({_brief(found)})"
        checks.append(
            Check.passed(
                f"cpufreq {policy.name} restored", did, observed + (f"; {extra}" if extra else "")
            )
        )
    else:
        checks.append(_differs(f"cpufreq {policy.name} restored", did, found, after))
    return checks


def _brief(settings: dict[str, str | None]) -> str:
    return ", ".join(f"{k.rsplit('/', 1)[1]}={v}" for k, v in settings.items())


def _differs(
    name: str, did: str, found: dict[str, str | None], after: dict[str, str | None]
) -> Check:
    changed = {k: (found.get(k), after.get(k)) for k in sorted({*found, *after})}
    changed = {k: v for k, v in changed.items() if v[0] != v[1]}
    return Check.failed(
        name,
        did,
        expected="every setting as found: " + ", ".join(f"{k}={v[0]}" for k, v in changed.items()),
        seen=", ".join(f"{k}={v[1]}" for k, v in changed.items()),
        details={"differences": {k: list(v) for k, v in changed.items()}},
    )


def _raised(name: str, node: NodeSettings, exc: Exception) -> Check:
    """A check that raised midway: restore first, then say so."""
    try:
        node.restore()
        restored = "everything it changed was restored"
    except PlatformError as again:
        restored = f"restoring failed too: {again}"
    return Check.failed(
        name,
        "started the check",
        expected="the check to run to its end",
        seen=f"{type(exc).__name__}: {exc}; {restored}",
    )


# -------------------------------------------------------------------------------- C-states


def check_cstate(root: SysRoot, node: NodeSettings, state: IdleState) -> list[Check]:
    """Disable ``state`` on its CPU, read ``disable`` back, enable it, read back, restore."""
    name = f"cpuidle cpu{state.cpu} {state.name}"
    did = (
        f"disabled {state.name} (state{state.index}) of CPU {state.cpu} through cpuidle, read "
        "its disable file, enabled it again, read it, restored"
    )
    found = root.read_or_none(state.disable_path)
    try:
        node.disable_cstates(names=[state.name], cpus=[state.cpu])
        when_disabled = root.read_or_none(state.disable_path)
        node.enable_cstates(names=[state.name], cpus=[state.cpu])
        when_enabled = root.read_or_none(state.disable_path)
        node.restore()
    except Exception as exc:  # restore first, then report
        return [_raised(name, node, exc)]
    after = root.read_or_none(state.disable_path)
    details = {
        "path": state.disable_path,
        "found": found,
        "after_disable": when_disabled,
        "after_enable": when_enabled,
        "after_restore": after,
    }
    checks: list[Check] = []
    if (when_disabled, when_enabled) == ("1", "0"):
        checks.append(Check.passed(name, did, "disable read 1, then 0", details))
    else:
        checks.append(
            Check.failed(
                name,
                did,
                expected="disable to read 1 after disabling and 0 after enabling",
                seen=f"{when_disabled}, then {when_enabled}",
                details=details,
            )
        )
    rname, rdid = f"{name} restored", f"restored {state.disable_path} and read it back"
    if after == found:
        checks.append(Check.passed(rname, rdid, f"disable reads {after}, as found"))
    else:
        checks.append(
            _differs(rname, rdid, {state.disable_path: found}, {state.disable_path: after})
        )
    return checks
