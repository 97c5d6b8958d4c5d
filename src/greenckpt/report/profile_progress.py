"""How a profile sweep shows its progress on a terminal: a rich progress bar on stderr.

Why a class of its own: the sweep reports through :class:`~greenckpt.profile.progress.ProgressSink`
(the library draws nothing); ``greenckpt profile run`` and ``greenckpt demo`` show the bar on a
terminal and :class:`~greenckpt.profile.progress.LineProgress` lines elsewhere.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn

from greenckpt.profile.grid import Cell
from greenckpt.profile.progress import Eta, LineProgress, ProgressSink, format_eta

__all__ = ["RichProgress", "progress_sink", "stop_progress"]


class RichProgress:
    """A progress bar on a terminal (stderr): bytes done, the last cell, and the ETA.

    The bar advances by bytes, as :class:`~greenckpt.profile.progress.Eta` estimates; its
    description names the last finished cell (whose figures are printed above the bar), and
    the ETA is the sweep's own.
    """

    def __init__(self, console: Console | None = None) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("ETA {task.fields[eta]}"),
            console=console if console is not None else Console(stderr=True),
        )
        self._task: TaskID | None = None
        self._cells = 0

    def started(self, cells: int, skipped: int, eta: Eta) -> None:
        self._cells = cells
        resumed = f" ({skipped} already measured, resuming)" if skipped else ""
        self._progress.start()
        self._task = self._progress.add_task(
            f"profiling {cells} cells{resumed}",
            total=max(eta.total_bytes, 1),
            completed=eta.done_bytes,
            eta=format_eta(eta.seconds_left),
        )

    def cell_done(self, index: int, cell: Cell, summary: str, eta: Eta) -> None:
        if self._task is None:
            return
        step = f"[{index}/{self._cells}] {cell.label}"
        self._progress.console.print(escape(f"{step}: {summary}"), highlight=False)
        self._progress.update(
            self._task,
            completed=min(eta.done_bytes, eta.total_bytes),
            description=escape(step),
            eta=format_eta(eta.seconds_left),
        )

    def finished(self, eta: Eta) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=max(eta.total_bytes, 1), eta="0s")
        self.close()

    def close(self) -> None:
        """Stop drawing (also after an interrupt or an error); idempotent."""
        self._progress.stop()


def progress_sink(*, quiet: bool = False) -> ProgressSink | None:
    """How a sweep's progress is shown on stderr: a bar on a terminal, a line per finished
    cell otherwise, nothing when ``quiet`` (``greenckpt demo`` shows its sweep the same way)."""
    if quiet:
        return None
    if sys.stderr.isatty():
        return RichProgress()
    return LineProgress(sys.stderr)


def stop_progress(progress: ProgressSink | None) -> None:
    """Stop drawing a bar (after the sweep, an interrupt or an error); lines need nothing."""
    if isinstance(progress, RichProgress):
        progress.close()
