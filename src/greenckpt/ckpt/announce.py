"""Telling the runtime (``greenckpt run``) when this node's part of a phase starts and ends.

Why a part of its own: the runtime is optional and must never make a checkpoint fail, and its
rules are the same for every phase (checkpoint, flush, restart, rework): node leaders speak,
with their node's bytes; rank 0's advice is used by every rank, so the write waves agree
(the writer CPUs of a per-core split are each node's own, from its leader); a
failed notification is a warning; and an end whose begin never reached the runtime is not
sent, since it would close another notifier's phase of the same kind early.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path

from greenckpt.ckpt.agree import one_line
from greenckpt.ckpt.comm import Comm
from greenckpt.ckpt.hooks import HookKind, NullHook, PhaseAdvice, PhaseHook, PhaseKind
from greenckpt.ckpt.protect import Protected
from greenckpt.ckpt.topology import Topology

__all__ = ["Announcer", "hook_from_env", "warn_hook"]


def warn_hook(kind: str, what: str, exc: BaseException) -> None:
    """Warn that the runtime could not be told of the ``what`` (start, end, ...) of a phase."""
    warnings.warn(
        f"greenckpt: could not notify the runtime of the {what} of a {kind}: {one_line(exc)}; "
        "the phase goes on with the configured settings",
        RuntimeWarning,
        stacklevel=3,
    )


def hook_from_env(env: Mapping[str, str] | None) -> PhaseHook:
    """The runtime's notification socket when ``greenckpt run`` announced one, else none."""
    from greenckpt.ckpt.notify_client import hook_from_env as found_in  # noqa: PLC0415 - if used

    found = found_in(os.environ if env is None else env)
    return NullHook() if found is None else found


class Announcer:
    """This process's link to the runtime: begins and ends of its node's phases."""

    def __init__(
        self, hook: PhaseHook, comm: Comm, topology: Topology, node: int, protected: Protected
    ) -> None:
        self.hook = hook
        self.comm = comm
        self.topology = topology
        self.node = node
        self.protected = protected
        self._unannounced: dict[str, int] = {}  # phases whose begin the hook could not send

    @property
    def attached(self) -> bool:
        """Whether a runtime listens (no hook: nothing is sent, nothing is collective)."""
        return not isinstance(self.hook, NullHook)

    def _speaks(self) -> bool:
        """Whether this rank tells the runtime (its node's leader, with a runtime)."""
        return self.attached and self.comm.rank == self.topology.leader(self.node)

    def begin(self, kind: PhaseKind, level: int | None, path: Path) -> PhaseAdvice:
        """Tell the runtime that a phase starts (node leaders, with their node's bytes); rank
        0's advice is used by every rank, so the write waves agree, except its writer CPUs:
        each node's own, from its leader (collective with a hook)."""
        if not self.attached:
            return PhaseAdvice()
        sizes = self.comm.allgather(self.protected.nbytes)
        size = sum(sizes[r] for r in self.topology.nodes[self.node])
        told = self.comm.allgather(self.tell_begin(kind, level, str(path), size))
        advice = told[0]  # rank 0's, so the waves agree
        io = advice.io_processes
        if io is not None and io < 1:
            io = None
        # the writer cores are each node's own: its leader's advice
        cpus = told[self.topology.leader(self.node)].writer_cpus
        return PhaseAdvice(io, advice.note, cpus)

    def tell_begin(self, kind: HookKind, level: int | None, path: str, size: int) -> PhaseAdvice:
        """The node leader tells the runtime a phase starts; its advice (none elsewhere)."""
        if not self._speaks():
            return PhaseAdvice()
        try:
            return self.hook.begin(kind, level=level, path=path, size=size, node=self.node)
        except Exception as exc:  # a runtime must never make a checkpoint fail
            warn_hook(kind, "start", exc)
            self._unannounced[kind] = self._unannounced.get(kind, 0) + 1
            return PhaseAdvice()

    def end(self, kind: HookKind, ok: bool, seconds: float) -> None:
        """Tell the runtime that this node's part of a phase is over (node leaders)."""
        if not self._speaks():
            return
        if self._unannounced.get(kind, 0) > 0:
            # Its begin never reached the runtime: an end would close another notifier's
            # phase of the same kind early, skewing its accounting. Say so instead.
            self._unannounced[kind] -= 1
            warn_hook(kind, "end", RuntimeError("not sent, since its start never arrived"))
            return
        try:
            self.hook.end(kind, node=self.node, ok=ok, seconds=seconds)
        except Exception as exc:  # see tell_begin
            warn_hook(kind, "end", exc)
