"""Which earlier run's report a restarted run accounts the lost work of.

Why apart from :mod:`greenckpt.runtime.lost_previous` (the accounting): finding the report is
a front end's matter. ``greenckpt run`` takes ``--previous REPORT``, else the report an earlier
run left in its ``-o`` folder (read before this run's replaces it); a job takes the earlier
job's ``job-report.json`` the same way, and each node's agent reads its own node's report
beside it (``nodes/node<k>/report.json``). A file named by ``--previous`` that is not such a
report is refused before anything starts; one merely found that cannot be read leaves a note.
docs/user-guide.md, "Work lost by an earlier run".
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from greenckpt.errors import InvalidValueError
from greenckpt.files import read_regular
from greenckpt.runtime.job_report import load_job_report
from greenckpt.runtime.lost_previous import earlier_restart, with_previous_loss
from greenckpt.runtime.run_report import RunReport, load_report

__all__ = [
    "JOB_REPORT_NAME",
    "REPORT_NAME",
    "EarlierRun",
    "earlier_job",
    "earlier_node_run",
    "earlier_run",
    "found_report",
]

REPORT_NAME = "report.json"
"""A run report's file name in its folder (``greenckpt run -o DIR``, a node's folder)."""
JOB_REPORT_NAME = "job-report.json"
"""A job report's file name in its folder."""


@dataclass(frozen=True)
class EarlierRun:
    """The report of the run before this one: ``path`` and ``report`` (None, with
    ``problem``, when it could not be read); ``explicit``: named by ``--previous`` rather than
    found. ``source``: how its figures are labelled (default ``previous run <path>``);
    ``ended``: how it ended when another report says so (a job's), else read from it."""

    path: Path
    report: RunReport | None
    explicit: bool
    problem: str | None = None
    source: str | None = None
    ended: str | None = None

    def account(self, report: RunReport) -> RunReport:
        """``report`` with the earlier run's lost work when this run restarted from a
        checkpoint written before it, or with a note saying why none is accounted."""
        if self.report is None:
            if not self.explicit and earlier_restart(report.records) is None:
                return report  # nothing to account: a report that cannot be read is no matter
            return _noted(
                report,
                f"{self.path} could not be read as an earlier run's report ({self.problem}): "
                "no work lost by an earlier run is accounted",
            )
        out = with_previous_loss(
            report, self.report, self.path, ended=self.ended, source=self.source
        )
        if out is report and self.explicit:
            return _noted(
                report,
                f"--previous {self.path}: this run did not restart from a checkpoint written "
                "before it (no restart announced, or its first restart read back one of its "
                "own), so no work lost by that run is accounted",
            )
        return out


def found_report(directory: Path, name: str = REPORT_NAME) -> Path | None:
    """The report an earlier run left in ``directory`` (this run writes its own only at its
    end, so the one there now is an earlier run's), or None."""
    path = directory / name
    return path if path.is_file() else None


def earlier_run(given: str | None, directory: Path) -> EarlierRun | None:
    """The earlier run's report: ``given`` (``--previous``; InvalidValueError, one line, when
    it is not a readable greenckpt run report), else the one an earlier run left in
    ``directory`` (a broken one gives a problem, not an error: the user named nothing), else
    None. Read now, before this run's report replaces it."""
    if given is not None:
        path = Path(given)
        try:
            return EarlierRun(path, load_report(path), explicit=True)
        except InvalidValueError as exc:
            raise InvalidValueError(
                f"--previous: {exc}; give the report.json of the run that died"
            ) from None
    found = found_report(directory)
    if found is None:
        return None
    try:
        return EarlierRun(found, load_report(found), explicit=False)
    except InvalidValueError as exc:
        return EarlierRun(found, None, explicit=False, problem=str(exc))


def earlier_job(given: str | None, directory: Path) -> tuple[Path | None, str | None]:
    """The earlier job's report for a job's agents: ``given`` (``--previous``; checked now,
    InvalidValueError when it is not a readable job report), else the ``job-report.json`` an
    earlier job left in ``directory``; with a note when the one found cannot be read (then
    no path)."""
    if given is not None:
        try:
            load_job_report(given)
        except InvalidValueError as exc:
            why = str(exc).partition("; compare a job")[0]  # its advice is --compare's
            raise InvalidValueError(
                f"--previous: {why}; give the job-report.json of the job that died"
            ) from None
        return Path(os.path.abspath(given)), None
    found = found_report(directory, JOB_REPORT_NAME)
    if found is None:
        return None, None
    try:
        load_job_report(found)
    except InvalidValueError as exc:
        return None, (
            f"{found} could not be read as an earlier job's report ({exc}): no work lost by "
            "an earlier job is accounted"
        )
    return Path(os.path.abspath(found)), None


def earlier_node_run(job_report: Path, node: int) -> EarlierRun:
    """Node ``node``'s run in the earlier job of ``job_report``: its own report
    (``nodes/node<k>/report.json`` beside the job report), labelled ``previous job <path>,
    node <k>``, with how that job ended (a completed job lost nothing). Never ``explicit``:
    whether ``--previous`` named the job is the leader's to say, once for the job."""
    source = f"previous job {job_report}, node {node}"
    path = job_report.parent / "nodes" / f"node{node}" / REPORT_NAME
    try:
        doc = json.loads(read_regular(job_report).decode("utf-8"))
        ended = str(doc["job"]["ended"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return EarlierRun(path, None, False, f"its job report: {exc}", source)
    try:
        return EarlierRun(path, load_report(path), False, None, source, ended)
    except InvalidValueError as exc:
        return EarlierRun(path, None, False, f"node {node} left no readable report: {exc}", source)


def _noted(report: RunReport, note: str) -> RunReport:
    return replace(report, notes=(*report.notes, note))
