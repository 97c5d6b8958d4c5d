"""What this machine offers greenckpt: meters, every lever, C-states, storage.

Why one report: before profiling or running with the energy-aware runtime, a user needs to know
which of greenckpt's levers and measurements work on this node and, for each one that does not,
why (a virtual machine has no RAPL and no cpufreq; a non-root user cannot read ``energy_uj``).
The levers (CPU and uncore frequency, per-core split, RAPL power limit, GPU clocks and power
limit) come from :func:`~greenckpt.platform.levers.node_levers`, one row each, absent ones too.
:func:`probe` only reads; it never changes a setting.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from greenckpt.platform.capability import frequency_control
from greenckpt.platform.cpuidle import CpuidleController
from greenckpt.platform.levers import node_levers
from greenckpt.platform.meters import MeterOptions, select_meters
from greenckpt.platform.pagereport import read_page_reporting
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.storage import identify_storage


@dataclass(frozen=True)
class Capability:
    """One thing greenckpt may use on this node: whether it is available, and the details or
    the reason why not."""

    name: str
    available: bool
    summary: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProbeReport:
    """Everything :func:`probe` found."""

    host: str
    root: str
    cpu_model: str | None
    logical_cpus: int | None
    hypervisor: bool
    capabilities: tuple[Capability, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def _cpu_model(root: SysRoot) -> tuple[str | None, int | None, bool]:
    text = root.read_or_none("proc/cpuinfo") or ""
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in text.splitlines()
            if line.startswith("model name")
        ),
        None,
    )
    cpus = sum(1 for line in text.splitlines() if line.startswith("processor")) or None
    hypervisor = any(
        line.startswith("flags") and " hypervisor" in line for line in text.splitlines()
    )
    return model, cpus, hypervisor


def _meters(root: SysRoot, options: MeterOptions | None) -> list[Capability]:
    out = []
    with select_meters(root=root, options=options) as sel:
        chosen = {m.name: m for m in sel.meters}
        for p in sel.probes:
            m = chosen.get(p.name)
            details: dict[str, Any] = {"status": p.status, "reason": p.reason}
            if m is not None:
                details.update(domains=list(m.domains), source=m.source)
            out.append(Capability(f"meter:{p.name}", m is not None, p.reason, details))
    return out


def _cpufreq(root: SysRoot) -> Capability:
    control = frequency_control(root)
    info = control.cpufreq
    if info is None:
        return Capability("cpufreq", False, control.reason)
    pol = info.policies[0]
    freqs = pol.frequencies_hz or (pol.cpuinfo_min_hz, pol.cpuinfo_max_hz)
    summary = (
        f"driver {info.driver.name}"
        + (f" ({info.driver.mode})" if info.driver.mode else "")
        + f", {len(info.policies)} policies, governors {', '.join(pol.available_governors)}, "
        + f"{min(freqs) / 1e9:.2f}-{max(freqs) / 1e9:.2f} GHz"
        + (f"; {info.driver.override_note}" if info.driver.override_note else "")
    )
    details = {
        "driver": info.driver.name,
        "mode": info.driver.mode,
        "hwp_active": info.driver.hwp_active,
        "policies": [
            {
                "name": p.name,
                "cpus": list(p.cpus),
                "governor": p.governor,
                "governors": list(p.available_governors),
                "frequencies_hz": list(p.frequencies_hz or ()),
                "range_hz": [p.cpuinfo_min_hz, p.cpuinfo_max_hz],
            }
            for p in info.policies
        ],
        "writable": control.available,
    }
    return Capability("cpufreq", True, summary, details)


def _cpuidle(root: SysRoot) -> Capability:
    try:
        info = CpuidleController(root).detect()
    except PlatformError as exc:
        return Capability("cpuidle", False, str(exc))
    names = sorted({s.name for s in info.states}, key=lambda n: n)
    summary = (
        f"driver {info.driver or 'unknown'}, states {', '.join(names)} on {len(info.cpus)} CPUs"
    )
    details = {
        "driver": info.driver,
        "governor": info.governor,
        "states": [
            {"cpu": s.cpu, "name": s.name, "latency_s": s.latency_s, "disabled": s.disabled}
            for s in info.states
        ],
    }
    return Capability("cpuidle", True, summary, details)


def _storage(root: SysRoot, paths: Sequence[str]) -> list[Capability]:
    out = []
    for path in paths:
        try:
            s = identify_storage(path, root)
        except PlatformError as exc:
            out.append(Capability(f"storage:{path}", False, str(exc)))
            continue
        summary = f"{s.fstype} on {s.source} ({s.kind}), profile key {s.key}"
        details = {
            "key": s.key,
            "fstype": s.fstype,
            "mount_point": s.mount_point,
            "source": s.source,
            "kind": s.kind,
            "network": s.is_network,
            "rotational": s.rotational,
            "model": s.model,
            "synchronous": s.synchronous,
            "notes": list(s.notes),
        }
        out.append(Capability(f"storage:{path}", True, summary, details))
    return out


def _page_reporting(root: SysRoot) -> Capability:
    """Whether freed memory goes back to a VM host: I/O figures then depend on it."""
    info = read_page_reporting(root)
    summary = info.describe()
    if info.present:
        summary += (
            "; page-cache I/O re-faults such memory from the host, so I/O throughput varies "
            "with when it was reported (benchmarks hold it off with --page-reporting)"
        )
    details = {
        "order": info.order,
        "min_free_ms": info.min_free_ms,
        "reported_kib": info.reported_kib,
    }
    return Capability("page-reporting", info.present, summary, details)


def _levers(root: SysRoot) -> list[Capability]:
    """Every lever of :func:`~greenckpt.platform.levers.node_levers`: its range where present,
    why not where absent."""
    return [
        Capability(
            f"lever:{i.name}",
            i.present,
            "; ".join(i.values) if i.present else i.reason,
            {"values": list(i.values), "reason": i.reason},
        )
        for i in node_levers(root)
    ]


def _guarded(name: str, probe_one: Callable[[], list[Capability]]) -> list[Capability]:
    """Run one probe; a malformed file under the root becomes an unavailable capability with
    its reason instead of aborting the whole report."""
    try:
        return probe_one()
    except (PlatformError, OSError, ValueError, UnicodeDecodeError) as exc:
        return [Capability(name, False, f"could not be read: {exc}")]


def probe(
    paths: Sequence[str] = (".",),
    root: SysRoot | None = None,
    *,
    meters: bool = True,
    meter_options: MeterOptions | None = None,
) -> ProbeReport:
    """Read what this node offers; change nothing.

    ``meters=False`` skips opening every meter (a caller that already holds its meters, like
    the profiler, need not query a BMC or initialise NVML a second time). ``meter_options``:
    what the meters are given (an external meter's log, the estimator's TDP), so the probe
    shows the meters as the profiler and the runtime would open them with the same options.
    """
    chosen = root if root is not None else SysRoot.default()
    model, cpus, hypervisor = _cpu_model(chosen)
    caps = [
        *(_guarded("meters", lambda: _meters(chosen, meter_options)) if meters else []),
        *_guarded("cpufreq", lambda: [_cpufreq(chosen)]),
        *_guarded("cpuidle", lambda: [_cpuidle(chosen)]),
        *_guarded("levers", lambda: _levers(chosen)),
        *_guarded("storage", lambda: _storage(chosen, paths)),
        *_guarded("page-reporting", lambda: [_page_reporting(chosen)]),
    ]
    return ProbeReport(
        host=socket.gethostname(),
        root=str(chosen.path),
        cpu_model=model,
        logical_cpus=cpus,
        hypervisor=hypervisor,
        capabilities=tuple(caps),
    )
