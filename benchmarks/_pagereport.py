"""``--page-reporting auto|hold|keep`` for the I/O benchmarks (see greenckpt.platform.pagereport).

Why: on a VM guest that hands freed memory back to its host, which of two I/O tools looks
faster depends on when the guest reported its free memory, not on the tools; comparisons hold
reporting off while they run (``auto``: where the kernel and the user's rights allow) and print
what they did, so a reader knows which conditions the figures were taken under.
"""

from __future__ import annotations

import argparse
import mmap
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from greenckpt.platform.pagereport import PageReportingHold, read_page_reporting
from greenckpt.platform.root import PlatformError

CHOICES = ("auto", "hold", "keep")


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--page-reporting",
        choices=CHOICES,
        default="auto",
        help="on a VM that hands freed memory back to its host: hold that off for the run "
        "where possible (auto, default), or fail if it cannot be held (hold), or leave it "
        "(keep); restored at the end",
    )


def add_back_argument(parser: argparse.ArgumentParser, default: str) -> None:
    """``--back-memory GIB`` (:func:`back_bytes` reads it); ``default`` says what is backed
    without it, for the help text."""
    parser.add_argument(
        "--back-memory",
        type=float,
        metavar="GIB",
        help="GiB of free memory to touch and free before every job, so that no job meets the "
        f"faults of memory the guest handed back to its host (default: {default}; 0: off)",
    )


def check_back_argument(parser: argparse.ArgumentParser, asked: float | None) -> None:
    """Refuse a negative ``--back-memory`` with the parser's one-line error."""
    if asked is not None and asked < 0:
        parser.error(f"--back-memory must be >= 0 GiB, not {asked}")


def back_bytes(asked: float | None, memory_note: str, default: int) -> int:
    """``--back-memory`` in bytes: ``asked`` GiB where given, else ``default`` bytes where
    :func:`page_reporting`'s note says reporting is held (a guest that reports free memory),
    else 0."""
    if asked is not None:
        return int(asked * 2**30)
    return default if held(memory_note) else 0


@contextmanager
def page_reporting(mode: str) -> Iterator[str]:
    """Hold reporting off per ``mode`` for the ``with`` block; yields the header line.
    ``hold`` that cannot hold raises :class:`PlatformError` before anything is changed."""
    if mode == "keep":
        yield read_page_reporting().describe() + "; left as it is (--page-reporting keep)"
        return
    try:
        hold = PageReportingHold()
    except PlatformError as exc:
        if mode == "hold":
            raise
        yield f"{read_page_reporting().describe()}; not held: {exc}"
        return
    with hold:
        yield hold.note


def held(note: str) -> bool:
    """Whether :func:`page_reporting`'s ``note`` says reporting is held off for the run: a
    guest that hands free memory to its host, where jobs need :func:`back_free_memory`."""
    return "held off" in note


def free_bytes() -> int:
    """``MemFree`` of ``/proc/meminfo`` in bytes (0 where unreadable)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemFree:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def back_free_memory(nbytes: int) -> tuple[int, float]:
    """Touch ``nbytes`` (at most 80 % of the free memory) of fresh anonymous memory, one write
    per page, and free it; the bytes touched and the seconds it took.

    Why, before every job of a comparison: on a guest that has reported free memory to its
    host, the first use of each reported page faults it in from the host — measured on this
    project's VM, about 10 µs of guest CPU per 4 KiB page (2.5 s per GiB), ten times what the
    page cache's own copy costs. Holding reporting off (``min_free_ms``, at most 5 minutes
    here) only slows it: every job frees GiBs, and about 0.7–0.9 GiB of them were reported
    per job all the same (``reported_kib``). Which job then met those faults depended on the
    order of the jobs and on what each held in memory, not on the tools: a greenckpt job
    holding a second 256 MiB array per rank for its check wrote its level-1 checkpoint with
    2.5 CPU-s instead of 0.37. Pages touched and freed just before a job are backed, and the
    kernel hands recently freed pages out first, so each job's own allocations find backed
    memory, whichever tool it runs.
    """
    size = min(nbytes, int(free_bytes() * 0.8)) // mmap.PAGESIZE * mmap.PAGESIZE
    if size <= 0:
        return 0, 0.0
    start = time.monotonic()
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        np.frombuffer(region, dtype=np.uint8)[:: mmap.PAGESIZE] = 1
    finally:
        region.close()
    return size, time.monotonic() - start
