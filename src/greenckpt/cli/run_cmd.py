"""``greenckpt run -- COMMAND``: run an application with the energy-aware runtime active.

Why a wrapper process: the node's settings are the node's, not one rank's, and they must be put
back even when the application crashes or is killed. So the runtime lives in this process: it
starts a :class:`~greenckpt.runtime.session.Runtime` (the decision policy, the meters, the
crash-safe state file), serves the notification socket and runs the command with
``GREENCKPT_RUNTIME_SOCKET`` set. Every ``Checkpointer`` in the command (one per rank, under
``mpiexec`` too) then announces its checkpoints, flushes and restarts through that socket;
other tools can do the same with ``greenckpt notify``. When the command ends — successfully or
not — the runtime restores the node and the per-phase report is written (JSON, CSV, a
power-over-time plot) and printed. The exit status is the command's (128 + N when a signal N
ended it, as a shell reports it).

Why the signal forwarding: a batch system ends a job at its time limit with SIGTERM (then
SIGKILL after a grace period). Dying by it would leave the command running without its
runtime, the socket directory behind and no report; so SIGTERM and SIGHUP received here are
passed on to the command, the command is waited for, and the node is restored, the report
written and the socket removed as after any other end. SIGINT is forwarded the same way,
except when this process runs in the foreground of a terminal: Ctrl-C there reaches the
command itself, and a second copy could interrupt the command's own clean-up.

Why the report directory is checked first: a job of hours must not run to the end only to find
that its report cannot be written. It is created (and a probe file written and removed) before
the command starts; if it still cannot be written at the end, the report goes to a new
temporary directory, and the phase table is printed whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

from greenckpt.cli.app_env import greenckpt_on_path
from greenckpt.cli.args import (
    add_failure_arguments,
    add_meter_arguments,
    meter_names,
    open_meters,
    stated_failure_rate,
)
from greenckpt.cli.argtypes import add_hidden_alias, positive_int, unit_type
from greenckpt.cli.commands import command_help
from greenckpt.errors import InvalidValueError
from greenckpt.jsonout import dumps
from greenckpt.platform.waitchild import wait_child
from greenckpt.report.run_files import write_report_safely
from greenckpt.report.run_text import render_run_text
from greenckpt.runtime.earlier_run import EarlierRun, earlier_run
from greenckpt.runtime.fixed_policy import FixedSettings
from greenckpt.runtime.intercept import FAMILIES, intercept_environ, missing_library_note
from greenckpt.runtime.launch_slurm import cpu_freq_request
from greenckpt.runtime.modelled import with_modelled_epe
from greenckpt.runtime.node_options import NodeOptions, node_policy
from greenckpt.runtime.notify import NotifyServer
from greenckpt.runtime.policy import POLICY_NAMES, Node
from greenckpt.runtime.profiles import NamedProfile, check_storage_profiles
from greenckpt.runtime.report import BaselineRun, RunReport, load_report
from greenckpt.runtime.session import Runtime
from greenckpt.units import format_duration, parse_frequency, parse_power

FORWARDED_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
"""Signals passed on to the command (see the module docstring)."""


def register(sub: Any) -> None:
    """Add the ``run`` sub-command."""
    p = sub.add_parser(
        "run",
        help=command_help("run"),
        description="Run COMMAND (an MPI job or not) with the energy-aware runtime active: "
        "its checkpoint library announces every checkpoint, flush and restart, the runtime "
        "applies the chosen CPU frequency / I/O parallelism for it and restores the node "
        "afterwards, and a per-phase time and energy report is written at the end. SIGTERM "
        "and SIGHUP are forwarded to COMMAND; the exit status is COMMAND's.",
    )
    add_runtime_arguments(p)
    output = p.add_argument(
        "-o",
        "--output",
        dest="report",
        metavar="DIR",
        default="greenckpt-report",
        help="directory for report.json, phases.csv and power.png (default ./greenckpt-report)",
    )
    add_hidden_alias(p, output, "--report")  # the spelling before issue 18
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="REPORT",
        help="a baseline run's report.json (e.g. the same command with --policy performance): "
        "time, power, energy and EPE differences in percent (wu2018 equation 2); repeatable",
    )
    p.add_argument(
        "--previous",
        default=None,
        metavar="REPORT",
        help="the report of the earlier run this one restarts after (default: the report an "
        "earlier run left in the -o folder): the work it lost after its last checkpoint is "
        "accounted in this report, labelled as that run's (a job: its job-report.json)",
    )
    p.add_argument(
        "--intercept",
        choices=tuple(FAMILIES),
        default=None,
        help="COMMAND checkpoints with FTI, SCR or VeloC: announce its checkpoints and "
        "restarts with no code change, by preloading libgreenckpt_intercept.so "
        "(docs/intercept.md)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the report as one JSON document on stdout (COMMAND's own stdout then goes "
        "to stderr, so that stdout holds only the JSON)",
    )
    # Not dest "command": that is the sub-command's name, which error messages show.
    p.add_argument(
        "app_command", nargs=argparse.REMAINDER, metavar="COMMAND", help="-- COMMAND [ARGS...]"
    )
    from greenckpt.cli.run_job import add_job_arguments  # noqa: PLC0415 - imports run_cmd

    add_job_arguments(p)  # --nodes-emulated N: one agent per node, one job report
    p.set_defaults(run=run)


def add_runtime_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``run``: profile, policy and the scenario the profile policy needs."""
    p.add_argument(
        "--profile",
        action="append",
        default=None,
        metavar="FILE",
        help="I/O profile (greenckpt profile run); repeatable, one per storage target (e.g. "
        "node-local and global): each phase is decided from the profile of the storage its "
        "path is on",
    )
    p.add_argument(
        "--policy",
        default="profile",
        choices=POLICY_NAMES,
        help="decision policy: the profile lookup (default), a governor baseline, defaults, "
        "or fixed (the settings given by --io-processes, --frequency, --cstates)",
    )
    p.add_argument(
        "--io-processes",
        type=positive_int,
        default=None,
        help="with --policy fixed: I/O processes for every phase",
    )
    p.add_argument(
        "--frequency",
        type=unit_type(parse_frequency),
        default=None,
        help="with --policy fixed: CPU frequency for every phase, e.g. 1.4GHz",
    )
    p.add_argument(
        "--cstates",
        choices=("on", "off"),
        default=None,
        help="with --policy fixed: C-states enabled or disabled during every phase",
    )
    add_failure_arguments(
        p,
        nodes_help="nodes in the job, with --node-mtbf (default 1); with both --node-mtbf and "
        "--job-mtbf, the nodes they must agree for",
    )
    p.add_argument(
        "--app-power",
        type=unit_type(parse_power),
        default=None,
        help="the application's node power while computing, e.g. 200W (profile policy)",
    )
    p.add_argument(
        "--app-processes",
        type=positive_int,
        default=None,
        help="the application's ranks per node: those not doing a phase's I/O wait through "
        "it (their power is added to the phase, profile policy), and the governor baselines "
        "write and read with all of them (default: the profile's core count, else its "
        "largest process count)",
    )
    p.add_argument(
        "--no-control",
        action="store_true",
        help="decide and account, but never change the node's frequency or C-states",
    )
    p.add_argument(
        "--require-control",
        action="store_true",
        help="refuse to run when another greenckpt session controls the node (by default "
        "the run goes on with control off and says which session has the node)",
    )
    add_meter_arguments(p)  # --meters, --meter-csv, --tdp, --rate (alias --rate-hz)


