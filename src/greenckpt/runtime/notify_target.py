"""What the notification server drives, and how the settings it gets back go on the wire.

Why a module of its own: :class:`NotifyTarget` is the whole contract between the server
(:mod:`greenckpt.runtime.notify`, whichever front serves the socket) and the runtime
(:class:`~greenckpt.runtime.session.Runtime`, or a fake in tests), and the ``begin`` reply's
``settings`` and ``note`` are the runtime's :class:`~greenckpt.runtime.settings.Settings` in
the wire format of :mod:`greenckpt.ckpt.notify_client`; the server only moves them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from greenckpt.ckpt.notify_client import WireKind, one_line
from greenckpt.runtime.settings import Settings

__all__ = ["NotifyTarget", "settings_note", "settings_to_wire"]


class NotifyTarget(Protocol):
    """What the server drives: the runtime (``greenckpt.runtime.session.Runtime``) or a fake.

    ``begin`` returns the settings it applied for the phase (``None``: nothing to advise, e.g.
    for ``compute``; its ``size`` is ``None`` when the notifier could not know an I/O phase's
    bytes) and may raise to refuse the phase (a ``ValueError`` for a bad request);
    ``end`` closes the phase and raises (a ``ValueError``) when none of that kind is open; its
    return value is not used. Overlapping phases of one kind are the target's to count.
    A target whose ``decisions_repeat`` attribute is true promises that the same begin
    request, with no phase of its kind open, gets the same settings again: the native front
    then answers repeated begins at once (and the server still checks every answer).
    """

    def begin(
        self,
        kind: WireKind,
        *,
        path: str | None,
        size: int | None,
        level: int | None,
        codec: str | None = None,
        node: int | None = None,
        pid: int | None = None,
    ) -> Settings | None:
        """A ``kind`` phase starts on ``node``, announced by process ``pid`` (None: not
        told; with ``node`` it tells the ranks' restarts of one attempt apart)."""
        ...

    def end(
        self, kind: WireKind, *, ok: bool, node: int | None = None, seconds: float | None = None
    ) -> object:
        """The ``kind`` phase is over on ``node``; ``ok`` False when it failed; ``seconds``
        the notifier's own timing (None: not given)."""
        ...


def settings_to_wire(settings: Settings) -> dict[str, Any]:
    """:class:`Settings` as the ``settings`` object of a ``begin`` reply (SI units, plus the
    one-line ``label``). The fields are flat, so a shallow copy (``dataclasses.asdict`` deep
    copies, at about a third of a begin's cost in the server)."""
    doc = {field.name: getattr(settings, field.name) for field in dataclasses.fields(settings)}
    doc["notes"] = list(settings.notes)
    doc["writer_cpus"] = list(settings.writer_cpus)
    doc["label"] = settings.label
    return doc


def settings_note(settings: Settings) -> str:
    """The ``note`` of a ``begin`` reply: the settings' label, their source and caveats."""
    parts = [f"{settings.label} ({settings.source})", *settings.notes]
    return one_line("; ".join(parts), limit=1000)
