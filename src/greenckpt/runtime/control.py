"""What the runtime applies to the node for a phase, and the node's settings over a run.

Why apart from the accounting: what a decision may change on this node (frequency control,
C-state control, ``control=False``, a background phase) is decided once, in
:func:`effective_settings`, with a note for everything not applied; and only
:class:`NodeControl` changes the node — through
:class:`~greenckpt.platform.restore.NodeSettings`, which saves every attribute before the first
write and restores it on return, exception and signal (docs/design/runtime.md).

The levers beyond the CPU frequency (per-core split, uncore frequency, power limit, GPU clocks
and power limit) are applied by :func:`apply_settings` in a fixed order; one that fails
mid-run is put back — the session restores the node and applies again the levers applied
before it, then goes on with the rest — so the phase runs with every other setting, and the
settings' notes say which lever failed and why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from greenckpt.errors import InvalidValueError
from greenckpt.platform.cpunotation import format_cpus, format_hz
from greenckpt.platform.levers import per_core_split_available, split_cpus
from greenckpt.platform.restore import NodeSettings, pending_state, restore_from_state_file
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.runtime.node import NO_FREQUENCY_CONTROL, Node, frequency_note
from greenckpt.runtime.policy import DEFAULT_IO_PROCESSES, Policy
from greenckpt.runtime.run_report import RunKind
from greenckpt.runtime.settings import PHASE_KINDS, PhaseRequest, Settings
from greenckpt.runtime.spans import Span

__all__ = [
    "BACKGROUND",
    "CONTROL_OFF",
    "NO_CSTATES",
    "NodeControl",
    "apply_settings",
    "decide",
    "effective_settings",
    "run_notes",
    "writer_cpus",
]

CONTROL_OFF = "control off: settings decided and accounted, never applied to the node"
"""The note on every decision of a runtime made with ``control=False``."""
BACKGROUND = (
    "background phase (the application computes meanwhile): CPU frequency, governor, "
    "C-states and the other levers not applied, parallelism only"
)
"""The note on a background phase whose CPU settings were not applied."""
NO_CSTATES = "no C-state control on this node: C-states left as found"
"""The note on a decision whose C-state setting this node cannot apply."""


def run_notes(node: Node, *, control: bool) -> list[str]:
    """The run-level statements of what this runtime will never apply."""
    if not control:
        return [CONTROL_OFF]
    notes: list[str] = []
    frequency = node.frequency
    if not frequency.available:
        why = f" ({frequency.reason})" if frequency.reason else ""
        notes.append(f"{NO_FREQUENCY_CONTROL}{why}")
    if not node.cstate_control:
        notes.append(NO_CSTATES)
    return notes


def decide(policy: Policy, request: PhaseRequest, node: Node) -> Settings:
    """``policy``'s settings for ``request``; a policy that raises gets defaults with the
    reason (a checkpoint must never fail because a lookup did)."""
    try:
        return policy.decide(request)
    except Exception as exc:
        return Settings(
            io_processes=max(1, min(DEFAULT_IO_PROCESSES, node.cpus)),
            source="defaults (policy failed)",
            codec=request.fixed_codec[1],
            notes=(
                f"policy {getattr(policy, 'name', '?')} failed: "
                f"{type(exc).__name__}: {exc}; settings left as found",
            ),
        )


def effective_settings(
    decided: Settings, node: Node, *, control: bool, background: bool
) -> Settings:
    """The settings the node will get: what this node, ``control`` and a background phase
    allow, with a note for everything the policy asked that is not applied (a note the
    policy already gave is not repeated)."""
    notes = list(decided.notes)
    frequency, governor, cstates = decided.frequency_hz, decided.governor, decided.cstates
    levers = decided
    if not control:
        if decided.controls_node:
            notes.append(CONTROL_OFF)
        frequency = governor = cstates = None
        levers = decided.without_levers()
    else:
        if not node.frequency.available:
            notes.append(frequency_note(node.frequency))
            frequency = governor = None
        if cstates is not None and not node.cstate_control:
            notes.append(NO_CSTATES)
            cstates = None
        if background and (
            frequency is not None or governor is not None or cstates is not None or decided.levers
        ):
            notes.append(BACKGROUND)
            frequency = governor = cstates = None
            levers = decided.without_levers()
    if frequency is None and levers.waiting_frequency_hz is not None:
        levers = levers.without_lever("per-core split")  # the split needs the frequency
    return replace(
        levers,
        frequency_hz=frequency,
        governor=governor,
        cstates=cstates,
        notes=tuple(dict.fromkeys(notes)),
    )


class NodeControl:
    """The node's settings during one run: opened at the runtime's start (restoring what a
    crashed session left), given the settings of the open foreground phase begun last,
    restored at its close. ``notes``: the run's notes, where it states what it did."""

    def __init__(self, root: SysRoot, state_file: Path | None, notes: list[str]) -> None:
        self.root = root
        self.state_file = state_file
        self.notes = notes
        self.session: NodeSettings | None = None
        self.owner: Span | None = None

    def open(self) -> None:
        """Restore a dead session's leftovers, then hold the node (refused while a live
        session holds it)."""
        pending = pending_state(self.root, self.state_file)
        if pending is not None and not pending.alive:
            restored = restore_from_state_file(self.root, self.state_file)
            what = "discarded (from before the last reboot)" if restored.stale else "restored"
            self.notes.append(
                f"node settings left by an earlier session (pid {pending.pid}, "
                f"{pending.created}) were {what} at start: {len(restored.written)} write(s)"
            )
        session = NodeSettings(self.root, state_file=self.state_file)
        session.__enter__()  # refuses while a live session holds the node
        self.session = session

    def close(self) -> None:
        """Restore the node and let it go; PlatformError when a setting could not be
        restored (the state file is then kept for ``greenckpt restore``)."""
        session, self.session = self.session, None
        if session is not None:
            session.close()

    def reconcile(self, spans: Mapping[RunKind, Span]) -> None:
        """Give the node the settings of the open foreground I/O phase begun last (or its own,
        when none), restoring first whatever another phase applied."""
        candidates = [
            s
            for k, s in spans.items()
            if k in PHASE_KINDS
            and not s.background
            and s.settings is not None
            and s.settings.controls_node
        ]
        desired = max(candidates, key=lambda s: s.order, default=None)
        owner = self.owner
        if desired is owner:
            return
        if owner is not None:
            self._release(owner, desired)
        if desired is None or desired.settings is None:
            return
        if owner is not None:
            desired.notes.append(
                f"applied over a {owner.kind} phase's settings (the node takes the settings of "
                "the phase begun last)"
            )
        if self.session is not None:
            self._take(self.session, desired)
        else:  # no frequency or C-state control: node control was never opened
            desired.settings = replace(
                desired.settings.without_levers(),
                frequency_hz=None,
                governor=None,
                cstates=None,
                notes=(
                    *desired.settings.notes,
                    "node control is not open (no frequency or C-state control on this "
                    "node): every lever left as found",
                ),
            )

    def _release(self, owner: Span, desired: Span | None) -> None:
        """Put back what ``owner`` applied (``desired`` replaces it, when not None)."""
        self.owner = None
        if desired is not None:
            owner.notes.append(
                f"its settings were replaced while a {desired.kind} phase ran (the node "
                "takes the settings of the phase begun last)"
            )
        if self.session is not None:
            try:
                self.session.restore()
            except PlatformError as exc:
                owner.notes.append(f"restoring the node after this phase failed: {exc}")
                self.notes.append(f"restoring the node failed: {exc}")

    def _take(self, session: NodeSettings, desired: Span) -> None:
        """Apply ``desired``'s settings (a lever that fails is put back and said in its
        notes); when even putting the node back fails, every setting is dropped and said."""
        assert desired.settings is not None
        try:
            applied = apply_settings(session, desired.settings)
        except PlatformError as exc:  # restoring after a failed lever failed
            with contextlib.suppress(PlatformError):
                session.restore()
            desired.settings = replace(
                desired.settings.without_levers(),
                frequency_hz=None,
                governor=None,
                cstates=None,
                notes=(
                    *desired.settings.notes,
                    f"could not apply the settings ({exc}): node put back as found",
                ),
            )
            return
        desired.settings = applied.settings
        desired.notes.extend(applied.notes)
        if applied.settings.controls_node:
            self.owner = desired


