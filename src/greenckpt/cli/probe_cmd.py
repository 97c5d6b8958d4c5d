"""``greenckpt probe``: what this node offers (meters, cpufreq, C-states, storage) and why not."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rich.markup import escape
from rich.table import Table

from greenckpt.cli.console import make_console
from greenckpt.platform.probe import probe
from greenckpt.platform.root import SysRoot
from greenckpt.report.jsonout import dumps


def register(sub: Any) -> None:
    """Add the ``probe`` sub-command."""
    p = sub.add_parser(
        "probe",
        help="show the meters, CPU frequency and C-state control, and storage this node offers",
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
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run)


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt probe``."""
    root = SysRoot.default(ns.root)
    paths = ns.path or ["."]
    for path in paths:
        if not os.path.exists(root / os.path.abspath(path)):
            raise ValueError(f"--path {path!r} does not exist under root {root.path}")
    report = probe(paths, root)
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
