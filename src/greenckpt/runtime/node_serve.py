"""Serving one node of a job: the library call behind ``greenckpt agent`` and the Slurm plugin.

Why one function: the per-node agent is started by ``greenckpt run``'s launchers (local
processes, ``srun``, ``mpiexec``) and, under the SPANK plugin, by ``slurmstepd``; each front end
only says who the agent is (:class:`~greenckpt.runtime.agent.AgentIdentity`), what its
runtime is built from (:class:`~greenckpt.runtime.node_options.NodeOptions`) and how the
node's report files are written (the report layer's writer, which this layer may not
import). :func:`serve_node` makes the socket's folder, builds the runtime, runs the
:class:`~greenckpt.runtime.agent.NodeAgent` until it is told to stop, and — when the node
cannot take part — says why in one line, on stderr and to the leader at once.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from greenckpt.errors import InvalidValueError
from greenckpt.runtime.agent import AgentIdentity, NodeAgent, WriteFiles, tell_unable
from greenckpt.runtime.earlier_run import earlier_node_run
from greenckpt.runtime.job import JobError
from greenckpt.runtime.launch import AGENT_ERROR
from greenckpt.runtime.modelled import ModelledEpe
from greenckpt.runtime.node_options import NodeOptions, build_runtime
from greenckpt.runtime.notify_socket import sweep_dead_jobs
from greenckpt.runtime.run_report import RunReport

__all__ = ["cannot_start", "serve_node"]


def serve_node(identity: AgentIdentity, options: NodeOptions, write_files: WriteFiles) -> int:
    """Serve ``identity``'s node with a runtime built from ``options`` until the leader says
    stop (or a signal); 0, or 1 after the one-line reason when the node cannot take part.
    The node is restored whatever happens."""
    try:
        _socket_dir(identity.socket_path)
        runtime = build_runtime(options)
    except (ValueError, OSError) as exc:
        return cannot_start(identity, str(exc))

    def modelled(report: RunReport) -> ModelledEpe:  # the job report sums the nodes'
        return options.modelled(report, runtime.policy)

    earlier = None  # read now: this node's report of the earlier job is replaced at the end
    if options.previous_job is not None:
        earlier = earlier_node_run(Path(options.previous_job), identity.node).account
    try:
        agent = NodeAgent(identity, runtime, write_files, modelled=modelled, earlier=earlier)
        return agent.run()
    except JobError as exc:
        return cannot_start(identity, str(exc))
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(identity.socket_path))  # a job's own folder, when empty


def cannot_start(identity: AgentIdentity, reason: str) -> int:
    """This node cannot take part: its one line on stderr (the launcher's log) and to the
    leader, which prints it at once instead of waiting for a hello that will not come."""
    reason = reason.removeprefix(f"node {identity.node}: ")
    print(f"{AGENT_ERROR}node {identity.node}: {reason}", file=sys.stderr, flush=True)
    tell_unable(identity, reason)
    return 1


def _socket_dir(path: str) -> None:
    """The socket's folder, private to this user (a job's node-local one may not exist)."""
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