@dataclass(frozen=True)
class FailureRate:
    """The job's failure rate and how it was stated (``--node-mtbf`` × ``--nodes`` or
    ``--job-mtbf``, or both, agreeing)."""

    rate: float
    nodes: int | None
    node_mtbf: float | None
    text: str

    @property
    def job_mtbf(self) -> float:
        return 1.0 / self.rate

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate_per_s": self.rate,
            "job_mtbf_s": self.job_mtbf,
            "node_mtbf_s": self.node_mtbf,
            "nodes": self.nodes,
            "source": "stated",
            "text": self.text,
        }


def failure_rate(ns: argparse.Namespace) -> FailureRate | None:
    """The job's failure rate from ``--node-mtbf``/``--nodes`` or ``--job-mtbf`` (None: not
    given).

    ``--node-mtbf`` (alias ``--mtbf``) is one node's MTBF and the job fails ``nodes`` times as
    often; ``--job-mtbf`` is already the whole job's, so ``--nodes`` with it alone is refused
    rather than silently ignored. Both given: they must agree (node MTBF / nodes = job MTBF).
    """
    nodes: int | None = ns.nodes
    if ns.job_mtbf is not None and ns.mtbf is None and nodes is not None:
        raise InvalidValueError(
            f"--nodes {nodes} has no effect with --job-mtbf, which is already the whole "
            "job's MTBF: give --node-mtbf (the MTBF of one node) with --nodes, or --job-mtbf "
            "alone"
        )
    if ns.job_mtbf is None and ns.mtbf is None:
        if nodes is not None:
            raise InvalidValueError(
                f"--nodes {nodes} needs --mtbf/--node-mtbf (the MTBF of one node): the job's "
                "failure rate is nodes/MTBF"
            )
        return None
    rate, n = stated_failure_rate(ns)
    if rate <= 0:
        raise InvalidValueError(
            "the MTBF is too short or too long to be a failure rate: give e.g. 14h"
        )
    if ns.job_mtbf is not None and ns.mtbf is None:
        return FailureRate(rate, None, None, f"job MTBF {format_duration(ns.job_mtbf)} (stated)")
    per_node = f"{n} node(s) × MTBF {format_duration(ns.mtbf)} per node"
    if ns.job_mtbf is not None:
        text = f"job MTBF {format_duration(ns.job_mtbf)} (stated; agrees with {per_node})"
    else:
        text = f"job MTBF {format_duration(1.0 / rate)} ({per_node}, stated)"
    return FailureRate(rate, n, ns.mtbf, text)


