"""``greenckpt restore``: put back CPU frequency, governor and C-state settings that a crashed
or killed greenckpt session changed, from the state file it wrote before its first change.

The same restoration runs automatically when any greenckpt command starts
(:func:`restore_at_start`), so a node is never left at a changed setting for longer than it
takes to run greenckpt again.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from greenckpt.cli.commands import command_help
from greenckpt.jsonout import dumps
from greenckpt.platform.pagereport import (
    PARAMS_DIR,
    pending_page_reporting,
    restore_page_reporting,
)
from greenckpt.platform.recovery import pending_state, restore_from_state_file
from greenckpt.platform.root import PlatformError, SysRoot


def register(sub: Any) -> None:
    """Add the ``restore`` sub-command."""
    p = sub.add_parser(
        "restore",
        help=command_help("restore"),
        description="Put back the CPU frequency, governor and C-state settings recorded in "
        "greenckpt's state file by a session that did not end cleanly (SIGKILL, crash, power "
        "loss of the process), then remove the file. Does nothing when there is no file.",
    )
    p.add_argument("--state-file", help="state file to restore from (default: greenckpt's own)")
    p.add_argument(
        "--root", help="sysfs/procfs root (default: $GREENCKPT_SYSROOT or /); for testing"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="restore even if the recorded process id is alive (only when it is not greenckpt)",
    )
    p.add_argument(
        "--json", action="store_true", help="print what was done as JSON (docs/formats.md)"
    )
    p.set_defaults(run=run, restores_itself=True)


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt restore``.

    With ``--json`` one object says what happened (``outcome``: ``nothing``, ``discarded``,
    ``already`` or ``restored``), the state file and every setting written, so that a job
    script or a node health check can act on it without parsing sentences.
    """
    root = SysRoot.default(ns.root)
    # Free page reporting that a killed holder left off (platform.pagereport) comes back too;
    # one that a running process holds is its own to restore, and never stops the node's
    # other settings from being restored here.
    held = pending_page_reporting(root)
    live = held is not None and held.alive and held.pid != os.getpid() and not ns.force
    page = None if live else restore_page_reporting(root, force=ns.force)
    pending = pending_state(root, ns.state_file)
    doc: dict[str, Any] = {"outcome": "nothing", "state_file": None, "written": []}
    if pending is None:
        text = "nothing to restore: no state file left by an earlier session"
    else:
        report = restore_from_state_file(root, ns.state_file, force=ns.force)
        doc["state_file"] = None if report.state_file is None else str(report.state_file)
        doc["written"] = [{"path": str(w.path), "value": w.value.strip()} for w in report.written]
        if report.stale:
            doc["outcome"] = "discarded"
            text = (
                f"discarded {report.state_file}: it predates the last reboot, which reset the "
                "settings"
            )
        elif not report.written:
            doc["outcome"] = "already"
            text = (
                "nothing left to restore: the settings were already back "
                "(or another process restored them)"
            )
        else:
            doc["outcome"] = "restored"
            text = "\n".join(
                [
                    f"restored {len(report.written)} setting(s) from {report.state_file}:",
                    *(f"  {w['path']} = {w['value']}" for w in doc["written"]),
                ]
            )
    if page is not None:
        line = (
            f"restored free page reporting: min_free_ms {page.original} (held off by process "
            f"{page.pid}, which has ended; {page.path})"
        )
        doc["written"].append({"path": f"{PARAMS_DIR}/min_free_ms", "value": str(page.original)})
        text = line if pending is None else f"{line}\n{text}"
        doc["outcome"] = "restored" if pending is None else doc["outcome"]
    if live and held is not None:
        line = (
            f"free page reporting left alone: process {held.pid} holds it off and still runs "
            "(it restores it when it ends; --force if that pid is not greenckpt)"
        )
        doc["page_reporting"] = "held by a running process"
        text = f"{text}\n{line}"
    doc["message"] = text.splitlines()[0]
    print(dumps(doc) if ns.json else text)
    return 0


def restore_at_start() -> None:
    """Restore what a dead session left changed; called before every other command.

    Never fails the command it precedes: a live session's file is left alone, and a problem is
    reported on stderr in one line.

    What it calls comes from platform.recovery, not platform.restore (which re-exports it
    with the session and the C-state control): every command, ``greenckpt notify`` too, pays
    for what this imports.
    """
    try:  # free page reporting left off by a killed holder (platform.pagereport)
        held = pending_page_reporting()
        if held is not None and not held.alive and restore_page_reporting() is not None:
            print(
                f"greenckpt: restored free page reporting (min_free_ms {held.original}) left "
                f"held off by process {held.pid}",
                file=sys.stderr,
            )
    except (PlatformError, OSError) as exc:
        print(f"greenckpt: warning: {exc}", file=sys.stderr)
    try:
        root = SysRoot.default()
        pending = pending_state(root)
        if pending is None or (pending.alive and pending.same_boot):
            return
        report = restore_from_state_file(root)
    except (PlatformError, OSError) as exc:
        print(f"greenckpt: warning: {exc}", file=sys.stderr)
        return
    if report.written:
        print(
            f"greenckpt: restored {len(report.written)} node setting(s) left changed by an "
            f"earlier session ({report.state_file})",
            file=sys.stderr,
        )
