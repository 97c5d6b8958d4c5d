"""How the checkpoint library tells an energy-aware runtime that an I/O phase starts and ends.

Why a hook and not a call into ``greenckpt.runtime``: the runtime sits above the library (it
uses the library's phases, the profiler and the platform layer), so the library only knows
this small interface — mills2013's point that *explicit* start/end notification beats any
governor that must first detect the I/O phase. Whoever runs the application supplies the
hook: the runtime itself in the same process, or a client of the runtime's notification
socket (:mod:`greenckpt.ckpt.notify_client`, used automatically when ``greenckpt run`` set
``GREENCKPT_RUNTIME_SOCKET``).

Protocol, per node: the node's leader rank calls :meth:`PhaseHook.begin` before a checkpoint,
flush or restart touches storage, and :meth:`PhaseHook.end` when that node's part is over
(also after a failure, with ``ok=False``), so the runtime can apply its settings (CPU
frequency, C-states) for exactly that span and always put the node back. ``begin`` returns
:class:`PhaseAdvice`: the runtime's choice of I/O parallelism, which the library applies as
the number of ranks per node writing at once (rank 0's advice is used by every rank, so the
write waves agree). A hook must never make a checkpoint fail: errors inside it are reported by
the library as warnings and the phase proceeds with the configured settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from greenckpt.phases import HookKind, IOKind

__all__ = ["HookKind", "NullHook", "PhaseAdvice", "PhaseHook", "PhaseKind"]

PhaseKind = IOKind
"""The phases that touch storage: the runtime chooses settings for them."""


@dataclass(frozen=True)
class PhaseAdvice:
    """What the runtime asks of the library for one phase.

    ``io_processes``: ranks of a node that read or write at once (None: keep the configured
    ``writers_per_node``). ``note``: the runtime's one-line account of its choice (which
    settings, and whether they were measured, interpolated or defaults), for logs.
    ``writer_cpus``: the CPUs the runtime runs at the I/O processes' setting under a per-core
    split (the others at the waiting ranks'); each rank of a wave writes on one of them
    (:mod:`greenckpt.ckpt.writer_cpu`). Empty: no split, every rank writes where it runs.
    Per node: each node's leader is told its own node's.
    """

    io_processes: int | None = None
    note: str = ""
    writer_cpus: tuple[int, ...] = ()


class PhaseHook(Protocol):
    """Start/end notifications of the library's I/O phases (see the module docstring)."""

    def begin(
        self, kind: HookKind, *, level: int | None, path: str, size: int, node: int
    ) -> PhaseAdvice:
        """``kind`` of phase at ``level`` starts on ``node``, moving ``size`` bytes (the
        node's share; 0 for rework) under ``path``."""
        ...

    def end(self, kind: HookKind, *, node: int, ok: bool, seconds: float) -> None:
        """That phase is over on ``node`` after ``seconds``; ``ok`` False when it failed."""
        ...


class NullHook:
    """No runtime: nothing to tell, nothing advised."""

    def begin(
        self, kind: HookKind, *, level: int | None, path: str, size: int, node: int
    ) -> PhaseAdvice:
        """Advise nothing."""
        return PhaseAdvice()

    def end(self, kind: HookKind, *, node: int, ok: bool, seconds: float) -> None:
        """Nothing to do."""
