"""greenckpt.profile — the I/O+power profiler: sweeps, resumable profile files, exports
(its figures and tables: :mod:`greenckpt.report`).

The profile *format* (typed objects, loader) lives in :mod:`greenckpt.optimize.profile_data`, the
layer below, so the optimizer can read what this package writes. A whole profile run — the
checks, the resume, the meters and node session, the sweep, the file — is one call,
:func:`run_profile` (:mod:`greenckpt.profile.run`), which ``greenckpt profile run`` and
``greenckpt demo`` use too.

The names below are imported on first use: the runtime imports one small module of this
package (``power``) and should not pay for the sweep machinery at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from greenckpt.profile.grid import Cell, CpuSetting, SweepError, SweepSpec
    from greenckpt.profile.lever_cells import LeverAxes
    from greenckpt.profile.lever_check import lever_axes
    from greenckpt.profile.progress import LineProgress, ProgressSink
    from greenckpt.profile.run import (
        AdaptiveRequest,
        MeterRequest,
        cpu_settings,
        measure_profile,
        prepare_profile,
        resume_or_refuse,
        run_profile,
    )

_HOME = {
    "Cell": "grid",
    "CpuSetting": "grid",
    "SweepError": "grid",
    "SweepSpec": "grid",
    "LeverAxes": "lever_cells",
    "lever_axes": "lever_check",
    "LineProgress": "progress",
    "ProgressSink": "progress",
    "AdaptiveRequest": "run",
    "MeterRequest": "run",
    "cpu_settings": "run",
    "measure_profile": "run",
    "prepare_profile": "run",
    "resume_or_refuse": "run",
    "run_profile": "run",
}

__all__ = [
    "AdaptiveRequest",
    "Cell",
    "CpuSetting",
    "LeverAxes",
    "LineProgress",
    "MeterRequest",
    "ProgressSink",
    "SweepError",
    "SweepSpec",
    "cpu_settings",
    "lever_axes",
    "measure_profile",
    "prepare_profile",
    "resume_or_refuse",
    "run_profile",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module when the name is first asked for (PEP 562)."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
