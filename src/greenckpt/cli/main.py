"""Entry point of the ``greenckpt`` command.

Bad input never produces a traceback: argument errors, unit errors, malformed profiles and
impossible scenarios print one line on stderr and exit with status 2. Anything else is a bug
and is allowed to show its traceback.

A reader that stops early (``greenckpt profile csv F | head -1``, ``greenckpt probe --json |
head``) is not an error of greenckpt: the output is cut off quietly, and the status is 141
(128 + SIGPIPE), what a command killed by SIGPIPE reports, so a script with ``pipefail`` can
still tell the output was not read to the end.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import select
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from greenckpt import __version__
from greenckpt.cli import restore_cmd
from greenckpt.cli.commands import BY_NAME, COMMANDS
from greenckpt.platform.root import PlatformError

EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE

DESCRIPTION = (
    "Energy-aware checkpoint/restart for HPC: probe what a node can measure and control, "
    "profile its checkpoint I/O and power, plan and simulate the settings and interval that "
    "minimise energy per unit of work, run applications with the energy-aware runtime, and "
    "restore node settings a killed session left changed."
)

_VALUE_WITH_SIGN = re.compile(r"^-\.?[0-9]")
"""What argparse should take for a value rather than an option: a leading minus followed by
a digit. argparse's own rule accepts only bare negative numbers (``-3``), so ``--mtbf -1h``
failed with "expected one argument" instead of the unit parser's "is negative" message. No
greenckpt option looks like ``-<digit>``, so nothing is lost."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (no usage dump) and exits 2, and that
    reads ``-1h`` as a (negative) value, not as an unknown option."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _VALUE_WITH_SIGN

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The full command-line parser (also used by the docs and the tests)."""
    return _parser(lambda _name: True)


def _parser(full: Callable[[str], bool]) -> argparse.ArgumentParser:
    """The parser with every command whose name ``full`` accepts registered by its module;
    the others are stand-ins with their name and help line only (:mod:`.commands`)."""
    parser = _Parser(
        prog="greenckpt",
        description=DESCRIPTION,
    )
    parser.add_argument("--version", action="version", version=f"greenckpt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        if full(command.name):
            importlib.import_module(command.module).register(sub)
        else:
            sub.add_parser(command.name, help=command.help)
    return parser


def _named_command(argv: Sequence[str]) -> str | None:
    """The command named in ``argv``, "" when none is, None when unsure (then all are built).

    The top-level options (``-h``, ``--version``) take no value, so the first argument that
    is not an option is the command; ``--`` is left to argparse with the full parser.
    """
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in BY_NAME else ""
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Only the named command's module is imported (with what it uses); the others are listed
    by name and help line, which is all ``greenckpt --help`` and a usage error show of them.
    """
    arguments = sys.argv[1:] if argv is None else list(argv)
    named = _named_command(arguments)
    parser = build_parser() if named is None else _parser(lambda name: name == named)
    args = parser.parse_args(arguments)
    if not getattr(args, "restores_itself", False):
        restore_cmd.restore_at_start()
    try:
        status = int(args.run(args))
        sys.stdout.flush()  # here, not at exit, so that a closed pipe is caught below
        return status
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        return EXIT_BROKEN_PIPE
    except (ValueError, PlatformError) as exc:  # bad input, or the machine cannot do it
        print(f"greenckpt {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"greenckpt {args.command}: interrupted", file=sys.stderr)
        return 130


def _stdout_closed() -> bool:
    """True when standard output's reader has gone; stdout is then pointed at /dev/null.

    Why both: a ``BrokenPipeError`` may come from something else (a socket), which is not
    the reader's doing and must not be hidden; and once the reader is gone, Python's final
    flush of the unwritten buffer at exit would raise again and print "Exception ignored"
    — writing into /dev/null instead ends the process quietly.
    """
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    else:
        if not _reader_gone():
            return False
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor (a replaced sys.stdout)
        pass
    return True


def _reader_gone() -> bool:
    """Whether standard output is a pipe or socket whose reading end is closed (poll says
    POLLERR), for a broken pipe whose unwritten bytes were already dropped from the buffer."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))
