"""``greenckpt job-report JOBID``: the job report of a job run under the Slurm plugin.

Why a command: with ``sbatch --greenckpt`` the batch step assembles the job report when the
batch script ends; a job started by ``salloc`` or a bare ``srun`` has no batch step, and a
report may be wanted again (a node's files arrived late). This reads the node folders the
plugin's agents wrote under the report folder and writes job-report.json, job-phases.csv and
job-power.png there, with the same aggregation as ``greenckpt run``'s leader
(:mod:`greenckpt.runtime.job_files`). Admin guide: docs/admin-guide.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from greenckpt.cli.argtypes import positive_int
from greenckpt.cli.commands import command_help
from greenckpt.jsonout import dumps
from greenckpt.report.job_files import write_job_files
from greenckpt.report.job_text import render_job_text
from greenckpt.runtime.job_files import assemble_job_report
from greenckpt.runtime.launch_slurm import parse_job_id


def register(sub: Any) -> None:
    """Add the ``job-report`` sub-command."""
    p = sub.add_parser(
        "job-report",
        help=command_help("job-report"),
        description="Assemble the job report of a job run with the Slurm plugin (sbatch/srun "
        "--greenckpt) from its nodes' files: job-report.json, job-phases.csv and "
        "job-power.png in the report folder. The batch step does this by itself when an "
        "sbatch script ends; run it for salloc/srun jobs, or again.",
    )
    p.add_argument("job_id", metavar="JOBID", help="the Slurm job id (digits, or N_M)")
    p.add_argument(
        "--report",
        metavar="DIR",
        default=None,
        help="the job's report folder (default ./greenckpt-JOBID, the plugin's default)",
    )
    p.add_argument(
        "--nodes",
        type=positive_int,
        default=None,
        help="the job's node count (default: what the nodes' files say)",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long for nodes whose agent has not written its summary yet (default 0)",
    )
    p.add_argument("--json", action="store_true", help="print the report as one JSON document")
    p.set_defaults(run=run)


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt job-report``."""
    job_id = parse_job_id(ns.job_id)
    folder = Path(ns.report if ns.report is not None else f"greenckpt-{job_id}")
    report = assemble_job_report(folder, job_id, nodes=ns.nodes, wait_s=max(ns.wait, 0.0))
    paths = write_job_files(report, folder)
    if ns.json:
        print(dumps({"files": [str(p) for p in paths], "report": report.to_dict()}))
    else:
        print(render_job_text(report))
        print("job report: " + ", ".join(str(p) for p in paths))
    return 0
