"""A job report's files: ``job-report.json``, ``job-phases.csv`` and ``job-power.png``.

Why a library call: the Slurm plugin's batch step and ``greenckpt job-report`` write the
same three files as ``greenckpt run`` does for a job, from a
:class:`~greenckpt.runtime.job_report.JobReport`.
"""

from __future__ import annotations

from pathlib import Path

from greenckpt.report.job_plot import plot_job
from greenckpt.runtime.job_report import JobReport

__all__ = ["write_job_files"]


def write_job_files(report: JobReport, directory: Path) -> list[Path]:
    """The job report's JSON and CSV, and its power plot when a node sent a series."""
    paths = [
        report.write_json(directory / "job-report.json"),
        report.write_csv(directory / "job-phases.csv"),
    ]
    if report.doc.get("series"):
        paths.append(plot_job(report, directory / "job-power.png"))
    return paths
