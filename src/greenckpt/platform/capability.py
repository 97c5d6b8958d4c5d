"""Whether this node's CPU frequency can be controlled: one typed answer for every caller.

Why one place: the profiler's pre-flight, the probe, the runtime's node description and its
notes all ask the same question — cpufreq policies present *and* writable by this process —
and used to answer it each in its own way (one by matching note text). :func:`frequency_control`
reads the tree through a :class:`~greenckpt.platform.root.SysRoot` (a fake one in tests),
changes nothing, never raises, and says why not in :attr:`FrequencyControl.reason`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from greenckpt.platform.cpufreq import CpufreqController, CpufreqInfo
from greenckpt.platform.root import PlatformError, SysRoot

__all__ = ["READ_ONLY", "WRITTEN_ATTRIBUTES", "FrequencyControl", "frequency_control"]

READ_ONLY = "cpufreq is read-only here: root (or write access) is needed"
"""The reason given when cpufreq is present but this process may not write it."""
WRITTEN_ATTRIBUTES: tuple[str, ...] = ("scaling_governor", "scaling_max_freq", "scaling_min_freq")
"""The attributes of every policy that a frequency or governor change writes."""


@dataclass(frozen=True)
class FrequencyControl:
    """Whether the CPU frequency (or governor) can be set on this node, and why not.

    ``available``: cpufreq policies are present and every attribute a change writes is
    writable by this process. ``reason``: why not ("" when available). ``cpufreq``: what was
    detected (None: no cpufreq, or it could not be read); ``unwritable``: the first attribute
    found not writable (None when all are, or nothing was checked). ``governors`` and
    ``frequencies_hz`` are what the first policy offers (empty without cpufreq; frequencies
    empty also for a driver without a table).
    """

    available: bool
    reason: str = ""
    governors: tuple[str, ...] = ()
    frequencies_hz: tuple[int, ...] = ()
    cpufreq: CpufreqInfo | None = None
    unwritable: str | None = None

    @classmethod
    def off(cls, reason: str) -> FrequencyControl:
        """No frequency control, for ``reason`` (e.g. turned off by the caller)."""
        return cls(available=False, reason=reason)

    @property
    def present(self) -> bool:
        """True when cpufreq was detected, writable or not."""
        return self.cpufreq is not None


def _unwritable(root: SysRoot, info: CpufreqInfo) -> str | None:
    """The first attribute a change would write that this process may not (None: all may)."""
    for policy in info.policies:
        for name in WRITTEN_ATTRIBUTES:
            path = root / f"{policy.path}/{name}"
            if not os.access(path, os.W_OK):
                return str(path)
    return None


def frequency_control(root: SysRoot | None = None) -> FrequencyControl:
    """Read (never change) whether this node's CPU frequency can be controlled.

    A node without cpufreq (most VMs), or whose cpufreq files cannot be parsed, has none; so
    has one whose cpufreq files this process may not write (a user without root): a policy
    whose writes would be refused is no better than none.
    """
    chosen = root if root is not None else SysRoot.default()
    try:
        info = CpufreqController(chosen).detect()
    except PlatformError as exc:
        return FrequencyControl.off(str(exc))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return FrequencyControl.off(f"could not be read: {exc}")
    first = info.policies[0]
    unwritable = _unwritable(chosen, info)
    return FrequencyControl(
        available=unwritable is None,
        reason="" if unwritable is None else READ_ONLY,
        governors=first.available_governors,
        frequencies_hz=first.frequencies_hz or (),
        cpufreq=info,
        unwritable=unwritable,
    )
