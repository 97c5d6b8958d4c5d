"""Choosing meters: auto-detection of the best available combination, or explicit names.

Why a single place: every caller (sampler, profiler, CLI) must get the same answer to "what
can this node measure?", and a user who gets an estimate instead of a measurement must be told
why — every meter that was not used is listed with its reason.

The details are in docs/design/measurement.md ("Meters: choosing meters").
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from greenckpt.errors import InvalidValueError
from greenckpt.platform.meters.base import (
    ROLES,
    Meter,
    MeterOption,
    MeterOptions,
    MeterRole,
    MeterUnavailable,
)
from greenckpt.platform.meters.estimator import UtilisationEstimator
from greenckpt.platform.meters.external import ExternalCsvMeter
from greenckpt.platform.meters.ipmi import IpmiMeter
from greenckpt.platform.meters.nvml import NvmlMeter
from greenckpt.platform.meters.perf import PerfPowerMeter
from greenckpt.platform.meters.rapl import RaplMeter
from greenckpt.platform.root import ClosesOnExit, PlatformError, SysRoot

METERS: dict[str, type[Meter]] = {}
"""Every registered meter by its registry name, in registration order (read-only: add and
remove meters with :func:`register_meter` and :func:`unregister_meter`)."""


def register_meter(cls: type[Meter]) -> type[Meter]:
    """Register a meter class under its ``name`` (usable as a class decorator).

    The class declares its :attr:`~Meter.role` (where detection, profiles and the self-check
    use it), its :attr:`~Meter.label` and its :attr:`~Meter.options` (the flags of every
    command that opens meters are built from those with a flag). Raises ValueError for a
    taken name, an unknown role, or an option or flag another meter already declares."""
    name = getattr(cls, "name", None)
    if not (isinstance(cls, type) and issubclass(cls, Meter)):
        raise InvalidValueError(f"{cls!r} is not a Meter subclass")
    if not isinstance(name, str) or not name or name != name.strip().lower() or name == "auto":
        raise InvalidValueError(f"meter name must be a lowercase word other than auto: {name!r}")
    if name in METERS:
        raise InvalidValueError(f"a meter named {name!r} is already registered")
    role = getattr(cls, "role", None)
    if role not in ROLES:
        raise InvalidValueError(
            f"meter {name}: role must be one of {', '.join(ROLES)}, not {role!r}"
        )
    if not isinstance(getattr(cls, "label", None), str):
        raise InvalidValueError(f"meter {name}: declare a label (what it is, in a few words)")
    taken = {(o.name, o.flag): m for m, o in declared_options()}
    for option in cls.options:
        for (key, flag), other in taken.items():
            if option.name == key or (option.flag is not None and option.flag == flag):
                raise InvalidValueError(
                    f"meter {name}: option {option.name} ({option.flag}) is {other}'s already"
                )
    METERS[name] = cls
    return cls


def unregister_meter(name: str) -> type[Meter]:
    """Remove a registered meter; the class removed. KeyError for an unknown name."""
    return METERS.pop(name)


def with_role(role: MeterRole) -> list[str]:
    """The registered meters of ``role``, in order of preference: measured before estimated,
    then in registration order."""
    named = [n for n, cls in METERS.items() if cls.role == role]
    return sorted(named, key=lambda n: METERS[n].source == "estimated")


def declared_options() -> list[tuple[str, MeterOption]]:
    """Every registered meter's declared options, as (meter name, option), in order."""
    return [(n, option) for n, cls in METERS.items() for option in cls.options]


for _builtin in (
    RaplMeter,
    PerfPowerMeter,
    NvmlMeter,
    IpmiMeter,
    ExternalCsvMeter,
    UtilisationEstimator,
):
    register_meter(_builtin)

CPU_CHAIN = tuple(with_role("cpu"))
"""The built-in CPU meters in order of preference; auto-detection uses the first that opens
(of :func:`with_role` ``("cpu")``, which includes meters registered later)."""

ProbeStatus = Literal["selected", "unavailable", "not needed"]


@dataclass(frozen=True)
class Probe:
    """What happened to one meter during selection, and why."""

    name: str
    status: ProbeStatus
    reason: str

    def __str__(self) -> str:
        return f"{self.name}: {self.status} — {self.reason}"


