"""Machine, CPU, storage and meter metadata recorded in every profile.

Why: a profile is reused by every later run on "the same" machine and storage target; the
runtime must be able to tell that a profile was made elsewhere (another CPU, another
filesystem, another meter) and say so, and a reader must know what the numbers describe. The
metadata come from :func:`greenckpt.platform.probe.probe`, which only reads.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from greenckpt.platform.probe import probe
from greenckpt.platform.root import SysRoot


def tool_version() -> str:
    """``greenckpt <version>`` of the code that made a file."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - stdlib

    try:
        return f"greenckpt {version('greenckpt')}"
    except PackageNotFoundError:
        return "greenckpt (not installed)"


def now_iso() -> str:
    """The current UTC time, to the second, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def collect_metadata(
    path: str, root: SysRoot | None = None, meter_lines: Sequence[str] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(machine, storage)`` objects for a profile of the storage holding ``path``.

    ``machine.cores`` is the number of logical CPUs (the planner's default number of
    application processes); ``meter_lines`` are the meters' one-line descriptions.
    """
    report = probe([path], root, meters=False)  # the caller's meters are already open
    caps = {c.name: c for c in report.capabilities}
    machine: dict[str, Any] = {
        "hostname": report.host,
        "cpu_model": report.cpu_model,
        "logical_cpus": report.logical_cpus,
        "cores": report.logical_cpus or os.cpu_count(),
        "hypervisor": report.hypervisor,
        "kernel": platform.release(),
        "architecture": platform.machine(),
        "meters": list(meter_lines),
    }
    for name in ("cpufreq", "cpuidle"):
        cap = caps.get(name)
        if cap is not None:
            machine[name] = {"available": cap.available, "summary": cap.summary, **cap.details}
    storage: dict[str, Any] = {"path": os.path.abspath(path)}
    cap = caps.get(f"storage:{path}")
    if cap is not None:
        storage.update(cap.details)
        storage["summary"] = cap.summary
    return machine, storage
