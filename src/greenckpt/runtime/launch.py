"""Starting one agent per node of a job: the launchers.

Why an interface: where the agents run is the batch system's business — ``local:N`` starts N
agents on this machine (emulated nodes: tests, the demo, a laptop), ``slurm``
(:mod:`greenckpt.runtime.launch_slurm`: ``srun --ntasks-per-node=1 ... greenckpt agent``, the
node index from ``SLURM_NODEID``) and ``mpiexec`` (:mod:`greenckpt.runtime.launch_mpiexec`: one
agent per host, the node index its rank). Each gets the
same :class:`AgentSpec` and returns one :class:`AgentHandle` per node it started, which the
leader polls for an agent that died before its ``hello``. Design: docs/design/cluster.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from greenckpt.errors import InvalidValueError
from greenckpt.runtime.job import TOKEN_ENV

__all__ = [
    "AGENT_ERROR",
    "AgentHandle",
    "AgentSpec",
    "Launcher",
    "LocalLauncher",
    "StepHandle",
    "agent_socket",
    "parse_launcher",
    "reason_of",
    "start_step",
]


AGENT_ERROR = "greenckpt agent: error: "
"""How an agent's one line on stderr begins when it cannot start (then ``node K: REASON``)."""
_AGENT_LINE = re.compile(r"greenckpt agent: error: node \d+: ")


def reason_of(line: str) -> str:
    """An agent's log line as the reason its node is unmanaged: without the prefix that
    names the agent and its node (the leader's line names the node), so the reason reads
    the same whether the agent's own message or its log told the leader."""
    return _AGENT_LINE.sub("", line, count=1)


def agent_socket(template: str, node: int) -> str:
    """The socket path of ``node``: every ``{node}`` in ``template`` replaced by its index
    (the rule the clients apply; see ``SocketHook``)."""
    return template.replace("{node}", str(node))


@dataclass(frozen=True)
class AgentSpec:
    """What every agent of a job is told: the job, the leader, the socket template (a path
    with ``{node}``), where node reports go (``<output>/nodes/node<k>``), the runtime's flags
    (``agent_args``) and flags for one node only (``node_args(k)``, e.g. its fake sysfs
    tree). The token travels in the environment, never on a command line."""

    job_id: str
    nodes: int
    leader: str
    token: str
    socket_template: str
    output: Path
    agent_args: tuple[str, ...] = ()
    node_args: Callable[[int], Sequence[str]] = field(default=lambda _k: ())
    log_dir: Path | None = None
    node_source: str = "slurm"

    def argv(self, node: int | None) -> list[str]:
        """``greenckpt agent`` for ``node``; None: the same command line for every node, the
        agent taking its index from the launcher (``node_source``: ``slurm`` for
        ``$SLURM_NODEID``, ``mpi`` for the MPI launcher's rank) and putting it for ``{node}``
        in its paths (``node_args`` then gets -1)."""
        label = "{node}" if node is None else str(node)
        return [
            sys.executable,
            "-m",
            "greenckpt",
            "agent",
            "--node",
            self.node_source if node is None else label,
            "--job-id",
            self.job_id,
            "--socket",
            self.socket_template if node is None else agent_socket(self.socket_template, node),
            "--leader",
            self.leader,
            "--output",
            str(self.output / "nodes" / f"node{label}"),
            *self.agent_args,
            *self.node_args(-1 if node is None else node),
        ]


@dataclass
class AgentHandle:
    """One started agent: its node, process and log (where its one-line failure is)."""

    node: int
    process: subprocess.Popen[bytes]
    log: Path | None = None

    def failure(self) -> str | None:
        """Why the agent ended (its last log line), or None while it runs."""
        code = self.process.poll()
        if code is None:
            return None
        last = ""
        if self.log is not None:
            with contextlib.suppress(OSError):
                lines = self.log.read_text(errors="replace").strip().splitlines()
                last = lines[-1].strip() if lines else ""
        return reason_of(last) or f"its agent exited with status {code} before it reported"

    def stop(self, timeout: float) -> None:
        """SIGTERM (the agent restores its node and reports), then SIGKILL after ``timeout``."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(OSError):
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                self.process.kill()
            self.process.wait()


class StepHandle(AgentHandle):
    """A node's share of one launcher step that starts every node's agent (``srun``,
    ``mpiexec``): its failure is the last line an agent printed, not the launcher's own lines
    (``srun: error: ... exited`` only says that one did). Subclasses say which lines are the
    launcher's (:meth:`own_line`)."""

    def own_line(self, line: str) -> bool:
        """Whether ``line`` (stripped, not empty) of the step's log is an agent's."""
        return True

    def failure(self) -> str | None:
        if self.process.poll() is None:
            return None
        lines: list[str] = []
        if self.log is not None:
            with contextlib.suppress(OSError):
                lines = self.log.read_text(errors="replace").strip().splitlines()
        own = [x.strip() for x in lines if x.strip() and self.own_line(x.strip())]
        return reason_of(own[-1]) if own else super().failure()


def start_step(argv: Sequence[str], spec: AgentSpec, handle: type[StepHandle]) -> list[AgentHandle]:
    """Start the one launcher step ``argv`` that runs every node's agent (in its own session,
    the job token in its environment, its output in ``<log_dir>/agents.log``); one handle
    per node, all on that step."""
    env = {**os.environ, TOKEN_ENV: spec.token}
    log = None if spec.log_dir is None else Path(spec.log_dir) / "agents.log"
    with contextlib.ExitStack() as stack:
        err = stack.enter_context(open(log, "wb")) if log is not None else None
        proc = subprocess.Popen(
            list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err if err is not None else subprocess.DEVNULL,
            start_new_session=True,
        )
    return [handle(node, proc, log) for node in range(spec.nodes)]


class Launcher(Protocol):
    """Starts one agent per node (local processes, one srun step, one mpiexec step)."""

    name: str

    def start(self, spec: AgentSpec) -> list[AgentHandle]:
        """Start the agents of ``spec``; one handle per agent started."""
        ...


class LocalLauncher:
    """``local:N``: N agent processes on this machine, one per emulated node, each in its own
    session (a terminal's Ctrl-C reaches the command, and the leader stops the agents)."""

    name = "local"

    def start(self, spec: AgentSpec) -> list[AgentHandle]:
        env = {**os.environ, TOKEN_ENV: spec.token}
        handles: list[AgentHandle] = []
        for node in range(spec.nodes):
            log = None if spec.log_dir is None else spec.log_dir / f"agent-node{node}.log"
            with contextlib.ExitStack() as stack:
                err = stack.enter_context(open(log, "wb")) if log is not None else None
                proc = subprocess.Popen(
                    spec.argv(node),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err if err is not None else subprocess.DEVNULL,
                    start_new_session=True,
                )
            handles.append(AgentHandle(node, proc, log))
        return handles


def parse_launcher(text: str) -> tuple[Launcher, int]:
    """``local:N`` -> the launcher and N; InvalidValueError (one line) otherwise (``slurm``
    takes its nodes from the allocation: :mod:`greenckpt.runtime.launch_slurm`)."""
    name, _, count = text.partition(":")
    if name == "local" and count.isdigit() and int(count) >= 1:
        return LocalLauncher(), int(count)
    raise InvalidValueError(
        f"launcher {text!r} is not one this greenckpt knows: give local:N (N emulated nodes "
        "on this machine, N >= 1), or slurm inside a Slurm allocation"
    )
