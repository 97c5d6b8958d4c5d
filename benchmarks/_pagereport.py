"""``--page-reporting auto|hold|keep`` for the I/O benchmarks (see greenckpt.platform.pagereport).

Why: on a VM guest that hands freed memory back to its host, which of two I/O tools looks
faster depends on when the guest reported its free memory, not on the tools; comparisons hold
reporting off while they run (``auto``: where the kernel and the user's rights allow) and print
what they did, so a reader knows which conditions the figures were taken under.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

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
