"""CPU frequency control through the kernel's cpufreq sysfs interface.

Why this module exists: greenckpt lowers (or raises) the CPU frequency while a checkpoint is
written or read, because I/O-bound phases often cost less energy at a lower frequency. Doing that
safely on real nodes means dealing with every cpufreq driver's quirks in one place:

* **acpi-cpufreq** (and cppc_cpufreq, amd-pstate passive, intel_pstate passive, which registers as
  ``intel_cpufreq``): the generic governors are offered, usually including ``userspace``, so a
  frequency is requested by switching to ``userspace`` and writing ``scaling_setspeed``.
* **intel_pstate active** (and amd-pstate-epp, amd-pstate guided): the driver or the hardware
  (HWP / CPPC autonomous mode) picks the frequency inside ``[scaling_min_freq,
  scaling_max_freq]``; there is no ``userspace`` governor and no frequency table. The closest
  request is to clamp min = max = f, and the result says that the hardware may still override it.

Rules this module keeps:

* Hertz inside, kHz on the wire. sysfs speaks kHz; every value is converted at this boundary and
  the dataclasses carry ``int`` hertz. Requests are rounded to the kHz (sysfs's resolution).
* Validate everything, then write. :meth:`CpufreqController.plan_frequency` and
  :meth:`CpufreqController.plan_governor` read the tree, check the request against every targeted
  policy and return the list of writes; nothing is written when any policy refuses. That also lets
  :mod:`greenckpt.platform.restore` save exactly the attributes a plan will touch before the first
  write.
* Safe order for limits. Old kernels refuse ``scaling_min_freq > scaling_max_freq`` (EINVAL);
  newer ones accept it as a QoS request but show a clamped value. Writing in the order below is
  valid under both: when the new minimum is above the current maximum, write the maximum first;
  otherwise write the minimum first (see :func:`limit_writes`).
* Read back. After writing, the result reports what the kernel now shows (governor, min, max,
  setspeed, ``scaling_cur_freq``) and notes where that differs from the request.
* Errors are one line (:class:`~greenckpt.platform.root.PlatformError`): a frequency that is not
  offered names the nearest valid ones; an unknown governor names the available ones when there
  are few, else the closest names (:func:`name_choices`); no cpufreq at all says so and why;
  permission denied says root (or write access) is needed; garbage in a sysfs file names the file.

The attribute write helpers (:class:`SysfsWrite`, :func:`write_attributes`) are shared with
:mod:`~greenckpt.platform.cpuidle` and :mod:`~greenckpt.platform.restore`, so every sysfs write in
greenckpt translates OS errors the same way.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import math
import re
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Literal

from greenckpt.errors import InvalidValueError
from greenckpt.platform.root import PlatformError, SysRoot

__all__ = [
    "CPUFREQ_DIR",
    "CPU_DIR",
    "CpufreqController",
    "CpufreqDriver",
    "CpufreqInfo",
    "CpufreqPlan",
    "CpufreqPolicy",
    "CpufreqResult",
    "Method",
    "PolicyState",
    "SysfsWrite",
    "WriteGuard",
    "format_cpus",
    "format_hz",
    "limit_writes",
    "name_choices",
    "parse_cpu_list",
    "write_attributes",
]

CPU_DIR = "sys/devices/system/cpu"
"""Where the kernel lists CPUs (relative to the root)."""
CPUFREQ_DIR = f"{CPU_DIR}/cpufreq"
"""Where cpufreq policies live (``policy0``, ``policy1``, ...)."""
INTEL_PSTATE_STATUS = f"{CPU_DIR}/intel_pstate/status"
AMD_PSTATE_STATUS = f"{CPU_DIR}/amd_pstate/status"

USERSPACE = "userspace"

Method = Literal["auto", "userspace", "clamp"]
"""How to request a frequency: ``userspace`` (governor + ``scaling_setspeed``), ``clamp``
(``scaling_min_freq`` = ``scaling_max_freq``), or ``auto`` (userspace where offered)."""

_POLICY_RE = re.compile(r"policy(\d+)")
_GOVERNOR_RE = re.compile(r"[A-Za-z0-9_\-]+")
_CPU_TOKEN_RE = re.compile(r"(\d+)(?:-(\d+))?")
_FULL_LIST_MAX = 6
"""Up to this many valid names, an error lists them all; beyond, only the closest ones."""


# --------------------------------------------------------------------------------------------
# Shared write helpers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SysfsWrite:
    """One attribute write: ``value`` (no newline) into ``path`` (relative to the root)."""

    path: str
    value: str


WriteGuard = Callable[[SysfsWrite], AbstractContextManager[object]]
"""Makes the context every single write runs in (see :func:`write_attributes`)."""


def write_attributes(
    root: SysRoot,
    writes: Iterable[SysfsWrite],
    *,
    what: str = "the cpufreq/cpuidle files",
    around_each: WriteGuard | None = None,
) -> list[SysfsWrite]:
    """Write ``writes`` in order; return those written. OS errors become one-line PlatformErrors.

    Values are written with a trailing newline, exactly as ``echo VALUE > FILE`` does: the kernel
    accepts it for every attribute used here, and it keeps a fake tree byte-identical to what
    sysfs shows. Each write runs inside ``around_each(write)`` when given: the check that the
    write may still happen and the write itself then form one step that nothing can split (the
    restore session defers signals there, re-checks that no signal has restored it, and handles
    a signal that arrived only once the write is done). On failure the writes already done are
    counted in the error so the caller knows the tree is half-changed.
    """
    done: list[SysfsWrite] = []
    for w in writes:
        with around_each(w) if around_each is not None else contextlib.nullcontext():
            _write_one(root, w, what, done)
            done.append(w)
    return done


def _write_one(root: SysRoot, w: SysfsWrite, what: str, done: Sequence[SysfsWrite]) -> None:
    try:
        root.write(w.path, w.value + "\n")
    except PermissionError as exc:
        raise PlatformError(
            f"cannot write {root / w.path}: permission denied; root (or write access to "
            f"{what}) is needed{_partial(done)}"
        ) from exc
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise PlatformError(
                f"cannot write {root / w.path}: read-only file system (sysfs mounted "
                f"read-only, e.g. in a container){_partial(done)}"
            ) from exc
        reason = exc.strerror or str(exc)
        raise PlatformError(
            f"writing {w.value!r} to {root / w.path} failed: {reason}{_partial(done)}"
        ) from exc


def _partial(done: Sequence[SysfsWrite]) -> str:
    if not done:
        return " (nothing was written)"
    return f" (after {len(done)} earlier write(s) of this request)"


# --------------------------------------------------------------------------------------------
# Small parsers and formatters
# --------------------------------------------------------------------------------------------


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """CPU numbers from ``"0 1 2 3"`` (affected_cpus) or ``"0-3,8"`` (cpulist format).

    Raises ValueError on anything else (a word, a negative number, a reversed range ``3-1``).
    """
    cpus: list[int] = []
    for token in re.split(r"[\s,]+", text.strip()):
        if not token:
            continue
        m = _CPU_TOKEN_RE.fullmatch(token)
        if m is None:
            raise InvalidValueError(f"not a CPU number or range: {token!r}")
        lo = int(m.group(1))
        hi = lo if m.group(2) is None else int(m.group(2))
        if hi < lo:
            raise InvalidValueError(f"reversed CPU range: {token!r}")
        cpus.extend(range(lo, hi + 1))
    return tuple(sorted(set(cpus)))


def name_choices(wanted: str, valid: Sequence[str]) -> str:
    """What to suggest for a name that is not ``valid``: ``"available a, b, c"`` when there are
    few (at most 6), else the closest names (``"nearest C6, C1E (of 12)"``), so an error stays
    one short line on a node with many options."""
    if len(valid) <= _FULL_LIST_MAX:
        return "available " + (", ".join(valid) if valid else "none")
    close = difflib.get_close_matches(wanted, list(valid), n=3, cutoff=0.5)
    if close:
        return f"nearest {', '.join(close)} (of {len(valid)})"
    shown = ", ".join(valid[:_FULL_LIST_MAX])
    return f"none close; {len(valid)} available: {shown}, ..."


def format_cpus(cpus: Iterable[int]) -> str:
    """``(0, 1, 2, 3, 8)`` as ``"0-3,8"``: short, and the format the kernel itself prints."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts) if parts else "none"


