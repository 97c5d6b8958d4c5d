"""``greenckpt study SPEC``: run a paper's experiment from a study file, then report it.

The whole file is checked before anything runs (one line, exit 2); the runs go through
``greenckpt run`` one by one, journalled in the study directory so that running the same
command again resumes; at the end the statistics and report.html are written
(greenckpt.study). Format and files: docs/formats.md ("Study file").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from greenckpt.cli.argtypes import positive_int
from greenckpt.cli.commands import command_help


def register(sub: Any) -> None:
    """Add the ``study`` sub-command."""
    p = sub.add_parser(
        "study",
        help=command_help("study"),
        description="Run every cell of a study file's design (factors x levels x repeats) "
        "through greenckpt run, in a randomised order, resumable, and write report.html with "
        "medians, bootstrap intervals and wu2018 Eq. 2 savings against the baseline.",
    )
    p.add_argument("spec", type=Path, help="the study file (TOML; examples/studies/)")
    p.add_argument(
        "-o", "--output", type=Path, help="study directory (default ./greenckpt-study-NAME)"
    )
    p.add_argument("--scale", type=float, help="multiply the problem size ({size}) by this")
    p.add_argument("--repeats", type=positive_int, help="runs per cell (default: the file's)")
    p.add_argument("--dry-run", action="store_true", help="print the design and exit")
    p.add_argument("--report-only", action="store_true", help="re-analyse the runs done so far")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=run)


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt study``."""
    import dataclasses  # noqa: PLC0415

    from greenckpt.errors import InvalidValueError  # noqa: PLC0415
    from greenckpt.study import design, runner, spec  # noqa: PLC0415 - only for this command

    study = spec.load_study(ns.spec)
    if ns.scale is not None:
        if not ns.scale > 0:
            raise InvalidValueError(f"--scale must be a number > 0, got {ns.scale}")
        study = dataclasses.replace(study, scale=ns.scale)
    directory = ns.output or Path(f"greenckpt-study-{study.name}")
    runs = design.runs(study, ns.repeats)
    if ns.dry_run:
        cells = design.cells(study)
        repeats = ns.repeats or study.repeats
        print(
            f"study {study.name}: {len(cells)} cells x {repeats} repeats = {len(runs)} runs, "
            f"order {study.order}"
        )
        for r in runs:
            print(f"  {r.id} block {r.block} {r.cell}")
        return 0
    if not ns.report_only:
        try:
            runner.run_study(study, directory, repeats=ns.repeats)
        except runner.Interrupted:
            print(
                f"greenckpt study: interrupted; the finished runs are kept in {directory}: run "
                "the same command again to resume",
                file=sys.stderr,
            )
            return 130
    from greenckpt.study.report import summarise, write_report  # noqa: PLC0415

    if not (directory / "runs.jsonl").exists():
        raise InvalidValueError(f"{directory} holds no runs of a study (no runs.jsonl)")
    page = write_report(directory)
    if ns.json:
        print(json.dumps(summarise(directory), indent=2))
    else:
        print(f"report: {page}")
    return 0
