"""``greenckpt run -- COMMAND``: run an application with the energy-aware runtime active.

Why a wrapper process: the node's settings are the node's, not one rank's, and they must be put
back even when the application crashes or is killed. So the runtime lives in this process: the
library's :func:`greenckpt.runtime.run` starts a :class:`~greenckpt.runtime.session.Runtime`
(the decision policy, the meters, the crash-safe state file), serves the notification socket
and runs the command with ``GREENCKPT_RUNTIME_SOCKET`` set; with ``--nodes-emulated N`` or
``--launcher`` it leads a job of one agent per node instead. Every ``Checkpointer`` in the
command (one per rank, under ``mpiexec`` too) then announces its checkpoints, flushes and
restarts through that socket; other tools can do the same with ``greenckpt notify``. When the
command ends — successfully or not — the runtime restores the node and the per-phase report is
printed and written (JSON, CSV, a power-over-time plot). The exit status is the command's
(128 + N when a signal N ended it, as a shell reports it). SIGTERM, SIGHUP and SIGINT are
forwarded to the command (:mod:`greenckpt.runtime.command` says why).

This module only parses the flags (:mod:`greenckpt.cli.runtime_flags`: the typed options),
calls the library and renders: the phase table first (the table is never lost), then the report
files; a job's report is rendered by :mod:`greenckpt.cli.run_job`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from greenckpt.cli.argtypes import add_hidden_alias
from greenckpt.cli.commands import command_help
from greenckpt.cli.run_job import add_job_arguments, show_job
from greenckpt.cli.runtime_flags import add_runtime_arguments, failure_rate, node_options
from greenckpt.errors import InvalidValueError
from greenckpt.jsonout import dumps
from greenckpt.report.run_files import write_report_safely
from greenckpt.report.run_text import render_run_text
from greenckpt.runtime.command import signal_note
from greenckpt.runtime.intercept import FAMILIES
from greenckpt.runtime.job_run import JobOutcome
from greenckpt.runtime.job_run import run as run_command
from greenckpt.runtime.run_report import RunReport


def register(sub: Any) -> None:
    """Add the ``run`` sub-command."""
    p = sub.add_parser(
        "run",
        help=command_help("run"),
        description="Run COMMAND (an MPI job or not) with the energy-aware runtime active: "
        "its checkpoint library announces every checkpoint, flush and restart, the runtime "
        "applies the chosen CPU frequency / I/O parallelism for it and restores the node "
        "afterwards, and a per-phase time and energy report is written at the end. SIGTERM "
        "and SIGHUP are forwarded to COMMAND; the exit status is COMMAND's.",
    )
    add_runtime_arguments(p)
    output = p.add_argument(
        "-o",
        "--output",
        dest="report",
        metavar="DIR",
        default="greenckpt-report",
        help="directory for report.json, phases.csv and power.png (default ./greenckpt-report)",
    )
    add_hidden_alias(p, output, "--report")  # the spelling before issue 18
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="REPORT",
        help="a baseline run's report.json (e.g. the same command with --policy performance): "
        "time, power, energy and EPE differences in percent (wu2018 equation 2); repeatable",
    )
    p.add_argument(
        "--previous",
        default=None,
        metavar="REPORT",
        help="the report of the earlier run this one restarts after (default: the report an "
        "earlier run left in the -o folder): the work it lost after its last checkpoint is "
        "accounted in this report, labelled as that run's (a job: its job-report.json)",
    )
    p.add_argument(
        "--intercept",
        choices=tuple(FAMILIES),
        default=None,
        help="COMMAND checkpoints with FTI, SCR or VeloC: announce its checkpoints and "
        "restarts with no code change, by preloading libgreenckpt_intercept.so "
        "(docs/intercept.md)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the report as one JSON document on stdout (COMMAND's own stdout then goes "
        "to stderr, so that stdout holds only the JSON)",
    )
    # Not dest "command": that is the sub-command's name, which error messages show.
    p.add_argument(
        "app_command", nargs=argparse.REMAINDER, metavar="COMMAND", help="-- COMMAND [ARGS...]"
    )
    add_job_arguments(p)  # --nodes-emulated N: one agent per node, one job report
    p.set_defaults(run=run)


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt run``: the flags as typed options, the library's
    :func:`~greenckpt.runtime.job_run.run`, then the report shown and written."""
    command = list(ns.app_command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InvalidValueError(
            "give the command to run after --, e.g. greenckpt run -- mpiexec -n 4 python app.py"
        )
    rate = failure_rate(ns)
    options = node_options(ns)  # the meter flags agree, checked before anything is created
    outcome = run_command(
        command,
        nodes=ns.nodes_emulated,
        launcher=ns.launcher,
        options=options,
        report_dir=ns.report,
        compare=ns.compare,
        previous=ns.previous,
        intercept=ns.intercept,
        agent_hosts=ns.agent_hosts,
        node_root=ns.node_root,
        stdout=2 if ns.json else None,
    )
    if outcome.is_job:
        return show_job(outcome, json_output=ns.json)
    report = outcome.report
    assert isinstance(report, RunReport) and outcome.modelled is not None
    if ns.json:
        paths, problem = write_report_safely(report, outcome.report_dir)
        doc = {
            "command": command,
            "exit_status": outcome.status,
            "signal": outcome.signal,
            "failure_rate": None if rate is None else rate.to_dict(),
            "modelled_epe": outcome.modelled.to_dict(),
            "files": [str(p) for p in paths],
            "report_error": problem,
            "report": report.to_dict(include_trace=False),
        }
        print(dumps(doc), flush=True)
    else:
        print(render_run_text(report), flush=True)  # first: the table is never lost
        paths, problem = write_report_safely(report, outcome.report_dir)
        if paths:
            print("report: " + ", ".join(str(p) for p in paths))
    if problem is not None:
        print(f"greenckpt run: error: {problem}", file=sys.stderr)
    _say_end(outcome)
    return outcome.status


def _say_end(outcome: JobOutcome) -> None:
    """The line a run that did not end well ends with on stderr."""
    if outcome.signal is not None:
        print(f"greenckpt run: {signal_note(outcome.process)}", file=sys.stderr)
    elif outcome.status != 0:
        print(
            f"greenckpt run: the command exited with status {outcome.status}; the node was "
            "restored and the report covers what ran",
            file=sys.stderr,
        )
