"""``greenckpt run --nodes-emulated N|--launcher slurm|mpiexec -- COMMAND``: the whole job, one
agent per node — its flags and how its report is shown.

Why: a job's nodes are each set, metered and restored by their own agent
(:mod:`greenckpt.runtime.agent`); the process of ``greenckpt run`` is the job's leader. The
library's :func:`greenckpt.runtime.run` does the job (:mod:`greenckpt.runtime.job_run`: the
collector, one agent per node through a launcher, the command, ONE job report; the agents'
start, wait and stop: :mod:`greenckpt.runtime.job_agents`); this module adds the job's flags to
``run`` and writes and prints the job report it returns. Each node's own report is under
``OUTPUT/nodes/node<k>/``. Design: docs/design/cluster.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from greenckpt.cli.argtypes import positive_int
from greenckpt.jsonout import dumps
from greenckpt.report.job_files import write_job_files
from greenckpt.report.job_text import render_job_text
from greenckpt.runtime.job_report import JobReport, node_list, silent_nodes
from greenckpt.runtime.job_run import JobOutcome

__all__ = ["add_job_arguments", "show_job"]


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    """``--nodes-emulated`` and the per-node sysfs roots of emulated nodes."""
    p.add_argument(
        "--nodes-emulated",
        type=positive_int,
        default=None,
        metavar="N",
        help="run the job over N emulated nodes on this machine, one agent (runtime, socket, "
        "report) per node, and write one job report (docs/user-guide.md, 'On a cluster')",
    )
    p.add_argument(
        "--launcher",
        choices=("slurm", "mpiexec"),
        default=None,
        help="slurm: inside an sbatch/salloc allocation, one agent per node of the job "
        "(srun --ntasks-per-node=1), the job id and node list from Slurm; mpiexec: one agent "
        "per host of --agent-hosts (mpiexec -ppn 1 -hosts ..., MPICH's Hydra; Open MPI's "
        "--map-by ppr:1:node --host ... when mpiexec is Open MPI's)",
    )
    p.add_argument(
        "--agent-hosts",
        default=None,
        metavar="H1,H2,...",
        help="with --launcher mpiexec: the job's hosts, one agent each, in node order",
    )
    p.add_argument(
        "--node-root",
        default=None,
        metavar="PATH",
        help="with --nodes-emulated: each emulated node's sysfs root, with {node} for its "
        "index (fake trees in tests; default: this machine's, controlled by node 0 only)",
    )


def show_job(outcome: JobOutcome, *, json_output: bool) -> int:
    """Write and show a job's report (``--json``: one JSON document); the command's status."""
    report = outcome.report
    assert isinstance(report, JobReport)
    directory = outcome.report_dir
    problem = None
    try:
        paths = write_job_files(report, directory)  # the plot only when a node sent a series
    except OSError as exc:
        paths, problem = [], f"the job report could not be written to {directory}: {exc}"
    if json_output:
        doc = {
            "command": report.doc["job"]["command"],
            "exit_status": outcome.status,
            "files": [str(p) for p in paths],
            "report_error": problem,
            "report": report.to_dict(),
        }
        print(dumps(doc), flush=True)
    else:
        print(render_job_text(report), flush=True)
        if paths:
            print("job report: " + ", ".join(str(p) for p in paths))
            print(_node_reports_line(directory / "nodes"))
    if problem is not None:
        print(f"greenckpt run: error: {problem}", file=sys.stderr)
    silent = silent_nodes(report.nodes)
    if silent:
        print(
            f"greenckpt run: node(s) {node_list(silent)} heard no announcement: no notifier "
            "reached their socket, so none of their phases were accounted (did every rank run "
            "on other nodes?)",
            file=sys.stderr,
        )
    if outcome.status != 0:
        print(
            f"greenckpt run: the command exited with status {outcome.status}; every managed "
            "node was restored and the job report covers what ran",
            file=sys.stderr,
        )
    return outcome.status


def _node_reports_line(nodes: Path) -> str:
    """Where the nodes' own reports are: only folders that exist (a node that died before
    writing one has none)."""
    found = sorted((p for p in nodes.glob("node*") if p.is_dir()), key=lambda p: p.name)
    if not found:
        return f"node reports: none (no node wrote one under {nodes})"
    names = ", ".join(p.name for p in found)
    return f"node reports: {nodes}/ ({names})"