def load_profiles(ns: argparse.Namespace) -> tuple[NamedProfile, ...]:
    """The ``--profile`` files, each named by its path as given."""
    return NodeOptions(profiles=tuple(ns.profile or ())).named_profiles()


def fixed_settings(ns: argparse.Namespace) -> FixedSettings:
    """What ``--policy fixed`` applies, from ``--io-processes``, ``--frequency``, ``--cstates``."""
    return FixedSettings(
        io_processes=ns.io_processes,
        frequency_hz=None if ns.frequency is None else round(ns.frequency),
        cstates=None if ns.cstates is None else ns.cstates == "on",
    )


def node_options(ns: argparse.Namespace) -> NodeOptions:
    """The runtime flags of ``run`` as a node's typed options (what every node's agent
    builds its runtime from: :func:`~greenckpt.runtime.node_options.build_runtime`)."""
    rate = failure_rate(ns)
    fixed = fixed_settings(ns)
    return NodeOptions(
        policy=ns.policy,
        profiles=tuple(ns.profile or ()),
        io_processes=fixed.io_processes,
        frequency_hz=fixed.frequency_hz,
        cstates=fixed.cstates,
        app_power_w=ns.app_power,
        app_processes=ns.app_processes,
        rate_per_s=None if rate is None else rate.rate,
        control=not ns.no_control,
        require_control=ns.require_control,
        meters=tuple(meter_names(ns)),
        meter_csv=ns.meter_csv,
        tdp_w=ns.tdp,
        sample_rate_hz=ns.rate,
    )


def load_policy_inputs(ns: argparse.Namespace) -> tuple[tuple[NamedProfile, ...], Node]:
    """The profiles (none, one, or one per storage target) and this node, checked before
    anything starts."""
    profiles = load_profiles(ns)
    missing_rate = ns.mtbf is None and ns.job_mtbf is None
    if profiles and ns.policy == "profile" and (missing_rate or ns.app_power is None):
        raise InvalidValueError(
            "the profile policy needs --mtbf and --app-power (the optimizer weighs checkpoint "
            "cost against rework; --mtbf is --node-mtbf, and --job-mtbf may replace it); give "
            "both, or use --policy defaults / a governor"
        )
    check_storage_profiles(profiles)
    return profiles, Node.detect()


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: 128 + N when signal N ended it."""
    return 128 - returncode if returncode < 0 else returncode


class _Forwarder:
    """Passes the signals it catches on to the command (see the module docstring).

    Installed before the runtime starts, so a node-settings session (which restores the node
    on SIGTERM and then calls the handler it found) chains to it. ``received`` is the last
    signal caught; one caught before the command exists is sent when it is attached.
    """

    def __init__(self, signals: Sequence[int]) -> None:
        self._signals = tuple(signals)
        self._previous: dict[int, Any] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self.received: int | None = None
        self.forwarded = False

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # Python delivers signals to the main thread only
        for sig in self._signals:
            previous = signal.getsignal(sig)
            if previous == signal.SIG_IGN:  # meant to be ignored (nohup): keep it so
                continue
            self._previous[sig] = previous
            signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def attach(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        if self.received is not None:
            self._send(self.received)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        if signum == signal.SIGINT and _terminal_foreground():
            return  # the terminal sent it to the command as well
        self._send(signum)

    def _send(self, signum: int) -> None:
        """Signal the command; ``forwarded`` only when a running command was signalled."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return  # not started, or already over: nothing was forwarded
        try:
            proc.send_signal(signum)
        except OSError:
            return
        self.forwarded = True


def _terminal_foreground() -> bool:
    """True when this process group is the foreground of its controlling terminal (a
    Ctrl-C there is sent to every process of the group, the command included)."""
    try:
        with open("/dev/tty", "rb", buffering=0) as tty:
            return os.tcgetpgrp(tty.fileno()) == os.getpgrp()
    except OSError:
        return False


