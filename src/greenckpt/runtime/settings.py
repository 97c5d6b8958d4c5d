"""What the runtime is asked (a phase request) and what it answers (the settings for the phase).

Why two small value types: saito2013 section 5 (Figure 5) splits the runtime into "identify the
I/O" (step 1: operation and path, hence the device) and "look up the profile" (step 2: CPU
frequency and number of I/O processes). :class:`PhaseRequest` is step 1's output and
:class:`Settings` step 2's; the policies in :mod:`greenckpt.runtime.policy` map one to the
other, and the code that applies settings (cpufreq, C-states, I/O parallelism) and accounts
energy only ever sees these two. Both are frozen, so a decision logged in a report is exactly
the decision that was applied.

Units are SI base units (bytes, hertz, seconds, watts, joules), as everywhere inside greenckpt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from greenckpt.errors import InvalidValueError
from greenckpt.io.codec import parse_codec
from greenckpt.optimize.profile_data import POWER_SOURCES, Operation, PowerSource
from greenckpt.optimize.setting import CpuSetting
from greenckpt.optimize.waiting import WAIT_MODES, WaitMode
from greenckpt.phases import IO_KINDS, OVERHEAD_KINDS, RUN_KINDS, IOKind, RunKind

__all__ = [
    "LEVER_FIELDS",
    "NOT_MEASURED",
    "PHASE_KINDS",
    "WAITING_SOURCES",
    "PhaseKind",
    "PhaseRequest",
    "Settings",
    "phase_request",
]

PhaseKind = IOKind
"""The I/O phases a policy decides for (``compute`` is not decided: the application owns it)."""
PHASE_KINDS: tuple[PhaseKind, ...] = IO_KINDS
NOT_MEASURED = "not measured"
"""The source of a waiting power the profile has no figure for (the waiters taken as idle)."""
WAITING_SOURCES: tuple[str, ...] = (*POWER_SOURCES, NOT_MEASURED)
"""Where a prediction's per-rank waiting power came from (:attr:`Settings.waiting_source`)."""


LEVER_FIELDS: tuple[tuple[str, str], ...] = (
    ("waiting_frequency_hz", "per-core split"),
    ("uncore_khz", "uncore frequency"),
    ("power_limit_w", "power limit"),
    ("gpu_clock_mhz", "gpu clocks"),
    ("gpu_power_limit_w", "gpu power limit"),
)
"""``(Settings field, lever name)`` of every control beyond the CPU frequency and C-states, in
the order the runtime applies them (``gpu_memory_mhz`` goes with ``gpu_clock_mhz``). The names
are the platform's (:class:`greenckpt.platform.levers.LeverInfo`), so a report says which lever
failed in the words ``greenckpt probe`` uses."""


@dataclass(frozen=True)
class PhaseRequest:
    """One I/O phase about to start: what it is, where it goes and how many bytes it moves.

    ``kind``: ``checkpoint`` (write a level), ``flush`` (copy a checkpoint to a slower level,
    e.g. L1 to L4: also a write) or ``restart`` (read one back). ``level``: L1..L4, or
    ``None`` when the caller has no levels (plain ``runtime.phase(...)`` use). ``path``: the
    checkpoint directory or file, from which the storage target (and so the profile) is found.
    ``size``: logical bytes this node moves in the phase (before compression, as profiles
    count them).

    ``codec`` is the codec the caller has *fixed*: a label (``zstd``, ``zstd:3``, ``lz4``,
    ``zlib:6``) or ``"none"`` for uncompressed. ``None`` means not fixed: for a checkpoint the
    policy chooses; for a restart it is unknown, and the policy uses the codec it chose for
    this level's checkpoint (a restart must read with the codec the data was written with).
    The library passes the codec recorded in the manifest on restart. The label is stored in
    canonical form (``zstd`` becomes ``zstd:3``), as profiles store it.
    """

    kind: PhaseKind
    path: str
    size: int
    level: int | None = None
    codec: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in PHASE_KINDS:
            raise InvalidValueError(
                f"phase kind must be one of {', '.join(PHASE_KINDS)}, got {self.kind!r}"
            )
        if not isinstance(self.path, str) or not self.path:
            raise InvalidValueError(f"phase path must be a non-empty string, got {self.path!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise InvalidValueError(
                f"phase size must be a whole number of bytes >= 1, got {self.size!r}"
            )
        if self.level is not None and (
            isinstance(self.level, bool) or not isinstance(self.level, int) or self.level < 1
        ):
            raise InvalidValueError(
                f"checkpoint level must be an integer >= 1 or None, got {self.level!r}"
            )
        if self.codec is not None:
            spec = parse_codec(self.codec)  # CodecError (a ValueError) names the valid codecs
            object.__setattr__(self, "codec", "none" if spec is None else spec.label)

    @property
    def op(self) -> Operation:
        """The profile operation of the phase: ``write`` for checkpoint and flush, else ``read``."""
        return "read" if self.kind == "restart" else "write"

    @property
    def fixed_codec(self) -> tuple[bool, str | None]:
        """``(fixed, codec)``: whether the caller fixed the codec, and the profile's codec value
        for it (``None`` for uncompressed)."""
        if self.codec is None:
            return False, None
        return True, None if self.codec == "none" else self.codec


