"""``greenckpt agent``: one node's agent of a job (started by ``greenckpt run``, not by hand).

Why a command: the launcher (local processes, ``srun``; ``mpiexec`` next) starts the agent as
a program on each node. It parses the node's flags and hands them to the library's
:func:`~greenckpt.runtime.node_serve.serve_node`, which builds that node's runtime and runs
:class:`~greenckpt.runtime.agent.NodeAgent`. The runtime's options are the leader's typed
:class:`~greenckpt.runtime.node_options.NodeOptions` as JSON (``--node-options``; the flags of
``run`` are still taken when it is absent), with a sysfs root and state file of its own for
an emulated node. The job token comes from the environment
(``GREENCKPT_JOB_TOKEN``), never from the command line, where every user could read it. An
agent that cannot start prints one line naming its node and why, sends the same line to the
leader (which prints it at once), and exits 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from greenckpt.cli.argtypes import non_negative_int
from greenckpt.cli.commands import command_help
from greenckpt.cli.runtime_flags import add_runtime_arguments, node_options
from greenckpt.errors import InvalidValueError
from greenckpt.report.run_files import report_writer
from greenckpt.runtime.agent import AgentIdentity, parse_address
from greenckpt.runtime.job import TOKEN_ENV
from greenckpt.runtime.node_options import NodeOptions
from greenckpt.runtime.node_serve import cannot_start, serve_node


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
    p.add_argument(
        "--previous-job",
        default=None,
        metavar="JOB_REPORT",
        help="the earlier job's job-report.json: the work this node's run in it lost is "
        "accounted in this node's report (its own report beside it, nodes/node<k>)",
    )
    p.add_argument(
        "--node-options",
        default=None,
        metavar="JSON",
        help="the runtime's options as the job's leader checked them (NodeOptions as JSON); "
        "the runtime flags below are then not read",
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
    """Execute ``greenckpt agent``: the flags as a node's identity and options, then the
    library's :func:`~greenckpt.runtime.node_serve.serve_node`."""
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
        options = _options(ns)
    except (ValueError, OSError) as exc:
        return cannot_start(identity, str(exc))
    return serve_node(identity, options, report_writer(Path(ns.output), f"node {ns.node}"))


def _options(ns: argparse.Namespace) -> NodeOptions:
    """The node's runtime options: the leader's (``--node-options``) or the flags', with this
    node's own root, state file and what its flags turn off."""
    if ns.node_options is None:
        given = node_options(ns)
    else:
        try:
            doc = json.loads(ns.node_options)
        except json.JSONDecodeError as exc:
            raise InvalidValueError(f"--node-options is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise InvalidValueError("--node-options is not a JSON object of node options")
        given = NodeOptions.from_dict(doc)
    return dataclasses.replace(
        given,
        root=ns.root if ns.root is not None else given.root,
        state_file=ns.state_file if ns.state_file is not None else given.state_file,
        control=given.control and not ns.no_control,
        frequency_control=given.frequency_control and not ns.no_frequency_control,
        previous_job=ns.previous_job if ns.previous_job is not None else given.previous_job,
    )