@dataclass(frozen=True)
class RunOutcome:
    """How the command ended: its status as a shell reports it, the signal this process
    received (None: none), whether the command was started and whether the signal was
    forwarded to it (not when a terminal's Ctrl-C reached it directly)."""

    status: int
    signal: int | None = None
    started: bool = True
    forwarded: bool = False

    @property
    def signal_name(self) -> str | None:
        return None if self.signal is None else signal.Signals(self.signal).name


def run_with_runtime(
    command: list[str],
    runtime: Runtime,
    baselines: Sequence[BaselineRun] = (),
    *,
    stdout: int | None = None,
    forward: Sequence[int] = FORWARDED_SIGNALS,
    environ: Mapping[str, str] | None = None,
) -> tuple[RunOutcome, RunReport]:
    """Run ``command`` with ``runtime`` serving the notification socket; how it ended and the
    run's report. The runtime is closed (the node restored) and the socket removed whatever
    happens; the signals in ``forward`` are passed on to the command while it runs (from the
    main thread only). ``stdout``: where the command's standard output goes (inherited when
    None); ``environ``: variables added to the command's environment."""
    forwarder = _Forwarder(forward)
    forwarder.install()
    try:
        with runtime, NotifyServer(runtime) as server, greenckpt_on_path() as own:
            if runtime.shared_with is not None:
                print(f"greenckpt run: {shared_line(runtime.shared_with)}", file=sys.stderr)
            env = {**os.environ, **own, **(environ or {}), **server.environ()}
            if forwarder.received is not None:  # stopped while the runtime started
                outcome = RunOutcome(128 + forwarder.received, forwarder.received, False)
            else:
                outcome = run_forwarded(command, env, stdout, forwarder)
        return outcome, runtime.report(baselines=baselines)
    finally:
        forwarder.uninstall()


def shared_line(holder: str) -> str:
    """The one line a run on a node another session controls prints."""
    return (
        f"shared node: another {holder} controls this node's settings; this run decides and "
        "accounts with control off"
    )


def run_forwarded(
    command: list[str], env: dict[str, str], stdout: int | None, forwarder: _Forwarder
) -> RunOutcome:
    """Start ``command``, pass it the signals ``forwarder`` catches, wait for it; how it
    ended (a command that cannot start: one line)."""
    try:
        proc = subprocess.Popen(command, env=env, stdout=stdout)
    except OSError as exc:
        raise InvalidValueError(f"cannot run {command[0]!r}: {exc.strerror}") from None
    forwarder.attach(proc)
    try:
        code = wait_child(proc)  # woken by a signal whichever thread the kernel gives it to
    except KeyboardInterrupt:  # a SIGINT that no handler here caught
        proc.send_signal(signal.SIGINT)
        code = proc.wait()
    return RunOutcome(exit_status(code), forwarder.received, forwarded=forwarder.forwarded)


def prepare_report_dir(directory: Path) -> list[Path]:
    """Make sure the report can be written before the command starts: create ``directory``
    (returning the folders created, for :func:`_remove_created`) and write and remove a probe
    file in it. ``ValueError`` (one line) when it cannot be written."""
    if directory.exists() and not directory.is_dir():
        raise InvalidValueError(
            f"--output {directory} exists and is not a directory; give a directory"
        )
    created = [p for p in (directory, *directory.parents) if not p.exists()]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".greenckpt-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        _remove_created(created)
        raise InvalidValueError(
            f"--output {directory}: cannot write the report there ({exc.strerror or exc}); "
            "give a directory you can write to"
        ) from None
    return created


def _remove_created(created: Sequence[Path]) -> None:
    for path in created:  # deepest first; only what is still empty
        with contextlib.suppress(OSError):
            path.rmdir()