@dataclass(frozen=True)
class Settings:
    """What the runtime applies for one phase, why, and what it expects to happen.

    Controls (``None`` means *leave as found*, never "set to a default"):

    * ``frequency_hz``: a fixed CPU frequency; ``governor``: a stock cpufreq governor; at most
      one of them is set (a profile point is measured under one or the other, or neither when
      the node had no frequency control).
    * ``io_processes``: how many processes move the phase's bytes concurrently (step 4 of
      saito2013's runtime) — always set, because the I/O engine needs a number.
    * ``codec``: canonical codec label, ``None`` for uncompressed.
    * ``cstates``: enable (True) or disable (False) idle states during the phase.
    * ``waiting_frequency_hz``: the per-core split — the cores of the I/O processes run at
      ``frequency_hz``, the cores of the waiting ranks at this (needs ``frequency_hz``).
    * ``uncore_khz``: the uncore (memory/mesh) frequency of every package, in kHz.
    * ``power_limit_w``: the package long-term RAPL power limit, in watts.
    * ``gpu_memory_mhz``/``gpu_clock_mhz``: GPU application clocks (memory, graphics; given
      together); ``gpu_power_limit_w``: the GPUs' power management limit, in watts.

    Provenance: ``source`` says which rule produced the settings (``profile lookup``,
    ``governor baseline performance``, ``defaults (no profile)``, ...), and ``notes`` are human
    statements of every caveat (extrapolation, a profile for another machine, no frequency
    control). Predictions (time, node energy, node power of the phase) are ``None`` when
    nothing backs them; when given, ``power_source`` says whether the power figure behind them
    was measured, estimated or synthetic — never left implicit (DESIGN.md, honesty rules).

    Waiting ranks: ``predicted_power_w`` is the phase's power as the planner counts it — the
    profile point's (its I/O processes busy, other cores idle) plus ``waiting_power_w`` for
    the ``waiting_ranks`` other ranks of the node that wait meanwhile in ``wait_mode``
    (docs/model.md, section 4). ``waiting_source`` says where their per-rank figure came from
    (``measured``, ``estimated``, ``synthetic``, or ``not measured``: taken as idle, 0 W), and
    ``power_source`` is then the sum's (the less certain of the two parts). All four are
    ``None`` when the prediction does not count waiting ranks (none, or a report saved before
    they were counted).
    """

    io_processes: int
    source: str
    frequency_hz: int | None = None
    governor: str | None = None
    codec: str | None = None
    cstates: bool | None = None
    notes: tuple[str, ...] = ()
    predicted_seconds: float | None = None
    predicted_energy_j: float | None = None
    predicted_power_w: float | None = None
    power_source: PowerSource | None = None
    waiting_ranks: int | None = None
    waiting_power_w: float | None = None
    waiting_source: str | None = None
    wait_mode: WaitMode | None = None
    waiting_frequency_hz: int | None = None
    uncore_khz: int | None = None
    power_limit_w: float | None = None
    gpu_clock_mhz: int | None = None
    gpu_memory_mhz: int | None = None
    gpu_power_limit_w: float | None = None
    writer_cpus: tuple[int, ...] = ()
    """Set by the runtime once the per-core split is applied: the CPUs it runs at
    ``frequency_hz``, onto which the library moves each write wave's ranks
    (:mod:`greenckpt.ckpt.writer_cpu`). Empty: no split on the node."""

    def __post_init__(self) -> None:
        if (
            isinstance(self.io_processes, bool)
            or not isinstance(self.io_processes, int)
            or self.io_processes < 1
        ):
            raise InvalidValueError(
                f"io_processes must be an integer >= 1, got {self.io_processes!r}"
            )
        if self.frequency_hz is not None and self.governor is not None:
            raise InvalidValueError(
                "give at most one of frequency_hz (a fixed CPU frequency) and governor"
            )
        if self.frequency_hz is not None and self.frequency_hz <= 0:
            raise InvalidValueError(f"frequency_hz must be > 0, got {self.frequency_hz!r}")
        predictions = (self.predicted_seconds, self.predicted_energy_j, self.predicted_power_w)
        for name, value in zip(
            ("predicted_seconds", "predicted_energy_j", "predicted_power_w"),
            predictions,
            strict=True,
        ):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise InvalidValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.power_source is not None and self.power_source not in POWER_SOURCES:
            raise InvalidValueError(
                f"power_source must be one of {', '.join(POWER_SOURCES)}, got {self.power_source!r}"
            )
        has_power = self.predicted_energy_j is not None or self.predicted_power_w is not None
        if has_power and self.power_source is None:
            raise InvalidValueError("a predicted energy or power needs its power_source")
        self._check_waiting()
        self._check_levers()

    def _check_levers(self) -> None:
        """Refuse lever values that cannot be (the hardware's own range is the platform's
        to check when the lever is applied)."""
        for name in ("waiting_frequency_hz", "uncore_khz", "gpu_clock_mhz", "gpu_memory_mhz"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise InvalidValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("power_limit_w", "gpu_power_limit_w"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (math.isfinite(value) and value > 0)
            ):
                raise InvalidValueError(
                    f"{name} must be a finite number of watts > 0, got {value!r}"
                )
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in self.writer_cpus):
            raise InvalidValueError(
                f"writer_cpus must be CPU numbers >= 0, got {list(self.writer_cpus)!r:.80}"
            )
        if self.waiting_frequency_hz is not None and self.frequency_hz is None:
            raise InvalidValueError(
                "waiting_frequency_hz (the waiting ranks' cores) needs frequency_hz (the I/O "
                "processes' cores): the per-core split sets both"
            )
        if (self.gpu_clock_mhz is None) != (self.gpu_memory_mhz is None):
            raise InvalidValueError(
                "give gpu_memory_mhz and gpu_clock_mhz together (GPU application clocks are "
                f"set as a pair), got memory {self.gpu_memory_mhz!r}, graphics "
                f"{self.gpu_clock_mhz!r}"
            )

    def _check_waiting(self) -> None:
        """Refuse waiting fields out of range, or a waiting power without its source."""
        ranks = self.waiting_ranks
        if ranks is not None and (
            isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 0
        ):
            raise InvalidValueError(f"waiting_ranks must be an integer >= 0, got {ranks!r}")
        watts = self.waiting_power_w
        if watts is not None and not (math.isfinite(watts) and watts >= 0):
            raise InvalidValueError(f"waiting_power_w must be a finite number >= 0, got {watts!r}")
        if self.waiting_source is not None and self.waiting_source not in WAITING_SOURCES:
            raise InvalidValueError(
                f"waiting_source must be one of {', '.join(WAITING_SOURCES)}, got "
                f"{self.waiting_source!r}"
            )
        if self.wait_mode is not None and self.wait_mode not in WAIT_MODES:
            raise InvalidValueError(
                f"wait_mode must be one of {', '.join(WAIT_MODES)}, got {self.wait_mode!r}"
            )
        if watts is not None and self.waiting_source is None:
            raise InvalidValueError("a waiting power needs its waiting_source")

    @property
    def cpu_setting(self) -> CpuSetting:
        """The decided CPU setting as the package's one setting type (the profile's points and
        the profiler's sweep use the same, so a decision can be matched to the point behind it
        by :attr:`CpuSetting.key`)."""
        return CpuSetting.of(self.frequency_hz, self.governor)

    @property
    def controls_frequency(self) -> bool:
        """True when the phase changes the CPU frequency or governor."""
        return self.frequency_hz is not None or self.governor is not None

    @property
    def controls_node(self) -> bool:
        """True when the phase changes anything on the node (CPU, C-states or a lever)."""
        return self.controls_frequency or self.cstates is not None or bool(self.levers)

    @property
    def levers(self) -> dict[str, str]:
        """The levers beyond the CPU frequency and C-states this phase sets, lever name →
        value in words (``{"uncore frequency": "1.40 GHz"}``); empty when all are as found."""
        out: dict[str, str] = {}
        if self.waiting_frequency_hz is not None and self.frequency_hz is not None:
            out["per-core split"] = (
                f"I/O cores {self.frequency_hz / 1e9:.2f} GHz, waiting cores "
                f"{self.waiting_frequency_hz / 1e9:.2f} GHz"
            )
        if self.uncore_khz is not None:
            out["uncore frequency"] = f"{self.uncore_khz / 1e6:.2f} GHz"
        if self.power_limit_w is not None:
            out["power limit"] = f"package {self.power_limit_w:g} W"
        if self.gpu_clock_mhz is not None:
            out["gpu clocks"] = (
                f"memory {self.gpu_memory_mhz} MHz, graphics {self.gpu_clock_mhz} MHz"
            )
        if self.gpu_power_limit_w is not None:
            out["gpu power limit"] = f"{self.gpu_power_limit_w:g} W"
        return out

    def without_lever(self, name: str) -> Settings:
        """These settings with lever ``name`` (a :data:`LEVER_FIELDS` name) left as found."""
        if name == "per-core split":
            return replace(self, waiting_frequency_hz=None, writer_cpus=())
        if name == "gpu clocks":
            return replace(self, gpu_clock_mhz=None, gpu_memory_mhz=None)
        if name == "uncore frequency":
            return replace(self, uncore_khz=None)
        if name == "power limit":
            return replace(self, power_limit_w=None)
        if name == "gpu power limit":
            return replace(self, gpu_power_limit_w=None)
        raise InvalidValueError(f"unknown lever {name!r}")

    def without_levers(self) -> Settings:
        """These settings with every lever beyond the CPU and C-states left as found."""
        return replace(
            self,
            waiting_frequency_hz=None,
            writer_cpus=(),
            uncore_khz=None,
            power_limit_w=None,
            gpu_clock_mhz=None,
            gpu_memory_mhz=None,
            gpu_power_limit_w=None,
        )

    @property
    def label(self) -> str:
        """One line for logs and reports, e.g. ``1.40 GHz, 2 I/O processes, uncompressed``
        (then each lever set, e.g. ``uncore frequency 1.40 GHz``)."""
        if self.governor is not None:
            cpu = f"governor {self.governor}"
        elif self.frequency_hz is not None:
            cpu = f"{self.frequency_hz / 1e9:.2f} GHz"
        else:
            cpu = "frequency as found"
        parts = [cpu, f"{self.io_processes} I/O processes", self.codec or "uncompressed"]
        if self.cstates is not None:
            parts.append("C-states " + ("on" if self.cstates else "off"))
        parts.extend(f"{name} {value}" for name, value in self.levers.items())
        return ", ".join(parts)