_FAILURES = (PlatformError, InvalidValueError, OSError)
"""What a lever that cannot be applied raises: absent (PlatformError), a value outside what
the hardware reports (InvalidValueError), a write the kernel refused (OSError)."""


@dataclass(frozen=True)
class Applied:
    """What :func:`apply_settings` left on the node: ``settings`` (those given, less each
    lever that failed, whose reason is in their notes) and the notes of what the node did
    with the ones applied (a driver that may not hold a frequency, the split's cores)."""

    settings: Settings
    notes: tuple[str, ...]


@dataclass(frozen=True)
class _Step:
    """One lever to apply: its name, how to apply it, and the settings without it."""

    name: str
    apply: Callable[[NodeSettings], Sequence[str]]
    drop: Callable[[Settings], Settings]
    needs: tuple[str, ...] = ()
    """Steps this one needs (dropped with them: the split needs the CPU frequency)."""


def writer_cpus(io_processes: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(writer CPUs, waiting CPUs) of the per-core split: the first ``io_processes`` CPUs
    of this process's affinity write, the rest wait (the I/O engine's workers are pinned to
    the writers)."""
    return split_cpus(io_processes)


def _split(settings: Settings, session: NodeSettings) -> list[str]:
    assert settings.waiting_frequency_hz is not None and settings.frequency_hz is not None
    writers, waiters = writer_cpus(settings.io_processes)
    ok, why = per_core_split_available(session.root, writers, waiters)
    if not ok:
        raise PlatformError(f"no per-core split: {why}")
    notes = list(session.set_frequency(settings.waiting_frequency_hz, cpus=waiters).notes)
    notes.append(
        f"per-core split: I/O CPUs {format_cpus(writers)} at "
        f"{format_hz(settings.frequency_hz)}, waiting CPUs {format_cpus(waiters)} at "
        f"{format_hz(settings.waiting_frequency_hz)}"
    )
    return notes


def _drop_cpu(settings: Settings) -> Settings:
    return replace(
        settings,
        frequency_hz=None,
        governor=None,
        cstates=None,
        waiting_frequency_hz=None,
        writer_cpus=(),
    )


def _steps(s: Settings) -> list[_Step]:
    """The levers ``s`` sets, in the order they are applied: the CPU setting (frequency or
    governor) and C-states first — one group, as before the other levers existed: either
    failing drops both — then the per-core split, uncore, power limit, GPU clocks, GPU
    power limit."""
    steps: list[_Step] = []

    def cpu(session: NodeSettings) -> list[str]:
        notes: list[str] = []
        if s.frequency_hz is not None:
            notes.extend(session.set_frequency(s.frequency_hz).notes)
        elif s.governor is not None:
            notes.extend(session.set_governor(s.governor).notes)
        if s.cstates is True:
            session.enable_cstates()
        elif s.cstates is False:
            session.disable_cstates(deeper_than_s=0.0)
        return notes

    if s.controls_frequency or s.cstates is not None:
        steps.append(_Step("CPU settings", cpu, _drop_cpu))
    if s.waiting_frequency_hz is not None and s.frequency_hz is not None:
        steps.append(
            _Step(
                "per-core split",
                lambda n: _split(s, n),
                lambda x: x.without_lever("per-core split"),
                needs=("CPU settings",),
            )
        )
    if s.uncore_khz is not None:
        khz = s.uncore_khz
        steps.append(
            _Step(
                "uncore frequency",
                lambda n: n.set_uncore(khz).notes,
                lambda x: x.without_lever("uncore frequency"),
            )
        )
    if s.power_limit_w is not None:
        watts = s.power_limit_w
        steps.append(
            _Step(
                "power limit",
                lambda n: n.set_power_limit(watts).notes,
                lambda x: x.without_lever("power limit"),
            )
        )
    if s.gpu_clock_mhz is not None and s.gpu_memory_mhz is not None:
        mem, gr = s.gpu_memory_mhz, s.gpu_clock_mhz
        steps.append(
            _Step(
                "gpu clocks",
                lambda n: n.set_gpu_clocks(mem, gr).notes,
                lambda x: x.without_lever("gpu clocks"),
            )
        )
    if s.gpu_power_limit_w is not None:
        gw = s.gpu_power_limit_w
        steps.append(
            _Step(
                "gpu power limit",
                lambda n: n.set_gpu_power_limit(gw).notes,
                lambda x: x.without_lever("gpu power limit"),
            )
        )
    return steps


def _failed_note(name: str, exc: BaseException) -> str:
    what = "CPU frequency, governor and C-states" if name == "CPU settings" else name
    if name == "CPU settings":
        return (
            f"could not apply the CPU settings ({exc}): {what} left as found; the phase goes "
            "on with the other settings"
        )
    return (
        f"could not apply the {name} ({exc}): {what} put back as found; the phase goes on "
        "with the other settings"
    )


def apply_settings(session: NodeSettings, settings: Settings) -> Applied:
    """Apply ``settings`` through ``session``, lever by lever in :func:`_steps`' order.

    When a lever fails (absent, a value the hardware refuses, a write the kernel refuses),
    the node is put back as found (``session.restore()``: a lever that failed half-way, on
    one uncore domain of two, is undone too) and the levers applied before it are applied
    again, then the rest: each failure removes one lever, so this ends. The settings
    returned lack every lever that failed, and their notes say which and why. Raises
    :class:`PlatformError` only when putting the node back failed."""
    steps = _steps(settings)
    while True:
        notes: list[str] = []
        failed: tuple[_Step, BaseException] | None = None
        for step in steps:
            try:
                notes.extend(step.apply(session))
            except _FAILURES as exc:
                failed = (step, exc)
                break
        if failed is None:
            if any(step.name == "per-core split" for step in steps):
                settings = replace(settings, writer_cpus=writer_cpus(settings.io_processes)[0])
            return Applied(settings, tuple(dict.fromkeys(notes)))
        bad, error = failed
        session.restore()  # PlatformError: the caller drops everything
        settings = bad.drop(settings)
        settings = replace(settings, notes=(*settings.notes, _failed_note(bad.name, error)))
        steps = [s for s in steps if s is not bad and bad.name not in s.needs]
