"""The policies that need no profile lookup: stated defaults and the stock-governor baselines.

Why: a run without a usable profile must still get a stated, sensible answer
(:class:`DefaultPolicy`), and the profile lookup's saving is only worth what a run under the
stock cpufreq governors measures (:class:`GovernorPolicy`, the measured counterpart of the
planner's modelled baselines; mills2013 section 3). See docs/design/runtime.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from greenckpt.ckpt.wait import polite
from greenckpt.errors import InvalidValueError
from greenckpt.optimize.planner import BASELINES, app_processes, baseline_point
from greenckpt.optimize.profile_data import Profile
from greenckpt.optimize.waiting import WaitingLookup, WaitMode
from greenckpt.platform.capability import FrequencyControl
from greenckpt.runtime.fit import fixed_codec_label, machine_fit, predictions, storage_fit
from greenckpt.runtime.node import Node, frequency_note
from greenckpt.runtime.settings import PhaseRequest, Settings

__all__ = [
    "DEFAULT_IO_PROCESSES",
    "GOVERNOR_POLICIES",
    "DefaultPolicy",
    "GovernorPolicy",
    "decided_frequency",
]

GOVERNOR_POLICIES: tuple[str, ...] = BASELINES
"""The governor baselines a run can be compared under: exactly those the planner models."""
DEFAULT_IO_PROCESSES = 4
"""I/O processes used without a profile (capped at the node's CPU count); see
:class:`DefaultPolicy` for why."""


def decided_frequency(node: Node, frequency_control: bool | None) -> FrequencyControl:
    """The frequency-control answer a policy decides under: the node's (``None``), or the
    caller's (True: assume control; False: turned off, which every decision then says)."""
    if frequency_control is None:
        return node.frequency
    if frequency_control:
        return FrequencyControl(available=True, governors=node.governors)
    return FrequencyControl.off("frequency control turned off")


class DefaultPolicy:
    """Settings without a (usable) profile: frequency and C-states left as found, codec as
    fixed by the caller (else uncompressed), and ``min(4, CPUs)`` I/O processes.

    Why four: saito2013's measurements (section 4, Figures 1-4) show throughput peaking at a
    few concurrent processes on flash and falling beyond about 16, while power rises with
    every process; writing with all 48 application processes was the worst case on ioDrive.
    A handful of processes uses most of a device's internal parallelism (NVMe queues,
    filesystem concurrency) without that contention; capping at the CPU count keeps I/O
    processes from oversubscribing a small node (a 2-vCPU VM gets 2). It is a stated guess,
    not a measurement: profile the storage to replace it.
    """

    name: str = "defaults"
    deterministic: bool = True
    """The same request gets the same settings (the runtime's native front may repeat them)."""

    def __init__(self, *, node: Node | None = None, reason: str = "no profile: defaults") -> None:
        self.node = node if node is not None else Node.detect()
        self.reason = reason

    @property
    def io_processes(self) -> int:
        """The default number of I/O processes on this node."""
        return max(1, min(DEFAULT_IO_PROCESSES, self.node.cpus))

    def settings(self, request: PhaseRequest, *, source: str, notes: Sequence[str]) -> Settings:
        """Default settings for ``request`` with the given provenance (used by fallbacks)."""
        return Settings(
            io_processes=self.io_processes,
            source=source,
            codec=fixed_codec_label(request),
            notes=tuple(notes),
        )

    def decide(self, request: PhaseRequest) -> Settings:
        """Defaults for ``request``; the note says they are defaults."""
        return self.settings(request, source="defaults (no profile)", notes=(self.reason,))


class GovernorPolicy:
    """A stock cpufreq governor for every I/O phase, with the baselines' I/O parallelism.

    The number of I/O processes is the planner's baseline choice — the application's
    processes each doing their own I/O, as in saito2013's experiments: ``app_processes`` if
    given, else the profile's ``machine.cores`` when that count was measured, else the
    largest measured count; without a profile, ``app_processes`` or the node's CPUs. So a run
    under this policy is the measured counterpart of the planner's modelled baseline, and the
    predictions (when the profile has the governor's point) are the planner's figures: every
    rank does I/O, so the planner's waiting lookup adds nothing, and the settings say that no
    rank waits.
    """

    name: str
    deterministic: bool = True
    """The same request gets the same settings (the runtime's native front may repeat them)."""

    def __init__(
        self,
        governor: str,
        profile: Profile | None = None,
        *,
        node: Node | None = None,
        app_processes: int | None = None,
        frequency_control: bool | None = None,
    ) -> None:
        if governor not in GOVERNOR_POLICIES:
            raise InvalidValueError(
                f"unknown governor policy {governor!r}: use one of {', '.join(GOVERNOR_POLICIES)}"
            )
        if app_processes is not None and app_processes < 1:
            raise InvalidValueError(f"app_processes must be >= 1, got {app_processes!r}")
        self.name = governor
        self.profile = profile
        self.node = node if node is not None else Node.detect()
        self.app_processes = app_processes
        self.wait_mode: WaitMode = "polite" if polite() else "spin"  # a bad value fails here
        self.frequency = decided_frequency(self.node, frequency_control)
        self.frequency_control = self.frequency.available
        self._fit = None if profile is None else machine_fit(profile, self.node)

    def _processes(self, profile: Profile | None) -> int:
        if profile is None:
            return self.app_processes or self.node.cpus
        return app_processes(profile, self.app_processes)

    def decide(self, request: PhaseRequest) -> Settings:
        """The governor, the baseline's I/O processes and, where the profile has the
        governor's point, its predicted time and energy."""
        notes: list[str] = []
        profile = self.profile
        if profile is not None and self._fit is not None:
            notes.extend(self._fit.notes)
            mismatch = self._fit.mismatch
            if mismatch is None:
                storage = storage_fit(profile, self.node, request.path)
                notes.extend(storage.notes)
                mismatch = storage.mismatch
            if mismatch is not None:
                notes.insert(0, f"{mismatch}; its figures are not used")
                profile = None
        narrowed = None if profile is None else profile.at_size(request.size)
        n = self._processes(narrowed)
        governor: str | None = self.name
        if not self.frequency_control:
            notes.append(frequency_note(self.frequency))
            governor = None
        elif self.node.governors and self.name not in self.node.governors:
            notes.append(
                f"governor {self.name} is not offered on this node (available: "
                f"{', '.join(self.node.governors)}): frequency left as found"
            )
            governor = None
        predicted: dict[str, Any] = {}
        if narrowed is not None and profile is not None:
            point, how = baseline_point(narrowed, request.op, self.name, n)
            measured = [p.processes for p in narrowed.for_op(request.op)]
            if point is None and measured and n > max(measured):
                notes.append(
                    f"extrapolated: {n} I/O processes is more than the profile measured "
                    f"({max(measured)}); no prediction"
                )
            elif point is None:
                notes.append(f"no prediction: {how}")
            else:
                waits = WaitingLookup(narrowed.waiting, self.wait_mode, n)
                predicted, more = predictions(profile, point, request.size, waits.use(point))
                notes.extend(more)
                if governor is None:
                    notes.append(f"the prediction is for {how}, which is not applied here")
        return Settings(
            io_processes=n,
            source=f"governor baseline {self.name}",
            governor=governor,
            codec=fixed_codec_label(request),
            notes=tuple(notes),
            **predicted,
        )
