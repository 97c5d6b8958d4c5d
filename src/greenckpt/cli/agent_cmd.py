"""``greenckpt agent``: one node's agent of a job (started by ``greenckpt run``, not by hand).

Why a command: the launcher (local processes, ``srun``; ``mpiexec`` next) starts the agent as
a program on each node. It parses the node's flags, builds that node's runtime (the
flags of ``run``; a sysfs root and state file of its own for an emulated node) and runs
:class:`~greenckpt.runtime.agent.NodeAgent`. The job token comes from the environment
(``GREENCKPT_JOB_TOKEN``), never from the command line, where every user could read it. An
agent that cannot start prints one line naming its node and why, sends the same line to the
leader (which prints it at once), and exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from greenckpt.cli.args import open_meters
from greenckpt.cli.argtypes import non_negative_int
from greenckpt.cli.commands import command_help
from greenckpt.cli.run_cmd import (
    add_runtime_arguments,
    failure_rate,
    fixed_settings,
    load_profiles,
    modelled_for_run,
)
from greenckpt.errors import InvalidValueError
from greenckpt.platform.root import SysRoot
from greenckpt.report.run_files import write_report_safely
from greenckpt.runtime.agent import AgentIdentity, NodeAgent, parse_address, tell_unable
from greenckpt.runtime.job import TOKEN_ENV, JobError
from greenckpt.runtime.launch import AGENT_ERROR
from greenckpt.runtime.modelled import ModelledEpe
from greenckpt.runtime.notify_socket import sweep_dead_jobs
from greenckpt.runtime.policy import Node
from greenckpt.runtime.profiles import make_storage_policy
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
    p.add_argument(
        "--node",
        type=_node_index,
        required=True,
        help="this node's index; slurm: $SLURM_NODEID; mpi: the MPI launcher's rank "
        "($PMI_RANK, $OMPI_COMM_WORLD_RANK or $PMIX_RANK) — then {node} in the paths is it",
    )
    p.add_argument("--job-id", required=True, help="the job's id")
    p.add_argument("--socket", required=True, help="this node's runtime socket path")
    p.add_argument("--leader", required=True, help="the leader's host:port")
    p.add_argument("--output", required=True, help="directory for this node's report files")
    p.add_argument("--root", default=None, help="this node's sysfs root (an emulated node)")
    p.add_argument("--state-file", default=None, help="this node's state file")
    p.add_argument(
        "--no-frequency-control",
        action="store_true",
        help="leave the CPU frequency to the batch system (srun --cpu-freq): decide and "
        "account as without frequency control; other settings stay greenckpt's",
    )
    add_runtime_arguments(p)
    p.set_defaults(run=run)


MPI_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
"""Where an MPI launcher puts a process's rank (MPICH's Hydra, Open MPI, PMIx)."""


def _node_index(text: str) -> int:
    """``--node``: a non-negative index, ``slurm`` for ``$SLURM_NODEID``, or ``mpi`` for the
    rank an MPI launcher gave (one agent per host: the rank is the node)."""
    if text == "mpi":
        for name in MPI_RANK_VARIABLES:
            value = os.environ.get(name, "")
            if value.isdigit():
                return int(value)
        raise argparse.ArgumentTypeError(
            f"--node mpi needs the rank of an MPI launcher (${', $'.join(MPI_RANK_VARIABLES)}): "
            "the agent is started by mpiexec, one per host"
        )
    if text != "slurm":
        return non_negative_int(text)
    value = os.environ.get("SLURM_NODEID", "")
    if not value.isdigit():
        raise argparse.ArgumentTypeError(
            f"--node slurm needs $SLURM_NODEID to be a node index, got {value!r}: the agent "
            "is started by srun inside the job"
        )
    return int(value)


def _place_node(ns: argparse.Namespace) -> None:
    """Put the node's index for ``{node}`` in its paths (one command line for all nodes)."""
    for name in ("socket", "output", "root", "state_file"):
        value = getattr(ns, name)
        if value is not None:
            setattr(ns, name, value.replace("{node}", str(ns.node)))


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt agent``."""
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        raise InvalidValueError(
            f"node {ns.node}: no job token in ${TOKEN_ENV}: the agent is started by "
            "greenckpt run, not by hand"
        )
    parse_address(ns.leader)
    _place_node(ns)
    identity = AgentIdentity(ns.node, ns.job_id, ns.socket, ns.leader, token)
    try:
        _socket_dir(ns.socket)
        runtime = _runtime(ns)
    except (ValueError, OSError) as exc:
        return _cannot_start(identity, str(exc))
    output = Path(ns.output)

    def write(report: RunReport) -> list[str]:
        paths, problem = write_report_safely(report, output)
        if problem is not None:
            print(f"greenckpt agent: node {ns.node}: {problem}", file=sys.stderr)
        return [str(p) for p in paths]

    def modelled(report: RunReport) -> ModelledEpe:  # the job report sums the nodes'
        return modelled_for_run(
            report,
            profile=ns.profile or None,
            app_power=ns.app_power,
            rate=failure_rate(ns),
            policy=runtime.policy,
        )

    try:
        return NodeAgent(identity, runtime, write, modelled=modelled).run()
    except JobError as exc:
        return _cannot_start(identity, str(exc))
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(ns.socket))  # a job's own directory, when empty


def _cannot_start(identity: AgentIdentity, reason: str) -> int:
    """This node cannot take part: its one line on stderr (the launcher's log) and to the
    leader, which prints it at once instead of waiting for a hello that will not come."""
    reason = reason.removeprefix(f"node {identity.node}: ")
    print(f"{AGENT_ERROR}node {identity.node}: {reason}", file=sys.stderr, flush=True)
    tell_unable(identity, reason)
    return 1


def _socket_dir(path: str) -> None:
    """The socket's directory, private to this user (a job's node-local one may not exist)."""
    directory = os.path.dirname(path) or "."
    parent = os.path.dirname(directory)
    sweep_dead_jobs(parent)  # folders of agents killed in earlier jobs
    if os.path.isdir(directory):
        return
    old = os.umask(0o077)
    try:
        os.makedirs(directory, exist_ok=True)
    finally:
        os.umask(old)
    if os.stat(parent).st_uid != os.getuid():
        raise InvalidValueError(f"{parent} belongs to another user: not a place for its socket")


def _runtime(ns: argparse.Namespace) -> Runtime:
    """This node's runtime from the flags of ``run`` (through its own root when given)."""
    if ns.root is not None and not os.path.isdir(ns.root):
        raise InvalidValueError(f"its sysfs root {ns.root} is not a directory")
    root = SysRoot.default(ns.root)
    rate = failure_rate(ns)
    profiles = load_profiles(ns)  # each phase: the profile of its storage on THIS node
    node = Node.detect(root)
    if ns.no_frequency_control:
        node = dataclasses.replace(node, frequency_control=False)
    policy = make_storage_policy(
        ns.policy,
        profiles,
        node=node,
        app_power=ns.app_power,
        rate=None if rate is None else rate.rate,
        app_processes=ns.app_processes,
        fixed=fixed_settings(ns),
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
