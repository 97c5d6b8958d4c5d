"""The terminal console every command renders to."""

from __future__ import annotations

from rich.console import Console


class _Console(Console):
    """A rich console that leaves a closed output pipe to the command line's entry point.

    Why: rich's own handling exits with status 1 from inside the render call, so a table
    piped into ``head`` ended with 1 while plain output ended with 141 (128 + SIGPIPE);
    re-raising lets :func:`greenckpt.cli.main.main` treat every command the same way.
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True  # drop whatever else is rendered before the error reaches main
        raise BrokenPipeError("standard output was closed by its reader")


def make_console() -> Console:
    """A console that does not squeeze tables to 80 columns when output is piped."""
    console = _Console()
    return console if console.is_terminal else _Console(width=120)
