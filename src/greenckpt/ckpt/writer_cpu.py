"""The ranks of the current write wave move onto the cores the runtime runs at the I/O setting.

Why the writers move rather than the split: under a per-core split the runtime sets, once per
phase, the node's first ``io_processes`` CPUs to the I/O processes' frequency and the others to
the waiting ranks' (:attr:`~greenckpt.ckpt.hooks.PhaseAdvice.writer_cpus`). The library writes
in waves (:func:`~greenckpt.ckpt.topology.write_waves`): every rank writes its own file,
``io_processes`` ranks of a node at a time, so the ranks writing change from wave to wave and
most of them are bound to a core the split slowed. Moving the split at every wave would cost a
round trip to the node's agent and cpufreq writes per wave; moving the wave's writers costs two
``sched_setaffinity`` calls per rank and phase, and the waiting ranks (sleeping, see
:mod:`greenckpt.ckpt.wait`) leave the slow cores idle meanwhile — the power the planner counts
(``P_io + (R − n)·w_wait``, docs/model.md).

A rank that cannot move (its CPU set excludes the writer cores, as under a cgroup cpuset that
differs from the agent's) writes where it runs, and says so once: the checkpoint never fails
for it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress

from greenckpt.ckpt.agree import one_line

__all__ = ["on_writer_cpus"]

_warned = False


@contextmanager
def on_writer_cpus(rank: int, writer_cpus: Sequence[int]) -> Iterator[bool]:
    """Run the body on the node's writer cores, then put the calling thread's CPU affinity
    back; with no ``writer_cpus`` (no split) or where the move is refused, run it where the
    rank runs. Yields whether it moved.

    The whole set, not one core per writer: a rank's write runs two threads (the write and
    the digest of its variables, :func:`~greenckpt.ckpt.commit.write_rank_file`; threads
    started inside inherit the set), and the wave's writers — at most as many as there are
    writer cores — are spread over them by the kernel's scheduler."""
    global _warned  # noqa: PLW0603 - one warning per process, not one per checkpoint
    if not writer_cpus or not hasattr(os, "sched_setaffinity"):
        yield False
        return
    try:
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, writer_cpus)
    except OSError as exc:
        if not _warned:
            _warned = True
            warnings.warn(
                f"greenckpt: rank {rank} could not move onto the writer CPUs "
                f"{','.join(map(str, writer_cpus))} of the per-core split ({one_line(exc)}): "
                "it writes where it runs, on cores that may run at the waiting ranks' "
                "frequency (said once)",
                RuntimeWarning,
                stacklevel=3,
            )
        yield False
        return
    try:
        yield True
    finally:
        with suppress(OSError):  # then it stays on the fast cores: slower for no one
            os.sched_setaffinity(0, before)
