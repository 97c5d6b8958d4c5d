"""A run report's files: ``report.json``, ``phases.csv`` and ``power.png`` in one directory.

Why a library call: ``greenckpt run`` and ``greenckpt demo`` write the same three files, and a
Python user running :class:`~greenckpt.runtime.Runtime` can write them too. A finished run
never loses its report: when the directory cannot be written, the files go to a new temporary
directory and one line says where (:func:`write_report_safely`).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from greenckpt.report.run_plot import plot_run
from greenckpt.runtime.run_report import RunReport

__all__ = ["report_writer", "write_report", "write_report_safely"]


def write_report(report: RunReport, directory: Path) -> list[Path]:
    """report.json, phases.csv and power.png (when there is a power trace) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    written = [
        report.write_json(directory / "report.json"),
        report.write_csv(directory / "phases.csv"),
    ]
    if report.trace is not None and len(report.trace.t_s) > 1:
        written.append(plot_run(report, directory / "power.png"))
    return written


def write_report_safely(report: RunReport, directory: Path) -> tuple[list[Path], str | None]:
    """:func:`write_report` into ``directory``, or — when that fails — into a new temporary
    directory, so that a finished run never loses its report; the files written and, on
    failure, one line saying what happened."""
    try:
        return write_report(report, directory), None
    except OSError as exc:
        why = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    try:
        fallback = Path(tempfile.mkdtemp(prefix="greenckpt-report-"))
        paths = write_report(report, fallback)
    except OSError as exc:
        return [], f"the report could not be written to {directory} ({why}) nor elsewhere ({exc})"
    return paths, f"the report could not be written to {directory} ({why}); written to {fallback}"


def report_writer(directory: Path, label: str) -> Callable[[RunReport], list[str]]:
    """What a node's agent calls to write its report files into ``directory`` (safely: a
    fallback folder when that fails, said on stderr after ``label``, e.g. ``node 2``); the
    paths written."""

    def write(report: RunReport) -> list[str]:
        paths, problem = write_report_safely(report, directory)
        if problem is not None:
            print(f"greenckpt agent: {label}: {problem}", file=sys.stderr, flush=True)
        return [str(p) for p in paths]

    return write
