"""The terminal console every command renders to."""

from __future__ import annotations

from rich.console import Console


def make_console() -> Console:
    """A console that does not squeeze tables to 80 columns when output is piped."""
    console = Console()
    return console if console.is_terminal else Console(width=120)
