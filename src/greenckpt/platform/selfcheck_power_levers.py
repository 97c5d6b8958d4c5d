"""Self-check of the levers beyond the core clock: uncore frequency, RAPL power limit, GPU.

Why: like the CPU frequency (:mod:`~greenckpt.platform.selfcheck_levers`), these levers are
tested on fake trees and a fake NVML only, and a real node may accept a write and do something
else (firmware that owns the uncore, a BMC that owns the power limit, a GPU that refuses
application clocks). So each present lever is moved through the session every run uses
(:class:`~greenckpt.platform.restore.NodeSettings`: originals saved first, restored on exit,
signals and after SIGKILL), read back, restored, and read again; an absent one is "not
checked" with the reason :func:`~greenckpt.platform.levers.node_levers` gives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from greenckpt.platform.lever_state import gpu_module
from greenckpt.platform.levers import LeverInfo
from greenckpt.platform.powercap import detect_power_zones
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.selfcheck_base import Check
from greenckpt.platform.uncore import detect_uncore

__all__ = [
    "check_gpu",
    "check_gpu_clocks",
    "check_power_limit",
    "check_uncore",
    "read_lever_files",
]


def read_lever_files(root: SysRoot) -> dict[str, str | None]:
    """Every uncore limit and RAPL limit/enabled file a session may change, by path (for
    "the node is as it was found"); empty where the node has neither."""
    out: dict[str, str | None] = {}
    with contextlib.suppress(PlatformError):
        for d in detect_uncore(root):
            for attr in ("min_freq_khz", "max_freq_khz"):
                out[f"{d.path}/{attr}"] = root.read_or_none(f"{d.path}/{attr}")
    for z in detect_power_zones(root):
        if z.constraint is not None:
            out[z.limit_path] = root.read_or_none(z.limit_path)
        if z.enabled is not None:
            out[f"{z.path}/enabled"] = root.read_or_none(f"{z.path}/enabled")
    return out


def _restored(
    name: str, node: NodeSettings, found: Mapping[str, Any], read: Callable[[], Mapping[str, Any]]
) -> Check:
    """Restore through the session, read again, compare with what was found."""
    did = f"restored the {name} through the session and read it back"
    try:
        node.restore()
    except PlatformError as exc:
        return Check.failed(
            f"{name} restored", did, expected="every setting restored", seen=str(exc)
        )
    after = read()
    differs = sorted(k for k in {*found, *after} if found.get(k) != after.get(k))
    if differs:
        return Check.failed(
            f"{name} restored",
            did,
            expected="every setting as found",
            seen="; ".join(f"{k}: {found.get(k)} -> {after.get(k)}" for k in differs),
        )
    return Check.passed(f"{name} restored", did, f"all {len(found)} settings as found")


def _raised(name: str, node: NodeSettings, exc: Exception) -> Check:
    try:
        node.restore()
        restored = "everything it changed was restored"
    except PlatformError as again:
        restored = f"restoring failed too: {again}"
    return Check.failed(
        name, "started the check", expected="the check to run to its end", seen=f"{exc}; {restored}"
    )


def check_uncore(root: SysRoot, node: NodeSettings, info: LeverInfo) -> list[Check]:
    """Pin every uncore domain at its lowest, then highest frequency; read back; restore."""
    name = "uncore frequency"
    if not info.present:
        return [Check.not_checked(name, info.reason)]
    domains = detect_uncore(root)
    low = max(d.initial_min_khz for d in domains)
    high = min(d.initial_max_khz for d in domains)
    found = read_lever_files(root)
    checks: list[Check] = []
    try:
        for label, khz in (("lowest", low), ("highest", high)):
            result = node.set_uncore(khz)
            seen = {(d.min_khz, d.max_khz) for d in detect_uncore(root)}
            did = f"pinned {len(domains)} uncore domain(s) at the {label} {khz} kHz, read back"
            if seen == {(khz, khz)}:
                checks.append(Check.passed(f"{name} {label}", did, "min and max read back as set"))
            else:
                checks.append(
                    Check.failed(
                        f"{name} {label}",
                        did,
                        expected=f"min_freq_khz = max_freq_khz = {khz}",
                        seen=f"{sorted(seen)} ({'; '.join(result.notes)})",
                    )
                )
    except Exception as exc:  # restore first, then report
        return [*checks, _raised(name, node, exc)]
    return [*checks, _restored(name, node, found, lambda: read_lever_files(root))]


def check_power_limit(root: SysRoot, node: NodeSettings, info: LeverInfo) -> list[Check]:
    """Lower every package zone's long-term limit a little (90 % of what is in force, or of
    the maximum), read it back, restore."""
    name = "power limit package"
    if not info.present:
        return [Check.not_checked("power limit", info.reason)]
    zones = [z for z in detect_power_zones(root) if z.domain == "package"]
    top = min((z.limit_uw or z.max_power_uw or 0) for z in zones)
    top = min(top, *(z.max_power_uw or 0 for z in zones))
    watts = round(0.9 * top / 1e6, 1)
    found = read_lever_files(root)
    did = f"set the long-term limit of {len(zones)} package zone(s) to {watts:g} W, read back"
    try:
        result = node.set_power_limit(watts)
        seen = {z.limit_uw for z in detect_power_zones(root) if z.domain == "package"}
    except Exception as exc:  # restore first, then report
        return [_raised(name, node, exc)]
    want = round(watts * 1e6)
    if seen == {want}:
        check = Check.passed(name, did, f"constraint power_limit_uw reads {want}")
    else:
        check = Check.failed(
            name, did, expected=f"{want} uW", seen=f"{sorted(map(str, seen))} {result.notes}"
        )
    return [check, _restored("power limit", node, found, lambda: read_lever_files(root))]


def _gpu_check(
    node: NodeSettings,
    info: LeverInfo,
    name: str,
    target: Callable[[Any], Any],
    apply: Callable[[Any], object],
    read: Callable[[Mapping[str, Any]], Any],
) -> tuple[list[Check], Any, Any, int]:
    """Move one GPU lever through the session: ``target(gpus)`` the value to set (None: not
    checked), ``apply(value)`` sets it, ``read(entry)`` reads it back from a GPU's originals
    entry. Returns (checks so far — empty unless the lever ended early —, the value, what
    every GPU read back by UUID, the number of GPUs)."""
    module = gpu_module()
    if not info.present or module is None:
        why = info.reason or "GPU lever module not available"
        return [Check.not_checked(name, why)], None, None, 0
    originals: Callable[[], dict[str, Any]] = module.gpu_originals
    try:
        with module.Nvml.open() as nvml:
            gpus = module.detect_gpus(nvml)
        value = target(gpus)
        if value is None:
            return [Check.not_checked(name, "the GPUs share no value to set")], None, None, 0
        found = originals()
        apply(value)
        seen = {uuid: read(g) for uuid, g in originals().items()}
    except Exception as exc:  # restore first, then report
        return [_raised(name, node, exc)], None, None, 0
    restored = _restored(name, node, found, originals)
    return [restored], value, seen, len(gpus)


def check_gpu(node: NodeSettings, info: LeverInfo) -> list[Check]:
    """Set every GPU's power limit to the lowest all accept, read back through NVML, restore
    (the application clocks: :func:`check_gpu_clocks`)."""
    name = "gpu power limit"
    checks, low_mw, seen, count = _gpu_check(
        node,
        info,
        name,
        lambda gpus: max(g.power_range_mw[0] for g in gpus),
        lambda mw: node.set_gpu_power_limit(mw / 1000),
        lambda g: g.get("power_limit_mw"),
    )
    if seen is None:
        return checks
    did = f"set {count} GPU(s) to the lowest common power limit {low_mw / 1000:g} W, read back"
    if set(seen.values()) == {low_mw}:
        check = Check.passed(name, did, f"every GPU reads {low_mw} mW")
    else:
        check = Check.failed(name, did, expected=f"{low_mw} mW on every GPU", seen=str(seen))
    return [check, *checks]


def _lowest_common_clocks(gpus: Any) -> tuple[int, int] | None:
    """The lowest (memory, graphics) application-clock pair every GPU supports, or None."""
    pairs = set.intersection(*({(m, g) for m, gs in x.clocks.items() for g in gs} for x in gpus))
    return min(pairs) if pairs else None


def check_gpu_clocks(node: NodeSettings, info: LeverInfo) -> list[Check]:
    """Set every GPU's application clocks to the lowest pair all support, read them back
    through NVML, restore (a GPU whose clocks were at their defaults is reset to them)."""
    name = "gpu clocks"
    checks, pair, seen, count = _gpu_check(
        node,
        info,
        name,
        _lowest_common_clocks,
        lambda p: node.set_gpu_clocks(*p),
        lambda g: (g.get("memory_mhz"), g.get("graphics_mhz")),
    )
    if seen is None:
        return checks
    memory, graphics = pair
    did = (
        f"set {count} GPU(s) to the lowest common application clocks, memory {memory} MHz "
        f"and graphics {graphics} MHz, read back"
    )
    if set(seen.values()) == {pair}:
        check = Check.passed(name, did, f"every GPU reads {memory}:{graphics} MHz")
    else:
        check = Check.failed(name, did, expected=f"{memory}:{graphics} MHz", seen=str(seen))
    return [check, *checks]
