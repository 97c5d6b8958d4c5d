"""A fixed-settings policy: the same stated frequency, I/O processes and C-states for every phase.

Why: an experiment varies one setting at a time (saito2013's sweep of frequency × I/O
processes, moran2018's P-states and C-states), so a run must be able to apply exactly the
settings asked for instead of a decision; ``greenckpt run --policy fixed --io-processes 2
--frequency 1.4GHz --cstates off`` does, and ``greenckpt study`` uses it for those factors.
What the node cannot do is refused before the run starts (:func:`check_fixed`, and for the
levers beyond the core clock — ``--uncore``, ``--power-limit``, ``--waiting-frequency``,
``--gpu-clocks``, ``--gpu-power-limit`` — :func:`check_fixed_levers`, which asks the platform
layer, reading only), and what the runtime may not apply during a background flush is said in
the phase's notes, as for every policy (runtime/control.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from greenckpt.errors import InvalidValueError
from greenckpt.platform import gpu
from greenckpt.platform.levers import node_levers
from greenckpt.platform.nvml import Nvml, NvmlError
from greenckpt.platform.powercap import plan_power_limit
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.uncore import plan_uncore
from greenckpt.runtime.fit import fixed_codec_label
from greenckpt.runtime.node import Node
from greenckpt.runtime.settings import PhaseRequest, Settings

__all__ = ["FixedPolicy", "FixedSettings", "absent_levers", "check_fixed", "check_fixed_levers"]


@dataclass(frozen=True)
class FixedSettings:
    """What ``--policy fixed`` applies (None: leave as found / the default)."""

    io_processes: int | None = None
    frequency_hz: int | None = None
    cstates: bool | None = None
    waiting_frequency_hz: int | None = None
    uncore_khz: int | None = None
    power_limit_w: float | None = None
    gpu_memory_mhz: int | None = None
    gpu_clock_mhz: int | None = None
    gpu_power_limit_w: float | None = None

    def label(self) -> str:
        parts = []
        if self.frequency_hz is not None:
            parts.append(f"{self.frequency_hz / 1e9:.2f} GHz")
        if self.io_processes is not None:
            parts.append(f"{self.io_processes} I/O processes")
        if self.cstates is not None:
            parts.append(f"C-states {'on' if self.cstates else 'off'}")
        if self.waiting_frequency_hz is not None:
            parts.append(f"waiting cores {self.waiting_frequency_hz / 1e9:.2f} GHz")
        if self.uncore_khz is not None:
            parts.append(f"uncore {self.uncore_khz / 1e6:.2f} GHz")
        if self.power_limit_w is not None:
            parts.append(f"package limit {self.power_limit_w:g} W")
        if self.gpu_clock_mhz is not None:
            parts.append(f"GPU clocks {self.gpu_memory_mhz}:{self.gpu_clock_mhz} MHz")
        if self.gpu_power_limit_w is not None:
            parts.append(f"GPU limit {self.gpu_power_limit_w:g} W")
        return ", ".join(parts) or "nothing fixed"

    @property
    def levers(self) -> dict[str, str]:
        """The levers beyond the core clock this fixes, lever name → the flag that set it."""
        flags = {
            "per-core split": ("--waiting-frequency", self.waiting_frequency_hz),
            "uncore frequency": ("--uncore", self.uncore_khz),
            "power limit": ("--power-limit", self.power_limit_w),
            "gpu clocks": ("--gpu-clocks", self.gpu_clock_mhz),
            "gpu power limit": ("--gpu-power-limit", self.gpu_power_limit_w),
        }
        return {name: flag for name, (flag, value) in flags.items() if value is not None}


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
    if fixed.waiting_frequency_hz is not None and fixed.frequency_hz is None:
        raise InvalidValueError(
            "--waiting-frequency (the waiting ranks' cores) needs --frequency (the I/O "
            "processes' cores): the per-core split sets both"
        )
    if (fixed.gpu_clock_mhz is None) != (fixed.gpu_memory_mhz is None):
        raise InvalidValueError("--gpu-clocks takes MEMORY:GRAPHICS in MHz, e.g. 877:1380")


def absent_levers(names: Iterable[str], root: SysRoot | None = None) -> dict[str, str]:
    """Of the levers ``names`` (``greenckpt probe``'s names), those this node (``root``,
    default: ``$GREENCKPT_SYSROOT`` or ``/``) lacks, with the platform's reason (reads only)."""
    wanted = set(names)
    if not wanted:
        return {}
    chosen = root if root is not None else SysRoot.default()
    return {i.name: i.reason for i in node_levers(chosen) if i.name in wanted and not i.present}


def check_fixed_levers(fixed: FixedSettings, root: SysRoot) -> None:
    """One line (:class:`InvalidValueError`) when the node under ``root`` lacks a lever
    ``fixed`` sets (with the platform's reason) or refuses its value (outside the range the
    hardware reports, GPU clocks no pair every GPU supports); reads only, so nothing is
    applied on a refusal."""
    wanted = fixed.levers
    for name, reason in absent_levers(wanted, root).items():
        raise InvalidValueError(f"{wanted[name]}: this node has no {name} control ({reason})")
    try:
        if fixed.uncore_khz is not None:
            plan_uncore(root, fixed.uncore_khz)
        if fixed.power_limit_w is not None:
            plan_power_limit(root, fixed.power_limit_w)
        if fixed.gpu_clock_mhz is not None or fixed.gpu_power_limit_w is not None:
            _check_gpu(fixed)
    except PlatformError as exc:
        raise InvalidValueError(str(exc)) from None


def _check_gpu(fixed: FixedSettings) -> None:
    """The GPU values against what every GPU reports (NVML read once; nothing written)."""
    try:
        with Nvml.open() as nvml:
            gpus = gpu.detect_gpus(nvml)
    except NvmlError as exc:
        raise InvalidValueError(f"NVML could not describe the GPUs: {exc}") from None
    if fixed.gpu_memory_mhz is not None and fixed.gpu_clock_mhz is not None:
        gpu.check_gpu_clocks(gpus, fixed.gpu_memory_mhz, fixed.gpu_clock_mhz)
    if fixed.gpu_power_limit_w is not None:
        gpu.check_gpu_power_limit(gpus, fixed.gpu_power_limit_w)


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
            waiting_frequency_hz=self.fixed.waiting_frequency_hz,
            uncore_khz=self.fixed.uncore_khz,
            power_limit_w=self.fixed.power_limit_w,
            gpu_clock_mhz=self.fixed.gpu_clock_mhz,
            gpu_memory_mhz=self.fixed.gpu_memory_mhz,
            gpu_power_limit_w=self.fixed.gpu_power_limit_w,
        )