def phase_request(
    kind: RunKind, path: str | None, size: int | None, level: int | None, codec: str | None
) -> PhaseRequest | None:
    """The request of an I/O phase about to begin (None for ``compute``/``rework``); refuses
    an unknown kind, ``lost``, and an I/O phase without its path or size. A size of ``None``
    (the notifier could not know it) is planned as 1 byte, the smallest phase: the settings
    then follow the phase's kind and storage alone, and the record says the size is unknown."""
    if kind not in RUN_KINDS:
        raise InvalidValueError(f"phase kind must be one of {', '.join(RUN_KINDS)}, got {kind!r}")
    if kind in OVERHEAD_KINDS:
        raise InvalidValueError(
            f"{kind} is not a phase to begin: the runtime accounts it itself around the "
            "application (Runtime.start(application=False), application_started/_ended)"
        )
    if kind == "lost":
        raise InvalidValueError(
            "lost is not a phase to begin: the runtime accounts the work lost to a failure "
            "itself when the restart begins; begin restart (and rework after it) instead"
        )
    if kind not in PHASE_KINDS:
        return None
    if size is None:
        size = 1
    if path is None or size < 1:
        raise InvalidValueError(
            f"a {kind} phase needs the path it uses and its size in bytes (>= 1), "
            f"got path={path!r}, size={size!r}"
        )
    return PhaseRequest(kind, path, size, level=level, codec=codec)
