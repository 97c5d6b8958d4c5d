"""``greenckpt agent``: one node's agent of a job (started by ``greenckpt run``, not by hand).

Why a command: the launcher (local processes today, ``srun`` or ``mpiexec`` next) starts the
agent as a program on each node. It parses the node's flags, builds that node's runtime (the
flags of ``run``; a sysfs root and state file of its own for an emulated node) and runs
:class:`~greenckpt.runtime.agent.NodeAgent`. The job token comes from the environment
(``GREENCKPT_JOB_TOKEN``), never from the command line, where every user could read it. An
agent that cannot start prints one line naming its node and why, and exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from greenckpt.cli.args import open_meters
from greenckpt.cli.argtypes import non_negative_int
from greenckpt.cli.commands import command_help
from greenckpt.cli.run_cmd import add_runtime_arguments, failure_rate
from greenckpt.errors import InvalidValueError
from greenckpt.optimize.profile import load_profile
from greenckpt.platform.root import SysRoot
from greenckpt.report.run_files import write_report_safely
from greenckpt.runtime.agent import AgentIdentity, NodeAgent, parse_address
from greenckpt.runtime.job import TOKEN_ENV, JobError
from greenckpt.runtime.policy import Node, make_policy
from greenckpt.runtime.report import RunReport
from greenckpt.runtime.session import Runtime


def register(sub: Any) -> None:
    """Add the ``agent`` sub-command."""
    p = sub.add_parser(
        "agent",
        help=command_help("agent"),
        description="One node's agent in a job: started by greenckpt run (one per node), not "
        "by hand. It runs the node's runtime and socket, reports to the job's leader, and "
        "restores the node when told to stop.",
    )
    p.add_argument("--node", type=non_negative_int, required=True, help="this node's index")
    p.add_argument("--job-id", required=True, help="the job's id")
    p.add_argument("--socket", required=True, help="this node's runtime socket path")
    p.add_argument("--leader", required=True, help="the leader's host:port")
    p.add_argument("--output", required=True, help="directory for this node's report files")
    p.add_argument("--root", default=None, help="this node's sysfs root (an emulated node)")
    p.add_argument("--state-file", default=None, help="this node's state file")
    add_runtime_arguments(p)
    p.set_defaults(run=run)


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt agent``."""
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        raise InvalidValueError(
            f"node {ns.node}: no job token in ${TOKEN_ENV}: the agent is started by "
            "greenckpt run, not by hand"
        )
    parse_address(ns.leader)
    try:
        runtime = _runtime(ns)
    except (ValueError, OSError) as exc:
        print(f"greenckpt agent: error: node {ns.node}: {exc}", file=sys.stderr)
        return 1
    identity = AgentIdentity(ns.node, ns.job_id, ns.socket, ns.leader, token)
    output = Path(ns.output)

    def write(report: RunReport) -> list[str]:
        paths, problem = write_report_safely(report, output)
        if problem is not None:
            print(f"greenckpt agent: node {ns.node}: {problem}", file=sys.stderr)
        return [str(p) for p in paths]

    try:
        return NodeAgent(identity, runtime, write).run()
    except JobError as exc:
        print(f"greenckpt agent: error: {exc}", file=sys.stderr)
        return 1


def _runtime(ns: argparse.Namespace) -> Runtime:
    """This node's runtime from the flags of ``run`` (through its own root when given)."""
    if ns.root is not None and not os.path.isdir(ns.root):
        raise InvalidValueError(f"its sysfs root {ns.root} is not a directory")
    root = SysRoot.default(ns.root)
    rate = failure_rate(ns)
    profile = load_profile(ns.profile) if ns.profile else None
    node = Node.detect(root)
    policy = make_policy(
        ns.policy,
        profile,
        node=node,
        app_power=ns.app_power,
        rate=None if rate is None else rate.rate,
    )
    state_file = None if ns.state_file is None else Path(ns.state_file)
    common: dict[str, Any] = {
        "root": root,
        "control": not ns.no_control,
        "node": node,
        "rate_hz": ns.rate,
        "state_file": state_file,
    }
    if ns.root is not None and ns.meters == "auto" and ns.meter_csv is None:
        return Runtime(policy, meters=None, **common)  # detected through the node's root
    return Runtime(policy, meters=open_meters(ns), **common)
