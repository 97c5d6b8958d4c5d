"""``--launcher mpiexec``: one agent per host through the MPI launcher, where there is no
batch system that starts them (a workstation cluster, a cloud allocation, a job started by
hand).

Why mpiexec: it is how such a job reaches its hosts already, and MPICH's wheel puts one beside
the interpreter. One ``mpiexec -n N -ppn 1 -hosts H1,...,HN greenckpt agent --node mpi`` step
starts an agent on each host (Hydra's flags; its rank is the node index), in the background
of the job's own ``mpiexec``. The ranks' socket is node-local and per job, the same path on
every host (:func:`job_socket`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from greenckpt.errors import InvalidValueError
from greenckpt.runtime.launch import AgentHandle, AgentSpec, StepHandle, start_step

__all__ = ["MpiexecHandle", "MpiexecLauncher", "job_socket", "parse_hosts"]

_HOST = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})$")


def parse_hosts(text: str) -> tuple[str, ...]:
    """``--agent-hosts H1,H2,...``: one agent per host, in node order; one-line error for an
    empty list, an empty or malformed name, or a host named twice (two agents on one host
    would take the same node-local socket)."""
    hosts = tuple(h.strip() for h in text.split(","))
    if not text.strip() or any(not h for h in hosts):
        raise InvalidValueError(
            f"--agent-hosts {text!r}: give the job's hosts separated by commas, e.g. n01,n02"
        )
    for host in hosts:
        if not _HOST.match(host):
            raise InvalidValueError(f"--agent-hosts: {host!r} is not a host name")
    twice = sorted({h for h in hosts if hosts.count(h) > 1})
    if twice:
        raise InvalidValueError(
            f"--agent-hosts names {', '.join(twice)} more than once: one agent per host (to "
            "emulate nodes on one machine, use --nodes-emulated)"
        )
    return hosts


def job_socket(job_id: str, uid: int | None = None) -> str:
    """The node-local socket of a job's agent: the same path on every host, one per job and
    user."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", job_id):
        raise InvalidValueError(f"job id {job_id!r} must be letters, digits, '.', '_' or '-'")
    user = os.getuid() if uid is None else uid
    return f"/tmp/greenckpt-{user}/job-{job_id}/agent.sock"


class MpiexecHandle(StepHandle):
    """A node's share of the agents' mpiexec step (Hydra's own lines only say that a process
    ended; an agent's start with ``greenckpt agent``)."""

    def own_line(self, line: str) -> bool:
        return line.startswith("greenckpt agent")


class MpiexecLauncher:
    """One ``mpiexec`` step with one agent per host (MPICH Hydra's ``-ppn 1 -hosts``)."""

    name = "mpiexec"

    def __init__(self, hosts: Sequence[str], mpiexec: str = "mpiexec") -> None:
        self.hosts = tuple(hosts)
        self.mpiexec = mpiexec

    def argv(self, spec: AgentSpec) -> list[str]:
        return [
            self.mpiexec,
            "-n",
            str(spec.nodes),
            "-ppn",
            "1",
            "-hosts",
            ",".join(self.hosts),
            *spec.argv(None),
        ]

    def start(self, spec: AgentSpec) -> list[AgentHandle]:
        return start_step(self.argv(spec), spec, MpiexecHandle)
