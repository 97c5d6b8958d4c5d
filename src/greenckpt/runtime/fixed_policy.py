"""A fixed-settings policy: the same stated frequency, I/O processes and C-states for every phase.

Why: an experiment varies one setting at a time (saito2013's sweep of frequency × I/O
processes, moran2018's P-states and C-states), so a run must be able to apply exactly the
settings asked for instead of a decision; ``greenckpt run --policy fixed --io-processes 2
--frequency 1.4GHz --cstates off`` does, and ``greenckpt study`` uses it for those factors.
What the node cannot do is refused before the run starts (:func:`check_fixed`), and what the
runtime may not apply during a background flush is said in the phase's notes, as for every
policy (runtime/control.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from greenckpt.errors import InvalidValueError
from greenckpt.runtime.fit import fixed_codec_label
from greenckpt.runtime.node import Node
from greenckpt.runtime.settings import PhaseRequest, Settings

__all__ = ["FixedPolicy", "FixedSettings", "check_fixed"]


@dataclass(frozen=True)
class FixedSettings:
    """What ``--policy fixed`` applies (None: leave as found / the default)."""

    io_processes: int | None = None
    frequency_hz: int | None = None
    cstates: bool | None = None

    def label(self) -> str:
        parts = []
        if self.frequency_hz is not None:
            parts.append(f"{self.frequency_hz / 1e9:.2f} GHz")
        if self.io_processes is not None:
            parts.append(f"{self.io_processes} I/O processes")
        if self.cstates is not None:
            parts.append(f"C-states {'on' if self.cstates else 'off'}")
        return ", ".join(parts) or "nothing fixed"


def check_fixed(fixed: FixedSettings, node: Node) -> None:
    """One line (:class:`InvalidValueError`) when ``node`` cannot apply ``fixed``."""
    if fixed.io_processes is not None and fixed.io_processes < 1:
        raise InvalidValueError(f"--io-processes must be >= 1, got {fixed.io_processes}")
    if fixed.frequency_hz is not None:
        if fixed.frequency_hz <= 0:
            raise InvalidValueError(f"--frequency must be > 0, got {fixed.frequency_hz}")
        if not node.frequency_control:
            why = node.frequency_reason or "no cpufreq control"
            raise InvalidValueError(
                f"this node cannot set a CPU frequency ({why}): drop --frequency, or run where "
                "cpufreq is writable"
            )
    if fixed.cstates is not None and not node.cstate_control:
        raise InvalidValueError(
            "this node cannot switch C-states (no writable cpuidle): drop --cstates"
        )


class FixedPolicy:
    """Every I/O phase gets :class:`FixedSettings` (I/O processes default to the node's
    default count when not fixed)."""

    name: str = "fixed"
    deterministic: bool = True
    """The same request gets the same settings (the runtime's native front may repeat them)."""

    def __init__(self, fixed: FixedSettings, *, node: Node, default_io: int) -> None:
        self.fixed = fixed
        self.node = node
        self.default_io = default_io

    def decide(self, request: PhaseRequest) -> Settings:
        """The fixed settings, whatever the phase."""
        n = self.fixed.io_processes or self.default_io
        return Settings(
            io_processes=n,
            source=f"fixed ({self.fixed.label()})",
            frequency_hz=self.fixed.frequency_hz,
            cstates=self.fixed.cstates,
            codec=fixed_codec_label(request),
            notes=("settings fixed by --policy fixed: not a decision",),
        )