@dataclass
class Selection(ClosesOnExit):
    """The meters chosen (open; close them, or use as a context manager) and every probe."""

    meters: list[Meter] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)

    def report(self) -> str:
        """One line per meter considered: selected (with its description) or why not."""
        return "\n".join(str(p) for p in self.probes)

    @property
    def estimated(self) -> bool:
        """True when any selected figure is an estimate."""
        return any(m.source == "estimated" for m in self.meters)

    def close(self) -> None:
        """Close every selected meter."""
        for m in self.meters:
            m.close()


def valid_names() -> str:
    """The accepted names, for messages."""
    return ", ".join([*METERS, "auto"])


def check_names(names: Sequence[str]) -> list[str]:
    """Names deduplicated in order; ``PlatformError`` (one line) for an unknown one."""
    out: list[str] = []
    for raw in names:
        name = raw.strip().lower()
        if name != "auto" and name not in METERS:
            close = difflib.get_close_matches(name, [*METERS, "auto"], n=2, cutoff=0.6)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise PlatformError(f"unknown meter {raw!r}{hint}; valid meters: {valid_names()}")
        if name not in out:
            out.append(name)
    return out


def probe_meter(
    name: str, root: SysRoot | None = None, options: MeterOptions | None = None
) -> Meter:
    """Open one meter by name or raise MeterUnavailable / PlatformError (unknown name)."""
    (checked,) = check_names([name])
    if checked == "auto":
        raise PlatformError("'auto' selects several meters: use select_meters()")
    return METERS[checked].probe(root or SysRoot.default(), options or MeterOptions())


def _try(sel: Selection, name: str, root: SysRoot, options: MeterOptions) -> Meter | None:
    """Probe one meter; record it as selected, or as unavailable with the reason."""
    try:
        meter = METERS[name].probe(root, options)
    except MeterUnavailable as exc:
        sel.probes.append(Probe(name, "unavailable", exc.reason))
        return None
    sel.meters.append(meter)
    sel.probes.append(Probe(name, "selected", meter.describe()))
    return meter


def _auto(root: SysRoot, options: MeterOptions, have: set[str]) -> Selection:
    """Probe what ``have`` (the meters already named) leaves open, best CPU meter first."""
    sel = Selection()
    chain = with_role("cpu")
    cpu_named = sorted(have & set(chain))
    cpu: Meter | None = None
    for name in chain:
        if name in have:
            continue
        if cpu_named:
            sel.probes.append(Probe(name, "not needed", f"{cpu_named[0]} was named"))
            continue
        if cpu is not None:
            sel.probes.append(Probe(name, "not needed", f"{cpu.name} already covers the CPU"))
            continue
        cpu = _try(sel, name, root, options)
    for name, cls in METERS.items():
        if name in have or cls.role == "cpu":
            continue
        why = cls.not_needed(options)
        if why is not None:
            sel.probes.append(Probe(name, "not needed", why))
            continue
        _try(sel, name, root, options)
    return sel


def select_meters(
    names: Sequence[str] | str | None = None,
    *,
    root: SysRoot | str | None = None,
    options: MeterOptions | None = None,
) -> Selection:
    """Open the meters named (``None`` or ``"auto"``: the best available combination).

    ``names`` may be a sequence or a comma-separated string (``"rapl,ipmi"``). Returns a
    :class:`Selection`; raises PlatformError for an unknown name and MeterUnavailable when an
    explicitly named meter cannot run (after closing whatever was already opened).
    """
    if isinstance(names, str):
        names = [n for n in names.split(",") if n.strip()]
    wanted = check_names(names if names else ["auto"])
    sysroot = root if isinstance(root, SysRoot) else SysRoot.default(root)
    opts = options or MeterOptions()
    explicit = [n for n in wanted if n != "auto"]
    sel = Selection()
    try:
        for name in explicit:
            meter = METERS[name].probe(sysroot, opts)
            sel.meters.append(meter)
            sel.probes.append(Probe(name, "selected", meter.describe()))
        if "auto" in wanted:
            auto = _auto(sysroot, opts, {m.name for m in sel.meters})
            sel.meters.extend(auto.meters)
            sel.probes.extend(auto.probes)
    except BaseException:
        sel.close()
        raise
    return sel
