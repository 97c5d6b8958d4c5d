"""The asynchronous level-4 flush: one rank's files copied to the global file system in the
background.

Why in the background: writing to a parallel file system is the slowest level by far, and the
application need not wait for it once its data are safe on node-local storage. SCR and FTI do
the same (FTI's L4 flush, SCR's asynchronous flush); their users' complaints tell what must not
happen, and this design rules each out:

* *a checkpoint marked complete before its data are durable* — the thread only copies and
  fsyncs files into the global store's staging directory; the commit (manifest + rename) is
  done later by the application's own thread, collectively, and only after every rank's copy
  finished without error (:meth:`greenckpt.ckpt.api.Checkpointer.checkpoint` and friends poll);
* *silent failures* — an error in the thread is kept and raised as a
  :class:`~greenckpt.ckpt.api.CheckpointError` on every rank at the next API call;
* *the source deleted under the copy* — the node-local checkpoint being flushed is protected
  from keep-last-k cleanup until the flush is over.

The copy is plain sequential reads and writes in 4 MiB blocks through one reused buffer, so its
memory is constant whatever the checkpoint's size. The thread is a daemon: a process that ends
without waiting leaves only a staging directory, which is never mistaken for a checkpoint and is
removed at the next start.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Final

from greenckpt.ckpt.agree import one_line
from greenckpt.ckpt.inject import maybe_fail

__all__ = ["Flush"]

_BLOCK: Final = 4 * 1024 * 1024


def copy_file(source: Path, target: Path) -> int:
    """Copy ``source`` to ``target`` and fsync it; the number of bytes copied."""
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    total = 0
    with open(source, "rb", buffering=0) as src, open(target, "wb", buffering=0) as dst:
        while n := src.readinto(view):
            done = 0
            while done < n:
                done += dst.write(view[done:n]) or 0
            total += n
        os.fsync(dst.fileno())
    return total


class Flush:
    """Copies one rank's files of checkpoint ``ckpt_id`` into ``stage`` in a background thread.

    ``error`` is None until the copy fails; ``seconds`` is how long it took once done.
    """

    def __init__(
        self, ckpt_id: int, sources: list[Path], stage: Path, rank: int, iteration: int | None
    ) -> None:
        self.ckpt_id = ckpt_id
        self.iteration = iteration
        self.error: str | None = None
        self.seconds: float | None = None
        self.bytes = 0
        self._start = time.monotonic()
        self._thread: threading.Thread | None = threading.Thread(
            target=self._run,
            args=(sources, stage, rank),
            name=f"greenckpt-flush-{ckpt_id}",
            daemon=True,
        )
        self._thread.start()

    @classmethod
    def failed(cls, ckpt_id: int, iteration: int | None, error: str) -> Flush:
        """A flush that could not even start (its error is reported like a copy's)."""
        flush = cls.__new__(cls)
        flush.ckpt_id, flush.iteration, flush.error = ckpt_id, iteration, error
        flush.seconds, flush.bytes, flush._start = 0.0, 0, time.monotonic()
        flush._thread = None
        return flush

    def _run(self, sources: list[Path], stage: Path, rank: int) -> None:
        try:
            maybe_fail("flush", rank=rank, iteration=self.iteration)
            for source in sources:
                self.bytes += copy_file(source, stage / source.name)
        except Exception as exc:  # kept and raised at the next API call, on every rank
            self.error = one_line(exc)
        finally:
            self.seconds = time.monotonic() - self._start

    def done(self) -> bool:
        """Whether the copy finished (successfully or not)."""
        return self._thread is None or not self._thread.is_alive()

    def wait(self) -> None:
        """Block until the copy finished."""
        if self._thread is not None:
            self._thread.join()
