"""The I/O engine's worker processes run on the CPUs they are given (the per-core split's
writer cores), and only there; a worker run in the calling process leaves its affinity alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from greenckpt.io.pool import run_chunks
from greenckpt.io.worker import Chunk

WIDTH = 64


class AffinitySource:
    """A TEST-ONLY source: the chunk's bytes are the CPUs its worker may run on (read in
    ``prepare``, in the worker, before the start), padded to :data:`WIDTH` bytes."""

    def prepare(self, length: int, block_size: int) -> None:
        text = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
        self.data = memoryview(text.encode().ljust(length))

    def block(self, pos: int, length: int) -> memoryview:
        return self.data[pos : pos + length]


def _write(tmp_path: Path, workers: int, **kw: object) -> list[str]:
    files = [tmp_path / f"w{r}" for r in range(workers)]
    for f in files:
        f.touch()
    chunks = [[Chunk(str(f), 0, WIDTH, AffinitySource())] for f in files]
    run_chunks("write", chunks, fsync=False, **kw)  # type: ignore[arg-type]
    return [f.read_bytes().decode().strip() for f in files]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin to one")
def test_worker_processes_are_pinned_to_the_writer_cpus(tmp_path: Path) -> None:
    first = min(os.sched_getaffinity(0))
    assert _write(tmp_path, 2, in_process=False, cpus=[first]) == [str(first)] * 2
    unpinned = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    assert _write(tmp_path, 2, in_process=False) == [unpinned] * 2


def test_a_worker_in_the_calling_process_is_not_pinned(tmp_path: Path) -> None:
    before = os.sched_getaffinity(0)
    first = min(before)
    unpinned = ",".join(str(c) for c in sorted(before))
    assert _write(tmp_path, 1, in_process=True, cpus=[first]) == [unpinned]
    assert os.sched_getaffinity(0) == before
