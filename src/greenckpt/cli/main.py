"""Entry point of the ``greenckpt`` command.

Bad input never produces a traceback: argument errors, unit errors, malformed profiles and
impossible scenarios print one line on stderr and exit with status 2. Anything else is a bug
and is allowed to show its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from greenckpt import __version__
from greenckpt.cli import (
    demo_cmd,
    levels_cmd,
    notify_cmd,
    plan_cmd,
    probe_cmd,
    profile_cmd,
    restore_cmd,
    run_cmd,
    simulate_cmd,
)
from greenckpt.platform.root import PlatformError

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (no usage dump) and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The full command-line parser (also used by the docs and the tests)."""
    parser = _Parser(
        prog="greenckpt",
        description="Energy-aware checkpoint/restart: model, plan and simulate.",
    )
    parser.add_argument("--version", action="version", version=f"greenckpt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan_cmd.register(sub)
    simulate_cmd.register(sub)
    levels_cmd.register(sub)
    restore_cmd.register(sub)
    probe_cmd.register(sub)
    profile_cmd.register(sub)
    run_cmd.register(sub)
    demo_cmd.register(sub)
    notify_cmd.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    if not getattr(args, "restores_itself", False):
        restore_cmd.restore_at_start()
    try:
        return int(args.run(args))
    except (ValueError, PlatformError) as exc:  # bad input, or the machine cannot do it
        print(f"greenckpt {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"greenckpt {args.command}: interrupted", file=sys.stderr)
        return 130
