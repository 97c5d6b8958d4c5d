"""The runtime as the checkpoint library's phase hook.

Why a separate adapter: the library (:mod:`greenckpt.ckpt`) knows only the small
:class:`~greenckpt.ckpt.hooks.PhaseHook` interface and must never import the runtime; this
adapter turns its begin/end calls into :meth:`Runtime.begin`/:meth:`Runtime.end` and its advice
into :class:`~greenckpt.ckpt.hooks.PhaseAdvice`.
"""

from __future__ import annotations

import threading
from typing import Protocol, overload

from greenckpt.ckpt.hooks import HookKind, PhaseAdvice
from greenckpt.phases import AccountedKind, RunKind
from greenckpt.runtime.settings import PhaseKind, Settings

__all__ = ["PhaseRuntime", "RuntimeHook", "advice_note"]


class PhaseRuntime(Protocol):
    """What the hook calls of the runtime (:class:`~greenckpt.runtime.session.Runtime` is
    one): begin and end a phase. A protocol, so that this adapter, which the session hands
    out (:meth:`Runtime.hook`), never imports the session back."""

    @overload
    def begin(
        self,
        kind: PhaseKind,
        *,
        path: str | None = ...,
        size: int | None = ...,
        level: int | None = ...,
        node: int | None = ...,
    ) -> Settings: ...
    @overload
    def begin(
        self, kind: AccountedKind, *, level: int | None = ..., node: int | None = ...
    ) -> None: ...
    def end(
        self, kind: RunKind, ok: bool = ..., *, node: int | None = ..., seconds: float | None = ...
    ) -> object: ...


class RuntimeHook:
    """A :class:`Runtime` as the checkpoint library's
    :class:`~greenckpt.ckpt.hooks.PhaseHook`.

    ``begin`` starts the phase (reference-counted across the library's nodes) and advises the
    number of I/O processes and, under a per-core split, the writer CPUs; ``end`` ends it. An
    ``end`` for a (kind, node) that has no open ``begin`` here — its begin failed — is
    ignored, so one failed notification never unbalances the count.
    """

    def __init__(self, runtime: PhaseRuntime) -> None:
        self.runtime = runtime
        self._open: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def begin(
        self, kind: HookKind, *, level: int | None, path: str, size: int, node: int
    ) -> PhaseAdvice:
        """Start the phase; advise the policy's I/O processes (and say why in the note).
        Rework is only accounted: no settings, no advice."""
        if kind == "rework":  # its level: that of the checkpoint the restart restored
            self.runtime.begin("rework", level=level, node=node)
            settings = None
        else:
            settings = self.runtime.begin(
                kind, path=path, size=max(1, size), level=level, node=node
            )
        with self._lock:
            self._open[(kind, node)] = self._open.get((kind, node), 0) + 1
        if settings is None:
            return PhaseAdvice()
        return PhaseAdvice(
            io_processes=settings.io_processes,
            note=advice_note(settings),
            writer_cpus=settings.writer_cpus,
        )

    def end(self, kind: HookKind, *, node: int, ok: bool, seconds: float) -> None:
        """End the phase begun for ``node``; the runtime measures its own time and keeps
        the library's ``seconds`` beside it."""
        with self._lock:
            held = self._open.get((kind, node), 0)
            if held == 0:
                return
            self._open[(kind, node)] = held - 1
        self.runtime.end(kind, ok=ok, node=node, seconds=seconds)


def advice_note(settings: Settings) -> str:
    """One line for the library's logs: which settings, from which rule, first caveat."""
    note = f"{settings.source}: {settings.label}"
    if settings.notes:
        note += f" ({settings.notes[0]})"
    return note
