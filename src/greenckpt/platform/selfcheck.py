"""``greenckpt probe --check``: exercise every lever and meter of a real node, briefly and safely.

Why: the platform layer has been tested on fake trees only; nothing says that a real node's
cpufreq runs the frequency it accepted, that its C-state flags stick, or that its meters agree.
:func:`run_selfcheck` sets a frequency and toggles a C-state through the same session every
run uses (:class:`~greenckpt.platform.restore.NodeSettings`: originals saved before the first
write, restored on exit, exceptions and SIGINT/SIGTERM/SIGHUP, and by any later greenckpt
command after a SIGKILL), reads every meter twice, then verifies that every setting is as it
was found. A check that cannot be done here (a VM, not root) is listed as not checked, with
why. The record (:class:`SelfCheckRecord`, docs/formats.md) is what a user attaches to a bug.
"""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime

from greenckpt import __version__
from greenckpt.platform.capability import frequency_control
from greenckpt.platform.levers import LeverInfo, node_levers
from greenckpt.platform.probe import _cpu_model
from greenckpt.platform.recovery import pending_state
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.selfcheck_base import (
    FAILED,
    NOT_CHECKED,
    PASSED,
    SELFCHECK_FORMAT,
    SELFCHECK_VERSION,
    Check,
    SelfCheckOptions,
    SelfCheckRecord,
    busy,
    read_msr,
)
from greenckpt.platform.selfcheck_levers import (
    check_cpufreq,
    check_cstate,
    cpufreq_unavailable,
    idle_target,
    read_settings,
)
from greenckpt.platform.selfcheck_meters import check_meters
from greenckpt.platform.selfcheck_power_levers import (
    check_gpu,
    check_gpu_clocks,
    check_power_limit,
    check_uncore,
    read_lever_files,
)

__all__ = [
    "FAILED",
    "NOT_CHECKED",
    "PASSED",
    "SELFCHECK_FORMAT",
    "SELFCHECK_VERSION",
    "Check",
    "SelfCheckOptions",
    "SelfCheckRecord",
    "busy",
    "read_msr",
    "run_selfcheck",
]


def _others(
    root: SysRoot, node: NodeSettings | None, levers: dict[str, LeverInfo], why: str = ""
) -> list[Check]:
    """The uncore, power-limit and GPU checks (each "not checked" without a session: the
    lever's reason, else ``why`` no session could start)."""
    if node is None:
        return [
            Check.not_checked(n, levers[n].reason or why)
            for n in ("uncore frequency", "power limit", "gpu clocks", "gpu power limit")
        ]
    return [
        *check_uncore(root, node, levers["uncore frequency"]),
        *check_power_limit(root, node, levers["power limit"]),
        *check_gpu_clocks(node, levers["gpu clocks"]),
        *check_gpu(node, levers["gpu power limit"]),
    ]


def _levers(root: SysRoot, options: SelfCheckOptions) -> tuple[list[Check], bool]:
    """Every lever's check, in one session; True when a session changed anything."""
    control = frequency_control(root)
    freq_why = cpufreq_unavailable(control)
    state, idle_why = idle_target(root)
    freq_skip = Check.not_checked("cpufreq", freq_why or "")
    idle_skip = Check.not_checked("cpuidle", idle_why)
    levers = {i.name: i for i in node_levers(root)}
    more = any(
        levers[n].present
        for n in ("uncore frequency", "power limit", "gpu clocks", "gpu power limit")
    )
    if freq_why is not None and state is None and not more:
        return [freq_skip, idle_skip, *_others(root, None, levers)], False
    checks: list[Check] = []
    entered = False
    try:
        with NodeSettings(root, options.state_file) as node:
            entered = True
            checks.extend(
                check_cpufreq(root, node, control, options) if freq_why is None else [freq_skip]
            )
            checks.extend(check_cstate(root, node, state) if state is not None else [idle_skip])
            checks.extend(_others(root, node, levers))
    except PlatformError as exc:
        if not entered:  # another session holds the node, or a state file is pending
            why = f"no node-settings session could start: {exc}"
            return [
                Check.not_checked("cpufreq", freq_why or why),
                Check.not_checked("cpuidle", idle_why if state is None else why),
                *_others(root, None, levers, why),
            ], False
        checks.append(
            Check.failed(
                "session restored",
                "ended the node-settings session",
                expected="every setting restored",
                seen=str(exc),
            )
        )
    return checks, True


def _restored(
    root: SysRoot, before: dict[str, str | None], changed: bool, options: SelfCheckOptions
) -> Check:
    """The node's settings, re-read at the end, against what was found at the start."""
    name = "node as found"
    if not before:
        return Check.not_checked(
            name, "no cpufreq, cpuidle, uncore or RAPL settings here: nothing to restore"
        )
    if not changed:
        return Check.not_checked(name, "no setting was changed (no lever could be checked)")
    did = (
        f"re-read {len(before)} settings (governors, limits, setspeed, C-state flags, uncore "
        "and power limits)"
    )
    after = {**read_settings(root), **read_lever_files(root)}
    differs = sorted(k for k in {*before, *after} if before.get(k) != after.get(k))
    pending = pending_state(root, options.state_file)
    if differs:
        return Check.failed(
            name,
            did,
            expected="every setting as found",
            seen="; ".join(f"{k}: {before.get(k)} -> {after.get(k)}" for k in differs),
        )
    if pending is not None:
        return Check.failed(name, did, expected="no state file left", seen=pending.describe())
    return Check.passed(name, did, f"all {len(before)} as found; no state file left")


def _kernel(root: SysRoot) -> str | None:
    release = root.read_or_none("proc/sys/kernel/osrelease")
    if release is None and root.is_real:
        release = os.uname().release
    return release


def run_selfcheck(
    root: SysRoot | None = None, options: SelfCheckOptions | None = None
) -> SelfCheckRecord:
    """Run every check on ``root`` (default ``/``); the node is left as it was found.

    A check that raises is restored first, then reported as failed; an interruption
    (KeyboardInterrupt, a signal) restores through the session and propagates.
    """
    chosen = root if root is not None else SysRoot.default()
    opts = options or SelfCheckOptions()
    created = datetime.now(UTC).isoformat(timespec="seconds")
    before = {**read_settings(chosen), **read_lever_files(chosen)}
    checks, changed = _levers(chosen, opts)
    checks.extend(check_meters(chosen, opts))
    checks.append(_restored(chosen, before, changed, opts))
    model, _, hypervisor = _cpu_model(chosen)
    return SelfCheckRecord(
        host=socket.gethostname(),
        root=str(chosen.path),
        kernel=_kernel(chosen),
        cpu_model=model,
        virtual_machine=hypervisor,
        greenckpt_version=__version__,
        created=created,
        checks=tuple(checks),
    )
