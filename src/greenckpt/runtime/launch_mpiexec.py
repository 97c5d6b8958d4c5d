"""``--launcher mpiexec``: one agent per host through the MPI launcher, where there is no
batch system that starts them (a workstation cluster, a cloud allocation, a job started by
hand).

Why mpiexec: it is how such a job reaches its hosts already, and MPICH's wheel (or Open MPI's)
puts one beside the interpreter. One ``mpiexec -n N -ppn 1 -hosts H1,...,HN greenckpt agent
--node mpi`` step starts an agent on each host (Hydra's flags; its rank is the node index), in
the background of the job's own ``mpiexec``. The ranks' socket is node-local and per job, the
same path on every host (:func:`job_socket`).

Open MPI's launcher takes other flags for the same step (:func:`mpi_flavour` tells them apart
by ``--version``): ``--map-by ppr:1:node --host H1,...,HN`` for one process per host,
``--bind-to none`` (an agent is no compute rank: pinned, it would share a core with one),
``-x NAME`` for the job token and greenckpt's other variables (unlike Hydra it forwards no
environment to other hosts), and ``--allow-run-as-root`` when greenckpt runs as root (which an
agent that sets CPU frequencies usually needs; Open MPI refuses root without it).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from typing import Literal

from greenckpt.errors import InvalidValueError
from greenckpt.runtime.job import TOKEN_ENV
from greenckpt.runtime.launch import AgentHandle, AgentSpec, StepHandle, start_step

__all__ = [
    "Flavour",
    "MpiexecHandle",
    "MpiexecLauncher",
    "forwarded",
    "job_socket",
    "mpi_flavour",
    "parse_hosts",
]

Flavour = Literal["mpich", "openmpi"]
"""Whose flags a launcher takes: MPICH's Hydra (also Intel MPI's) or Open MPI's."""

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


def mpi_flavour(mpiexec: str) -> Flavour:
    """Whose flags ``mpiexec`` takes: Open MPI's launcher names itself in ``--version``
    (``mpirun (Open MPI) 5.0.11``); anything else — MPICH's Hydra, Intel MPI's, a launcher
    that does not answer — gets Hydra's flags, as before Open MPI was known."""
    try:
        done = subprocess.run(
            [mpiexec, "--version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return "mpich"
    return "openmpi" if "Open MPI" in done.stdout + done.stderr else "mpich"


def forwarded(environ: Mapping[str, str]) -> list[str]:
    """The variables an agent needs from the leader's environment: the job token (set for
    the step by :func:`start_step`) and every ``GREENCKPT_*`` set here (a sysfs root, the
    node-lock wait). Hydra forwards the whole environment; Open MPI only what ``-x`` names."""
    return sorted({TOKEN_ENV, *(k for k in environ if k.startswith("GREENCKPT_"))})


class MpiexecHandle(StepHandle):
    """A node's share of the agents' mpiexec step (the launcher's own lines only say that a
    process ended, Hydra's and Open MPI's alike; an agent's start with ``greenckpt agent``)."""

    def own_line(self, line: str) -> bool:
        return line.startswith("greenckpt agent")


class MpiexecLauncher:
    """One ``mpiexec`` step with one agent per host: MPICH Hydra's ``-ppn 1 -hosts``, or Open
    MPI's ``--map-by ppr:1:node --host`` (``flavour``; None: asked of ``mpiexec`` itself when
    the step starts)."""

    name = "mpiexec"

    def __init__(
        self, hosts: Sequence[str], mpiexec: str = "mpiexec", flavour: Flavour | None = None
    ) -> None:
        self.hosts = tuple(hosts)
        self.mpiexec = mpiexec
        self.flavour = flavour

    def argv(self, spec: AgentSpec) -> list[str]:
        if self.flavour is None:
            self.flavour = mpi_flavour(self.mpiexec)
        flags = self._openmpi_flags() if self.flavour == "openmpi" else self._hydra_flags()
        return [self.mpiexec, "-n", str(spec.nodes), *flags, *spec.argv(None)]

    def _hydra_flags(self) -> list[str]:
        """One process per host, on these hosts; Hydra forwards the whole environment."""
        return ["-ppn", "1", "-hosts", ",".join(self.hosts)]

    def _openmpi_flags(self) -> list[str]:
        """One unbound process per host, on these hosts, with greenckpt's variables; as root,
        the flag without which Open MPI refuses to start anything."""
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        exported = [flag for name in forwarded(os.environ) for flag in ("-x", name)]
        return [
            "--map-by",
            "ppr:1:node",
            "--bind-to",
            "none",
            "--host",
            ",".join(self.hosts),
            *root,
            *exported,
        ]

    def start(self, spec: AgentSpec) -> list[AgentHandle]:
        return start_step(self.argv(spec), spec, MpiexecHandle)
