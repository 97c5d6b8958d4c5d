"""Run a command under the energy-aware runtime, on this node or on a job's nodes: :func:`run`.

Why one library function: ``greenckpt run``, ``greenckpt study``, the demo, a Slurm plugin and
a user's own scripts all need "run this command under the runtime, on these nodes, and give me
its report"; each front end only says what (the command, typed
:class:`~greenckpt.runtime.node_options.NodeOptions`, where the report goes) and renders what
comes back (:class:`JobOutcome`). None of them starts ``greenckpt run`` as a subprocess.

On this node (``nodes`` None, no launcher) the runtime lives in this process: it starts a
:class:`~greenckpt.runtime.session.Runtime`, serves the notification socket and runs the
command with ``GREENCKPT_RUNTIME_SOCKET`` set (:func:`~greenckpt.runtime.command.run_with_runtime`);
the outcome holds the run's :class:`~greenckpt.runtime.run_report.RunReport`. On a job's nodes
(``nodes`` N emulated on this machine, or ``launcher`` ``slurm``/``mpiexec``) this process is
the job's leader: it starts the collector and one agent per node
(:mod:`greenckpt.runtime.job_agents`), runs the command with the socket template naming each
node's socket, stops the agents and builds ONE :class:`~greenckpt.runtime.job_report.JobReport`
(each node's own report is under ``report_dir/nodes/node<k>/``, written by its agent).

Everything is checked before anything starts (the profiles, the program, the report folder,
an earlier run's report); the report files of the run itself are the caller's to write
(``greenckpt.report.run_files``, ``greenckpt.report.job_files``), after it has shown them.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from greenckpt.ckpt.notify_client import SOCKET_ENV
from greenckpt.errors import InvalidValueError
from greenckpt.platform.meters.base import MeterOptions
from greenckpt.platform.meters.detect import select_meters
from greenckpt.platform.root import SysRoot
from greenckpt.runtime import job_agents
from greenckpt.runtime.app_env import greenckpt_on_path
from greenckpt.runtime.command import (
    Forwarder,
    Output,
    RunOutcome,
    Say,
    check_program,
    intercept_env,
    prepare_report_dir,
    remove_created,
    run_forwarded,
    run_with_runtime,
    say_on_stderr,
    signal_note,
    slurm_frequency,
)
from greenckpt.runtime.earlier_run import EarlierRun, earlier_job, earlier_run
from greenckpt.runtime.job import JobCollector
from greenckpt.runtime.job_report import JobReport, load_job_report
from greenckpt.runtime.launch import AgentSpec
from greenckpt.runtime.modelled import ModelledEpe, with_modelled_epe
from greenckpt.runtime.node_options import NodeOptions, node_policy
from greenckpt.runtime.policy import Node
from greenckpt.runtime.profiles import NamedProfile, check_storage_profiles
from greenckpt.runtime.run_report import BaselineRun, RunReport, load_report
from greenckpt.runtime.session import Runtime

__all__ = ["LAUNCHERS", "JobOutcome", "check_inputs", "run"]

LAUNCHERS = ("local", "slurm", "mpiexec")
"""Where a job's agents can run: ``local`` (``nodes`` emulated nodes on this machine), ``slurm``
(the allocation's nodes, through srun), ``mpiexec`` (one per host of ``agent_hosts``)."""


@dataclass(frozen=True)
class JobOutcome:
    """What :func:`run` gives back: the command, its exit status as a shell reports it (128 + N
    after signal N), the report (a :class:`RunReport` on this node, a :class:`JobReport` for a
    job's nodes), the folder the report belongs in, how the command ended (``process``: the
    signal received, whether it was forwarded) and, on this node, the model's EPE at the run's
    interval (``modelled``)."""

    command: tuple[str, ...]
    status: int
    report: RunReport | JobReport
    report_dir: Path
    process: RunOutcome
    modelled: ModelledEpe | None = None

    @property
    def signal(self) -> str | None:
        """The name of the signal that ended the run (e.g. ``SIGTERM``), or None."""
        return self.process.signal_name

    @property
    def is_job(self) -> bool:
        """Whether the run was a job's (agents, a :class:`JobReport`)."""
        return isinstance(self.report, JobReport)


def run(
    command: Sequence[str],
    *,
    nodes: int | None = None,
    launcher: str | None = None,
    options: NodeOptions | None = None,
    policy: str | None = None,
    profiles: Sequence[str] | None = None,
    report_dir: str | os.PathLike[str] = "greenckpt-report",
    compare: Sequence[str] = (),
    previous: str | None = None,
    intercept: str | None = None,
    agent_hosts: str | Sequence[str] | None = None,
    node_root: str | None = None,
    environ: Mapping[str, str] | None = None,
    stdout: Output = None,
    stderr: Output = None,
    say: Say = say_on_stderr,
) -> JobOutcome:
    """Run ``command`` under the energy-aware runtime and return how it ended and its report.

    ``nodes``: None runs on this node, in this process; N runs a job over N emulated nodes on
    this machine (one agent process per node). ``launcher``: ``slurm`` or ``mpiexec`` for a
    real job's nodes (``agent_hosts`` for mpiexec), ``local`` (the default with ``nodes``).
    ``options``: the node runtime's typed options (policy, profiles, scenario, control, meters;
    ``policy`` and ``profiles`` replace theirs). ``report_dir``: checked writable now; a job's
    node reports go under it, and an earlier run's report there is the one this run restarts
    after unless ``previous`` names it. ``compare``: baseline reports (time, power, energy and
    EPE differences). ``intercept``: ``fti``, ``scr`` or ``veloc`` (no code change).
    ``environ``: variables added to the command's environment; ``stdout``/``stderr``: where its
    output goes (inherited when None); ``say``: where one-line messages go (default:
    ``greenckpt run: ...`` on stderr). A command that ends badly is an outcome (its status),
    not an exception; InvalidValueError (one line) for what cannot start.
    """
    opts = options if options is not None else NodeOptions()
    if policy is not None:
        opts = replace(opts, policy=policy)
    if profiles is not None:
        opts = replace(opts, profiles=tuple(profiles))
    argv = list(command)
    if not argv:
        raise InvalidValueError("give the command to run, e.g. mpiexec -n 4 python app.py")
    if launcher is not None and launcher not in LAUNCHERS:
        raise InvalidValueError(f"launcher {launcher!r} is not one of {', '.join(LAUNCHERS)}")
    if launcher == "local" and nodes is None:
        raise InvalidValueError("the local launcher needs nodes: the emulated nodes to run on")
    if nodes is not None and (isinstance(nodes, bool) or nodes < 1):
        raise InvalidValueError(f"nodes must be an integer >= 1, got {nodes!r}")
    job = _Job(
        argv, opts, Path(report_dir), tuple(compare), previous, intercept, dict(environ or {})
    )
    if nodes is None and launcher in (None, "local"):
        return _run_node(job, stdout, stderr, say)
    return _run_job(job, nodes, launcher, agent_hosts, node_root, stdout, stderr, say)


@dataclass(frozen=True)
class _Job:
    command: list[str]
    options: NodeOptions
    directory: Path
    compare: tuple[str, ...]
    previous: str | None
    intercept: str | None
    environ: dict[str, str]


def check_inputs(options: NodeOptions) -> tuple[NamedProfile, ...]:
    """The profiles (none, one, or one per storage target), loaded and checked before
    anything starts: the profile policy needs a failure rate and the application's power."""
    profiles = options.named_profiles()
    missing = options.rate_per_s is None or options.app_power_w is None
    if profiles and options.policy == "profile" and missing:
        raise InvalidValueError(
            "the profile policy needs --mtbf and --app-power (the optimizer weighs checkpoint "
            "cost against rework; --mtbf is --node-mtbf, and --job-mtbf may replace it); give "
            "both, or use --policy defaults / a governor"
        )
    check_storage_profiles(profiles)
    return profiles


def _run_node(job: _Job, stdout: Output, stderr: Output, say: Say) -> JobOutcome:
    """The command on this node, the runtime in this process."""
    options = job.options
    profiles = check_inputs(options)
    if options.root is not None and not os.path.isdir(options.root):
        raise InvalidValueError(f"the sysfs root {options.root} is not a directory")
    root = SysRoot.default(options.root)  # an emulated node's tree, else $GREENCKPT_SYSROOT or /
    node = Node.detect(root)
    baselines = [BaselineRun.from_report(load_report(p), label=f"{p}") for p in job.compare]
    check_program(job.command)
    environ = {**job.environ, **intercept_env(job.intercept, job.command, say)}
    node, slurm_note = slurm_frequency(node, job.command, say)
    if not options.frequency_control:
        node = replace(node, frequency_control=False)
    policy = node_policy(options, node, profiles)
    earlier = earlier_run(job.previous, job.directory)  # before this run's report replaces it
    created = prepare_report_dir(job.directory)
    meter_options = MeterOptions(
        csv_path=None if options.meter_csv is None else os.path.abspath(options.meter_csv),
        tdp_w=options.tdp_w,
    )
    try:
        with select_meters(list(options.meters), options=meter_options) as meters:
            runtime = Runtime(
                policy,
                root=root,
                state_file=None if options.state_file is None else Path(options.state_file),
                control=options.control,
                node=node,
                meters=meters,
                rate_hz=options.sample_rate_hz,
                require_control=options.require_control,
            )
            outcome, report = run_with_runtime(
                job.command,
                runtime,
                baselines,
                stdout=stdout,
                stderr=stderr,
                environ=environ,
                say=say,
            )
    except Exception:  # the command did not run (or the runtime could not start)
        remove_created(created)
        raise
    modelled = options.modelled(report, policy)
    report = _ended_report(with_modelled_epe(report, modelled), outcome, earlier, slurm_note)
    return JobOutcome(tuple(job.command), outcome.status, report, job.directory, outcome, modelled)


def _ended_report(
    report: RunReport, outcome: RunOutcome, earlier: EarlierRun | None, slurm_note: str | None
) -> RunReport:
    """The run's report with how the command ended, the work an earlier run lost (when this
    run restarted from its checkpoint), and the notes of the signal and Slurm."""
    report = replace(report, exit_status=outcome.status, signal=outcome.signal_name)
    if earlier is not None:
        report = earlier.account(report)
    notes = [signal_note(outcome)] if outcome.signal_name is not None else []
    if slurm_note is not None:
        notes.append(slurm_note)
    return replace(report, notes=(*report.notes, *notes)) if notes else report


def _run_job(
    job: _Job,
    nodes: int | None,
    launcher: str | None,
    agent_hosts: str | Sequence[str] | None,
    node_root: str | None,
    stdout: Output,
    stderr: Output,
    say: Say,
) -> JobOutcome:
    """The command over a job's nodes, one agent per node, this process the leader."""
    check_inputs(job.options)
    baselines = [(str(path), load_job_report(path)) for path in job.compare]
    check_program(job.command)
    environ = {**job.environ, **intercept_env(job.intercept, job.command, say)}
    notes: list[str] = []
    options, found = _agent_options(job, notes, say)
    sock_dir = tempfile.mkdtemp(prefix="greenckpt-job-")
    try:
        if launcher == "slurm":
            setup = job_agents.slurm_setup(nodes, node_root, job.command)
        elif launcher == "mpiexec":
            setup = job_agents.mpiexec_setup(nodes, node_root, agent_hosts)
        else:
            assert nodes is not None
            setup = job_agents.local_setup(nodes, node_root, options, sock_dir, notes)
        created = prepare_report_dir(job.directory)
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
                output=job.directory,
                agent_args=tuple(job_agents.agent_args(options)),
                node_args=setup.node_args,
                log_dir=Path(sock_dir),
                node_source=setup.node_source,
            )
            handles = setup.launcher.start(spec)
            try:
                job_agents.await_agents(collector, handles, say, job_agents.HELLO_SECONDS)
                with greenckpt_on_path() as own:
                    env = {**os.environ, **own, **environ, SOCKET_ENV: spec.socket_template}
                    collector.go_all()  # the agents' start-up ends: the command's time
                    outcome = _run_command(job.command, env, stdout, stderr)
            finally:
                job_agents.stop_agents(collector, handles, job_agents.FINAL_SECONDS)
            kept = job_agents.keep_agent_logs(collector, Path(sock_dir), job.directory)
            report = JobReport.build(
                job_id=setup.job_id,
                launcher=setup.label,
                command=job.command,
                nodes=collector.nodes(),
                phases=collector.phases(),
                started_unix=collector.started_unix,
                ended_unix=time.time(),
                exit_status=outcome.status,
                notes=[
                    *notes,
                    *job_agents.previous_notes(job.previous, found, collector),
                    *job_agents.ending_notes(outcome),
                    *collector.notes,
                    *([kept] if kept else []),
                ],
                ended=job_agents.ended(outcome),
                baselines=baselines,
            )
            if setup.scheduler is not None:
                report.doc["job"]["scheduler"] = setup.scheduler
    except Exception:
        remove_created(created)
        raise
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
    return JobOutcome(tuple(job.command), outcome.status, report, job.directory, outcome)


def _agent_options(job: _Job, notes: list[str], say: Say) -> tuple[NodeOptions, Path | None]:
    """What every agent builds its runtime from: the job's options with the earlier job's
    report (the work its node's run lost there; read before this job replaces it) and, when
    Slurm was asked to set the CPU frequency, without frequency control."""
    options = job.options
    found, note = earlier_job(job.previous, job.directory)
    if note is not None:
        notes.append(note)
    if found is not None:
        options = dataclasses.replace(options, previous_job=str(found))
    cpu_note = job_agents.cpu_freq_note(job.command, say)
    if cpu_note is not None:
        options = dataclasses.replace(options, frequency_control=False)
        notes.append(cpu_note)
    return options, found


def _run_command(
    command: list[str], env: dict[str, str], stdout: Output, stderr: Output
) -> RunOutcome:
    forwarder = Forwarder()
    forwarder.install()
    try:
        return run_forwarded(command, env, stdout, forwarder, stderr)
    finally:
        forwarder.uninstall()
