"""``greenckpt restore``: put back CPU frequency, governor and C-state settings that a crashed
or killed greenckpt session changed, from the state file it wrote before its first change.

The same restoration runs automatically when any greenckpt command starts
(:func:`restore_at_start`), so a node is never left at a changed setting for longer than it
takes to run greenckpt again.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from greenckpt.platform.restore import pending_state, restore_from_state_file
from greenckpt.platform.root import PlatformError, SysRoot


def register(sub: Any) -> None:
    """Add the ``restore`` sub-command."""
    p = sub.add_parser(
        "restore",
        help="restore node settings left changed by a crashed or killed session",
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
    p.set_defaults(run=run, restores_itself=True)


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt restore``."""
    root = SysRoot.default(ns.root)
    pending = pending_state(root, ns.state_file)
    if pending is None:
        print("nothing to restore: no state file left by an earlier session")
        return 0
    report = restore_from_state_file(root, ns.state_file, force=ns.force)
    if report.stale:
        print(
            f"discarded {report.state_file}: it predates the last reboot, which reset the settings"
        )
        return 0
    if not report.written:
        print(
            "nothing left to restore: the settings were already back "
            "(or another process restored them)"
        )
        return 0
    print(f"restored {len(report.written)} setting(s) from {report.state_file}:")
    for w in report.written:
        print(f"  {w.path} = {w.value.strip()}")
    return 0


def restore_at_start() -> None:
    """Restore what a dead session left changed; called before every other command.

    Never fails the command it precedes: a live session's file is left alone, and a problem is
    reported on stderr in one line.
    """
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