def _program(command: Sequence[str]) -> None:
    """Refuse a program that does not exist before anything starts (nothing changed)."""
    if shutil.which(command[0]) is None:
        what = "no such file or not executable" if os.sep in command[0] else "not found on PATH"
        raise InvalidValueError(f"cannot run {command[0]!r}: {what}")


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt run``."""
    command = list(ns.app_command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InvalidValueError(
            "give the command to run after --, e.g. greenckpt run -- mpiexec -n 4 python app.py"
        )
    if getattr(ns, "nodes_emulated", None) is not None or getattr(ns, "launcher", None):
        from greenckpt.cli.run_job import run_job  # noqa: PLC0415 - imports run_cmd

        return run_job(ns, command)
    rate = failure_rate(ns)
    profiles, node = load_policy_inputs(ns)
    baselines = [BaselineRun.from_report(load_report(path), label=f"{path}") for path in ns.compare]
    _program(command)
    environ = _intercept(ns.intercept, command)
    node, slurm_note = _slurm_frequency(node, command)
    options = node_options(ns)  # the meter flags agree, checked before anything is created
    policy = node_policy(options, node, profiles)
    directory = Path(ns.report)
    earlier = earlier_run(ns.previous, directory)  # before this run's report replaces it
    created = prepare_report_dir(directory)
    try:
        with open_meters(ns) as meters:
            runtime = Runtime(
                policy,
                control=not ns.no_control,
                node=node,
                meters=meters,
                rate_hz=ns.rate,
                require_control=ns.require_control,
            )
            outcome, report = run_with_runtime(
                command, runtime, baselines, stdout=2 if ns.json else None, environ=environ
            )
    except Exception:  # the command did not run (or the runtime could not start)
        _remove_created(created)
        raise
    modelled = options.modelled(report, policy)
    report = _ended_report(with_modelled_epe(report, modelled), outcome, earlier, slurm_note)
    if ns.json:
        paths, problem = write_report_safely(report, directory)
        doc = {
            "command": command,
            "exit_status": outcome.status,
            "signal": outcome.signal_name,
            "failure_rate": None if rate is None else rate.to_dict(),
            "modelled_epe": modelled.to_dict(),
            "files": [str(p) for p in paths],
            "report_error": problem,
            "report": report.to_dict(include_trace=False),
        }
        print(dumps(doc), flush=True)
    else:
        print(render_run_text(report), flush=True)  # first: the table is never lost
        paths, problem = write_report_safely(report, directory)
        if paths:
            print("report: " + ", ".join(str(p) for p in paths))
    if problem is not None:
        print(f"greenckpt run: error: {problem}", file=sys.stderr)
    if outcome.signal_name is not None:
        print(f"greenckpt run: {signal_note(outcome)}", file=sys.stderr)
    elif outcome.status != 0:
        print(
            f"greenckpt run: the command exited with status {outcome.status}; the node was "
            "restored and the report covers what ran",
            file=sys.stderr,
        )
    return outcome.status


def _ended_report(
    report: RunReport, outcome: RunOutcome, earlier: EarlierRun | None, slurm_note: str | None
) -> RunReport:
    """The run's report with how the command ended, the work an earlier run lost (when this
    run restarted from its checkpoint), and the notes of the signal and Slurm."""
    report = replace(report, exit_status=outcome.status, signal=outcome.signal_name)
    if earlier is not None:
        report = earlier.account(report)
    if outcome.signal_name is not None:
        report = _with_note(report, signal_note(outcome))
    if slurm_note is not None:
        report = _with_note(report, slurm_note)
    return report


def _slurm_frequency(node: Node, command: Sequence[str]) -> tuple[Node, str | None]:
    """Slurm was asked to set the CPU frequency (``srun --cpu-freq``, ``$SLURM_CPU_FREQ_REQ``):
    Slurm's setting wins, as with ``--launcher slurm``; the runtime leaves the frequency alone
    (one line now, a note in the report)."""
    asked = cpu_freq_request(os.environ, command)
    if asked is None:
        return node, None
    text = (
        f"Slurm was asked to set the CPU frequency (--cpu-freq={asked}): Slurm's setting wins; "
        "the runtime leaves the frequency alone and decides and accounts without frequency "
        "control (C-states stay greenckpt's)"
    )
    print(f"greenckpt run: {text}", file=sys.stderr, flush=True)
    return replace(node, frequency_control=False), text


def _intercept(family: str | None, command: Sequence[str]) -> dict[str, str]:
    """``--intercept``: the environment that preloads the interposition library, after one
    line on stderr when no program in the command links the library (the run goes on)."""
    if family is None:
        return {}
    environ = intercept_environ(family, os.environ)
    note = missing_library_note(family, command)
    if note is not None:
        print(f"greenckpt run: {note}", file=sys.stderr, flush=True)
    return environ


def signal_note(outcome: RunOutcome) -> str:
    if not outcome.started:
        return f"{outcome.signal_name} received before the command started: it was not run"
    how = (
        "received and forwarded to the command, which ended"
        if outcome.forwarded
        else "received (the terminal sent it to the command as well); the command ended"
    )
    return (
        f"{outcome.signal_name} {how} with status {outcome.status}; the node was restored "
        "and the report covers what ran"
    )


def _with_note(report: RunReport, note: str) -> RunReport:
    return replace(report, notes=(*report.notes, note))
