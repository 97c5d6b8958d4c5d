"""``greenckpt probe``: what this node offers (meters, cpufreq, C-states, storage) and why not."""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from rich.markup import escape
from rich.table import Table

from greenckpt.cli.args import add_meter_arguments, meter_options
from greenckpt.cli.commands import command_help
from greenckpt.cli.console import make_console
from greenckpt.errors import InvalidValueError
from greenckpt.jsonout import dumps
from greenckpt.platform.probe import Capability, probe
from greenckpt.platform.root import ENV_VAR, SysRoot


def register(sub: Any) -> None:
    """Add the ``probe`` sub-command."""
    p = sub.add_parser(
        "probe",
        help=command_help("probe"),
        description="Read what greenckpt can measure and control on this node, and say plainly "
        "what is missing and why. The probe itself changes nothing; like every command, it first "
        "restores settings that a killed greenckpt session left changed (see greenckpt restore).",
    )
    p.add_argument(
        "--path",
        action="append",
        help="checkpoint directory to identify the storage of (repeatable; default: .)",
    )
    p.add_argument("--root", help="sysfs/procfs root (default: $GREENCKPT_SYSROOT or /)")
    add_meter_arguments(p, select=False, rate=False)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run)


def _root(ns: argparse.Namespace) -> SysRoot:
    """The root to read, refused in one line (naming where it came from) when it is not a
    directory: a missing root would otherwise surface as a missing ``--path``."""
    root = SysRoot.default(ns.root)
    if not root.path.is_dir():
        given = f"--root {ns.root!r}" if ns.root is not None else f"${ENV_VAR}={root.path}"
        raise InvalidValueError(
            f"{given} is not an existing directory: give the root of a sysfs/procfs tree "
            "(or leave it out to read this machine's /)"
        )
    return root


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt probe``."""
    root = _root(ns)
    paths = ns.path or ["."]
    missing: list[Capability] = []
    for path in paths:
        if os.path.exists(root / os.path.abspath(path)):
            continue
        if ns.path:
            raise InvalidValueError(f"--path {path!r} does not exist under root {root.path}")
        # The default: the current directory, which a fake tree usually lacks.
        missing.append(
            Capability(
                "storage",
                False,
                f"no --path given and the current directory {os.path.abspath(path)} is not "
                f"inside root {root.path}: give --path DIR with a directory inside the tree",
            )
        )
        paths = []
    report = probe(paths, root, meter_options=meter_options(ns))
    if missing:
        report = dataclasses.replace(report, capabilities=(*report.capabilities, *missing))
    if ns.json:
        print(dumps(report.to_dict()))
        return 0
    console = make_console()
    vm = " (virtual machine: hypervisor flag set)" if report.hypervisor else ""
    console.print(
        escape(
            f"{report.host}: {report.cpu_model or 'unknown CPU'}, {report.logical_cpus or '?'} "
            f"logical CPUs{vm}; root {report.root}"
        ),
        highlight=False,
    )
    table = Table(title="What greenckpt can use here", title_justify="left")
    table.add_column("capability", no_wrap=True)
    table.add_column("available")
    table.add_column("details, or why not")
    for cap in report.capabilities:
        table.add_row(escape(cap.name), "yes" if cap.available else "no", escape(cap.summary))
    console.print(table)
    return 0
