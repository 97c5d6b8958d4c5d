"""``greenckpt run -- COMMAND``: run an application with the energy-aware runtime active.

Why a wrapper process: the node's settings are the node's, not one rank's, and they must be put
back even when the application crashes or is killed. So the runtime lives in this process: it
starts a :class:`~greenckpt.runtime.session.Runtime` (the decision policy, the meters, the
crash-safe state file), serves the notification socket and runs the command with
``GREENCKPT_RUNTIME_SOCKET`` set. Every ``Checkpointer`` in the command (one per rank, under
``mpiexec`` too) then announces its checkpoints, flushes and restarts through that socket;
other tools can do the same with ``greenckpt notify``. When the command ends — successfully or
not — the runtime restores the node and the per-phase report is written (JSON, CSV, a
power-over-time plot) and printed. The exit status is the command's.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from greenckpt.cli.args import positive_float, unit_type
from greenckpt.optimize.profile import Profile, load_profile
from greenckpt.runtime.notify import NotifyServer
from greenckpt.runtime.policy import POLICY_NAMES, Node, make_policy
from greenckpt.runtime.report import BaselineRun, RunReport, load_report
from greenckpt.runtime.session import Runtime
from greenckpt.units import parse_duration, parse_power


def register(sub: Any) -> None:
    """Add the ``run`` sub-command."""
    p = sub.add_parser(
        "run",
        help="run a command with energy-aware checkpoints and restarts, then report per phase",
        description="Run COMMAND (an MPI job or not) with the energy-aware runtime active: "
        "its checkpoint library announces every checkpoint, flush and restart, the runtime "
        "applies the chosen CPU frequency / I/O parallelism for it and restores the node "
        "afterwards, and a per-phase time and energy report is written at the end.",
    )
    add_runtime_arguments(p)
    p.add_argument(
        "--report",
        default="greenckpt-report",
        help="directory for report.json, phases.csv and power.png (default ./greenckpt-report)",
    )
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="REPORT",
        help="a baseline run's report.json (e.g. the same command with --policy performance): "
        "time, power, energy and EPE differences in percent (wu2018 equation 2); repeatable",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    p.set_defaults(run=run)


def add_runtime_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by ``run`` and ``demo``: profile, policy and the scenario it needs."""
    p.add_argument("--profile", help="I/O profile of this node (greenckpt profile run)")
    p.add_argument(
        "--policy",
        default="profile",
        choices=POLICY_NAMES,
        help="decision policy: the profile lookup (default) or a governor baseline",
    )
    p.add_argument(
        "--mtbf",
        type=unit_type(parse_duration),
        default=None,
        help="the job's mean time between failures, e.g. 14h (needed by the profile policy)",
    )
    p.add_argument(
        "--app-power",
        type=unit_type(parse_power),
        default=None,
        help="the application's node power while computing, e.g. 200W (profile policy)",
    )
    p.add_argument(
        "--no-control",
        action="store_true",
        help="decide and account, but never change the node's frequency or C-states",
    )
    p.add_argument(
        "--rate-hz", type=positive_float, default=10.0, help="power sampling rate (default 10)"
    )


def load_policy_inputs(ns: argparse.Namespace) -> tuple[Profile | None, Node]:
    """The profile (if given) and this node, checked before anything starts."""
    profile = load_profile(ns.profile) if ns.profile else None
    if profile is not None and ns.policy == "profile" and (ns.mtbf is None or ns.app_power is None):
        raise ValueError(
            "the profile policy needs --mtbf and --app-power (the optimizer weighs checkpoint "
            "cost against rework); give both, or use --policy defaults / a governor"
        )
    return profile, Node.detect()


def run_with_runtime(
    command: list[str], runtime: Runtime, baselines: Sequence[BaselineRun] = ()
) -> tuple[int, RunReport]:
    """Run ``command`` with ``runtime`` serving the notification socket; its exit status and
    the run's report. The runtime is closed (the node restored) whatever happens."""
    with runtime, NotifyServer(runtime) as server:
        env = {**os.environ, **server.environ()}
        try:
            proc = subprocess.Popen(command, env=env)
        except OSError as exc:
            raise ValueError(f"cannot run {command[0]!r}: {exc.strerror}") from None
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            code = proc.wait()
    return code, runtime.report(baselines=baselines)


def write_report(report: RunReport, directory: Path) -> list[Path]:
    """report.json, phases.csv and power.png (when there is a power trace) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    written = [
        report.write_json(directory / "report.json"),
        report.write_csv(directory / "phases.csv"),
    ]
    if report.trace is not None and len(report.trace.t_s) > 1:
        written.append(report.plot(directory / "power.png"))
    return written


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt run``."""
    command = list(ns.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ValueError(
            "give the command to run after --, e.g. greenckpt run -- mpiexec -n 4 python app.py"
        )
    profile, node = load_policy_inputs(ns)
    baselines = [BaselineRun.from_report(load_report(path), label=f"{path}") for path in ns.compare]
    directory = Path(ns.report)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--report {directory} exists and is not a directory; give a directory")
    policy = make_policy(ns.policy, profile, node=node, app_power=ns.app_power, mtbf=ns.mtbf)
    runtime = Runtime(policy, control=not ns.no_control, node=node, rate_hz=ns.rate_hz)
    code, report = run_with_runtime(command, runtime, baselines)
    paths = write_report(report, directory)
    print(report.render_text())
    print("report: " + ", ".join(str(p) for p in paths))
    if code != 0:
        print(
            f"greenckpt run: the command exited with status {code}; the node was restored and "
            "the report covers what ran",
            file=sys.stderr,
        )
    return code
