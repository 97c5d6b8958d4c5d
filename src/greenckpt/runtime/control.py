"""What the runtime applies to the node for a phase, and the node's settings over a run.

Why apart from the accounting: what a decision may change on this node (frequency control,
C-state control, ``control=False``, a background phase) is decided once, in
:func:`effective_settings`, with a note for everything not applied; and only
:class:`NodeControl` changes the node — through
:class:`~greenckpt.platform.restore.NodeSettings`, which saves every attribute before the first
write and restores it on return, exception and signal (docs/design/runtime.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

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
    "decide",
    "effective_settings",
    "run_notes",
]

CONTROL_OFF = "control off: settings decided and accounted, never applied to the node"
"""The note on every decision of a runtime made with ``control=False``."""
BACKGROUND = (
    "background phase (the application computes meanwhile): CPU frequency, governor and "
    "C-states not applied, parallelism only"
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
    if not control:
        if decided.controls_frequency or cstates is not None:
            notes.append(CONTROL_OFF)
        frequency = governor = cstates = None
    else:
        if not node.frequency.available:
            notes.append(frequency_note(node.frequency))
            frequency = governor = None
        if cstates is not None and not node.cstate_control:
            notes.append(NO_CSTATES)
            cstates = None
        if background and (frequency is not None or governor is not None or cstates is not None):
            notes.append(BACKGROUND)
            frequency = governor = cstates = None
    return replace(
        decided,
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
            and (s.settings.controls_frequency or s.settings.cstates is not None)
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
        if self.session is not None:  # None cannot happen: settings were stripped
            self._take(self.session, desired)

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
        """Apply ``desired``'s settings; on failure put the node back and say so."""
        assert desired.settings is not None
        try:
            desired.notes.extend(apply_settings(session, desired.settings))
            self.owner = desired
        except PlatformError as exc:
            with contextlib.suppress(PlatformError):
                session.restore()
            desired.settings = replace(
                desired.settings,
                frequency_hz=None,
                governor=None,
                cstates=None,
                notes=(
                    *desired.settings.notes,
                    f"could not apply the CPU settings ({exc}): node left as found",
                ),
            )


def apply_settings(session: NodeSettings, settings: Settings) -> list[str]:
    """Write ``settings``' CPU frequency or governor and C-states through ``session``; the
    notes of what the node did with them (a driver that may not hold a frequency)."""
    notes: list[str] = []
    if settings.frequency_hz is not None:
        notes.extend(session.set_frequency(settings.frequency_hz).notes)
    elif settings.governor is not None:
        notes.extend(session.set_governor(settings.governor).notes)
    if settings.cstates is True:
        session.enable_cstates()
    elif settings.cstates is False:
        session.disable_cstates(deeper_than_s=0.0)
    return notes