def format_hz(hz: float) -> str:
    """Hertz as GHz with at least two decimals and as many as needed to be exact to the kHz.

    ``2.05e9`` gives ``"2.05 GHz"``, ``2.1e9`` gives ``"2.10 GHz"``, ``2_050_500_000`` gives
    ``"2.0505 GHz"``. Unlike :func:`greenckpt.units.format_frequency` (three significant digits),
    two different table entries never print the same, which matters in "nearest" error messages.
    """
    text = f"{hz / 1e9:.9f}".rstrip("0")
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')} GHz"


def _khz_to_hz(khz: int) -> int:
    return khz * 1000


def _read(root: SysRoot, rel: str) -> str:
    try:
        return root.read(rel)
    except FileNotFoundError as exc:
        raise PlatformError(f"missing cpufreq attribute {root / rel}") from exc
    except PermissionError as exc:
        raise PlatformError(
            f"cannot read {root / rel}: permission denied; root (or read access) is needed"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise PlatformError(f"cannot read {root / rel}: {exc}") from exc


def _read_khz(root: SysRoot, rel: str) -> int:
    text = _read(root, rel)
    try:
        value = int(text)
    except ValueError as exc:
        raise PlatformError(f"unexpected content in {root / rel}: {text[:40]!r}") from exc
    return value


def _read_optional_khz(root: SysRoot, rel: str) -> int | None:
    text = root.read_or_none(rel)
    if text is None or not text.isdigit():
        return None
    return int(text)


# --------------------------------------------------------------------------------------------
# Detection
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpufreqDriver:
    """The scaling driver and what it means for frequency requests.

    ``hwp_active`` is True when hardware-managed P-states are in charge (intel_pstate active with
    HWP, amd-pstate-epp active): the hardware picks the frequency inside [min, max].
    ``override_note`` is set whenever a requested frequency may not be held exactly (HWP, the
    intel_pstate internal governor, amd-pstate guided mode) and is copied into every result.
    """

    name: str
    family: str
    """``acpi-cpufreq``, ``intel_pstate``, ``amd-pstate``, ``cppc_cpufreq`` or ``other``."""
    mode: str | None
    """intel_pstate / amd_pstate ``status`` (active, passive, guided) where the driver has one."""
    hwp_active: bool
    override_note: str | None


@dataclass(frozen=True)
class CpufreqPolicy:
    """One cpufreq policy as read from sysfs (all frequencies in hertz)."""

    name: str
    """``policy0``: the kernel names a policy after its first CPU."""
    path: str
    """Directory relative to the root."""
    cpus: tuple[int, ...]
    """``affected_cpus``: the online CPUs this policy controls."""
    related_cpus: tuple[int, ...]
    """``related_cpus``: every CPU of the policy, online or not."""
    driver: str
    governor: str
    available_governors: tuple[str, ...]
    frequencies_hz: tuple[int, ...] | None
    """``scaling_available_frequencies`` ascending, or None when the driver has no table."""
    cpuinfo_min_hz: int
    cpuinfo_max_hz: int
    min_hz: int
    max_hz: int
    cur_hz: int | None
    setspeed_hz: int | None
    """The ``userspace`` governor's target; None under any other governor."""
    has_setspeed: bool
    epp: str | None
    """``energy_performance_preference`` where the driver exposes it (HWP / amd-pstate-epp)."""

    @property
    def offers_userspace(self) -> bool:
        """True when a frequency can be requested through ``userspace`` + ``scaling_setspeed``."""
        return USERSPACE in self.available_governors and self.has_setspeed

    def check_offered(self, hz: float) -> int:
        """The request in kHz when this policy offers ``hz``; else a one-line PlatformError."""
        if not math.isfinite(hz) or hz <= 0:
            raise PlatformError(f"a frequency must be a positive number of hertz, got {hz!r}")
        khz = round(hz / 1000)
        if self.frequencies_hz:
            table_khz = [f // 1000 for f in self.frequencies_hz]
            if khz in table_khz:
                return khz
            below = [f for f in self.frequencies_hz if f < khz * 1000]
            above = [f for f in self.frequencies_hz if f > khz * 1000]
            nearest = ([below[-1]] if below else []) + ([above[0]] if above else [])
            raise PlatformError(
                f"{format_hz(hz)} is not offered by {self.name}: nearest "
                + ", ".join(format_hz(f) for f in nearest)
            )
        lo, hi = self.cpuinfo_min_hz, self.cpuinfo_max_hz
        if not lo <= khz * 1000 <= hi:
            raise PlatformError(
                f"{format_hz(hz)} is not offered by {self.name}: its range is "
                f"{format_hz(lo)} to {format_hz(hi)}"
            )
        return khz


@dataclass(frozen=True)
class CpufreqInfo:
    """Everything detected about the node's cpufreq setup."""

    root: str
    driver: CpufreqDriver
    policies: tuple[CpufreqPolicy, ...]
    """Active policies (at least one CPU online), in policy-number order."""
    inactive_policies: tuple[str, ...]
    """Policies whose CPUs are all offline: their attributes cannot be read or written."""

    def policy(self, name: str) -> CpufreqPolicy:
        """The active policy called ``name``; PlatformError naming the others if none."""
        for p in self.policies:
            if p.name == name:
                return p
        choices = name_choices(name, [p.name for p in self.policies])
        raise PlatformError(f"no active cpufreq policy {name!r}: {choices}")

    @property
    def cpus(self) -> tuple[int, ...]:
        """Every CPU controlled by an active policy."""
        return tuple(sorted({c for p in self.policies for c in p.cpus}))


def _detect_driver(root: SysRoot, driver: str, policy_path: str) -> CpufreqDriver:
    """Classify ``scaling_driver`` and read the pstate drivers' ``status`` files."""
    has_epp = root.read_or_none(f"{policy_path}/energy_performance_preference") is not None
    if driver in ("intel_pstate", "intel_cpufreq"):
        mode = root.read_or_none(INTEL_PSTATE_STATUS) or (
            "active" if driver == "intel_pstate" else "passive"
        )
        if driver == "intel_pstate":  # active mode: the driver's own P-state selection
            hwp = has_epp
            who = "HWP (hardware P-states)" if hwp else "the intel_pstate internal governor"
            note = (
                f"intel_pstate is in active mode: {who} chooses the frequency within "
                "[scaling_min_freq, scaling_max_freq] and may override the requested frequency"
            )
            return CpufreqDriver(driver, "intel_pstate", mode, hwp, note)
        return CpufreqDriver(driver, "intel_pstate", mode, False, None)
    if driver.startswith("amd-pstate"):
        mode = root.read_or_none(AMD_PSTATE_STATUS) or (
            "active" if driver == "amd-pstate-epp" else "passive"
        )
        if driver == "amd-pstate-epp" or mode == "active":
            note = (
                "amd-pstate is in active (EPP) mode: the processor's autonomous selection "
                "chooses the frequency within [scaling_min_freq, scaling_max_freq] and may "
                "override the requested frequency"
            )
            return CpufreqDriver(driver, "amd-pstate", mode, True, note)
        if mode == "guided":
            note = (
                "amd-pstate is in guided mode: the platform may run above the requested "
                "frequency, up to scaling_max_freq"
            )
            return CpufreqDriver(driver, "amd-pstate", mode, False, note)
        return CpufreqDriver(driver, "amd-pstate", mode, False, None)
    if driver in ("acpi-cpufreq", "cppc_cpufreq"):
        return CpufreqDriver(driver, driver, None, False, None)
    return CpufreqDriver(driver, "other", None, False, None)


def _read_policy(root: SysRoot, name: str) -> CpufreqPolicy | None:
    """One policy, or None when it is inactive (all its CPUs offline: reads fail with EBUSY)."""
    path = f"{CPUFREQ_DIR}/{name}"
    governor = root.read_or_none(f"{path}/scaling_governor")
    if governor is None:
        return None
    cpus = _read_cpu_list(root, f"{path}/affected_cpus", _read(root, f"{path}/affected_cpus"))
    related_text = root.read_or_none(f"{path}/related_cpus") or ""
    related = _read_cpu_list(root, f"{path}/related_cpus", related_text) or cpus
    table_text = root.read_or_none(f"{path}/scaling_available_frequencies")
    table: tuple[int, ...] | None = None
    if table_text:
        try:
            table = tuple(sorted({_khz_to_hz(int(t)) for t in table_text.split()}))
        except ValueError as exc:
            raise PlatformError(
                f"unexpected content in {root / path}/scaling_available_frequencies: "
                f"{table_text[:60]!r}"
            ) from exc
    setspeed_text = root.read_or_none(f"{path}/scaling_setspeed")
    return CpufreqPolicy(
        name=name,
        path=path,
        cpus=cpus,
        related_cpus=related,
        driver=_read(root, f"{path}/scaling_driver"),
        governor=governor,
        available_governors=tuple(
            (root.read_or_none(f"{path}/scaling_available_governors") or governor).split()
        ),
        frequencies_hz=table or None,
        cpuinfo_min_hz=_khz_to_hz(_read_khz(root, f"{path}/cpuinfo_min_freq")),
        cpuinfo_max_hz=_khz_to_hz(_read_khz(root, f"{path}/cpuinfo_max_freq")),
        min_hz=_khz_to_hz(_read_khz(root, f"{path}/scaling_min_freq")),
        max_hz=_khz_to_hz(_read_khz(root, f"{path}/scaling_max_freq")),
        cur_hz=_opt_hz(_read_optional_khz(root, f"{path}/scaling_cur_freq")),
        setspeed_hz=_opt_hz(_read_optional_khz(root, f"{path}/scaling_setspeed")),
        has_setspeed=setspeed_text is not None,
        epp=root.read_or_none(f"{path}/energy_performance_preference"),
    )


def _read_cpu_list(root: SysRoot, rel: str, text: str) -> tuple[int, ...]:
    try:
        return parse_cpu_list(text)
    except ValueError as exc:
        raise PlatformError(f"unexpected content in {root / rel}: {text[:40]!r}") from exc


def _opt_hz(khz: int | None) -> int | None:
    return None if khz is None else _khz_to_hz(khz)


def policy_names(root: SysRoot) -> list[str]:
    """``policyN`` directory names under the root, in numeric order (empty when none)."""
    base = root / CPUFREQ_DIR
    try:
        entries = [e.name for e in base.iterdir()]
    except OSError:
        return []
    found = [(int(m.group(1)), n) for n in entries if (m := _POLICY_RE.fullmatch(n))]
    return [n for _, n in sorted(found)]


# --------------------------------------------------------------------------------------------
# Plans and results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpufreqPlan:
    """A validated request: the writes to make, in order, and the policies they touch."""

    action: str
    policies: tuple[CpufreqPolicy, ...]
    """The targeted policies as they were before any write."""
    writes: tuple[SysfsWrite, ...]
    requested_hz: int | None = None
    method: Literal["userspace", "clamp"] | None = None
    governor: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PolicyState:
    """What the kernel shows for one policy after a change (read back, in hertz)."""

    policy: str
    cpus: tuple[int, ...]
    governor: str
    min_hz: int
    max_hz: int
    setspeed_hz: int | None
    cur_hz: int | None


@dataclass(frozen=True)
class CpufreqResult:
    """The outcome of a plan: what was written and what now applies."""

    plan: CpufreqPlan
    written: tuple[SysfsWrite, ...]
    applied: tuple[PolicyState, ...]
    notes: tuple[str, ...]
    """Plan notes plus read-back observations (e.g. the current frequency differs)."""

    @property
    def holds(self) -> bool:
        """True when every policy's current frequency equals the requested one (if any)."""
        want = self.plan.requested_hz
        return want is None or all(s.cur_hz == want for s in self.applied)


def limit_writes(
    path: str, cur_min_khz: int, cur_max_khz: int, new_min_khz: int, new_max_khz: int
) -> list[SysfsWrite]:
    """Writes that move [min, max] to the new limits without ever showing min > max.

    If the new minimum is above the current maximum, the maximum goes first (new max ≥ new min >
    current max ≥ current min, so the write is valid), then the minimum. Otherwise the minimum
    goes first (new min ≤ current max), then the maximum (new max ≥ new min, now the minimum).
    Unchanged limits are not written. Used for requests and for restoration alike.
    """
    if new_min_khz > new_max_khz:
        raise PlatformError(
            f"{path}: minimum {format_hz(new_min_khz * 1000)} above maximum "
            f"{format_hz(new_max_khz * 1000)}"
        )
    wmin = SysfsWrite(f"{path}/scaling_min_freq", str(new_min_khz))
    wmax = SysfsWrite(f"{path}/scaling_max_freq", str(new_max_khz))
    order = [wmax, wmin] if new_min_khz > cur_max_khz else [wmin, wmax]
    current = {wmin.path: cur_min_khz, wmax.path: cur_max_khz}
    return [w for w in order if int(w.value) != current[w.path]]


# --------------------------------------------------------------------------------------------
# Controller
# --------------------------------------------------------------------------------------------


class CpufreqController:
    """Detects the cpufreq setup under a root and plans/applies frequency and governor changes.

    The controller holds no state besides the root: every call reads the tree afresh, so plans
    reflect the current settings (another tool may have changed them in between). It records
    nothing for restoring the node, so it offers no one-call "set": a session changes settings
    through :class:`greenckpt.platform.restore.NodeSettings`, which saves every attribute to its
    state file before :meth:`apply` writes it.
    """

    def __init__(self, root: SysRoot | None = None) -> None:
        self.root = root if root is not None else SysRoot.default()

    # detection -------------------------------------------------------------------------------

    def available(self) -> bool:
        """True when at least one cpufreq policy directory exists under the root."""
        return bool(policy_names(self.root))

    def detect(self) -> CpufreqInfo:
        """Read every policy; PlatformError when there is no cpufreq at all."""
        names = policy_names(self.root)
        if not names:
            raise PlatformError(
                f"cpufreq not available: no cpufreq policies under {self.root / CPUFREQ_DIR} "
                "(virtual machine or driver not loaded)"
            )
        policies: list[CpufreqPolicy] = []
        inactive: list[str] = []
        for name in names:
            policy = _read_policy(self.root, name)
            if policy is None:
                inactive.append(name)
            else:
                policies.append(policy)
        if not policies:
            raise PlatformError(
                f"cpufreq not available: every policy under {self.root / CPUFREQ_DIR} is "
                "inactive (all its CPUs offline)"
            )
        driver = _detect_driver(self.root, policies[0].driver, policies[0].path)
        return CpufreqInfo(str(self.root.path), driver, tuple(policies), tuple(inactive))

    def select(self, info: CpufreqInfo, cpus: Iterable[int] | None) -> list[CpufreqPolicy]:
        """Policies covering ``cpus`` (all active policies when None); refuse unknown CPUs.

        A frequency is set per policy, not per CPU: asking for CPU 2 of a policy that also
        covers CPU 3 changes both (the plan's notes say so).
        """
        if cpus is None:
            return list(info.policies)
        wanted = sorted(set(cpus))
        if not wanted:
            raise PlatformError("no CPUs given")
        chosen: list[CpufreqPolicy] = []
        for cpu in wanted:
            owner = next((p for p in info.policies if cpu in p.cpus), None)
            if owner is None:
                raise PlatformError(
                    f"CPU {cpu} has no active cpufreq policy (offline or nonexistent): "
                    f"policies cover CPUs {format_cpus(info.cpus)}"
                )
            if owner not in chosen:
                chosen.append(owner)
        return sorted(chosen, key=lambda p: int(p.name.removeprefix("policy")))

    # planning --------------------------------------------------------------------------------

    def plan_frequency(
        self, hz: float, cpus: Iterable[int] | None = None, method: Method = "auto"
    ) -> CpufreqPlan:
        """Validate a frequency request on every targeted policy and return its writes.

        ``userspace``: switch to the userspace governor (if needed), widen [min, max] to include
        the frequency if it lies outside (so the kernel does not clamp it), write
        ``scaling_setspeed``. ``clamp``: write min = max = frequency in the safe order. ``auto``
        picks userspace where every targeted policy offers it and HWP is not in charge.
        Raises PlatformError, having written nothing, when any policy refuses.
        """
        if method not in ("auto", "userspace", "clamp"):
            raise PlatformError(f"unknown method {method!r}: use auto, userspace or clamp")
        wanted = None if cpus is None else list(cpus)
        info = self.detect()
        policies = self.select(info, wanted)
        for p in policies:  # every policy validated before the first write is planned
            p.check_offered(hz)
        khz = policies[0].check_offered(hz)
        chosen: Literal["userspace", "clamp"]
        if method == "auto":
            use_userspace = not info.driver.hwp_active and all(p.offers_userspace for p in policies)
            chosen = "userspace" if use_userspace else "clamp"
        elif method == "userspace":
            lacking = next((p for p in policies if not p.offers_userspace), None)
            if lacking is not None:
                raise PlatformError(
                    f"{lacking.name} offers no userspace governor (driver {lacking.driver}): "
                    f"available {', '.join(lacking.available_governors)}; use method 'clamp'"
                )
            chosen = "userspace"
        else:
            chosen = "clamp"

        writes: list[SysfsWrite] = []
        notes: list[str] = []
        for p in policies:
            cur_min, cur_max = p.min_hz // 1000, p.max_hz // 1000
            if chosen == "userspace":
                if p.governor != USERSPACE:
                    writes.append(SysfsWrite(f"{p.path}/scaling_governor", USERSPACE))
                    notes.append(f"{p.name}: governor {p.governor} -> userspace")
                new_min, new_max = min(cur_min, khz), max(cur_max, khz)
                writes.extend(limit_writes(p.path, cur_min, cur_max, new_min, new_max))
                writes.append(SysfsWrite(f"{p.path}/scaling_setspeed", str(khz)))
            else:
                writes.extend(limit_writes(p.path, cur_min, cur_max, khz, khz))
            if wanted is not None:
                extra = sorted(set(p.cpus) - set(wanted))
                if extra:
                    notes.append(
                        f"{p.name} also covers CPUs {format_cpus(extra)}, which change too"
                    )
        # Guided mode only lets the platform go above a userspace target; min = max holds.
        if info.driver.override_note and not (info.driver.mode == "guided" and chosen == "clamp"):
            notes.append(info.driver.override_note)
        return CpufreqPlan(
            action=f"set frequency {format_hz(khz * 1000)} via {chosen}",
            policies=tuple(policies),
            writes=tuple(writes),
            requested_hz=khz * 1000,
            method=chosen,
            notes=tuple(notes),
        )

    def plan_governor(self, governor: str, cpus: Iterable[int] | None = None) -> CpufreqPlan:
        """Validate a governor switch on every targeted policy and return its writes."""
        if not _GOVERNOR_RE.fullmatch(governor):
            raise PlatformError(f"not a governor name: {governor!r}")
        info = self.detect()
        policies = self.select(info, None if cpus is None else list(cpus))
        for p in policies:  # every policy validated before the first write
            if governor not in p.available_governors:
                raise PlatformError(
                    f"governor {governor!r} is not available on {p.name} (driver {p.driver}): "
                    + name_choices(governor, p.available_governors)
                )
        writes = tuple(
            SysfsWrite(f"{p.path}/scaling_governor", governor)
            for p in policies
            if p.governor != governor
        )
        notes: list[str] = []
        if info.driver.override_note:
            notes.append(info.driver.override_note)
        return CpufreqPlan(
            action=f"set governor {governor}",
            policies=tuple(policies),
            writes=writes,
            governor=governor,
            notes=tuple(notes),
        )

    # applying --------------------------------------------------------------------------------

    def apply(self, plan: CpufreqPlan, *, around_each: WriteGuard | None = None) -> CpufreqResult:
        """Write a plan in order (each write inside ``around_each``, see
        :func:`write_attributes`), then read back what applies and note any difference."""
        written = write_attributes(
            self.root, plan.writes, what="the cpufreq files", around_each=around_each
        )
        applied = tuple(self.read_state(p) for p in plan.policies)
        notes = list(plan.notes)
        want = plan.requested_hz
        for s in applied:
            if want is not None and plan.method == "clamp" and (s.min_hz, s.max_hz) != (want, want):
                notes.append(
                    f"{s.policy}: the limits read {format_hz(s.min_hz)} to {format_hz(s.max_hz)}, "
                    f"not {format_hz(want)} (the driver may round to its own steps)"
                )
            if want is not None and plan.method == "userspace" and s.setspeed_hz != want:
                shown = "unsupported" if s.setspeed_hz is None else format_hz(s.setspeed_hz)
                notes.append(f"{s.policy}: scaling_setspeed reads {shown}, not {format_hz(want)}")
            if want is not None and s.cur_hz is not None and s.cur_hz != want:
                notes.append(
                    f"{s.policy}: scaling_cur_freq reads {format_hz(s.cur_hz)}, not the "
                    f"requested {format_hz(want)}"
                )
            if plan.governor is not None and s.governor != plan.governor:
                notes.append(f"{s.policy}: governor reads {s.governor}, not {plan.governor}")
        return CpufreqResult(plan, tuple(written), applied, tuple(notes))

    def read_state(self, policy: CpufreqPolicy) -> PolicyState:
        """Read back governor, limits, setspeed and current frequency of one policy."""
        root, path = self.root, policy.path
        return PolicyState(
            policy=policy.name,
            cpus=policy.cpus,
            governor=_read(root, f"{path}/scaling_governor"),
            min_hz=_khz_to_hz(_read_khz(root, f"{path}/scaling_min_freq")),
            max_hz=_khz_to_hz(_read_khz(root, f"{path}/scaling_max_freq")),
            setspeed_hz=_opt_hz(_read_optional_khz(root, f"{path}/scaling_setspeed")),
            cur_hz=_opt_hz(_read_optional_khz(root, f"{path}/scaling_cur_freq")),
        )
