"""``greenckpt probe``: what this node offers (meters, levers, C-states, storage) and why not;
with ``--check``, the self-check that exercises each lever and meter (platform.selfcheck)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from greenckpt.cli.args import add_meter_arguments, meter_options
from greenckpt.cli.commands import command_help
from greenckpt.cli.console import make_console
from greenckpt.durable import write_atomic
from greenckpt.errors import InvalidValueError
from greenckpt.jsonout import dumps
from greenckpt.platform.probe import Capability, probe
from greenckpt.platform.root import ENV_VAR, SysRoot
from greenckpt.platform.selfcheck import SelfCheckOptions, SelfCheckRecord, run_selfcheck


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
    check = p.add_argument_group("self-check (--check)")
    check.add_argument(
        "--check",
        action="store_true",
        help="exercise each lever and meter briefly (set a frequency, the uncore frequency, a "
        "RAPL power limit and a GPU power limit and read each back, toggle a C-state, read each "
        "meter twice), restore everything, and write a record for a bug report; exit 1 when a "
        "check failed",
    )
    check.add_argument(
        "--output",
        metavar="FILE.json",
        help="where --check writes its JSON record (default: greenckpt-selfcheck-HOST.json)",
    )
    check.add_argument("--markdown", metavar="FILE.md", help="also write the record as Markdown")
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


def _writable(flag: str, name: str) -> Path:
    """A file the record may be written to: refused in one line before anything runs."""
    path = Path(name)
    if path.is_dir():
        raise InvalidValueError(f"{flag} {name!r} is a directory: give a file name")
    if not path.parent.is_dir():
        raise InvalidValueError(
            f"{flag} {name!r}: directory {path.parent} does not exist; create it or give "
            "another file name"
        )
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InvalidValueError(f"{flag} {name!r}: not writable by this user; give another file")
    return path


def _write(path: Path, text: str) -> None:
    try:
        write_atomic(path, text, mode=0o644)
    except OSError as exc:
        raise InvalidValueError(f"cannot write {path}: {exc.strerror or exc}") from None


def _check(ns: argparse.Namespace, root: SysRoot) -> int:
    """``probe --check``: run the self-check, print its table, write the record."""
    host = socket.gethostname().split(".")[0] or "host"
    output = _writable("--output", ns.output or f"greenckpt-selfcheck-{host}.json")
    markdown = None if ns.markdown is None else _writable("--markdown", ns.markdown)
    record = run_selfcheck(root, SelfCheckOptions(meter_options=meter_options(ns)))
    _write(output, dumps(record.to_dict()) + "\n")
    if markdown is not None:
        _write(markdown, record.to_markdown())
    if ns.json:
        print(dumps(record.to_dict()))
    else:
        _show(record, output, markdown)
    return 0 if record.ok else 1


def _show(record: SelfCheckRecord, output: Path, markdown: Path | None) -> None:
    console = make_console()
    table = Table(title=f"Self-check of {record.host}", title_justify="left")
    table.add_column("check", no_wrap=True)
    table.add_column("outcome", no_wrap=True)
    table.add_column("detail")
    for c in record.checks:
        table.add_row(escape(c.name), c.outcome, escape(c.detail))
    console.print(table)
    summary = record.to_dict()["summary"]
    written = f"{output}" + (f" and {markdown}" if markdown is not None else "")
    console.print(
        escape(
            f"{summary['passed']} passed, {summary['failed']} failed, {summary['not_checked']} "
            f"not checked (not checked is not a failure: each says why); record: {written}"
        ),
        highlight=False,
    )


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt probe``."""
    root = _root(ns)
    if ns.check:
        return _check(ns, root)
    if ns.output is not None or ns.markdown is not None:
        given = "--output" if ns.output is not None else "--markdown"
        raise InvalidValueError(f"{given} writes the self-check's record: add --check")
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
